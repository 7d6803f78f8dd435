"""What the user reads in the terminal: the verdict table, results.json (SPEC §16.5).

The HTML page is :mod:`chaos.report.html`; this module is the terminal side. Verdicts may be
:class:`chaos.checkers.base.Verdict` objects or their ``to_dict()`` form (as read back from
``results.json``), so a saved run prints exactly like a live one.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..checkers.base import exit_code_of

STATUS_STYLE = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow",
                "SKIPPED": "dim"}


def _field(v, name: str, default=""):
    return v.get(name, default) if isinstance(v, dict) else getattr(v, name, default)


def styled_status(status: str) -> str:
    """``status`` wrapped in its rich colour markup."""
    return f"[{STATUS_STYLE.get(status, '')}]{status}[/]" if status in STATUS_STYLE else status


def verdict_table(verdicts: list, title: str = "checkers") -> Table:
    """A rich table: checker | verdict | summary. ``verdicts``: Verdict objects or dicts."""
    table = Table(title=title, show_lines=False)
    table.add_column("checker", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("figures")
    for v in verdicts:
        status = str(_field(v, "status", "?"))
        table.add_row(str(_field(v, "checker")), styled_status(status), str(_field(v, "summary")))
    return table


def print_verdicts(console: Console, verdicts: list, title: str) -> None:
    """Print the verdict table (Verdict objects or dicts)."""
    console.print(verdict_table(verdicts, title))


def comparison_table(left: list, right: list, left_title: str, right_title: str,
                     title: str = "verdicts side by side") -> Table:
    """Two runs' verdicts in one table: checker | left | right | left figures | right figures.

    A checker present in only one run shows ``-`` on the other side.
    """
    table = Table(title=title)
    table.add_column("checker", no_wrap=True)
    table.add_column(left_title, no_wrap=True)
    table.add_column(right_title, no_wrap=True)
    table.add_column(f"{left_title} figures")
    table.add_column(f"{right_title} figures")
    lmap = {str(_field(v, "checker")): v for v in left}
    rmap = {str(_field(v, "checker")): v for v in right}
    names = list(lmap) + [n for n in rmap if n not in lmap]
    for name in names:
        lv, rv = lmap.get(name), rmap.get(name)
        table.add_row(name,
                      styled_status(str(_field(lv, "status"))) if lv is not None else "-",
                      styled_status(str(_field(rv, "status"))) if rv is not None else "-",
                      str(_field(lv, "summary")) if lv is not None else "",
                      str(_field(rv, "summary")) if rv is not None else "")
    return table


def runs_table(results: list[dict], title: str = "runs") -> Table:
    """One row per run (``results.json`` dicts): scenario | seed | verdict | not passing | dir.

    The verdict is PASS when every checker passed or was skipped, else FAIL (exit code 1).
    """
    table = Table(title=title)
    for col in ("scenario", "seed", "verdict", "not passing", "run directory"):
        table.add_column(col, no_wrap=col != "not passing")
    for res in results:
        verdicts = res.get("verdicts") or []
        bad = [f"{_field(v, 'checker')} {_field(v, 'status')}" for v in verdicts
               if _field(v, "status") not in ("PASS", "SKIPPED")]
        status = "PASS" if exit_code_of(verdicts) == 0 else "FAIL"
        table.add_row(str(res.get("scenario", "?")), str(res.get("seed", "?")),
                      styled_status(status), ", ".join(bad),
                      str(res.get("run_dir", "")).rsplit("/", 1)[-1])
    return table
