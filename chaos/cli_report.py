"""The output and observation subcommands of ``python -m chaos``: ``report``, ``replay``,
``watch`` (SPEC §16.5).

Kept apart from :mod:`chaos.__main__` so that module only registers them (:func:`add_parsers`)
and hands matching commands to :func:`dispatch`. Exit codes as everywhere in the toolkit:
0 every checker passed, 1 a checker failed (or was INCONCLUSIVE), 2 bad input (not a run
directory, no store to watch), 3 the toolkit itself failed (raised to ``__main__``).
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.markup import escape

from .files.inputs import InputError
from .report.terminal import markup_safe

COMMANDS = ("report", "replay", "watch")
EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def dispatch(args: argparse.Namespace, err: Console) -> int:
    """Run one of :data:`COMMANDS`; returns the exit code. Toolkit errors propagate."""
    if args.cmd == "report":
        return _report(args, err)
    if args.cmd == "replay":
        return _replay(args, err)
    return _watch(args, err)


def _report(args, err: Console) -> int:
    from . import store
    from .checkers.base import exit_code_of
    from .replay import RunDirError, recheck
    from .report import print_verdicts
    from .report.html import write_report

    run_dir = args.run_dir
    if not store.RunDir(run_dir).is_run():
        err.print(f"[red]{markup_safe(run_dir)}: not a chaos run directory (no history.jsonl, "
                  "no history/)[/]", highlight=False)
        return EXIT_BAD_INPUT
    console = Console(stderr=True, soft_wrap=True) if args.json else Console(soft_wrap=True)
    try:
        if args.recheck:
            results = recheck(run_dir)
            console.print(f"rechecked {markup_safe(run_dir)} (previous verdicts in "
                          "results.previous.json)", highlight=False)
        else:
            results = store.read_json(store.RunDir(run_dir).results)
            if not results:
                err.print(f"[yellow]{markup_safe(run_dir)}/results.json missing or unreadable; "
                          "the page has no verdicts (use --recheck to judge the saved history)[/]",
                          highlight=False)
        page = write_report(run_dir)
    except (RunDirError, FileNotFoundError, InputError) as exc:
        err.print(f"[red]{markup_safe(exc, one_line=False)}[/]", highlight=False)
        return EXIT_BAD_INPUT
    verdicts = results.get("verdicts") or []
    if verdicts and "verdict" not in results:  # a run directory from before the field
        from .checkers.base import run_status

        results["verdict"] = run_status(verdicts)
    if results.get("kind") == "watch":
        from .watch import print_summary

        print_summary(console, results)
    else:
        title = f"{results.get('scenario', run_dir.name)} (seed {results.get('seed', '?')})"
        print_verdicts(console, verdicts, title)
    console.print(f"report {page}", highlight=False, markup=False)
    if args.json:
        print(json.dumps(results, default=str))
    if results.get("kind") == "watch":
        return EXIT_OK
    return exit_code_of(verdicts) if verdicts else EXIT_CHECK_FAILED


def _replay(args, err: Console) -> int:
    from .replay import RunDirError, replay, run_summary
    from .report import comparison_table

    console = Console(stderr=True, soft_wrap=True) if args.json else Console(soft_wrap=True)
    try:
        original, result = replay(args.run_dir, out_dir=args.out, console=console)
    except RunDirError as exc:
        err.print(f"[red]{markup_safe(exc, one_line=False)}[/]", highlight=False)
        return EXIT_BAD_INPUT
    console.print(comparison_table(original.get("verdicts") or [], result.verdicts,
                                   "original", "replay",
                                   title=f"{result.results.get('scenario')} seed "
                                         f"{result.results.get('seed')}: "
                                         f"{args.run_dir.name} vs {result.run_dir.name}",
                                   width=console.width))
    console.print(_summary_table(run_summary(args.run_dir), run_summary(result.run_dir)))
    console.print("same seed: same workload choices and fault schedule; OS scheduling and machine load "
                  "change the timing and so the counts",
                  style="dim", highlight=False)
    if args.json:
        print(json.dumps(result.results, default=str))
    return result.exit_code


def _summary_table(left: dict, right: dict):
    from rich.table import Table

    table = Table(title="workload and faults side by side")
    table.add_column("what", no_wrap=True)
    table.add_column("original", overflow="fold")
    table.add_column("replay", overflow="fold")
    for key in list(left) + [k for k in right if k not in left]:
        table.add_row(*(escape(str(x)) for x in (key, left.get(key, "-"), right.get(key, "-"))))
    return table


def _watch(args, err: Console) -> int:
    from .watch import WatchError, watch

    try:
        run_dir = watch(home=args.home, profile=args.profile, duration_s=args.duration,
                        interval_s=args.interval, out_dir=args.out,
                        console=Console(stderr=args.json))
    except WatchError as exc:
        err.print(f"[red]{markup_safe(exc, one_line=False)}[/]", highlight=False)
        return EXIT_BAD_INPUT
    if args.json:
        from . import store

        print(json.dumps(store.read_json(store.RunDir(run_dir).results), default=str))
    return EXIT_OK
