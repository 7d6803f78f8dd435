"""Model-based tests (hypothesis): a real :class:`SessionDB` against a plain in-memory model.

The state machine creates sessions (optionally with a parent), appends user/assistant/tool
messages with and without ``tool_calls``, ends and reopens sessions (the first end reason wins,
SPEC §5), sets titles by hand and automatically (uniqueness, the compression-ancestor move,
sanitising: SPEC §7), clears messages, deletes sessions (children orphaned) and records token
usage (SPEC §5 ``update_token_counts``). After every step the store must agree with the model:
sessions, parent links, end state, titles and their origin, counters, messages, token totals,
usage rows, ``list_sessions``, lineage walks, and no FTS index may still find removed text.

Upstream-parity methods (issue 17) are in the same machine: ``create_session`` filling NULL
metadata, archiving a compression lineage (``set_session_archived``, ``list_sessions_rich``,
``session_count``), rewinding and restoring (``rewind_to_message``, ``restore_rewound``, active
rows in ``get_messages``/``search_messages``), rewriting (``replace_messages``,
``archive_and_compact``), bulk ``delete_sessions``, ``update_session_cwd``, auxiliary usage and
the compression lease.

Also: property tests of :func:`sanitize_title` against an independent reference.
Each state-machine example gets its own temporary directory (removed in ``teardown``).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from hermes_state import SessionDB
from hermes_state.api.titles import MAX_TITLE_LENGTH, sanitize_title

INVISIBLE = ([chr(c) for c in range(0x200B, 0x2010)] + [chr(c) for c in range(0x2028, 0x202F)]
             + [chr(c) for c in range(0x2060, 0x206A)] + ["\ufeff"]
             + [chr(c) for c in range(0xFFF9, 0xFFFD)])
CONTROL = [chr(c) for c in range(0x00, 0x20)] + ["\x7f"]


def reference_clean(text: str) -> str:
    """SPEC §7 cleaning written as a plain character loop (independent of the module)."""
    out = []
    for ch in text:
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF:
            out.append("\ufffd")
        elif ch in "\t\n\r":
            out.append(" ")
        elif o < 0x20 or o == 0x7F or ch in INVISIBLE:
            continue
        else:
            out.append(ch)
    return " ".join("".join(out).split())


# ---------------------------------------------------------------------------- sanitize properties
title_text = st.text(
    alphabet=st.one_of(st.characters(), st.sampled_from(INVISIBLE + CONTROL + [" ", "\u3000"])),
    max_size=160)


@settings(max_examples=300, deadline=None)
@given(title_text)
def test_sanitize_title_properties(text):
    """Never raises except the documented ValueError; idempotent; nothing forbidden survives;
    at most 100 characters; equal to the reference cleaning."""
    expected = reference_clean(text)
    try:
        out = sanitize_title(text)
    except ValueError as exc:
        assert str(exc) == f"Title too long ({len(expected)} chars, max {MAX_TITLE_LENGTH})"
        assert len(expected) > MAX_TITLE_LENGTH
        return
    assert out == (expected or None)
    if out is None:
        return
    assert sanitize_title(out) == out
    assert 0 < len(out) <= MAX_TITLE_LENGTH
    assert out == out.strip() and "  " not in out
    assert not any(ch in out for ch in CONTROL + INVISIBLE)
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in out)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30), st.integers(min_value=0, max_value=120))
def test_sanitize_title_padding_never_counts(core, pad):
    """Whitespace and invisible padding never changes the result or the length check."""
    padded = " " * pad + "\u200b".join(core) + "\t\ufeff" * pad
    assert sanitize_title(padded) == sanitize_title(core)


# ---------------------------------------------------------------------------- the model
IDS = [f"s{i}" for i in range(6)]
# a small pool so collisions, moves and numbering happen often; every cleaning rule is in it
TITLES = ["Alpha", " Alpha ", "Al\u200bpha", "Alpha #2", "Alpha #3", "alpha", "Beta\nBuild",
          "Beta  Build", "x_y", "", "   ", "\u202e", "T" * 101, "Gamma\x07"]
REASONS = ["compression", "user_exit", "timeout"]
ROLES = ["user", "assistant", "tool"]
COUNT_KEYS = ("input_tokens", "output_tokens", "api_call_count")
_NUMBERED = re.compile(r"^(.+) #(\d+)$")


@dataclass
class MSession:
    source: str
    parent: str | None
    ended: bool = False
    end_reason: str | None = None
    title: str | None = None
    auto: bool = False
    model: str | None = None
    messages: list = field(default_factory=list)
    message_count: int = 0
    tool_call_count: int = 0
    archived: bool = False
    rewind_count: int = 0
    cwd: str | None = None
    git_branch: str | None = None
    tokens: dict = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    cost: float | None = None
    usage: dict = field(default_factory=dict)
    started_at: float = 0.0


class StoreMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="hermes-stateful-"))
        self.db = SessionDB(db_path=self.dir / "state.db")
        self.model: dict[str, MSession] = {}
        self.clock = 0.0
        self.removed_words: list[str] = []
        self.word_seq = 0
        self.locks: dict[str, str] = {}

    def teardown(self):
        self.db.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers
    def _is_compression_ancestor(self, holder: str, sid: str) -> bool:
        """(The holder is checked before the id exists: an unknown id raises, §2.6.)"""
        seen = {sid}
        cur = self.model[sid].parent
        while cur is not None and cur not in seen:
            seen.add(cur)
            s = self.model.get(cur)
            if s is None or s.end_reason != "compression":
                return False
            if cur == holder:
                return True
            cur = s.parent
        return False

    def _holder(self, title: str, sid: str) -> str | None:
        for k, s in self.model.items():
            if k != sid and s.title == title:
                return k
        return None

    def _forget(self, sid: str) -> None:
        self.removed_words += [m["word"] for m in self.model[sid].messages]

    def _word(self) -> str:
        self.word_seq += 1
        return f"zq{self.word_seq}word"

    def _remove_session(self, sid: str) -> None:
        self._forget(sid)
        del self.model[sid]
        for other in self.model.values():
            if other.parent == sid:
                event("delete orphaned a child")
                other.parent = None

    def _compression_component(self, sid: str) -> set[str]:
        """The session plus every session reached through parent→child edges whose parent
        ended with compression (what archiving covers)."""
        comp, frontier = {sid}, [sid]
        while frontier:
            cur = frontier.pop()
            s = self.model[cur]
            nxt = []
            if s.parent in self.model and self.model[s.parent].end_reason == "compression":
                nxt.append(s.parent)
            if s.end_reason == "compression":
                nxt += [k for k, v in self.model.items() if v.parent == cur]
            for k in nxt:
                if k not in comp:
                    comp.add(k)
                    frontier.append(k)
        return comp

    def _fetch_new_rows(self, sid: str, rows: list[dict]) -> None:
        """Give model rows just written their ids (the last len(rows) ids of the session)."""
        ids = [m["id"] for m in self.db.get_messages(sid, include_inactive=True)]
        for row, mid in zip(rows, ids[len(ids) - len(rows):]):
            row["id"] = mid

    @staticmethod
    def _payload(rows: list[dict]) -> list[dict]:
        return [{k: r[k] for k in ("role", "content", "tool_calls", "timestamp")} for r in rows]

    def _took(self, sid: str, s: MSession, rows: list[dict]) -> None:
        """The rows a rewrite inserted became the session's active transcript and counters."""
        self._fetch_new_rows(sid, rows)
        s.messages += rows
        s.message_count = len(rows)
        s.tool_call_count = sum(len(r["tool_calls"] or []) for r in rows)

    def _new_rows(self, spec: list[tuple[str, int]]) -> list[dict]:
        rows = []
        for role, n_calls in spec:
            word = self._word()
            self.clock += 1.0
            calls = [{"id": f"c{i}"} for i in range(n_calls)] if n_calls else None
            rows.append({"role": role, "content": f"{word} rewritten", "tool_calls": calls,
                         "word": word, "timestamp": self.clock, "active": True})
        return rows

    # -- rules
    @initialize(titled=st.booleans())
    def lineage(self, titled):
        """Start from a compression lineage s0 -> s1 -> s2 (tip live) and a standalone s3."""
        self.create("s0", None, "cli")
        self.compress("s0", "s1")
        self.compress("s1", "s2")
        self.create("s3", None, "telegram")
        if titled:
            self.set_title("s0", "Alpha")

    @rule(sid=st.sampled_from(IDS), child=st.sampled_from(IDS))
    def compress(self, sid, child):
        """A context-compression split: end ``sid`` with 'compression', start ``child`` under it."""
        if sid not in self.model or child in self.model:
            return
        self.end(sid, "compression")
        self.create(child, sid, self.model[sid].source)

    @rule(sid=st.sampled_from(IDS), parent=st.one_of(st.none(), st.sampled_from(IDS)),
          source=st.sampled_from(["cli", "telegram"]))
    def create(self, sid, parent, source):
        if parent not in self.model:
            parent = None
        existing = self.model.get(sid)
        if existing is not None and existing.parent is None and parent is not None:
            if parent == sid or sid in self._ancestors(parent):
                return  # would close a cycle: not a thing a caller does
            event("create_session filled a NULL parent")
        assert self.db.create_session(sid, source, parent_session_id=parent) == sid
        if existing is None:
            self.model[sid] = MSession(source=source, parent=parent,
                                       started_at=self.db.get_session(sid)["started_at"])
        elif existing.parent is None:  # D5: only NULL columns are filled
            existing.parent = parent

    @rule(sid=st.sampled_from(IDS), role=st.sampled_from(ROLES),
          n_calls=st.integers(min_value=0, max_value=3), multiline=st.booleans())
    def append(self, sid, role, n_calls, multiline):
        word = self._word()
        content = f"{word}\nsecond line" if multiline else f"{word} text"
        calls = [{"id": f"c{i}", "type": "function"} for i in range(n_calls)] if n_calls else None
        self.clock += 1.0
        if sid not in self.model:
            with pytest.raises(Exception) as exc:
                self.db.append_message(sid, role, content, tool_calls=calls, timestamp=self.clock)
            assert "FOREIGN KEY" in str(exc.value).upper()
            return
        mid = self.db.append_message(sid, role, content, tool_calls=calls, timestamp=self.clock)
        s = self.model[sid]
        s.messages.append({"id": mid, "role": role, "content": content, "tool_calls": calls,
                           "word": word, "timestamp": self.clock, "active": True})
        s.message_count += 1
        s.tool_call_count += n_calls  # whatever the role (UPSTREAM_API §2.3)

    @rule(sid=st.sampled_from(IDS), reason=st.sampled_from(REASONS))
    def end(self, sid, reason):
        s = self.model.get(sid)
        expected = s is not None and not s.ended
        assert self.db.end_session(sid, reason) is expected
        if expected:
            s.ended, s.end_reason = True, reason

    @rule(sid=st.sampled_from(IDS))
    def reopen(self, sid):
        s = self.model.get(sid)
        assert self.db.reopen_session(sid) is (s is not None)
        if s is not None:
            s.ended, s.end_reason = False, None

    @rule(sid=st.sampled_from(IDS), raw=st.sampled_from(TITLES))
    def set_title(self, sid, raw):
        clean = reference_clean(raw) or None
        if clean is not None and len(clean) > MAX_TITLE_LENGTH:
            with pytest.raises(ValueError, match=r"^Title too long"):
                self.db.set_session_title(sid, raw)
            return
        s = self.model.get(sid)
        holder = self._holder(clean, sid) if clean is not None else None
        if s is None and holder is None:
            assert self.db.set_session_title(sid, raw) is False
            return
        if holder is not None and (s is None or not self._is_compression_ancestor(holder, sid)):
            with pytest.raises(ValueError) as exc:
                self.db.set_session_title(sid, raw)
            assert str(exc.value) == f"Title '{clean}' is already in use by session {holder}"
            event("title conflict")
            return
        assert self.db.set_session_title(sid, raw) is True
        if holder is not None:
            event("title moved from a compression ancestor")
            self.model[holder].title, self.model[holder].auto = None, False
        s.title, s.auto = clean, False

    @rule(sid=st.sampled_from(IDS), other=st.sampled_from(IDS))
    def take_title(self, sid, other):
        """Try to take another session's current title (the move-or-conflict rule, SPEC §7)."""
        if other in self.model and self.model[other].title is not None:
            self.set_title(sid, self.model[other].title)

    @rule(sid=st.sampled_from(IDS), raw=st.sampled_from(TITLES))
    def set_auto_title(self, sid, raw):
        got = self.db.set_auto_title(sid, raw)
        cleaned = reference_clean(raw)
        s = self.model.get(sid)
        if s is None or not cleaned or (s.title is not None and not s.auto):
            if s is not None and s.title is not None and cleaned:
                event("auto title refused: hand-set")
            assert got is None
            return
        cleaned = cleaned[:MAX_TITLE_LENGTH].rstrip()
        others = {v.title for k, v in self.model.items() if k != sid and v.title is not None}
        cand = cleaned
        if cand in others:
            m = _NUMBERED.match(cand)
            base = m.group(1) if m else cand
            nums = [1] + [int(mm.group(2)) for t in others
                          if (mm := _NUMBERED.match(t)) and mm.group(1) == base]
            n = max(nums) + 1

            def fit(n):  # the base is shortened so that "base #N" stays within 100 chars
                suffix = f" #{n}"
                return base[:MAX_TITLE_LENGTH - len(suffix)].rstrip() + suffix

            while fit(n) in others:
                n += 1
            cand = fit(n)
            event("auto title numbered")
        assert got == cand
        s.title, s.auto = cand, True

    @rule(sid=st.sampled_from(IDS))
    def clear(self, sid):
        s = self.model.get(sid)
        assert self.db.clear_messages(sid) is (s is not None)
        if s is not None:
            self._forget(sid)
            s.messages, s.message_count, s.tool_call_count = [], 0, 0

    @rule(sid=st.sampled_from(IDS))
    def delete(self, sid):
        s = self.model.get(sid)
        assert self.db.delete_session(sid) is (s is not None)
        if s is not None:
            self._remove_session(sid)

    @rule(sid=st.sampled_from(IDS), inp=st.integers(0, 1000), out=st.integers(0, 1000),
          calls=st.integers(0, 3), model=st.sampled_from([None, "m1", "m2"]),
          task=st.sampled_from(["", "title"]), absolute=st.booleans(),
          cost=st.sampled_from([None, 0.5, 0.25]))
    def tokens(self, sid, inp, out, calls, model, task, absolute, cost):
        s = self.model.get(sid)
        got = self.db.update_token_counts(sid, input_tokens=inp, output_tokens=out, model=model,
                                          api_call_count=calls, absolute=absolute, task=task,
                                          estimated_cost_usd=cost)
        assert got is None
        if s is None:  # an unknown id is created (UPSTREAM_API D8 step 1)
            event("usage created a session")
            s = self.model[sid] = MSession(source="unknown", parent=None,
                                           started_at=self.db.get_session(sid)["started_at"])
        if s.model is None:
            s.model = model
        vals = {"input_tokens": inp, "output_tokens": out, "api_call_count": calls}
        for k, v in vals.items():
            s.tokens[k] = v if absolute else s.tokens[k] + v
        s.cost = (cost or 0.0) if absolute else (s.cost or 0.0) + (cost or 0.0)
        if absolute or not (inp or out or calls or cost):
            return  # no usage row (D8)
        key = (model or s.model or "unknown", task)
        row = s.usage.setdefault(key, {"counts": dict.fromkeys(COUNT_KEYS, 0), "cost": 0.0})
        for k, v in vals.items():
            row["counts"][k] += v
        row["cost"] += cost or 0.0

    @rule(sid=st.sampled_from(IDS), flag=st.booleans())
    def archive(self, sid, flag):
        """set_session_archived covers the whole compression lineage (UPSTREAM_API §2.8)."""
        got = self.db.set_session_archived(sid, flag)
        if sid not in self.model:
            assert got is False
            return
        assert got is True
        comp = self._compression_component(sid)
        if len(comp) > 1:
            event("archive covered a lineage")
        for k in comp:
            self.model[k].archived = flag

    @rule(sid=st.sampled_from(IDS), pick=st.integers(0, 10))
    def rewind(self, sid, pick):
        """Rewind to a user message: every active row from it on becomes inactive."""
        s = self.model.get(sid)
        users = [m for m in (s.messages if s else []) if m["role"] == "user"]
        if not users:
            return
        target = users[pick % len(users)]
        out = self.db.rewind_to_message(sid, target["id"])
        hit = [m for m in s.messages if m["active"] and m["id"] >= target["id"]]
        for m in hit:
            m["active"] = False
        s.rewind_count += 1
        assert out["rewound_count"] == len(hit)
        assert out["target_message"]["id"] == target["id"]
        heads = [m["id"] for m in s.messages if m["active"]]
        assert out["new_head_id"] == (max(heads) if heads else None)
        if hit:
            event("rewound rows")

    @rule(sid=st.sampled_from(IDS), pick=st.integers(0, 10))
    def restore(self, sid, pick):
        s = self.model.get(sid)
        if not s or not s.messages:
            return
        since = s.messages[pick % len(s.messages)]["id"]
        back = [m for m in s.messages if not m["active"] and m["id"] >= since]
        assert self.db.restore_rewound(sid, since) == len(back)
        for m in back:
            m["active"] = True

    @rule(sid=st.sampled_from(IDS), compact=st.booleans(), spec=st.lists(
        st.tuples(st.sampled_from(ROLES), st.integers(0, 2)), max_size=3))
    def rewrite(self, sid, compact, spec):
        """replace_messages (old rows deleted) or archive_and_compact (old active rows kept as
        compacted, inactive); the new rows are the active transcript and set the counters."""
        s = self.model.get(sid)
        if s is None:
            return
        rows = self._new_rows(spec)
        if compact:
            assert self.db.archive_and_compact(sid, self._payload(rows)) == len(rows)
            for m in s.messages:
                if m["active"]:
                    m["active"], m["compacted"] = False, True
        else:
            self.db.replace_messages(sid, self._payload(rows))
            self._forget(sid)
            s.messages = []
        self._took(sid, s, rows)

    @rule(ids=st.lists(st.sampled_from(IDS + ["", "nope"]), max_size=3))
    def delete_many(self, ids):
        wanted = {i for i in ids if i}
        existing = [i for i in wanted if i in self.model]
        assert self.db.delete_sessions(ids, force=True) == len(existing)
        for sid in existing:
            self._remove_session(sid)

    @rule(sid=st.sampled_from(IDS), cwd=st.sampled_from(["", "/w", "/w/sub"]),
          branch=st.sampled_from([None, "", " main "]))
    def set_cwd(self, sid, cwd, branch):
        self.db.update_session_cwd(sid, cwd, git_branch=branch)
        s = self.model.get(sid)
        if s is None or not cwd:
            return
        s.cwd = cwd
        if branch and branch.strip():
            s.git_branch = branch.strip()

    @rule(sid=st.sampled_from(IDS), inp=st.integers(0, 50), model=st.sampled_from([None, "aux"]))
    def aux_usage(self, sid, inp, model):
        self.db.record_auxiliary_usage(sid, "title", model=model, input_tokens=inp)
        s = self.model.get(sid)
        if s is None:
            s = self.model[sid] = MSession(source="unknown", parent=None,
                                           started_at=self.db.get_session(sid)["started_at"])
        row = s.usage.setdefault((model or "unknown", "title"),
                                 {"counts": dict.fromkeys(COUNT_KEYS, 0), "cost": 0.0})
        row["counts"]["input_tokens"] += inp
        row["counts"]["api_call_count"] += 1

    @rule(sid=st.sampled_from(IDS), holder=st.sampled_from(["A", "B"]), take=st.booleans())
    def lease(self, sid, holder, take):
        if take:
            expected = self.locks.get(sid, holder) == holder
            assert self.db.try_acquire_compression_lock(sid, holder) is expected
            if expected:
                self.locks[sid] = holder
        else:
            self.db.release_compression_lock(sid, holder)
            if self.locks.get(sid) == holder:
                del self.locks[sid]

    # -- invariants
    @invariant()
    def sessions_agree(self):
        rows = {r["id"]: r for r in self.db._read(lambda c: [dict(x) for x in c.execute(
            "SELECT * FROM sessions")])}
        assert set(rows) == set(self.model)
        for sid, s in self.model.items():
            r = rows[sid]
            assert r["source"] == s.source
            assert r["parent_session_id"] == s.parent
            assert (r["ended_at"] is not None) == s.ended
            assert r["end_reason"] == s.end_reason
            assert r["title"] == s.title
            assert self.db.is_auto_title(sid) == s.auto
            assert r["model"] == s.model
            assert r["message_count"] == s.message_count
            assert r["tool_call_count"] == s.tool_call_count
            assert (r["archived"], r["rewind_count"]) == (int(s.archived), s.rewind_count)
            assert (r["cwd"], r["git_branch"]) == (s.cwd, s.git_branch)
            assert {k: r[k] for k in COUNT_KEYS} == s.tokens
            assert r["estimated_cost_usd"] == s.cost

    @invariant()
    def titles_unique_and_resolvable(self):
        titles = [s.title for s in self.model.values() if s.title is not None]
        assert len(titles) == len(set(titles))
        for sid, s in self.model.items():
            if s.title is not None:
                assert self.db.get_session_by_title(s.title)["id"] == sid
                assert self.db.get_session_title(sid) == s.title

    @invariant()
    def messages_agree(self):
        def shape(rows):
            return [(m["id"], m["role"], m["content"], m["tool_calls"]) for m in rows]

        for sid, s in self.model.items():
            assert shape(self.db.get_messages(sid, include_inactive=True)) == shape(s.messages)
            assert shape(self.db.get_messages(sid)) == shape(
                [m for m in s.messages if m["active"]])
            assert self.db.message_count(sid) == len(s.messages)

    @invariant()
    def search_sees_active_and_compacted_rows(self):
        """Rewound rows are hidden from search, compacted ones found (UPSTREAM_API §2.5)."""
        for s in self.model.values():
            for m in s.messages[-2:]:
                visible = m["active"] or m.get("compacted", False)
                hits = {h["id"] for h in self.db.search_messages(m["word"])}
                assert (m["id"] in hits) == visible
                assert m["id"] in {h["id"] for h in self.db.search_messages(
                    m["word"], include_inactive=True)}

    @invariant()
    def listing_hides_archived_and_children(self):
        roots = {k for k, v in self.model.items() if v.parent is None and not v.archived}
        rows = self.db.list_sessions_rich(limit=100)
        assert {r.get("_lineage_root_id", r["id"]) for r in rows} == roots
        for r in rows:
            if "_lineage_root_id" in r:
                event("listing projected a compression tip")
                assert self.db.get_compression_tip(r["_lineage_root_id"]) == r["id"]
        live = [v for v in self.model.values() if not v.archived]
        assert self.db.session_count() == len(live)
        assert self.db.session_count(exclude_children=True) == len(roots)
        assert self.db.session_count(archived_only=True) == len(self.model) - len(live)

    @invariant()
    def leases_agree(self):
        for sid in IDS:
            assert self.db.get_compression_lock_holder(sid) == self.locks.get(sid)

    @invariant()
    def usage_rows_agree(self):
        rows = self.db._read(lambda c: [dict(r) for r in c.execute(
            "SELECT * FROM session_model_usage")])
        got = {(r["session_id"], r["model"], r["task"]): (
            {k: r[k] for k in COUNT_KEYS}, r["estimated_cost_usd"]) for r in rows}
        want = {(sid, key[0], key[1]): (row["counts"], row["cost"])
                for sid, s in self.model.items() for key, row in s.usage.items()}
        assert got == want
        assert all((r["billing_provider"], r["billing_base_url"], r["billing_mode"]) == ("", "", "")
                   for r in rows)

    @invariant()
    def listing_and_lineage_agree(self):
        listed = {r["id"]: r for r in self.db.list_sessions(limit=100)}
        assert set(listed) == set(self.model)
        for sid, s in self.model.items():
            users = sorted((m for m in s.messages if m["role"] == "user"),
                           key=lambda m: m["timestamp"])
            preview = users[0]["content"].replace("\n", " ") if users else ""
            if len(preview) > 60:
                preview = preview[:60] + "..."
            assert listed[sid]["preview"] == preview
            last = max((m["timestamp"] for m in s.messages), default=s.started_at)
            assert listed[sid]["last_active"] == last
            chain, cur = [], sid
            while cur is not None:
                chain.append(cur)
                cur = self.model[cur].parent
            assert self.db.get_lineage(sid) == chain[::-1]
            kids = {k for k in self.model if sid in self._ancestors(k)}
            assert set(self.db.get_descendants(sid)) == kids

    def _ancestors(self, sid: str) -> set[str]:
        out, cur = set(), self.model[sid].parent
        while cur is not None:
            out.add(cur)
            cur = self.model[cur].parent
        return out

    @invariant()
    def removed_text_is_unindexed(self):
        if not self.removed_words:
            return
        tables = [r[0] for r in self.db._read(lambda c: c.execute(
            "SELECT name FROM sqlite_master WHERE name IN "
            "('messages_fts', 'messages_fts_trigram', 'messages_fts_cjk')").fetchall())]
        assert "messages_fts" in tables
        query = " OR ".join(f'"{w}"' for w in self.removed_words)
        for t in tables:
            hits = self.db._read(lambda c: c.execute(
                f"SELECT rowid FROM {t} WHERE {t} MATCH ?", (query,)).fetchall())
            assert hits == [], f"{t} still finds removed text"
        live = [m["word"] for s in self.model.values() for m in s.messages]
        if live:
            n = self.db._read(lambda c: c.execute(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?",
                (" OR ".join(f'"{w}"' for w in live),)).fetchone()[0])
            assert n == len(live)


StoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestStoreMachine = StoreMachine.TestCase
