"""The run directory: every file a chaos run writes, its name, and how it is written (SPEC §16.5).

Jepsen's ``store.clj``: one module names every file of a run and writes it atomically; every
other module asks it for a path. A run directory ``runs/<name>-<UTCSTAMP>-seed<N>/`` holds:

=========================  ======================================================================
``scenario.resolved.json``  the resolved scenario (every default filled; itself a valid scenario)
``history/``                one ``<process>.jsonl`` per process (``runner.jsonl``,
                            ``sampler.jsonl``, ``gateway-0.jsonl``, ...), flushed as it happens
``history.jsonl``           the merged, completed history (written when the run ends)
``results.json``            verdicts and figures (``results.previous.json`` after a recheck)
``report.html``             the page (:mod:`chaos.report.html`)
``INTERRUPTED.json``        the mark of a run stopped before its end
``home/``                   the HERMES_HOME of the run: ``state.db``, captures, spool
``final/``                  the store after every role stopped (what the checkers judge)
``logs/``                   per-process stdout/stderr
``failpoints/``             per-process arm files (``<process>.arm``)
``sources/``                stores ``replace_db`` copies over the live one
``fixture-manifest.json``   the manifest of a ``schema_vN`` fixture
``shrunk.yaml``, ``shrink.json``, ``shrink/``   the output of ``chaos shrink``
``watch.json``              the parameters of a ``chaos watch`` run
=========================  ======================================================================

Writes that a reader may race (results, report, resolved scenario, marks) go to a ``.partial``
file that is fsynced, then renamed over the final name, then the directory is fsynced.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

from hermes_state.testing import utc_stamp

from . import history as hist
from .files import inputs, names

SCENARIO_FILE = "scenario.resolved.json"
HISTORY_DIR = "history"
HISTORY_FILE = "history.jsonl"
RESULTS_FILE = "results.json"
PREVIOUS_RESULTS_FILE = "results.previous.json"
REPORT_FILE = "report.html"
FS_BACKING_DIR = "fs-backing"     # the faulty filesystem's disk (chaos/fs), kept as evidence
FS_LOG_FILE = "fs.jsonl"          # its log of every write, fsync, rename and fault
INTERRUPTED_FILE = "INTERRUPTED.json"
HOME_DIR = "home"
FINAL_DIR = "final"
LOGS_DIR = "logs"
FAILPOINTS_DIR = "failpoints"
SOURCES_DIR = "sources"
FIXTURE_MANIFEST = "fixture-manifest.json"
SHRUNK_FILE = "shrunk.yaml"
SHRINK_LOG = "shrink.json"
SHRINK_DIR = "shrink"
WATCH_PARAMS = "watch.json"
#: The store's file name inside ``home/`` and ``final/``; its sidecars add ``-wal``/``-shm``.
DB_NAME = "state.db"
#: The disk balloon of ``fill_disk`` inside ``home/`` (never evidence: not copied out).
BALLOON_NAME = ".chaos-balloon"
#: History files of the toolkit's own processes (the runner and the sampler thread).
RUNNER_PROCESS = "runner"
SAMPLER_PROCESS = "sampler"
#: Default parent of run directories.
DEFAULT_OUT = "runs"
#: Largest JSON file of a run read back (``results.json``, ``scenario.resolved.json``: KiBs).
MAX_JSON_BYTES = 256 * 1024 ** 2


def _process(process: str) -> str:
    """``process`` when it can name a file (:func:`chaos.files.names.check`), else BadName."""
    return names.check(process, "process", names.MAX_COMPONENT_BYTES)


def history_file(process: str) -> str:
    """``<process>.jsonl``: a process's own history file inside ``history/``.

    Raises:
        chaos.files.names.BadName: ``process`` cannot be a file name (``..``, ``/``, NUL...).
    """
    return f"{_process(process)}.jsonl"


@dataclass(frozen=True)
class RunDir:
    """The paths of one run directory (nothing is created by asking)."""

    path: Path

    @property
    def home(self) -> Path:
        return self.path / HOME_DIR

    @property
    def db_path(self) -> Path:
        return self.home / DB_NAME

    @property
    def final(self) -> Path:
        return self.path / FINAL_DIR

    @property
    def history_dir(self) -> Path:
        return self.path / HISTORY_DIR

    @property
    def history(self) -> Path:
        return self.path / HISTORY_FILE

    @property
    def results(self) -> Path:
        return self.path / RESULTS_FILE

    @property
    def scenario(self) -> Path:
        return self.path / SCENARIO_FILE

    @property
    def report(self) -> Path:
        return self.path / REPORT_FILE

    @property
    def logs(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def fs_backing(self) -> Path:
        return self.path / FS_BACKING_DIR

    @property
    def fs_log(self) -> Path:
        return self.path / FS_LOG_FILE

    @property
    def failpoints(self) -> Path:
        return self.path / FAILPOINTS_DIR

    @property
    def sources(self) -> Path:
        return self.path / SOURCES_DIR

    def log(self, process: str) -> Path:
        """``logs/<process>.log``. Raises :class:`chaos.files.names.BadName` for a bad name."""
        return self.logs / f"{_process(process)}.log"

    def arm_file(self, process: str) -> Path:
        """``failpoints/<process>.arm``. Raises :class:`chaos.files.names.BadName` for a bad
        name."""
        return self.failpoints / f"{_process(process)}.arm"

    def process_history(self, process: str) -> Path:
        """``history/<process>.jsonl``."""
        return self.history_dir / history_file(process)

    def is_run(self) -> bool:
        """True when the directory has a history (merged or per process)."""
        return self.history.is_file() or self.history_dir.is_dir()


def run_dir_of(db_path: str | os.PathLike) -> RunDir:
    """The run directory of a run's ``home/state.db`` path."""
    return RunDir(Path(db_path).parent.parent)


def inside(path: str | os.PathLike, run_dir: str | os.PathLike) -> bool:
    """True when ``path`` (symlinks resolved) lies inside ``run_dir`` (issue 11: every path a
    scenario names stays inside its run)."""
    real, top = os.path.realpath(path), os.path.realpath(run_dir)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


# ------------------------------------------------------------------------------ creation
def fresh_dir(out: Path, name: str) -> Path:
    """Create ``<out>/<name>`` (or ``<name>-2``, ``-3``, ... if taken) atomically and return it.

    Raises:
        chaos.files.names.BadName: ``name`` cannot be a directory name
            (:func:`chaos.files.names.check`).
        OSError: ``out`` cannot be created or written, or 999 names are taken.
    """
    base_name = names.check(name, "run directory", names.MAX_COMPONENT_BYTES)
    out = Path(out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    base = out / base_name
    for k in range(1, 1000):
        candidate = base if k == 1 else base.with_name(f"{base.name}-{k}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise OSError(f"could not create a fresh run directory beside {base}")


def make_run_dir(out: Path, name: str, seed: int) -> Path:
    """Create ``<out>/<name>-<UTCSTAMP>-seed<N>[-k]/`` atomically (two runs never share one).

    Raises:
        chaos.files.names.BadName: ``name`` is not a plain file name (a ValueError).
        OSError: ``out`` cannot be created or written (the caller prints it in one line).
    """
    names.check(name, "scenario name")
    return fresh_dir(Path(out), f"{name}-{utc_stamp()}-seed{seed}")


# ------------------------------------------------------------------------------ atomic writes
def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through ``<path>.partial``: write, fsync the file, rename,
    fsync the directory. A reader sees the old file or the whole new one, never half.

    A ``.partial`` left over (or planted: a link, a FIFO) is removed, never opened; the new one
    is created exclusively without following a link, so nothing is written through a link and
    nothing blocks. The rename replaces a link at ``path`` itself, not what it points at.

    Raises:
        OSError: a directory is in the way (``path`` or its ``.partial``), or the write failed.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise IsADirectoryError(f"{tmp}: a directory is in the way; remove it") from None
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                 | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with open(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    if os.path.isdir(path) and not os.path.islink(path):
        os.unlink(tmp)
        raise IsADirectoryError(f"{path}: a directory is in the way; remove it")
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def write_json(path: Path, payload: dict, *, sort_keys: bool = False) -> Path:
    """``payload`` as indented JSON, atomically (:func:`write_text_atomic`)."""
    return write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=sort_keys,
                                              default=str) + "\n")


def write_results(path: Path, payload: dict) -> Path:
    """Write ``results.json`` (indent 2, sorted keys), atomically."""
    return write_json(path, payload, sort_keys=True)


def read_json(path: Path) -> dict:
    """A JSON object file, or ``{}`` when it is missing, unreadable or not an object (a link,
    a FIFO, a device or a file over :data:`MAX_JSON_BYTES` is never read:
    :mod:`chaos.files.inputs`)."""
    try:
        data = json.loads(inputs.read_text(path, MAX_JSON_BYTES))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def replace_results(run: RunDir, payload: dict) -> None:
    """Write new ``results.json``, keeping the old one as ``results.previous.json``."""
    if run.results.exists():
        os.replace(run.results, run.path / PREVIOUS_RESULTS_FILE)
    write_results(run.results, payload)


# ------------------------------------------------------------------------------ marks
def mark_interrupted(run_dir: Path, elapsed_s: float) -> None:
    """Write ``INTERRUPTED.json`` (``{"at": UTC ISO time, "elapsed_s"}``) in ``run_dir``: the
    run stopped before its end, so any verdict judged later sees a partial history."""
    write_json(Path(run_dir) / INTERRUPTED_FILE, {
        "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed_s, 3)})


def interrupted_mark(run_dir: Path) -> dict | None:
    """The interruption mark of ``run_dir`` (``{}`` when unreadable), or None when unmarked."""
    path = Path(run_dir) / INTERRUPTED_FILE
    if not path.exists():
        return None
    return read_json(path)


# ------------------------------------------------------------------------------ reading a run
def load_run(run_dir: str | os.PathLike) -> tuple[list[dict], dict, dict]:
    """Read a run directory: ``(history records, results dict, resolved scenario dict)``.

    ``history.jsonl`` is preferred; without it (an interrupted run) the per-process files are
    read as the runner reads them (:func:`chaos.history.load_run_history`). A missing
    ``results.json`` / ``scenario.resolved.json`` gives ``{}``.

    Raises:
        FileNotFoundError: the directory has neither ``history.jsonl`` nor ``history/``.
    """
    run = RunDir(Path(run_dir))
    if run.history.exists():
        records = hist.read_file(run.history)
    elif run.history_dir.is_dir():
        records = hist.load_run_history(run.history_dir)
    else:
        raise FileNotFoundError(f"{run.path}: no {HISTORY_FILE} and no {HISTORY_DIR}/ "
                                "directory: not a chaos run directory")
    return records, read_json(run.results), read_json(run.scenario)
