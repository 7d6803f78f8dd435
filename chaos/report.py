"""What the user reads: the run header, progress lines, the verdict table, results.json."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

STATUS_STYLE = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow",
                "SKIPPED": "dim"}


def verdict_table(verdicts: list, title: str = "checkers") -> Table:
    """A rich table: checker | verdict | summary."""
    table = Table(title=title, show_lines=False)
    table.add_column("checker", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("figures")
    for v in verdicts:
        table.add_row(v.checker, f"[{STATUS_STYLE.get(v.status, '')}]{v.status}[/]", v.summary)
    return table


def print_verdicts(console: Console, verdicts: list, title: str) -> None:
    console.print(verdict_table(verdicts, title))


def write_results(path: Path, payload: dict) -> None:
    """Write ``results.json`` (indent 2, sorted keys)."""
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
