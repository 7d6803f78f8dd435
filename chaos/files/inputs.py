"""Reading the toolkit's input files: never through a planted link, never blocking, bounded.

Every file the toolkit reads because a user or a directory listing named it (a scenario, a
mutant, a store under ``--stores`` and its sidecars, a ``dump.json``) is opened here with
``O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC``: a symbolic link as the last component is
refused (never followed out of the directory it was found in), a FIFO, a socket or a device is
refused after ``fstat`` of the open descriptor before a single byte is read (so a FIFO with no
writer never hangs the command and ``/dev/zero`` never fills the memory), and a regular file
larger than the caller's bound is refused from its size. Because every check is made on the
descriptor that is then read, a file replaced between a listing and the read is either read
whole as it now is or refused; never half of each.

Errors are :class:`InputError` (an ``OSError``) whose message says what the file is and why it
was refused: ``not a regular file (a FIFO)``, ``a symbolic link (not followed)``, ``too large``,
``cannot read: Permission denied``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))
_CHUNK = 1 << 16


class InputError(OSError):
    """An input file the toolkit refuses to read; ``str()`` names the file and the reason.

    Attributes:
        path: the file; ``reason``: the reason alone (``"not a regular file (a FIFO)"``).
    """

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


def kind_of(mode: int) -> str:
    """``"a FIFO"``, ``"a directory"``... for a non-regular ``st_mode``; ``"a file"`` otherwise."""
    return next((name for test, name in _KINDS if test(mode)), "a file")


def open_regular(path: str | os.PathLike, *,
                 limit: int | None = None) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading as described in the module doc; the caller closes the fd.

    Returns:
        ``(fd, stat of the fd)``; the fd is back in blocking mode (a regular file never blocks).
    Raises:
        InputError: a symbolic link, not a regular file, larger than ``limit`` bytes, or it
            cannot be opened (missing, permission denied...).
    """
    try:
        fd = os.open(os.fspath(path), _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(path, "a symbolic link (not followed: name the file itself)") \
                from None
        if exc.errno == errno.ENXIO:  # a socket opened by name
            raise InputError(path, "not a regular file (a socket)") from None
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(path, f"not a regular file ({kind_of(st.st_mode)})")
        if limit is not None and st.st_size > limit:
            raise InputError(path, f"too large: {st.st_size} bytes (at most {limit})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes(path: str | os.PathLike, limit: int) -> bytes:
    """The whole content of the regular file ``path``, at most ``limit`` bytes (a file growing
    past it while read is refused too).

    Raises:
        InputError: see :func:`open_regular`; also a read error (``EIO``...).
    """
    fd, _ = open_regular(path, limit=limit)
    chunks, total = [], 0
    try:
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise InputError(path, f"too large: more than {limit} bytes")
            chunks.append(chunk)
    except OSError as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text(path: str | os.PathLike, limit: int) -> str:
    """:func:`read_bytes` decoded as UTF-8.

    Raises:
        InputError: see :func:`read_bytes`; or not UTF-8 (the message names the line).
    """
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(path, f"not UTF-8 text: byte {data[exc.start]:#04x} on line "
                         f"{line}") from None


def open_binary(path: str | os.PathLike) -> BinaryIO:
    """A binary file object over :func:`open_regular`'s descriptor (no size bound: a store).

    Raises:
        InputError: see :func:`open_regular`.
    """
    fd, _ = open_regular(path)
    return os.fdopen(fd, "rb")


def copy_file(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Copy the regular file ``src`` (read as above) to a NEW file ``dest`` (``O_EXCL``, 0600,
    never through a link at ``dest``). Returns ``dest``.

    Raises:
        InputError: ``src`` refused; FileExistsError: ``dest`` exists; OSError: the write.
    """
    with open_binary(src) as fin:
        fd = os.open(os.fspath(dest), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                     | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as fout:
            while True:
                chunk = fin.read(1 << 20)
                if not chunk:
                    break
                fout.write(chunk)
    return Path(dest)

