"""What the audit's two kinds of mutant share (issue 14, issue 27 item 8): the errors, the copy
of the package a mutant is planted in, the compile check, and what planting returns."""

from __future__ import annotations

import py_compile
import shutil
from dataclasses import dataclass
from pathlib import Path


class MutantError(Exception):
    """A mutant file that cannot be used: names the file and the field."""


class StaleMutant(MutantError):
    """The rewrite's pattern does not match exactly once under ``hermes_state/``."""

    def __init__(self, text: str, matches: dict[str, int]) -> None:
        super().__init__(text)
        self.matches = matches


@dataclass
class Planted:
    """A planted mutant: the changed files of the copy and the statements to mark."""

    files: list[Path]
    sites: dict[str, list[dict]]


def compile_check(target: Path, dest_root: Path, what: str) -> None:
    """Raise :class:`MutantError` when ``target`` does not compile (``what`` names it)."""
    try:
        py_compile.compile(str(target), doraise=True,
                           cfile=str(dest_root / ".compile-check.pyc"))
    except py_compile.PyCompileError as exc:
        raise MutantError(f"{what} does not compile after the rewrite: {exc.msg}") from None
    finally:
        (dest_root / ".compile-check.pyc").unlink(missing_ok=True)


def copy_package(package: Path, dest_root: Path) -> Path:
    """``dest_root/hermes_state``: a copy of ``package`` without ``__pycache__``/``*.pyc``."""
    dest = dest_root / "hermes_state"
    shutil.copytree(package, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest
