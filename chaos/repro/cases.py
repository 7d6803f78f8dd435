"""Which lockup a bundle shows: the rules, in order, each citing the fields it read (issue 25).

A bundle is one moment of a store. Each rule below looks for the state one lockup class leaves
behind; the first that matches decides (the order puts the causes before their effects: a deleted
sidecar or a stopped lock owner explains a growing WAL, not the other way round):

1. ``sidecar``: a process holds a deleted, replaced or renamed ``-wal``/``-shm`` or ``state.db``
   (a retired generation, SPEC §10.1);
2. ``stopped_owner``: a stopped process (SIGSTOP, a debugger, a suspended laptop lid) holds a lock
   writers need: the WAL write lock, the checkpointer or recovery lock, RESERVED, PENDING or
   EXCLUSIVE on ``state.db``, or the checkpoint lock;
3. ``full_disk``: the store's filesystem has no room left (at most :data:`FULL_FREE_BYTES` free,
   or no free inode);
4. ``maintenance``: a maintenance command (``sessions optimize`` ..., or SQLite's shell running
   VACUUM/.backup) holds the store beside a writer;
5. ``long_reader``: the WAL holds at least :data:`BIG_WAL_FRAMES` frames and one read
   transaction's snapshot is older than most of them (it pins the WAL);
6. ``starved``: the WAL holds at least :data:`BIG_WAL_FRAMES` frames while read transactions
   with recent snapshots overlap (no single one pins it: the checkpointer never gets a moment
   with no reader to restart the WAL).

Nothing matched: :class:`NotReproducible`, with what each rule saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .source import Bundle

#: At most this many bytes free on the store's filesystem is a full disk.
FULL_FREE_BYTES = 1 << 20
#: A WAL with at least this many frames in use has outgrown the checkpoint cadence (the store
#: checkpoints every 50 writes: about 600 frames of small messages, SPEC §4).
BIG_WAL_FRAMES = 1000
#: Locks a stopped process can hold that writers wait for.
WRITER_LOCKS = ("WAL write lock", "checkpoint lock", "recover lock", "RESERVED", "PENDING",
                "EXCLUSIVE")
CHECKPOINT_FLOCK = "checkpoint lock "  # "checkpoint lock exclusive (...)" / "shared (...)"
CLIENT_ROLES = ("gateway", "cli", "cron", "desktop")
#: Maintenance commands the ``run`` fault can replay holding the store's write lock.
REPLAYED_COMMANDS = ("optimize", "optimize-storage", "prune")


class NotReproducible(Exception):
    """The bundle shows no state of a lockup class the toolkit reproduces (``reasons``: what each
    rule saw)."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("; ".join(reasons))


@dataclass
class Case:
    """A matched lockup class.

    Attributes:
        kind: ``sidecar``/``stopped_owner``/``full_disk``/``maintenance``/``long_reader``/
            ``starved``; ``title``: one line; ``facts``: what matched, each citing the bundle.
        key: indexes (in ``processes.processes``) of the processes the fault stands for.
        detail: what the scenario builder needs (lock names, retired files, commands, ...).
    """

    kind: str
    title: str
    facts: list[str]
    key: list[int] = field(default_factory=list)
    detail: dict = field(default_factory=dict)


def held(p: dict) -> list[str]:
    """Lock names a process holds (not waits for)."""
    return [n for n in p.get("holds") or [] if isinstance(n, str)]


def readers(b: Bundle) -> list[dict]:
    """``{"index", "pid", "role", "mark", "value", "behind"}`` for every read mark held."""
    out = []
    for i, p in enumerate(b.processes):
        for j, lk in enumerate(p.get("locks") or []):
            mark = lk.get("read_mark") if isinstance(lk, dict) else None
            if isinstance(mark, dict) and not lk.get("waiting") and lk.get("mode") == "read":
                out.append({"index": i, "lock": j, "pid": p.get("pid"), "role": p.get("role"),
                            "state": p.get("state"), "mark": mark.get("index"),
                            "value": mark.get("value"), "behind": mark.get("frames_behind")})
    return out


def wal_frames(b: Bundle) -> tuple[int | None, str]:
    """Frames in use in the WAL and the field they come from (wal-index mxFrame, else the WAL
    file's frame count)."""
    mx = b.get("sqlite_files", "wal_index", "mx_frame")
    if isinstance(mx, int):
        return mx, b.ref("sqlite_files", "wal_index", "mx_frame")
    n = b.get("sqlite_files", "wal_header", "frames_in_file")
    if isinstance(n, int):
        return n, b.ref("sqlite_files", "wal_header", "frames_in_file")
    return None, "sqlite_files.wal_index (absent)"


def _sidecar(b: Bundle) -> Case | None:
    for i, p in enumerate(b.processes):
        retired = [f for f in p.get("retired") or [] if isinstance(f, str)]
        if not retired:
            continue
        return Case("sidecar", "a retired generation: a sidecar deleted or replaced under a "
                    "live holder", [f"PID {p.get('pid')} ({p.get('role')}) holds "
                                    f"{', '.join(retired)}: {b.ref('processes', 'processes', i, 'retired')}"],
                    [i], {"retired": retired})
    return None


def _stopped(b: Bundle) -> Case | None:
    for i, p in enumerate(b.processes):
        if p.get("state") != "stopped":
            continue
        locks = [n for n in held(p) if n in WRITER_LOCKS or n.startswith(CHECKPOINT_FLOCK)]
        if not locks:
            continue
        return Case("stopped_owner", "a stopped process owns a lock every writer needs",
                    [f"PID {p.get('pid')} ({p.get('role')}) is stopped: "
                     f"{b.ref('processes', 'processes', i, 'state')}",
                     f"it holds {', '.join(locks)}: {b.ref('processes', 'processes', i, 'holds')}"],
                    [i], {"locks": locks,
                          "checkpointing": any(n == "checkpoint lock" or n.startswith(
                              CHECKPOINT_FLOCK + "exclusive") for n in locks)})
    return None


def _full_disk(b: Bundle) -> Case | None:
    free = b.get("store", "disk", "free_bytes")
    inodes = b.get("store", "disk", "free_inodes")
    if isinstance(free, int) and free <= FULL_FREE_BYTES:
        why = f"{free} bytes free: {b.ref('store', 'disk', 'free_bytes')}"
    elif inodes == 0:
        why = f"no free inode: {b.ref('store', 'disk', 'free_inodes')}"
    else:
        return None
    fs = b.get("store", "disk", "fs_type")
    return Case("full_disk", "the store's filesystem is full",
                [why] + ([f"filesystem {fs}: {b.ref('store', 'disk', 'fs_type')}"] if fs else []),
                [], {"free": free})


def _maintenance(b: Bundle) -> Case | None:
    procs = b.processes
    writers = [i for i, p in enumerate(procs) if p.get("role") in CLIENT_ROLES]
    for i, p in enumerate(procs):
        if p.get("role") != "maintenance" or not writers:
            continue
        m = p.get("maintenance") if isinstance(p.get("maintenance"), dict) else {}
        facts = [f"PID {p.get('pid')} runs a maintenance command ({m.get('command')}"
                 f"{', --force' if m.get('force') else ''}): "
                 f"{b.ref('processes', 'processes', i, 'maintenance')}",
                 "beside the writer(s) " + ", ".join(
                     f"PID {procs[w].get('pid')} ({procs[w].get('role')}): "
                     f"{b.ref('processes', 'processes', w, 'role')}" for w in writers[:4])]
        if held(p):
            facts.append(f"it holds {', '.join(held(p))}: "
                         f"{b.ref('processes', 'processes', i, 'holds')}")
        return Case("maintenance", "a maintenance command beside a writer", facts, [i],
                    {"command": m.get("command"), "force": bool(m.get("force")),
                     "ours": "hermes" in str(p.get("command", "")), "writers": writers})
    return None


def _wal(b: Bundle) -> Case | None:
    frames, where = wal_frames(b)
    if frames is None or frames < BIG_WAL_FRAMES:
        return None
    found = [r for r in readers(b) if isinstance(r["behind"], int)]
    backfill = b.get("sqlite_files", "wal_index", "n_backfill")
    facts = [f"the WAL holds {frames} frames (>= {BIG_WAL_FRAMES}): {where}"]
    if isinstance(backfill, int):
        facts.append(f"checkpoints copied {backfill} of them back: "
                     f"{b.ref('sqlite_files', 'wal_index', 'n_backfill')}")
    if not found:
        return None
    oldest = max(found, key=lambda r: r["behind"])
    pids = {r["pid"] for r in found}
    cite = [f"PID {r['pid']} ({r['role']}) reads at read mark {r['mark']} = frame {r['value']}, "
            f"{r['behind']} frames behind: "
            f"{b.ref('processes', 'processes', r['index'], 'locks', r['lock'], 'read_mark')}"
            for r in sorted(found, key=lambda r: -r["behind"])[:6]]
    if oldest["behind"] * 2 >= frames:  # its snapshot is older than half the WAL
        return Case("long_reader", "a long read transaction pins the WAL", facts + cite,
                    [oldest["index"]], {"frames": frames, "reader_pids": [oldest["pid"]]})
    # Readers: the processes reading now (not a writer's own moment of reading) and the other
    # instances of the same programs (between two of their transactions right now).
    procs = b.processes
    reading = {r["index"] for r in found if procs[r["index"]].get("role") not in ("gateway",
                                                                                "cli", "cron")}
    commands = {procs[i].get("command") for i in reading}
    group = sorted(reading | {i for i, p in enumerate(procs) if p.get("command") in commands
                              and not held_writer(p)})
    if len(group) > len(reading):
        cite.append(f"{len(group) - len(reading)} more instance(s) of the same program(s), "
                    "between two read transactions now: " + ", ".join(
                        b.ref("processes", "processes", i, "command") for i in group
                        if i not in reading))
    return Case("starved", "the checkpointer is starved: read transactions overlap without end",
                facts + cite, group or sorted({r["index"] for r in found}),
                {"frames": frames, "reader_pids": sorted(pids)})


def held_writer(p: dict) -> bool:
    """Whether a process holds a writer's lock now (it writes, whatever else it does)."""
    return any(n in WRITER_LOCKS or n.startswith(CHECKPOINT_FLOCK) for n in held(p))


RULES = (_sidecar, _stopped, _full_disk, _maintenance, _wal)


def classify(b: Bundle) -> Case:
    """The lockup class the bundle shows (the first rule that matches).

    Raises:
        NotReproducible: no rule matched; ``reasons`` says what each one saw.
    """
    for rule in RULES:
        case = rule(b)
        if case is not None:
            return case
    raise NotReproducible(_reasons(b))


def _reasons(b: Bundle) -> list[str]:
    procs = b.processes
    frames, where = wal_frames(b)
    out = []
    if b.get("processes") is None:
        out.append("the bundle has no process list (processes: not collected; see "
                   "not_collected): no lock owner, reader or maintenance can be seen")
    else:
        out.append(f"{len(procs)} process(es) hold the store: "
                   + (", ".join(f"PID {p.get('pid')} {p.get('role')} {p.get('state')}"
                                for p in procs[:6]) or "none"))
    out.append("no process holds a retired generation (no deleted or replaced sidecar)")
    out.append("no stopped process holds a writer's lock")
    free = b.get("store", "disk", "free_bytes")
    out.append(f"the disk has {free} bytes free" if isinstance(free, int)
               else "the disk's free space is not in the bundle")
    out.append("no maintenance command runs beside a writer")
    if frames is None:
        out.append("no WAL frame count (no -wal or -shm)")
    elif frames < BIG_WAL_FRAMES:
        out.append(f"the WAL holds {frames} frames ({where}), under {BIG_WAL_FRAMES}: not grown")
    else:
        out.append(f"the WAL holds {frames} frames ({where}) but no read transaction is open "
                   "now: what kept the checkpointer from restarting it is gone")
    return out
