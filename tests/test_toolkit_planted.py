"""Issue 22 items 4 and 9 and their generator: the planted-file matrix of the toolkit.

Every file the toolkit reads or writes beside a run (a scenario, a mutant, a store under
``--stores`` with its sidecars and ``dump.json``, a run's results, resolved scenario, history
and report) x every thing a user or an attacker can leave at its path (a link to a victim, a
dangling link, a FIFO, a directory, a socket, a link to ``/dev/zero``, a file another user
cannot read, a file replaced by a link between the listing and the read). Each case runs in a
forked child (the unreadable cases as uid 65534) under a hang guard and must end with a value
or a named error, never a hang, a traceback or a byte written through a link.

CI runs every case in-process (cheap); ``CHAOS_GENERATORS=full`` adds the command-line sweep
(``chaos validate``, ``list``, ``run``, ``audit`` in subprocesses). The case counts go to the
session's closing summary.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from chaos import history as hist
from chaos import replay, shrink, store
from chaos.audit import catalogue as mutants
from chaos.files import inputs, names
from chaos.matrix import real_stores as rs
from chaos.__main__ import build_parser
from chaos.__main__ import main as chaos_main
from chaos.scenario import ScenarioError, load_scenario

# ``chaos list`` imports these lazily; the unreadable cases run it in a child that has dropped
# to another uid, which cannot read a checkout under a private directory (a clone in
# ``mktemp -d`` or /root): imported here, before any fork, whichever test ran first in this
# worker (found by a fresh clone's run: "cannot import name 'cli_report'", exit 3)
from chaos import cli_report  # noqa: E402,F401
from chaos.report import terminal  # noqa: E402,F401

GENERATOR_CASES = "generator_cases"  # summed by tests/conftest.py

build_parser()  # every lazy import of the CLI now: a child that drops its uid may not read them
REPO = Path(__file__).resolve().parent.parent
CASE_GUARD_S = 30.0  # hang guard per case, never a speed claim
NOBODY = 65534
FULL = os.environ.get("CHAOS_GENERATORS", "") == "full"

KINDS = ("symlink", "dangling", "fifo", "directory", "socket", "devzero", "unreadable",
         "replaced")
SCENARIO = textwrap.dedent("""\
    name: planted
    description: a planted-file case
    duration: 1s
    roles: [{name: gw, kind: gateway}]
    expect: {integrity: {}}
    """)
MUTANT = textwrap.dedent("""\
    rule: r
    spec: "§4"
    rewrite: {literal: a, replacement: b}
    """)
#: Words one of which a refusal must carry (the named error).
REASONS = ("symbolic link", "not a regular file", "Permission denied", "No such file",
           "a directory", "not SQLite", "not a SQLite", "cannot read", "too large",
           "in the way", "not JSON")


def plant(path: Path, kind: str, victim: Path, good: bytes) -> None:
    """Leave ``kind`` at ``path`` (``good``: the content a regular file there would have)."""
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "dangling":
        path.symlink_to(path.with_name("gone-" + path.name))
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "devzero":
        path.symlink_to("/dev/zero")
    elif kind == "unreadable":
        path.write_bytes(good)
        os.chmod(path, 0o600)  # root's; the case runs as uid 65534
    elif kind == "replaced":
        path.write_bytes(good)  # regular when listed; replaced by a link before the read
    else:
        raise ValueError(kind)


def in_child(call, *, uid: int | None = None, guard_s: float = CASE_GUARD_S) -> dict:
    """Run ``call()`` in a forked child (as ``uid`` if given) under a hang guard; returns
    ``{"value"}`` or ``{"error", "message"}`` or ``{"hang": True}``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        out: dict
        said = io.StringIO()
        try:
            os.close(r)
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(said):
                value = call()
            out = {"value": repr(value)[:300]}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            import traceback

            # what the call printed (a CLI's error) comes with it: a failure says why
            out = {"error": type(exc).__name__, "message": str(exc)[:600],
                   "tb": traceback.format_exc()[-1500:] + said.getvalue()[-1500:]}
        os.write(w, json.dumps(out).encode()[:60000])
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + guard_s
    chunks = []
    os.set_blocking(r, False)
    while True:
        try:
            chunk = os.read(r, 65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            chunks.append(chunk)
        elif chunk == b"":
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return {"hang": True}
        if chunk is None:
            time.sleep(0.005)
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks) or b'{"error": "died", "message": ""}')


@pytest.fixture
def world():
    """A base directory another user can traverse, a victim outside it."""
    base = Path(tempfile.mkdtemp(prefix="chaos-planted-"))
    os.chmod(base, 0o755)
    victim = base / "victim.txt"
    victim.write_text("precious\n")
    yield base, victim
    subprocess.run(["rm", "-rf", str(base)], check=False)


# ------------------------------------------------------------------ the targets
def _good_store() -> bytes:
    from hermes_state.testing import FIXTURE_ROOT

    return (FIXTURE_ROOT / "v2" / "state.db").read_bytes()


def targets(base: Path):
    """``(target, path to plant at, good content, call, expected error types)``."""
    good_db = _good_store()
    out = []

    sdir = base / "scenarios"
    sdir.mkdir()
    out.append(("scenario file (validate/run)", sdir / "s.yaml", SCENARIO.encode(),
                lambda p: load_scenario(p), (ScenarioError,)))
    out.append(("scenario entry (chaos list)", sdir / "s.yaml", SCENARIO.encode(),
                lambda p: _cli_ok("list", str(p.parent)), ()))
    mdir = base / "mutants"
    mdir.mkdir()
    out.append(("mutant file", mdir / "m.yaml", MUTANT.encode(),
                lambda p: mutants.load(p), (mutants.MutantError,)))
    out.append(("mutant directory (audit --mutants)", mdir / "m.yaml", MUTANT.encode(),
                lambda p: mutants.load_dir(p.parent), (mutants.MutantError,)))
    st = base / "stores" / "one"
    st.mkdir(parents=True)
    out.append(("store file (--stores)", st / "state.db", good_db,
                lambda p: _unusable(p, p), ()))
    side = base / "stores" / "wal"
    side.mkdir()
    (side / "state.db").write_bytes(good_db)
    out.append(("store sidecar -wal (--stores)", side / "state.db-wal", good_db[:0] + b"x",
                lambda p: _unusable(p.with_name("state.db"), p), ()))
    dump = base / "stores" / "dump"
    dump.mkdir()
    (dump / "state.db").write_bytes(good_db)
    out.append(("dump.json (--stores)", dump / "dump.json", b"{}",
                lambda p: _unusable(p.with_name("state.db"), p), ()))
    out.append(("store copy (matrix)", st / "state.db", good_db,
                lambda p: rs.copy_store(p, p.parent.parent / names.derive(f"copy{time.time_ns()}")),
                (inputs.InputError,)))
    run = base / "run"
    (run / "history").mkdir(parents=True)
    out.append(("resolved scenario (replay)", run / store.SCENARIO_FILE, b"{}",
                lambda p: replay.load_resolved(p.parent), (replay.RunDirError,)))
    out.append(("history file (report)", run / "history" / "gw-0.jsonl", b"{}\n",
                lambda p: hist.read_file(p), (inputs.InputError,)))
    out.append(("results.json (report)", run / store.RESULTS_FILE, b"{}",
                lambda p: _empty(store.read_json(p)), ()))
    shr = base / "shrink"
    shr.mkdir()
    (shr / store.RESULTS_FILE).write_text('{"verdicts": [{"checker": "integrity", '
                                          '"status": "FAIL"}]}')
    out.append(("resolved scenario (shrink)", shr / store.SCENARIO_FILE, b"{}",
                lambda p: shrink.load_failure(p.parent), (shrink.ShrinkError,)))
    rep = base / "out"
    rep.mkdir()
    out.append(("report.html (written)", rep / store.REPORT_FILE, b"<html>",
                lambda p: store.write_text_atomic(p, "<p>new</p>"), (OSError,)))
    out.append(("report.html.partial (written)", rep / (store.REPORT_FILE + ".partial"), b"x",
                lambda p: store.write_text_atomic(p.with_name(store.REPORT_FILE), "<p>new</p>"),
                (OSError,)))
    out.append(("results.json.partial (written)", rep / (store.RESULTS_FILE + ".partial"), b"x",
                lambda p: store.write_results(p.with_name(store.RESULTS_FILE), {"ok": 1}),
                (OSError,)))
    return out


def _cli_ok(*argv: str):
    code = chaos_main(list(argv))
    if code not in (0, 2):
        raise AssertionError(f"exit {code}")
    return code


def _unusable(db: Path, planted: Path):
    """The reason the store is refused; a planted file must give one that names it."""
    why = rs.unusable(rs.RealStore("x", db, db.with_name("dump.json")
                                   if os.path.lexists(db.with_name("dump.json")) else None))
    if why is None or not any(w in why for w in REASONS):
        raise AssertionError(f"{planted.name} planted, yet the store counts as usable: {why}")
    return why


def _empty(data: dict):
    if data:
        raise AssertionError(f"read {data!r} from a planted file")
    return data


#: Targets whose call may return a value (the value itself was checked by the call: ``list``
#: exits 0 or 2, ``read_json`` gives ``{}``, a store's refusal reason is returned; a written
#: output is judged by the victim check).
VALUE_OK = ("scenario entry", "store file", "store sidecar", "dump.json", "results.json (report)",
            "(written)")


def _judge(target: str, kind: str, result: dict, allowed: tuple) -> str | None:
    """None when the case ended well, else what went wrong."""
    if result.get("hang"):
        return f"{target} x {kind}: HANG past the {CASE_GUARD_S:g}s guard"
    if "error" not in result:
        if target.startswith(VALUE_OK) or target.endswith(VALUE_OK):
            return None
        return f"{target} x {kind}: accepted ({result.get('value', '')[:200]})"
    named = {t.__name__ for t in allowed} | {"InputError", "IsADirectoryError", "PermissionError"}
    if result["error"] in named and any(w in result["message"] for w in REASONS):
        return None
    return (f"{target} x {kind}: {result['error']}: {result['message'][:300]}\n"
            f"{result.get('tb', '')[-800:]}")


def test_planted_file_matrix(world, record_property):
    """Generator (c): every toolkit input/output path x every planted kind."""
    if os.geteuid() != 0:
        pytest.skip("the unreadable cases drop to another uid: needs root")
    base, victim = world
    before = (victim.read_bytes(), victim.stat().st_ino)
    cases, failures = 0, []
    for k, kind in enumerate(KINDS):
        root = base / f"k{k}"
        root.mkdir()
        os.chmod(root, 0o755)
        for target, path, good, call, allowed in targets(root):
            for p in (path, path.with_name("gone-" + path.name)):
                if os.path.lexists(p):
                    (os.rmdir if p.is_dir() and not p.is_symlink() else os.unlink)(p)
            plant(path, kind, victim, good)
            if kind == "replaced":
                os.unlink(path)
                path.symlink_to(victim)  # after the listing, before the read
            result = in_child(lambda: call(path), uid=NOBODY if kind == "unreadable" else None)
            cases += 1
            problem = _judge(target, kind, result, allowed)
            if problem:
                failures.append(problem)
            if (victim.read_bytes(), victim.stat().st_ino) != before:
                failures.append(f"{target} x {kind}: the victim was written through a link")
                victim.write_text("precious\n")
                before = (victim.read_bytes(), victim.stat().st_ino)
    record_property(GENERATOR_CASES, ("planted-files", cases))
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)


# ------------------------------------------------------------------ the reported members
def test_a_fifo_mutant_never_hangs_the_audit(tmp_path):
    """Issue 22 item 4: a FIFO mutant hung ``chaos audit`` (read_text blocked on it)."""
    mdir = tmp_path / "mutants"
    mdir.mkdir()
    os.mkfifo(mdir / "fifo.yaml")
    proc = subprocess.run([sys.executable, "-m", "chaos", "audit", "--mutants", str(mdir),
                           "--out", str(tmp_path / "audit")], capture_output=True, text=True,
                          timeout=120, cwd=REPO, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert "fifo.yaml: not a regular file (a FIFO)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_mutant_linked_to_dev_zero_is_refused_not_read(tmp_path):
    """Issue 22 item 4: a mutant linked to /dev/zero ended in MemoryError."""
    mdir = tmp_path / "mutants"
    mdir.mkdir()
    (mdir / "zero.yaml").symlink_to("/dev/zero")
    result = in_child(lambda: mutants.load_dir(mdir))
    assert result.get("error") == "MutantError", result
    assert "zero.yaml: a symbolic link (not followed" in result["message"]
    big = mdir.parent / "big"
    big.mkdir()
    with open(big / "huge.yaml", "wb") as fh:
        fh.truncate(8 * 1024 ** 3)  # sparse
    result = in_child(lambda: mutants.load_dir(big))
    assert result.get("error") == "MutantError" and "too large" in result["message"], result


def test_report_partial_planted_as_a_link_is_never_written_through(tmp_path):
    """Found by the matrix: ``write_text_atomic`` opened ``<file>.partial`` with ``open(..,
    "w")``: a link planted there (``chaos report`` rewrites report.html in a run directory that
    stays around) wrote the page into the victim; a FIFO there hung the command."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "report.html.partial").symlink_to(victim)
    store.write_text_atomic(tmp_path / "report.html", "<p>page</p>")
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "report.html").read_text() == "<p>page</p>"
    os.mkfifo(tmp_path / "results.json.partial")
    result = in_child(lambda: store.write_results(tmp_path / "results.json", {"a": 1}))
    assert "hang" not in result and "error" not in result, result


@pytest.mark.skipif(not FULL, reason="the command-line sweep runs with CHAOS_GENERATORS=full")
def test_planted_file_matrix_through_the_command_line(world, record_property):
    """The slower tier: the same plants reached through ``chaos validate``, ``run``, ``list``
    and ``audit`` as subprocesses (exit 0/2, a named refusal, no traceback, no hang)."""
    base, victim = world
    cases, failures = 0, []
    for kind in KINDS:
        if kind == "unreadable":
            continue  # root reads it; covered in-process as uid 65534
        d = base / f"cli-{kind}"
        d.mkdir()
        f = d / "s.yaml"
        plant(f, kind, victim, SCENARIO.encode())
        if kind == "replaced":
            os.unlink(f)
            f.symlink_to(victim)
        for argv in (["validate", str(f)], ["run", str(f), "--out", str(d / "runs")],
                     ["list", str(d)], ["audit", "--mutants", str(d), "--out",
                                        str(d / "audit")]):
            cases += 1
            try:
                proc = subprocess.run([sys.executable, "-m", "chaos", *argv],
                                      capture_output=True, text=True, timeout=120, cwd=REPO,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                failures.append(f"{argv[0]} x {kind}: HANG")
                continue
            if "Traceback" in proc.stderr or proc.returncode not in (0, 2):
                failures.append(f"{argv[0]} x {kind}: exit {proc.returncode} "
                                f"{proc.stderr[-400:]}")
    record_property(GENERATOR_CASES, ("planted-files (command line)", cases))
    assert victim.read_text() == "precious\n"
    assert not failures, "\n".join(failures)
