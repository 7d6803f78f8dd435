"""The import structure (issue 13): the import-linter contracts in pyproject.toml hold (the floors
of hermes_state/, the layers of chaos/, the store never importing the toolkit, the toolkit on
the store's public face; lazy imports included), no import cycle anywhere (a cycle inside one
floor included) are in tests/test_structure.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


#: import-linter's command, run by this interpreter: never looked up on PATH (issue 27 item 13:
#: run as ``.venv/bin/pytest`` without the venv's bin/ on PATH, the check was silently skipped).
#: import-linter is a test dependency (``.[test]``): missing, the test fails, it never skips.
LINT_IMPORTS = ("import sys; from importlinter.cli import lint_imports_command; "
                "sys.argv[0] = 'lint-imports'; sys.exit(lint_imports_command())")


def test_import_linter_contracts_are_kept():
    proc = subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--config",
                           str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": os.pathsep.join(["/usr/bin", "/bin"])})
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


def test_the_contract_check_runs_without_the_venv_on_path(tmp_path):
    """``.venv/bin/pytest`` from a CI or an IDE, the venv's ``bin/`` not on ``PATH``: the check
    above must run and pass, not skip (issue 27 item 13: it was skipped for a missing
    ``lint-imports`` on ``PATH``, although import-linter is a test dependency)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PATH"] = os.pathsep.join(["/usr/bin", "/bin"])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q",
                           "-p", "no:xdist", "--basetemp", str(tmp_path / "bt"),
                           f"{__file__}::test_import_linter_contracts_are_kept"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]
