"""The ``python -m chaos`` command line: every subcommand's arguments, declared here with
argparse alone so that parsing a command imports no driver (a driver is imported when its command
runs, :mod:`chaos.__main__`; issue 26). ``docs/CLI.md`` is generated from :func:`build_parser`."""

from __future__ import annotations

import argparse
from pathlib import Path

from hermes_state.testing.upstream_release import BASELINE, NEWER, check_version

from .matrix.arguments import add_arguments as add_matrix_arguments

DESCRIPTION = ("``python -m chaos``: run, validate, list, report, replay, watch, gate, shrink, "
               "audit, upstream, repro (SPEC §16.5).")
#: ``shrink``'s defaults (chaos.shrink reads them from here).
SHRINK_MAX_RUNS = 30
SHRINK_MIN_DURATION_S = 1.0

#: The exit codes, as ``--help`` shows them (SPEC §16.5).
EXIT_CODES_HELP = """exit codes:
  0  PASS: every checker passed (a SKIPPED checker beside judged ones is neutral)
  1  FAIL or INCONCLUSIVE: a checker failed, or the run did not test what it declares
  2  invalid scenario or bad input: nothing ran
  3  the toolkit itself failed, or the run was interrupted
  4  SKIPPED: every checker was skipped (a requirement is unmet, the reason says which;
     e.g. pip install -e '.[fs]' for the faulty filesystem): nothing was tested

several runs (run FILE... or --repeat): the worst of 3, 2, 1, 4, 0 in that order."""


# ``upstream fetch VERSION...`` / ``upstream list``: the release cache (issue 23): a release is
# fetched once (pip, the package registry; hermes_state.testing.upstream_release.fetch), then
# the upstream role kind, the older_release_opens checker and the benchmarks run it offline.


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m chaos`` argument parser (every subcommand; docs/CLI.md is made from it)."""
    p = argparse.ArgumentParser(prog="python -m chaos", description=DESCRIPTION,
                                epilog=EXIT_CODES_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run scenario files and check their invariants",
                         epilog=EXIT_CODES_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("files", nargs="+", type=Path, help="scenario YAML files")
    run.add_argument("--seed", type=_seed, default=None, help="override the scenario seed")
    run.add_argument("--repeat", type=_repeat, default=1,
                     help="run each scenario K times (seeds N, N+1, ...)")
    run.add_argument("--out", type=Path, default=Path("runs"), help="where run directories go")
    run.add_argument("--json", action="store_true", help="print results.json objects on stdout")
    val = sub.add_parser("validate", help="validate scenario files; exit 2 on any problem")
    val.add_argument("files", nargs="+", type=Path, help="scenario YAML files")
    val.add_argument("--json", action="store_true",
                     help="one JSON array: file, valid, problems (file:line: field: problem)")
    lst = sub.add_parser("list", help="list the scenarios in a directory")
    lst.add_argument("directory", nargs="?", type=Path, default=Path("scenarios"),
                     help="a directory of *.yaml scenarios (default: scenarios)")
    lst.add_argument("--json", action="store_true",
                     help="one JSON array: file, name, description, tags, valid")
    sub.add_parser("matrix", add_help=False,
                   help="the schema-migration matrix of SPEC §16.6 alone (see `matrix --help`)")
    _add_reports(sub)  # report, replay, watch
    _add_upstream(sub)
    _add_gate(sub)
    _add_audit(sub)
    _add_shrink(sub)
    _add_repro(sub)
    return p


def _add_reports(sub) -> None:
    """Register ``report``, ``replay`` and ``watch`` on an argparse subparsers object."""
    rep = sub.add_parser("report", help="rebuild report.html of a run and print its verdicts")
    rep.add_argument("run_dir", type=Path, help="a run directory (runs/<name>-<stamp>-seed<N>)")
    rep.add_argument("--recheck", action="store_true",
                     help="run the checkers again on the saved history and final store")
    rep.add_argument("--json", action="store_true", help="print results.json on stdout")
    rpl = sub.add_parser("replay", help="run a saved run's scenario again with the same seed")
    rpl.add_argument("run_dir", type=Path, help="a run directory whose scenario and seed to run")
    rpl.add_argument("--out", type=Path, default=None,
                     help="where the new run directory goes (default: beside the original)")
    rpl.add_argument("--json", action="store_true", help="print the new results.json on stdout")
    wat = sub.add_parser("watch", help="observe a live store without faults (for lockup reports)")
    wat.add_argument("--home", type=Path, default=None,
                     help="HERMES_HOME to watch (default: $HERMES_HOME or ~/.hermes)")
    wat.add_argument("--profile", default=None, help="a named profile under the home")
    wat.add_argument("--duration", type=_seconds, default=None,
                     help="seconds to watch (default: until Ctrl-C)")
    wat.add_argument("--interval", type=_seconds, default=None,
                     help="seconds between samples (default 0.1)")
    wat.add_argument("--out", type=Path, default=Path("runs"), help="where the run directory goes")
    wat.add_argument("--json", action="store_true",
                     help="print the watch's results.json on stdout (progress on stderr)")


def _seconds(text: str) -> float:
    try:
        value = float(text.rstrip("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("a duration is a positive number of seconds")
    return value


def _add_upstream(sub) -> None:
    """Register ``upstream fetch`` and ``upstream list`` on the ``python -m chaos`` parser."""
    p = sub.add_parser("upstream", help="fetch real upstream releases into the cache (issue 23)")
    cmds = p.add_subparsers(dest="upstream_cmd", required=True)
    fetch = cmds.add_parser("fetch", help="fetch releases once (pip) into the cache")
    fetch.add_argument("versions", nargs="+", type=_version,
                       help=f"upstream release numbers, e.g. {BASELINE} {NEWER}")
    fetch.add_argument("--json", action="store_true", help="one JSON array of release.json")
    lst = cmds.add_parser("list", help="the cached releases")
    lst.add_argument("--json", action="store_true", help="one JSON object: cache, releases")


def _version(text: str) -> str:
    try:
        return check_version(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_gate(sub) -> None:
    """Register ``gate`` on the ``python -m chaos`` subparsers."""
    p = sub.add_parser("gate", help="every scenario (K seeds) plus the schema-migration matrix; "
                       "exit 0 only if no row failed (4: every row SKIPPED)")
    p.add_argument("--junit", type=Path, default=None, help="write JUnit XML to this file")
    p.add_argument("--seeds", type=positive_int, default=1, help="seeds per scenario (default 1)")
    p.add_argument("--jobs", type=positive_int, default=None,
                   help="child processes at once (default: the core count)")
    p.add_argument("--scenarios", type=Path, default=Path("scenarios"),
                   help="directory of scenario files (default scenarios/)")
    p.add_argument("--out", type=Path, default=None,
                   help="where run directories and logs go (default runs/gate-<UTCSTAMP>)")
    p.add_argument("--no-matrix", dest="matrix", action="store_false",
                   help="scenarios only")
    p.add_argument("--no-scenarios", dest="with_scenarios", action="store_false",
                   help="the matrix only")
    p.add_argument("--json", action="store_true",
                   help="print the rows as one JSON object on stdout (progress on stderr)")
    p.add_argument("--audit", action="store_true",
                   help="instead: run the mutant catalogue against the `ci` scenarios "
                   "(python -m chaos audit --tag ci; exit 0 only if every mutant is killed)")
    p.add_argument("--mutants", type=Path, default=None,
                   help="with --audit: directory of mutant files (default chaos/audit/mutants)")
    add_matrix_arguments(p)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _add_audit(sub) -> None:
    """Register ``audit`` on the ``python -m chaos`` subparsers."""
    p = sub.add_parser("audit", help="plant each mutant of the catalogue in a copy of the store "
                       "and run scenarios against it; exit 0 only if every mutant is killed")
    p.add_argument("--mutants", type=Path, default=None,
                   help="directory of mutant files: *.yaml rewrites and *.patch unified diffs "
                   "(default: the catalogue chaos/audit/mutants)")
    p.add_argument("--patch", action="append", type=Path, default=None, metavar="FILE",
                   help="audit this unified diff instead of the catalogue (repeatable): e.g. a "
                   "fix reversed, `git show COMMIT -R -- hermes_state/ > fix.patch`; applied to "
                   "the audit's copy only; says which scenario kills it, or that none does")
    p.add_argument("--list", action="store_true",
                   help="list the mutants and where each is planted (a stale one: exit 1); "
                   "run nothing")
    p.add_argument("--only", action="append", default=None, metavar="GLOB",
                   help="audit only the mutants whose name matches (repeatable)")
    p.add_argument("--scenarios", default="scenarios/*.yaml",
                   help="glob of scenario files to run (default scenarios/*.yaml)")
    p.add_argument("--tag", action="append", default=None,
                   help="only scenarios with this tag (repeatable; e.g. ci)")
    p.add_argument("--jobs", type=positive_int, default=None,
                   help="scenario runs at once (default: the core count)")
    p.add_argument("--confirm", type=non_negative_int, default=None, metavar="N",
                   help="runs of the mutant after a kill that must fail too, else the killer "
                   "is reported as flaky (default 2; a timing-bound or INCONCLUSIVE kill gets "
                   "at least 1)")
    p.add_argument("--no-matrix", dest="matrix", action="store_false",
                   help="leave out the quick schema-migration matrix (tried last on a mutant no "
                   "scenario killed, or first when the mutant names `matrix`)")
    p.add_argument("--all", action="store_true",
                   help="run every selected scenario on every mutant (no stop at the first kill)")
    p.add_argument("--own", action="store_true",
                   help="try only each mutant's own scenarios (a quick look)")
    p.add_argument("--no-control", dest="control", action="store_false",
                   help="count kills without checking the scenario passes on unmutated code")
    p.add_argument("--unit-tests", nargs="?", const="", default=None, metavar="PYTEST_ARGS",
                   help="also run unit tests on each mutant: each mutant's unit_tests, or "
                   "these (space-separated paths/node ids relative to the repository)")
    p.add_argument("--out", type=Path, default=None,
                   help="audit directory (default runs/audit-<UTCSTAMP>)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout (progress on stderr)")
    p.add_argument("--junit", type=Path, default=None, help="write JUnit XML to this file")
    p.add_argument("--markdown", type=Path, default=None,
                   help="write the kill table as Markdown to this file")
    p.add_argument("--readme", type=Path, default=None,
                   help="rewrite the kill-table block of this file (docs/AUDIT.md)")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _add_shrink(sub) -> None:
    """Register ``shrink`` on the ``python -m chaos`` subparsers."""
    p = sub.add_parser("shrink", help="search a smaller scenario that still fails the same "
                       "checker; writes RUN_DIR/shrunk.yaml")
    p.add_argument("run_dir", type=Path, help="a failing run directory")
    p.add_argument("--max-runs", type=int, default=SHRINK_MAX_RUNS,
                   help=f"budget of candidate runs (default {SHRINK_MAX_RUNS})")
    p.add_argument("--min-duration", type=float, default=SHRINK_MIN_DURATION_S,
                   help=f"never shorten below this many seconds (default "
                   f"{SHRINK_MIN_DURATION_S:g})")
    p.add_argument("--checker", default=None,
                   help="the checker to preserve (default: the first that failed)")


def _add_repro(sub) -> None:
    """``repro BUNDLE [-o FILE]``: declared here so that the parser does not import the repro
    driver (it is imported when the command runs)."""
    p = sub.add_parser("repro", help="turn a user's bundle (hermes-state doctor --bundle) into "
                       "a scenario that reproduces its lockup; exit 5 when the bundle shows a "
                       "state the toolkit cannot reproduce yet")
    p.add_argument("bundle", type=Path, help="the bundle file")
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="write the scenario here (default: stdout)")


def _seed(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError("a seed is an integer in [0, 2**63)")
    return value


def _repeat(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("--repeat is a count of runs, at least 1")
    return value
