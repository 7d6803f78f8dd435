"""Make this process's SQLite lack FTS5, as a build without it does (issue 23.3).

:func:`install` registers an SQLite auto-extension (``sqlite3_auto_extension``, through ctypes on
the library ``_sqlite3`` is linked with) that calls ``sqlite3_drop_modules`` on every connection
the process opens afterwards, keeping every module except ``fts5`` and ``fts5vocab``. Those
connections really lack the module: ``CREATE VIRTUAL TABLE ... USING fts5`` and every statement
touching an existing FTS5 table (a trigger feeding one included) fail with ``no such module:
fts5``, exactly as on an SQLite compiled without ``SQLITE_ENABLE_FTS5``. Nothing in Python is
patched. Irreversible for the process: use it in a child process (tests, benchmarks).
"""

from __future__ import annotations

import ctypes
import sqlite3

DROPPED = ("fts5", "fts5vocab")
_installed: list = []  # keeps the callback and the name array alive


def install() -> None:
    """Every SQLite connection opened from now on in this process lacks FTS5.

    Raises:
        OSError: the SQLite library has no ``sqlite3_drop_modules`` (older than 3.30) or the
            auto-extension could not be registered.
    """
    if _installed:
        return
    import _sqlite3

    lib = ctypes.CDLL(_sqlite3.__file__)
    probe = sqlite3.connect(":memory:")
    try:
        names = [r[0] for r in probe.execute("SELECT name FROM pragma_module_list")]
    finally:
        probe.close()
    keep = [n.encode() for n in names if n not in DROPPED]
    keep_arr = (ctypes.c_char_p * (len(keep) + 1))(*keep, None)
    try:
        drop = lib.sqlite3_drop_modules
    except AttributeError as exc:
        raise OSError("this SQLite has no sqlite3_drop_modules (3.30+ needed)") from exc
    drop.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    drop.restype = ctypes.c_int
    entry_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_void_p)

    @entry_type
    def _entry(db, errmsg, api):  # noqa: ARG001 - the auto-extension signature
        return drop(db, keep_arr)

    lib.sqlite3_auto_extension.argtypes = [ctypes.c_void_p]
    rc = lib.sqlite3_auto_extension(ctypes.cast(_entry, ctypes.c_void_p))
    if rc != 0:
        raise OSError(f"sqlite3_auto_extension failed with code {rc}")
    _installed.extend([_entry, keep_arr, lib])


def lacks_fts5() -> bool:
    """True when a new connection of this process cannot create an FTS5 table."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return False
    except sqlite3.OperationalError as exc:
        return "no such module" in str(exc)
    finally:
        conn.close()
