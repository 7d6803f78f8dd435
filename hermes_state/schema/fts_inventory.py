"""What a store's full-text search layout IS, read from its DDL, never from our names (SPEC §2.4).

Stores reach us written by many releases (UPSTREAM_API.md §4.2): external-content tables over
``messages`` holding only ``content`` (upstream v2-v10), inline single-column tables fed with
``content || ' ' || tool_name || ' ' || tool_calls`` (v11-v22, and stores upgraded to >= 23
that never ran optimize-storage), the v23 external layout (``content``, ``tool_name``,
``tool_calls``), the v31 external layout over views, a *mixed* state (external v1 tables whose
update triggers were replaced by inline-style bodies), and stores an earlier version of this
product left with two trigger sets on one table. Trigger names are not evidence: every upstream
release names its triggers ``<table>_insert`` / ``_delete`` / ``_update``, and an earlier
version of this product used ``_ai`` / ``_ad`` / ``_au``.

:func:`inventory` therefore reads ``sqlite_master`` and reports, for every FTS5 table, its
columns and options, and for every trigger on ``messages`` which FTS tables it writes into and
how (the FTS5 ``'delete'`` command or a plain ``DELETE FROM``). :func:`layout_kind` names the
layout of ``messages_fts``; :class:`Inventory` says whether the layout is one this code leaves
as it is and lists what is foreign (duplicate trigger sets, non-canonical names, triggers that
write into a table that is gone, bodies that would corrupt an external-content index).

Read-only: every function here only reads the catalogue.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

#: FTS tables the store may carry, in the order they are reported.
KNOWN_FTS = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")
#: Trigger events, in the canonical order of a trigger set.
EVENTS = ("insert", "delete", "update")

# Layout kinds of ``messages_fts`` (UPSTREAM_API.md §4.2).
NONE = "none"
EXTERNAL_V1 = "external-v1"      # content=messages, one column (upstream v2-v10)
INLINE = "inline"                # inline, one column fed with the concatenated text (v11-v22)
INLINE_3COL = "inline-3col"      # inline, content/tool_name/tool_calls (earlier versions of ours)
EXTERNAL_V23 = "external-v23"    # content='messages', three columns (v23, ours)
EXTERNAL_V31 = "external-v31"    # content='messages_fts_src' (upstream v31)
OTHER = "other"

#: Layouts an earlier release wrote that optimize-storage converts (SPEC §8).
LEGACY_KINDS = frozenset({EXTERNAL_V1, INLINE, INLINE_3COL})


def canonical_trigger(table: str, event: str) -> str:
    """The trigger name every upstream release and this code use: ``<table>_<event>``."""
    return f"{table}_{event}"


@dataclass(frozen=True)
class FtsTable:
    """One FTS5 virtual table as declared."""

    name: str
    columns: tuple[str, ...]
    options: dict
    sql: str

    @property
    def content(self) -> str | None:
        """The ``content=`` option (None for an inline table, ``""`` for contentless)."""
        return self.options.get("content")

    @property
    def external(self) -> bool:
        """True for an external-content (or contentless) table."""
        return self.content is not None

    @property
    def tokenize(self) -> str:
        return self.options.get("tokenize", "unicode61")


@dataclass(frozen=True)
class Trigger:
    """One trigger on ``messages`` and the FTS tables it writes into."""

    name: str
    event: str                       # insert | delete | update
    update_of: tuple[str, ...]       # the ``UPDATE OF`` column list (empty: any column)
    targets: tuple[str, ...]         # FTS tables written into (existing ones)
    missing_targets: tuple[str, ...]  # tables written into that do not exist
    delete_command: bool             # uses the FTS5 'delete' command
    plain_delete: bool               # uses DELETE FROM <fts table>
    sql: str


@dataclass
class Inventory:
    """The FTS layout of one store, read from its catalogue (see the module docstring)."""

    tables: dict[str, FtsTable]
    triggers: list[Trigger]
    views: dict[str, str]
    kind: str
    problems: list[str] = field(default_factory=list)

    def feeding(self, table: str) -> list[Trigger]:
        """The triggers on ``messages`` that write into ``table``."""
        return [t for t in self.triggers if table in t.targets]

    @property
    def fts_triggers(self) -> list[Trigger]:
        """Every trigger on ``messages`` that writes into an FTS table (or a vanished one)."""
        return [t for t in self.triggers if t.targets or t.missing_targets]

    @property
    def foreign(self) -> list[str]:
        """Names of FTS triggers that are not the one canonical trigger of their table/event."""
        out = []
        for t in self.fts_triggers:
            if len(t.targets) != 1 or t.missing_targets or \
                    t.name != canonical_trigger(t.targets[0], t.event):
                out.append(t.name)
        return out

    def as_dict(self) -> dict:
        """JSON-ready summary (``doctor --json``)."""
        return {
            "kind": self.kind,
            "tables": {n: {"columns": list(t.columns), "content": t.content,
                           "tokenize": t.tokenize} for n, t in self.tables.items()},
            "triggers": {t.name: {"event": t.event, "writes": list(t.targets)}
                         for t in self.fts_triggers},
            "foreign_triggers": self.foreign,
            "views": sorted(self.views),
            "problems": list(self.problems),
        }


# ------------------------------------------------------------------------------------ parsing

_COMMENT_RE = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_NAME = r"""(?:"((?:[^"]|"")+)"|`([^`]+)`|\[([^\]]+)\]|([A-Za-z_][\w$]*))"""
_INSERT_RE = re.compile(r"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+(?:main\.)?" + _NAME, re.I)
_DELETE_RE = re.compile(r"\bDELETE\s+FROM\s+(?:main\.)?" + _NAME, re.I)
_UPDATE_RE = re.compile(r"\bUPDATE\s+(?:OR\s+\w+\s+)?(?:main\.)?" + _NAME + r"\s+SET\b", re.I)
_EVENT_RE = re.compile(
    r"\b(?:AFTER|BEFORE|INSTEAD\s+OF)\s+(INSERT|DELETE|UPDATE)(?:\s+OF\s+(.+?))?\s+ON\s", re.I | re.S)


def strip_comments(sql: str) -> str:
    """``sql`` without ``--`` and ``/* */`` comments (v31 trigger bodies carry some)."""
    return _COMMENT_RE.sub(" ", sql or "")


def _name(m: re.Match) -> str:
    raw = next(g for g in m.groups() if g is not None)
    return raw.replace('""', '"')


def _split_args(text: str) -> list[str]:
    """Split the argument list of ``fts5(...)`` on top-level commas, honouring quotes."""
    out, cur, quote, depth = [], [], None, 0
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`[":
            quote = "]" if ch == "[" else ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"`":
        return value[1:-1].replace(value[0] * 2, value[0])
    if value.startswith("[") and value.endswith("]"):
        return value[1:-1]
    return value


def parse_fts5(name: str, sql: str) -> FtsTable | None:
    """The columns and options of a ``CREATE VIRTUAL TABLE ... USING fts5(...)`` statement.

    Returns:
        None when ``sql`` is not an FTS5 table.
    """
    m = re.search(r"\bUSING\s+fts5\s*\((.*)\)\s*$", sql or "", re.I | re.S)
    if m is None:
        return None
    cols, opts = [], {}
    for arg in _split_args(strip_comments(m.group(1))):
        key, eq, value = arg.partition("=")
        if eq:
            opts[key.strip().lower()] = _unquote(value)
        elif arg:
            cols.append(_unquote(arg.split()[0]))
    return FtsTable(name, tuple(cols), opts, sql)


def _parse_trigger(name: str, sql: str, fts: set[str], known: set[str]) -> Trigger | None:
    clean = strip_comments(sql)
    parts = re.split(r"\bBEGIN\b", clean, maxsplit=1, flags=re.I)
    head, body = (parts[0], parts[1]) if len(parts) == 2 else (clean, "")
    ev = _EVENT_RE.search(head)
    if ev is None:
        return None
    event = ev.group(1).lower()
    update_of = tuple(c.strip().strip('"`[]').lower() for c in (ev.group(2) or "").split(",")
                      if c.strip())
    written: list[str] = []
    plain_delete = False
    for regex in (_INSERT_RE, _DELETE_RE, _UPDATE_RE):
        for m in regex.finditer(body):
            target = _name(m)
            written.append(target)
            if regex is _DELETE_RE and target in fts:
                plain_delete = True
    targets = tuple(dict.fromkeys(t for t in written if t in fts))
    # A write into a table that no longer exists fails every statement that fires the trigger.
    # Only names that look like one of our FTS objects are reported as vanished FTS targets.
    missing = tuple(dict.fromkeys(t for t in written if t not in known
                                  and t.lower().startswith("messages_fts")))
    delete_cmd = bool(re.search(r"'delete'", body, re.I)) and bool(targets)
    return Trigger(name, event, update_of, targets, missing, delete_cmd, plain_delete, sql)


def layout_kind(table: FtsTable | None) -> str:
    """Name the layout of ``messages_fts`` from its DDL (UPSTREAM_API.md §4.2)."""
    if table is None:
        return NONE
    cols = tuple(c.lower() for c in table.columns)
    content = table.content
    three = ("content", "tool_name", "tool_calls")
    if content is None:
        if cols == ("content",):
            return INLINE
        if cols == three:
            return INLINE_3COL
        return OTHER
    if content.lower() == "messages":
        if cols == ("content",):
            return EXTERNAL_V1
        if cols == three:
            return EXTERNAL_V23
    if content.lower() == "messages_fts_src" and "tool_name" in cols:
        return EXTERNAL_V31
    return OTHER


def inventory(conn: sqlite3.Connection) -> Inventory:
    """Read the FTS layout of the store behind ``conn`` (read-only; see module docstring)."""
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    known = {r[1] for r in rows}
    tables: dict[str, FtsTable] = {}
    for typ, name, _tbl, sql in rows:
        if typ == "table" and sql and re.search(r"\bVIRTUAL\s+TABLE\b", sql, re.I):
            parsed = parse_fts5(name, sql)
            if parsed is not None:
                tables[name] = parsed
    views = {name: sql for typ, name, _t, sql in rows if typ == "view"}
    triggers = []
    for typ, name, tbl, sql in rows:
        if typ == "trigger" and tbl == "messages" and sql:
            trig = _parse_trigger(name, sql, set(tables), known)
            if trig is not None:
                triggers.append(trig)
    inv = Inventory(tables, triggers, views, layout_kind(tables.get("messages_fts")))
    inv.problems = _problems(inv)
    return inv


def _problems(inv: Inventory) -> list[str]:
    """What is wrong with the trigger sets whatever the layout (foreign, duplicate, broken)."""
    out = []
    for table in sorted(inv.tables):
        feeders = inv.feeding(table)
        if not feeders:
            continue
        by_event: dict[str, list[str]] = {}
        for t in feeders:
            by_event.setdefault(t.event, []).append(t.name)
        for event, names in sorted(by_event.items()):
            if len(names) > 1:
                out.append(f"{table}: {len(names)} {event} triggers ({', '.join(sorted(names))})"
                           " -- every row would be indexed or removed more than once")
        for event in EVENTS:
            if event not in by_event:
                out.append(f"{table}: no {event} trigger")
        if inv.tables[table].external:
            bad = sorted(t.name for t in feeders if t.plain_delete)
            if bad:
                out.append(f"{table} is external-content but {', '.join(bad)} removes rows with "
                           "a plain DELETE (the index would lose the wrong words)")
    for t in inv.fts_triggers:
        if t.missing_targets:
            out.append(f"trigger {t.name} writes into {', '.join(t.missing_targets)}, which does "
                       "not exist (every write to messages would fail)")
        elif t.name != canonical_trigger(t.targets[0], t.event) or len(t.targets) != 1:
            out.append(f"trigger {t.name} feeds {', '.join(t.targets)} under a foreign name")
    return out
