"""Creating and reading files beside the store safely (SPEC §1, §4).

One rule for every file the store and the CLI create in ``HERMES_HOME`` (locks, captures,
manifests, snapshots, spool, exports, recover reports and outputs, quarantine copies):

* **never follow a symlink** and **never write through a file someone planted**: new files are
  created with ``O_CREAT | O_EXCL | O_NOFOLLOW``; directories with ``mkdir`` and then checked
  with ``lstat`` (through an ``O_NOFOLLOW | O_DIRECTORY`` descriptor); a symlink or a file of
  another type where a directory belongs is refused with :class:`UnsafePathError`;
* **modes**: ``0600`` files, ``0700`` directories, set with ``fchmod`` (the umask cannot widen or
  narrow them);
* **atomic publication**: content is built under a ``.partial`` name (a file or a directory),
  fsynced (every file, then the directory), renamed into place without replacing anything that
  is there (``renameat2(RENAME_NOREPLACE)``), then the parent directory is fsynced;
* **unique names**: when a name is taken (``<name>``, then ``<name>-2``, ``-3``, ...) the next free
  one is used: a capture, a snapshot or a quarantine copy is never given up for a name;
* **leftovers**: a ``.partial`` is ``flock``-ed while it is built, so the next run of the same
  command can tell a leftover of a killed process (unlocked) from one still in progress and
  remove it (:func:`clean_partials`).

Reading evidence (manifests, spool lines, headers, export targets) goes through
:func:`open_regular`: ``O_NONBLOCK`` so that opening a FIFO never blocks, then ``fstat``: anything
but a regular file is refused before a byte is read; :func:`read_regular` also caps the size.

Never use these on ``state.db``/``-wal``/``-shm`` of a store this process has a connection to
(SPEC §4: closing any descriptor drops that process's POSIX locks on the inode).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import StorePermissionError

__all__ = [
    "FILE_MODE",
    "DIR_MODE",
    "PARTIAL_SUFFIX",
    "UnsafePathError",
    "NotRegularFileError",
    "describe_mode",
    "ensure_dir",
    "create_file",
    "open_lock",
    "open_append",
    "open_regular",
    "read_regular",
    "copy_regular",
    "fsync_dir",
    "rename_noreplace",
    "numbered",
    "move_aside",
    "PartialDir",
    "PartialFile",
    "write_file",
    "write_json",
    "clean_partials",
]

FILE_MODE = 0o600
DIR_MODE = 0o700
PARTIAL_SUFFIX = ".partial"
#: Attempts at a free name before giving up (a real collision needs another process per step).
_NAME_ATTEMPTS = 100_000

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class UnsafePathError(StorePermissionError):
    """A path the store would create or read is a symlink, or not the kind of file it must be.

    Raised instead of writing through a planted symlink, blocking on a FIFO or reading a device.
    ``path`` names it; the message says what it is and what to do.
    """

    def __init__(self, user_message: str, operator_detail: str = "", *, path: str = "") -> None:
        self.path = path
        super().__init__(user_message, operator_detail)


class NotRegularFileError(UnsafePathError):
    """A file to read or append to is not a regular file (FIFO, device, socket, dir, link)."""


def describe_mode(mode: int) -> str:
    """``"a FIFO (named pipe)"``, ``"a symbolic link"``, ... for an ``st_mode``."""
    for test, text in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return text
    return "a special file"


def _unsafe(path: os.PathLike | str, what: str, st_mode: int, fix: str,
            cls: type = UnsafePathError) -> UnsafePathError:
    kind = describe_mode(st_mode)
    return cls(f"refusing to use {path}: it is {kind}, not {what}.", fix, path=os.fspath(path))


# --------------------------------------------------------------------------- directories

def ensure_dir(path: str | os.PathLike, *, what: str = "a directory") -> Path:
    """Create directory ``path`` (mode 0700) if missing; refuse anything but a real directory.

    The parent must exist. An existing directory keeps its mode. Never follows a symlink at
    ``path`` (a symlinked ``state-snapshots/`` or ``sessions/`` is refused, not written through).

    Returns:
        ``Path(path)``.
    Raises:
        UnsafePathError: ``path`` is a symlink or not a directory (names it and the fix).
        StorePermissionError: it cannot be created (permission denied).
    """
    p = Path(path)
    created = False
    try:
        os.mkdir(p, DIR_MODE)
        created = True
    except FileExistsError:
        pass
    except PermissionError as exc:
        raise StorePermissionError(
            f"cannot create the directory {p}: permission denied.",
            f"fix: give your user write access to {p.parent} (chmod u+rwx {p.parent})") from exc
    try:
        fd = os.open(p, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as exc:
        st = os.lstat(p)
        raise _unsafe(p, what, st.st_mode,
                      f"remove or rename {p} and let it be created again as a plain directory "
                      f"(never a link: it would send store files elsewhere)") from exc
    try:
        if created:
            os.fchmod(fd, DIR_MODE)
    finally:
        os.close(fd)
    return p


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so a rename or create in it is durable (best effort: never raises)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- files

def create_file(path: str | os.PathLike, *, mode: int = FILE_MODE) -> int:
    """Create a NEW file exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``), mode 0600; return its fd.

    Raises:
        FileExistsError: anything (a file, a dangling symlink) is at ``path``.
        OSError: it cannot be created.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


#: Called with each path between its check and its use (``lstat`` passed, the open not yet
#: made): the planted-file matrix removes or replaces the path here, so "changed between check
#: and use" is tested deterministically (tests/helpers/planted_child.py). Empty: no cost.
RACE_HOOKS: list[Callable[[str], None]] = []


def checked(path: str | os.PathLike) -> None:
    """Run :data:`RACE_HOOKS` for ``path`` (after a check, before the use)."""
    for hook in RACE_HOOKS:
        hook(os.fspath(path))


def _refuse_special(path: str | os.PathLike, what: str, fix: str, *,
                    follow: bool = False) -> None:
    """Refuse a non-regular file at ``path`` WITHOUT opening it (opening a device can act)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(st.st_mode):
        raise _unsafe(path, what, st.st_mode, fix.format(path=path), NotRegularFileError)
    checked(path)


def _open_existing_or_new(path: str | os.PathLike, flags: int, what: str) -> int:
    """Open ``path`` (created 0600 if missing) without following a link; regular, 1 link only."""
    _refuse_special(path, what, "remove {path}; it is created again as a plain file")
    try:
        fd = os.open(path, flags | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EMLINK):
            st = os.lstat(path)
            raise _unsafe(path, what, st.st_mode, f"remove {path}; it is created again as a "
                          "plain file", NotRegularFileError) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _unsafe(path, what, st.st_mode, f"remove {path}; it is created again as a "
                          "plain file", NotRegularFileError)
        if st.st_nlink > 1:
            raise NotRegularFileError(
                f"refusing to use {path}: it has {st.st_nlink} hard links (it may be another "
                "file planted here).", f"remove {path}; it is created again as a plain file",
                path=os.fspath(path))
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.fchmod(fd, FILE_MODE)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_lock(path: str | os.PathLike) -> int:
    """Open (or create, 0600) a lock file for ``flock``; never follows a link, never truncates.

    Returns:
        A read-write descriptor (close it to release the lock).
    Raises:
        NotRegularFileError: a symlink, FIFO, device, directory or hard-linked file is there.
    """
    return _open_existing_or_new(path, os.O_RDWR, "a lock file")


def open_append(path: str | os.PathLike) -> int:
    """Open (or create, 0600) ``path`` for appending: no-follow, regular file, one link only.

    Raises:
        NotRegularFileError: see :func:`open_lock`.
    """
    return _open_existing_or_new(path, os.O_WRONLY | os.O_APPEND, "a regular file")


def open_regular(path: str | os.PathLike, *, follow: bool = False):
    """Open a REGULAR file for reading (binary file object); never blocks, never reads a device.

    ``O_NONBLOCK`` makes opening a FIFO return at once; ``fstat`` then refuses anything that is not
    a regular file before a byte is read.

    Args:
        follow: follow a final symlink (for a path the user named); default no.
    Raises:
        FileNotFoundError: nothing at ``path``.
        NotRegularFileError: a FIFO, device, socket, directory (or a symlink when not ``follow``).
    """
    flags = os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC | (0 if follow else _O_NOFOLLOW)
    _refuse_special(path, "a regular file", "give the path of a regular file", follow=follow)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise _unsafe(path, "a regular file", os.lstat(path).st_mode,
                          "give the path of a regular file", NotRegularFileError) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _unsafe(path, "a regular file", st.st_mode, "give the path of a regular file",
                          NotRegularFileError)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike, *, limit: int, follow: bool = False) -> bytes:
    """All bytes of a regular file of at most ``limit`` bytes (see :func:`open_regular`).

    Raises:
        ValueError: the file is larger than ``limit`` (nothing is read into memory).
        FileNotFoundError, NotRegularFileError: see :func:`open_regular`.
    """
    with open_regular(path, follow=follow) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise ValueError(f"{path} is {size} bytes, more than the {limit} expected")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} grew past the {limit} bytes expected while it was read")
    return data


def copy_regular(src: str | os.PathLike, dst: str | os.PathLike, *, follow: bool = False,
                 chunk: int = 1 << 20) -> int:
    """Copy the regular file ``src`` into the NEW file ``dst`` (0600, exclusive, no link
    followed at ``dst``); returns the bytes copied.

    ``src`` is opened with :func:`open_regular` (never a FIFO, a device or, unless ``follow``,
    a symlink): ``shutil.copyfile`` would read ``/dev/zero`` until the disk is full.

    Raises:
        FileNotFoundError, NotRegularFileError: see :func:`open_regular`.
        FileExistsError: something is at ``dst``.
    """
    total = 0
    with open_regular(src, follow=follow) as fin, os.fdopen(create_file(dst), "wb") as fout:
        while True:
            data = fin.read(chunk)
            if not data:
                break
            fout.write(data)
            total += len(data)
    return total


def read_json(path: str | os.PathLike, *, limit: int = 4 << 20) -> Any:
    """The JSON value in a regular file of at most ``limit`` bytes.

    Raises:
        OSError (NotRegularFileError, FileNotFoundError, ...), ValueError (too large, not JSON).
    """
    return json.loads(read_regular(path, limit=limit).decode("utf-8", "replace"))


# --------------------------------------------------------------------------- names and renames

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
_renameat2 = None
try:  # glibc >= 2.28
    _libc = ctypes.CDLL(None, use_errno=True)
    _renameat2 = _libc.renameat2
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]
    _renameat2.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - other libcs
    _renameat2 = None


def rename_noreplace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename ``src`` to ``dst`` atomically, failing if ANYTHING is at ``dst`` (never replaces).

    Uses ``renameat2(RENAME_NOREPLACE)``; where the kernel or filesystem lacks it, a hard link
    (files) or a checked rename (directories) instead.

    Raises:
        FileExistsError: ``dst`` exists (file, directory or symlink).
        OSError: the rename failed otherwise.
    """
    if _renameat2 is not None:
        rc = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst),
                        _RENAME_NOREPLACE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            if err in (errno.EEXIST, errno.ENOTEMPTY):
                raise FileExistsError(err, os.strerror(err), os.fspath(dst))
            raise OSError(err, os.strerror(err), os.fspath(src))
    st = os.lstat(src)
    if stat.S_ISDIR(st.st_mode):
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, "File exists", os.fspath(dst))
        os.rename(src, dst)
        return
    os.link(src, dst, follow_symlinks=False)  # FileExistsError when taken
    os.unlink(src)


def numbered(base: str | os.PathLike, *, before: str = "") -> Callable[[int], Path]:
    """A name allocator: ``n -> base`` for n == 1, else ``base-n`` (SPEC §1 "-N on collision").

    Args:
        base: the first-choice path.
        before: a suffix the counter goes in front of (``".bak"``: ``x.bak``, ``x-2.bak``).
    """
    text = os.fspath(base)
    if before and text.endswith(before):
        stem, tail = text[: -len(before)], before
    else:
        stem, tail = text, ""

    def name_for(n: int) -> Path:
        return Path(f"{stem}{tail}" if n == 1 else f"{stem}-{n}{tail}")

    return name_for


def _publish(src: Path, name_for: Callable[[int], Path]) -> Path:
    for n in range(1, _NAME_ATTEMPTS + 1):
        cand = name_for(n)
        if os.path.lexists(cand):
            continue
        try:
            rename_noreplace(src, cand)
        except FileExistsError:
            continue
        fsync_dir(cand.parent)
        return cand
    raise FileExistsError(errno.EEXIST, f"no free name after {_NAME_ATTEMPTS} tries",
                          os.fspath(name_for(1)))


def _partial_names(base: Path) -> Callable[[int], Path]:
    """``base.partial``, ``base-2.partial``, ... (the names :func:`clean_partials` looks for)."""
    name_for = numbered(base)
    return lambda n: Path(f"{name_for(n)}{PARTIAL_SUFFIX}")


def move_aside(src: str | os.PathLike, name_for: Callable[[int], Path]) -> Path:
    """Rename an existing ``src`` to the first free name of ``name_for`` (never replacing)."""
    return _publish(Path(src), name_for)


def _fsync_tree(root: Path) -> None:
    """fsync every regular file under ``root`` (no links followed), then each directory."""
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | _O_NOFOLLOW |
                             _O_NONBLOCK | _O_CLOEXEC)
            except OSError:
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dirpath)


def _lock_nb(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


class PartialDir:
    """A directory built under ``<stem>[-N].partial`` (0700, flock-ed), published atomically.

    Usage::

        with PartialDir(parent, "state.db.retired-wal-...") as part:
            part.create("manifest.json") ...
            final = part.publish(numbered(parent / name))

    Leaving the block without :meth:`publish` removes the partial directory, unless
    ``keep_on_error`` (evidence that must survive a failure). The lock is released at exit.
    """

    def __init__(self, parent: str | os.PathLike, stem: str, *, keep_on_error: bool = False):
        self.parent = Path(parent)  # the caller vouches for it (ensure_dir inside HERMES_HOME)
        self.keep_on_error = keep_on_error
        self.published: Path | None = None
        # Built under a private name first and locked there, then renamed to its ``.partial``
        # name: a cleaner (:func:`clean_partials`) never sees it unlocked.
        init = Path(self.parent) / f".{stem}.init-{os.getpid()}-{os.urandom(4).hex()}"
        os.mkdir(init, DIR_MODE)
        self._fd = os.open(init, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
        try:
            os.fchmod(self._fd, DIR_MODE)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours alone: never waits
            self.path = _publish(init, _partial_names(Path(self.parent) / stem))
        except BaseException:
            os.close(self._fd)
            shutil.rmtree(init, ignore_errors=True)
            raise

    def create(self, name: str):
        """A new file ``name`` inside (exclusive, 0600) as a binary file object."""
        return os.fdopen(create_file(self.path / name), "wb")

    def write(self, name: str, data: bytes | str) -> Path:
        """Write a whole new file ``name`` inside (fsynced at :meth:`publish`)."""
        with self.create(name) as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        return self.path / name

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write(name, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False,
                                           default=str) + "\n")

    def publish(self, name_for: Callable[[int], Path]) -> Path:
        """fsync every file and the directory, rename to the first free name; returns it."""
        _fsync_tree(self.path)
        self.published = _publish(self.path, name_for)
        return self.published

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "PartialDir":
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        try:
            if self.published is None and not (exc_type is not None and self.keep_on_error):
                self.discard()
        finally:
            self.close()


class PartialFile:
    """A file written under ``<name>[-N].partial`` beside its target (0600, flock-ed).

    :meth:`publish` fsyncs it, renames it onto the target (``replace=True``: an existing regular
    file is replaced by the rename, never written through; a symlink there is refused) or to the
    first free name of a ``name_for`` allocator, and fsyncs the directory.
    """

    def __init__(self, target: str | os.PathLike) -> None:
        self.target = Path(target)
        self.published: Path | None = None
        init = self.target.with_name(f".{self.target.name}.init-{os.getpid()}-"
                                     f"{os.urandom(4).hex()}")
        self._fd = create_file(init)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours alone: never waits
            self.path = _publish(init, _partial_names(self.target))
        except BaseException:
            os.close(self._fd)
            os.unlink(init)
            raise
        self.file = os.fdopen(self._fd, "wb", closefd=False)

    def write(self, data: bytes | str) -> None:
        self.file.write(data.encode("utf-8") if isinstance(data, str) else data)

    def publish(self, *, replace: bool = False,
                name_for: Callable[[int], Path] | None = None) -> Path:
        """Make the content durable and give it its name; returns the final path.

        Raises:
            FileExistsError: ``replace`` is False, no ``name_for`` and the target exists.
            UnsafePathError: ``replace`` and the target is a symlink or not a regular file.
        """
        self.file.flush()
        os.fsync(self._fd)
        if name_for is not None:
            self.published = _publish(self.path, name_for)
            return self.published
        if replace:
            try:
                st = os.lstat(self.target)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise _unsafe(self.target, "a regular file", st.st_mode,
                              "choose another path (a link or special file is never replaced)")
            os.replace(self.path, self.target)
        else:
            rename_noreplace(self.path, self.target)
        fsync_dir(self.target.parent)
        self.published = self.target
        return self.target

    def close(self) -> None:
        if self._fd is not None:
            self.file.close()
            os.close(self._fd)
            self._fd = None
        if self.published is None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "PartialFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_file(path: str | os.PathLike, data: bytes | str, *, replace: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically: ``.partial``, fsync file, rename, fsync directory.

    Args:
        replace: replace an existing regular file (never a symlink or special file); default:
            raise FileExistsError when anything is at ``path``.
    Returns:
        ``Path(path)``.
    """
    with PartialFile(path) as part:
        part.write(data)
        return part.publish(replace=replace)


def write_json(path: str | os.PathLike, obj: Any, *, replace: bool = False) -> Path:
    """:func:`write_file` of ``obj`` as indented JSON (``default=str``) and a final newline."""
    return write_file(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False,
                                       default=str) + "\n", replace=replace)


# --------------------------------------------------------------------------- leftovers

def clean_partials(directory: str | os.PathLike, pattern: str | re.Pattern) -> list[str]:
    """Remove ``.partial`` leftovers of killed processes in ``directory`` (SPEC §1, issue 11.12).

    An entry whose name fully matches ``pattern`` is removed only if it is a plain file or
    directory (never a symlink) and nobody holds its ``flock`` (a live builder does, until it
    publishes or exits). Errors are ignored: cleaning is housekeeping.

    Returns:
        The names removed.
    """
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not rx.fullmatch(entry.name):
            continue
        try:
            st = os.lstat(entry.path)
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                continue
            if st.st_uid != os.geteuid():
                continue
            fd = os.open(entry.path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
        except OSError:
            continue
        try:
            if not _lock_nb(fd):
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed.append(entry.name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def iter_partials(directory: str | os.PathLike, pattern: str | re.Pattern) -> Iterator[str]:
    """Names in ``directory`` matching ``pattern`` whose builder is gone (unlocked); for doctor."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not rx.fullmatch(entry.name):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
        except OSError:
            continue
        try:
            if _lock_nb(fd):
                yield entry.name
        finally:
            os.close(fd)
