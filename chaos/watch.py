"""``python -m chaos watch``: observe a live installation, inject nothing (SPEC §16.5, §10.2).

What a user attaches to a lockup report. Every ``interval`` seconds it records:

- the holders of the store (:func:`hermes_state.processes.holders.scan`: every process with ``state.db``,
  ``-wal`` or ``-shm`` open, a deleted/replaced generation included);
- through the run sampler (:class:`chaos.sampler.Sampler`, the same ``sample`` records a chaos
  run has): what each holder holds (current or retired inode), its process status (a SIGSTOPped
  holder shows as ``stopped``), every POSIX lock on the store from ``/proc/locks`` with its SQLite
  meaning, the WAL write-lock owner, blocked lock requests (``waiting``), the WAL size;
- checkpoints seen from the outside: the ``-shm`` checkpoint info (``nBackfill`` rising = frames
  copied back into ``state.db``), the WAL header (checkpoint sequence or salts changing = the log
  restarted after a complete checkpoint) and the WAL file shrinking (TRUNCATE).

It never opens the store with SQLite and never writes a store file: it ``stat``s the paths,
reads ``/proc`` and reads the first bytes of ``-wal`` and ``-shm`` with plain ``read()`` (it
holds no POSIX lock, so closing those descriptors cancels nothing).

Limits: a process spinning in SQLite's busy handler is not a *blocked* request in
``/proc/locks`` (``docs/decisions/0012-chaos-faults-and-checks.md``); the page shows the owner and
every holder, which is what names the culprit.

Output: ``<out>/watch-<UTCSTAMP>/`` with ``watch.json`` (parameters), ``history/`` (``watch.jsonl``
observations + ``sampler.jsonl`` samples), ``history.jsonl``, ``results.json`` (``kind: watch``,
figures, no verdicts) and ``report.html``.

History records written here (besides the sampler's ``sample`` records), type ``observed``:
``what`` = ``holder`` (``phase`` appear/gone, ``holder_pid``, ``command``, ``files``),
``write_lock`` (``holder_pid`` or null, ``command``: the owner changed), ``lock_held``
(``holder_pid``, ``held_s``: the same owner kept the write lock past :data:`LONG_HOLD_S`),
``checkpoint_lock`` (``holder_pid`` or null, ``command``, ``status``: the exclusive holder of
``state.db.checkpoint.lock`` changed, issue 12), ``checkpoint_lock_held`` (``holder_pid``,
``held_s``, ``status``: it kept it past :data:`LONG_HOLD_S`, or holds it while stopped),
``checkpoint`` (``reasons``: list of strings, ``wal``/``shm`` header fields) and ``wal_header``
(the header at start and whenever it changes).
"""

from __future__ import annotations

import datetime as _dt
import os
import sqlite3
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hermes_state.testing import (
    HAVE_PROC,
    default_db_path,
    scan_holders,
    utc_stamp,
    wal_header,
    wal_index_header,
)

from . import history as hist
from . import store
from .sampler import Sampler

#: Seconds between samples.
INTERVAL_S = 0.1
#: A write lock kept this long by one process is reported (SQLite's busy timeout in the store).
LONG_HOLD_S = 1.0
PROCESS = "watch"


class WatchError(Exception):
    """Bad input for watch (no store at the path); the message says what to do."""


# ------------------------------------------------------------------------------ headers
def read_wal_header(db_path: str | os.PathLike) -> dict | None:
    """The 32-byte WAL header of ``<db>-wal`` (SQLite file format §4.1), or None.

    Returns:
        ``{"magic", "format", "page_size", "checkpoint_seq", "salt1", "salt2"}`` (ints; big-endian
        on disk), or None when the file is missing, shorter than 32 bytes or not a WAL.
    """
    try:
        with open(f"{os.fspath(db_path)}-wal", "rb") as fh:
            raw = fh.read(32)
    except OSError:
        return None
    return wal_header(raw)


def read_shm_header(db_path: str | os.PathLike) -> dict | None:
    """The WAL-index header of ``<db>-shm`` (SQLite wal.c ``WalIndexHdr``/``WalCkptInfo``).

    Returns:
        ``{"mx_frame", "n_page", "salt1", "salt2", "n_backfill", "n_backfill_attempted"}``
        (native byte order, as SQLite writes it), or None when the file is missing or short.
        ``mx_frame`` = frames in the WAL that readers may use; ``n_backfill`` = frames a
        checkpoint has copied back into ``state.db``.
    """
    try:
        with open(f"{os.fspath(db_path)}-shm", "rb") as fh:
            raw = fh.read(136)
    except OSError:
        return None
    head = wal_index_header(raw)
    if head is None:
        return None
    keep = ("mx_frame", "n_page", "salt1", "salt2", "n_backfill", "n_backfill_attempted")
    return {k: head[k] for k in keep}


def checkpoint_reasons(prev: dict, cur: dict) -> list[str]:
    """Why the change from ``prev`` to ``cur`` (``{"wal", "shm", "wal_bytes"}``) shows a
    checkpoint; empty when it does not."""
    out = []
    pw, cw = prev.get("wal"), cur.get("wal")
    if pw and cw and (pw["checkpoint_seq"], pw["salt1"], pw["salt2"]) != (
            cw["checkpoint_seq"], cw["salt1"], cw["salt2"]):
        out.append(f"WAL restarted: checkpoint sequence {pw['checkpoint_seq']} -> "
                   f"{cw['checkpoint_seq']}, salts changed")
    ps, cs = prev.get("shm"), cur.get("shm")
    if ps and cs and (ps["salt1"], ps["salt2"]) == (cs["salt1"], cs["salt2"]) \
            and cs["n_backfill"] > ps["n_backfill"]:
        out.append(f"backfilled frames {ps['n_backfill']} -> {cs['n_backfill']} of "
                   f"{cs['mx_frame']}")
    pb, cb = prev.get("wal_bytes"), cur.get("wal_bytes")
    if pb is not None and cb is not None and cb < pb:
        out.append(f"WAL truncated or removed {pb} -> {cb} bytes")
    return out


# ------------------------------------------------------------------------------ the watcher
class Watcher:
    """Samples one store until told to stop. Use :func:`watch`."""

    def __init__(self, db_path: Path, run_dir: Path, interval_s: float, console: Console) -> None:
        self.db_path = db_path
        self.run_dir = run_dir
        self.console = console
        self.interval_s = interval_s
        self.hist_dir = store.RunDir(run_dir).history_dir
        self.writer = hist.HistoryWriter(self.hist_dir / store.history_file(PROCESS), PROCESS)
        self.commands: dict[int, str] = {}
        self.sampler = Sampler(db_path, self.hist_dir, self._processes, interval_s=interval_s)
        self.seen: dict[int, dict] = {}
        self.owner: int | None = None
        self.owner_since = 0.0
        self.owner_reported = False
        self.longest: dict[int, float] = {}
        self.ckpt: dict | None = None  # the exclusive holder of the checkpoint lock now
        self.ckpt_since = 0.0
        self.ckpt_reported = False
        self.ckpt_seen: dict[int, dict] = {}
        self.waiting: dict[tuple, dict] = {}
        self.retired: dict[int, dict] = {}
        self.checkpoints: list[dict] = []
        self.wal_sizes: list[int] = []
        self.prev: dict | None = None
        self.samples = 0
        self.t0 = time.monotonic()

    def _processes(self) -> list[tuple[str, int]]:
        scan = scan_holders(self.db_path)
        now = time.monotonic()
        present = set()
        for h in scan.holders:
            present.add(h.pid)
            self.commands[h.pid] = h.command
            if h.pid not in self.seen:
                self.seen[h.pid] = {"pid": h.pid, "command": h.command, "files": list(h.files),
                                    "first_s": round(now - self.t0, 3)}
                self.writer.record("observed", what="holder", phase="appear", holder_pid=h.pid,
                                   command=h.command, files=list(h.files))
                self.say(f"holder appeared: {escape(h.line())}")
            self.seen[h.pid].update(files=list(h.files), last_s=round(now - self.t0, 3),
                                    present=True)
            if h.retired and h.pid not in self.retired:
                self.retired[h.pid] = {"pid": h.pid, "command": h.command,
                                       "files": list(h.retired)}
                self.say(f"[red]PID {h.pid} ({escape(h.command)}) holds a retired WAL "
                         f"generation: {escape(', '.join(h.retired))}[/]")
        for pid, info in self.seen.items():
            if info.get("present") and pid not in present:
                info["present"] = False
                self.writer.record("observed", what="holder", phase="gone", holder_pid=pid,
                                   command=info["command"])
                self.say(f"holder gone: PID {pid} ({escape(str(info['command']))})")
        return [(f"pid {h.pid}", h.pid) for h in scan.holders]

    def say(self, text: str) -> None:
        """One progress line: rich markup whose values were escaped where it was built."""
        self.console.print(f"[dim]{time.monotonic() - self.t0:7.2f}s[/] {text}", highlight=False)

    def tick(self) -> None:
        """One sample: holders, locks, WAL size (sampler) then checkpoints and lock changes."""
        rec = self.sampler.sample()
        self.samples += 1
        now = time.monotonic()
        wal_bytes = rec.get("wal_bytes") or 0
        self.wal_sizes.append(wal_bytes)
        owner = rec.get("write_lock")
        pid = owner["pid"] if owner else None
        if pid != self.owner:
            if self.owner is not None:
                held = now - self.owner_since
                self.longest[self.owner] = max(self.longest.get(self.owner, 0.0), held)
            self.owner, self.owner_since, self.owner_reported = pid, now, False
            self.writer.record("observed", what="write_lock", holder_pid=pid,
                               command=owner["command"] if owner else None)
        elif pid is not None:
            held = now - self.owner_since
            self.longest[pid] = max(self.longest.get(pid, 0.0), held)
            if held >= LONG_HOLD_S and not self.owner_reported:
                self.owner_reported = True
                line = f"state.db write lock held by PID {pid} ({owner['command']}) for {held:.1f}s"
                self.writer.record("observed", what="lock_held", holder_pid=pid,
                                   command=owner["command"], held_s=round(held, 3))
                self.say(f"[yellow]{escape(line)}[/]")
        self._checkpoint_lock(rec, now)
        for lk in rec.get("locks") or []:
            if lk.get("waiting"):
                key = (lk["pid"], lk["file"], lk["lock"])
                if key not in self.waiting:
                    self.waiting[key] = {"pid": lk["pid"], "file": lk["file"], "lock": lk["lock"],
                                         "command": self.commands.get(lk["pid"], "?")}
                    self.say(f"[yellow]PID {lk['pid']} waits for the {escape(str(lk['lock']))} "
                             f"on {escape(str(lk['file']))}[/]")
        cur = {"wal": read_wal_header(self.db_path), "shm": read_shm_header(self.db_path),
               "wal_bytes": wal_bytes}
        if self.prev is None or cur["wal"] != self.prev.get("wal"):
            if cur["wal"] is not None:
                self.writer.record("observed", what="wal_header", **cur["wal"])
        if self.prev is not None:
            reasons = checkpoint_reasons(self.prev, cur)
            if reasons:
                self.checkpoints.append({"t_s": round(now - self.t0, 3), "reasons": reasons})
                self.writer.record("observed", what="checkpoint", reasons=reasons,
                                   reason="; ".join(reasons), wal=cur["wal"], shm=cur["shm"],
                                   wal_bytes=wal_bytes)
        self.prev = cur

    def _checkpoint_lock(self, rec: dict, now: float) -> None:
        """Follow the holder of the checkpoint lock that holds others off (issue 12; issue 24
        item 3): an exclusive one (maintenance, or a write that may restart the WAL: every
        write waits), else a stopped shared one (a frozen checkpoint: maintenance and the
        writes that may restart the WAL wait)."""
        holders = [h for h in rec.get("checkpoint_lock") or [] if not h.get("waiting")]
        ex = next((h for h in holders if h.get("mode") == "exclusive"), None) or next(
            (h for h in holders if h.get("status") == "stopped"), None)
        pid = ex["pid"] if ex else None
        if pid != (self.ckpt or {}).get("pid"):
            self.ckpt, self.ckpt_since, self.ckpt_reported = ex, now, False
            self.writer.record("observed", what="checkpoint_lock", holder_pid=pid,
                               command=ex["command"] if ex else None,
                               status=ex["status"] if ex else None)
        if ex is None:
            return
        held = now - self.ckpt_since
        seen = self.ckpt_seen.setdefault(pid, {"pid": pid, "command": ex["command"],
                                               "mode": ex.get("mode"), "longest_hold_s": 0.0,
                                               "stopped": False})
        seen["longest_hold_s"] = round(max(seen["longest_hold_s"], held), 3)
        seen["stopped"] = seen["stopped"] or ex["status"] == "stopped"
        if not self.ckpt_reported and (held >= LONG_HOLD_S or ex["status"] == "stopped"):
            self.ckpt_reported = True
            self.writer.record("observed", what="checkpoint_lock_held", holder_pid=pid,
                               command=ex["command"], held_s=round(held, 3), status=ex["status"])
            exclusive = ex.get("mode") == "exclusive"
            self.say(f"[yellow]checkpoint lock held {'exclusively' if exclusive else 'shared'} "
                     f"by PID {pid} ({escape(str(ex['command']))})"
                     + (", stopped" if ex["status"] == "stopped" else "")
                     + f" for {held:.1f}s: " + ("every write of the store waits for it[/]"
                                                if exclusive else "maintenance, and a write "
                                                "that may restart the WAL, wait for it[/]"))

    def status_line(self) -> str:
        present = [p for p, i in self.seen.items() if i.get("present")]
        if self.owner is not None:
            lock = (f"PID {self.owner} ({self.commands.get(self.owner, '?')}) for "
                    f"{time.monotonic() - self.owner_since:.1f}s")
        else:
            lock = "free"
        wal = self.wal_sizes[-1] if self.wal_sizes else 0
        return (f"holders {len(present)}  write lock {lock}  WAL {wal} bytes  "
                f"checkpoints seen {len(self.checkpoints)}  waiting {len(self.waiting)}")

    def results(self, started_at: str, duration: float) -> dict:
        current_hold = time.monotonic() - self.owner_since
        if self.owner is not None:
            self.longest[self.owner] = max(self.longest.get(self.owner, 0.0), current_hold)
        owners = [{"pid": p, "command": self.commands.get(p, "?"), "longest_hold_s": round(s, 3)}
                  for p, s in sorted(self.longest.items(), key=lambda kv: -kv[1])]
        sizes = self.wal_sizes or [0]
        holders_seen = sorted(self.seen.values(), key=lambda h: h["pid"])
        obs = {
            "holders": "; ".join(f"PID {h['pid']} ({h['command']}): {', '.join(h['files'])}"
                                 for h in holders_seen) or "none",
            "write-lock owner": "; ".join(f"PID {o['pid']} ({o['command']}) longest hold "
                                          f"{o['longest_hold_s']:.1f}s" for o in owners)
                                or "nobody took the write lock while watched",
            "write lock at the end": (
                f"state.db write lock held by PID {self.owner} "
                f"({self.commands.get(self.owner, '?')}) for {current_hold:.1f}s"
                if self.owner is not None else "free"),
            "WAL size": f"min {min(sizes)}, max {max(sizes)}, last {sizes[-1]} bytes",
            "checkpoints seen": (f"{len(self.checkpoints)}: " + "; ".join(
                c["reasons"][0] for c in self.checkpoints[:3])
                + (" ..." if len(self.checkpoints) > 3 else "")) if self.checkpoints else "0",
            "waiting on a lock": "; ".join(f"PID {w['pid']} ({w['command']}) for the {w['lock']} "
                                           f"on {w['file']}" for w in self.waiting.values())
                                 or "no blocked lock request seen",
            "checkpoint lock": "; ".join(
                f"PID {c['pid']} ({c['command']}) {c.get('mode') or 'exclusive'}, longest "
                f"hold {c['longest_hold_s']:.1f}s" + (", stopped" if c["stopped"] else "")
                for c in self.ckpt_seen.values()) or "no exclusive or stopped holder seen",
            "checkpoint lock at the end": (
                f"held {'exclusively' if self.ckpt.get('mode') == 'exclusive' else 'shared'}"
                f" by PID {self.ckpt['pid']} ({self.ckpt['command']})"
                + (", stopped" if self.ckpt["status"] == "stopped" else "")
                if self.ckpt else "free"),
            "retired WAL generation": "; ".join(f"PID {r['pid']} ({r['command']}): "
                                                f"{', '.join(r['files'])}"
                                                for r in self.retired.values()) or "none",
        }
        return {
            "kind": "watch", "scenario": "watch", "db": str(self.db_path),
            "run_dir": str(self.run_dir), "started_at": started_at,
            "duration_s": round(duration, 3), "interval_s": self.interval_s,
            "samples": self.samples, "sqlite": sqlite3.sqlite_version, "verdicts": [],
            "observations": obs, "holders_seen": holders_seen, "write_lock_owners": owners,
            "write_lock_at_end": self.owner, "wal_bytes": {"min": min(sizes), "max": max(sizes),
                                                           "last": sizes[-1]},
            "checkpoints_seen": len(self.checkpoints), "checkpoints": self.checkpoints[:100],
            "waiting": list(self.waiting.values()), "retired_holders": list(self.retired.values()),
            "checkpoint_lock_holders": list(self.ckpt_seen.values()),
        }


def print_summary(console: Console, results: dict) -> None:
    """The terminal table of a watch run (``results["observations"]``)."""
    table = Table(title=Text(f"watch {results.get('db', '')} ({results.get('duration_s', '?')}s, "
                             f"{results.get('samples', '?')} samples)"))
    table.add_column("what", no_wrap=True)
    table.add_column("seen", overflow="fold", min_width=20)
    for key, value in (results.get("observations") or {}).items():
        table.add_row(escape(str(key)), escape(str(value)))
    console.print(table)


def watch(*, home: str | os.PathLike | None = None, profile: str | None = None,
          duration_s: float | None = None, interval_s: float | None = None,
          out_dir: str | os.PathLike = store.DEFAULT_OUT, console: Console | None = None) -> Path:
    """Watch the store of ``home`` (default ``$HERMES_HOME``/``~/.hermes``) and write a run dir.

    Args:
        home, profile: which store (SPEC §1): ``<home>[/profiles/<profile>]/state.db``.
        duration_s: seconds to watch; None = until Ctrl-C / SIGTERM (KeyboardInterrupt), which
            still writes everything.
        interval_s: seconds between samples (default :data:`INTERVAL_S`).
        out_dir: parent of ``watch-<UTCSTAMP>/``.
        console: progress and the summary table.
    Returns:
        The run directory.
    Raises:
        WatchError: no ``state.db`` at the path (nothing is created).
        OSError: the run directory cannot be written.
    """
    console = console or Console()
    db_path = Path(os.path.realpath(default_db_path(home, profile)))
    if not db_path.is_file():
        raise WatchError(f"{db_path}: no store to watch (give --home DIR or set HERMES_HOME); "
                         "watch never creates one")
    if not HAVE_PROC:
        raise WatchError("watch needs /proc (Linux): holders, locks and retired WAL "
                         "generations are read there")
    interval = interval_s or INTERVAL_S
    if duration_s is not None:
        interval = min(interval, max(duration_s, 0.01))  # a 2 s watch samples within its 2 s
    run_dir = store.fresh_dir(Path(out_dir), f"watch-{utc_stamp()}")
    run = store.RunDir(run_dir)
    params = {"db": str(db_path), "interval_s": interval, "duration_s": duration_s}
    store.write_json(run_dir / store.WATCH_PARAMS, params)
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    w = Watcher(db_path, run_dir, interval, console)
    console.print(f"[bold]watch[/] {escape(str(db_path))} every {interval:g}s"
                  + (f" for {duration_s:g}s" if duration_s else " until Ctrl-C"), highlight=False)
    console.print(f"run directory {run_dir}", highlight=False, markup=False)
    w.writer.record("phase", phase="watch")
    last_status = -1.0
    try:
        while duration_s is None or time.monotonic() - w.t0 < duration_s:
            w.tick()
            elapsed = time.monotonic() - w.t0
            if elapsed - last_status >= 1.0:
                last_status = elapsed
                w.say(escape(w.status_line()))
            time.sleep(interval)
    except KeyboardInterrupt:
        console.print("stopped: writing what was seen", highlight=False)
    duration = time.monotonic() - w.t0
    w.writer.record("phase", phase="end")
    w.writer.close()
    w.sampler.stop()
    records = hist.load(w.hist_dir)
    hist.write_merged(records, run.history)
    results = w.results(started_at, duration)
    store.write_results(run.results, results)
    print_summary(console, results)
    from .report.html import write_report

    console.print(f"report {write_report(run_dir)}", highlight=False, markup=False)
    return run_dir
