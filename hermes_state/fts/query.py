"""Query parsing for search: the FTS5 sanitiser, CJK detection, substring/LIKE helpers (SPEC §6).

Pure functions, no database access. :func:`parse_query` turns any string into a normalised list
of :class:`Term` objects and operator strings; everything else renders that one parse:

- :func:`sanitize_fts5_query` (alias ``_sanitize_fts5_query``) renders it as an FTS5 expression
  for the ``unicode61`` index (SPEC §6.2);
- :func:`render_substring_match` renders it for the ``trigram`` index, every term a literal
  substring (SPEC §6.3);
- :func:`build_tree` gives the boolean tree with FTS5's own precedence, which the store compiles
  to a ``LIKE '%term%'`` scan (SPEC §6.3) and which :func:`positive_terms` walks for snippets.

The decisions where SPEC §6.2 leaves room (order of work, term splitting, word characters,
doubled operators, NEAR, prefix stars) are recorded in docs/decisions/0006-search.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Union

#: SPEC §6.2: the query is cut to this many characters before anything else.
MAX_QUERY_CHARS = 2048

OPERATORS = frozenset(("AND", "OR", "NOT"))
_KEYWORDS = OPERATORS | {"NEAR"}  # never emitted bare (``AND*`` would lex as the operator)

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

# Han (unified, extensions A–H, compatibility, radicals, strokes), Hiragana, Katakana (with
# phonetic extensions and half-width forms), Hangul (syllables, jamo, compatibility jamo,
# extended A/B, half-width), Bopomofo, CJK symbols and punctuation, enclosed CJK, CJK
# compatibility, full-width forms (SPEC §6.3 "Han, Hiragana, Katakana, Hangul, CJK punctuation").
_CJK_RANGES = (
    "\u1100-\u11ff"          # Hangul Jamo
    "\u2e80-\u2fdf"          # CJK radicals supplement, Kangxi radicals
    "\u2ff0-\u2fff"          # ideographic description characters
    "\u3000-\u303f"          # CJK symbols and punctuation
    "\u3040-\u309f"          # Hiragana
    "\u30a0-\u30ff"          # Katakana
    "\u3100-\u312f"          # Bopomofo
    "\u3130-\u318f"          # Hangul compatibility Jamo
    "\u3190-\u31ff"          # Kanbun, Bopomofo ext., CJK strokes, Katakana phonetic ext.
    "\u3200-\u33ff"          # enclosed CJK letters, CJK compatibility
    "\u3400-\u4dbf"          # CJK unified ideographs extension A
    "\u4e00-\u9fff"          # CJK unified ideographs
    "\ua960-\ua97f"          # Hangul Jamo extended-A
    "\uac00-\ud7af"          # Hangul syllables
    "\ud7b0-\ud7ff"          # Hangul Jamo extended-B
    "\uf900-\ufaff"          # CJK compatibility ideographs
    "\ufe30-\ufe4f"          # CJK compatibility forms
    "\uff00-\uffef"          # half-width and full-width forms
    "\U00020000-\U0003134f"  # CJK unified ideographs extensions B–G, compatibility supplement
)
_CJK = re.compile(f"[{_CJK_RANGES}]")


@dataclass(frozen=True)
class Term:
    """One search term of a parsed query.

    Attributes:
        text: the term as typed, without surrounding quotes and trailing ``*``; never contains
            ``"``, control characters or lone surrogates, always has a letter or digit.
        phrase: it came from a balanced ``"..."`` phrase (kept verbatim).
        prefix: it ended in ``*`` (FTS5 prefix query).
    """

    text: str
    phrase: bool = False
    prefix: bool = False


Item = Union[Term, str]
"""A parsed query item: a :class:`Term` or one of ``"AND"``, ``"OR"``, ``"NOT"``."""


def contains_cjk(text: str) -> bool:
    """True when ``text`` contains any CJK character (SPEC §6.3 routing test)."""
    return isinstance(text, str) and _CJK.search(text) is not None


def _clean(text: object) -> str:
    """Coerce to str, cut to :data:`MAX_QUERY_CHARS`, neutralise surrogates and controls."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    elif not isinstance(text, str):
        text = "" if text is None else str(text)
    text = text[:MAX_QUERY_CHARS]
    text = _SURROGATE.sub("\ufffd", text)
    return _CONTROL.sub(" ", text)


def _has_content(text: str) -> bool:
    """True when ``text`` has a letter or digit (else it is punctuation-only and dropped)."""
    return any(ch.isalnum() for ch in text)


def _is_word(text: str) -> bool:
    """True when every character is a letter/digit of any script or ``_`` (FTS5 bareword-safe)."""
    return all(ch.isalnum() or ch == "_" for ch in text)


def _raw_tokens(text: str) -> Iterable[Item]:
    """Split cleaned text into terms and operator words; linear time (SPEC §6.2)."""
    n = len(text)
    i = 0
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == '"':
            close = text.find('"', i + 1)
            if close < 0:  # unbalanced: drop the quote, parse the rest as plain terms
                i += 1
                continue
            body = text[i + 1:close]
            i = close + 1
            prefix = False
            while i < n and text[i] == "*":
                prefix = True
                i += 1
            if _has_content(body):
                yield Term(body, phrase=True, prefix=prefix)
            continue
        j = i
        while j < n and text[j] != '"' and not text[j].isspace():
            j += 1
        raw = text[i:j]
        i = j
        if raw in OPERATORS:
            yield raw
            continue
        stripped = raw.rstrip("*")
        if _has_content(stripped):
            yield Term(stripped, prefix=len(stripped) != len(raw))


def parse_query(text: object) -> list[Item]:
    """Parse any input into a normalised item list (SPEC §6.2).

    The result alternates terms and at most one operator: operators appear only between two
    terms (leading, trailing and doubled operators are dropped, the last of a run wins); two
    adjacent terms mean implicit AND.

    Args:
        text: the user's query (non-strings are coerced; ``None`` is empty).
    Returns:
        ``[Term, ("AND"|"OR"|"NOT")?, Term, ...]``; ``[]`` when nothing searchable remains.
    """
    out: list[Item] = []
    pending: str | None = None
    for tok in _raw_tokens(_clean(text)):
        if isinstance(tok, str):
            if out:
                pending = tok
            continue
        if pending is not None:
            out.append(pending)
            pending = None
        out.append(tok)
    return out


def render_fts_term(term: Term) -> str:
    """One term as FTS5 syntax: bare when it is all word characters, else quoted whole."""
    if not term.phrase and _is_word(term.text) and term.text not in _KEYWORDS:
        out = term.text
    else:
        out = '"' + term.text.replace('"', '""') + '"'
    return out + "*" if term.prefix else out


def sanitize_fts5_query(text: object) -> str:
    """Turn any string into a valid FTS5 expression for the ``unicode61`` index, or ``""``.

    SPEC §6.2: cut to 2048 characters; balanced phrases verbatim; unbalanced quotes dropped;
    ``AND``/``OR``/``NOT`` kept only between two terms; word-character terms bare, terms with
    separators quoted whole (``chat-send`` → ``"chat-send"``, ``chat-send*`` →
    ``"chat-send"*``); lone ``*`` and punctuation-only terms dropped; brackets, ``^``, ``:``,
    ``+``, ``{}``, ``()`` only ever appear inside quotes. Never raises; linear time.

    Args:
        text: the user's query.
    Returns:
        The FTS5 expression, or ``""`` when nothing searchable remains.

    Example::

        >>> sanitize_fts5_query('hello AND "exact phrase" src/main.py chat-send* OR')
        'hello AND "exact phrase" "src/main.py" "chat-send"*'
    """
    return render_fts(parse_query(text))


#: SPEC §6.2 calls it ``_sanitize_fts5_query``.
_sanitize_fts5_query = sanitize_fts5_query


def render_fts(items: list[Item]) -> str:
    """Render parsed items as an FTS5 expression for the ``unicode61`` index."""
    return " ".join(it if isinstance(it, str) else render_fts_term(it) for it in items)


def render_substring_match(items: list[Item]) -> str:
    """Render parsed items for the ``trigram`` index: every term a quoted literal substring.

    Prefix stars are dropped (a substring match already covers every continuation). Only
    meaningful when every term has at least 3 characters (SPEC §6.3).
    """
    return " ".join(it if isinstance(it, str) else '"' + it.text.replace('"', '""') + '"'
                    for it in items)


def terms_of(items: list[Item]) -> list[Term]:
    """The terms of a parsed query, in order."""
    return [it for it in items if isinstance(it, Term)]


# ---------------------------------------------------------------------------- boolean tree
# Node = ("term", Term) | ("and", [Node, ...]) | ("or", [Node, ...]) | ("not", Node)

def build_tree(items: list[Item]) -> tuple | None:
    """The boolean tree of parsed items with FTS5's precedence (SPEC §6.3 "same boolean logic").

    FTS5 binds implicit AND (adjacent terms) tightest, then ``NOT``, then ``AND``, then ``OR``,
    all left-associative: ``a NOT b c`` is ``a NOT (b c)``; ``a NOT b NOT c`` is
    ``a AND NOT (b OR c)``.

    Returns:
        A nested tuple (see module source) or None for an empty query.
    """
    if not items:
        return None
    # 1. implicit-AND groups ("units") separated by explicit operators
    seq: list = []
    group: list = []
    for it in items:
        if isinstance(it, str):
            seq.append(_and(group))
            seq.append(it)
            group = []
        else:
            group.append(("term", it))
    seq.append(_and(group))
    # 2. OR (loosest) > AND > NOT (tightest of the explicit operators)
    or_parts: list = []
    and_parts: list = []
    not_chain: list = [seq[0]]
    for k in range(1, len(seq), 2):
        op, unit = seq[k], seq[k + 1]
        if op == "NOT":
            not_chain.append(unit)
            continue
        and_parts.append(_not_chain(not_chain))
        not_chain = [unit]
        if op == "OR":
            or_parts.append(_and(and_parts))
            and_parts = []
    and_parts.append(_not_chain(not_chain))
    or_parts.append(_and(and_parts))
    return or_parts[0] if len(or_parts) == 1 else ("or", or_parts)


def _and(nodes: list) -> tuple:
    flat: list = []
    for n in nodes:
        flat.extend(n[1] if n[0] == "and" else [n])
    return flat[0] if len(flat) == 1 else ("and", flat)


def _not_chain(chain: list) -> tuple:
    if len(chain) == 1:
        return chain[0]
    rest = chain[1:]
    excluded = rest[0] if len(rest) == 1 else ("or", rest)
    return _and([chain[0], ("not", excluded)])


def positive_terms(node: tuple | None) -> list[Term]:
    """Terms that can make a row match (those not under ``NOT``), in query order."""
    out: list[Term] = []
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if n[0] == "term":
            out.append(n[1])
        elif n[0] in ("and", "or"):
            stack.extend(reversed(n[1]))
    return out


def like_pattern(text: str) -> str:
    """``'%text%'`` with ``%``, ``_`` and ``\\`` escaped for ``LIKE ... ESCAPE '\\'`` (SPEC §6.3)."""
    esc = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{esc}%"
