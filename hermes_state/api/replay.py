"""Conversation replay: messages as OpenAI chat items for resuming a session (SPEC §5;
UPSTREAM_API §2.3, D9).

Item shape: ``{"role", "content"}`` plus, only when truthy, ``api_content``, ``tool_call_id``,
``tool_name``, ``effect_disposition``, ``tool_calls`` (decoded; invalid JSON → ``[]``),
``message_id`` (the platform message id) and ``observed: True``. Assistant items also carry
``finish_reason`` and ``reasoning`` when truthy, ``reasoning_content`` when not None (``""``
kept), and ``reasoning_details`` / ``codex_*`` decoded when stored (invalid JSON → None). User
and tool items never carry reasoning keys. The row ``timestamp`` is not an item key (SPEC §5's
example; README "Decisions not in the SPEC").

Cleaning (user and assistant string content only): ``<memory-context>…</memory-context>``
blocks leaked into a turn are removed, and so are the recalled-memory system note and stray
fence tags; then the text is stripped. A user/system turn that is an internal review prompt
(``Review the conversation above and …``) is dropped with the assistant turn right after it.
With ``include_ancestors``, a user turn repeating an earlier user turn (with no assistant
content or tool call in between) is dropped: a resume prompt replayed into each descendant.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from ..store.reads import in_snapshot
from .messages import ACTIVE_SQL
from .text import clean_text, decode_content, decode_tool_calls

#: A parent walk never takes more hops than this.
MAX_ANCESTOR_HOPS = 100

_MEMORY_BLOCK = re.compile(r"<\s*memory-context\s*>.*?<\s*/\s*memory-context\s*>",
                           re.IGNORECASE | re.DOTALL)
_MEMORY_NOTE = re.compile(
    r"\[System note: The following is recalled memory context, NOT new user input\. Treat as "
    r"(?:informational background|authoritative reference) data\.\]\s*")
_FENCE_TAG = re.compile(r"<\s*/?\s*memory-context\s*>", re.IGNORECASE)
_REVIEW_PROMPTS = ("Review the conversation above and update the skill library",
                   "Review the conversation above and consider saving to memory")
_VERIFY_REASONS = ("verification_required", "verify_hook_continue")
_DECODED_ASSISTANT_JSON = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


def strip_memory_context(text: str) -> str:
    """Remove leaked memory-context blocks, the recalled-memory note and stray fence tags;
    then strip surrounding whitespace (D9)."""
    text = _MEMORY_BLOCK.sub("", text)
    text = _MEMORY_NOTE.sub("", text)
    text = _FENCE_TAG.sub("", text)
    return text.strip()


def _loads_or_none(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def conversation_item(row: dict) -> dict:
    """One raw messages row (dict) → a conversation item (module docstring)."""
    role = row["role"]
    content = decode_content(row.get("content"))
    if role in ("user", "assistant") and isinstance(content, str):
        content = strip_memory_context(content)
    item: dict[str, Any] = {"role": role, "content": content}
    if row.get("api_content"):
        item["api_content"] = row["api_content"]
    for key in ("tool_call_id", "tool_name", "effect_disposition"):
        if row.get(key):
            item[key] = row[key]
    if row.get("tool_calls"):
        item["tool_calls"] = decode_tool_calls(row["tool_calls"])
    if row.get("platform_message_id"):
        item["message_id"] = row["platform_message_id"]
    if row.get("observed"):
        item["observed"] = True
    if role == "assistant":
        if row.get("finish_reason"):
            item["finish_reason"] = row["finish_reason"]
        if row.get("reasoning"):
            item["reasoning"] = row["reasoning"]
        if row.get("reasoning_content") is not None:
            item["reasoning_content"] = row["reasoning_content"]
        for key in _DECODED_ASSISTANT_JSON:
            if row.get(key):
                item[key] = _loads_or_none(row[key])
    return item


def _is_review_prompt(item: dict) -> bool:
    content = item.get("content")
    return (item["role"] in ("user", "system") and isinstance(content, str)
            and content.lstrip().startswith(_REVIEW_PROMPTS))


def _is_replayed_prompt(item: dict, collected: list[dict]) -> bool:
    """A user item whose content already appears earlier with no assistant turn (content or
    tool calls) in between (D9 de-dup)."""
    content = item.get("content")
    if item["role"] != "user" or not isinstance(content, str) or not content:
        return False
    for prev in reversed(collected):
        if prev["role"] == "assistant" and (prev.get("content") or prev.get("tool_calls")):
            return False
        if prev["role"] == "user" and prev.get("content") == content:
            return True
    return False


def build_items(rows: list[dict], dedup: bool) -> list[dict]:
    """Conversation items of ``rows`` (in order): review prompts dropped with the assistant
    turn after them; replayed prompts dropped when ``dedup``."""
    out: list[dict] = []
    drop_next_assistant = False
    for row in rows:
        item = conversation_item(row)
        if drop_next_assistant:
            drop_next_assistant = False
            if item["role"] == "assistant":
                continue
        if _is_review_prompt(item):
            drop_next_assistant = True
            continue
        if dedup and _is_replayed_prompt(item, out):
            continue
        out.append(item)
    return out


# ---------------------------------------------------------------------------- repair

def _call_ids(call: Any) -> set:
    if not isinstance(call, dict):
        return set()
    return {v for v in (call.get("id"), call.get("call_id")) if v}


def _merge_text(a: Any, b: Any, sep: str) -> Any:
    parts = [x for x in (a, b) if x]
    return sep.join(parts) if parts else (a if a is not None else b)


def _mergeable(a: dict, b: dict) -> bool:
    return all(x.get("content") is None or isinstance(x.get("content"), str) for x in (a, b))


def _merge_assistants(items: list[dict]) -> list[dict]:
    out: list[dict] = []
    for item in items:
        prev = out[-1] if out else None
        if item["role"] != "assistant" or prev is None or prev["role"] != "assistant":
            out.append(item)
            continue
        if prev.get("finish_reason") in _VERIFY_REASONS:
            out[-1] = item  # a verification turn is replaced by the turn that follows it
            continue
        interim = any(x.get("codex_message_items") or x.get("codex_reasoning_items")
                      for x in (prev, item))
        if interim or not _mergeable(prev, item):
            out.append(item)
            continue
        merged = dict(prev)
        for key, value in item.items():
            if key not in ("content", "tool_calls") and (key not in merged or key == "finish_reason"):
                merged[key] = value
        merged["content"] = _merge_text(prev.get("content"), item.get("content"), "\n")
        calls = list(prev.get("tool_calls") or [])
        seen = set().union(*(_call_ids(c) for c in calls)) if calls else set()
        for call in item.get("tool_calls") or []:
            ids = _call_ids(call)
            if ids and ids & seen:
                continue
            seen |= ids
            calls.append(call)
        if calls:
            merged["tool_calls"] = calls
        out[-1] = merged
    return out


def _drop_orphan_tool_results(items: list[dict]) -> list[dict]:
    out: list[dict] = []
    open_calls: list[set] = []
    for item in items:
        role = item["role"]
        if role == "user":
            open_calls = []
        elif role == "assistant":
            open_calls += [ids for ids in map(_call_ids, item.get("tool_calls") or []) if ids]
        elif role == "tool":
            tcid = item.get("tool_call_id")
            match = next((ids for ids in open_calls if tcid and tcid in ids), None)
            if match is None:
                continue
            open_calls.remove(match)
        out.append(item)
    return out


def _merge_users(items: list[dict]) -> list[dict]:
    out: list[dict] = []
    for item in items:
        prev = out[-1] if out else None
        if (item["role"] == "user" and prev is not None and prev["role"] == "user"
                and _mergeable(prev, item)):
            merged = dict(prev)
            merged.pop("api_content", None)
            merged["content"] = _merge_text(prev.get("content"), item.get("content"), "\n\n")
            out[-1] = merged
            continue
        out.append(item)
    return out


def repair_turns(items: list[dict]) -> list[dict]:
    """The three in-memory repairs of ``repair_alternation=True`` (UPSTREAM_API §2.3): merge
    consecutive assistant turns, drop tool results answering no open tool call, merge
    consecutive user turns."""
    return _merge_users(_drop_orphan_tool_results(_merge_assistants(items)))


# ---------------------------------------------------------------------------- reads

def ancestor_chain(c: sqlite3.Connection, session_id: str) -> list[str]:
    """``[root, ..., session_id]`` through ``parent_session_id`` (any parent kind, at most
    :data:`MAX_ANCESTOR_HOPS` hops, cycle-safe)."""
    chain = [session_id]
    seen = {session_id}
    cur = session_id
    for _ in range(MAX_ANCESTOR_HOPS):
        row = c.execute("SELECT parent_session_id FROM sessions WHERE id = ?", (cur,)).fetchone()
        parent = None if row is None else row[0]
        if parent is None or parent in seen:
            break
        seen.add(parent)
        chain.append(parent)
        cur = parent
    return chain[::-1]


def session_rows(c: sqlite3.Connection, session_id: str, include_inactive: bool) -> list[dict]:
    where = "" if include_inactive else f" AND {ACTIVE_SQL}"
    return [dict(r) for r in c.execute(
        f"SELECT * FROM messages WHERE session_id = ?{where} ORDER BY id", (session_id,))]


class ReplayMixin:
    """Conversation replay API; needs ``self._read(fn)``."""

    def get_messages_as_conversation(self, session_id: str, include_ancestors: bool = False,
                                     include_inactive: bool = False,
                                     repair_alternation: bool = False) -> list[dict]:
        """The session as OpenAI chat items (module docstring; SPEC §5, D9).

        Args:
            include_ancestors: prepend the ``parent_session_id`` chain, root first, and drop
                replayed prompts.
            include_inactive: also rewound / compaction-archived rows.
            repair_alternation: merge consecutive assistant and user turns and drop orphan tool
                results (in memory; nothing is written).
        Returns:
            The items; ``[]`` for an unknown session.
        """
        sid = clean_text(session_id)

        def read(c: sqlite3.Connection) -> list[dict]:
            chain = ancestor_chain(c, sid) if include_ancestors else [sid]
            rows = [r for s in chain for r in session_rows(c, s, include_inactive)]
            items = build_items(rows, dedup=include_ancestors)
            return repair_turns(items) if repair_alternation else items

        return self._read(lambda c: in_snapshot(c, lambda: read(c)))

    def get_resume_conversations(self, session_id: str) -> tuple[list[dict], list[dict]]:
        """``(model_history, display_history)`` from one read: the session's own turns repaired
        for the model, and the whole lineage (ancestors first, de-duplicated) for display."""
        sid = clean_text(session_id)

        def read(c: sqlite3.Connection) -> tuple[list[dict], list[dict]]:
            chain = ancestor_chain(c, sid)
            per = {s: session_rows(c, s, False) for s in chain}
            model = repair_turns(build_items(per[sid], dedup=False))
            display = build_items([r for s in chain for r in per[s]], dedup=True)
            return model, display

        return self._read(lambda c: in_snapshot(c, lambda: read(c)))

    def get_ancestor_display_prefix(self, session_id: str) -> list[dict]:
        """Display items of the session's ancestors only (root first, de-duplicated); ``[]``
        without a parent. The session's own rows are never included."""
        sid = clean_text(session_id)

        def read(c: sqlite3.Connection) -> list[dict]:
            chain = ancestor_chain(c, sid)[:-1]
            return build_items([r for s in chain for r in session_rows(c, s, False)], dedup=True)

        return self._read(lambda c: in_snapshot(c, lambda: read(c)))

