"""docs/demo_recovery.py (the recovery guide walked with real processes) keeps working.

Runs sections (a)-(c) as the lead would (section (d), ~16 s of lock contention, is covered by
tests/test_lock_owner.py with a short busy timeout). The script checks its own expectations
and exits 1 naming any that failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_demo_walks_the_guide(tmp_path):
    """Without the venv's ``bin/`` on ``PATH`` (as ``.venv/bin/pytest`` runs from a CI or an
    IDE): the demo's children must be this interpreter, not a ``python`` found on ``PATH``
    (issue 27 item 13: they were, and died on ``No module named 'psutil'``)."""
    out = tmp_path / "demo.txt"
    env = {**os.environ, "PATH": os.pathsep.join(["/usr/bin", "/bin"])}
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "demo_recovery.py"),
                           "--skip-contention", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    text = out.read_text()
    assert "still hold a retired WAL generation" in text
    assert "Refusing `sessions optimize-storage`" in text
    assert '"operation": "inspect"' in text
