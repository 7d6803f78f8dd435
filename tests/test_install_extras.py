"""The store installs and runs on psutil alone; the toolkit's dependencies are the [chaos] extra
(issue 13 item 2).

The import checks run in a fresh interpreter in which the toolkit's dependencies (and the
toolkit itself) cannot be imported at all, so a store module that reached for one would fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
TOOLKIT_ONLY = ("yaml", "rich", "jsonschema", "pydantic", "multiprocess", "mfusepy", "hypothesis",
                "chaos")

_BLOCK = (
    "import sys\n"
    f"for name in {TOOLKIT_ONLY!r}:\n"
    "    sys.modules[name] = None  # 'import name' now raises ImportError\n"
)


def _run(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCK + code, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_importing_the_store_loads_no_toolkit_dependency(tmp_path):
    code = (
        "import hermes_state, hermes_state.cli, hermes_state.events, hermes_state.failpoints\n"
        "import pkgutil, importlib\n"
        "for m in pkgutil.walk_packages(hermes_state.__path__, 'hermes_state.'):\n"
        "    if not m.name.startswith(('hermes_state.testing', 'hermes_state.__main__')):\n"
        "        importlib.import_module(m.name)\n"
        f"loaded = sorted(n for n in {TOOLKIT_ONLY!r} if sys.modules.get(n) is not None)\n"
        "print('loaded:', loaded)\n"
    )
    proc = _run(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded: []" in proc.stdout


def test_the_cli_runs_without_the_toolkit_dependencies(tmp_path):
    home = tmp_path / "home"
    code = (
        "from hermes_state import SessionDB\n"
        "from hermes_state.cli import main\n"
        "db = SessionDB(sys.argv[1] + '/state.db')\n"
        "db.create_session('s1', source='cli')\n"
        "db.append_message('s1', 'user', 'hello from a psutil-only install')\n"
        "db.close()\n"
        "rc_doctor = main(['--home', sys.argv[1], 'doctor'])\n"
        "rc_search = main(['--home', sys.argv[1], 'sessions', 'search', 'psutil'])\n"
        "print('rc', rc_doctor, rc_search)\n"
    )
    home.mkdir()
    proc = _run(code, str(home), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rc 0 0" in proc.stdout, proc.stdout[-3000:]
    assert "user: hello from a >>>psutil<<<-only install" in proc.stdout


def test_progress_lines_are_off_without_rich(tmp_path):
    """A store-only install has no rich: ``--progress`` runs the command without the line."""
    code = (
        "import argparse\n"
        "from hermes_state.cli.progress import progress_display, wanted\n"
        "args = argparse.Namespace(progress=True, json=False)\n"
        "with progress_display(args, 'export') as shown:\n"
        "    shown('rows', 1, 2)\n"
        "print('wanted', wanted(args), shown.enabled)\n"
    )
    proc = _run(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wanted False False" in proc.stdout


def test_extras_split_store_and_toolkit_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["psutil"]
    extras = project["optional-dependencies"]
    chaos = {d.split(">")[0].lower() for d in extras["chaos"]}
    assert {"pyyaml", "jsonschema", "rich"} <= chaos
    # README: pip install -e ".[test]" must still pull everything the suite and the toolkit need
    assert "hermes-state[chaos]" in extras["test"]
