"""Upstream's session listing: rich rows, counts, compression-tip projection, id search, cron
runs (UPSTREAM_API §2.4, §2.5, §2.11, D10).

Rows are the raw sessions columns (D7) plus ``preview`` and ``last_active``:

- ``preview``: the first user message with non-NULL content by ``(timestamp, id)``: its first 63
  characters with every LF and CR replaced by a space, stripped, then cut to 60 + ``"..."`` when
  longer (structured content shows its stored JSON text, as upstream);
- ``last_active``: the newest message timestamp, else ``started_at``.

The default listing shows *listable* rows only (:mod:`hermes_state.api.filters`): every child that is
not a branch is hidden (a compression continuation appears through its root, projected), and so
is every delegate sub-agent. *Tip projection*: a listed root that ended with compression shows
its chain's live tip (id, end state, counters, title, preview, model, prompt, workspace) at the
root's position, with ``_lineage_root_id`` = the root.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from ..store.reads import in_snapshot
from .compression import compression_tip
from .filters import (
    activity,
    archived_sql,
    cwd_prefix_sql,
    is_continuation,
    is_listable,
)
from .sessions import session_row
from .text import clean_text, int_arg

PREVIEW_SOURCE_CHARS = 63
PREVIEW_CHARS = 60
#: Bytes of the first user message fetched for the preview: 63 characters of up to 4 bytes.
_PREVIEW_BYTES = 4 * PREVIEW_SOURCE_CHARS

#: Keys a projected root takes from its compression tip.
PROJECTED_KEYS = ("id", "ended_at", "end_reason", "message_count", "tool_call_count", "title",
                  "last_active", "preview", "model", "system_prompt", "cwd", "git_branch",
                  "git_repo_root")

ROW_EXTRAS = f"""
    (SELECT substr(CAST(m.content AS BLOB), 1, {_PREVIEW_BYTES}) FROM messages m
      WHERE m.session_id = s.id AND m.role = 'user' AND m.content IS NOT NULL
      ORDER BY m.timestamp, m.id LIMIT 1) AS _preview_raw,
    {activity('s')} AS last_active"""


def rich_preview(raw: Any) -> str:
    """The listing preview of a first user message's stored content (module docstring)."""
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "ignore")
    text = str(raw)[:PREVIEW_SOURCE_CHARS].replace("\n", " ").replace("\r", " ").strip()
    return text[:PREVIEW_CHARS] + "..." if len(text) > PREVIEW_CHARS else text


def finish_row(row: sqlite3.Row, c: sqlite3.Connection) -> dict:
    """A listing row: raw columns (the prompt resolved on schema 25+ stores, D4),
    ``last_active`` and the ``preview`` text."""
    out = session_row(row, c)
    out["preview"] = rich_preview(out.pop("_preview_raw", None))
    return out


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _conditions(*, source: str | None = None, exclude_sources: Any = None,
                cwd_prefix: str | None = None, min_message_count: int = 0,
                include_archived: bool = False, archived_only: bool = False,
                listable_only: bool = True) -> tuple[list[str], list]:
    conds: list[str] = []
    params: list = []
    if listable_only:
        conds.append(is_listable("s"))
    if source is not None:
        conds.append("s.source = ?")
        params.append(clean_text(source))
    if exclude_sources:
        items = [clean_text(x) for x in exclude_sources]
        conds.append(f"s.source NOT IN ({','.join('?' * len(items))})")
        params += items
    if cwd_prefix:
        sql, vals = cwd_prefix_sql(cwd_prefix)
        conds.append(sql)
        params += vals
    if min_message_count and min_message_count > 0:
        conds.append("COALESCE(s.message_count, 0) >= ?")
        params.append(int(min_message_count))
    arch = archived_sql(include_archived, archived_only)
    if arch:
        conds.append(arch)
    return conds, params


def _where(conds: list[str]) -> str:
    return " WHERE " + " AND ".join(conds) if conds else ""


def _chain_match(id_query: str | None, search_query: str | None) -> tuple[str, list]:
    """Condition on ``x`` (a row of the forward chain) for ``id_query`` / ``search_query``."""
    parts: list[str] = []
    params: list = []
    if id_query:
        parts.append("x.id LIKE ? ESCAPE '\\'")
        params.append(f"%{_like_escape(clean_text(id_query))}%")
    if search_query:
        needle = clean_text(search_query)
        alts = ["x.title LIKE ? ESCAPE '\\'", "x.id LIKE ? ESCAPE '\\'"]
        params += [f"%{_like_escape(needle)}%"] * 2
        squashed = re.sub(r"[\W_]", "", needle)
        if squashed:
            alts.append("REPLACE(REPLACE(REPLACE(REPLACE(x.title, '-', ''), '_', ''), '.', ''), "
                        "' ', '') LIKE ? ESCAPE '\\'")
            params.append(f"%{_like_escape(squashed)}%")
        parts.append("(" + " OR ".join(alts) + ")")
    return " AND ".join(parts), params


def _by_last_active_sql(where: str, match: str) -> str:
    chain_filter = (f" AND EXISTS (SELECT 1 FROM fwd f2 JOIN sessions x ON x.id = f2.id "
                    f"WHERE f2.root = s.id AND {match})") if match else ""
    return f"""
WITH RECURSIVE cand(id) AS (SELECT s.id FROM sessions s{where}),
fwd(root, id) AS (
    SELECT id, id FROM cand
    UNION
    SELECT f.root, k.id FROM fwd f
    JOIN sessions p ON p.id = f.id AND p.end_reason = 'compression'
    JOIN sessions k ON k.parent_session_id = p.id
    WHERE {is_continuation('k')}
),
eff(root, eff) AS (
    SELECT f.root, MAX({activity('e')}) FROM fwd f JOIN sessions e ON e.id = f.id GROUP BY f.root
)
SELECT s.*, {ROW_EXTRAS} FROM sessions s JOIN eff ON eff.root = s.id
WHERE 1{chain_filter}
ORDER BY eff.eff DESC, s.started_at DESC, s.id DESC LIMIT ? OFFSET ?"""


def project_tips(c: sqlite3.Connection, rows: list[dict]) -> None:
    """Tip projection (module docstring), in place."""
    for row in rows:
        if row.get("end_reason") != "compression":
            continue
        tip = compression_tip(c, row["id"])
        if tip == row["id"]:
            continue
        found = c.execute(f"SELECT s.*, {ROW_EXTRAS} FROM sessions s WHERE s.id = ?",
                          (tip,)).fetchone()
        if found is None:
            continue
        tip_row = finish_row(found, c)
        root = row["id"]
        for key in PROJECTED_KEYS:
            row[key] = tip_row.get(key)
        row["_lineage_root_id"] = root


class ListingMixin:
    """Listing API; needs ``self._read(fn)``."""

    def list_sessions_rich(self, source: str | None = None, exclude_sources: Any = None,
                           cwd_prefix: str | None = None, limit: int = 20, offset: int = 0,
                           include_children: bool = False, min_message_count: int = 0,
                           project_compression_tips: bool = True,
                           order_by_last_active: bool = False, include_archived: bool = False,
                           archived_only: bool = False, id_query: str | None = None,
                           search_query: str | None = None,
                           compact_rows: bool = False) -> list[dict]:
        """Sessions for a picker (module docstring; UPSTREAM_API §2.4).

        Args:
            source: exact source; exclude_sources: sources left out.
            cwd_prefix: ``cwd`` equal to it or under it (``/repo`` never matches ``/repo-wt``).
            limit, offset: the page (in SQL).
            include_children: every row, not only listable ones (no tip projection then).
            min_message_count: ``message_count`` at least this (when > 0).
            project_compression_tips: show a compression root as its live tip.
            order_by_last_active: order by the activity of the row's whole forward compression
                chain (then ``started_at``, ``id``), instead of ``started_at`` DESC.
            include_archived / archived_only: archived rows are left out by default.
            id_query / search_query (with ``order_by_last_active``): case-insensitive substring
                of any chain member's id (``id_query``), or title or id (``search_query``, also
                matched with punctuation and spaces removed: ``an94`` finds ``AN-94``).
            compact_rows: leave out the ``system_prompt`` key.
        Returns:
            Row dicts (raw columns, ``preview``, ``last_active``, ``_lineage_root_id`` on
            projected rows).
        """
        conds, params = _conditions(
            source=source, exclude_sources=exclude_sources, cwd_prefix=cwd_prefix,
            min_message_count=min_message_count, include_archived=include_archived,
            archived_only=archived_only, listable_only=not include_children)
        page = [int_arg(limit, "limit"), max(int_arg(offset or 0, "offset"), 0)]

        def fn(c: sqlite3.Connection) -> list[dict]:
            if order_by_last_active:
                match, mparams = _chain_match(id_query, search_query)
                sql = _by_last_active_sql(_where(conds), match)
                rows = c.execute(sql, [*params, *mparams, *page]).fetchall()
            else:
                rows = c.execute(
                    f"SELECT s.*, {ROW_EXTRAS} FROM sessions s{_where(conds)} "
                    f"ORDER BY s.started_at DESC, s.rowid DESC LIMIT ? OFFSET ?",
                    [*params, *page]).fetchall()
            out = [finish_row(r, c) for r in rows]
            if project_compression_tips and not include_children:
                project_tips(c, out)
            if compact_rows:
                for row in out:
                    row.pop("system_prompt", None)
            return out

        return self._read(lambda c: in_snapshot(c, lambda: fn(c)))

    def session_count(self, source: str | None = None, cwd_prefix: str | None = None,
                      min_message_count: int = 0, include_archived: bool = False,
                      archived_only: bool = False, exclude_children: bool = False,
                      exclude_sources: Any = None) -> int:
        """How many sessions the listing filters match; children are counted unless
        ``exclude_children`` (then only listable rows), archived rows only on request."""
        conds, params = _conditions(
            source=source, exclude_sources=exclude_sources, cwd_prefix=cwd_prefix,
            min_message_count=min_message_count, include_archived=include_archived,
            archived_only=archived_only, listable_only=exclude_children)
        return self._read(lambda c: c.execute(
            f"SELECT COUNT(*) FROM sessions s{_where(conds)}", params).fetchone()[0])

    def search_sessions(self, source: str | None = None, limit: int = 20,
                        offset: int = 0) -> list[dict]:
        """Every session (of ``source``; children and archived rows included) with
        ``last_active``, most recently active first (then ``started_at``, ``id``)."""
        src = clean_text(source)
        return self._read(lambda c: [session_row(r, c) for r in c.execute(
            f"SELECT s.*, {activity('s')} AS last_active FROM sessions s "
            "WHERE (? IS NULL OR s.source = ?) "
            "ORDER BY last_active DESC, s.started_at DESC, s.id DESC LIMIT ? OFFSET ?",
            (src, src, int_arg(limit, "limit"), max(int_arg(offset or 0, "offset"), 0)))])

    def search_sessions_by_id(self, query: str, limit: int = 20,
                              include_archived: bool = True) -> list[dict]:
        """Listing rows whose compression chain has an id containing ``query``.

        Candidates are :meth:`list_sessions_rich` rows (listable, tip-projected, 4 × ``limit``,
        most recently active first) whose chain matches; they are ranked exact < prefix <
        substring against the row id or its ``_lineage_root_id`` (stable), then cut to
        ``limit``. ``[]`` for a blank query or ``limit <= 0``.
        """
        needle = (query or "").strip().lower() if isinstance(query, str) else ""
        limit = int_arg(limit, "limit")
        if not needle or limit <= 0:
            return []
        rows = self.list_sessions_rich(limit=4 * limit, order_by_last_active=True,
                                       id_query=needle, include_archived=include_archived)

        def rank(row: dict) -> int:
            best = 3
            for value in (row.get("id"), row.get("_lineage_root_id")):
                v = (value or "").lower()
                if v == needle:
                    best = min(best, 0)
                elif v.startswith(needle):
                    best = min(best, 1)
                elif needle in v:
                    best = min(best, 2)
            return best

        return sorted(rows, key=rank)[:limit]

    def list_cron_job_runs(self, job_id: str, limit: int = 20, offset: int = 0) -> list[dict]:
        """The sessions of one cron job (``source='cron'``, id ``cron_<job_id>_...``), newest
        ``started_at`` first (then ``id``), with ``preview`` and ``last_active``.

        A true prefix match (``cron_alpha_`` never finds ``cron_alpha2_...``), answered through
        ``idx_sessions_source``.
        """
        prefix = f"cron_{clean_text(str(job_id))}_"
        upper = prefix[:-1] + "`"  # the character after "_": every id with the prefix is below

        def fn(c: sqlite3.Connection) -> list[dict]:
            hint = " INDEXED BY idx_sessions_source" if c.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'index' AND "
                "name = 'idx_sessions_source'").fetchone() else ""
            return [finish_row(r, c) for r in c.execute(
                f"SELECT s.*, {ROW_EXTRAS} FROM sessions s{hint} WHERE s.source = 'cron' "
                "AND s.id >= ? AND s.id < ? ORDER BY s.started_at DESC, s.id DESC "
                "LIMIT ? OFFSET ?", (prefix, upper, int_arg(limit, "limit"),
                                     max(int_arg(offset or 0, "offset"), 0)))]

        return self._read(fn)
