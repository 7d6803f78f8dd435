"""The matrix's command-line flags and its ``python -m chaos matrix`` parser: argparse only, so
that ``python -m chaos`` declares them without importing the matrix driver (issue 26)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hermes_state.testing import CURRENT_VERSION

DESCRIPTION = ("The schema-migration matrix: every historical version opened by the current code "
               "(SPEC §16.6).")
OLD_VERSIONS = tuple(range(1, CURRENT_VERSION))
MODES = ("plain", "writer", "crash")
#: ``--quick``: every version plain, the old-schema writer on these, crash sweeps from these.
QUICK_WRITER_VERSIONS = (1, 10, 16, 22)
QUICK_CRASH_VERSIONS = (1, 19)


def parse_versions(text: str) -> list[int]:
    """``"1-22"``, ``"1,5,9"`` or ``"3-5,20"`` -> sorted versions.

    Raises:
        argparse.ArgumentTypeError: not such a list, or a version outside 1..22.
    """
    out: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            a, b = int(lo), int(hi or lo)
            out.update(range(a, b + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad version list {text!r}: use e.g. 1-22 or 1,5,9")
    bad = sorted(v for v in out if v not in OLD_VERSIONS)
    if bad or not out:
        raise argparse.ArgumentTypeError(f"versions must lie in 1-22, got {text!r}")
    return sorted(out)


def parse_modes(text: str) -> list[str]:
    """``"plain,crash"`` -> modes. Raises ArgumentTypeError for an unknown mode."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"modes are {', '.join(MODES)}; got {text!r}")
    return modes


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The matrix selection flags (shared by ``chaos matrix`` and ``chaos gate``)."""
    p.add_argument("--versions", type=parse_versions, default=list(OLD_VERSIONS),
                   help="start versions, e.g. 1-22 or 1,5,9 (default: all of 1-22)")
    p.add_argument("--no-generated", dest="generated", action="store_false",
                   help="no generated fixture stores (real stores only)")
    p.add_argument("--no-real", dest="real", action="store_false",
                   help="leave out the bundled stores written by real upstream code "
                        "(tests/fixtures/upstream)")
    p.add_argument("--stores", type=Path, action="append", default=None, metavar="DIR",
                   help="also every store (state.db, *.db; a dump.json beside it is the "
                        "ground truth) under DIR, on copies; repeatable")
    p.add_argument("--modes", type=parse_modes, default=list(MODES),
                   help="plain,writer,crash (default: all)")
    p.add_argument("--quick", action="store_true",
                   help=f"writer cells only for v{QUICK_WRITER_VERSIONS}, crash sweeps only "
                   f"from v{QUICK_CRASH_VERSIONS}")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m chaos matrix``."""
    p = argparse.ArgumentParser(prog="python -m chaos matrix", description=DESCRIPTION)
    add_arguments(p)
    p.add_argument("--jsonl", action="store_true", help="one JSON object per row on stdout")
    p.add_argument("--json", action="store_true",
                   help="one JSON array of every row on stdout at the end (progress on stderr)")
    p.add_argument("--only-store", default=None, help=argparse.SUPPRESS)
    return p
