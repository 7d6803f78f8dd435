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

from .. import store
from ..history import sample_wal_bytes
from .timeline import PLOT_W, Timeline

#: Plot geometry (px).
LABEL_W, LANE_H, AXIS_H = 190, 26, 24
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


# ------------------------------------------------------------------------------ rendering
def write_report(run_dir: str | os.PathLike) -> Path:
    """(Re)build ``<run_dir>/report.html`` from the run's files; returns its path.

    Written atomically (:func:`chaos.store.write_text_atomic`): a reader never sees half a page.

    Raises:
        FileNotFoundError: ``run_dir`` is not a run directory (see :func:`chaos.store.load_run`).
    """
    run = store.RunDir(Path(run_dir))
    records, results, scenario = store.load_run(run.path)
    page = render(records, results, scenario, title=run.path.name)
    return store.write_text_atomic(run.report, page)


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
    if (results.get("wal_reset") or {}).get("line"):
        facts.append(("WAL-reset race", results["wal_reset"]["line"]))
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
