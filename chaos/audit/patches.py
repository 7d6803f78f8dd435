"""A unified diff as a mutant: ``chaos audit --patch FILE`` and ``*.patch`` in ``--mutants DIR``
(issue 27 item 8).

A developer who fixed a bug reverses the fix (``git show COMMIT -R -- hermes_state/``,
``git diff -R``) and asks which scenario would catch it coming back. The patch is applied to the
audit's own copy of ``hermes_state`` (never the checkout), exactly like a YAML rewrite, and
refused by name when it cannot be applied safely:

* not a unified diff, a binary diff, a rename, a mode change or a symbolic link;
* a path that is absolute, has a ``..`` component, or is not under ``hermes_state/`` (git's
  ``a/``/``b/`` prefixes are understood);
* a file of the package that is a symbolic link, or reached through one;
* a hunk whose lines are not in the file (it does not apply), or a result that does not compile.

A file the patch names that no longer exists (the code moved since the commit, e.g.
``hermes_state/holders.py`` -> ``hermes_state/processes/holders.py``) is located like a YAML
rewrite, by its content: the one ``*.py`` file of the package where every hunk of that file
applies (none or several: refused). Lines before the first ``diff``/``---`` are the patch's
description (``git show`` puts the commit there); lines ``rule:``, ``spec:`` and ``scenarios:``
in it fill the kill table's columns and name the scenarios to try first.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..files import inputs, names
from . import reach
from .plant import MutantError, Planted, StaleMutant, compile_check, copy_package

#: Largest patch file read (bytes).
MAX_PATCH_BYTES = 4 * 1024 * 1024
PACKAGE = "hermes_state"
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_PREFIXES = {"a", "b", "c", "i", "o", "w", "1", "2"}
_REFUSED_HEADERS = {
    "rename from": "a rename (not supported: apply it by hand, or diff the file under its new "
                   "name)",
    "copy from": "a copy (not supported)",
    "old mode": "a mode change (not supported)",
    "new mode": "a mode change (not supported)",
    "GIT binary patch": "a binary diff",
    "Binary files": "a binary diff",
}


class PatchError(MutantError):
    """A patch that cannot be used; ``str()`` names the patch, the file and the reason."""


@dataclass
class Hunk:
    old_start: int
    new_start: int
    lines: list[tuple[str, str]]   # (" " | "-" | "+", text with its newline)

    def old(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " -"]

    def new(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " +"]


@dataclass
class FilePatch:
    path: str                      # relative to the package's parent: hermes_state/...
    hunks: list[Hunk]
    created: bool = False
    deleted: bool = False


@dataclass
class PatchMutant:
    """A patch file used as a mutant (the interface of :class:`chaos.audit.catalogue.Mutant`)."""

    name: str
    file: str
    files: list[FilePatch]
    rule: str
    spec: str = "-"
    scenarios: list[str] = field(default_factory=list)
    unit_tests: list[str] = field(default_factory=list)
    description: str = ""

    @property
    def rewrite_name(self) -> str:
        return f"patch {Path(self.file).name} ({len(self.files)} file(s))"

    def locate(self, package: Path) -> dict[str, str]:
        """``{path in the patch: path relative to the package}`` for every file the patch
        changes (a moved file located by its content).

        Raises:
            PatchError: a file that is a link or reached through one, a hunk that does not
                apply, a moved file found nowhere or in several places.
        """
        out = {}
        for fp in self.files:
            rel = fp.path[len(PACKAGE) + 1:]
            _refuse_links(package, rel, self.name, fp.path)
            if fp.created:
                if os.path.lexists(package / rel):
                    raise PatchError(f"patch {self.name}: {fp.path}: the patch creates it, but "
                                     "it exists: it does not apply")
                out[fp.path] = rel
                continue
            if (package / rel).is_file():
                _apply_hunks(_read(package / rel, self.name, fp.path), fp, self.name)
                out[fp.path] = rel
                continue
            found = []
            for cand in sorted(package.rglob("*.py")):
                if "__pycache__" in cand.parts or cand.is_symlink():
                    continue
                try:
                    _apply_hunks(cand.read_text(encoding="utf-8"), fp, self.name)
                except PatchError:
                    continue
                found.append(str(cand.relative_to(package)))
            if len(found) != 1:
                raise StaleMutant(f"patch {self.name}: {fp.path} does not exist, and its hunks "
                                  f"apply to {len(found)} file(s) of {package} "
                                  f"({', '.join(found) or 'none'}): it does not apply",
                                  {f: 1 for f in found})
            out[fp.path] = found[0]
        return out

    def plant(self, package: Path, dest_root: Path) -> Planted:
        """Copy ``package`` to ``dest_root/hermes_state`` with the patch applied.

        Returns:
            The changed files of the copy and the statements to mark.
        Raises:
            PatchError / StaleMutant: see :meth:`locate`; a changed file does not compile.
        """
        where = self.locate(package)
        copy = copy_package(package, dest_root)
        files, sites = [], {}
        for fp in self.files:
            rel = where[fp.path]
            target = copy / rel
            _confined(copy, target, self.name)
            if fp.deleted:
                target.unlink()
                continue
            old = "" if fp.created else target.read_text(encoding="utf-8")
            new, regions = _apply_hunks(old, fp, self.name)
            _write(target, new)
            files.append(target)
            if target.suffix != ".py":
                continue
            compile_check(target, dest_root, f"patch {self.name}: {rel}")
            marks: list[dict] = []
            for start, end, indent in regions:
                try:
                    marks += reach.sites(new, start, end, indent)
                except reach.NoSites:
                    continue
            if marks:
                sites[f"{PACKAGE}/{rel}"] = [dict(t) for t in
                                             {tuple(sorted(m.items())) for m in marks}]
        return Planted(files, sites)


def load_patch(path: Path) -> PatchMutant:
    """Read and check one patch file (see the module doc for what is refused).

    Raises:
        PatchError: names the patch file and the reason.
    """
    path = Path(path)
    try:
        name = names.check(path.stem, "patch")
    except names.BadName as exc:
        raise PatchError(f"{names.shown(str(path), 200)}: {exc}") from None
    try:
        text = inputs.read_text(path, MAX_PATCH_BYTES)
    except inputs.InputError as exc:
        raise PatchError(f"cannot read the patch: {exc}") from None
    preamble, files = parse(text, str(path))
    meta = _meta(preamble)
    subject = next((ln.strip() for ln in preamble if ln.startswith("    ") and ln.strip()), "")
    rule = meta.get("rule") or subject or f"the change of {path.name} is caught"
    scenarios = [s.strip().removesuffix(".yaml") for s in meta.get("scenarios", "").split(",")
                 if s.strip()]
    return PatchMutant(name, str(path), files, " ".join(rule.split())[:300],
                       meta.get("spec", "-"), scenarios,
                       description=f"patch {path.name}: {', '.join(f.path for f in files)}")


def parse(text: str, where: str) -> tuple[list[str], list[FilePatch]]:
    """``(preamble lines, file patches)`` of a unified diff.

    Raises:
        PatchError: not a unified diff, or a refused header/path (module doc).
    """
    lines = text.splitlines(keepends=True)
    i, preamble, files = 0, [], []
    while i < len(lines) and not (lines[i].startswith("diff ") or lines[i].startswith("--- ")):
        preamble.append(lines[i].rstrip("\n"))
        i += 1
    header: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff "):
            header = [line]
            i += 1
            continue
        for key, why in _REFUSED_HEADERS.items():
            if line.startswith(key):
                raise PatchError(f"patch {where}: {why} ({line.strip()[:120]})")
        if line.startswith(("new file mode", "deleted file mode")) and "120000" in line:
            raise PatchError(f"patch {where}: a symbolic link ({line.strip()}): refused")
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_p, new_p = _path(line[4:]), _path(lines[i + 1][4:])
            i += 2
            hunks = []
            while i < len(lines) and lines[i].startswith("@@"):
                hunk, i = _hunk(lines, i, where)
                hunks.append(hunk)
            created, deleted = old_p is None, new_p is None
            shown = new_p if new_p is not None else old_p
            if shown is None:
                raise PatchError(f"patch {where}: a file diffed from /dev/null to /dev/null")
            files.append(FilePatch(_checked(shown, where), hunks, created, deleted))
            if old_p is not None and new_p is not None and _checked(old_p, where) != files[-1].path:
                raise PatchError(f"patch {where}: {old_p} -> {new_p}: a rename (not supported)")
            header = []
            continue
        header.append(line)
        i += 1
    if not files:
        raise PatchError(f"patch {where}: not a unified diff (no '--- '/'+++ ' file header)")
    return preamble, files


def _path(raw: str) -> str | None:
    raw = raw.rstrip("\n").split("\t")[0].strip()
    if raw.startswith('"') and raw.endswith('"'):
        raw = raw[1:-1]
    return None if raw == "/dev/null" else raw


def _checked(raw: str, where: str) -> str:
    """The path relative to the repository (``hermes_state/...``), or :class:`PatchError`."""
    if "\0" in raw or raw.startswith("/"):
        raise PatchError(f"patch {where}: {raw!r}: an absolute path: refused")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PatchError(f"patch {where}: {raw!r}: a path with '..': refused")
    if parts and parts[0] != PACKAGE and parts[0] in _GIT_PREFIXES:
        parts = parts[1:]
    if len(parts) < 2 or parts[0] != PACKAGE:
        raise PatchError(f"patch {where}: {raw!r}: outside {PACKAGE}/ (a patch may change only "
                         f"the store; limit it with `git diff ... -- {PACKAGE}/`): refused")
    return "/".join(parts)


def _hunk(lines: list[str], i: int, where: str) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
    if not m:
        raise PatchError(f"patch {where}: line {i + 1}: a bad hunk header {lines[i].strip()!r}")
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    hunk = Hunk(int(m.group(1)), int(m.group(3)), [])
    i += 1
    seen_old = seen_new = 0
    while i < len(lines) and (seen_old < old_len or seen_new < new_len):
        line = lines[i]
        tag = line[:1]
        if line.startswith("\\"):
            i += 1
            continue
        if tag not in (" ", "-", "+") and line.strip() == "":
            tag, line = " ", " " + line  # an editor stripped the context line's space
        if tag not in (" ", "-", "+"):
            raise PatchError(f"patch {where}: line {i + 1}: the hunk ends early (expected "
                             f"{old_len} old and {new_len} new lines)")
        body = line[1:]
        if i + 1 < len(lines) and lines[i + 1].startswith("\\"):
            body = body.rstrip("\n")  # "\ No newline at end of file"
        hunk.lines.append((tag, body))
        seen_old += tag in " -"
        seen_new += tag in " +"
        i += 1
    return hunk, i


def _apply_hunks(text: str, fp: FilePatch, name: str) -> tuple[str, list[tuple[int, int, int]]]:
    """``text`` with every hunk of ``fp`` applied (each found at its line, or nearest to it), and
    the changed regions of the result (``reach`` regions: start, end, indent).

    Raises:
        PatchError: a hunk whose old lines are not in ``text``.
    """
    lines = text.splitlines(keepends=True)
    offset = 0
    spans: list[tuple[int, int, int, int]] = []   # (first new line index, count, indent, at)
    for k, hunk in enumerate(fp.hunks, 1):
        old = hunk.old()
        want = max(0, hunk.old_start - 1 + offset) if old else hunk.old_start + offset
        at = _find(lines, old, want)
        if at is None:
            raise PatchError(f"patch {name}: {fp.path}: hunk {k} (at line {hunk.old_start}) "
                             "does not apply: its lines are not in the file")
        lines[at:at + len(old)] = hunk.new()
        pos = at
        run_start, run_plus, run_indent = None, 0, 0
        for tag, body in hunk.lines + [(" ", "")]:
            if tag in "-+" and run_start is None:
                run_start, run_plus = pos, 0
                run_indent = len(body) - len(body.lstrip(" \t"))
            if tag == "+":
                run_plus += 1
            if tag == " " and run_start is not None:
                spans.append((run_start, run_plus, run_indent, 0))
                run_start = None
            if tag in " +":
                pos += 1
        offset += len(hunk.new()) - len(old)
    new = "".join(lines)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    regions = []
    for first, count, indent, _ in spans:
        a = starts[min(first, len(lines))]
        b = starts[min(first + count, len(lines))]
        regions.append((a, b, indent))
    return new, regions


def _find(lines: list[str], old: list[str], want: int) -> int | None:
    if not old:
        return min(want, len(lines))
    n = len(old)
    norm = [ln.rstrip("\n") for ln in old]
    best = None
    for at in range(0, len(lines) - n + 1):
        if [ln.rstrip("\n") for ln in lines[at:at + n]] == norm:
            if best is None or abs(at - want) < abs(best - want):
                best = at
    return best


def _meta(preamble: list[str]) -> dict[str, str]:
    out = {}
    for line in preamble:
        m = re.match(r"\s*(rule|spec|scenarios):\s*(.+)$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2).strip()
    return out


def _refuse_links(package: Path, rel: str, name: str, shown: str) -> None:
    """Refuse a path of the package that is, or passes through, a symbolic link."""
    here = package
    for part in Path(rel).parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise PatchError(f"patch {name}: {shown}: {here} is a symbolic link: refused (a "
                             "patch is applied only to the package's own files)")


def _confined(copy: Path, target: Path, name: str) -> None:
    """``target`` must lie inside ``copy`` once every link is resolved."""
    real = Path(os.path.realpath(target.parent))
    if not real.is_relative_to(os.path.realpath(copy)):
        raise PatchError(f"patch {name}: {target} lies outside the audit's copy {copy}: refused")


def _read(path: Path, name: str, shown: str) -> str:
    try:
        return inputs.read_text(path, MAX_PATCH_BYTES * 4)
    except inputs.InputError as exc:
        raise PatchError(f"patch {name}: {shown}: {exc.reason}") from None


def _write(target: Path, text: str) -> None:
    """Write ``target`` in the copy, never through a link planted at its name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".audit-partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, target)


def load_patches(paths: list[Path]) -> list[PatchMutant]:
    """:func:`load_patch` of each (names must differ). Raises :class:`PatchError`."""
    out = [load_patch(p) for p in paths]
    seen: set[str] = set()
    for m in out:
        if m.name in seen:
            raise PatchError(f"two patches are named {m.name}: rename one")
        seen.add(m.name)
    return out
