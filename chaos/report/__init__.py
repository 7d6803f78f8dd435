"""What the user reads: the terminal tables (:mod:`chaos.report.terminal`) and the
self-contained ``report.html`` page (:mod:`chaos.report.html`, drawn from
:mod:`chaos.report.timeline`) (SPEC §16.5)."""

from .terminal import (
    STATUS_STYLE,
    comparison_table,
    print_verdicts,
    runs_table,
    styled_status,
    total_line,
    verdict_table,
)

__all__ = ["STATUS_STYLE", "comparison_table", "print_verdicts", "runs_table", "styled_status",
           "total_line", "verdict_table"]
