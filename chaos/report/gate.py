"""The gate's rows and what it prints and writes about them (SPEC §16.5; issue 27): the verdict
table, the short summary of the rows that did not pass (like pytest's ``-ra``), the final line
and the JUnit XML. :mod:`chaos.gate` plans and runs the jobs; this module presents rows (and
combines a row with its rerun).

Row statuses: PASS; FAIL, INCONCLUSIVE, ERROR (the gate is red); SKIPPED (every checker of the
run was skipped: nothing was tested, counted apart, never as a pass); FLAKY (the row did not pass,
was rerun once and passed: both results are kept and shown; the gate stays green).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .terminal import STATUS_STYLE, compact

PASS, FAIL, INCONCLUSIVE, ERROR = "PASS", "FAIL", "INCONCLUSIVE", "ERROR"
SKIPPED, FLAKY = "SKIPPED", "FLAKY"
#: Statuses that make the gate red.
RED = (FAIL, INCONCLUSIVE, ERROR)
#: How bad a status is, when two results of one row are combined (the worse one stands).
SEVERITY = {FAIL: 5, ERROR: 4, INCONCLUSIVE: 3, FLAKY: 2, SKIPPED: 1, PASS: 0}
_STYLE = {**STATUS_STYLE, FLAKY: "bold magenta", ERROR: "bold red"}


@dataclass
class GateRow:
    """One verdict row: a scenario × seed run, or one matrix cell.

    ``failed_checkers``: the checkers with a FAIL verdict (a rerun decision needs them);
    ``first``: for a row that was rerun, the first attempt (``{"status", "summary", "run_dir",
    "seconds"}``); ``load_factor``: the run's measured load factor
    (:func:`chaos.history.history_load_factor`).
    """

    kind: str            # "scenario" | "matrix"
    suite: str           # scenario file name, or "matrix.v<N>"
    name: str            # "seed42", or the cell ("plain", "writer", "crash@v11")
    status: str          # PASS | FAIL | INCONCLUSIVE | ERROR | SKIPPED | FLAKY
    summary: str = ""
    details: str = ""
    seconds: float = 0.0
    run_dir: str | None = None
    failed_checkers: list[str] = field(default_factory=list)
    first: dict | None = None
    load_factor: float | None = None

    @property
    def label(self) -> str:
        """``<file> <seed>`` or ``matrix.v<N>/<cell>``."""
        return f"{self.suite} {self.name}" if self.kind == "scenario" else \
            f"{self.suite}/{self.name}"


def styled(status: str) -> str:
    """``status`` in its colour (rich markup of a fixed word)."""
    return f"[{_STYLE.get(status, 'bold red')}]{status}[/]"


def combine(first: GateRow, again: GateRow) -> GateRow:
    """One row from a row and its rerun (issue 27 item 5): FLAKY when the rerun passed, else the
    worse of the two statuses (a FAIL of an invariant in either is never hidden); the summary
    and the details carry both results."""
    row = GateRow(again.kind, again.suite, again.name, again.status, again.summary,
                  again.details, round(first.seconds + again.seconds, 3), again.run_dir,
                  sorted(set(first.failed_checkers) | set(again.failed_checkers)),
                  {"status": first.status, "summary": first.summary, "run_dir": first.run_dir,
                   "seconds": first.seconds, "load_factor": first.load_factor},
                  again.load_factor)
    if again.status == PASS:
        row.status = FLAKY
        row.summary = f"first {first.status}: {first.summary}; rerun PASS"
    else:
        worse = first if SEVERITY.get(first.status, 5) > SEVERITY.get(again.status, 5) else again
        row.status = worse.status
        row.summary = (f"first {first.status}: {first.summary}; rerun {again.status}: "
                       f"{again.summary}")
    row.details = (f"first run ({first.status}, run directory {first.run_dir}):\n"
                   f"{first.details or first.summary}\n\nrerun ({again.status}, run directory "
                   f"{again.run_dir}):\n{again.details or again.summary}")
    return row


def verdict_table(rows: list[GateRow], width: int | None = None,
                  modes: tuple[str, ...] | list[str] = ()) -> Table:
    """Scenario rows one by one; matrix rows summarised per mode (in the order of ``modes``, then
    of appearance), every non-PASS row listed.
    Narrower than :data:`chaos.report.terminal.COMPACT_BELOW` columns (a CI log): light borders,
    and the kind and the time go under the row's name, so the summary keeps its width. Every
    text from a run is escaped (a ``[fs]`` in a reason is shown, not read as markup)."""
    narrow = compact(width)
    t = Table(title="chaos gate", show_lines=False,
              **({"box": box.SIMPLE_HEAD, "padding": (0, 1), "pad_edge": False} if narrow
                 else {}))
    cols = ("what", "status", "summary") if narrow else ("kind", "what", "status", "time",
                                                          "summary")
    for col in cols:
        t.add_column(col, overflow="fold", no_wrap=col == "status",
                     ratio=1 if col == "summary" else None, min_width=16 if col == "summary"
                     else None)

    def t_add(kind: str, what: str, status: str, secs: str, summary: str) -> None:
        what, summary = escape(what), escape(summary)
        if narrow:
            t.add_row(f"{what}\n[dim]{kind}, {secs}[/]", status, summary)
        else:
            t.add_row(kind, what, status, secs, summary)

    for r in sorted((r for r in rows if r.kind == "scenario"), key=lambda r: (r.suite, r.name)):
        t_add("scenario", f"{r.suite} {r.name}", styled(r.status), f"{r.seconds:.1f}s",
              r.summary)
    by_mode: dict[tuple[bool, str], list[GateRow]] = {}
    for r in rows:
        if r.kind == "matrix":
            real = r.suite.startswith("matrix.real.")
            by_mode.setdefault((real, r.name.split("@")[0]), []).append(r)
    order = list(dict.fromkeys([*modes, *(mode for _, mode in by_mode)]))
    for real, mode in [(False, m) for m in order] + [(True, m) for m in order]:
        group = by_mode.get((real, mode), [])
        if not group:
            continue
        ok = sum(1 for r in group if r.status == PASS)
        status = PASS if ok == len(group) else FAIL
        if real:
            what = f"real stores {mode} ({len(group)} cells, {len({r.suite for r in group})} stores)"
        else:
            versions = sorted({int(r.suite.split(".v")[1]) for r in group})
            what = f"{mode} ({len(group)} cells, v{versions[0]}-v{versions[-1]})"
        t_add("matrix", what, styled(status), f"{sum(r.seconds for r in group):.1f}s",
              f"{ok}/{len(group)} PASS")
        for r in group:
            if r.status != PASS:
                t_add("matrix", f"{r.suite[7:]}/{r.name}", styled(r.status),
                      f"{r.seconds:.1f}s", r.summary)
    return t


def counts(rows: list[GateRow]) -> dict[str, int]:
    """``{status: rows}`` over every status of :data:`SEVERITY`."""
    out = {s: 0 for s in SEVERITY}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def gate_status(rows: list[GateRow]) -> str:
    """The gate's verdict: FAIL when a row is FAIL, INCONCLUSIVE or ERROR (or there is no row);
    SKIPPED when every row was SKIPPED (nothing was tested); else PASS (flaky rows included)."""
    if not rows or any(r.status in RED or r.status not in SEVERITY for r in rows):
        return FAIL
    if all(r.status == SKIPPED for r in rows):
        return SKIPPED
    return PASS


def short_summary(rows: list[GateRow]) -> list[Text]:
    """pytest's short summary for the gate: one line per row that did not pass (worst first,
    then by name): status, row, its one-line reason, its run directory (or log). Plain text."""
    bad = sorted((r for r in rows if r.status != PASS),
                 key=lambda r: (-SEVERITY.get(r.status, 6), r.label))
    lines = []
    if bad:
        lines.append(Text(f"short summary: {len(bad)} of {len(rows)} rows did not pass",
                          style="bold"))
    for r in bad:
        line = Text()
        line.append(f"{r.status:12}", style=_STYLE.get(r.status, "bold red"))
        line.append(f" {r.label}: {' '.join(r.summary.split())[:400]}")
        where = r.run_dir or (r.first or {}).get("run_dir")
        if where:
            line.append(f" -- {where}", style="dim")
        if r.first and r.first.get("run_dir") and r.first["run_dir"] != where:
            line.append(f" (first run {r.first['run_dir']})", style="dim")
        lines.append(line)
    return lines


def final_line(rows: list[GateRow], total_s: float, load: str = "") -> Text:
    """The gate's last line: counts of each status, the time, the verdict."""
    c = counts(rows)
    status = gate_status(rows)
    red = sum(c[s] for s in RED)
    line = Text(f"gate: {c[PASS] + c[FLAKY]} rows passed"
                + (f" ({c[FLAKY]} flaky: passed on a rerun)" if c[FLAKY] else "")
                + f", {c[SKIPPED]} skipped, {red} not passed"
                + (f" ({c[FAIL]} FAIL, {c[INCONCLUSIVE]} INCONCLUSIVE, {c[ERROR]} ERROR)"
                   if red else "")
                + f", in {total_s:.1f}s total{load} (")
    line.append(status, style=_STYLE.get(status, "bold red"))
    line.append(")")
    return line


def write_junit(path: Path, rows: list[GateRow], total_s: float) -> None:
    """JUnit XML: one ``testsuite`` per scenario file / matrix version, one ``testcase`` per row.

    FAIL and INCONCLUSIVE rows carry a ``failure`` (``type`` = the status), ERROR rows an
    ``error``, SKIPPED rows a ``skipped`` (the reason); the element's ``message`` is the one-line
    summary, its text the details. A FLAKY row passes, with both results in ``system-out``.
    """
    def tally(group):
        return {"tests": str(len(group)),
                "failures": str(sum(r.status in (FAIL, INCONCLUSIVE) for r in group)),
                "errors": str(sum(r.status == ERROR for r in group)),
                "skipped": str(sum(r.status == SKIPPED for r in group))}

    root = ET.Element("testsuites", name="chaos gate", **tally(rows), time=f"{total_s:.3f}")
    suites: dict[str, list[GateRow]] = {}
    for r in rows:
        suites.setdefault(r.suite, []).append(r)
    for name, group in suites.items():
        s = ET.SubElement(root, "testsuite", name=name, **tally(group),
                          time=f"{sum(r.seconds for r in group):.3f}")
        for r in group:
            prefix = "chaos.scenarios." if r.kind == "scenario" else "chaos."
            case = ET.SubElement(s, "testcase", classname=prefix + name, name=r.name,
                                 time=f"{r.seconds:.3f}")
            tag = {FAIL: "failure", INCONCLUSIVE: "failure", ERROR: "error",
                   SKIPPED: "skipped"}.get(r.status)
            if tag is not None:
                el = ET.SubElement(case, tag, message=r.summary[:1000], type=r.status)
                el.text = r.details or r.summary
            out = []
            if r.status == FLAKY:
                out.append(f"FLAKY: {r.summary}\n{r.details}")
            if r.run_dir:
                out.append(f"run directory: {r.run_dir}")
            if out:
                ET.SubElement(case, "system-out").text = "\n".join(out)
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
