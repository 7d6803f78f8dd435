"""What the user reads in the terminal: the verdict table, results.json (SPEC §16.5).

The HTML page is :mod:`chaos.report.html`; this module is the terminal side. Verdicts may be
:class:`chaos.checkers.base.Verdict` objects or their ``to_dict()`` form (as read back from
``results.json``), so a saved run prints exactly like a live one.

Every text from a run (a checker's summary, a scenario's name, a reason with ``.[fs]`` in it) is
escaped once, where it is put in a table (issue 27 item 10): rich would read ``[fs]`` as markup
and drop it. Every table fits the console's width (issue 16 item 2): piped into a CI log (no TTY, 80
columns) the layout turns compact -- lighter borders, the figures folded under their checker, the
list of runs as lines -- and no column is ever squeezed to nothing: the texts that identify a
run (its scenario, seed and run directory) are never cut.
"""

from __future__ import annotations

import unicodedata

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..checkers.base import PASS, SKIPPED, run_status

STATUS_STYLE = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow",
                "SKIPPED": "dim"}
#: Below this many columns the tables use their compact layout.
COMPACT_BELOW = 100


#: Bidirectional overrides and isolates: shown escaped (they reorder the text around them).
_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))


def printable(text: object, *, one_line: bool = True) -> str:
    """``text`` (any content: a scenario's description, a name, an error) safe to print on a
    terminal: control characters (a terminal escape, a bell, a backspace), lone surrogates and
    bidirectional overrides come out escaped (``\\x1b``, ``\\ud800``); with ``one_line``,
    line breaks and tabs become single spaces. Never raises."""
    if not isinstance(text, str):
        text = str(text)
    if one_line:
        text = " ".join(text.split())
    out = []
    for ch in text:
        code = ord(ch)
        if ch in "\n\t" and not one_line:
            out.append(ch)
        elif code in _BIDI or unicodedata.category(ch) in ("Cc", "Cs"):
            out.append(ascii(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)


def markup_safe(text: object, *, one_line: bool = True) -> str:
    """:func:`printable` text escaped for a rich markup string (``[/]`` stays text)."""
    return escape(printable(text, one_line=one_line))


def compact(width: int | None) -> bool:
    """True when a table drawn ``width`` columns wide should use the compact layout."""
    return width is not None and width < COMPACT_BELOW


def _field(v, name: str, default=""):
    return v.get(name, default) if isinstance(v, dict) else getattr(v, name, default)


def styled_status(status: str) -> str:
    """``status`` wrapped in its rich colour markup."""
    return f"[{STATUS_STYLE.get(status, '')}]{status}[/]" if status in STATUS_STYLE else status


def _table(title: str, width: int | None) -> Table:
    title = Text(title)  # a scenario's name is text, not markup
    if compact(width):
        return Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                     expand=False)
    return Table(title=title, show_lines=False)


def verdict_table(verdicts: list, title: str = "checkers", width: int | None = None) -> Table:
    """A rich table: checker | verdict | figures. ``verdicts``: Verdict objects or dicts;
    ``width``: the console's width (compact below :data:`COMPACT_BELOW`)."""
    table = _table(title, width)
    table.add_column("checker", no_wrap=True, overflow="fold")
    table.add_column("verdict", no_wrap=True)
    table.add_column("figures", overflow="fold", ratio=1, min_width=20)
    for v in verdicts:
        status = str(_field(v, "status", "?"))
        table.add_row(str(_field(v, "checker")), styled_status(status),
                      markup_safe(_field(v, "summary"), one_line=False))  # any text: escaped
    return table


def print_verdicts(console: Console, verdicts: list, title: str) -> None:
    """Print the verdict table (Verdict objects or dicts) at the console's width."""
    console.print(verdict_table(verdicts, title, console.width))


def comparison_table(left: list, right: list, left_title: str, right_title: str,
                     title: str = "verdicts side by side", width: int | None = None) -> Table:
    """Two runs' verdicts in one table: checker | left | right | left figures | right figures
    (compact: checker | verdicts | figures, the two runs' figures one under the other).

    A checker present in only one run shows ``-`` on the other side.
    """
    lmap = {str(_field(v, "checker")): v for v in left}
    rmap = {str(_field(v, "checker")): v for v in right}
    names = list(lmap) + [n for n in rmap if n not in lmap]

    def status(v) -> str:
        return styled_status(str(_field(v, "status"))) if v is not None else "-"

    def figures(v) -> str:
        return escape(str(_field(v, "summary"))) if v is not None else ""

    table = _table(title, width)
    if compact(width):
        table.add_column("checker", no_wrap=True, overflow="fold")
        table.add_column(f"{left_title} → {right_title}", no_wrap=True)
        table.add_column("figures", overflow="fold", ratio=1, min_width=20)
        for name in names:
            lv, rv = lmap.get(name), rmap.get(name)
            table.add_row(escape(name), f"{status(lv)} → {status(rv)}",
                          f"{escape(left_title)}: {figures(lv)}\n{escape(right_title)}: "
                          f"{figures(rv)}")
        return table
    table.add_column("checker", no_wrap=True)
    table.add_column(left_title, no_wrap=True)
    table.add_column(right_title, no_wrap=True)
    table.add_column(f"{left_title} figures", overflow="fold")
    table.add_column(f"{right_title} figures", overflow="fold")
    for name in names:
        lv, rv = lmap.get(name), rmap.get(name)
        table.add_row(escape(name), status(lv), status(rv), figures(lv), figures(rv))
    return table


def run_verdict(res: dict) -> tuple[str, list[str]]:
    """``(PASS|FAIL|INCONCLUSIVE|SKIPPED, ["checker STATUS", ...] not passing)`` of one run's
    ``results.json`` (its ``verdict``, else :func:`chaos.checkers.base.run_status`)."""
    verdicts = res.get("verdicts") or []
    bad = [f"{_field(v, 'checker')} {_field(v, 'status')}" for v in verdicts
           if _field(v, "status") not in (PASS, SKIPPED)]
    return str(res.get("verdict") or run_status(verdicts)), bad


def total_line(results: list[dict], seconds: float, exit_code: int) -> Text:
    """The one line ``chaos run`` ends with (issue 27): how many runs, the overall verdict, the
    exit code and the time; for one run its scenario, seed and what did not pass (or why it was
    SKIPPED); for several, the count of each verdict. Plain text: nothing in it is markup."""
    verdicts = [run_verdict(r) for r in results]
    overall = {0: PASS, 4: SKIPPED, 1: "FAIL"}.get(exit_code, "ERROR")
    if exit_code == 1 and all(v[0] != "FAIL" for v in verdicts):
        overall = "INCONCLUSIVE"
    line = Text(f"total: {len(results)} run{'s' if len(results) != 1 else ''}, ")
    line.append(overall, style=STATUS_STYLE.get(overall, "bold red"))
    line.append(f" (exit {exit_code}) in {seconds:.1f}s")
    if len(results) == 1:
        res, (status, bad) = results[0], verdicts[0]
        n = len(res.get("verdicts") or [])
        line.append(f": {res.get('scenario', '?')} seed {res.get('seed', '?')}, ")
        if status == SKIPPED:
            line.append(f"every checker SKIPPED: {res.get('skipped') or '?'}")
        elif bad:
            line.append(f"not passing: {', '.join(bad)}")
        else:
            line.append(f"{n} of {n} verdicts PASS")
    else:
        counts: dict[str, int] = {}
        for status, _ in verdicts:
            counts[status] = counts.get(status, 0) + 1
        line.append(": " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return line


def runs_table(results: list[dict], title: str = "runs", width: int | None = None):
    """One row per run (``results.json`` dicts): scenario | seed | verdict | not passing | dir.

    The verdict is PASS when every checker passed or was skipped, else FAIL (exit code 1).
    Compact (a CI log, or any console too narrow for the table): one block of lines per run instead of a table, so the scenario, the
    seed and the run directory are never cut (print it with ``crop=False``) and the checkers
    that did not pass get a line.
    """
    rows = [(str(res.get("scenario", "?")), str(res.get("seed", "?")), *run_verdict(res),
             str(res.get("run_dir", "")).rsplit("/", 1)[-1]) for res in results]
    need = 16 + 7 + 24 + max([len(r[0]) + len(r[1]) + len(r[4]) for r in rows] + [0])
    if compact(width) or (width is not None and width < need):
        lines = [Text(title, style="italic")]
        for res in results:
            status, bad = run_verdict(res)
            line = Text.from_markup(f"{styled_status(status)} ")
            line.append(f"{res.get('scenario', '?')} seed {res.get('seed', '?')}")
            lines.append(line)
            if bad:
                lines.append(Text(f"     not passing: {', '.join(bad)}", overflow="fold"))
            lines.append(Text(f"     {str(res.get('run_dir', '')).rsplit('/', 1)[-1]}",
                              no_wrap=True, overflow="ignore"))
        return Group(*lines)
    table = Table(title=title)
    for col in ("scenario", "seed", "verdict", "not passing", "run directory"):
        table.add_column(col, no_wrap=col != "not passing",
                         min_width=12 if col == "not passing" else None)
    for scenario, seed, status, bad, run_dir in rows:
        table.add_row(escape(scenario), escape(seed), styled_status(status),
                      escape(", ".join(bad)), escape(run_dir))
    return table
