"""The timeline of a run, derived once from its history: lanes, phases, faults, spans
(what :mod:`chaos.report.html` draws; SPEC §16.5)."""

from __future__ import annotations

from ..history import (
    TOOLKIT_PROCESSES,
    command_of,
    pair_ops,
    phase_time,
    pid_of,
    proc_name,
    run_start,
    sample_owner,
    sample_waiters,
    sample_wal_bytes,
)

#: Plot width (px) the timeline's x axis maps onto.
PLOT_W = 1100
#: Faults whose effect lasts until a later step undoes it (None: until the heal phase).
LASTING = {"stop": "cont", "fill_disk": "free_disk", "io_error": None, "slow_io": None,
           "torn_write": None}


class Timeline:
    """Everything the charts need, derived once from the history."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records
        ts = [float(r["t"]) for r in records if isinstance(r.get("t"), (int, float))]
        self.t0 = run_start(records)  # one time base: seconds since the run start
        self.t1 = max(ts) if ts else self.t0 + 1.0
        if self.t1 - self.t0 < 1e-3:
            self.t1 = self.t0 + 1.0
        self.pid_lane: dict[int, str] = {}
        self.lanes: list[str] = []
        self.lane_info: dict[str, dict] = {}
        self._build_lanes()
        self.ops = [o for o in pair_ops(records) if o.process in self.lane_info]
        self.samples = [r for r in records if r.get("type") == "sample"]

    def x(self, t: float) -> float:
        """Plot x (px, relative to the plot's left edge) of monotonic time ``t``."""
        return (float(t) - self.t0) / (self.t1 - self.t0) * PLOT_W

    def rel(self, t: float) -> float:
        """Seconds since the run start of a time on the history's clock."""
        return float(t) - self.t0

    def _lane(self, name: str) -> dict:
        if name not in self.lane_info:
            self.lanes.append(name)
            self.lane_info[name] = {"pid": None, "kind": "", "spawn": None, "exit": None,
                                    "exitcode": None, "first": None, "last": None}
        return self.lane_info[name]

    def _build_lanes(self) -> None:
        for r in self.records:
            typ = r.get("type")
            if typ == "process":
                name = proc_name(r)
                if not name or name in TOOLKIT_PROCESSES:
                    continue
                info = self._lane(name)
                pid = r.get("child_pid") or (r.get("pid") if r.get("process") == name else None)
                if pid:
                    info["pid"] = pid
                    self.pid_lane[int(pid)] = name
                info["kind"] = r.get("kind") or info["kind"]
                if r.get("phase") == "spawn":
                    info["spawn"] = r["t"]
                elif r.get("phase") == "exit":
                    info["exit"] = r["t"]
                    info["exitcode"] = r.get("exitcode")
                continue
            name = r.get("process")
            if not name or name in TOOLKIT_PROCESSES or typ in ("nemesis", "phase", "sample"):
                continue
            info = self._lane(name)
            if r.get("pid") and info["pid"] is None:
                info["pid"] = r["pid"]
                self.pid_lane[int(r["pid"])] = name
            info["first"] = r["t"] if info["first"] is None else info["first"]
            info["last"] = r["t"]
        # Processes seen only by sampling (watch, or a foreign SQLite client during a run).
        for r in self.records:
            if r.get("type") not in ("sample", "observed"):
                continue
            cmds = {}
            for key in ("holders", "waiting"):
                for h in r.get(key) or []:
                    if pid_of(h) is not None:
                        cmds[pid_of(h)] = command_of(h)
            owner = r.get("write_lock")
            if owner is not None and pid_of(owner) is not None:
                cmds.setdefault(pid_of(owner), command_of(owner))
            named = {}
            if r.get("type") == "observed" and r.get("holder_pid") and r.get("command"):
                cmds[int(r["holder_pid"])] = r["command"]
            for entry in r.get("procs") or []:
                if isinstance(entry, dict) and entry.get("pid") is not None:
                    named[int(entry["pid"])] = entry.get("process")
                    cmds.setdefault(int(entry["pid"]), entry.get("command") or "")
            for pid, cmd in sorted(cmds.items()):
                if pid in self.pid_lane:
                    if cmd and not self.lane_info[self.pid_lane[pid]]["kind"]:
                        self.lane_info[self.pid_lane[pid]]["kind"] = cmd
                    continue
                name = named.get(pid)
                if name and name in self.lane_info and name not in TOOLKIT_PROCESSES:
                    self.pid_lane[pid] = name  # a role's child (e.g. a maintenance command)
                    continue
                name = name if name and name not in TOOLKIT_PROCESSES else f"pid {pid}"
                info = self._lane(name)
                info["pid"], info["kind"] = pid, info["kind"] or cmd
                self.pid_lane[pid] = name
            for pid in set(cmds):
                info = self.lane_info[self.pid_lane[pid]]
                info["first"] = r["t"] if info["first"] is None else min(info["first"], r["t"])
                info["last"] = r["t"] if info["last"] is None else max(info["last"], r["t"])

    def phases(self) -> list[tuple[str, float, float]]:
        marks = [(r["phase"], float(r["t"])) for r in self.records if r.get("type") == "phase"]
        out = []
        for i, (name, t) in enumerate(marks):
            end = marks[i + 1][1] if i + 1 < len(marks) else self.t1
            out.append((name, t, end))
        return out

    def faults(self) -> list[dict]:
        """Faults as ``{fault, step, t_start, t_end, status, details, role, lasting}``: a lasting
        fault (:data:`LASTING`) lasts until its undoing step (``stop`` until the next ``cont`` of
        the same role, ``fill_disk`` until ``free_disk``) or the heal phase; the others end when
        they were applied."""
        by_step: dict = {}
        for r in self.records:
            if r.get("type") != "nemesis":
                continue
            key = (r.get("step"), r.get("fault"))
            f = by_step.setdefault(key, {"fault": r.get("fault"), "step": r.get("step"),
                                         "t_start": None, "t_end": None, "status": "?",
                                         "details": {}, "role": r.get("role")})
            phase = r.get("phase")
            if phase == "start":
                f["t_start"] = float(r["t"])
            elif phase in ("done", "error", "never"):
                f["t_end"] = float(r["t"])
                f["status"] = phase
                f["details"] = {k: v for k, v in r.items()
                                if k not in ("t", "wall", "process", "pid", "type", "phase")}
                if f["t_start"] is None:
                    f["t_start"] = float(r["t"])
        faults = [f for f in by_step.values() if f["status"] != "never"]
        faults.sort(key=lambda f: f["t_start"] or 0.0)
        heal = phase_time(self.records, "heal") or self.t1
        for i, f in enumerate(faults):
            f["lasting"] = f["fault"] in LASTING and f["status"] == "done"
            if f["lasting"]:
                undo = LASTING[f["fault"]]
                ender = next((g for g in faults[i + 1:] if undo and g["fault"] == undo
                              and (undo != "cont" or g.get("role") == f.get("role"))), None)
                f["t_end"] = ender["t_start"] if ender else heal
                f["healed_by"] = f"{undo} (step {ender['step']})" if ender else "the heal phase"
        return faults

    def wal_sizes(self) -> list[tuple[float, float]]:
        """``(t, bytes)`` of the WAL at the path, from the sampler's records."""
        pts = [(float(s["t"]), sample_wal_bytes(s)) for s in self.samples]
        return [(t, v) for t, v in pts if v is not None]

    def retired_generations_held(self) -> list[tuple[float, int]]:
        """``(t, n)``: how many distinct retired WAL generations (a ``-wal`` inode that is not
        the one at the path) some process still held at each sample."""
        out = []
        for s in self.samples:
            held = set()
            for entry in s.get("procs") or []:
                wal = entry.get("wal") if isinstance(entry, dict) else None
                if isinstance(wal, dict) and wal.get("current") is False:
                    held.add((wal.get("dev"), wal.get("ino")))
            out.append((float(s["t"]), len(held)))
        return out

    def never_fired(self) -> list[dict]:
        return [r for r in self.records if r.get("type") == "nemesis" and r.get("phase") == "never"]

    def lane_of(self, who) -> str | None:
        """The lane of a process name or PID (None: not a lane of this timeline)."""
        if isinstance(who, str):
            return who if who in self.lane_info else None
        if isinstance(who, int):
            return self.pid_lane.get(who)
        return None

    def sample_spans(self) -> dict[str, list[tuple[str, float, float, str]]]:
        """Per lane: ``(what, t_from, t_to, title)`` spans derived from consecutive ``sample``
        records: ``lock`` (owns the write lock), ``wait`` (waits on the store), ``stopped``
        (SIGSTOPped, from the sampler's process status)."""
        out: dict[str, list] = {}
        for i, s in enumerate(self.samples):
            t = float(s["t"])
            t_next = float(self.samples[i + 1]["t"]) if i + 1 < len(self.samples) else t
            owner_rec = s.get("write_lock")
            owner = None
            if isinstance(owner_rec, dict) and owner_rec.get("process"):
                owner = self.lane_of(owner_rec["process"])
            if owner is None:
                owner = self.lane_of(sample_owner(s))
            if owner is not None:
                pid = sample_owner(s)
                out.setdefault(owner, []).append(
                    ("lock", t, t_next, f"{owner} (PID {pid}) holds the WAL write lock"))
            for who in sample_waiters(s):
                lane = self.lane_of(who)
                if lane is not None:
                    out.setdefault(lane, []).append(
                        ("wait", t, t_next, f"{lane} waits on a store lock"))
            readers = set()
            for lk in s.get("locks") or []:
                if (isinstance(lk, dict) and str(lk.get("lock", "")).startswith("read mark")
                        and not lk.get("waiting")):
                    lane = self.lane_of(lk.get("process")) or self.lane_of(lk.get("pid"))
                    if lane is not None and lane not in readers:
                        readers.add(lane)
                        out.setdefault(lane, []).append(
                            ("read", t, t_next, f"{lane} is in a read transaction ({lk['lock']}): "
                                                "a checkpoint cannot pass its snapshot"))
            for entry in s.get("procs") or []:
                if isinstance(entry, dict) and any(
                        isinstance(entry.get(k), dict) and entry[k].get("current") is False
                        for k in ("db", "wal", "shm")):
                    lane = self.lane_of(entry.get("process")) or self.lane_of(entry.get("pid"))
                    if lane is not None:
                        out.setdefault(lane, []).append(
                            ("retired", t, t_next, f"{lane} holds a retired (deleted or "
                                                   "replaced) store file"))
                if isinstance(entry, dict) and entry.get("status") == "stopped":
                    lane = self.lane_of(entry.get("process")) or self.lane_of(entry.get("pid"))
                    if lane is not None:
                        out.setdefault(lane, []).append(
                            ("stopped", t, t_next, f"{lane} is stopped (SIGSTOP)"))
        merged: dict[str, list] = {}
        for lane, spans in out.items():
            acc: list = []
            for span in spans:
                if acc and acc[-1][0] == span[0] and abs(acc[-1][2] - span[1]) < 1e-9:
                    acc[-1] = (span[0], acc[-1][1], span[2], acc[-1][3])
                else:
                    acc.append(span)
            merged[lane] = acc
        return merged


