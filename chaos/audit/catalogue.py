"""The mutant catalogue (issue 14): planted bugs, one per file, that the scenarios must catch.

A mutant is a YAML file in ``chaos/audit/mutants/`` (or any directory given to
``chaos audit --mutants``, where ``*.patch`` unified diffs are mutants too:
:mod:`chaos.audit.patches`):

```yaml
rule: every write transaction starts with BEGIN IMMEDIATE (lock conflicts surface at BEGIN)
spec: "§4"
rewrite:                       # one named source rewrite
  name: deferred BEGIN on the write path
  literal: 'conn.execute("BEGIN IMMEDIATE")\n            try:\n                held'
  replacement: 'conn.execute("BEGIN")\n            try:\n                held'
scenarios: [contention]        # tried first, in this order (the likeliest killers)
unit_tests: [tests/test_store_multiprocess.py]   # the pytest subset of `--unit-tests`
```

``literal`` (an exact text) or ``regex`` (a Python regular expression, ``re.MULTILINE``;
``replacement`` may use its groups) must match EXACTLY ONCE in all the ``*.py`` files under the
``hermes_state`` package: the rewrite is located by its pattern, never by a file name or a line
number, so it survives code moving between modules. Zero or several matches make the mutant
*stale* (:class:`StaleMutant`): an ERROR in the audit, never "killed" nor "survived".
Planting one also names the statements it changed (:mod:`chaos.audit.reach`), so the audit can
tell whether a run reached them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..files import inputs, names
from . import patches, reach
from .plant import MutantError, Planted, StaleMutant, compile_check, copy_package

__all__ = ["CATALOGUE", "Mutant", "MutantError", "Planted", "StaleMutant", "copy_package", "load",
           "load_dir"]

CATALOGUE = Path(__file__).resolve().parent / "mutants"
_KEYS = {"rule", "spec", "rewrite", "scenarios", "unit_tests", "description"}
_REWRITE_KEYS = {"name", "literal", "regex", "replacement"}
#: Largest mutant file read (bytes): the catalogue's are under 2 KiB.
MAX_FILE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Mutant:
    """One planted bug: the SPEC rule it breaks and the source rewrite that plants it."""

    name: str
    file: str
    rule: str
    spec: str
    rewrite_name: str
    pattern: str
    replacement: str
    is_regex: bool
    scenarios: list[str] = field(default_factory=list)
    unit_tests: list[str] = field(default_factory=list)
    description: str = ""

    def regex(self) -> re.Pattern:
        """The compiled pattern (a literal is escaped)."""
        return re.compile(self.pattern if self.is_regex else re.escape(self.pattern),
                          re.MULTILINE)

    def matches(self, package: Path) -> dict[str, int]:
        """``{path relative to the package: match count}`` for every file with a match."""
        rx = self.regex()
        out = {}
        for path in sorted(package.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            n = len(rx.findall(path.read_text(encoding="utf-8")))
            if n:
                out[str(path.relative_to(package))] = n
        return out

    def locate(self, package: Path) -> str:
        """The one file (relative to ``package``) the pattern matches once.

        Raises:
            StaleMutant: no match, or more than one (in one file or across files).
        """
        found = self.matches(package)
        total = sum(found.values())
        if total != 1:
            where = ", ".join(f"{f} x{n}" for f, n in found.items()) or "nowhere"
            raise StaleMutant(f"stale mutant {self.name}: its pattern must match exactly once "
                              f"under {package}, it matched {total} time(s) ({where})", found)
        return next(iter(found))

    def apply(self, package: Path, dest_root: Path) -> Path:
        """Copy ``package`` (a ``hermes_state`` directory) to ``dest_root/hermes_state`` with
        this mutation applied; byte code caches are not copied (they could hold the original).

        Returns:
            The mutated file in the copy.
        Raises:
            StaleMutant: the pattern does not match exactly once.
            MutantError: the mutated file does not compile, or the rewrite changed nothing.
        """
        return self.plant(package, dest_root).files[0]

    def plant(self, package: Path, dest_root: Path) -> "Planted":
        """:meth:`apply`, also returning the statements to mark (:mod:`chaos.audit.reach`).

        Raises:
            StaleMutant, MutantError: as :meth:`apply`.
        """
        rel = self.locate(package)
        copy = copy_package(package, dest_root)
        target = copy / rel
        text = target.read_text(encoding="utf-8")
        m = self.regex().search(text)
        assert m is not None  # located above
        inserted = m.expand(self.replacement) if self.is_regex else self.replacement
        new = text[:m.start()] + inserted + text[m.end():]
        if new == text:
            raise MutantError(f"mutant {self.name}: the rewrite changes nothing in {rel}")
        target.write_text(new, encoding="utf-8")
        compile_check(target, dest_root, f"mutant {self.name}: {rel}")
        start, end, indent = reach.changed(text, m.start(), m.group(0), inserted)
        try:
            marks = reach.sites(new, start, end, indent)
        except reach.NoSites as exc:
            raise MutantError(f"mutant {self.name}: {rel}: {exc}") from None
        return Planted([target], {f"hermes_state/{rel}": marks})


def _strings(value, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MutantError(f"{where}: expected a list of strings")
    return list(value)


def load(path: Path) -> Mutant:
    """Read one mutant file.

    The mutant's name is the file's stem; it names the mutant's directory in an audit, so it
    must be a plain file name (:func:`chaos.files.names.check`). The file is read without following
    a link, without blocking on a FIFO and within :data:`MAX_FILE_BYTES`
    (:mod:`chaos.files.inputs`).

    Raises:
        MutantError: a name that cannot be a directory name, a file that is not a regular file
            (or a link, or too large), unreadable YAML, an unknown or missing field, a bad
            regex; the message names the file and the field.
    """
    path = Path(path)
    try:
        name = names.check(path.stem, "mutant")
    except names.BadName as exc:
        raise MutantError(f"{names.shown(str(path), 200)}: {exc}") from None
    try:
        data = yaml.safe_load(inputs.read_text(path, MAX_FILE_BYTES))
    except inputs.InputError as exc:
        raise MutantError(f"cannot read the mutant: {exc}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise MutantError(f"{path}: cannot read the mutant: {exc}") from None
    if not isinstance(data, dict):
        raise MutantError(f"{path}: a mutant is a mapping with {', '.join(sorted(_KEYS))}")
    unknown = set(data) - _KEYS
    if unknown:
        raise MutantError(f"{path}: unknown field(s) {', '.join(sorted(unknown))} "
                          f"(allowed: {', '.join(sorted(_KEYS))})")
    for key in ("rule", "spec", "rewrite"):
        if not data.get(key):
            raise MutantError(f"{path}: field {key!r} is required")
    rw = data["rewrite"]
    if not isinstance(rw, dict) or set(rw) - _REWRITE_KEYS:
        raise MutantError(f"{path}: rewrite: a mapping of {', '.join(sorted(_REWRITE_KEYS))}")
    if ("literal" in rw) == ("regex" in rw):
        raise MutantError(f"{path}: rewrite: give exactly one of 'literal' or 'regex'")
    if not isinstance(rw.get("replacement"), str):
        raise MutantError(f"{path}: rewrite: 'replacement' (a string) is required")
    pattern = rw.get("regex", rw.get("literal"))
    if not isinstance(pattern, str) or not pattern:
        raise MutantError(f"{path}: rewrite: the pattern must be a non-empty string")
    if "regex" in rw:
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            raise MutantError(f"{path}: rewrite: regex: {exc}") from None
    return Mutant(name=name, file=str(path), rule=" ".join(str(data["rule"]).split()),
                  spec=str(data["spec"]), rewrite_name=str(rw.get("name") or path.stem),
                  pattern=pattern, replacement=rw["replacement"], is_regex="regex" in rw,
                  scenarios=_strings(data.get("scenarios"), f"{path}: scenarios"),
                  unit_tests=_strings(data.get("unit_tests"), f"{path}: unit_tests"),
                  description=" ".join(str(data.get("description") or "").split()))


def load_dir(directory: Path | None = None) -> list["Mutant | patches.PatchMutant"]:
    """Every mutant of ``directory`` (default: this catalogue), by name: the ``*.yaml``
    rewrites and the ``*.patch`` unified diffs (:mod:`chaos.audit.patches`).

    Raises:
        MutantError: the directory has none, a file is invalid (the first one), or two files
            have one name (``x.yaml`` and ``x.patch``).
    """
    directory = Path(directory or CATALOGUE)
    if not directory.is_dir():
        raise MutantError(f"{directory}: not a directory of mutant files (*.yaml, *.patch)")
    try:
        files = sorted(directory.glob("*.yaml"))
        diffs = sorted(directory.glob("*.patch"))
    except OSError as exc:
        raise MutantError(f"{directory}: cannot list the mutant files: {exc}") from None
    if not files and not diffs:
        raise MutantError(f"no mutant files (*.yaml, *.patch) in {directory}")
    found = [load(f) for f in files] + patches.load_patches(diffs)
    names_seen: set[str] = set()
    for m in found:
        if m.name in names_seen:
            raise MutantError(f"{directory}: two mutants are named {m.name} ({m.name}.yaml and "
                              f"{m.name}.patch): rename one")
        names_seen.add(m.name)
    return sorted(found, key=lambda m: m.name)
