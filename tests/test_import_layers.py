"""The import structure of the toolkit (issue 13): the import-linter contracts in pyproject.toml
hold (layers of chaos/, no cycle, lazy imports included), and no module of chaos/ is over
~700 lines."""

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


def test_no_chaos_module_is_over_700_lines():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "chaos").rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 700}
    assert not long, long
