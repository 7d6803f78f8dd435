"""``report.html``: one self-contained page per run (SPEC §16.5).

Built only from the files a run leaves behind (``history.jsonl`` or ``history/*.jsonl``,
``results.json``, ``scenario.resolved.json``), so ``python -m chaos report RUN_DIR`` can rebuild it
at any time. The page has no network dependency: CSS, the small zoom script and every chart are
inline (SVG). Sections:

- the run header (scenario, seed, SQLite, processes with their exit codes);
- the verdict table with each checker's figures and evidence;
- the timeline: one lane per process; operations as marks (ok green, fail red, info amber, each
  spanning invoke→completion); nemesis faults as bands across every lane (``stop`` until its
  ``cont``); refusals, captures and give-ups as red/purple markers, retries as orange ticks,
  checkpoints as blue triangles; run phases on top; from ``sample`` records, the write-lock owner
  (purple bar) and processes waiting on a lock (orange bar) in their process's lane;
- latency over time per op kind (log scale);
- WAL size over time, when the history has ``sample`` records.

Elements carry ``data-*`` attributes (``data-process``, ``data-fault``, ``data-kind``) so tests
and scripts can read the page with an HTML parser.
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path

from . import history as hist
from .checkers.base import pair_ops, proc_name

REPORT_NAME = "report.html"

#: Plot geometry (px).
LABEL_W, PLOT_W, LANE_H, AXIS_H = 190, 1100, 26, 24
#: Per lane, above this many ops the marks are merged per pixel column (a page stays small).
MAX_MARKS_PER_LANE = 1500

OP_COLOURS = {"ok": "#2e9e44", "fail": "#d62728", "info": "#f0a30a"}
PHASE_COLOURS = {"warm-up": "#e8f1fb", "chaos": "#fdeaea", "heal": "#eaf7ea", "recover": "#f2f2f2"}
KIND_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf")
#: Errors that are the store refusing on purpose (SPEC §10, §12) rather than a plain failure.
REFUSAL_ERRORS = frozenset({"DeletedWalGenerationError", "StateDbReplacedError",
                            "StateDbCorruptError", "WriteContentionError",
                            "MaintenanceRefusedError"})
TOOLKIT = ("runner", "nemesis", "watch", "sampler")


# ------------------------------------------------------------------------------ loading
def load_run(run_dir: str | os.PathLike) -> tuple[list[dict], dict, dict]:
    """Read a run directory: ``(history records, results dict, resolved scenario dict)``.

    ``history.jsonl`` is preferred; without it the per-process ``history/*.jsonl`` are merged and
    completed (:func:`chaos.history.complete`). Missing ``results.json`` /
    ``scenario.resolved.json`` give ``{}``.

    Raises:
        FileNotFoundError: the directory has neither ``history.jsonl`` nor ``history/``.
    """
    run_dir = Path(run_dir)
    merged = run_dir / "history.jsonl"
    if merged.exists():
        records = hist.read_file(merged)
    elif (run_dir / "history").is_dir():
        records = hist.complete(hist.load(run_dir / "history"))
    else:
        raise FileNotFoundError(f"{run_dir}: no history.jsonl and no history/ directory: "
                                "not a chaos run directory")
    results = _read_json(run_dir / "results.json")
    scenario = _read_json(run_dir / "scenario.resolved.json")
    return records, results, scenario


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_report(run_dir: str | os.PathLike) -> Path:
    """(Re)build ``<run_dir>/report.html`` from the run's files; returns its path.

    Written to a temporary name then renamed, so a reader never sees half a page.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run directory (see :func:`load_run`).
    """
    run_dir = Path(run_dir)
    records, results, scenario = load_run(run_dir)
    page = render(records, results, scenario, title=run_dir.name)
    out = run_dir / REPORT_NAME
    tmp = run_dir / (REPORT_NAME + ".partial")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out


# ------------------------------------------------------------------------------ sample fields
def sample_wal_bytes(rec: dict) -> int | None:
    """WAL size in bytes of a ``sample`` record (``wal_bytes``; ``None`` when the WAL is absent)."""
    for key in ("wal_bytes", "wal_size", "wal_size_bytes", "wal"):
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return None


def _pid_of(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return _pid_of(value.get("pid"))
    if isinstance(value, (list, tuple)) and value:
        return _pid_of(value[0])
    if isinstance(value, str):
        parts = value.split()
        if len(parts) >= 2 and parts[0] == "PID" and parts[1].isdigit():
            return int(parts[1])
        if value.isdigit():
            return int(value)
    return None


def _cmd_of(value) -> str:
    if isinstance(value, dict):
        return str(value.get("command") or "")
    if isinstance(value, (list, tuple)) and len(value) > 1:
        return str(value[1])
    return ""


def sample_owner(rec: dict) -> int | None:
    """PID owning the write lock in a ``sample`` record (``write_lock``: dict/pid/[pid, cmd])."""
    for key in ("write_lock", "write_lock_owner", "lock_owner", "owner"):
        if rec.get(key) is not None:
            return _pid_of(rec[key])
    return None


def sample_waiters(rec: dict) -> list:
    """Who waits on the store in a ``sample`` record: process names or PIDs (``waiting``)."""
    out = []
    for w in rec.get("waiting") or []:
        if isinstance(w, str) and not w.isdigit() and not w.startswith("PID "):
            out.append(w)
        elif _pid_of(w) is not None:
            out.append(_pid_of(w))
    return out


# ------------------------------------------------------------------------------ model
class Timeline:
    """Everything the charts need, derived once from the history."""

    def __init__(self, records: list[dict]) -> None:
        self.records = records
        ts = [float(r["t"]) for r in records if isinstance(r.get("t"), (int, float))]
        starts = [float(r["t"]) for r in records
                  if r.get("type") == "phase" and r.get("phase") in ("warm-up", "watch")]
        self.t0 = min(starts) if starts else (min(ts) if ts else 0.0)
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
                if not name or name in TOOLKIT:
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
            if not name or name in TOOLKIT or typ in ("nemesis", "phase", "sample"):
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
                    if _pid_of(h) is not None:
                        cmds[_pid_of(h)] = _cmd_of(h)
            for key in ("write_lock", "write_lock_owner", "lock_owner", "owner"):
                if r.get(key) is not None and _pid_of(r[key]) is not None:
                    cmds.setdefault(_pid_of(r[key]), _cmd_of(r[key]))
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
                if name and name in self.lane_info and name not in TOOLKIT:
                    self.pid_lane[pid] = name  # a role's child (e.g. a maintenance command)
                    continue
                name = name if name and name not in TOOLKIT else f"pid {pid}"
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
        """Faults as ``{fault, step, t_start, t_end, status, details, role}``; ``stop`` lasts until
        the next ``cont`` of the same role (or the heal phase)."""
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
        heal = next((float(r["t"]) for r in self.records
                     if r.get("type") == "phase" and r.get("phase") == "heal"), self.t1)
        for i, f in enumerate(faults):
            if f["fault"] == "stop" and f["status"] == "done":
                cont = next((g for g in faults[i + 1:] if g["fault"] == "cont"
                             and g.get("role") == f.get("role")), None)
                f["t_end"] = cont["t_start"] if cont else heal
        return faults

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
            owner_rec = next((s[k] for k in ("write_lock", "write_lock_owner", "lock_owner")
                              if s.get(k) is not None), None)
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


# ------------------------------------------------------------------------------ rendering
def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _title(text: str) -> str:
    return f"<title>{_e(text)}</title>"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _fmt_s(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


def _axis(tl: Timeline, y: float, height: float) -> str:
    span = tl.t1 - tl.t0
    step = _nice_step(span / 10)
    parts = []
    k = 0.0
    while k <= span + 1e-9:
        x = LABEL_W + tl.x(tl.t0 + k)
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" '
                     f'y2="{y + height:.1f}"/>'
                     f'<text class="tick" x="{x:.1f}" y="{y - 4:.1f}">{k:g}s</text>')
        k = round(k + step, 9)
    return "".join(parts)


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _marker(shape: str, x: float, y: float, cls: str, title: str, attrs: str = "") -> str:
    if shape == "diamond":
        d = f"M{x:.1f},{y - 5:.1f} L{x + 4:.1f},{y:.1f} L{x:.1f},{y + 5:.1f} L{x - 4:.1f},{y:.1f}Z"
    elif shape == "triangle":
        d = f"M{x - 4:.1f},{y + 4:.1f} L{x + 4:.1f},{y + 4:.1f} L{x:.1f},{y - 4:.1f}Z"
    else:  # tick
        d = f"M{x:.1f},{y - 4:.1f} L{x:.1f},{y + 4:.1f}"
    return f'<path class="{cls}" d="{d}" {attrs}>{_title(title)}</path>'


def _timeline_svg(tl: Timeline, results: dict | None = None) -> str:
    top = AXIS_H + 18
    lanes_h = max(1, len(tl.lanes)) * LANE_H
    height = top + lanes_h + 10
    w = LABEL_W + PLOT_W + 40
    out = [f'<svg class="timeline" id="timeline" '
           f'width="{w}" height="{height}" viewBox="0 0 {w} {height}" '
           f'preserveAspectRatio="none">']
    for name, a, b in tl.phases():
        xa, xb = LABEL_W + tl.x(a), LABEL_W + tl.x(b)
        out.append(f'<g class="phase" data-phase="{_e(name)}"><rect x="{xa:.1f}" y="0" '
                   f'width="{max(1.0, xb - xa):.1f}" height="14" '
                   f'fill="{PHASE_COLOURS.get(name, "#eee")}"/>'
                   f'<text class="phase-label" x="{xa + 3:.1f}" y="11">{_e(name)}</text>'
                   f'{_title(f"{name}: {tl.rel(a):.2f}s to {tl.rel(b):.2f}s")}</g>')
    out.append(_axis(tl, top, lanes_h))
    spans = tl.sample_spans()
    events_by_lane: dict[str, list[dict]] = {}
    for r in tl.records:
        if r.get("type") == "event" and r.get("process") in tl.lane_info:
            events_by_lane.setdefault(r["process"], []).append(r)
        elif r.get("type") == "observed" and r.get("holder_pid") in tl.pid_lane:
            events_by_lane.setdefault(tl.pid_lane[r["holder_pid"]], []).append(r)
    ops_by_lane: dict[str, list] = {}
    for op in tl.ops:
        ops_by_lane.setdefault(op.process, []).append(op)
    for i, name in enumerate(tl.lanes):
        info = tl.lane_info[name]
        sub = info["kind"] or ""
        y = top + i * LANE_H
        mid = y + LANE_H / 2
        if name.startswith("pid "):
            label = f"{name} {sub}" if sub else name
            label = label if len(label) <= 30 else label[:29] + "…"
        else:
            label = name + (f"  pid {info['pid']}" if info["pid"] else "")
        out.append(f'<g class="lane" data-process="{_e(name)}" data-pid="{_e(info["pid"] or "")}">')
        out.append(f'<rect class="lane-bg{" odd" if i % 2 else ""}" x="0" y="{y}" width="{w}" '
                   f'height="{LANE_H}"/>')
        out.append(f'<text class="lane-label" x="4" y="{mid + 4:.1f}">{_e(label)}'
                   f'{_title(f"{name} ({sub})" if sub else name)}</text>')
        start = info["spawn"] or info["first"] or tl.t0
        end = info["exit"] or info["last"] or tl.t1
        xa, xb = LABEL_W + tl.x(start), LABEL_W + tl.x(end)
        out.append(f'<line class="life" x1="{xa:.1f}" y1="{mid:.1f}" x2="{xb:.1f}" '
                   f'y2="{mid:.1f}"/>')
        if info["exit"] is not None:
            code = info["exitcode"]
            bad = isinstance(code, int) and code != 0
            how = f"killed by signal {-code}" if isinstance(code, int) and code < 0 else f"exit {code}"
            out.append(f'<text class="exit{" bad" if bad else ""}" x="{xb + 2:.1f}" '
                       f'y="{mid + 4:.1f}">{"✕" if bad else "|"}{_title(f"{name}: {how}")}</text>')
        for what, a, b, title in spans.get(name, []):
            xa, xb = LABEL_W + tl.x(a), LABEL_W + tl.x(b)
            sy, sh = {"stopped": (y + 1, LANE_H - 2), "read": (y + LANE_H - 5, 3),
                      "retired": (y + LANE_H - 6, 5)}.get(what, (y + 2, 5))
            out.append(f'<rect class="span-{what}" data-kind="{what}" x="{xa:.1f}" '
                       f'y="{sy}" width="{max(2.0, xb - xa):.1f}" height="{sh}">'
                       f'{_title(f"{title} ({tl.rel(a):.2f}s to {tl.rel(b):.2f}s)")}</rect>')
        out.append(_op_marks(tl, ops_by_lane.get(name, []), y))
        for ev in events_by_lane.get(name, []):
            out.append(_event_mark(tl, ev, y))
        out.append("</g>")
    for f in tl.faults():
        xa = LABEL_W + tl.x(f["t_start"])
        xb = LABEL_W + tl.x(f["t_end"] if f["t_end"] is not None else f["t_start"])
        det = json.dumps(f["details"], default=str)
        if len(det) > 400:
            det = det[:397] + "..."
        cls = "fault" + (" fault-error" if f["status"] == "error" else "")
        out.append(f'<g class="{cls}" data-fault="{_e(f["fault"])}" data-step="{_e(f["step"])}">'
                   f'<rect x="{xa:.1f}" y="{top}" width="{max(3.0, xb - xa):.1f}" '
                   f'height="{lanes_h}"/><text class="fault-label" x="{xa + 2:.1f}" '
                   f'y="{top + 10}">{_e(f["fault"])}</text>'
                   f'{_title(_fault_title(tl, f, det))}</g>')
    for checker, status, t, text in _evidence_times(results or {}):
        x = LABEL_W + tl.x(t)
        out.append(f'<line class="evidence" data-evidence-of="{_e(checker)}" x1="{x:.1f}" '
                   f'y1="{top - 6}" x2="{x:.1f}" y2="{top + lanes_h}">'
                   f'{_title(f"{checker} {status} evidence at {tl.rel(t):.3f}s: {text}")}</line>')
    out.append("</svg>")
    return "".join(out)


def _fault_title(tl: Timeline, f: dict, det: str) -> str:
    return (f"nemesis step {f['step']}: {f['fault']} ({f['status']}) at "
            f"{tl.rel(f['t_start']):.2f}s: {det}")


def _op_title(op) -> str:
    rec = op.record()
    parts = [f"{op.op} {op.kind}", op.op_id]
    if op.t_done is not None and op.done is not None and op.done.get("latency_s") is not None:
        parts.append(_fmt_s(float(op.done["latency_s"])))
    if op.payload_id:
        parts.append(f"payload {op.payload_id}")
    if op.error:
        parts.append(f"{op.error}: {str(rec.get('message', ''))[:200]}")
    if rec.get("synthesized"):
        parts.append("outcome unknown: the process ended mid-call")
    return " | ".join(parts)


def _op_marks(tl: Timeline, ops: list, y: float) -> str:
    oy, oh = y + 9, LANE_H - 14
    if len(ops) <= MAX_MARKS_PER_LANE:
        out = []
        for op in ops:
            xa = LABEL_W + tl.x(op.t_invoke)
            xb = LABEL_W + tl.x(op.t_done if op.t_done is not None else op.t_invoke)
            refusal = op.error in REFUSAL_ERRORS
            cls = f"op op-{op.kind}" + (" refused" if refusal else "")
            out.append(f'<rect class="{cls}" data-op="{_e(op.op)}" x="{xa:.1f}" y="{oy:.1f}" '
                       f'width="{max(1.2, xb - xa):.1f}" height="{oh:.1f}">'
                       f'{_title(_op_title(op))}</rect>')
        return "".join(out)
    # Many ops: one rect per run of pixel columns per outcome (worst outcome drawn last).
    cols: dict[str, set[int]] = {"ok": set(), "info": set(), "fail": set()}
    counts = {"ok": 0, "info": 0, "fail": 0}
    for op in ops:
        a = int(tl.x(op.t_invoke))
        b = int(tl.x(op.t_done if op.t_done is not None else op.t_invoke))
        cols.setdefault(op.kind, set()).update(range(a, b + 1))
        counts[op.kind] = counts.get(op.kind, 0) + 1
    out = []
    for kind in ("ok", "info", "fail"):
        run_start = prev = None
        for c in sorted(cols.get(kind, ())) + [None]:
            if c is not None and prev is not None and c == prev + 1:
                prev = c
                continue
            if run_start is not None:
                out.append(f'<rect class="op op-{kind} merged" x="{LABEL_W + run_start:.1f}" '
                           f'y="{oy:.1f}" width="{prev - run_start + 1:.1f}" height="{oh:.1f}">'
                           f'{_title(f"{counts[kind]} {kind} ops in this lane (merged)")}</rect>')
            run_start = prev = c
    return "".join(out)


def _event_mark(tl: Timeline, ev: dict, y: float) -> str:
    x = LABEL_W + tl.x(ev["t"])
    kind = ev.get("event") or ev.get("what") or ""
    if ev.get("type") == "observed":
        if kind == "lock_held":
            return _marker("diamond", x, y + 5, "ev-refusal",
                           f"write lock held by PID {ev.get('holder_pid')} ({ev.get('command')}) "
                           f"for {ev.get('held_s')}s", 'data-kind="lock_held"')
        return ""
    if kind == "retry":
        return _marker("tick", x, y + LANE_H - 3, "ev-retry",
                       f"retry attempt {ev.get('attempt')}: slept "
                       f"{_fmt_s(float(ev.get('sleep_s') or 0))} ({ev.get('op')})",
                       'data-kind="retry"')
    if kind == "checkpoint":
        return _marker("triangle", x, y + LANE_H - 4, "ev-checkpoint",
                       f"checkpoint {ev.get('mode')} ({ev.get('trigger')}): log {ev.get('log')}, "
                       f"checkpointed {ev.get('checkpointed')}, busy {ev.get('busy')}"
                       + (f", error {ev.get('error')}" if ev.get("error") else ""),
                       'data-kind="checkpoint"')
    if kind in ("refusal", "write_gave_up", "quarantine"):
        detail = ev.get("detail") or ev.get("lock_owner") or ev.get("reason") or ""
        return _marker("diamond", x, y + 5, "ev-refusal",
                       f"{kind} {ev.get('reason', '')}: {str(detail)[:300]}",
                       f'data-kind="{_e(kind)}"')
    if kind == "capture":
        return _marker("diamond", x, y + 5, "ev-capture",
                       f"capture ({ev.get('trigger')}): {ev.get('dir')}", 'data-kind="capture"')
    if kind == "migration":
        return _marker("triangle", x, y + 5, "ev-migration", f"migration step {ev.get('step')}",
                       'data-kind="migration"')
    return ""


def _latency_svg(tl: Timeline) -> str:
    points: dict[str, list[tuple[float, float, str]]] = {}
    for op in tl.ops:
        if op.done is None or op.done.get("latency_s") is None:
            continue
        lat = float(op.done["latency_s"])
        if lat <= 0:
            continue
        points.setdefault(op.op, []).append((float(op.done["t"]), lat, op.kind))
    if not points:
        return '<p class="none">no completed operation with a latency in this history</p>'
    lats = [p[1] for pts in points.values() for p in pts]
    lo = 10 ** math.floor(math.log10(min(lats)))
    hi = 10 ** math.ceil(math.log10(max(lats)))
    if hi <= lo:
        hi = lo * 10
    ph, top = 220, 20
    w, h = LABEL_W + PLOT_W + 40, top + ph + 30

    def yof(v: float) -> float:
        return top + ph - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * ph

    out = [f'<svg class="latency" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}">', _axis(tl, top, ph)]
    dec = lo
    while dec <= hi * 1.0001:
        yy = yof(dec)
        out.append(f'<line class="grid" x1="{LABEL_W}" y1="{yy:.1f}" x2="{LABEL_W + PLOT_W}" '
                   f'y2="{yy:.1f}"/><text class="tick" x="{LABEL_W - 6}" y="{yy + 4:.1f}" '
                   f'text-anchor="end">{_fmt_s(dec)}</text>')
        dec *= 10
    legend_y = top + ph + 24
    for k, (kind, pts) in enumerate(sorted(points.items())):
        colour = KIND_PALETTE[k % len(KIND_PALETTE)]
        # Keep the slowest op per pixel column and outcome: spikes survive, the page stays small.
        best: dict[tuple[int, str], tuple[float, float, str]] = {}
        for t, lat, outcome in pts:
            key = (int(tl.x(t)), outcome)
            if key not in best or lat > best[key][1]:
                best[key] = (t, lat, outcome)
        out.append(f'<g class="lat-kind" data-kind="{_e(kind)}" fill="{colour}" '
                   f'stroke="{colour}">')
        for t, lat, outcome in best.values():
            fill = "none" if outcome != "ok" else colour
            out.append(f'<circle cx="{LABEL_W + tl.x(t):.1f}" cy="{yof(lat):.1f}" r="2.2" '
                       f'fill="{fill}">{_title(f"{kind} {outcome}: {_fmt_s(lat)} at {tl.rel(t):.2f}s")}'
                       f'</circle>')
        out.append("</g>")
        lx = LABEL_W + 110 * k
        out.append(f'<circle cx="{lx}" cy="{legend_y - 4}" r="4" fill="{colour}"/>'
                   f'<text class="tick" x="{lx + 7}" y="{legend_y}">{_e(kind)} ({len(pts)})</text>')
    out.append("</svg>")
    return "".join(out)


def _wal_svg(tl: Timeline) -> str:
    pts = [(float(s["t"]), sample_wal_bytes(s)) for s in tl.samples]
    pts = [(t, v) for t, v in pts if v is not None]
    if not pts:
        return ('<p class="none">no <code>sample</code> records in this history: WAL size was not '
                'sampled</p>')
    hi = max(v for _, v in pts) or 1
    ph, top = 160, 20
    w, h = LABEL_W + PLOT_W + 40, top + ph + 14

    def yof(v: float) -> float:
        return top + ph - v / hi * ph

    out = [f'<svg class="wal" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}">', _axis(tl, top, ph)]
    for frac in (0, 0.5, 1):
        yy = yof(hi * frac)
        out.append(f'<text class="tick" x="{LABEL_W - 6}" y="{yy + 4:.1f}" text-anchor="end">'
                   f'{_fmt_bytes(hi * frac)}</text>')
    path = [f"M{LABEL_W + tl.x(pts[0][0]):.1f},{yof(pts[0][1]):.1f}"]
    for t, v in pts[1:]:  # a step line: the size holds until the next sample
        path.append(f"H{LABEL_W + tl.x(t):.1f} V{yof(v):.1f}")
    out.append(f'<path class="wal-line" d="{" ".join(path)}"/>')
    for r in tl.records:
        if (r.get("type") == "event" and r.get("event") == "checkpoint") or (
                r.get("type") == "observed" and r.get("what") == "checkpoint"):
            out.append(_marker("triangle", LABEL_W + tl.x(r["t"]), top + ph - 4, "ev-checkpoint",
                               f"checkpoint at {tl.rel(r['t']):.2f}s ({r.get('process', '')})",
                               'data-kind="checkpoint"'))
    out.append("</svg>")
    return "".join(out)


def _evidence_line(tl: Timeline, item) -> str:
    text = json.dumps(item, default=str, ensure_ascii=False)
    if isinstance(item, dict) and isinstance(item.get("t"), (int, float)):
        return f"+{tl.rel(item['t']):.3f}s  {text}"
    return text


def _evidence_times(results: dict) -> list[tuple[str, str, float, str]]:
    """``(checker, status, t, one-line text)`` for evidence items of verdicts that did not pass."""
    out = []
    for v in results.get("verdicts") or []:
        if v.get("status") in ("PASS", "SKIPPED"):
            continue
        for item in v.get("evidence") or []:
            if isinstance(item, dict) and isinstance(item.get("t"), (int, float)):
                out.append((str(v.get("checker")), str(v.get("status")), float(item["t"]),
                            json.dumps(item, default=str, ensure_ascii=False)[:300]))
    return out


def _verdicts_html(results: dict, tl: Timeline) -> str:
    verdicts = results.get("verdicts") or []
    if not verdicts:
        obs = results.get("observations")
        if obs:
            rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in obs.items())
            return f'<table class="figures">{rows}</table>'
        return '<p class="none">no verdicts (results.json missing or empty)</p>'
    rows = []
    for v in verdicts:
        status = str(v.get("status", "?"))
        figures = v.get("figures") or {}
        fig_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_short(val))}</td></tr>"
                           for k, val in figures.items() if k != "error")
        err = figures.get("error")
        evidence = v.get("evidence") or []
        ev_html = ""
        if evidence:
            ev_html = (f"<details><summary>evidence ({len(evidence)})</summary><pre>"
                       + _e("\n".join(_evidence_line(tl, e) for e in evidence))
                       + "</pre></details>")
        err_html = f"<details open><summary>error</summary><pre>{_e(err)}</pre></details>" if err else ""
        rows.append(f'<tr class="verdict" data-checker="{_e(v.get("checker"))}" '
                    f'data-status="{_e(status)}"><td>{_e(v.get("checker"))}</td>'
                    f'<td><span class="badge s-{_e(status)}">{_e(status)}</span></td>'
                    f'<td>{_e(v.get("summary", ""))}'
                    f'<details><summary>figures</summary><table class="figures">{fig_rows}'
                    f'</table></details>{ev_html}{err_html}</td></tr>')
    return ('<table class="verdicts"><tr><th>checker</th><th>verdict</th><th>figures and '
            'evidence</th></tr>' + "".join(rows) + "</table>")


def _short(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 500 else text[:497] + "..."


def _header_html(tl: Timeline, results: dict, scenario: dict, title: str) -> str:
    name = results.get("scenario") or scenario.get("name") or title
    facts = [("scenario", name), ("seed", results.get("seed", scenario.get("seed", "?"))),
             ("duration", f"{results.get('duration_s', scenario.get('duration', '?'))} s"),
             ("SQLite", results.get("sqlite", "?")),
             ("run directory", results.get("run_dir", title))]
    if results.get("wal_reset_exposure"):
        facts.append(("WAL-reset exposure", results["wal_reset_exposure"]))
    if "exit_code" in results:
        facts.append(("exit code", results["exit_code"]))
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    desc = scenario.get("description") or results.get("description") or ""
    procs = results.get("processes") or []
    prow = "".join(f"<tr><td>{_e(p.get('process'))}</td><td>{_e(p.get('pid'))}</td>"
                   f"<td>{_e(p.get('exitcode'))}</td></tr>" for p in procs)
    ptable = (f'<table class="figures"><tr><th>process</th><th>pid</th><th>exit code</th></tr>'
              f"{prow}</table>") if procs else ""
    never = tl.never_fired()
    never_html = ("<p class=\"warn\">nemesis steps that never fired: "
                  + _e(", ".join(f"{r.get('step')} ({r.get('fault')})" for r in never)) + "</p>"
                  ) if never else ""
    return (f"<h1>{_e(name)}</h1><p>{_e(desc)}</p><table class=\"facts\">{rows}</table>"
            f"{ptable}{never_html}")


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px}
table{border-collapse:collapse;margin:6px 0} th,td{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top} table.facts th{background:#f6f6f6}
.badge{font-weight:bold;padding:1px 6px;border-radius:3px;color:#fff}
.s-PASS{background:#2e9e44}.s-FAIL{background:#d62728}.s-INCONCLUSIVE{background:#c98d00}
.s-SKIPPED{background:#999}
pre{white-space:pre-wrap;max-height:320px;overflow:auto;background:#f8f8f8;padding:6px}
.scroll{overflow-x:auto;border:1px solid #ddd}
.grid{stroke:#e3e3e3;stroke-width:1} .tick{font-size:10px;fill:#666}
.lane-bg{fill:#fff} .lane-bg.odd{fill:#fafafa} .lane-label{font-size:11px;fill:#222}
.life{stroke:#bbb;stroke-width:1} .exit{font-size:12px;fill:#666} .exit.bad{fill:#d62728}
.op-ok{fill:#2e9e44} .op-fail{fill:#d62728} .op-info{fill:#f0a30a}
.op.refused{stroke:#6b0000;stroke-width:1.2}
.fault rect{fill:#b03fd4;fill-opacity:.13;stroke:#b03fd4;stroke-opacity:.6}
.fault-error rect{stroke-dasharray:4 3;fill:#888}
.fault-label{font-size:10px;fill:#7a1fa0;font-weight:bold}
.phase-label{font-size:10px;fill:#555}
.ev-retry{stroke:#ff7f0e;stroke-width:1.5} .ev-checkpoint{fill:#1f77b4}
.ev-refusal{fill:#d62728;stroke:#600;stroke-width:.8} .ev-capture{fill:#7a1fa0}
.ev-migration{fill:#17becf}
.span-lock{fill:#7a1fa0;fill-opacity:.75} .span-wait{fill:#ff7f0e;fill-opacity:.8}
.span-stopped{fill:#555;fill-opacity:.35} .span-retired{fill:#d62728;fill-opacity:.6}
.span-read{fill:#17becf;fill-opacity:.8}
.evidence{stroke:#d62728;stroke-width:1.5;stroke-dasharray:3 2}
.wal-line{fill:none;stroke:#1f77b4;stroke-width:1.5}
.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.none{color:#777} .warn{color:#a05a00}
"""

_JS = """
(function(){var z=document.getElementById('zoom');if(!z)return;
var svgs=document.querySelectorAll('svg.zoomable');var base=[];
svgs.forEach(function(s){base.push(+s.getAttribute('width'));});
z.addEventListener('input',function(){var f=+z.value;
svgs.forEach(function(s,i){s.setAttribute('width',Math.round(base[i]*f));});});})();
"""


def render(records: list[dict], results: dict, scenario: dict, title: str = "chaos run") -> str:
    """The whole page as a string (see the module docstring for its sections)."""
    tl = Timeline(records)
    legend = ("".join(f'<span><i class="sw" style="background:{c}"></i>{k}</span>'
                      for k, c in OP_COLOURS.items())
              + '<span><i class="sw" style="background:#b03fd4;opacity:.4"></i>nemesis fault</span>'
              '<span><i class="sw" style="background:#d62728;outline:1px solid #600"></i>'
              'refusal / give-up</span><span><i class="sw" style="background:#7a1fa0"></i>'
              'capture, write-lock owner</span><span><i class="sw" style="background:#ff7f0e">'
              '</i>retry, waiting on a lock</span><span><i class="sw" style="background:#1f77b4">'
              '</i>checkpoint</span><span><i class="sw" style="background:#555;opacity:.4"></i>'
              'stopped (SIGSTOP)</span><span><i class="sw" style="background:#d62728;opacity:.6">'
              '</i>holds a retired WAL generation</span><span><i class="sw" '
              'style="background:#17becf"></i>in a read transaction (read mark)</span>'
              '<span><i class="sw" style="border-left:2px dashed #d62728"></i>evidence of a '
              'checker that did not pass</span>')
    timeline = _timeline_svg(tl, results).replace('class="timeline"', 'class="timeline zoomable"', 1)
    latency = _latency_svg(tl).replace('class="latency"', 'class="latency zoomable"', 1)
    wal = _wal_svg(tl).replace('class="wal"', 'class="wal zoomable"', 1)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
            f"{_header_html(tl, results, scenario, title)}"
            f"<h2>Verdicts</h2>{_verdicts_html(results, tl)}"
            f"<h2>Timeline</h2><p class=\"legend\">{legend}</p>"
            '<p><label>zoom <input id="zoom" type="range" min="1" max="12" step="0.5" value="1">'
            f'</label> (times are seconds since the start; hover a mark for details)</p>'
            f'<div class="scroll">{timeline}</div>'
            f"<h2>Latency over time (per op kind, log scale; hollow: failed)</h2><div class=\"scroll\">{latency}</div>"
            f"<h2>WAL size over time (sampled; triangles: checkpoints)</h2><div class=\"scroll\">{wal}</div>"
            f"<script>{_JS}</script></body></html>\n")
