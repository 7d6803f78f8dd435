"""The kill table of ``chaos audit`` (issue 14): for the terminal (rich) and for the README
(Markdown)."""

from __future__ import annotations

import os

from rich import box
from rich.table import Table

from .report.terminal import compact

_STYLE = {"KILLED": "green", "SURVIVED": "bold red", "ERROR": "bold magenta"}


def _by(r) -> str:
    if r.status == "KILLED":
        return f"{r.killed_by}: {r.checker}"
    if r.status == "SURVIVED":
        return f"survived {len(r.runs)} scenario(s): " + ", ".join(
            x["scenario"].removesuffix(".yaml") for x in r.runs)
    return r.error


def kill_table(results: list, width: int | None = None, *, with_unit: bool = False) -> Table:
    """One row per mutant: name, SPEC section, status, killed by (scenario: checker), unit
    tests (with ``--unit-tests``), rule. Narrow terminals fold the rule under the name."""
    narrow = compact(width)
    t = Table(title="chaos audit: kill table",
              **({"box": box.SIMPLE_HEAD, "padding": (0, 1), "pad_edge": False} if narrow
                 else {}))
    cols = ["mutant", "status", "killed by"] + (["unit"] if with_unit else [])
    if not narrow:
        cols = ["mutant", "SPEC", "status", "killed by (scenario: checker)"] + (
            ["unit tests"] if with_unit else []) + ["rule"]
    for col in cols:
        t.add_column(col, overflow="fold", no_wrap=col == "status",
                     ratio=1 if col in ("rule", "killed by", "killed by (scenario: checker)")
                     else None)
    for r in results:
        status = f"[{_STYLE.get(r.status, 'bold red')}]{r.status}[/]"
        by = _by(r)[:160]
        unit = [r.unit_tests or "-"] if with_unit else []
        if narrow:
            t.add_row(f"{r.name}\n[dim]{r.spec} {r.rule[:80]}[/]", status, by, *unit)
        else:
            t.add_row(r.name, r.spec, status, by, *unit, r.rule)
    return t


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(results: list, total_s: float, jobs: int, *, with_unit: bool = False) -> str:
    """The kill table as Markdown, with the measured wall time (the README's section)."""
    head = "| mutant | SPEC | rule | status | killed by (scenario: checker) |" + (
        " unit tests |" if with_unit else "")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        by = _by(r)
        if r.status == "KILLED":
            by = f"`{r.killed_by}`: {(r.checker or '').split(':')[0]}"
        lines.append(f"| `{r.name}` | {_cell(r.spec)} | {_cell(r.rule)} | {r.status} | "
                     f"{_cell(by)[:200]} |" + (f" {r.unit_tests or '-'} |" if with_unit else ""))
    killed = sum(r.status == "KILLED" for r in results)
    lines.append("")
    lines.append(f"{killed} of {len(results)} mutants killed; wall time {total_s / 60:.1f} min "
                 f"({total_s:.0f} s) with {jobs} run(s) at once on {os.cpu_count()} cores.")
    return "\n".join(lines) + "\n"
