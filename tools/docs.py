"""The generated documentation, written or checked: ``python tools/docs.py [--write | --check]``.

- ``docs/CLI.md``: every ``hermes-state`` and ``python -m chaos`` command's ``--help``, from the
  argument parsers themselves (as sqlite-utils' ``cli-reference``);
- ``docs/SCENARIO_REFERENCE.md``: every role, fault and checker parameter, from the declarations
  (:mod:`chaos.scenario.reference`);
- ``docs/BENCHMARKS.md``: the tables between the ``bench-table`` markers, from
  ``benchmarks/results/latest.json`` (:mod:`benchmarks.table`).

``--check`` (what ``tests/test_docs.py`` runs) exits 1 naming every file that is out of date;
``--write`` rewrites them. The audit's kill table (``docs/AUDIT.md``) is the record of a run, not
generated here: the test checks that it names every mutant of the catalogue.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI_DOC = ROOT / "docs" / "CLI.md"
WIDTH = "100"

CLI_HEADER = """# Command-line reference

Generated from the argument parsers by `python tools/docs.py --write` (never edit by hand;
`tests/test_docs.py` checks it). The guides: [STORE.md](STORE.md) (the store and its operator
commands), [RECOVERY.md](RECOVERY.md) (what to do when something went wrong),
[TOOLKIT.md](TOOLKIT.md) (the chaos toolkit).
"""


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen and sub.add_help:
                    seen.add(id(sub))
                    out.append((name, sub))
    return out


def _walk(title: str, parser: argparse.ArgumentParser, depth: int) -> list[str]:
    lines = [f"{'#' * depth} `{title}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in _subparsers(parser):
        lines += _walk(f"{title} {name}", sub, depth + 1 if depth < 4 else depth)
    return lines


def cli_reference() -> str:
    """The whole of ``docs/CLI.md``."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse wraps to the terminal: a fixed width, every machine
    try:
        from chaos.__main__ import build_parser as chaos_parser
        from chaos.matrix import build_parser as matrix_parser
        from hermes_state.cli import build_parser as store_parser

        lines = [CLI_HEADER]
        lines += _walk("hermes-state", store_parser(), 2)
        lines += _walk("python -m chaos", chaos_parser(), 2)
        lines += _walk("python -m chaos matrix", matrix_parser(), 3)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(lines).rstrip() + "\n"


def _benchmarks_current(write: bool) -> bool:
    """Whether docs/BENCHMARKS.md's tables equal those made from latest.json (rewritten with
    ``write``)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.table import README, RESULTS, update_readme

    if write:
        update_readme(RESULTS / "latest.json")
        return True
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "BENCHMARKS.md"
        shutil.copyfile(README, copy)
        return not update_readme(RESULTS / "latest.json", copy)


def stale(write: bool = False) -> list[str]:
    """The generated files that differ from what the code makes now (after writing them when
    ``write``)."""
    from chaos.scenario.reference import REFERENCE, reference_document, write_reference

    out = []
    text = cli_reference()
    if CLI_DOC.read_text(encoding="utf-8") != text if CLI_DOC.exists() else True:
        out.append(str(CLI_DOC.relative_to(ROOT)))
        if write:
            CLI_DOC.write_text(text, encoding="utf-8")
    if REFERENCE.read_text(encoding="utf-8") != reference_document():
        out.append(str(REFERENCE.relative_to(ROOT)))
        if write:
            write_reference()
    if not _benchmarks_current(False):
        out.append("docs/BENCHMARKS.md")
        if write:
            _benchmarks_current(True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="rewrite every generated file")
    g.add_argument("--check", action="store_true", help="exit 1 if any is out of date")
    args = ap.parse_args(argv)
    out = stale(write=args.write)
    for name in out:
        print(f"{'rewrote' if args.write else 'out of date'}: {name}")
    if args.check and out:
        print("run: python tools/docs.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
