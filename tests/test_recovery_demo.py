"""docs/demo_recovery.py (the recovery guide walked with real processes) keeps working.

Runs sections (a)-(c) as the lead would (section (d), ~16 s of lock contention, is covered by
tests/test_lock_owner.py with a short busy timeout). The script checks its own expectations
and exits 1 naming any that failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_demo_walks_the_guide(tmp_path):
    out = tmp_path / "demo.txt"
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "demo_recovery.py"),
                           "--skip-contention", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr + proc.stdout[-3000:]
    text = out.read_text()
    assert "still hold a retired WAL generation" in text
    assert "Refusing `sessions optimize-storage`" in text
    assert '"operation": "inspect"' in text
