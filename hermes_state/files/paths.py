"""Where the store lives and the names of the files beside it (SPEC §1).

Nothing here touches the disk except :func:`ensure_home` and :func:`access_problem` (``stat``
and ``access`` only, never an open); paths are resolved when called, never at import, so tests
can point ``HERMES_HOME`` anywhere.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from ..errors import StorePermissionError
from .names import check_name, is_portable

DB_NAME = "state.db"
SIDECAR_SUFFIXES = ("-wal", "-shm")


def hermes_home(home: str | os.PathLike | None = None, profile: str | None = None) -> Path:
    """Return the root directory of one profile.

    Args:
        home: explicit root; else ``$HERMES_HOME``; else ``~/.hermes``.
        profile: a named profile lives at ``<root>/profiles/<name>`` (SPEC §1).
    Returns:
        An absolute path (not created).
    Raises:
        UnsafeNameError (a ValueError): the profile name cannot be a directory name
            (:func:`hermes_state.files.names.name_problem`).
    """
    root = Path(home) if home is not None else None
    if root is None:
        env = os.environ.get("HERMES_HOME")
        root = Path(env) if env else Path.home() / ".hermes"
    root = root.expanduser().absolute()
    if profile is not None:
        root = root / "profiles" / check_name("profile name", profile)
    return root


def default_db_path(home: str | os.PathLike | None = None, profile: str | None = None) -> Path:
    """``<HERMES_HOME>/state.db`` (SPEC §1)."""
    return hermes_home(home, profile) / DB_NAME


def wal_path(db_path: str | os.PathLike) -> Path:
    """The WAL sidecar ``<db>-wal``."""
    return Path(f"{os.fspath(db_path)}-wal")


def shm_path(db_path: str | os.PathLike) -> Path:
    """The wal-index sidecar ``<db>-shm``."""
    return Path(f"{os.fspath(db_path)}-shm")


def utc_stamp(t: float | None = None) -> str:
    """``YYYYmmddTHHMMSSZ`` for ``t`` (seconds since the epoch, default now), SPEC §1."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if t is None else t))


def retired_wal_dir(db_path: str | os.PathLike, pid: int, stamp: str | None = None) -> Path:
    """``state.db.retired-wal-<UTCSTAMP>-<pid>/`` beside the store (SPEC §10.3)."""
    db = Path(db_path)
    return db.with_name(f"{db.name}.retired-wal-{stamp or utc_stamp()}-{pid}")


#: Longest session id used as a spool file name as it is (longer ones are hashed).
SPOOL_NAME_MAX = 151


def spool_path(home: str | os.PathLike, session_id: str) -> Path:
    """``<HERMES_HOME>/sessions/<session_id>.jsonl``: where refused messages go (SPEC §10.1).

    A session id that is not a plain file name (``/``, ``..``, control characters, lone
    surrogates, over 150 characters) is spooled under ``sid-<sha256 prefix>.jsonl`` instead; the
    id itself is inside every record, so replay never depends on the file name.

    Raises:
        ValueError: an empty session id.
    """
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("an empty session id cannot be spooled")
    if is_portable(session_id, max_bytes=SPOOL_NAME_MAX):
        name = session_id
    else:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        name = f"sid-{digest}"
    return Path(home) / "sessions" / f"{name}.jsonl"


def sessions_json_path(db_path: str | os.PathLike) -> Path:
    """``<HERMES_HOME>/sessions/sessions.json`` for the store at ``db_path`` (SPEC §3 v18)."""
    return Path(db_path).parent / "sessions" / "sessions.json"


def sqlite_uri(path: str | os.PathLike, **params: str) -> str:
    """A ``file:`` URI for ``sqlite3.connect(uri=True)`` with the path percent-encoded.

    ``?``, ``#`` and ``%`` in a directory name would otherwise be read as URI syntax and open
    (or create) another file.
    """
    from urllib.parse import quote, urlencode

    uri = "file:" + quote(Path(path).absolute().as_posix(), safe="/")
    return uri + ("?" + urlencode(params) if params else "")


def ensure_home(directory: Path) -> None:
    """Create ``directory`` (mode 0700 for new levels) if missing.

    Raises:
        StorePermissionError: it cannot be created; the message names the path and the fix.
    """
    if directory.exists() and not directory.is_dir():
        raise StorePermissionError(
            f"cannot use {directory} as the session store directory: it is a file, not a "
            "directory.",
            "fix: point HERMES_HOME (or --home) at a directory, or move that file away")
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except (FileExistsError, NotADirectoryError) as exc:
        raise StorePermissionError(
            f"cannot create the session store directory {directory}: a parent is a file.",
            "fix: point HERMES_HOME (or --home) at a directory") from exc
    except PermissionError as exc:
        raise StorePermissionError(
            f"cannot create the session store directory {directory}: permission denied.",
            f"fix: create it and give your user write access (mkdir -p {directory} && "
            f"chmod u+rwx {directory})",
        ) from exc


def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _denied(path: Path, st: os.stat_result | None, verb: str, need: str, fix: str):
    me = os.geteuid()
    if st is None:
        facts = "permission denied"
    else:
        facts = (f"permission denied: mode {oct(st.st_mode & 0o7777)}, owner {_who(st.st_uid)}; "
                 f"this process runs as {_who(me)}")
    if st is not None and st.st_uid != me:
        fix = (f"fix: run as {_who(st.st_uid)} (the owner), or give this user access: "
               f"chown {me} {path} (as root), then {fix}")
    else:
        fix = f"fix: {fix}"
    return StorePermissionError(f"cannot {verb} {path}: {need}; {facts}.",
                                fix + "; never delete the -wal: it may hold committed data")


def permission_error(path: str | os.PathLike, verb: str = "access"):
    """A :class:`~hermes_state.errors.StorePermissionError` for ``path`` that names its mode, its
    owner, this process's user and the fix (for a ``PermissionError`` met anywhere)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        st = None
    return _denied(p, st, verb, "permission denied" if st is None else "no permission",
                   f"chmod u+rw {p} (u+rwx for a directory)")


def access_problem(db_path: str | os.PathLike, *, write: bool):
    """Why this process cannot read (or, with ``write``, write) the store, or None (SPEC §4).

    Checks, with this process's effective ids: every directory up to the store can be
    entered; the store's directory can be written when a file must be created in it (a writer
    always; a reader when ``-shm`` is missing); ``state.db``, ``-wal`` and ``-shm`` that exist
    can be read (and written, for ``write``). Never opens a file. Readers call it after an
    open failed, to name the cause; writers before opening.

    Returns:
        A :class:`~hermes_state.errors.StorePermissionError` naming the exact path, the missing
        permission, the mode and owner, and the ``chmod``/``chown`` that fixes it; or None.
    """
    db = Path(db_path).absolute()
    directory = db.parent
    for parent in reversed([directory, *directory.parents]):
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            break
        except PermissionError:
            return _denied(parent, None, "reach", "a directory above it cannot be entered",
                           f"chmod a+x on the directories above {directory}")
        if not os.access(parent, os.X_OK, effective_ids=True):
            return _denied(parent, st, "enter the directory", "no search (x) permission",
                           f"chmod u+x {parent}")
    try:
        dst = os.stat(directory)
    except FileNotFoundError:
        return None
    files = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{db}{suffix}")
        try:
            files[suffix] = (p, os.stat(p))
        except FileNotFoundError:
            files[suffix] = (p, None)
    mode = os.R_OK | (os.W_OK if write else 0)
    for suffix, (p, st) in files.items():
        if st is None or os.access(p, mode, effective_ids=True):
            continue
        if not os.path.lexists(p):
            # gone between the stat and the check (another process starting on the same store
            # moved it aside or SQLite deleted it on a last close): no file, no permission problem
            continue
        need = "no read and write permission" if write else "no read permission"
        if write and os.access(p, os.R_OK, effective_ids=True):
            need = "no write permission"
        fix = (f"chmod u+rw {p}; if the mode already allows it, the file may be immutable "
               f"(lsattr {p}; chattr -i {p})") if write else f"chmod u+r {p}"
        return _denied(p, st, "write" if write else "read", need, fix)
    # A reader of a WAL store creates -shm when it is missing (the header is not read here:
    # this may run in a process with a connection to the store, SPEC §4).
    need_dir_write = write or (files[""][1] is not None and files["-shm"][1] is None)
    if need_dir_write and not os.access(directory, os.W_OK | os.X_OK, effective_ids=True):
        why = ("the -wal and -shm files are created there" if write else
               "a reader of a WAL store must create state.db-shm (the WAL index) there")
        return _denied(directory, dst, "write the session store directory",
                       f"no write permission ({why})", f"chmod u+rwx {directory}")
    return None



# --------------------------------------------------------------------------- store-owned paths
#: Names beside ``state.db`` that the store owns (issue 22 item 3; SPEC §1 table): the store
#: files, its lock files, its evidence. ``{db}`` is the store's file name. No command of ours
#: writes an output (an export, a recover report or output, ...) to any of them.
STORE_OWNED_NAMES = ("{db}", "{db}-wal", "{db}-shm", "{db}-journal", "{db}.checkpoint.lock",
                     "{db}.quarantine.lock")
#: Name patterns beside ``state.db`` the store owns (regular expressions, ``{db}`` escaped).
STORE_OWNED_PATTERNS = (r"{db}\.retired-wal-.*", r"{db}\.capture-pending-.*",
                        r"{db}\.corrupt\..*", r"{db}\..*\.malformed-backup.*",
                        r"{db}\.pre-update-emergency-.*", r"{db}-(wal|shm)\.stale-.*",
                        r"\.{db}\..*")
#: Directories beside ``state.db`` the store owns with everything under them.
STORE_OWNED_DIRS = ("state-snapshots", "sessions")


def store_owned(target: str | os.PathLike, db_path: str | os.PathLike) -> str | None:
    """Why ``target`` is a path the store at ``db_path`` owns, or None (issue 22 item 3).

    Compared after resolving the directories (a link to the store's directory does not hide
    it) and by identity (a hard link to an owned file is owned too). The target need not exist.

    Returns:
        A phrase naming what the path is (``"the store's checkpoint lock"``, ...), or None.
    """
    db = Path(os.path.realpath(Path(db_path).absolute().parent)) / Path(db_path).name
    t = Path(target).expanduser().absolute()
    try:
        t = Path(os.path.realpath(t.parent)) / t.name
    except (OSError, ValueError):
        return None
    home = db.parent
    if t.parent == home or home in t.parents:
        top = t.relative_to(home).parts[0]  # the entry beside the store it is, or is under
        inside = t.parent != home
        if top in STORE_OWNED_DIRS:
            return f"inside the store's {top}/ directory ({home / top})"
        names = {n.format(db=db.name): n for n in STORE_OWNED_NAMES}
        if top in names:
            return _owned_phrase(names[top]) + (" (a path under it)" if inside else "")
        for pattern in STORE_OWNED_PATTERNS:
            if re.fullmatch(pattern.format(db=re.escape(db.name)), top):
                return ("inside one of the store's evidence directories" if inside
                        else "one of the store's evidence or lock files")
    try:
        st = os.stat(t)
    except (OSError, ValueError):
        return None
    for name in STORE_OWNED_NAMES:
        p = home / name.format(db=db.name)
        try:
            ps = os.stat(p)
        except OSError:
            continue
        if (ps.st_dev, ps.st_ino) == (st.st_dev, st.st_ino):
            return _owned_phrase(name) + f" (the same file as {p})"
    return None


def _inferred_stores(target: Path) -> list[Path]:
    """Stores a path would belong to by its name alone: for ``target`` and each directory
    above it, the ``state.db`` beside it and the file whose owned name it has
    (``X.checkpoint.lock`` -> ``X``, ``X.retired-wal-.../`` -> ``X``), when that file exists."""
    found: list[Path] = []
    suffixes = [re.escape(n).replace(re.escape("{db}"), "(?P<db>.+)")
                for n in STORE_OWNED_NAMES if n != "{db}"]
    suffixes += [p.replace("{db}", "(?P<db>.+?)") for p in STORE_OWNED_PATTERNS]
    for p in (target, *target.parents):
        if p.parent == p:
            break
        names = {DB_NAME}
        for rx in suffixes:
            m = re.fullmatch(rx, p.name)
            if m and m.group("db"):
                names.add(m.group("db"))
        for name in names:
            db = p.parent / name
            if (db != target or name == DB_NAME) and os.path.isfile(db) and db not in found:
                found.append(db)  # a file named state.db is a store's own file
    return found


def owning_store(target: str | os.PathLike, *stores: str | os.PathLike
                 ) -> tuple[Path, str] | None:
    """``(store, why)`` when ``target`` is a path one of ``stores`` owns, or one any store
    found beside it owns (another profile's lock file, a capture of another store; issue 22
    item 3: no command of ours ever writes to a path a store owns). None otherwise.
    """
    t = Path(target).expanduser().absolute()
    try:
        t = Path(os.path.realpath(t.parent)) / t.name
    except (OSError, ValueError):
        return None
    for db in (*(Path(s) for s in stores), *_inferred_stores(t)):
        why = store_owned(t, db)
        if why:
            return Path(db), why
    return None


def _owned_phrase(name: str) -> str:
    return {"{db}": "the store's database file", "{db}-wal": "the store's write-ahead log",
            "{db}-shm": "the store's WAL index", "{db}-journal": "the store's rollback journal",
            "{db}.checkpoint.lock": "the store's checkpoint lock",
            "{db}.quarantine.lock": "the store's quarantine lock"}.get(name, "a store file")


def refuse_store_owned(target: str | os.PathLike, *stores: str | os.PathLike,
                       option: str = "the output") -> None:
    """Raise when ``target`` is a path one of ``stores`` owns (issue 22 item 3): every output
    path of every command goes through this before anything is written.

    Raises:
        StorePermissionError: naming the path, what it is, and the fix.
    """
    owned = owning_store(target, *stores)
    if owned:
        db, why = owned
        raise StorePermissionError(
            f"refusing to write {option} to {target}: it is {why} (store {db}). Writing there "
            "would replace a file the session store owns (a lock file replaced splits the "
            "lock; a store file replaced loses data).",
            "fix: choose a path outside the store's files, e.g. in another directory")
