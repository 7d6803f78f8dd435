"""Model-based tests (hypothesis): a real :class:`SessionDB` against a plain in-memory model.

The state machine creates sessions (optionally with a parent), appends user/assistant/tool
messages with and without ``tool_calls``, ends and reopens sessions (the first end reason wins,
SPEC §5), sets titles by hand and automatically (uniqueness, the compression-ancestor move,
sanitising: SPEC §7), clears messages, deletes sessions (children orphaned) and records token
usage (SPEC §5 ``update_token_counts``). After every step the store must agree with the model:
sessions, parent links, end state, titles and their origin, counters, messages, token totals,
usage rows, ``list_sessions``, lineage walks, and no FTS index may still find removed text.

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
from hermes_state.titles import MAX_TITLE_LENGTH, sanitize_title

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
    tool_call_count: int = 0
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
        self.word_seq += 1
        word = f"zq{self.word_seq}word"
        content = f"{word}\nsecond line" if multiline else f"{word} text"
        calls = [{"id": f"c{i}", "type": "function"} for i in range(n_calls)] if n_calls else None
        self.clock += 1.0
        if sid not in self.model:
            with pytest.raises(Exception) as exc:
                self.db.append_message(sid, role, content, tool_calls=calls, timestamp=self.clock)
            assert "FOREIGN KEY" in str(exc.value).upper()
            return
        self.db.append_message(sid, role, content, tool_calls=calls, timestamp=self.clock)
        s = self.model[sid]
        s.messages.append({"role": role, "content": content, "tool_calls": calls, "word": word,
                           "timestamp": self.clock})
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
            s.messages, s.tool_call_count = [], 0

    @rule(sid=st.sampled_from(IDS))
    def delete(self, sid):
        s = self.model.get(sid)
        assert self.db.delete_session(sid) is (s is not None)
        if s is not None:
            self._forget(sid)
            del self.model[sid]
            for other in self.model.values():
                if other.parent == sid:
                    event("delete orphaned a child")
                    other.parent = None

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
            assert r["message_count"] == len(s.messages)
            assert r["tool_call_count"] == s.tool_call_count
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
        for sid, s in self.model.items():
            got = [(m["role"], m["content"], m["tool_calls"]) for m in self.db.get_messages(sid)]
            assert got == [(m["role"], m["content"], m["tool_calls"]) for m in s.messages]

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
