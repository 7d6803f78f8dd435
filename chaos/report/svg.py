"""SVG pieces shared by the timeline and the plots of ``report.html``: the time axis, fault bands,
markers, label packing (SPEC §16.5).

Every x coordinate comes from one :class:`chaos.report.timeline.Timeline` (one time base: seconds
since the run start), so a fault band or an evidence mark sits at the same x in every chart.
This module only draws; it decides nothing about the run.
"""

from __future__ import annotations

import html
import math

#: Plot geometry (px): the label column left of every chart, and a margin right of it.
LABEL_W, RIGHT_PAD = 190, 40
#: Approximate width of one character of the 10 px label font (labels are packed with it).
CHAR_W = 6.2


def esc(value) -> str:
    """HTML/SVG-escaped text of ``value``."""
    return html.escape(str(value), quote=True)


def title(text: str) -> str:
    """An SVG ``<title>`` (the hover text)."""
    return f"<title>{esc(text)}</title>"


def nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``raw`` (tick spacing)."""
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def fmt_s(s: float) -> str:
    """A duration: ``1.23 s``, ``4.5 ms``, ``80 µs``."""
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


def fmt_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``3.0 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def axis(tl, y: float, height: float, *, labels: bool = True) -> str:
    """Vertical grid lines every nice step, labelled ``Ns`` above ``y``."""
    span = tl.t1 - tl.t0
    step = nice_step(span / 10)
    parts = []
    k = 0.0
    while k <= span + 1e-9:
        x = LABEL_W + tl.x(tl.t0 + k)
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" '
                     f'y2="{y + height:.1f}"/>')
        if labels:
            parts.append(f'<text class="tick" x="{x:.1f}" y="{y - 4:.1f}" '
                         f'text-anchor="middle">{k:g}s</text>')
        k = round(k + step, 9)
    return "".join(parts)


def fault_bands(tl, faults: list[dict], y: float, height: float) -> str:
    """The faults as shaded bands from when they fired to when they were healed (a thin band for
    an instantaneous fault), across one chart; ``data-fault`` and ``data-step`` on each."""
    out = []
    for f in faults:
        xa = LABEL_W + tl.x(f["t_start"])
        xb = LABEL_W + tl.x(f["t_end"] if f["t_end"] is not None else f["t_start"])
        cls = "fault-band" + (" fault-error" if f["status"] == "error" else "")
        out.append(f'<rect class="{cls}" data-fault="{esc(f["fault"])}" '
                   f'data-step="{esc(f["step"])}" x="{xa:.1f}" y="{y:.1f}" '
                   f'width="{max(3.0, xb - xa):.1f}" height="{height:.1f}">'
                   f'{title(fault_text(tl, f))}</rect>')
    return "".join(out)


def fault_text(tl, f: dict) -> str:
    """One line: step, fault, status, when it fired and healed (seconds since the start)."""
    healed = (f" until {tl.rel(f['t_end']):.2f}s" if f.get("lasting") and f["t_end"] is not None
              else "")
    return (f"nemesis step {f['step']}: {f['fault']} ({f['status']}) at "
            f"{tl.rel(f['t_start']):.2f}s{healed}")


def marker(shape: str, x: float, y: float, cls: str, text: str, attrs: str = "") -> str:
    """A small diamond, triangle or tick at ``(x, y)`` with hover text."""
    if shape == "diamond":
        d = f"M{x:.1f},{y - 5:.1f} L{x + 4:.1f},{y:.1f} L{x:.1f},{y + 5:.1f} L{x - 4:.1f},{y:.1f}Z"
    elif shape == "triangle":
        d = f"M{x - 4:.1f},{y + 4:.1f} L{x + 4:.1f},{y + 4:.1f} L{x:.1f},{y - 4:.1f}Z"
    else:  # tick
        d = f"M{x:.1f},{y - 4:.1f} L{x:.1f},{y + 4:.1f}"
    return f'<path class="{cls}" d="{d}" {attrs}>{title(text)}</path>'


def pack_labels(items: list[tuple[float, str]], rows: int, gap: float = 6.0
                ) -> list[tuple[int | None, str]]:
    """Place labels at x positions on ``rows`` rows so that none overlaps another.

    Args:
        items: ``(x, text)`` in drawing order.
        rows: how many rows are available.
    Returns:
        Per item ``(row, text)``: the first row where it fits, with the text shortened to fit
        before the next item's x when needed; ``(None, text)`` when it fits nowhere (it is then
        shown by hover only).
    """
    ends = [-1e9] * rows
    placed: list[tuple[int | None, str]] = []
    for x, text in items:
        width = len(text) * CHAR_W
        for row in range(rows):
            if x >= ends[row] + gap:
                ends[row] = x + width
                placed.append((row, text))
                break
        else:
            placed.append((None, text))
    return placed
