"""The migration matrix over real stores: every mode on stores users really have (issue 10).

For each real store (:mod:`chaos.matrix.real_stores`: the bundled upstream stores, and every store
under ``--stores DIR``) the matrix runs the same three modes as for its generated fixtures:

``plain``
    :func:`chaos.matrix.real_stores.check_store` on a copy: the open, every dumped value, the API and
    search, writes, integrity, a second open that writes nothing.
``writer``
    an old-schema writer (:mod:`chaos.matrix.legacy_writer`, raw sqlite3 with the DDL and INSERTs of
    the store's own version, or of 22 -- release 0.19.0 -- for a store at 23 or newer) writes
    before, during and after the open that migrates the store in a child process; every
    acknowledged row must be in the store and found by search, and everything ``plain`` checks
    must hold. A store with two or more steps where no old write landed between two steps
    tested nothing: INCONCLUSIVE.
``crash``
    one cell per migration step the store needs: SIGKILL right before that step's COMMIT
    (:func:`chaos.matrix.real_stores.crash_problems`), then a reopen must give what an uninterrupted
    open gives.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hermes_state import SessionDB

from ..checkers.base import FAIL, INCONCLUSIVE, PASS
from ..files import names
from . import real_stores as rs
from .legacy_writer import AFTER_WRITES

#: ``--quick``: crash cells of a real store only at these steps (and its first one).
QUICK_STEPS = (11, 16, 20, 22, 23)


def label(store: rs.RealStore) -> str:
    """The cell prefix of a store: ``real.<name with dots>`` (no ``/``: cells split on it; a
    name that is no plain file name is derived into one, :func:`chaos.files.names.derive`: the gate
    names a log file after it and passes it on a command line)."""
    return "real." + names.derive(store.name.replace("/", ".").replace(" ", "_"),
                                  names.MAX_COMPONENT_BYTES)


def unusable(store: rs.RealStore) -> str | None:
    """Why ``store`` gets one SKIPPED row instead of its cells
    (:func:`chaos.matrix.real_stores.unusable`), or None."""
    return rs.unusable(store)


def store_version(store: rs.RealStore) -> int:
    """The schema version the store has before any open (0 when unreadable)."""
    dump = store.dump() or rs.read_dump(store.path)
    return int(dump.get("schema_version") or 0)


def crash_steps(store: rs.RealStore, quick: bool = False) -> list[int]:
    """The steps a crash sweep of ``store`` covers (every step, or a quick subset)."""
    steps = rs.steps_of(store)
    if quick:
        steps = [s for s in steps if s == steps[0] or s in QUICK_STEPS]
    return steps


def run_real_writer(store: rs.RealStore, work: Path) -> tuple[list[str], dict, str]:
    """The ``writer`` mode on a copy of ``store`` (module docstring)."""
    from .open_probe import OPEN_CHILD as _OPEN_CHILD
    from .open_probe import STEP_SLEEP_MS, probe_env

    version = store_version(store)
    old = version if 1 <= version <= 22 else 22
    path = rs.copy_store(store.path, work / "subject")
    before = store.dump() or rs.read_dump(store.path)
    objects, journal = rs.schema_objects(rs.copy_store(store.path, work / "probe"))
    writer = subprocess.Popen([sys.executable, "-m", "chaos.matrix.legacy_writer", str(path), str(old)],
                              env=probe_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=str(rs.STORE_ROOT))
    try:
        if not writer.stdout.readline().strip():
            writer.wait(timeout=300)
            return [f"old-schema writer (v{old}) died before its first write: "
                    f"{writer.stderr.read()[-300:]!r}"], {}, FAIL
        mig = subprocess.run([sys.executable, "-c", _OPEN_CHILD, str(path)],
                             env=probe_env(f"write.after_commit=sleep({STEP_SLEEP_MS})"),
                             capture_output=True, text=True, timeout=300)
        writer.stdin.write("after\n")
        writer.stdin.flush()
        out, err = writer.communicate(timeout=300)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    if mig.returncode != 0:
        return [f"the open beside the old-schema writer failed: {mig.stderr.strip()[-300:]!r}"], \
            {}, FAIL
    if writer.returncode != 0:
        return [f"old-schema writer failed: exit {writer.returncode}, {err.strip()[-300:]!r}"], \
            {}, FAIL
    writes = json.loads(out.strip().splitlines()[-1])["writes"]
    t = json.loads(mig.stdout.strip().splitlines()[-1])
    mid = sorted({w["version"] for w in writes if t["t0"] < w["t"] < t["t1"]})
    problems = [p for p in rs.value_problems(before, rs.read_dump(path))
                if not p.startswith(("messages: +", "sessions: +"))]
    with SessionDB(path) as db:
        got = {m["id"] for m in db.get_messages(f"legacy-v{old}", include_inactive=True)}
        lost = [w["id"] for w in writes if w["id"] not in got]
        if lost:
            problems.append(f"{len(lost)} acknowledged old-schema row(s) lost: {lost[:5]}")
        for w in writes[:2] + writes[-2:]:
            if w["id"] not in {h["id"] for h in db.search_messages(w["word"])}:
                problems.append(f"search_messages({w['word']!r}) misses old-schema row {w['id']}")
        problems += rs.api_problems(db, before)
        problems += rs.write_problems(db, before)
    problems += rs.integrity_problems(path)
    from .open_probe import second_open_problems

    problems += second_open_problems(path)
    if version > 22:
        lost_objects = sorted(n for _t, n in objects - rs.schema_objects(path)[0])
        if lost_objects:
            problems.append(f"the newer store lost {lost_objects[:8]}")
    after = [w for w in writes if w["phase"] == "after"]
    if len(after) != AFTER_WRITES:
        problems.append(f"{len(after)} old-schema writes after the open, expected {AFTER_WRITES}")
    figures = {"old_writer": f"v{old}", "old_writes": len(writes), "versions_seen_during": mid}
    status = FAIL if problems else PASS
    if status == PASS and len(rs.steps_of(store)) >= 2 and len(mid) < 2:
        status = INCONCLUSIVE
        problems.append(f"old-schema writes during the migration saw versions {mid}: none "
                        "landed between two steps (the cell tested nothing)")
    return problems, figures, status


def run_real_cell(store: rs.RealStore, mode: str, step: int | None,
                  work: Path) -> tuple[list[str], dict, str | None]:
    """One real-store cell: ``(problems, figures, status or None = decided by problems)``."""
    work.mkdir(parents=True, exist_ok=True)
    if mode == "plain":
        problems, figures = rs.check_store(store, work)
        return problems, figures, None
    if mode == "crash":
        problems, figures = rs.crash_problems(store, int(step), work)
        return problems, figures, None
    return run_real_writer(store, work)
