"""The import structure (issue 13): the import-linter contracts in pyproject.toml hold (the floors
of hermes_state/, the layers of chaos/, the store never importing the toolkit, the toolkit on
the store's public face; lazy imports included), no import cycle anywhere (a cycle inside one
floor included) are in tests/test_structure.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_are_kept():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed: pip install -e '.[test]'")
    proc = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


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
