"""Property tests of ``search_messages`` on small real stores (SPEC §6.1, §6.3)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hermes_state import SessionDB
from hermes_state.fts.query import contains_cjk

PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])

SHORT = ["世界", "東京", "안녕", "记忆", "断", "问", "ab"]
LONG = ["记忆断裂", "聊天记录", "こんにちは", "通信协议", "完成率", "abc", "东京塔"]
VOCAB = SHORT + LONG
SOURCES = ["cli", "telegram", "discord"]
ROLES = ["user", "assistant"]


def _corpus(rng: random.Random, n: int) -> list[tuple[str, str, str]]:
    """``n`` (source, role, content) rows made of vocabulary words, glued or spaced."""
    out = []
    for _ in range(n):
        words = rng.sample(VOCAB, rng.randint(0, 4))
        filler = rng.choice(["", "的", " ", "，", "x"])
        out.append((rng.choice(SOURCES), rng.choice(ROLES), filler.join(words) or "无关内容"))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A small store (module scope: hypothesis reuses it across examples)."""
    path = tmp_path_factory.mktemp("search-props") / "state.db"
    db = SessionDB(path)
    rows = _corpus(random.Random(1234), 160)
    for source in SOURCES:
        db.create_session(f"s-{source}", source=source, model=f"m-{source}")
    contents = {}
    for i, (source, role, content) in enumerate(rows):
        mid = db.append_message(f"s-{source}", role, content, timestamp=float(i))
        contents[mid] = (source, role, content)
    # a few Latin rows and one tool row so every route has something to find
    db.append_message("s-cli", "assistant", "see issue #123 and src/main.py chat-send",
                      timestamp=500.0)
    db.append_message("s-cli", "tool", "tool output 记忆断裂 abc", tool_name="grep",
                      timestamp=501.0)
    yield db, contents
    db.close()


# --------------------------------------------------------------------------- never raises

_ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=[]), max_size=80)
_SYNTAXY = st.lists(st.sampled_from(
    VOCAB + ["AND", "OR", "NOT", "NEAR", '"', "*", "(", ")", "^", ":", "-", "%", "_", "\\",
             "\x00", "\ud800", "chat-send", "#123", " ", "{", "}", "+", "'"]),
    max_size=25).map(" ".join)
_FILTER = st.one_of(st.none(), st.lists(st.sampled_from(SOURCES + ["nowhere", ""]), max_size=3))
_ROLE_FILTER = st.one_of(st.none(), st.lists(st.sampled_from(ROLES + ["tool", "system"]),
                                             max_size=3))


@PROPS
@given(query=st.one_of(_ANY_TEXT, _SYNTAXY), sources=_FILTER, exclude=_FILTER,
       roles=_ROLE_FILTER, limit=st.integers(-2, 30), offset=st.integers(-2, 200))
def test_search_never_raises(store, query, sources, exclude, roles, limit, offset):
    db, _ = store
    out = db.search_messages(query, source_filter=sources, exclude_sources=exclude,
                             role_filter=roles, limit=limit, offset=offset)
    assert isinstance(out, list)
    assert len(out) <= max(limit, 0)
    for hit in out:
        assert isinstance(hit["snippet"], str)
        assert 1 <= len(hit["context"]) <= 3
        assert all(len(c["content"]) <= 200 for c in hit["context"])
        if sources:
            assert hit["source"] in sources
        if exclude:
            assert hit["source"] not in exclude
        if roles:
            assert hit["role"] in roles
    assert not db.connection.conn.in_transaction


# --------------------------------------------------------------------------- LIKE semantics

def _reference(tokens: list[str], text: str) -> bool:
    """Independent evaluator of a flat FTS5-style token list with substring atoms.

    Precedence (FTS5): adjacency (implicit AND) > NOT > AND > OR, left-associative. Operators
    appear only between terms here (the generator guarantees it).
    """
    # 1. fold adjacent terms into groups
    units: list = []
    ops: list[str] = []
    for tok in tokens:
        if tok in ("AND", "OR", "NOT"):
            ops.append(tok)
            units.append(None)
        elif units and units[-1] is not None:
            units[-1] = units[-1] and (tok.lower() in text.lower())
        else:
            if units and units[-1] is None:
                units[-1] = tok.lower() in text.lower()
            else:
                units.append(tok.lower() in text.lower())
    # units and ops now alternate: u0 op0 u1 op1 u2 ...
    def fold(values: list[bool], opers: list[str], level: list[str]) -> tuple[list, list]:
        out_v, out_o = [values[0]], []
        for op, v in zip(opers, values[1:]):
            if op in level:
                left = out_v.pop()
                out_v.append(left and not v if op == "NOT" else left and v if op == "AND"
                             else left or v)
            else:
                out_v.append(v)
                out_o.append(op)
        return out_v, out_o
    vals, rest = fold(units, ops, ["NOT"])
    vals, rest = fold(vals, rest, ["AND"])
    vals, rest = fold(vals, rest, ["OR"])
    assert not rest and len(vals) == 1
    return vals[0]


_EXPR = st.lists(st.tuples(st.sampled_from(["", "AND ", "OR ", "NOT "]),
                           st.sampled_from(VOCAB)), min_size=1, max_size=6)


def _query(parts: list[tuple[str, str]]) -> tuple[str, list[str]]:
    tokens: list[str] = []
    for i, (op, word) in enumerate(parts):
        if i and op:
            tokens.append(op.strip())
        tokens.append(word)
    return " ".join(tokens), tokens


@PROPS
@given(_EXPR)
def test_substring_hit_set_equals_a_like_scan_with_the_same_logic(store, parts):
    """SPEC §6.3: short and long terms mixed under AND/OR/NOT ⇒ exactly the LIKE hit set."""
    db, contents = store
    query, tokens = _query(parts)
    assume(contains_cjk(query))  # a Latin-only query goes to the unicode61 index first
    got = {h["id"] for h in db.search_messages(query, role_filter=ROLES, limit=10_000)}
    want = {mid for mid, (_s, _r, text) in contents.items() if _reference(tokens, text)}
    assert got == want, query


@PROPS
@given(st.lists(st.tuples(st.sampled_from(["", "AND ", "OR ", "NOT "]), st.sampled_from(LONG)),
                min_size=1, max_size=5))
def test_trigram_route_equals_like_route(store, parts):
    """All terms >= 3 chars (trigram index) vs the same query forced to LIKE by 'tool'."""
    db, _ = store
    query, _ = _query(parts)
    assume(contains_cjk(query))
    via_trigram = {h["id"] for h in db.search_messages(query, role_filter=ROLES, limit=10_000)}
    via_like = {h["id"] for h in db.search_messages(query, role_filter=ROLES + ["tool"],
                                                    limit=10_000) if h["role"] != "tool"}
    assert via_trigram == via_like, query


@PROPS
@given(parts=_EXPR, page=st.integers(1, 7), sources=_FILTER)
def test_pages_concatenate_to_the_full_list(store, parts, page, sources):
    db, _ = store
    query, _ = _query(parts)
    full = [h["id"] for h in db.search_messages(query, source_filter=sources, limit=10_000)]
    paged: list[int] = []
    for offset in itertools.count(0, page):
        chunk = [h["id"] for h in db.search_messages(query, source_filter=sources, limit=page,
                                                     offset=offset)]
        paged += chunk
        if len(chunk) < page:
            break
    assert paged == full


@PROPS
@given(st.lists(st.sampled_from(LONG + SHORT), min_size=1, max_size=3))
def test_positive_queries_mark_a_match_in_every_snippet(store, words):
    db, _ = store
    for hit in db.search_messages(" OR ".join(words), limit=10_000):
        assert ">>>" in hit["snippet"] and "<<<" in hit["snippet"], (words, hit)
