"""The timeline chart of ``report.html``: one lane per process, operations as bars from invoke to
completion, store events as markers, faults as bands, phases on top, and every checker's
evidence marked where it happened (SPEC §16.5; issue 16).

Drawn from a :class:`chaos.report.timeline.Timeline`; the evidence marks come from
:func:`chaos.report.evidence.marks`. Elements carry ``data-*`` attributes (``data-process``,
``data-op``, ``data-outcome``, ``data-fault``, ``data-evidence-of``, ``data-at-s``) so tests
and scripts can read the page.
"""

from __future__ import annotations

import json

from .svg import CHAR_W, LABEL_W, RIGHT_PAD, axis, esc, fault_bands, fault_text, fmt_s, \
    marker, pack_labels, title
from .timeline import PLOT_W, Timeline

LANE_H = 26
#: Rows of the phase strip and of the fault-label strip above the lanes (labels never overlap).
PHASE_ROWS, FAULT_ROWS, ROW_H = 2, 2, 13
#: Per lane, above this many ops the bars are merged per pixel column (a page stays small).
MAX_MARKS_PER_LANE = 1500
PHASE_COLOURS = {"warm-up": "#e8f1fb", "chaos": "#fdeaea", "heal": "#eaf7ea", "recover": "#f2f2f2",
                 "watch": "#e8f1fb"}
#: Errors that are the store refusing on purpose (SPEC §10, §12) rather than a plain failure.
REFUSAL_ERRORS = frozenset({"DeletedWalGenerationError", "StateDbReplacedError",
                            "StateDbCorruptError", "WriteContentionError",
                            "MaintenanceRefusedError"})


def timeline_svg(tl: Timeline, marks: list) -> str:
    """The whole timeline ``<svg id="timeline">``; ``marks``: evidence marks to draw."""
    phase_h = PHASE_ROWS * ROW_H
    fault_y = phase_h + 2
    badge_y = fault_y + FAULT_ROWS * ROW_H + 9  # the evidence badges' row
    top = badge_y + 22  # the axis labels sit just above the lanes
    lanes_h = max(1, len(tl.lanes)) * LANE_H
    height = top + lanes_h + 8
    w = LABEL_W + PLOT_W + RIGHT_PAD
    out = [f'<svg class="timeline zoomable" id="timeline" width="{w}" height="{height}" '
           f'viewBox="0 0 {w} {height}" preserveAspectRatio="none">',
           '<text class="strip-label" x="4" y="11">phases</text>'
           f'<text class="strip-label" x="4" y="{fault_y + 11}">faults</text>'
           f'<text class="strip-label" x="4" y="{badge_y + 4}">checker evidence</text>']
    out.append(_phases(tl))
    out.append(_fault_labels(tl, fault_y))
    out.append(axis(tl, top, lanes_h))
    out.append(_lanes(tl, top, w))
    out.append(fault_bands(tl, tl.faults(), top, lanes_h))
    out.append(_evidence(tl, marks, badge_y, top, lanes_h))
    out.append("</svg>")
    return "".join(out)


def _label_x(x: float, text: str) -> float:
    """``x`` moved left so that ``text`` ends inside the chart (a label is never clipped)."""
    return min(x, LABEL_W + PLOT_W + RIGHT_PAD - len(text) * CHAR_W - 2)


def _phases(tl: Timeline) -> str:
    out = []
    spans = tl.phases()
    xs = [_label_x(LABEL_W + tl.x(a) + 3, name) for name, a, _ in spans]
    placed = pack_labels(list(zip(xs, (name for name, _, _ in spans))), PHASE_ROWS)
    for (name, a, b), x, (row, text) in zip(spans, xs, placed):
        xa, xb = LABEL_W + tl.x(a), LABEL_W + tl.x(b)
        label = ("" if row is None else
                 f'<text class="phase-label" x="{x:.1f}" y="{row * ROW_H + 10}">'
                 f'{esc(text)}</text>')
        out.append(f'<g class="phase" data-phase="{esc(name)}" data-from-s="{tl.rel(a):.3f}" '
                   f'data-to-s="{tl.rel(b):.3f}"><rect x="{xa:.1f}" y="0" '
                   f'width="{max(1.0, xb - xa):.1f}" height="{PHASE_ROWS * ROW_H}" '
                   f'fill="{PHASE_COLOURS.get(name, "#eee")}"/>{label}'
                   f'{title(f"{name}: {tl.rel(a):.2f}s to {tl.rel(b):.2f}s")}</g>')
    return "".join(out)


def _fault_labels(tl: Timeline, y: float) -> str:
    faults = tl.faults()
    texts = [f"{f['step']}:{f['fault']}" for f in faults]
    xs = [_label_x(LABEL_W + tl.x(f["t_start"]) + 2, t) for f, t in zip(faults, texts)]
    placed = pack_labels(list(zip(xs, texts)), FAULT_ROWS)
    out = []
    for f, lx, (row, text) in zip(faults, xs, placed):
        x = LABEL_W + tl.x(f["t_start"])
        label = ("" if row is None else
                 f'<text class="fault-label" x="{lx:.1f}" y="{y + row * ROW_H + 10:.1f}">'
                 f'{esc(text)}</text>')
        out.append(f'<g class="fault-tag" data-fault="{esc(f["fault"])}" '
                   f'data-step="{esc(f["step"])}"><line class="fault-tick" x1="{x:.1f}" '
                   f'y1="{y:.1f}" x2="{x:.1f}" y2="{y + FAULT_ROWS * ROW_H:.1f}"/>{label}'
                   f'{title(fault_text(tl, f))}</g>')
    return "".join(out)


def _lanes(tl: Timeline, top: float, w: float) -> str:
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
    out = []
    for i, name in enumerate(tl.lanes):
        info = tl.lane_info[name]
        sub = info["kind"] or ""
        y = top + i * LANE_H
        mid = y + LANE_H / 2
        if name.startswith("pid "):
            label = f"{name} {sub}" if sub else name
        else:
            label = name + (f"  pid {info['pid']}" if info["pid"] else "")
        label = label if len(label) <= 30 else label[:29] + "…"
        out.append(f'<g class="lane" data-process="{esc(name)}" data-pid="{esc(info["pid"] or "")}">'
                   f'<rect class="lane-bg{" odd" if i % 2 else ""}" x="0" y="{y}" width="{w}" '
                   f'height="{LANE_H}"/><text class="lane-label" x="4" y="{mid + 4:.1f}">'
                   f'{esc(label)}{title(f"{name} ({sub})" if sub else name)}</text>')
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
                       f'y="{mid + 4:.1f}">{"✕" if bad else "|"}'
                       f'{title(f"{name}: {how} at {tl.rel(end):.2f}s")}</text>')
        for what, a, b, text in spans.get(name, []):
            xa, xb = LABEL_W + tl.x(a), LABEL_W + tl.x(b)
            sy, sh = {"stopped": (y + 1, LANE_H - 2), "read": (y + LANE_H - 5, 3),
                      "retired": (y + LANE_H - 6, 5)}.get(what, (y + 2, 5))
            out.append(f'<rect class="span-{what}" data-kind="{what}" x="{xa:.1f}" '
                       f'y="{sy}" width="{max(2.0, xb - xa):.1f}" height="{sh}">'
                       f'{title(f"{text} ({tl.rel(a):.2f}s to {tl.rel(b):.2f}s)")}</rect>')
        out.append(_op_bars(tl, ops_by_lane.get(name, []), y))
        for ev in events_by_lane.get(name, []):
            out.append(_event_mark(tl, ev, y))
        out.append("</g>")
    return "".join(out)


def _op_title(tl: Timeline, op) -> str:
    rec = op.record()
    parts = [f"{op.op} {op.kind}", op.op_id, f"invoked {tl.rel(op.t_invoke):.3f}s"]
    if op.t_done is not None:
        parts.append(f"completed {tl.rel(op.t_done):.3f}s")
    if op.done is not None and op.done.get("latency_s") is not None:
        parts.append(fmt_s(float(op.done["latency_s"])))
    if op.payload_id:
        parts.append(f"payload {op.payload_id}")
    if op.error:
        parts.append(f"{op.error}: {str(rec.get('message', ''))[:200]}")
    if rec.get("synthesized"):
        parts.append("outcome unknown: the process ended mid-call")
    return " | ".join(parts)


def _op_bars(tl: Timeline, ops: list, y: float) -> str:
    """Each op a bar from invoke to completion (at least 2 px), coloured by outcome."""
    oy, oh = y + 8, LANE_H - 14
    if len(ops) <= MAX_MARKS_PER_LANE:
        out = []
        for op in ops:
            xa = LABEL_W + tl.x(op.t_invoke)
            xb = LABEL_W + tl.x(op.t_done if op.t_done is not None else op.t_invoke)
            cls = f"op op-{op.kind}" + (" refused" if op.error in REFUSAL_ERRORS else "")
            out.append(f'<rect class="{cls}" data-op="{esc(op.op)}" data-outcome="{op.kind}" '
                       f'data-from-s="{tl.rel(op.t_invoke):.4f}" '
                       f'data-to-s="{tl.rel(op.t_done if op.t_done is not None else op.t_invoke):.4f}" '
                       f'x="{xa:.1f}" y="{oy:.1f}" width="{max(2.0, xb - xa):.1f}" '
                       f'height="{oh:.1f}">{title(_op_title(tl, op))}</rect>')
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
                out.append(f'<rect class="op op-{kind} merged" data-outcome="{kind}" '
                           f'x="{LABEL_W + run_start:.1f}" y="{oy:.1f}" '
                           f'width="{prev - run_start + 1:.1f}" height="{oh:.1f}">'
                           f'{title(f"{counts[kind]} {kind} ops in this lane (merged)")}</rect>')
            run_start = prev = c
    return "".join(out)


def _event_mark(tl: Timeline, ev: dict, y: float) -> str:
    x = LABEL_W + tl.x(ev["t"])
    at = f" at {tl.rel(ev['t']):.3f}s"
    kind = ev.get("event") or ev.get("what") or ""
    if ev.get("type") == "observed":
        if kind == "lock_held":
            return marker("diamond", x, y + 5, "ev-refusal",
                          f"write lock held by PID {ev.get('holder_pid')} ({ev.get('command')}) "
                          f"for {ev.get('held_s')}s{at}", 'data-kind="lock_held"')
        return ""
    if kind == "retry":
        return marker("tick", x, y + LANE_H - 3, "ev-retry",
                      f"retry attempt {ev.get('attempt')}: slept "
                      f"{fmt_s(float(ev.get('sleep_s') or 0))} ({ev.get('op')}){at}",
                      'data-kind="retry"')
    if kind == "checkpoint":
        return marker("triangle", x, y + LANE_H - 4, "ev-checkpoint",
                      f"checkpoint {ev.get('mode')} ({ev.get('trigger')}): log {ev.get('log')}, "
                      f"checkpointed {ev.get('checkpointed')}, busy {ev.get('busy')}"
                      + (f", error {ev.get('error')}" if ev.get("error") else "") + at,
                      'data-kind="checkpoint"')
    if kind in ("refusal", "write_gave_up", "quarantine"):
        detail = ev.get("detail") or ev.get("lock_owner") or ev.get("reason") or ""
        return marker("diamond", x, y + 5, "ev-refusal",
                      f"{kind} {ev.get('reason', '')}{at}: {str(detail)[:300]}",
                      f'data-kind="{esc(kind)}"')
    if kind == "capture":
        return marker("diamond", x, y + 5, "ev-capture",
                      f"capture ({ev.get('trigger')}){at}: {ev.get('dir')}", 'data-kind="capture"')
    if kind == "migration":
        return marker("triangle", x, y + 5, "ev-migration", f"migration step {ev.get('step')}{at}",
                      'data-kind="migration"')
    return ""


#: Free space (px) kept between two evidence badges; nearer marks share one badge ("3–19").
BADGE_GAP_PX = 4


def _badge_width(text: str) -> float:
    return max(12.0, 6.0 * len(text) + 6)


def _badge_groups(tl: Timeline, marks: list) -> dict[int, str]:
    """``{id(mark): badge text}`` for the first mark of each group: a mark whose badge would touch
    the current group's badge joins it ("2–13"). Numbered marks are grouped first; the grey
    unnumbered ones of passing checkers never cover a numbered badge (they lose theirs); the
    other marks of a group get no badge of their own."""
    out: dict[int, str] = {}
    taken: list[tuple[float, float]] = []  # (left, right) of the numbered badges

    def extent(group: list) -> tuple[float, float]:
        x, half = LABEL_W + tl.x(group[0].t), _badge_width(_badge_text(group)) / 2
        return x - half, x + half

    for numbered in (True, False):
        groups: list[list] = []
        for m in sorted((m for m in marks if bool(m.number) == numbered), key=lambda m: m.t):
            groups.append([m])
            # A group's badge widens as it grows ("3" -> "3–4"): merge while it would touch the
            # badge before it (the merged one widens too, so look again).
            while len(groups) > 1 and extent(groups[-1])[0] < extent(groups[-2])[1] + BADGE_GAP_PX:
                last = groups.pop()
                groups[-1].extend(last)
        for group in groups:
            _place(group, extent(group), out, taken, numbered)
    return out


def _place(group: list, span: tuple[float, float], out: dict, taken: list,
           numbered: bool) -> None:
    left, right = span
    if not numbered and any(left < b + BADGE_GAP_PX and right > a - BADGE_GAP_PX
                            for a, b in taken):
        return  # a grey badge never covers a numbered one (its line and ring stay)
    if numbered:
        taken.append(span)
    out[id(group[0])] = _badge_text(group)


def _badge_text(group: list) -> str:
    nums = sorted(m.number for m in group if m.number)
    if not nums:  # evidence of passing checkers: a plain grey badge ("×3" for a group)
        return "" if len(group) == 1 else f"×{len(group)}"
    return str(nums[0]) if len(nums) == 1 else f"{nums[0]}–{nums[-1]}"


def _evidence(tl: Timeline, marks: list, badge_y: float, top: float, lanes_h: float) -> str:
    """A dashed line per evidence item through every lane, a ring in the lane of the process it
    names, and a numbered badge on the evidence row (one per group of nearby items); each links
    to its item in the verdicts. Evidence of passing checkers is drawn grey and unnumbered."""
    out = []
    lane_index = {name: i for i, name in enumerate(tl.lanes)}
    badges = _badge_groups(tl, marks)
    for m in marks:
        x = LABEL_W + tl.x(m.t)
        lane = lane_index.get(m.lane) if m.lane else None
        ring = ""
        if lane is not None:
            cy = top + lane * LANE_H + LANE_H / 2
            ring = f'<circle class="evidence-ring" cx="{x:.1f}" cy="{cy:.1f}" r="7"/>'
        badge = ""
        text = badges.get(id(m))
        if text is not None:
            bw = _badge_width(text)
            badge = (f'<rect class="evidence-badge" x="{x - bw / 2:.1f}" y="{badge_y - 6:.1f}" '
                     f'width="{bw:.1f}" height="12" rx="6"/><text class="evidence-num" '
                     f'x="{x:.1f}" y="{badge_y + 3:.1f}" text-anchor="middle">{esc(text)}</text>')
        first = " first-failure" if m.first else ""
        label = f"#{m.number} " if m.number else ""
        out.append(f'<g class="evidence-mark{first}" id="{esc(m.anchor)}" '
                   f'data-evidence-of="{esc(m.checker)}" data-status="{esc(m.status)}" '
                   f'data-number="{m.number}" data-at-s="{m.at_s:.3f}" '
                   f'data-lane="{esc(m.lane or "")}"><a href="#{esc(m.item_anchor)}">'
                   f'<line class="evidence" x1="{x:.1f}" y1="{badge_y + 6:.1f}" x2="{x:.1f}" '
                   f'y2="{top + lanes_h:.1f}"/>{ring}{badge}</a>'
                   f'{title(f"{m.checker} {m.status} evidence {label}at {m.at_s:.3f}s: {m.text}")}'
                   "</g>")
    return "".join(out)


def legend() -> str:
    """The timeline's legend (HTML)."""
    items = [("background:#2e9e44", "ok op (bar: invoke → completion)"),
             ("background:#d62728", "failed op"), ("background:#f0a30a", "outcome unknown (info)"),
             ("background:#b03fd4;opacity:.35", "nemesis fault (band: fired → healed)"),
             ("background:#d62728;outline:1px solid #600", "refusal / give-up"),
             ("background:#7a1fa0", "capture, write-lock owner"),
             ("background:#ff7f0e", "retry, waiting on a lock"),
             ("background:#1f77b4", "checkpoint"),
             ("background:#555;opacity:.4", "stopped (SIGSTOP)"),
             ("background:#d62728;opacity:.6", "holds a retired WAL generation"),
             ("background:#17becf", "in a read transaction"),
             ("border:2px solid #d62728;border-radius:6px", "checker evidence (numbered)")]
    return "".join(f'<span><i class="sw" style="{style}"></i>{esc(text)}</span>'
                   for style, text in items)


def evidence_json(item) -> str:
    """One evidence item as one line of JSON (bounded)."""
    text = json.dumps(item, default=str, ensure_ascii=False)
    return text if len(text) <= 600 else text[:597] + "..."
