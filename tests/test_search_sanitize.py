"""The FTS5 query sanitiser and query parsing (SPEC §6.2, §6.3): examples and properties."""

from __future__ import annotations

import re
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_state.fts import query as fts_query
from hermes_state.fts.query import (
    MAX_QUERY_CHARS,
    Term,
    build_tree,
    contains_cjk,
    like_pattern,
    parse_query,
    positive_terms,
    render_substring_match,
    sanitize_fts5_query,
)

# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def scratch():
    """A scratch in-memory database with one unicode61 and one trigram FTS5 table."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tool_name, tool_calls)")
    conn.execute("CREATE VIRTUAL TABLE g USING fts5(content, tool_name, tool_calls, "
                 "tokenize='trigram')")
    for table in ("t", "g"):
        conn.execute(f"INSERT INTO {table} VALUES ('hello world chat-send', NULL, NULL)")
    yield conn
    conn.close()


def fts5_accepts(conn: sqlite3.Connection, table: str, expr: str) -> None:
    """Run ``expr`` as a MATCH; any sqlite3 error fails the calling test."""
    conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (expr,)).fetchall()


def outside_quotes(expr: str) -> str:
    """``expr`` with every quoted string removed (what FTS5 sees as syntax)."""
    return re.sub(r'"(?:[^"]|"")*"', " ", expr)


# --------------------------------------------------------------------------- SPEC §6.2 examples

@pytest.mark.parametrize("raw, expected", [
    # FTS5 syntax users type passes through
    ("docker deployment", "docker deployment"),
    ('"exact phrase"', '"exact phrase"'),
    ("a OR b", "a OR b"),
    ("python NOT java", "python NOT java"),
    ("deploy*", "deploy*"),
    # dangling and doubled operators
    ("hello AND", "hello"),
    ("OR world", "world"),
    ("NOT", ""),
    ("AND OR NOT", ""),
    ("a AND OR b", "a OR b"),
    ("a AND NOT b", "a NOT b"),
    ("and or not", "and or not"),  # lower case: ordinary words
    # terms with separators are quoted whole; prefix star outside
    ("chat-send", '"chat-send"'),
    ("src/main.py", '"src/main.py"'),
    ("user@example.com", '"user@example.com"'),
    ("P2.2", '"P2.2"'),
    ("chat-send*", '"chat-send"*'),
    ("chat-send***", '"chat-send"*'),
    ("deploy***", "deploy*"),
    ("*", ""),
    ("***", ""),
    ("* deploy *", "deploy"),
    # word characters of any script stay bare; _ counts as a word character
    ("记忆断裂", "记忆断裂"),
    ("Привет мир", "Привет мир"),
    ("snake_case", "snake_case"),
    # unbalanced quote dropped, balanced phrase verbatim
    ('"unterminated', "unterminated"),
    ('say "hello world" and "oops', 'say "hello world" and oops'),
    ('"exact phrase"*', '"exact phrase"*'),
    # syntax characters never reach FTS5 as syntax
    ("C++", '"C++"'),
    ("(problem", '"(problem"'),
    ("{test}", '"{test}"'),
    ("^start", '"^start"'),
    ("content:foo", '"content:foo"'),
    ("a + b", "a b"),
    ("( ) [ ] { } ^ : + - . ,", ""),
    ("1.2.3-rc.1", '"1.2.3-rc.1"'),
    ("path\\to\\file.txt", '"path\\to\\file.txt"'),
    # NEAR is never syntax
    ("NEAR(a b)", '"NEAR(a" "b)"'),
    ("NEAR", '"NEAR"'),
    ("a NEAR b", 'a "NEAR" b'),
    ("AND*", '"AND"*'),
    # punctuation-only terms and phrases are dropped, never ""
    ('""', ""),
    ('"..."', ""),
    ('hello "" world', "hello world"),
    ("", ""),
    ("   \t\n ", ""),
])
def test_sanitize_examples(raw, expected, scratch):
    out = sanitize_fts5_query(raw)
    assert out == expected
    if out:
        fts5_accepts(scratch, "t", out)


def test_alias_has_spec_name():
    assert fts_query._sanitize_fts5_query is sanitize_fts5_query


@pytest.mark.parametrize("raw", [
    "#123", "src/main.py", "don't", "50%", "alice@example.com", "ok?", "$5", "a,b", "chat-send",
])
def test_spec_find_examples_are_quoted_phrases(raw, scratch):
    """SPEC §6.2: terms with separators are quoted whole (found as phrases by the index)."""
    assert sanitize_fts5_query(raw) == f'"{raw}"'
    fts5_accepts(scratch, "t", sanitize_fts5_query(raw))


def test_cut_to_2048_characters():
    raw = "a " * 5000
    out = sanitize_fts5_query(raw)
    assert out == " ".join(["a"] * (MAX_QUERY_CHARS // 2))
    # a phrase crossing the cut loses its closing quote, so its quote is dropped
    raw = "x" * (MAX_QUERY_CHARS - 4) + ' "abc def"'  # the cut keeps '"ab'
    assert sanitize_fts5_query(raw) == "x" * (MAX_QUERY_CHARS - 4) + " ab"


def test_fifty_thousand_quotes_is_linear_and_empty():
    assert sanitize_fts5_query('"' * 50_000) == ""
    assert sanitize_fts5_query('"a' * 25_000) != '""'


def test_controls_nul_and_surrogates_are_neutralised(scratch):
    assert sanitize_fts5_query("x\x00y") == "x y"
    assert sanitize_fts5_query('"a\x00b"') == '"a b"'
    out = sanitize_fts5_query("a\ud835b")
    assert "\ud835" not in out and out == '"a\ufffdb"'
    fts5_accepts(scratch, "t", out)


def test_non_string_inputs_never_raise():
    assert sanitize_fts5_query(None) == ""
    assert sanitize_fts5_query(b"chat-send") == '"chat-send"'
    assert sanitize_fts5_query(123) == "123"


# --------------------------------------------------------------------------- parse / tree

def test_parse_keeps_operators_only_between_terms():
    items = parse_query("AND a OR OR b NOT")
    assert items == [Term("a"), "OR", Term("b")]


def test_tree_uses_fts5_precedence():
    """Implicit AND > NOT > AND > OR, left-associative (checked against FTS5 in properties)."""
    t = lambda s: ("term", Term(s))  # noqa: E731
    assert build_tree(parse_query("a b")) == ("and", [t("a"), t("b")])
    assert build_tree(parse_query("a NOT b c")) == ("and", [t("a"), ("not", ("and", [t("b"), t("c")]))])
    assert build_tree(parse_query("a NOT b NOT c")) == ("and", [t("a"), ("not", ("or", [t("b"), t("c")]))])
    assert build_tree(parse_query("a OR b AND c")) == ("or", [t("a"), ("and", [t("b"), t("c")])])
    assert build_tree(parse_query("b OR c NOT a")) == ("or", [t("b"), ("and", [t("c"), ("not", t("a"))])])
    assert build_tree([]) is None


def test_positive_terms_skip_negated():
    tree = build_tree(parse_query("a NOT b OR c"))
    assert [t.text for t in positive_terms(tree)] == ["a", "c"]


def test_substring_rendering_and_like_pattern():
    items = parse_query('记忆断裂 OR "100%完成" deploy*')
    assert render_substring_match(items) == '"记忆断裂" OR "100%完成" "deploy"'
    assert like_pattern("100%_\\x") == "%100\\%\\_\\\\x%"


@pytest.mark.parametrize("text, cjk", [
    ("记忆断裂", True), ("こんにちは", True), ("カタカナ", True), ("안녕", True),
    ("東京", True), ("、", True), ("？", True), ("Agent通信", True),
    ("hello", False), ("Привет", False), ("", False), ("𠀀", True),
])
def test_contains_cjk(text, cjk):
    assert contains_cjk(text) is cjk


# --------------------------------------------------------------------------- properties

_ALPHABET = st.sampled_from(list('abcAB xyz01_"*()[]{}^:+-./@%#$\',?!\\~`|&=<>;') +
                            ["AND", "OR", "NOT", "NEAR", " AND ", " OR ", " NOT ", " NEAR(",
                             "记忆", "世界", "こん", "안녕", "\x00", "\ud800", "\ufffd", "é",
                             "\u0301", "\u3000", "\t", "\n", "😀"])
_QUERY_TEXT = st.one_of(st.text(), st.lists(_ALPHABET, max_size=40).map("".join))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_QUERY_TEXT)
def test_sanitize_output_is_always_valid_fts5(text):
    out = sanitize_fts5_query(text)
    assert isinstance(out, str)
    assert '""' not in out
    assert out.count('"') % 2 == 0
    if not out:
        return
    syntax = outside_quotes(out)
    assert not re.search(r"[()\[\]{}^:+\\,.\-@%#$']", syntax), (text, out)
    assert "NEAR" not in syntax.split()
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tool_name, tool_calls)")
        conn.execute("INSERT INTO t VALUES ('hello world', NULL, NULL)")
        try:
            fts5_accepts(conn, "t", out)
        except sqlite3.OperationalError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"sanitize({text!r}) = {out!r} rejected by FTS5: {exc}")
    finally:
        conn.close()


@settings(max_examples=300, deadline=None)
@given(_QUERY_TEXT)
def test_substring_rendering_is_valid_trigram_fts5(text):
    items = parse_query(text)
    expr = render_substring_match(items)
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE g USING fts5(content, tokenize='trigram')")
        conn.execute("INSERT INTO g VALUES ('hello world')")
        if expr:
            fts5_accepts(conn, "g", expr)
    finally:
        conn.close()


@settings(max_examples=400, deadline=None)
@given(_QUERY_TEXT)
def test_sanitize_is_idempotent(text):
    once = sanitize_fts5_query(text)
    if len(once) <= MAX_QUERY_CHARS:
        assert sanitize_fts5_query(once) == once


@settings(max_examples=300, deadline=None)
@given(_QUERY_TEXT)
def test_parse_invariants(text):
    items = parse_query(text)
    assert all(isinstance(it, (Term, str)) for it in items)
    if items:
        assert isinstance(items[0], Term) and isinstance(items[-1], Term)
    for prev, cur in zip(items, items[1:]):
        assert not (isinstance(prev, str) and isinstance(cur, str))
    for it in items:
        if isinstance(it, Term):
            assert it.text and '"' not in it.text and "\x00" not in it.text
            assert any(ch.isalnum() for ch in it.text)
    # empty exactly when the sanitiser has nothing to emit
    assert (items == []) == (sanitize_fts5_query(text) == "")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "AND", "OR", "NOT", "a*", '"b c"']),
                max_size=12))
def test_operator_soup_matches_like_fts5_on_the_same_rows(words):
    """The tree's precedence equals FTS5's: evaluate both on every subset of {a, b, c}."""
    query = " ".join(words)
    items = parse_query(query)
    if not items:
        return
    docs = ["", "a", "b", "c", "a b", "a c", "b c", "a b c", "c b", "b c a"]
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(content)")
        for d in docs:
            conn.execute("INSERT INTO t VALUES (?)", (d,))
        got = {r[0] - 1 for r in conn.execute(
            "SELECT rowid FROM t WHERE t MATCH ?", (sanitize_fts5_query(query),))}
    finally:
        conn.close()
    want = {i for i, d in enumerate(docs) if _eval(build_tree(items), d)}
    assert got == want, (query, sanitize_fts5_query(query))


def _eval(node, doc: str) -> bool:
    """Reference evaluation of a tree on a space-separated doc of single-letter tokens."""
    kind = node[0]
    if kind == "term":
        words = node[1].text.split()
        toks = doc.split()
        if node[1].prefix:  # single letters: prefix equals the token itself here
            pass
        return any(toks[i:i + len(words)] == words for i in range(len(toks)))
    if kind == "not":
        return not _eval(node[1], doc)
    vals = [_eval(c, doc) for c in node[1]]
    return all(vals) if kind == "and" else any(vals)
