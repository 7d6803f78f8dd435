"""``python -m chaos``: run, validate, list, report, replay, watch, gate, shrink, audit, upstream
(SPEC §16.5; ``upstream fetch VERSION``: issue 23).

Exit codes: 0 every checker passed, 1 a checker failed (or was INCONCLUSIVE), 2 invalid
scenario (nothing ran), 3 the toolkit itself failed, 4 SKIPPED: every checker of the run was
skipped (a stated requirement is unmet, e.g. no FUSE: nothing was tested, which is not a pass). A
SKIPPED checker beside judged ones is neutral (:func:`chaos.checkers.base.exit_code_of`).
"""

from __future__ import annotations

import json
import signal
import sys
import time
import traceback
from pathlib import Path

if __name__ == "__main__" and sys.argv[1:2] == ["run"]:
    # The role processes' fork server imports while this process imports the rest (SPEC §17:
    # the runner's overhead); it exits with this process.
    from .role_start import start_early

    start_early()

from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402

from .commands import EXIT_CODES_HELP, build_parser  # noqa: F401,E402  (re-exported: tests, docs)

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_SCENARIO, EXIT_TOOLKIT, EXIT_SKIPPED = 0, 1, 2, 3, 4


# ``upstream fetch VERSION...`` / ``upstream list``: the release cache (issue 23): a release is
# fetched once (pip, the package registry; hermes_state.testing.upstream_release.fetch), then
# the upstream role kind, the older_release_opens checker and the benchmarks run it offline.
def cmd_upstream(args, err) -> int:
    """Run ``upstream fetch|list``; 0 on success, 3 when a fetch failed (with the reason)."""
    from hermes_state.testing import upstream_release as ur

    if args.upstream_cmd == "list":
        root = ur.cache_root()
        found = sorted(p.name for p in root.iterdir() if (p / "release.json").is_file()) \
            if root.is_dir() else []
        if args.json:
            print(json.dumps({"cache": str(root), "releases": [ur.cached(v) for v in found]}))
            return 0
        print(f"cache: {root}")
        for v in found:
            info = ur.cached(v) or {}
            print(f"  {v:10} schema {info.get('schema_version')}  "
                  f"{info.get('distribution')}=={info.get('distribution_version')}")
        if not found:
            print(f"  (none: python -m chaos upstream fetch {ur.BASELINE} {ur.NEWER})")
        return 0
    code, done = 0, []
    say = (lambda text: err.print(text, highlight=False)) if args.json else print
    for version in args.versions:
        try:
            done.append(ur.fetch(version, say=say))
        except (RuntimeError, OSError) as exc:
            err.print(f"[red]upstream {version}: {exc}[/]", highlight=False)
            code = 3
    if args.json:
        print(json.dumps(done))
    return code
def _load_all(files: list[Path], err: Console):
    from .scenario import ScenarioError, load_scenario

    scenarios, bad = [], False
    from .report.terminal import markup_safe, printable

    for f in files:
        try:
            scenarios.append(load_scenario(f))
        except ScenarioError as exc:
            bad = True
            err.print(f"[red]invalid scenario[/] {markup_safe(f)}:", highlight=False)
            for problem in exc.problems:
                err.print(f"  {printable(problem)}", highlight=False, markup=False)
    return scenarios, bad


def _validate_json(files: list[Path]) -> int:
    """``validate --json``: one JSON array on stdout; exit 2 when any file is invalid."""
    from .scenario import ScenarioError, load_scenario

    out, bad = [], False
    for f in files:
        try:
            sc = load_scenario(f)
            out.append({"file": str(f), "valid": True, "name": sc.name, "problems": []})
        except ScenarioError as exc:
            bad = True
            out.append({"file": str(f), "valid": False, "name": None,
                        "problems": [str(p) for p in exc.problems]})
    print(json.dumps(out))
    return EXIT_BAD_SCENARIO if bad else EXIT_OK


def _on_sigterm(signum, frame):  # the runner's finally-clauses stop every role process
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos``: returns 0 all passed, 1 a checker failed or was inconclusive,
    2 invalid input, 3 the toolkit failed or was interrupted, 4 every checker SKIPPED
    (:data:`EXIT_CODES_HELP`, SPEC §16.5).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    for stream in (sys.stdout, sys.stderr):  # a text of any content prints, never raises
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if argv[:1] == ["matrix"]:
        from .matrix import main as matrix_main

        return matrix_main(argv[1:])
    args = build_parser().parse_args(argv)
    err = Console(stderr=True, soft_wrap=True)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if args.cmd == "validate":
            if args.json:
                return _validate_json(args.files)
            scenarios, bad = _load_all(args.files, err)
            from .report.terminal import printable

            for sc in scenarios:
                print(f"ok  {printable(sc.source)}: {sc.name} ({len(sc.roles)} roles, "
                      f"{len(sc.nemesis)} faults, {len(sc.expect)} checkers)")
            return EXIT_BAD_SCENARIO if bad else EXIT_OK
        from . import cli_report

        if args.cmd in cli_report.COMMANDS:
            return cli_report.dispatch(args, err)
        if args.cmd == "audit" or (args.cmd == "gate" and args.audit):
            from .audit import cmd_audit

            if args.cmd == "audit":
                return cmd_audit(args, _load_all, err)
            # gate --audit: the mutant catalogue against the `ci` scenarios (issue 14)
            return cmd_audit(args, _load_all, err, tags=["ci"],
                             pattern=str(args.scenarios / "*.yaml"))
        if args.cmd == "gate":
            from .gate import cmd_gate

            return cmd_gate(args, _load_all, err)
        if args.cmd == "upstream":
            return cmd_upstream(args, err)
        if args.cmd == "shrink":
            from .shrink import cmd_shrink

            return cmd_shrink(args, err)
        if args.cmd == "repro":
            from .repro import cmd_repro

            return cmd_repro(args, err)
        if args.cmd == "list":
            from .scenario import ScenarioError, load_scenario

            if not args.directory.is_dir():
                err.print(f"[red]no scenario directory[/] {escape(str(args.directory))}: give a directory "
                          "of *.yaml files (default: scenarios)", highlight=False)
                return EXIT_BAD_SCENARIO
            listed = []
            for f in sorted(args.directory.glob("*.yaml")):
                try:
                    sc = load_scenario(f)
                    listed.append({"file": f.name, "name": sc.name, "valid": True,
                                   "tags": list(sc.tags), "description": sc.description})
                except ScenarioError:
                    listed.append({"file": f.name, "name": None, "valid": False, "tags": [],
                                   "description": f"(invalid: run `python -m chaos validate "
                                                  f"{f}`)"})
            if args.json:
                print(json.dumps(listed))
            from .report.terminal import printable

            for item in [] if args.json else listed:
                print(f"{printable(item['file']):32} {printable(item['description'])}")
            return EXIT_OK
        scenarios, bad = _load_all(args.files, err)
        if bad:
            return EXIT_BAD_SCENARIO
        callable_roles = [(sc.source, r.name) for sc in scenarios for r in sc.roles
                          if r.kind == "callable"]
        if callable_roles:
            for source, name in callable_roles:
                err.print(f"{source}: role {name!r} is kind callable: it runs a Python function "
                          "a test passes to run_scenario(..., roles={...}); `chaos run` has "
                          "none", highlight=False, markup=False)
            return EXIT_BAD_SCENARIO
        from .sweep import run as run_scenario

        console = Console(stderr=True) if args.json else Console()
        from .checkers.base import worst_exit_code
        from .report import runs_table, total_line

        started = time.monotonic()
        done = []
        for sc in scenarios:
            for k in range(max(1, args.repeat)):
                seed = (args.seed if args.seed is not None else sc.seed) + k
                result = run_scenario(sc.with_seed(seed), out_dir=args.out, console=console)
                if args.json:
                    print(json.dumps(result.results, default=str))
                done.append(result.results)
        worst = worst_exit_code(r.get("exit_code", EXIT_TOOLKIT) for r in done)
        if len(done) > 1:
            from rich.table import Table

            runs = runs_table(done, width=console.width)
            # The compact layout's lines are never cut (a run directory longer than the line).
            console.print(runs, crop=isinstance(runs, Table))
        console.print(total_line(done, time.monotonic() - started, worst), soft_wrap=True)
        return worst
    except KeyboardInterrupt:
        err.print("[red]interrupted: every role process was stopped[/]")
        return EXIT_TOOLKIT
    except OSError as exc:
        err.print(f"[red]chaos: {escape(str(exc))}[/]", highlight=False)
        return EXIT_TOOLKIT
    except Exception:  # noqa: BLE001 - exit 3 means the toolkit failed, with the traceback
        err.print("[red]chaos toolkit error[/]")
        traceback.print_exc()
        return EXIT_TOOLKIT


if __name__ == "__main__":
    sys.exit(main())
