"""The schema-migration matrix: every historical version opened by the current code (SPEC §16.6).

For every version 1-22 a fixture store (:func:`hermes_state.testing.build_fixture`, the
declared DDL of that version filled with deterministic data) is opened by the current code in
three modes, each a row of the matrix (a *cell*):

``plain``
    ``SessionDB(path)`` migrates it in this process.
``writer``
    an old-schema writer process (:mod:`chaos.matrix.legacy_writer`: raw sqlite3, that version's DDL
    and INSERTs) writes before, during and after the migration, which runs in a child process
    with a 60 ms sleep after every COMMIT (failpoint ``write.after_commit``) so the two
    interleave; after the migration the
    writer reconnects (an old binary started against the newer store) and writes again.
``crash``
    one cell per migration step ``N`` the version needs (``v+1 .. 23``): a child opens the store
    with ``HERMES_STATE_FAILPOINTS="migrate.v<N>.before_commit=crash"`` and is SIGKILLed right
    before that step's COMMIT; the store must be at ``N-1`` with every row, then a normal reopen
    completes the migration.

Every cell then checks (SPEC §16.6): every row preserved (:func:`hermes_state.testing.check_migrated`:
rows and columns, version 23, FTS equal to a rebuild, search by direct MATCH, integrity),
readable through the API (``get_session``/``get_messages`` of every session equal the fixture,
``search_messages`` finds every pre-migration word and CJK run), and a second open is a no-op
(no migration report, no write, ``PRAGMA data_version`` and the bytes of ``state.db`` and its
``-wal`` unchanged). Writer cells also check that every acknowledged old-schema row is in the
store, found by ``messages_fts`` and by the API, and that old-schema writes committed between
migration steps (seen at two versions or more while the migration ran; otherwise the cell tested
nothing: INCONCLUSIVE).

The same three modes run over REAL stores (:mod:`chaos.matrix.real`): the stores written by
real upstream code bundled in ``tests/fixtures/upstream`` (unless ``--no-real``) and every store
under ``--stores DIR`` (a user's own stores), each on a copy, checked against its ``dump.json``
(or a dump read before the open): the gate before a schema bump is "every store users really
have still works".

Command line (the gate runs chunks of versions per job, and the real stores in one job)::

    python -m chaos.matrix [--versions 1-22] [--no-generated] [--no-real] [--stores DIR]
                           [--modes plain,writer,crash] [--quick] [--jsonl]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hermes_state import SessionDB
from hermes_state import testing as h

from ..checkers.base import FAIL, INCONCLUSIVE, PASS, SKIPPED
from .arguments import (
    MODES,
    OLD_VERSIONS,
    QUICK_CRASH_VERSIONS,
    QUICK_WRITER_VERSIONS,
    build_parser,
)
from .legacy_writer import AFTER_WRITES
from .open_probe import OPEN_CHILD as _OPEN_CHILD
from .open_probe import (
    STORE_ROOT,
    STEP_SLEEP_MS,
    probe_env,
    raw_connect,
    second_open_problems,
)

#: The one cell of a real store that cannot be tested (not SQLite, damaged, a planted link or
#: FIFO): a SKIPPED row with the reason (SPEC §16.3: counted apart, never PASS).
SKIP_MODE = "skipped"
#: Hang guard for every child process (s); never an assertion about speed.
CHILD_TIMEOUT_S = 300.0
@dataclass(frozen=True)
class Cell:
    """One row of the matrix: ``version`` opened in ``mode`` (``step``: the crash point).

    ``store`` names a real store (:mod:`chaos.matrix.real`) instead of the generated fixture of
    ``version`` (then the store's own schema version).
    """

    version: int
    mode: str
    step: int | None = None
    store: str | None = None

    @property
    def name(self) -> str:
        """``v7/plain``, ``v7/writer``, ``v7/crash@v11`` or ``real.upstream.v2/plain``."""
        head = self.store if self.store else f"v{self.version}"
        return f"{head}/{self.mode}" + (f"@v{self.step}" if self.step else "")


@dataclass
class MatrixRow:
    """The verdict of one cell: ``status`` PASS/FAIL/INCONCLUSIVE, problems, figures, seconds."""

    name: str
    version: int
    mode: str
    step: int | None
    status: str
    problems: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """JSON-ready dict (one ``--jsonl`` line)."""
        return asdict(self)

    @property
    def summary(self) -> str:
        """One line: the first problem, or the figures."""
        if self.problems:
            more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            return self.problems[0] + more
        return ", ".join(f"{k} {v}" for k, v in self.figures.items())


def cells(versions=OLD_VERSIONS, modes=MODES, *, quick: bool = False,
          stores=()) -> list[Cell]:
    """The cells of the matrix, most expensive first.

    Args:
        versions: start versions of the generated fixtures (each in 1..22; may be empty).
        modes: any of :data:`MODES`.
        quick: writer cells only for :data:`QUICK_WRITER_VERSIONS` and crash cells only for
            :data:`QUICK_CRASH_VERSIONS` (plain cells for every version); real stores get a
            crash subset (:func:`chaos.matrix.real.crash_steps`).
        stores: real stores (:class:`chaos.matrix.real_stores.RealStore`), each in every mode.
    Returns:
        ``[Cell, ...]``; crash cells cover every step ``v+1 .. 23``.
    Raises:
        ValueError: a version outside 1..22 or an unknown mode.
    """
    out: list[Cell] = []
    for v in versions:
        if v not in OLD_VERSIONS:
            raise ValueError(f"matrix version {v} is not a historical version (1-22)")
    for m in modes:
        if m not in MODES:
            raise ValueError(f"unknown matrix mode {m!r} (modes: {', '.join(MODES)})")
    for v in versions:
        if "plain" in modes:
            out.append(Cell(v, "plain"))
        if "writer" in modes and (not quick or v in QUICK_WRITER_VERSIONS):
            out.append(Cell(v, "writer"))
        if "crash" in modes and (not quick or v in QUICK_CRASH_VERSIONS):
            out.extend(Cell(v, "crash", n) for n in range(v + 1, h.CURRENT_VERSION + 1))
    if stores:
        from . import real as matrix_real

        for store in stores:
            if matrix_real.unusable(store) is not None:  # one SKIPPED row saying why
                out.append(Cell(0, SKIP_MODE, None, matrix_real.label(store)))
                continue
            lab, ver = matrix_real.label(store), matrix_real.store_version(store)
            out.extend(Cell(ver, m, None, lab) for m in ("plain", "writer") if m in modes)
            if "crash" in modes:
                out.extend(Cell(ver, "crash", n, lab)
                           for n in matrix_real.crash_steps(store, quick))
    return out


# ------------------------------------------------------------------------------ fixtures

class Fixtures:
    """Builds each version's fixture once under ``root`` and hands out private copies."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._manifests: dict[int, dict] = {}
        self._n = 0

    def copy(self, version: int) -> tuple[Path, dict]:
        """A fresh copy of the version's fixture: ``(state.db path, manifest with that path)``."""
        if version not in self._manifests:
            self._manifests[version] = h.build_fixture(
                self.root / f"template-v{version}" / "state.db", version)
        self._n += 1
        src = self.root / f"template-v{version}"
        dst = self.root / f"v{version}-{self._n}"
        shutil.copytree(src, dst)
        m = copy.deepcopy(self._manifests[version])
        m["path"] = str(dst / "state.db")
        if m.get("sessions_json"):
            m["sessions_json"] = str(dst / "sessions" / "sessions.json")
        return dst / "state.db", m


# ------------------------------------------------------------------------------ checks

def api_problems(db: SessionDB, manifest: dict) -> list[str]:
    """Every fixture session and message readable through the API, every word searchable.

    Args:
        db: an open store migrated from the fixture of ``manifest``.
        manifest: what :func:`hermes_state.testing.build_fixture` returned.
    Returns:
        Problems (``[]``: every session, message and search term came back).
    """
    out: list[str] = []
    by_session: dict[str, dict[int, str]] = {}
    for r in manifest["rows"]["messages"]:
        by_session.setdefault(r["session_id"], {})[r["id"]] = r["content"]
    for sid in manifest["session_ids"]:
        if db.get_session(sid) is None:
            out.append(f"get_session({sid!r}) is None")
        got = {r["id"]: r["content"] for r in db.get_messages(sid, include_inactive=True)}
        want = by_session.get(sid, {})
        if got != want:
            lost = sorted(set(want) - set(got))
            out.append(f"get_messages({sid!r}): {len(got)} messages, expected {len(want)}"
                       + (f"; missing ids {lost[:5]}" if lost else "; contents differ"))
    for kind in ("terms", "cjk_terms"):
        for mid, term in manifest[kind].items():
            ids = {hit["id"] for hit in db.search_messages(term, limit=100,
                                                           include_inactive=True)}
            if int(mid) not in ids:
                out.append(f"search_messages({term!r}) misses message {mid}")
    return out


def _migrated_problems(path: Path, manifest: dict, *, extra: bool = False) -> list[str]:
    conn = raw_connect(path)
    try:
        return [f"check_migrated: {p}" for p in h.check_migrated(conn, manifest,
                                                                 extra_messages=extra)]
    finally:
        conn.close()


def _open_and_check(path: Path, manifest: dict, from_version: int) -> list[str]:
    """Open with the current code in this process; the report, the API, the rows."""
    out: list[str] = []
    with SessionDB(path) as db:
        rep = db.connection.migration_report
        want = list(range(from_version + 1, h.CURRENT_VERSION + 1))
        if rep is None or rep.from_version != from_version or rep.steps != want:
            got = None if rep is None else (rep.from_version, rep.steps)
            out.append(f"migration report {got}, expected ({from_version}, {want})")
        out += api_problems(db, manifest)
    out += _migrated_problems(path, manifest)
    return out


# ------------------------------------------------------------------------------ the cells

def run_plain(fx: Fixtures, version: int) -> tuple[list[str], dict]:
    """Migrate in this process, check rows/API/search, then a second open is a no-op."""
    path, m = fx.copy(version)
    problems = _open_and_check(path, m, version)
    problems += second_open_problems(path)
    return problems, {"messages": m["counts"]["messages"],
                      "steps": h.CURRENT_VERSION - version}


def run_crash(fx: Fixtures, version: int, step: int) -> tuple[list[str], dict]:
    """Crash (real SIGKILL via failpoint) right before step ``step``'s COMMIT, then reopen."""
    path, m = fx.copy(version)
    res = subprocess.run([sys.executable, "-c", _OPEN_CHILD, str(path)],
                         env=probe_env(f"migrate.v{step}.before_commit=crash"),
                         capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if res.returncode != -signal.SIGKILL:
        return [f"the child was not killed at migrate.v{step}.before_commit: exit "
                f"{res.returncode}, stdout {res.stdout.strip()[:200]!r}, "
                f"stderr {res.stderr.strip()[-300:]!r}"], {}
    problems: list[str] = []
    conn = raw_connect(path)
    try:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
        if versions != [step - 1]:
            problems.append(f"after the crash schema_version {versions}, expected [{step - 1}] "
                            "(the step rolled back, the earlier ones committed)")
        ic = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if ic != "ok":
            problems.append(f"after the crash integrity_check: {ic}")
        if dict(conn.execute("SELECT id, content FROM messages")) != m["messages"]:
            problems.append("after the crash the messages differ from the fixture")
    finally:
        conn.close()
    problems += _open_and_check(path, m, step - 1)
    problems += second_open_problems(path)
    return problems, {"crashed_at": f"v{step}"}


def run_writer(fx: Fixtures, version: int) -> tuple[list[str], dict, str]:
    """An old-schema writer keeps writing before, during and after a migration by a child."""
    path, m = fx.copy(version)
    writer = subprocess.Popen([sys.executable, "-m", "chaos.matrix.legacy_writer", str(path),
                               str(version)], env=probe_env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=str(STORE_ROOT))
    try:
        ready = writer.stdout.readline()
        if not ready.strip():
            writer.wait(timeout=CHILD_TIMEOUT_S)
            return [f"old-schema writer died before its first write: exit {writer.returncode}, "
                    f"{writer.stderr.read()[-300:]!r}"], {}, FAIL
        mig = subprocess.run([sys.executable, "-c", _OPEN_CHILD, str(path)],
                             env=probe_env(f"write.after_commit=sleep({STEP_SLEEP_MS})"), capture_output=True, text=True,
                             timeout=CHILD_TIMEOUT_S)
        writer.stdin.write("after\n")
        writer.stdin.flush()
        out, err = writer.communicate(timeout=CHILD_TIMEOUT_S)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    problems: list[str] = []
    if mig.returncode != 0:
        problems.append(f"migration beside the old-schema writer failed: exit {mig.returncode}, "
                        f"{mig.stderr.strip()[-300:]!r}")
        return problems, {}, FAIL
    if writer.returncode != 0:
        return [f"old-schema writer failed: exit {writer.returncode}, {err.strip()[-300:]!r}"], \
            {}, FAIL
    writes = json.loads(out.strip().splitlines()[-1])["writes"]
    t = json.loads(mig.stdout.strip().splitlines()[-1])
    during = [w for w in writes if t["t0"] < w["t"] < t["t1"]]
    mid_versions = sorted({w["version"] for w in during})
    problems += _writer_rows_problems(path, m, writes)
    problems += _migrated_problems(path, m, extra=True)
    with SessionDB(path) as db:
        problems += api_problems(db, m)
        got = [r["id"] for r in db.get_messages(f"legacy-v{version}", include_inactive=True)]
        if got != [w["id"] for w in writes]:
            problems.append(f"get_messages(legacy-v{version}): {len(got)} rows, expected "
                            f"{len(writes)} acknowledged old-schema writes")
        for w in writes[-3:]:
            if w["id"] not in {hit["id"] for hit in db.search_messages(w["word"])}:
                problems.append(f"search_messages({w['word']!r}) misses old-schema row {w['id']}")
    problems += second_open_problems(path)
    after = [w for w in writes if w["phase"] == "after"]
    if len(after) != AFTER_WRITES or any(w["version"] != h.CURRENT_VERSION for w in after):
        problems.append(f"old-schema writes after the migration: {len(after)} at versions "
                        f"{sorted({w['version'] for w in after})}")
    figures = {"old_writes": len(writes), "during_migration": len(during),
               "versions_seen_during": mid_versions}
    status = FAIL if problems else PASS
    if status == PASS and len(mid_versions) < 2:
        status = INCONCLUSIVE
        problems.append(f"old-schema writes during the migration saw versions {mid_versions}: "
                        "none landed between two steps (the cell tested nothing)")
    return problems, figures, status


def _writer_rows_problems(path: Path, manifest: dict, writes: list[dict]) -> list[str]:
    out: list[str] = []
    conn = raw_connect(path)
    try:
        rows = dict(conn.execute("SELECT id, content FROM messages WHERE session_id = ?",
                                 (f"legacy-v{manifest['version']}",)))
        for w in writes:
            if w["id"] not in rows or not rows[w["id"]].startswith(w["word"]):
                out.append(f"old-schema row {w['id']} ({w['phase']}) lost")
                continue
            hits = [r[0] for r in conn.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (w["word"],))]
            if hits != [w["id"]]:
                out.append(f"messages_fts MATCH {w['word']!r} = {hits}, expected [{w['id']}]")
        count = conn.execute("SELECT message_count FROM sessions WHERE id = ?",
                             (f"legacy-v{manifest['version']}",)).fetchone()
        if count is None or count[0] != len(rows):
            out.append(f"legacy session message_count {count}, rows {len(rows)}")
    finally:
        conn.close()
    return out


def run_cell(cell: Cell, fx: Fixtures, stores: dict | None = None) -> MatrixRow:
    """Run one cell and return its verdict row (never raises: an exception is a FAIL row).

    ``stores``: ``{label: RealStore}`` for real-store cells.
    """
    t0 = time.monotonic()
    status = None
    if cell.mode == SKIP_MODE:
        from .real import unusable

        why = unusable((stores or {})[cell.store]) or "the store became usable after listing"
        return MatrixRow(cell.name, cell.version, cell.mode, None, SKIPPED, [why], {},
                         round(time.monotonic() - t0, 3))
    try:
        if cell.store:
            from .real import run_real_cell

            fx._n += 1
            problems, figures, status = run_real_cell(
                (stores or {})[cell.store], cell.mode, cell.step, fx.root / f"real-{fx._n}")
        elif cell.mode == "plain":
            problems, figures = run_plain(fx, cell.version)
        elif cell.mode == "crash":
            problems, figures = run_crash(fx, cell.version, cell.step)
        else:
            problems, figures, status = run_writer(fx, cell.version)
    except Exception as exc:  # noqa: BLE001 - a broken cell is a failed row, with the error
        problems, figures = [f"{type(exc).__name__}: {exc}"], {}
    if status is None:
        status = FAIL if problems else PASS
    return MatrixRow(cell.name, cell.version, cell.mode, cell.step, status, problems, figures,
                     round(time.monotonic() - t0, 3))


def run_matrix(todo: list[Cell], work: Path | None = None, on_row=None,
               stores=()) -> list[MatrixRow]:
    """Run ``todo`` in order in this process; ``on_row(row)`` after each cell.

    Args:
        todo: from :func:`cells`.
        work: where fixtures and copies go (a temporary directory, removed, when ``None``).
        on_row: optional callback.
        stores: the real stores the cells name (:class:`chaos.matrix.real_stores.RealStore`).
    Returns:
        One :class:`MatrixRow` per cell.
    """
    from .real import label

    by_label = {label(s): s for s in stores}
    tmp = None
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="chaos-matrix-")
        work = Path(tmp.name)
    try:
        fx = Fixtures(Path(work))
        rows = []
        for cell in todo:
            row = run_cell(cell, fx, by_label)
            rows.append(row)
            if on_row:
                on_row(row)
        return rows
    finally:
        if tmp is not None:
            tmp.cleanup()


def real_stores_of(args: argparse.Namespace) -> list:
    """The real stores the flags select: the bundled upstream ones unless ``--no-real``, plus
    every store under each ``--stores DIR``.

    Raises:
        argparse.ArgumentTypeError: a ``--stores`` directory that does not exist or holds none.
    """
    from . import real_stores as rs

    out = [] if not args.real else rs.fixture_stores()
    for root in args.stores or ():
        try:
            found = rs.discover(root, f"stores/{Path(root).name}/")
        except FileNotFoundError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
        if not found:
            raise argparse.ArgumentTypeError(f"no store (*.db) under {root}")
        out.extend(found)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos.matrix``: run cells, print one JSON line per row (``--jsonl``) or a
    table; exit 0 when every row passed (a SKIPPED store, counted apart, does not fail it),
    1 otherwise."""
    p = build_parser()
    args = p.parse_args(argv)
    try:
        stores = real_stores_of(args)
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))
    if args.only_store:
        from .real import label

        stores = [s for s in stores if label(s) == args.only_store]
    todo = cells(args.versions if args.generated else [], args.modes, quick=args.quick,
                 stores=stores)
    if not todo:
        p.error("nothing to run (no generated versions and no real store)")

    def emit(row: MatrixRow) -> None:
        if args.jsonl:
            print(json.dumps(row.to_dict()), flush=True)
        else:
            print(f"{row.status:12} {row.name:28} {row.seconds:7.2f}s  {row.summary}", flush=True,
                  file=sys.stderr if args.json else sys.stdout)

    rows = run_matrix(todo, on_row=emit, stores=stores)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows]))
    skipped = [r for r in rows if r.status == SKIPPED]
    if skipped and not args.jsonl:
        print(f"{len(skipped)} store(s) SKIPPED (not tested; see their rows)",
              file=sys.stderr if args.json else sys.stdout)
    return 0 if all(r.status in (PASS, SKIPPED) for r in rows) else 1

