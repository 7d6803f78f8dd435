"""The FTS layout of a store, read-only: what it is, what the open would do, whether it is whole.

:func:`assess` names the plan for the live layout (keep, complete, replace, optimize);
:func:`status` adds the pending rebuild markers of SPEC §2.4 (:func:`rebuild_markers`) and the
``fts_stale`` mark of SPEC §12; :func:`verify_fts` compares every FTS table with the rows it
should index. Nothing here writes: the switch and the chunked back-fill are
:mod:`hermes_state.fts.switch` and :mod:`hermes_state.fts.backfill`.
"""


from __future__ import annotations

import hashlib
import re
import sqlite3

from .fts_inventory import (
    EXTERNAL_V23,
    INLINE,
    LEGACY_KINDS,
    NONE,
    FtsTable,
    Inventory,
    inventory,
    parse_fts5,
)
from .history import INLINE_TEXT
from .tables import (
    FTS_OFF_KEY,
    FTS_TABLE_SQL,
    FTS_TRIGGERS_SQL,
    TRIGRAM_TABLE_SQL,
    TRIGRAM_TRIGGERS_SQL,
    TRIGRAM_VIEW,
    TRIGRAM_VIEW_SQL,
    fts5_available,
    split_triggers,
    trigram_supported,
)

HIGH_WATER_KEY = "fts_rebuild_high_water"
PROGRESS_KEY = "fts_rebuild_progress"
STALE_KEY = "fts_stale"  # set by the corruption handling (SPEC §12); cleared by the switch
DEFAULT_CHUNK = 500  # SPEC §2.4: rows per write transaction

#: FTS tables this module rebuilds and the row filter of each.
FTS_LAYOUT_TABLES = (("messages_fts", ""), ("messages_fts_trigram", "AND role != 'tool'"))


def rebuild_markers(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """``(P, H)`` while a rebuild is pending (SPEC §2.4), else None."""
    try:
        rows = dict(conn.execute("SELECT key, value FROM state_meta WHERE key IN (?, ?)",
                                 (HIGH_WATER_KEY, PROGRESS_KEY)).fetchall())
    except sqlite3.OperationalError:
        return None
    if HIGH_WATER_KEY not in rows:
        return None
    return int(rows.get(PROGRESS_KEY) or 0), int(rows[HIGH_WATER_KEY] or 0)


OPTIMIZE_KEY = "fts_optimize_available"  # UPSTREAM_API.md §4.4: a legacy layout is left
#: FTS tables of the layouts this module replaces (``messages_fts_cjk`` is not one of them).
LAYOUT_TABLES = ("messages_fts", "messages_fts_trigram")
#: Views a legacy or newer layout may have created for its external-content tables.
LAYOUT_VIEWS = ("messages_fts_src", TRIGRAM_VIEW)


def _norm(sql: str) -> str:
    """DDL compared by meaning of text: no IF NOT EXISTS, one space, lower case, no ``;``."""
    text = " ".join(sql.replace("IF NOT EXISTS", " ").split()).lower()
    return text.rstrip(";").strip()


_CANON_TRIGGERS = {sql.split("IF NOT EXISTS", 1)[1].split()[0]: _norm(sql)
                   for sql in split_triggers(FTS_TRIGGERS_SQL + TRIGRAM_TRIGGERS_SQL)}
_CANON_TABLES = {t.name: t for t in (parse_fts5("messages_fts", FTS_TABLE_SQL.strip().rstrip(";")),
                                      parse_fts5("messages_fts_trigram",
                                                 TRIGRAM_TABLE_SQL.strip().rstrip(";")))}


def _same_table(live: FtsTable, want: FtsTable) -> bool:
    opts = {k: v.lower() for k, v in live.options.items()}
    wanted = {k: v.lower() for k, v in want.options.items()}
    return tuple(c.lower() for c in live.columns) == want.columns and opts == wanted


def _canonical_external(conn: sqlite3.Connection, inv: Inventory, stale: bool) -> bool:
    """The v23 layout exactly as this code creates it (tables, view, one trigger set each)."""
    for name, table in inv.tables.items():
        if name in _CANON_TABLES and not _same_table(table, _CANON_TABLES[name]):
            return False
    if "messages_fts_trigram" in inv.tables and _norm(inv.views.get(TRIGRAM_VIEW) or "") != \
            _norm(TRIGRAM_VIEW_SQL.strip()):
        return False
    if inv.problems and not (stale and all("no " in p and " trigger" in p for p in inv.problems)):
        return False
    present = {t.name: t for t in inv.fts_triggers}
    for name, trig in present.items():
        if _CANON_TRIGGERS.get(name) != _norm(trig.sql):
            return False
    if stale:
        return True  # switched off after corruption (SPEC §12): rebuild_fts() restores them
    want = {n for n in _CANON_TRIGGERS if n.rsplit("_", 1)[0] in inv.tables}
    return set(present) == want


def _inline_intact(inv: Inventory) -> bool:
    """Upstream's inline layout (v11-v22) with exactly its six triggers and nothing foreign."""
    fts = inv.tables["messages_fts"]
    tri = inv.tables.get("messages_fts_trigram")
    if tri is not None and (tri.external or tuple(c.lower() for c in tri.columns) != ("content",)
                            or tri.tokenize.lower() != "trigram"):
        return False
    if fts.external or inv.problems or inv.foreign:
        return False
    for table in [t for t in LAYOUT_TABLES if t in inv.tables]:
        if sorted(t.event for t in inv.feeding(table)) != ["delete", "insert", "update"]:
            return False
    return True


#: sha256 of :func:`layout_fingerprint` for the v23 layout exactly as this code creates it
#: (with and without ``messages_fts_cjk``): :func:`assess` answers ``"ok"`` for them without
#: parsing the schema (issue 24 item 2: every open asks). tests/test_fts_layout.py keeps the set
#: in step with the schema text.
CANONICAL_FINGERPRINTS = frozenset({
    "a5f0522743f71f0cac08066b6c8b04bbc1bcb241524e4ede786fc0ae390fd5ca",  # without the CJK table
})


def layout_fingerprint(conn: sqlite3.Connection) -> str:
    """sha256 over every ``sqlite_master`` row of the FTS layout (``messages_fts*`` objects and
    every trigger on ``messages``): type, name, table and SQL text, in name order."""
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name LIKE 'messages\\_fts%' "
        "ESCAPE '\\' OR (type = 'trigger' AND tbl_name = 'messages') ORDER BY name").fetchall()
    return hashlib.sha256(repr([tuple(r) for r in rows]).encode("utf-8", "surrogatepass")
                          ).hexdigest()


def assess(conn: sqlite3.Connection, inv: Inventory | None = None) -> str:
    """What a writable open must do to the FTS layout of a store at version <= 23.

    Returns:
        ``"ok"`` (the v23 layout exactly, or switched off after corruption), ``"legacy"``
        (upstream's intact inline layout, kept until optimize-storage with
        ``fts_optimize_available``), ``"create"`` (v23 tables missing: create and back-fill
        them) or ``"replace"`` (anything else: external v1, mixed, foreign or duplicate
        trigger sets, an earlier version's layout -- replaced whole by :func:`replace_layout`).
    """
    if inv is None and layout_fingerprint(conn) in CANONICAL_FINGERPRINTS:
        return "ok"  # the v23 layout, byte for byte as this code creates it
    inv = inv or inventory(conn)
    stale = stale_tables(conn)
    if stale:
        if fts_off(conn) and fts5_available(conn):
            return "replace"  # switched off for want of FTS5, which is back (issue 23.3)
        return "ok"  # switched off after corruption (SPEC §12): rebuild_fts()/optimize-storage
    if inv.kind == NONE:
        if any(set(t.targets) - {"messages_fts_cjk"} or t.missing_targets
               for t in inv.fts_triggers) or "messages_fts_trigram" in inv.tables:
            return "replace"
        return "ok" if stale else "create"
    if inv.kind == INLINE and _inline_intact(inv):
        return "legacy"
    if inv.kind == EXTERNAL_V23 and _canonical_external(conn, inv, stale):
        if not stale and "messages_fts_trigram" not in inv.tables and trigram_supported(conn):
            return "create"
        return "ok"
    return "replace"


def status(conn: sqlite3.Connection) -> dict:
    """The FTS layout of a store and any pending rebuild (read-only).

    Returns:
        ``{"layout": kind, "legacy": bool, "pending": (P, H) | None, "stale": bool,
        "plan": assess(), "foreign": [trigger names], "problems": [...]}``; layout kinds as
        in :mod:`hermes_state.schema.fts_inventory`; ``stale`` means the index was switched off after
        corruption (SPEC §12) and must be rebuilt.
    """
    inv = inventory(conn)
    return {"layout": inv.kind, "legacy": inv.kind in LEGACY_KINDS or inv.kind == NONE,
            "pending": rebuild_markers(conn), "stale": stale_tables(conn),
            "plan": assess(conn, inv), "foreign": inv.foreign, "problems": list(inv.problems)}


def fts_off(conn: sqlite3.Connection) -> bool:
    """``state_meta['fts_no_fts5']``: the index was switched off because an SQLite without FTS5
    opened the store (issue 23.3)."""
    try:
        return conn.execute("SELECT 1 FROM state_meta WHERE key = ?",
                            (FTS_OFF_KEY,)).fetchone() is not None
    except sqlite3.OperationalError:
        return False


def stale_tables(conn: sqlite3.Connection) -> bool:
    """``state_meta['fts_stale']``: the index was switched off after corruption (SPEC §12)."""
    try:
        return conn.execute(
            f"SELECT 1 FROM state_meta WHERE key = '{STALE_KEY}'").fetchone() is not None
    except sqlite3.OperationalError:
        return False


def _vocab_instances(conn: sqlite3.Connection, schema_name: str, table: str) -> list[tuple]:
    vocab = f"temp._vocab_{schema_name}_{table}"
    conn.execute(f"DROP TABLE IF EXISTS {vocab}")
    conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab('{schema_name}', '{table}', "
                 "'instance')")
    try:
        return sorted(tuple(r) for r in conn.execute(f"SELECT term, doc, col, offset FROM {vocab}"))
    finally:
        conn.execute(f"DROP TABLE {vocab}")


def _expected_rows_sql(table: FtsTable, kind: str, gate: str) -> str:
    """``SELECT rowid, <columns>`` of the rows ``table`` should index, whatever its layout.

    External-content tables index exactly the rows of their content table or view; upstream's
    inline tables index ``content || ' ' || tool_name || ' ' || tool_calls`` of every row; the
    three-column inline tables of earlier versions of this code indexed the columns (the trigram
    one without ``role='tool'`` rows).
    """
    cols = ", ".join(f'"{c}"' for c in table.columns)
    if table.external:
        rowid = table.options.get("content_rowid", "rowid")
        row_gate = re.sub(r"\bid\b", rowid, gate)
        return f'SELECT "{rowid}", {cols} FROM "{table.content}" WHERE 1 {row_gate}'
    if table.columns == ("content",):
        return f"SELECT id, {INLINE_TEXT.format(r='messages')} FROM messages WHERE 1 {gate}"
    tool = "AND role != 'tool'" if table.tokenize.lower() == "trigram" else ""
    return f"SELECT id, {cols} FROM messages WHERE 1 {tool} {gate}"


def verify_fts(conn: sqlite3.Connection) -> dict[str, str]:
    """Compare every FTS table with an index built from scratch out of its source rows.

    For each of ``messages_fts`` / ``messages_fts_trigram`` present: FTS5 ``integrity-check``,
    then the full list of (term, rowid, column, offset) instances is compared with that of a
    fresh inline index over the rows the layout indexes (:func:`_expected_rows_sql`: an
    external table's content table or view, upstream's concatenated text for its inline
    tables), built in a ``temp`` table with the same tokenizer. Equal lists prove the index
    holds every row exactly once with its current text (no row missing, stale or indexed
    twice), whatever the layout. While a rebuild is pending, rows in ``(P, H]`` are expected to
    be absent. Cost: proportional to the store (meant for tests, ``doctor --deep`` and
    benchmarks on small stores).

    Args:
        conn: any connection to the store (writes only to ``temp``).
    Returns:
        ``{table: "ok" | problem}``.
    """
    out: dict[str, str] = {}
    inv = inventory(conn)
    markers = rebuild_markers(conn)
    gate = ""
    if markers is not None:
        gate = f"AND (id <= {markers[0]} OR id > {markers[1]})"
    for name in LAYOUT_TABLES:
        table = inv.tables.get(name)
        if table is None:
            continue
        try:
            conn.execute(f"INSERT INTO {name}({name}) VALUES('integrity-check')")
        except sqlite3.DatabaseError as exc:
            out[name] = f"integrity-check: {exc}"
            continue
        tokenize = table.options.get("tokenize")
        tok = f", tokenize='{tokenize}'" if tokenize else ""
        cols = ", ".join(f'"{c}"' for c in table.columns)
        ref = f"_ref_{name}"
        conn.execute(f"DROP TABLE IF EXISTS temp.{ref}")
        conn.execute(f"CREATE VIRTUAL TABLE temp.{ref} USING fts5({cols}{tok})")
        try:
            conn.execute(f"INSERT INTO temp.{ref}(rowid, {cols}) "
                         + _expected_rows_sql(table, inv.kind, gate))
            live = _vocab_instances(conn, "main", name)
            want = _vocab_instances(conn, "temp", ref)
        finally:
            conn.execute(f"DROP TABLE IF EXISTS temp.{ref}")
        if live == want:
            out[name] = "ok"
        else:
            live_docs = {r[1] for r in live}
            want_docs = {r[1] for r in want}
            dup = len(live) - len(set(live))
            out[name] = (f"index differs from messages: {len(live)} vs {len(want)} instances, "
                         f"missing rows {sorted(want_docs - live_docs)[:10]}, extra rows "
                         f"{sorted(live_docs - want_docs)[:10]}, duplicated instances {dup}")
    return out
