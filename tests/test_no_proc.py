"""Linux without /proc mounted (a bare container, a chroot): the store still opens and writes,
and every answer that needs the process list says it cannot be had instead of passing or
crashing (was: ``IndexError`` from psutil at every open). A real mount namespace whose /proc
is unmounted; skipped where one cannot be made (not root, no ``unshare``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    from hermes_state import SessionDB
    home = sys.argv[1]
    assert not os.path.exists("/proc/self"), "/proc is still mounted"
    with SessionDB(os.path.join(home, "state.db")) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "written without /proc")
        count = db.message_count()
    out = {"count": count}
    for name, args in (("doctor", ["doctor"]), ("optimize", ["sessions", "optimize"])):
        r = subprocess.run([sys.executable, "-m", "hermes_state", "--home", home] + args,
                           capture_output=True, text=True, timeout=120)
        out[name] = [r.returncode, r.stdout + r.stderr]
    print(json.dumps(out))
""")


def _unshare() -> str:
    tool = shutil.which("unshare")
    if tool is None or os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("needs root and unshare(1) on Linux to unmount /proc in a mount namespace")
    probe = subprocess.run([tool, "-m", "--propagation", "private", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.strip()}")
    return tool


def test_without_proc_the_store_writes_and_nothing_claims_the_store_is_quiet(tmp_path):
    tool = _unshare()
    script = tmp_path / "noproc.py"
    script.write_text(SCRIPT)
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([tool, "-m", "--propagation", "private", "sh", "-c",
                        f'umount -l /proc && exec "{sys.executable}" "{script}" "{home}"'],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    import json
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["count"] == 1
    code, text = out["doctor"]
    assert code == 0 and "no other process holds the store" not in text, text
    assert "[warn] cannot prove the store is quiet: the processes cannot be listed here " \
           "(psutil found no process: /proc is not mounted)" in text
    code, text = out["optimize"]  # maintenance refuses: it cannot prove nobody writes
    assert code != 0 and "Refusing `sessions optimize`: cannot prove" in text, text
    assert "mount /proc to see them" in text and "Traceback" not in text
