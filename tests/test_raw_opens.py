"""ONE way to open a path the user or another process controls (issue 22 item 9).

Walks the store's code (``hermes_state/``, not ``testing/``) and finds every call that opens a
path: ``open()``, ``os.open``, ``io.open``, ``Path.open/read_text/read_bytes/write_text/
write_bytes``, ``sqlite3.connect``, ``shutil.copy*``. Each must be in the two modules that
are the one way (:mod:`hermes_state.files.atomic`: ``O_NONBLOCK | O_NOFOLLOW`` + ``fstat``;
:mod:`hermes_state.files.store_files`: the ``lstat`` pre-flight before SQLite opens a store
path), or in :data:`ALLOWED` with the reason it is safe. A new raw open fails this test; so
does an entry of :data:`ALLOWED` that no longer matches anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "hermes_state"
THE_ONE_WAY = {"files/atomic.py", "files/store_files.py"}
PATH_ATTRS = {"read_text", "read_bytes", "write_text", "write_bytes"}

#: (module, enclosing function, call) -> why this open is safe.
ALLOWED = {
    ("cli/commands.py", "main", "os.open"): "os.devnull after a broken pipe",
    ("cli/export.py", "_open_fifo", "os.open"):
        "a FIFO export target opened O_WRONLY|O_NONBLOCK|O_NOFOLLOW (ENXIO without a reader)",
    ("cli/export.py", "cmd_export", "open"): "wraps the descriptor _open_fifo returned",
    ("failpoints.py", "_read_spec_file", "os.open"):
        "O_NONBLOCK|O_NOFOLLOW + fstat; failpoints sits below files/ and cannot import it",
    ("operator/recover_scan.py", "open_copy", "sqlite3.connect"):
        "recover's private copy in its own 0700 directory",
    ("operator/recover_scan.py", "_quick_check", "sqlite3.connect"):
        "recover's private copy in its own 0700 directory",
    ("operator/salvage.py", "_read_capture", "sqlite3.connect"):
        "salvage's private copy of the capture in its own 0700 directory",
    ("operator/schema_repair.py", "_health", "sqlite3.connect"): "the repair's private copy",
    ("operator/schema_repair.py", "_rebuild_fts", "sqlite3.connect"): "the repair's private copy",
    ("operator/schema_repair.py", "_edit_schema", "sqlite3.connect"): "the repair's private copy",
    ("operator/schema_repair.py", "_drop_fts_rebuild", "sqlite3.connect"):
        "the repair's private copy",
    ("operator/schema_repair.py", "_fold_wal", "sqlite3.connect"): "the repair's private copy",
    ("operator/schema_repair.py", "repair_state_db_schema", "shutil.copyfile"):
        "copies the private copy to an attempt file in the same private directory",
    ("operator/snapshot_images.py", "fsync_file", "os.open"):
        "O_NOFOLLOW|O_NONBLOCK on the image this process just wrote",
    ("operator/snapshot_images.py", "backup_image", "sqlite3.connect"):
        "the source after refuse_special_store_files; the destination a new file in the "
        "backup's flock-ed .partial directory",
    ("operator/snapshots.py", "_restore_locked", "sqlite3.connect"):
        "the live store after refuse_special_store_files, under the write lock, holders refused",
    ("operator/bundle.py", "_mount_of", ".read_text"): "/proc/mounts",
    ("operator/bundle_contents.py", "read_contents", "sqlite3.connect"):
        "':memory:' holding an image read through files/; the immutable=1 fallback opens only "
        "state.db, whose header that read already found to be a regular SQLite file",
    ("operator/bundle_processes.py", "proc_state", "open"): "/proc/<pid>/stat",
    ("processes/checkpoint_lock.py", "_open", "os.open"):
        "the checkpoint lock: lstat, then O_NONBLOCK|O_NOFOLLOW|O_NOCTTY and fstat regular",
    ("processes/lock_table.py", "read", "open"): "/proc/locks",
    ("processes/lock_table.py", "_probe_keying", "os.open"):
        "O_RDONLY|O_NOFOLLOW|O_NONBLOCK of the lock file, then S_ISREG and the device checked; "
        "nothing created, nothing written",
    ("processes/checkpoint_lock.py", "probe", "os.open"): "O_TMPFILE: an unnamed file",
    ("processes/capture.py", "_open_source", "os.open"):
        "/proc/<pid>/fd/<n> of the retired WAL another process holds, O_NONBLOCK, then fstat "
        "checked to be the very inode the capture copies (never a path the user controls)",
    ("processes/capture.py", "process_start", "open"): "/proc/<pid>/stat",
    ("processes/checkpoint_lock.py", "_adopt_stale", "os.open"):
        "/proc/<pid>/fd/<n> of an old lock file another process holds locked, O_NONBLOCK, "
        "then fstat checked to be that inode",
    ("processes/lock_files.py", "process_state", "open"): "/proc/<pid>/stat",
    ("processes/lock_files.py", "stale_locked", ".read_text"): "/proc/locks",
    ("processes/lock_files.py", "open_lock_file", "os.open"):
        "a lock file: O_NOFOLLOW|O_NONBLOCK|O_NOCTTY, then fstat regular (never written)",
    ("processes/holders.py", "_has_cap_sys_ptrace", "open"): "/proc/self/status",
    ("processes/holders.py", "read_locks", ".read_text"): "/proc/locks",
    ("schema/tables.py", "_declared_columns_cached", "sqlite3.connect"): ":memory:",
    ("store/migrated_copy.py", "_keep_identity", "sqlite3.connect"):
        "the read-only open's private copy in its own 0700 temporary directory",
    ("store/migrated_copy.py", "open_copy", "sqlite3.connect"):
        "the read-only open's private copy in its own 0700 temporary directory",
    ("store/opening.py", "_connect_ro", "sqlite3.connect"):
        "the store after refuse_special_store_files (open_connection)",
    ("store/opening.py", "_connect_rw", "sqlite3.connect"):
        "the store after refuse_special_store_files (open_connection)",
}


def raw_opens() -> list[tuple[str, str, str, int]]:
    """``(module, function, call, line)`` of every path-opening call outside the one way."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("testing/") or rel in THE_ONE_WAY:
            continue
        stack: list[str] = []

        class Visitor(ast.NodeVisitor):
            def visit_FunctionDef(self, node):
                stack.append(node.name)
                self.generic_visit(node)
                stack.pop()

            visit_AsyncFunctionDef = visit_FunctionDef

            def visit_Call(self, node):
                f, name = node.func, None
                if isinstance(f, ast.Name) and f.id == "open":
                    name = "open"
                elif isinstance(f, ast.Attribute):
                    base = f.value.id if isinstance(f.value, ast.Name) else None
                    if base in ("os", "io") and f.attr == "open":
                        name = f"{base}.open"
                    elif base == "sqlite3" and f.attr == "connect":
                        name = "sqlite3.connect"
                    elif base == "shutil" and f.attr.startswith("copy"):
                        name = f"shutil.{f.attr}"
                    elif f.attr in PATH_ATTRS or (f.attr == "open" and base not in ("os", "io")):
                        name = f".{f.attr}"
                if name:
                    found.append((rel, stack[-1] if stack else "<module>", name, node.lineno))
                self.generic_visit(node)

        Visitor().visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_every_open_of_a_path_goes_the_one_way_or_says_why_it_is_safe():
    found = raw_opens()
    unexplained = [f"{m}:{line} {fn}() {call}" for m, fn, call, line in found
                   if (m, fn, call) not in ALLOWED]
    assert unexplained == [], (
        "open these through hermes_state.files.atomic (open_regular, read_regular, "
        "copy_regular, open_lock, open_append, create_file) or files.store_files "
        "(refuse_special_store_files, connect_ro); or add the call to ALLOWED with the reason "
        "it is safe:\n" + "\n".join(unexplained))
    stale = sorted(set(ALLOWED) - {(m, fn, call) for m, fn, call, _ in found})
    assert stale == [], f"ALLOWED entries that match nothing any more: {stale}"


def test_the_walker_finds_what_it_looks_for(tmp_path):
    """A walker that finds nothing would pass anything: it must see the known opens."""
    found = {(m, fn, call) for m, fn, call, _ in raw_opens()}
    assert ("store/opening.py", "_connect_rw", "sqlite3.connect") in found
    assert ("processes/holders.py", "read_locks", ".read_text") in found
    assert len(found) >= 20
