"""Real stores as the ground truth of the migration gate (issue 10, SPEC §16.6).

A *real store* is a ``state.db`` some release of Hermes Agent wrote (the bundled ones in
``tests/fixtures/upstream/``, or a directory of a user's own stores passed as ``--stores DIR``),
optionally with a ``dump.json`` beside it (every row of every non-FTS table before anything else
opened it). Nothing here ever opens a real store in place -- even a read-only SQLite open of a
WAL store creates sidecars next to it -- every check works on a copy.

:func:`check_store` is "every store users really have still works", as one list of problems:

* the open succeeds (a store newer than the code keeps its version, every schema object it had
  and its journal mode);
* every value of the dump is unchanged, except the documented data steps of the migration
  (:func:`value_problems`: NULL billing key parts of ``session_model_usage`` become ``''``, NULL
  ``messages.active`` becomes 1, the v16 step adds ``$._delegate_from`` to delegate rows, the v4
  step clears older duplicate titles, the v18 step fills NULL gateway metadata);
* the API reads the upstream data (``get_session`` with the system prompt wherever the store
  keeps it, ``get_messages``, conversation replay) and ``search_messages`` finds the words the
  store holds (English, Chinese, Japanese, Korean);
* append, create, title, end, delete and ``update_token_counts`` succeed and new words are found;
* ``PRAGMA integrity_check``, ``foreign_key_check`` and every FTS index (FTS5 integrity-check and
  a comparison with an index rebuilt from its source rows) are sound;
* a second open writes nothing (no write transaction, ``data_version`` and bytes unchanged).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hermes_state
from hermes_state import SCHEMA_VERSION, SessionDB
from hermes_state.testing import (
    FIXTURE_ROOT,
    inventory,
    sqlite_problems,
    verify_fts,
)

from ..files import inputs

#: Where the store package was imported from (see :data:`chaos.matrix.open_probe.STORE_ROOT`).
STORE_ROOT = Path(hermes_state.__file__).resolve().parent.parent
#: Largest ``dump.json`` read (bytes): a dump is every row of a store, as JSON.
MAX_DUMP_BYTES = 1024 ** 3
#: The files of a store copied with it (a live WAL included).
SIDECARS = ("-wal", "-shm", "-journal")
_SQLITE_HEADER = b"SQLite format 3\x00"
#: Words upstream wrote into the bundled stores that search must find.
FIXTURE_WORDS = ("kubernetes", "rollback", "记忆断裂", "こんにちは", "안녕하세요", "東京", "ledger",
                 "billing")
#: Rows are matched on these columns (other tables: on every column of the dump).
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("id",), "messages": ("id",), "state_meta": ("key",), "system_prompts": ("hash",),
    "gateway_routing": ("scope", "session_key"), "compression_locks": ("session_id",),
    "async_delegations": ("delegation_id",),
    "session_model_usage": ("session_id", "model", "billing_provider", "billing_base_url",
                            "billing_mode", "task"),
}
#: state_meta keys this code may add to a store it opens.
OWN_META = frozenset({"db_file_generation", "fts_optimize_available", "fts_backfill",
                      "fts_cjk_stale", "fts_rebuild_high_water", "fts_rebuild_progress"})
_JSON_PREFIX = "\x00json:"


@dataclass(frozen=True)
class RealStore:
    """One store to check: ``name`` for reports, ``path`` of its ``state.db``, its dump."""

    name: str
    path: Path
    dump_path: Path | None = None

    def dump(self) -> dict | None:
        """The ``dump.json`` beside the store, or None (read by :mod:`chaos.files.inputs`: never
        through a link, never blocking, at most :data:`MAX_DUMP_BYTES`).

        Raises:
            chaos.files.inputs.InputError, ValueError: the dump cannot be read or is not JSON.
        """
        if self.dump_path is None:
            return None
        return json.loads(inputs.read_text(self.dump_path, MAX_DUMP_BYTES))


def copy_store(src: Path, dest_dir: Path) -> Path:
    """Copy the store ``src`` with its sidecars (a live WAL included) to ``dest_dir/state.db``,
    and the gateway's ``sessions/sessions.json`` beside it (read by the v18 step), every file
    read by :mod:`chaos.files.inputs` (never through a planted link, never blocking on a FIFO).

    Raises:
        chaos.files.inputs.InputError: the store or a file beside it is not a regular file.
    """
    src, dest_dir = Path(src), Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / "state.db"
    for suffix in ("",) + SIDECARS:
        side = Path(f"{src}{suffix}")
        if suffix == "" or os.path.lexists(side):
            inputs.copy_file(side, f"{dest}{suffix}")
    sessions = src.parent / "sessions" / "sessions.json"
    if os.path.lexists(sessions):
        (dest_dir / "sessions").mkdir(exist_ok=True)
        inputs.copy_file(sessions, dest_dir / "sessions" / "sessions.json")
    return dest


def unusable(store: "RealStore") -> str | None:
    """Why ``store`` cannot be tested (it gets a SKIPPED row saying so), or None.

    Refused: a store file or a sidecar that is a link, a FIFO, a socket, a device or a
    directory; a file that is not SQLite (its header); a store SQLite cannot read (damaged,
    encrypted); a ``dump.json`` that cannot be read or is not JSON. Never raises.
    """
    try:
        with inputs.open_binary(store.path) as fh:
            head = fh.read(len(_SQLITE_HEADER))
        if head != _SQLITE_HEADER:
            return (f"not a SQLite database: its header is {head[:16]!r}, not "
                    f"{_SQLITE_HEADER!r}")
        for suffix in SIDECARS:
            side = Path(f"{store.path}{suffix}")
            if os.path.lexists(side):
                inputs.open_binary(side).close()
        store.dump()
    except inputs.InputError as exc:
        return str(exc)
    except ValueError as exc:
        return f"{store.dump_path}: not JSON: {exc}"
    try:
        read_dump(store.path)
    except (sqlite3.Error, inputs.InputError, OSError) as exc:
        return f"SQLite cannot read it: {type(exc).__name__}: {exc}"
    return None


def discover(root: Path | str, prefix: str = "") -> list[RealStore]:
    """Every store under ``root``: files named ``state.db`` or ``*.db`` (never sidecars).

    Args:
        root: a directory (searched recursively) or one database file.
        prefix: prepended to each name (``"upstream/"``).
    Returns:
        Stores sorted by name; ``dump_path`` set when a ``dump.json`` sits beside the file.
    Raises:
        FileNotFoundError: ``root`` does not exist.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no such store directory: {root}")
    # Anything named *.db but a directory is a candidate: a link, a FIFO or a damaged file
    # is listed too, and gets a SKIPPED row saying why (:func:`unusable`), never a silent gap.
    files = [root] if not root.is_dir() else sorted(
        p for p in root.rglob("*.db") if not stat.S_ISDIR(os.lstat(p).st_mode))
    out = []
    for f in files:
        rel = f.parent.relative_to(root) if root.is_dir() else Path(f.parent.name)
        name = prefix + (str(rel) if str(rel) != "." else f.stem)
        if f.name != "state.db":
            name += f"/{f.name}"
        dump = f.parent / "dump.json"
        planted = os.path.lexists(dump) and f.name == "state.db"  # read (or refused) later
        out.append(RealStore(name, f, dump if planted else None))
    return out


def fixture_stores() -> list[RealStore]:
    """The bundled upstream stores (``tests/fixtures/upstream/v*/state.db``)."""
    return discover(FIXTURE_ROOT, "upstream/") if FIXTURE_ROOT.is_dir() else []


def _cell(value: Any) -> Any:
    return {"__bytes__": value.hex()} if isinstance(value, bytes) else value


def read_dump(db_path: Path) -> dict:
    """Every row of every non-FTS table, in the shape of ``dump.json`` (reads a private copy)."""
    with tempfile.TemporaryDirectory(prefix="real-dump-") as tmp:
        copy = copy_store(Path(db_path), Path(tmp))
        conn = sqlite3.connect(str(copy))
        try:
            inv = inventory(conn)
            shadows = tuple(f"{t}_" for t in inv.tables)
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name")]
            tables = {}
            for name in names:
                if name in inv.tables or name.startswith(shadows):
                    continue
                cur = conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid')
                cols = [d[0] for d in cur.description]
                tables[name] = {"columns": cols,
                                "rows": [dict(zip(cols, map(_cell, r))) for r in cur.fetchall()]}
            version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        finally:
            conn.close()
    return {"schema_version": version, "tables": tables}


def _rows(dump: dict, table: str) -> list[dict]:
    return dump["tables"].get(table, {}).get("rows", [])


def _key(table: str, row: dict) -> tuple:
    cols = ROW_KEYS.get(table)
    if cols is None:
        return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in row.items()))
    if table == "session_model_usage":
        return tuple(row.get(c) or "" for c in cols)  # NULL key parts heal to ''
    return tuple(row.get(c) for c in cols)


def _json(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _allowed(table: str, col: str, old: Any, new: Any, row: dict, version: int) -> bool:
    """The documented data steps a migration may apply to an upstream value."""
    if table == "session_model_usage" and col in ("billing_provider", "billing_base_url",
                                                   "billing_mode", "task"):
        return old is None and new == ""
    if table == "messages" and col == "active":
        return old is None and new == 1
    if table == "sessions" and version < 16 and col == "model_config":
        before = _json(old) if old is not None else {}
        after = _json(new)
        if isinstance(before, dict) and isinstance(after, dict):
            tag = after.pop("_delegate_from", None)
            return after == before and tag in (row.get("parent_session_id"), "__orphaned__")
    if table == "sessions" and version < 4 and col == "title":
        return new is None
    if table == "sessions" and version < 18 and col in ("display_name", "origin_json",
                                                          "expiry_finalized"):
        return old in (None, 0)
    return False


def value_problems(before: dict, after: dict, expect_version: int | None = None) -> list[str]:
    """Every value of ``before`` is in ``after``, except :func:`_allowed` data steps.

    ``expect_version``: the schema version ``after`` must have (default: the store's own when
    newer than this code, else 23).
    """
    out: list[str] = []
    version = int(before.get("schema_version") or 0)
    want_version = expect_version or max(version, SCHEMA_VERSION)
    if after.get("schema_version") != want_version:
        out.append(f"schema version {after.get('schema_version')}, expected {want_version}")
    for table, spec in before["tables"].items():
        if table == "schema_version":
            continue
        if table not in after["tables"]:
            out.append(f"table {table} is gone")
            continue
        live: dict[tuple, dict] = {}
        for row in _rows(after, table):
            live.setdefault(_key(table, row), row)
        for row in spec["rows"]:
            k = _key(table, row)
            new = live.get(k)
            if new is None:
                out.append(f"{table} row {k[:3]} lost")
                continue
            for col, old in row.items():
                got = new.get(col, "<column gone>")
                if got != old and not _allowed(table, col, old, got, row, version):
                    out.append(f"{table} {k[:3]}.{col} = {got!r}, was {old!r}")
        extra = len(live) - len({_key(table, r) for r in spec["rows"]})
        if table == "state_meta":
            extra = len([k for k in live if k[0] not in OWN_META]) - len(
                [r for r in spec["rows"] if r["key"] not in OWN_META])
        if extra and table not in ("session_model_usage",):
            out.append(f"{table}: {extra:+d} rows")
    return out[:50]


def _decoded(content: Any) -> Any:
    if isinstance(content, str) and content.startswith(_JSON_PREFIX):
        parsed = _json(content[len(_JSON_PREFIX):])
        return content if parsed is None else parsed
    return content


def system_prompt_of(dump: dict, row: dict) -> str | None:
    """The prompt a session shows: ``system_prompts`` through the hash first (UPSTREAM_API D4)."""
    prompts = {r["hash"]: r["prompt"] for r in _rows(dump, "system_prompts")}
    if row.get("system_prompt_hash") in prompts:
        return prompts[row["system_prompt_hash"]]
    return row.get("system_prompt")


def words_of(dump: dict, limit: int = 12) -> list[str]:
    """Words a search must find: the bundled list where present, else one per message."""
    texts = [str(r.get("content") or "") for r in _rows(dump, "messages")
             if r.get("role") in ("user", "assistant") and r.get("active", 1) != 0]
    found = [w for w in FIXTURE_WORDS if any(w in t for t in texts)]
    if found:
        return found
    out: list[str] = []
    for text in texts:
        words = sorted((w.strip(".,;:!?()[]\"'") for w in text.split()), key=len, reverse=True)
        word = next((w for w in words if len(w) >= 5 and w.isalpha()), None)
        if word and word not in out:
            out.append(word)
        if len(out) >= limit:
            break
    return out


def api_problems(db: SessionDB, dump: dict) -> list[str]:
    """``get_session``/``get_messages``/replay/search read the dumped data (SPEC §5, §6)."""
    out: list[str] = []
    messages = _rows(dump, "messages")
    for row in _rows(dump, "sessions"):
        sid = row["id"]
        got = db.get_session(sid)
        if got is None:
            out.append(f"get_session({sid!r}) is None")
            continue
        for col in ("source", "title", "model", "started_at", "parent_session_id", "end_reason"):
            if col in row and got.get(col) != row[col] and not (
                    col == "title" and int(dump.get("schema_version") or 0) < 4):
                out.append(f"get_session({sid!r})[{col!r}] = {got.get(col)!r}, "
                           f"stored {row[col]!r}")
        want_prompt = system_prompt_of(dump, row)
        if got.get("system_prompt") != want_prompt:
            out.append(f"get_session({sid!r})['system_prompt'] = {got.get('system_prompt')!r}, "
                       f"stored {want_prompt!r}")
        active = [m for m in messages if m["session_id"] == sid and m.get("active", 1) != 0]
        read = {m["id"]: m for m in db.get_messages(sid)}
        for m in active:
            if m["id"] not in read:
                out.append(f"get_messages({sid!r}) misses message {m['id']}")
            elif read[m["id"]]["content"] != _decoded(m["content"]):
                out.append(f"get_messages({sid!r}) message {m['id']} content differs")
        conv = [c["role"] for c in db.get_messages_as_conversation(sid)]
        every = [m["role"] for m in sorted((m for m in messages if m["session_id"] == sid),
                                           key=lambda m: m["id"])]
        if conv not in ([m["role"] for m in sorted(active, key=lambda m: m["id"])], every):
            out.append(f"get_messages_as_conversation({sid!r}): roles {conv}")
    for word in words_of(dump):
        want = {m["id"] for m in messages if word in str(m.get("content") or "")
                and m.get("active", 1) != 0}
        hits = {h["id"] for h in db.search_messages(word, limit=200)}
        if not hits or not want <= hits:
            out.append(f"search_messages({word!r}) found {sorted(hits)}, expected {sorted(want)}")
    return out


def write_problems(db: SessionDB, dump: dict) -> list[str]:
    """Create, append, title, tokens, end, delete succeed on the store; new words are found."""
    out: list[str] = []
    sid = "real-check-new"
    try:
        db.create_session(sid, "cli", model="check/model", system_prompt="Check prompt 検査")
        db.append_message(sid, "user", "zebracrossing 新しい記録です 새로운기록 ひらがなテスト")
        db.append_message(sid, "assistant", "calling", tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}])
        db.append_message(sid, "tool", "toolresultword", tool_call_id="c1", tool_name="t")
        db.set_session_title(sid, "Real store check")
        db.update_token_counts(sid, 10, 5, model="check/model")
        db.update_token_counts(sid, 3, 2, model="check/model", estimated_cost_usd=0.25,
                               actual_cost_usd=0.5)
        old = _rows(dump, "sessions")
        if old:
            db.update_token_counts(old[0]["id"], 1, 1)
            db.update_token_counts(old[0]["id"], 100, 50, absolute=True)
        if db.get_session(sid).get("system_prompt") != "Check prompt 検査":
            out.append("the system prompt of a new session does not read back")
        db.end_session(sid, "user_exit")
        for word in ("zebracrossing", "新しい記録", "새로운기록"):
            if not db.search_messages(word):
                out.append(f"search_messages({word!r}) misses the new message")
        parents = {r.get("parent_session_id") for r in old}
        victim = next((r["id"] for r in reversed(old) if r["id"] not in parents), None)
        if victim is not None and not db.delete_session(victim):
            out.append(f"delete_session({victim!r}) returned False")
        if not db.delete_session(sid):
            out.append("delete_session of the new session returned False")
        if db.search_messages("zebracrossing"):
            out.append("a deleted message is still found")
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        out.append(f"write failed: {type(exc).__name__}: {exc}")
    return out


def integrity_problems(db_path: Path) -> list[str]:
    """integrity_check, foreign_key_check, and every FTS index against its source rows."""
    out: list[str] = []
    conn = sqlite3.connect(str(db_path))
    try:
        out.extend(sqlite_problems(conn))
        for name in inventory(conn).tables:
            try:
                conn.execute(f'INSERT INTO "{name}"("{name}") VALUES (\'integrity-check\')')
            except sqlite3.DatabaseError as exc:
                if "no such tokenizer" not in str(exc):
                    out.append(f"{name} integrity-check: {exc}")
        out += [f"{t}: {v}" for t, v in verify_fts(conn).items() if v != "ok"]
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
        if version <= SCHEMA_VERSION:  # a newer store's own layout is left as it is
            out += [f"FTS triggers: {p}" for p in inventory(conn).problems]
    finally:
        conn.close()
    return out


def schema_objects(db_path: Path) -> tuple[set, str]:
    conn = sqlite3.connect(str(db_path))
    try:
        objs = {(r[0], r[1]) for r in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
        return objs, conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()


def _cjk_stale(db_path: Path) -> bool:
    """The CJK triggers were dropped on purpose (no tokenizer here) and the mark says so."""
    conn = sqlite3.connect(str(db_path))
    try:
        return conn.execute("SELECT 1 FROM state_meta WHERE key = 'fts_cjk_stale'").fetchone() \
            is not None
    finally:
        conn.close()


def open_problems(path: Path, before: dict, objects: set, journal: str) -> tuple[list[str], dict]:
    """Open once (the migration), then every value, the schema kept, a settled second open."""
    from .open_probe import second_open_problems

    out: list[str] = []
    with SessionDB(path) as db:
        rep = db.connection.migration_report
        figures = {"from": before.get("schema_version"),
                   "steps": len(rep.steps) if rep else 0, "wrote": db.connection.writes}
    out += value_problems(before, read_dump(path))
    after, mode = schema_objects(path)
    version = int(before.get("schema_version") or 0)
    if version > SCHEMA_VERSION:
        lost = sorted(n for _t, n in objects - after
                      if not (n.startswith("messages_fts_cjk_") and _cjk_stale(path)))
        if lost:
            out.append(f"the newer store lost {lost[:8]}")
        if mode != journal:
            out.append(f"journal_mode {journal} became {mode}")
    out += second_open_problems(path)
    return out, figures


def _finish_check(path: Path, before: dict, objects: set, journal: str) -> tuple[list, dict]:
    from .open_probe import second_open_problems

    problems, figures = open_problems(path, before, objects, journal)
    with SessionDB(path) as db:
        problems += api_problems(db, before)
        problems += write_problems(db, before)
    problems += integrity_problems(path)
    problems += second_open_problems(path)
    figures["messages"] = len(_rows(before, "messages"))
    return problems, figures


def check_store(store: RealStore, work: Path) -> tuple[list[str], dict]:
    """Every check of the module docstring on a private copy of ``store`` under ``work``.

    Returns:
        ``(problems, figures)``; ``problems == []`` means the store works.
    """
    path = copy_store(store.path, Path(work) / "subject")
    before = store.dump() or read_dump(store.path)
    objects, journal = schema_objects(copy_store(store.path, Path(work) / "probe"))
    return _finish_check(path, before, objects, journal)


def steps_of(store: RealStore) -> list[int]:
    """The migration steps an open of ``store`` runs (``v+1 .. 23``; none for 23 and newer)."""
    version = int((store.dump() or read_dump(store.path)).get("schema_version") or 0)
    return list(range(version + 1, SCHEMA_VERSION + 1))


_OPEN_CHILD = "import sys\nfrom hermes_state import SessionDB\nSessionDB(sys.argv[1]).close()\n"


def crash_problems(store: RealStore, step: int, work: Path) -> tuple[list[str], dict]:
    """SIGKILL right before step ``step`` commits (failpoint), then everything of check_store.

    After the kill the store must be at ``step - 1`` with every value of the dump (the data
    steps committed so far allowed), sound; the reopen then completes the migration and the
    store must pass every check an uninterrupted open passes.
    """
    import os
    import signal
    import subprocess
    import sys

    from hermes_state import failpoints

    path = copy_store(store.path, Path(work) / "subject")
    before = store.dump() or read_dump(store.path)
    objects, journal = schema_objects(copy_store(store.path, Path(work) / "probe"))
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    env["PYTHONPATH"] = str(STORE_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env[failpoints.ENV_VAR] = f"migrate.v{step}.before_commit=crash"
    res = subprocess.run([sys.executable, "-c", _OPEN_CHILD, str(path)], env=env,
                         capture_output=True, text=True, timeout=300)
    if res.returncode != -signal.SIGKILL:
        return [f"the open was not killed at migrate.v{step}.before_commit: exit "
                f"{res.returncode}, {res.stderr.strip()[-300:]!r}"], {}
    problems = [f"after the crash: {p}" for p in value_problems(
        before, read_dump(path), expect_version=step - 1)]
    conn = sqlite3.connect(str(path))
    try:
        ic = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    if ic != "ok":
        problems.append(f"after the crash integrity_check: {ic}")
    more, figures = _finish_check(path, before, objects, journal)
    figures["crashed_at"] = f"v{step}"
    return problems + more, figures
