"""The import structure (issue 13): the import-linter contracts in pyproject.toml hold (the floors
of hermes_state/, the layers of chaos/, the store never importing the toolkit, the toolkit on
the store's public face; lazy imports included), no import cycle anywhere (a cycle inside one
floor included), and no module is over ~700 lines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 700


def test_import_linter_contracts_are_kept():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed: pip install -e '.[test]'")
    proc = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _cycles(package: str) -> list[list[str]]:
    """Every strongly connected set of modules of ``package`` (lazy imports count, imports made
    only for type checkers do not)."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter: '.[test]'")
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    mods = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(mods)) for m in mods}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in mods:
        if m not in index:
            visit(m)
    return found


@pytest.mark.parametrize("package", ["hermes_state", "chaos"])
def test_no_import_cycle(package):
    assert _cycles(package) == []


@pytest.mark.parametrize("package", ["hermes_state", "chaos"])
def test_no_module_is_over_700_lines(package):
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / package).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def test_the_layout_guide_names_every_store_module():
    """docs/LAYOUT.md: one row per module of hermes_state/, and no row for a module that is gone."""
    import re

    text = (ROOT / "docs" / "LAYOUT.md").read_text(encoding="utf-8")
    layout = text[text.index("## The store"):text.index("## The toolkit")]
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*\.py)`", layout))
    modules = {str(p.relative_to(ROOT / "hermes_state")) for p in (ROOT / "hermes_state").rglob("*.py")
               if p.name != "__init__.py"}
    assert modules - named == set(), "modules missing from docs/LAYOUT.md"
    assert named - modules == set(), "docs/LAYOUT.md rows for modules that do not exist"
