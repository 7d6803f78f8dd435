"""``chaos audit --patch FILE`` and ``*.patch`` mutants (issue 27 item 8): a unified diff applied
to the audit's own copy of the store, never the checkout; refused by name when it cannot be
applied safely; a real fix of this repository's history, reversed, located in the file its code
moved to."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hermes_state
from chaos.audit import catalogue, patches

REPO = Path(__file__).resolve().parent.parent
PACKAGE = Path(hermes_state.__file__).resolve().parent
#: ``git show a7c3b33 -R -- hermes_state/``: the holder scan's confirm pass (issue 11) reverted;
#: the commit changed ``hermes_state/holders.py``, since moved to ``processes/holders.py`` (its
#: hunks refreshed to today's code, which passes ``locked_only`` to every scan).
REVERTED_FIX = REPO / "tests" / "fixtures" / "holder_scan_confirm_reverted.patch"

CADENCE_FULL = """\
rule: the periodic checkpoint runs PASSIVE
spec: §4
scenarios: tiny
--- a/hermes_state/store/connection.py
+++ b/hermes_state/store/connection.py
@@ -1,3 +1,3 @@
             if self._writes % _CHECKPOINT_EVERY_N_WRITES == 0:
-                self.checkpoint("PASSIVE", trigger="cadence")
+                self.checkpoint("FULL", trigger="cadence")
             return result
"""


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def _patch(tmp_path: Path, text: str, name: str = "fix.patch") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_real_fix_reverted_is_located_where_its_code_moved_and_marked(tmp_path):
    before = _tree_digest(PACKAGE)
    m = patches.load_patch(REVERTED_FIX)
    assert m.name == "holder_scan_confirm_reverted"
    assert m.rule.startswith("holders.scan_settled: a holder seen with a retired sidecar")
    assert [f.path for f in m.files] == ["hermes_state/holders.py"]
    assert m.locate(PACKAGE) == {"hermes_state/holders.py": "processes/holders.py"}
    planted = m.plant(PACKAGE, tmp_path / "copy")
    target = tmp_path / "copy" / "hermes_state" / "processes" / "holders.py"
    assert planted.files == [target]
    text = target.read_text()
    assert "confirm = scan(" not in text
    assert "if not retired or time.monotonic() >= deadline:" in text
    lines = text.splitlines()
    marked = [lines[s["line"] - 1].strip() for s in planted.sites["hermes_state/processes/holders.py"]]
    assert "if not retired or time.monotonic() >= deadline:" in marked
    assert "if not retired <= closing_pids(db_path):" in marked
    assert _tree_digest(PACKAGE) == before  # the checkout is never touched


@pytest.mark.parametrize("text, why", [
    ("not a diff at all\n", "not a unified diff"),
    ("--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n", "outside hermes_state/"),
    ("--- a/hermes_state/../setup.py\n+++ b/hermes_state/../setup.py\n@@ -1 +1 @@\n-a\n+b\n",
     "a path with '..'"),
    ("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "an absolute path"),
    ("diff --git a/hermes_state/x.py b/hermes_state/x.py\nnew file mode 120000\n--- /dev/null\n"
     "+++ b/hermes_state/x.py\n@@ -0,0 +1 @@\n+/etc/passwd\n", "a symbolic link"),
    ("diff --git a/hermes_state/x.bin b/hermes_state/x.bin\nGIT binary patch\nliteral 0\n",
     "a binary diff"),
    ("diff --git a/hermes_state/a.py b/hermes_state/b.py\nrename from hermes_state/a.py\n"
     "rename to hermes_state/b.py\n", "a rename"),
])
def test_bad_patches_are_refused_by_name(tmp_path, text, why):
    with pytest.raises(patches.PatchError) as err:
        patches.load_patch(_patch(tmp_path, text))
    assert why in str(err.value) and "fix.patch" in str(err.value)


def test_a_patch_that_does_not_apply_is_refused_naming_the_hunk(tmp_path):
    text = ("--- a/hermes_state/store/connection.py\n+++ b/hermes_state/store/connection.py\n"
            "@@ -40,2 +40,2 @@\n-this line is in no file\n+something else\n")
    m = patches.load_patch(_patch(tmp_path, text))
    with pytest.raises(patches.PatchError, match="hunk 1 .* does not apply"):
        m.plant(PACKAGE, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
    gone = text.replace("store/connection.py", "store/gone.py")
    with pytest.raises(catalogue.StaleMutant, match="does not exist, and its hunks apply to 0"):
        patches.load_patch(_patch(tmp_path, gone, "gone.patch")).plant(PACKAGE, tmp_path / "c2")


def test_a_patch_whose_result_does_not_compile_is_refused(tmp_path):
    text = CADENCE_FULL.replace('+                self.checkpoint("FULL", trigger="cadence")',
                                '+                self.checkpoint("FULL", trigger=')
    with pytest.raises(catalogue.MutantError, match="does not compile"):
        patches.load_patch(_patch(tmp_path, text)).plant(PACKAGE, tmp_path / "copy")


def test_a_package_file_that_is_a_link_is_refused(tmp_path):
    pkg = tmp_path / "pkg" / "hermes_state"
    (pkg / "store").mkdir(parents=True)
    outside = tmp_path / "outside.py"
    outside.write_text((PACKAGE / "store" / "connection.py").read_text())
    (pkg / "store" / "connection.py").symlink_to(outside)
    m = patches.load_patch(_patch(tmp_path, CADENCE_FULL))
    with pytest.raises(patches.PatchError, match="is a symbolic link: refused"):
        m.plant(pkg, tmp_path / "copy")
    assert 'checkpoint("FULL"' not in outside.read_text()


def test_patches_sit_beside_the_yaml_rewrites_in_a_mutant_directory(tmp_path):
    d = tmp_path / "mutants"
    d.mkdir()
    _patch(d, CADENCE_FULL, "cadence_full.patch")
    (d / "other.yaml").write_text((REPO / "chaos" / "audit" / "mutants" /
                                   "synchronous_off.yaml").read_text())
    found = catalogue.load_dir(d)
    assert [m.name for m in found] == ["cadence_full", "other"]
    assert found[0].spec == "§4" and found[0].scenarios == ["tiny"]
    assert found[0].rule == "the periodic checkpoint runs PASSIVE"
    _patch(d, CADENCE_FULL, "other.patch")
    with pytest.raises(catalogue.MutantError, match="two mutants are named other"):
        catalogue.load_dir(d)


def test_a_link_or_fifo_patch_file_is_refused(tmp_path):
    real = _patch(tmp_path, CADENCE_FULL, "real.patch")
    (tmp_path / "link.patch").symlink_to(real)
    with pytest.raises(patches.PatchError, match="symbolic link"):
        patches.load_patch(tmp_path / "link.patch")
    os.mkfifo(tmp_path / "fifo.patch")
    with pytest.raises(patches.PatchError, match="FIFO"):
        patches.load_patch(tmp_path / "fifo.patch")


@pytest.mark.slow
def test_audit_patch_says_which_scenario_kills_it_or_that_none_does(tmp_path):
    """The command end to end with the tiny scenario: a reversed fix the scenario catches, and
    one it cannot (the reverted confirm pass of a7c3b33: no holder ever closes there)."""
    from tests.test_audit import TINY_SCENARIO

    scen = tmp_path / "scen"
    scen.mkdir()
    (scen / "tiny.yaml").write_text(TINY_SCENARIO)
    killed = _patch(tmp_path, CADENCE_FULL, "cadence_full.patch")
    before = _tree_digest(PACKAGE)
    proc = subprocess.run(
        [sys.executable, "-m", "chaos", "audit", "--patch", str(killed), "--patch",
         str(REVERTED_FIX), "--scenarios", str(scen / "*.yaml"), "--no-matrix", "--confirm",
         "1", "--jobs", "2", "--out", str(tmp_path / "out"), "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = {m["name"]: m for m in out["mutants"]}
    assert rows["cadence_full"]["status"] == "KILLED"
    assert rows["cadence_full"]["killed_by"] == "tiny" and rows["cadence_full"]["kills"] == "2 of 2"
    assert rows["holder_scan_confirm_reverted"]["status"] == "SURVIVED"
    assert "patch cadence_full: KILLED by tiny" in proc.stderr
    assert ("patch holder_scan_confirm_reverted: no scenario kills it (1 scenario(s) ran)"
            in " ".join(proc.stderr.split()))
    assert _tree_digest(PACKAGE) == before
