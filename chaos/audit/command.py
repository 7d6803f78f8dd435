"""``python -m chaos audit`` on the command line: loading what it runs and running it.

Its arguments are declared in :mod:`chaos.commands` (argparse alone, so that parsing imports no
driver); :func:`cmd_audit` imports the driver when the command runs (issue 26 item 4).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.text import Text


def select_scenarios(pattern: str, tags: list[str] | None = None) -> list[Path]:
    """Scenario files matching ``pattern`` (a glob, relative to the cwd or absolute)."""
    base = Path(pattern)
    if base.is_dir():
        files = sorted(base.glob("*.yaml"))
    else:
        anchor = Path(base.anchor) if base.is_absolute() else Path(".")
        rel = str(base.relative_to(anchor)) if base.is_absolute() else pattern
        files = sorted(p for p in anchor.glob(rel) if p.suffix in (".yaml", ".yml"))
    return files


def list_catalogue(catalogue: list, console: Console) -> int:
    """``audit --list``: each mutant, its SPEC section and where it is planted today.

    Returns:
        0 when every mutant is planted exactly once; 1 when one is stale or broken.
    """
    import tempfile

    import hermes_state

    from .plant import MutantError

    source = Path(hermes_state.__file__).resolve().parent
    bad = 0
    with tempfile.TemporaryDirectory(prefix="audit-list-") as tmp:
        for k, m in enumerate(catalogue):
            try:
                planted = m.plant(source, Path(tmp) / f"m{k}")
                where = ", ".join(f"{f}:{','.join(str(s['line']) for s in v)}"
                                  for f, v in planted.sites.items()) or "(no statement)"
                line = Text(f"ok     {m.name:40} {m.spec:14} {where}")
            except MutantError as exc:
                bad += 1
                line = Text(f"STALE  {m.name:40} {m.spec:14} {exc}", style="bold red")
            console.print(line, highlight=False, soft_wrap=True)
    console.print(f"{len(catalogue)} mutant(s), {bad} stale or broken", highlight=False,
                  markup=False)
    return 1 if bad else 0


def cmd_audit(args, load_all, err: Console, *, tags: list[str] | None = None,
              pattern: str | None = None) -> int:
    """``python -m chaos audit`` (and ``gate --audit``): load, validate, run."""
    from . import catalogue as mutants
    from .patches import load_patches

    patch_files = getattr(args, "patch", None)
    try:
        catalogue = (load_patches(patch_files) if patch_files else
                     mutants.load_dir(getattr(args, "mutants", None)))
    except mutants.MutantError as exc:
        err.print(f"[red]chaos audit: {escape(str(exc))}[/]", highlight=False)
        return 2
    only = getattr(args, "only", None)
    if only:
        catalogue = [m for m in catalogue if any(fnmatch.fnmatch(m.name, g) for g in only)]
        if not catalogue:
            err.print(f"[red]chaos audit: no mutant matches {escape(' '.join(only))}[/]",
                      highlight=False)
            return 2
    if getattr(args, "list", False):
        return list_catalogue(catalogue, Console(highlight=False))
    files = select_scenarios(pattern or args.scenarios)
    if not files:
        err.print("[red]chaos audit: no scenario files match "
                  f"{escape(str(pattern or args.scenarios))}[/]", highlight=False)
        return 2
    scenarios, bad = load_all(files, err)
    if bad:
        return 2
    want = list(tags or []) + list(getattr(args, "tag", None) or [])
    if want:
        scenarios = [sc for sc in scenarios if set(want) & set(sc.tags)]
        if not scenarios:
            err.print(f"[red]chaos audit: no scenario tagged {escape(', '.join(want))}[/]",
                      highlight=False)
            return 2
    from .driver import DEFAULT_CONFIRM, run_audit

    unit_arg = getattr(args, "unit_tests", None)
    unit = None if unit_arg is None else unit_arg.split()
    confirm = getattr(args, "confirm", None)
    return run_audit(catalogue, scenarios, jobs=args.jobs, out=args.out, as_json=args.json,
                     junit=args.junit, all_scenarios=getattr(args, "all", False),
                     control=getattr(args, "control", True), unit_tests=unit,
                     markdown=getattr(args, "markdown", None),
                     own_only=getattr(args, "own", False),
                     readme=getattr(args, "readme", None),
                     confirm=DEFAULT_CONFIRM if confirm is None else confirm,
                     patches=bool(patch_files), matrix=getattr(args, "matrix", True))
