"""The plots of ``report.html`` under the timeline: latency per op kind (with the checkers'
bounds drawn), throughput per op kind, and the WAL (size, checkpoints, retired generations
still held); the fault bands are shaded across every one (SPEC §16.5; issue 16).

They share the timeline's x scale (:class:`chaos.report.timeline.Timeline`: seconds since the
run start), so a fault band lines up from the timeline down through every plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .svg import LABEL_W, RIGHT_PAD, axis, esc, fault_bands, fmt_bytes, fmt_s, marker, title
from .timeline import PLOT_W, Timeline

OUTCOME_COLOURS = {"ok": "#2e9e44", "fail": "#d62728", "info": "#f0a30a"}
KIND_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf", "#d62728")
#: Latency panels: the busiest op kinds get a panel each, the rest share one ("other ops").
MAX_KINDS, PANEL_H, PANEL_GAP = 5, 72, 18
OTHER = "other ops"
#: Throughput bins: about this many across the run.
THROUGHPUT_BINS = 60


@dataclass(frozen=True)
class Bound:
    """A checker's latency bound drawn as a line: ``checker``, ``label``, ``seconds``, and the op
    kinds it applies to (None: every kind but ``exempt``)."""

    checker: str
    label: str
    seconds: float
    ops: frozenset | None = None
    exempt: frozenset = frozenset()

    def applies(self, kind: str) -> bool:
        return kind not in self.exempt and (self.ops is None or kind in self.ops)


def _width() -> int:
    return LABEL_W + PLOT_W + RIGHT_PAD


def _kinds(tl: Timeline) -> list[tuple[str, list]]:
    """``(op kind, completed ops)`` of the busiest kinds, then the rest together as
    :data:`OTHER` (when more than :data:`MAX_KINDS` kinds completed)."""
    by_kind: dict[str, list] = {}
    for op in tl.ops:
        if op.done is None or op.done.get("latency_s") is None or op.t_done is None:
            continue
        by_kind.setdefault(op.op, []).append(op)
    ranked = sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(ranked) <= MAX_KINDS:
        return ranked
    rest = [op for _, ops in ranked[MAX_KINDS - 1:] for op in ops]
    return ranked[:MAX_KINDS - 1] + [(OTHER, sorted(rest, key=lambda o: o.t_done))]


def _nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at least ``value``."""
    if value <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(value))
    return next(m * mag for m in (1, 2, 5, 10) if value <= m * mag)


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def latency_svg(tl: Timeline, bounds: list[Bound]) -> str:
    """One panel per op kind (the busiest :data:`MAX_KINDS`): each completed op a dot at its
    invoke time (as Jepsen draws it: a stall shows where it began, under its evidence mark on
    the timeline) and latency (log scale), coloured by outcome; the fault bands; a dashed line
    at every bound that applies to the kind."""
    kinds = _kinds(tl)
    if not kinds:
        return '<p class="none">no completed operation with a latency in this history</p>'
    w = _width()
    h = 16 + len(kinds) * (PANEL_H + PANEL_GAP)
    out = [f'<svg class="latency zoomable" id="latency" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" preserveAspectRatio="none">']
    faults = tl.faults()
    for k, (kind, ops) in enumerate(kinds):
        top = 16 + k * (PANEL_H + PANEL_GAP)
        lats = [max(float(op.done["latency_s"]), 1e-6) for op in ops]
        mine = [b for b in bounds if any(b.applies(op.op) for op in ops)]
        lo = 10 ** math.floor(math.log10(min(lats)))
        hi = 10 ** math.ceil(math.log10(max(lats + [b.seconds * 1.5 for b in mine])))
        hi = hi if hi > lo else lo * 10

        def yof(v: float, top=top, lo=lo, hi=hi) -> float:
            return top + PANEL_H - (math.log10(v) - math.log10(lo)) / \
                (math.log10(hi) - math.log10(lo)) * PANEL_H

        p50, p99 = _quantile(lats, 0.5), _quantile(lats, 0.99)
        out.append(f'<g class="lat-panel" data-kind="{esc(kind)}" data-count="{len(ops)}">')
        out.append(f'<rect class="panel-bg" x="{LABEL_W}" y="{top}" width="{PLOT_W}" '
                   f'height="{PANEL_H}"/>')
        out.append(axis(tl, top, PANEL_H, labels=k == 0))
        out.append(fault_bands(tl, faults, top, PANEL_H))
        names = sorted({op.op for op in ops})
        sub = (f'<text class="tick" x="4" y="{top + 52}">{esc(", ".join(names)[:34])}</text>'
               if kind == OTHER else "")
        out.append(f'<text class="panel-label" x="4" y="{top + 12}">{esc(kind)}</text>'
                   f'<text class="tick" x="4" y="{top + 26}">{len(ops)} ops</text>'
                   f'<text class="tick" x="4" y="{top + 39}">p50 {esc(fmt_s(p50))}, '
                   f'p99 {esc(fmt_s(p99))}</text>{sub}')
        dec = lo
        while dec <= hi * 1.0001:
            yy = yof(dec)
            out.append(f'<line class="grid" x1="{LABEL_W}" y1="{yy:.1f}" x2="{LABEL_W + PLOT_W}" '
                       f'y2="{yy:.1f}"/><text class="tick" x="{LABEL_W - 4}" y="{yy + 3:.1f}" '
                       f'text-anchor="end">{esc(fmt_s(dec))}</text>')
            dec *= 10
        # Keep the slowest op per pixel column and outcome: spikes survive, the page stays small.
        best: dict[tuple[int, str], tuple[float, object]] = {}
        for op, lat in zip(ops, lats):
            key = (int(tl.x(op.t_invoke)), op.kind)
            if key not in best or lat > best[key][0]:
                best[key] = (lat, op)
        for lat, op in sorted(best.values(), key=lambda p: p[1].kind == "ok", reverse=True):
            tip = (f"{op.op} {op.kind}: {fmt_s(lat)}, invoked at {tl.rel(op.t_invoke):.2f}s, "
                   f"completed at {tl.rel(op.t_done):.2f}s ({op.process})")
            out.append(f'<circle class="lat-dot" data-outcome="{op.kind}" '
                       f'data-at-s="{tl.rel(op.t_invoke):.3f}" '
                       f'cx="{LABEL_W + tl.x(op.t_invoke):.1f}" cy="{yof(lat):.1f}" r="2.2" '
                       f'fill="{OUTCOME_COLOURS.get(op.kind, "#999")}">{title(tip)}</circle>')
        right = LABEL_W + PLOT_W - 4  # bound labels side by side from the right: never overlap
        for b in sorted(mine, key=lambda b: -b.seconds):
            yy = yof(b.seconds)
            out.append(f'<g class="bound" data-checker="{esc(b.checker)}" '
                       f'data-seconds="{b.seconds:g}"><line class="bound-line" x1="{LABEL_W}" '
                       f'y1="{yy:.1f}" x2="{LABEL_W + PLOT_W}" y2="{yy:.1f}"/>'
                       f'<text class="bound-label" x="{right:.1f}" y="{yy - 3:.1f}" '
                       f'text-anchor="end">{esc(b.label)}</text></g>')
            right -= len(b.label) * 6.2 + 14
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def throughput_svg(tl: Timeline) -> str:
    """Completed operations per second per op kind (a line each, ok only) and failed ones of
    every kind together (dashed red), in bins of about 1/60 of the run; fault bands shaded."""
    kinds = _kinds(tl)
    if not kinds:
        return '<p class="none">no completed operation in this history</p>'
    span = tl.t1 - tl.t0
    width_s = max(span / THROUGHPUT_BINS, 0.05)
    nbins = max(1, int(math.ceil(span / width_s)))
    series: dict[str, list[int]] = {}
    fails = [0] * nbins
    for kind, ops in kinds:
        counts = [0] * nbins
        for op in ops:
            i = min(nbins - 1, max(0, int((op.t_done - tl.t0) / width_s)))
            if op.kind == "ok":
                counts[i] += 1
            else:
                fails[i] += 1
        series[kind] = counts
    peak = _nice_max(max([max(c) for c in series.values()] + [max(fails)]) / width_s)
    ph, top = 150, 16
    w = _width()
    h = top + ph + 30

    def yof(rate: float) -> float:
        return top + ph - rate / peak * ph

    out = [f'<svg class="throughput zoomable" id="throughput" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" preserveAspectRatio="none">', axis(tl, top, ph),
           fault_bands(tl, tl.faults(), top, ph)]
    for frac in (0, 0.5, 1):
        yy = yof(peak * frac)
        out.append(f'<text class="tick" x="{LABEL_W - 4}" y="{yy + 3:.1f}" text-anchor="end">'
                   f'{peak * frac:.0f}/s</text>')

    def path(counts: list[int]) -> str:
        pts = [f"{LABEL_W + tl.x(tl.t0 + (i + 0.5) * width_s):.1f},{yof(c / width_s):.1f}"
               for i, c in enumerate(counts)]
        return "M" + " L".join(pts)

    for k, (kind, counts) in enumerate(series.items()):
        colour = KIND_PALETTE[k % len(KIND_PALETTE)]
        out.append(f'<path class="rate-line" data-kind="{esc(kind)}" data-total="{sum(counts)}" '
                   f'd="{path(counts)}" stroke="{colour}">'
                   f'{title(f"{kind}: {sum(counts)} ok completions")}</path>')
        lx = LABEL_W + 150 * k
        out.append(f'<rect x="{lx}" y="{top + ph + 16}" width="10" height="3" fill="{colour}"/>'
                   f'<text class="tick" x="{lx + 14}" y="{top + ph + 21}">{esc(kind)} ok/s</text>')
    if any(fails):
        out.append(f'<path class="rate-line fail-line" data-kind="fail" data-total="{sum(fails)}" '
                   f'd="{path(fails)}">{title(f"{sum(fails)} failed or unknown completions")}'
                   '</path>')
        lx = LABEL_W + 150 * len(series)
        out.append(f'<rect x="{lx}" y="{top + ph + 16}" width="10" height="3" fill="#d62728"/>'
                   f'<text class="tick" x="{lx + 14}" y="{top + ph + 21}">failed/unknown /s</text>')
    out.append(f'<text class="tick" x="4" y="{top + 12}">bins of {width_s:.2f}s</text></svg>')
    return "".join(out)


def wal_svg(tl: Timeline) -> str:
    """WAL size over time (a step line from the sampler), checkpoints as triangles, and below it
    the number of retired WAL generations still held by some process; fault bands shaded."""
    pts = tl.wal_sizes()
    if not pts:
        return ('<p class="none">no <code>sample</code> records in this history: the WAL was not '
                'sampled</p>')
    held = tl.retired_generations_held()
    hi = max(v for _, v in pts) or 1
    ph, top, th = 130, 16, 44
    ty = top + ph + 26
    w = _width()
    h = ty + th + 18

    def yof(v: float) -> float:
        return top + ph - v / hi * ph

    out = [f'<svg class="wal zoomable" id="wal" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" preserveAspectRatio="none">', axis(tl, top, ph),
           fault_bands(tl, tl.faults(), top, ty + th - top)]
    for frac in (0, 0.5, 1):
        yy = yof(hi * frac)
        out.append(f'<text class="tick" x="{LABEL_W - 4}" y="{yy + 3:.1f}" text-anchor="end">'
                   f'{esc(fmt_bytes(hi * frac))}</text>')
    out.append(f'<text class="panel-label" x="4" y="{top + 12}">WAL size</text>')
    path = [f"M{LABEL_W + tl.x(pts[0][0]):.1f},{yof(pts[0][1]):.1f}"]
    for t, v in pts[1:]:  # a step line: the size holds until the next sample
        path.append(f"H{LABEL_W + tl.x(t):.1f} V{yof(v):.1f}")
    out.append(f'<path class="wal-line" d="{" ".join(path)}"/>')
    for r in tl.records:
        if (r.get("type") == "event" and r.get("event") == "checkpoint") or (
                r.get("type") == "observed" and r.get("what") == "checkpoint"):
            out.append(marker("triangle", LABEL_W + tl.x(r["t"]), top + ph - 4, "ev-checkpoint",
                              f"checkpoint {r.get('mode', '')} at {tl.rel(r['t']):.2f}s "
                              f"({r.get('process', '')})", 'data-kind="checkpoint"'))
    # The retired generations still held: a step area on its own track.
    most = max([n for _, n in held] + [1])
    out.append(f'<rect class="panel-bg" x="{LABEL_W}" y="{ty}" width="{PLOT_W}" height="{th}"/>'
               f'<text class="panel-label" x="4" y="{ty + 12}">retired WAL</text>'
               f'<text class="tick" x="4" y="{ty + 25}">generations still held</text>'
               f'<text class="tick" x="{LABEL_W - 4}" y="{ty + 9}" text-anchor="end">{most}</text>'
               f'<text class="tick" x="{LABEL_W - 4}" y="{ty + th}" text-anchor="end">0</text>')
    peak = max((n for _, n in held), default=0)
    if held:
        d = [f"M{LABEL_W + tl.x(held[0][0]):.1f},{ty + th:.1f}"]
        for t, n in held:
            d.append(f"H{LABEL_W + tl.x(t):.1f} V{ty + th - n / most * (th - 4):.1f}")
        d.append(f"H{LABEL_W + tl.x(held[-1][0]):.1f} V{ty + th:.1f} Z")
        out.append(f'<path class="retired-area" data-peak="{peak}" d="{" ".join(d)}">'
                   f'{title(f"at most {peak} retired WAL generation(s) held at once")}</path>')
    out.append("</svg>")
    return "".join(out)
