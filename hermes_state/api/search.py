"""Full-text search over messages: ``SessionDB.search_messages`` (SPEC §6).

Routing (SPEC §6.3), decided per query from one parse (:mod:`hermes_state.fts.query`):

1. No CJK in the query: ``messages_fts`` (``unicode61``) with the sanitised expression
   (SPEC §6.2), bm25 order. When that finds no hit at all (with the filters applied), the query
   is retried as a substring search (step 3), which catches a word glued to CJK text.
2. CJK in the query and ``messages_fts_cjk`` present: that table with the sanitised expression;
   no hit or an FTS5 error continues with step 3.
3. Substring search: every term is a literal substring. ``messages_fts_trigram`` with one
   MATCH expression (bm25 order) when the table exists, every term has >= 3 characters and
   ``role_filter`` does not ask for ``tool`` rows (the trigram table leaves them out); otherwise a
   ``LIKE '%term%' ESCAPE '\\'`` scan over ``content``, ``tool_name`` and ``tool_calls`` that
   evaluates the same boolean expression, newest first.

While an FTS rebuild is pending (``state_meta`` keys ``fts_rebuild_high_water`` H and
``fts_rebuild_progress`` P, SPEC §2.4) the index routes also LIKE-scan the id range (P, H], whose
rows no index holds yet; those hits are ranked after the index hits.

The decisions where SPEC §6 leaves room (trigram routing per term, substring semantics, ordering,
filters, visibility, snippets, never raising) are recorded in docs/decisions/0006-search.md.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Iterable

from ..errors import corruption_kind
from ..fts.query import (
    Item,
    Term,
    build_tree,
    contains_cjk,
    like_pattern,
    parse_query,
    positive_terms,
    render_fts,
    render_substring_match,
    terms_of,
)
from ..store.quarantine import btrees_sound
from .text import clean_text, content_text, decode_content

log = logging.getLogger("hermes_state.api.search")

#: FTS5 ``snippet()`` arguments (SPEC §6.1): markers, ellipsis, ~40 tokens, best column.
SNIPPET_OPEN = ">>>"
SNIPPET_CLOSE = "<<<"
SNIPPET_ELLIPSIS = "..."
SNIPPET_TOKENS = 40
#: Characters either side of the first match in a LIKE-route snippet.
LIKE_SNIPPET_RADIUS = 40
#: SPEC §6.1: each context message's content is cut to this many characters.
CONTEXT_CHARS = 200
#: Minimum characters a term needs for the trigram index (SPEC §6.3).
TRIGRAM_MIN_CHARS = 3

FTS_TABLE = "messages_fts"
TRIGRAM_TABLE = "messages_fts_trigram"
CJK_TABLE = "messages_fts_cjk"

_MAX_INT = 2 ** 62
_SIZE_LIMIT_WORDS = ("too many", "too large", "too complex", "too big")
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


class _Filters:
    """Normalised ``source_filter`` / ``exclude_sources`` / ``role_filter`` and visibility
    (SPEC §6.1; module docstring)."""

    def __init__(self, sources: Any, exclude: Any, roles: Any,
                 include_inactive: bool = False) -> None:
        self.sources = _as_list(sources)
        self.exclude = _as_list(exclude)
        self.roles = _as_list(roles) or None
        self.include_inactive = include_inactive
        self.wants_tool = bool(self.roles) and "tool" in self.roles

    @property
    def matches_nothing(self) -> bool:
        """An empty ``source_filter`` list: no session can match."""
        return self.sources is not None and not self.sources

    def sql(self) -> tuple[str, list]:
        """`` AND ...`` clauses over ``m`` (messages) and ``s`` (sessions, LEFT JOINed)."""
        parts: list[str] = []
        params: list = []
        if self.sources:
            parts.append(f"s.source IN ({','.join('?' * len(self.sources))})")
            params += self.sources
        if self.exclude:
            parts.append(f"(s.source IS NULL OR s.source NOT IN "
                         f"({','.join('?' * len(self.exclude))}))")
            params += self.exclude
        if self.roles:
            parts.append(f"m.role IN ({','.join('?' * len(self.roles))})")
            params += self.roles
        if not self.include_inactive:
            parts.append("(COALESCE(m.active, 1) = 1 OR m.compacted = 1)")
        return "".join(" AND " + p for p in parts), params


def _as_list(value: Any) -> list[str] | None:
    """None ⇒ None; a string ⇒ one item; any iterable ⇒ its items as cleaned strings (an empty
    iterable ⇒ ``[]``)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        value = [value]
    try:
        items = list(value)
    except TypeError:
        items = [value]
    out = []
    for v in items:
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out.append(clean_text(v if isinstance(v, str) else str(v)))
    return out


def _as_int(value: Any, default: int) -> int:
    try:
        n = int(value)
    except Exception:  # noqa: BLE001 - any non-number falls back (SPEC §6.1: never raises)
        return default
    return max(-1, min(n, _MAX_INT))


def _ascii_lower(text: str) -> str:
    """Lower-case ASCII letters only (what SQLite's LIKE folds); keeps every index stable."""
    return text.translate(_ASCII_LOWER)


def like_snippet(texts: Iterable[str | None], terms: list[Term],
                 radius: int = LIKE_SNIPPET_RADIUS) -> str:
    """Snippet for a LIKE-route hit: text around the first match, matches marked (SPEC §6.3).

    Args:
        texts: candidate column values in order (``content``, ``tool_name``, ``tool_calls``).
        terms: terms whose matches count (not those under ``NOT``).
        radius: characters kept on each side of the first match.
    Returns:
        ``"...before >>>match<<< after..."``; the start of the first non-empty text when no
        term is found case-insensitively (ASCII folding, as LIKE does); ``""`` for no text.
    """
    needles = sorted({_ascii_lower(t.text) for t in terms if t.text}, key=len, reverse=True)
    fallback = ""
    for text in texts:
        if not text:
            continue
        if not fallback:
            fallback = text[: 2 * radius] + (SNIPPET_ELLIPSIS if len(text) > 2 * radius else "")
        low = _ascii_lower(text)
        first = -1
        first_len = 0
        for nd in needles:
            pos = low.find(nd)
            if pos >= 0 and (first < 0 or pos < first):
                first, first_len = pos, len(nd)
        if first < 0:
            continue
        start = max(0, first - radius)
        end = min(len(text), first + first_len + radius)
        out = [SNIPPET_ELLIPSIS] if start > 0 else []
        i = start
        while i < end:
            hit = next((nd for nd in needles if low.startswith(nd, i) and i + len(nd) <= end),
                       None)
            if hit is None:
                nxt = min((p for p in (low.find(nd, i + 1, end) for nd in needles) if p >= 0),
                          default=end)
                out.append(text[i:nxt])
                i = nxt
            else:
                out.append(SNIPPET_OPEN + text[i:i + len(hit)] + SNIPPET_CLOSE)
                i += len(hit)
        if end < len(text):
            out.append(SNIPPET_ELLIPSIS)
        return "".join(out)
    return fallback


def _like_sql(node: tuple, params: list, alias: str = "m") -> str:
    """Compile a boolean tree to SQL over ``alias`` with LIKE atoms; balanced, shallow nesting."""
    kind = node[0]
    if kind == "term":
        pat = like_pattern(node[1].text)
        params += [pat, pat, pat]
        return (f"(IFNULL({alias}.content LIKE ? ESCAPE '\\', 0) OR "
                f"IFNULL({alias}.tool_name LIKE ? ESCAPE '\\', 0) OR "
                f"IFNULL({alias}.tool_calls LIKE ? ESCAPE '\\', 0))")
    if kind == "not":
        return "(NOT " + _like_sql(node[1], params, alias) + ")"
    parts = [_like_sql(child, params, alias) for child in node[1]]
    return _balanced(parts, " AND " if kind == "and" else " OR ")


def _balanced(parts: list[str], op: str) -> str:
    """Join with ``op`` as a balanced tree so SQLite's expression depth stays logarithmic."""
    if len(parts) == 1:
        return parts[0]
    mid = len(parts) // 2
    return "(" + _balanced(parts[:mid], op) + op + _balanced(parts[mid:], op) + ")"


class _Query:
    """Everything one ``search_messages`` call needs, derived once from the input."""

    def __init__(self, items: list[Item], filters: _Filters, limit: int, offset: int,
                 sort: str | None = None) -> None:
        self.items = items
        self.sort = sort
        self.tree = build_tree(items)
        self.terms = terms_of(items)
        self.positive = positive_terms(self.tree)
        self.filters = filters
        self.limit = limit
        self.offset = offset


class SearchMixin:
    """``search_messages`` (SPEC §6); needs ``self._read(fn)``."""

    def search_messages(self, query: Any, source_filter: Any = None, exclude_sources: Any = None,
                        role_filter: Any = None, limit: Any = 20, offset: Any = 0,
                        sort: Any = None, include_inactive: bool = False) -> list[dict]:
        """Search every message; bm25 order; filters apply before paging (SPEC §6).

        Args:
            query: user text; FTS5 syntax (implicit AND, ``"phrase"``, ``OR``, ``NOT``,
                ``prefix*``) is honoured, anything else is sanitised (SPEC §6.2). CJK text
                routes to substring search (SPEC §6.3).
            source_filter: only sessions whose ``source`` is in this list (``[]``: no hit).
            exclude_sources: never sessions whose ``source`` is in this list.
            role_filter: only messages whose ``role`` is in this list (when non-empty);
                containing ``tool`` routes substring queries to the LIKE scan (tool rows are not
                trigram-indexed).
            limit: page size (``<= 0`` ⇒ ``[]``).
            offset: hits to skip, counted after the filters.
            sort: None (relevance), ``"newest"`` or ``"oldest"`` (message time first).
            include_inactive: also rows rewound away (``active = 0``, not compacted).
        Returns:
            A list of hits, each ``{"id", "session_id", "role", "timestamp", "snippet",
            "tool_name", "context", "source", "model", "session_started"}`` where ``snippet``
            marks matches with ``>>>``/``<<<`` and ``context`` is the previous message, the hit
            and the next message of the same session by (timestamp, id) as ``{"role",
            "content"}`` dicts, content cut to 200 characters (SPEC §6.1). ``[]`` for an empty
            or whitespace query.
        Raises:
            Nothing for any query or filter value (SPEC §6.1); a closed store raises
            ``sqlite3.ProgrammingError`` as every method does.
        """
        items = parse_query(query)
        if not items:
            return []
        limit_n = _as_int(limit, 20)
        offset_n = max(0, _as_int(offset, 0))
        filters = _Filters(source_filter, exclude_sources, role_filter, bool(include_inactive))
        if limit_n <= 0 or filters.matches_nothing:
            return []
        order = sort.strip().lower() if isinstance(sort, str) else None
        q = _Query(items, filters, limit_n, offset_n,
                   order if order in ("newest", "oldest") else None)
        return self._read(lambda conn: _in_snapshot(conn, lambda: _search(conn, q)))


# ------------------------------------------------------------------------------ execution

def _in_snapshot(conn: sqlite3.Connection, fn):
    """Run ``fn`` inside one deferred read transaction, always ended before returning."""
    began = False
    if not conn.in_transaction:
        conn.execute("BEGIN")
        began = True
    try:
        return fn()
    finally:
        if began and conn.in_transaction:
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError:
                # A read snapshot has nothing to commit: after a statement that met FTS damage
                # SQLite can refuse the COMMIT with that error; ending it by ROLLBACK is the same.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")


def _search(conn: sqlite3.Connection, q: _Query) -> list[dict]:
    tables: set[str] = set()
    for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
            (FTS_TABLE, TRIGRAM_TABLE, CJK_TABLE)).fetchall():
        # a v31 trigram index leaves whole sessions out: scan instead
        if not (name == TRIGRAM_TABLE and partial_trigram_sql(sql)):
            tables.add(name)
    meta = dict(conn.execute(
        "SELECT key, value FROM state_meta WHERE key IN "
        "('fts_rebuild_high_water', 'fts_rebuild_progress', 'fts_stale')").fetchall())
    pending = _pending_range(meta)
    if "fts_stale" in meta:
        # The index was found corrupt and switched off (SPEC §12): scan until it is rebuilt.
        return _substring_route(conn, q, set(), pending)
    hits: list[dict] | None = None
    if not contains_cjk(" ".join(t.text for t in q.terms)):
        hits = _index_route(conn, q, FTS_TABLE, render_fts(q.items), tables, pending)
    elif CJK_TABLE in tables:
        hits = _index_route(conn, q, CJK_TABLE, render_fts(q.items), tables, pending)
    if hits is None:
        hits = _substring_route(conn, q, tables, pending)
    _attach_context(conn, hits)
    return hits


def _index_route(conn: sqlite3.Connection, q: _Query, table: str, expr: str, tables: set,
                 pending: tuple[int, int] | None) -> list[dict] | None:
    """A page from one FTS index, or None when the index has no hit at all / fails."""
    if table not in tables or not expr:
        return None
    try:
        page = _match_page(conn, q, table, expr, pending, q.limit, q.offset)
        if page or q.offset == 0:
            return page or None
        # An empty page past the end is still "the index has hits": keep the route.
        return [] if _match_page(conn, q, table, expr, pending, 1, 0) else None
    except sqlite3.OperationalError as exc:
        log.debug("FTS query on %s failed (%s); falling back", table, exc)
        return None
    except sqlite3.DatabaseError as exc:

        kind = corruption_kind(exc)
        if kind != "fts" and not (kind == "structural" and btrees_sound(conn)):
            raise
        # SPEC §12: damage confined to the FTS index must not stop search (nor, through the
        # read path, the whole handle): this query falls back to trigram/LIKE; the next write
        # switches the index off (fts_stale) and `doctor --fix` rebuilds it.
        log.warning("the search index %s is damaged (%s): falling back to a scan", table, exc)
        return None


def _substring_route(conn: sqlite3.Connection, q: _Query, tables: set,
                     pending: tuple[int, int] | None) -> list[dict]:
    """Substring search: the trigram index when every term can use it, else LIKE (SPEC §6.3)."""
    if (TRIGRAM_TABLE in tables and not q.filters.wants_tool
            and all(len(t.text) >= TRIGRAM_MIN_CHARS for t in q.terms)):
        try:
            return _match_page(conn, q, TRIGRAM_TABLE, render_substring_match(q.items), pending,
                               q.limit, q.offset)
        except sqlite3.OperationalError as exc:
            log.debug("trigram query failed (%s); falling back to LIKE", exc)
    return _like_page(conn, q)


_HIT_COLUMNS = ("m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model, "
                "s.started_at AS session_started")
_TIME_ORDER = {"newest": "m.timestamp DESC, ", "oldest": "m.timestamp ASC, ", None: ""}


def _match_page(conn: sqlite3.Connection, q: _Query, table: str, expr: str,
                pending: tuple[int, int] | None, limit: int, offset: int) -> list[dict]:
    """One page of hits from FTS table ``table`` (bm25 order), plus the pending id range."""
    fsql, fparams = q.filters.sql()
    snippet = (f"snippet({table}, -1, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', "
               f"'{SNIPPET_ELLIPSIS}', {SNIPPET_TOKENS})")
    if pending is None:
        cur = conn.execute(
            f"SELECT {_HIT_COLUMNS}, {snippet} AS snippet "
            f"FROM {table} CROSS JOIN messages m ON m.id = {table}.rowid "
            f"LEFT JOIN sessions s ON s.id = m.session_id "
            f"WHERE {table} MATCH ?{fsql} ORDER BY {_TIME_ORDER[q.sort]}rank LIMIT ? OFFSET ?",
            [expr, *fparams, limit, offset])
        cur.row_factory = None  # plain tuples: _hit reads by position
        return [_hit(r, r[8]) for r in cur.fetchall()]
    lo, hi = pending
    lparams: list = []
    like = _like_sql(q.tree, lparams, alias="p")
    rows = conn.execute(
        f"SELECT {_HIT_COLUMNS}, h.src, m.content, m.tool_name, m.tool_calls FROM ("
        f" SELECT rowid AS id, rank AS r, 0 AS src FROM {table} WHERE {table} MATCH ?"
        f" UNION ALL"
        f" SELECT p.id, 0.0, 1 FROM messages p WHERE p.id > ? AND p.id <= ? AND {like}"
        f" AND p.id NOT IN (SELECT rowid FROM {table} WHERE {table} MATCH ?)"
        f") h CROSS JOIN messages m ON m.id = h.id "
        f"LEFT JOIN sessions s ON s.id = m.session_id "
        f"WHERE 1{fsql} ORDER BY {_TIME_ORDER[q.sort]}h.src, h.r, h.id LIMIT ? OFFSET ?",
        [expr, lo, hi, *lparams, expr, *fparams, limit, offset]).fetchall()
    out = []
    for r in rows:
        if r["src"] == 0:
            snip = conn.execute(
                f"SELECT {snippet} FROM {table} WHERE {table} MATCH ? AND rowid = ?",
                (expr, r["id"])).fetchone()
            text = snip[0] if snip is not None else None
        else:
            text = like_snippet((r["content"], r["tool_name"], r["tool_calls"]), q.positive)
        out.append(_hit(r, text))
    return out


def _like_page(conn: sqlite3.Connection, q: _Query) -> list[dict]:
    """One page of the LIKE scan, newest first (SPEC §6.3)."""
    if q.tree is None:
        return []
    fsql, fparams = q.filters.sql()
    lparams: list = []
    like = _like_sql(q.tree, lparams)
    try:
        rows = conn.execute(
            f"SELECT {_HIT_COLUMNS}, m.content, m.tool_name, m.tool_calls "
            f"FROM messages m LEFT JOIN sessions s ON s.id = m.session_id "
            f"WHERE {like}{fsql} ORDER BY {_like_order(q.sort)} LIMIT ? OFFSET ?",
            [*lparams, *fparams, q.limit, q.offset]).fetchall()
    except sqlite3.OperationalError as exc:
        # Only SQLite's size limits depend on the query text (variables, expression depth,
        # pattern length); anything else is not the user's doing and propagates.
        if not any(word in str(exc).lower() for word in _SIZE_LIMIT_WORDS):
            raise
        log.warning("search query exceeds an SQLite limit (%s); no results", exc)
        return []
    return [_hit(r, like_snippet((r["content"], r["tool_name"], r["tool_calls"]), q.positive))
            for r in rows]


def _like_order(sort: str | None) -> str:
    return "m.timestamp ASC, m.id ASC" if sort == "oldest" else "m.timestamp DESC, m.id DESC"


def _hit(row: Any, snippet: str | None) -> dict:
    """A hit from a row whose first columns are :data:`_HIT_COLUMNS` (tuple or Row)."""
    return {"id": row[0], "session_id": row[1], "role": row[2], "timestamp": row[3],
            "snippet": snippet if snippet is not None else "", "tool_name": row[4],
            "context": [], "source": row[5], "model": row[6], "session_started": row[7]}


def _pending_range(rows: dict) -> tuple[int, int] | None:
    """``(P, H)`` while an FTS rebuild is pending (SPEC §2.4), else None; ``rows`` maps
    ``state_meta`` keys to values."""
    if rows.get("fts_rebuild_high_water") is None:
        return None
    try:
        hi = int(rows["fts_rebuild_high_water"])
        lo = int(rows.get("fts_rebuild_progress") or 0)
    except (TypeError, ValueError):
        return None
    return (lo, hi) if hi > lo else None


def _attach_context(conn: sqlite3.Connection, hits: list[dict]) -> None:
    """Fill ``context``: previous, hit, next message of the session by (timestamp, id).

    One statement: each hit's row with its two neighbours' rows joined beside it.
    """
    if not hits:
        return
    ids = [h["id"] for h in hits]
    marks = ",".join("?" * len(ids))
    texts: dict[int, dict] = {}
    rows: dict[int, tuple] = {}
    cur = conn.execute(
            f"SELECT nb.id, nb.role, nb.content, p.id, p.role, p.content, n.id, n.role, "
            f"n.content FROM (SELECT h.id AS id, h.role AS role, h.content AS content,"
            f" (SELECT p.id FROM messages p WHERE p.session_id = h.session_id"
            f"   AND (p.timestamp, p.id) < (h.timestamp, h.id)"
            f"   ORDER BY p.timestamp DESC, p.id DESC LIMIT 1) AS prev_id,"
            f" (SELECT n.id FROM messages n WHERE n.session_id = h.session_id"
            f"   AND (n.timestamp, n.id) > (h.timestamp, h.id)"
            f"   ORDER BY n.timestamp, n.id LIMIT 1) AS next_id"
            f" FROM messages h WHERE h.id IN ({marks})) nb "
            f"LEFT JOIN messages p ON p.id = nb.prev_id "
            f"LEFT JOIN messages n ON n.id = nb.next_id", ids)
    cur.row_factory = None  # plain tuples, read by position
    for r in cur.fetchall():
        rows[r[0]] = (r[3], r[0], r[6])
        for k in (0, 3, 6):
            if r[k] is not None and r[k] not in texts:
                texts[r[k]] = {"role": r[k + 1],
                               "content": content_text(decode_content(r[k + 2]))[:CONTEXT_CHARS]}
    for h in hits:
        h["context"] = [dict(texts[i]) for i in rows.get(h["id"], ()) if i is not None]


def partial_trigram_sql(sql: str | None) -> bool:
    """True when ``sql`` (the trigram table's ``CREATE``) is the index of schema 31 stores
    (UPSTREAM_API.md §4.2, §4.5).

    That index has no ``tool_calls`` column and reads a view that also leaves out cron and
    sub-agent sessions, so a substring query it serves would miss their messages; LIKE finds
    them. The v23 trigram index (this code's, and upstream's up to 25) only leaves out tool rows,
    which the route already handles.
    """
    text = "".join((sql or "").split()).lower()
    return "content=" in text and "tool_calls" not in text
