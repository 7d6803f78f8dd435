"""The faulty filesystem's operations: passthrough to a backing directory, unsynced data kept in
:class:`~chaos.fs.unsynced.FileState` per inode, namespace changes in a
:class:`~chaos.fs.journal.Journal`, faults from :mod:`chaos.fs.faults`, every write/fsync/rename
logged by :class:`~chaos.fs.fslog.FsLog`.

One lock guards all state; a ``slow_io`` delay sleeps before taking it, so a stalled fsync stalls
its caller only. After a power cut the filesystem is *down* until :meth:`FaultyOps.power_on`:
every operation that would change it fails with EIO (the role processes are being killed; what
they do now must not become durable), reads see the durable state.
Regular files are opened with ``direct_io`` (the kernel page cache never holds data this
filesystem dropped) except those matching ``mmap_pattern`` (SQLite's ``-shm``, mapped
``MAP_SHARED``, which FUSE allows only through the page cache; SQLite rebuilds it after a crash).
The process that runs this must never touch the mount itself (a FUSE deadlock).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .faults import Fault, parse_fault
from .fslog import FsLog
from .journal import Entry, Journal
from .unsynced import FileState

try:  # the daemon needs mfusepy; the pure parts of this module do not
    from mfusepy import FuseOSError, Operations, fuse_get_context
except (ImportError, OSError):  # pragma: no cover - exercised where libfuse is missing
    Operations = object

    class FuseOSError(OSError):  # type: ignore[no-redef]
        def __init__(self, code: int):
            super().__init__(code, os.strerror(code))

    def fuse_get_context():  # type: ignore[no-redef]
        return 0, 0, 0

RENAME_NOREPLACE = 1
STAT_KEYS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
             "st_blocks", "st_blksize", "st_rdev")
WRITE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND


@dataclass
class Handle:
    """An open regular file: the backing descriptor and the inode it names."""
    fd: int
    key: tuple[int, int]
    path: str
    writable: bool
    sync: bool


def _fh(fi) -> int | None:
    if fi is None:
        return None
    return fi if isinstance(fi, int) else fi.fh


class FaultyOps(Operations):
    """mfusepy operations over ``backing`` (see the module docstring)."""

    use_ns = True

    def __init__(self, backing: Path, stash: Path, log: FsLog, mmap_pattern: str = r"-shm$",
                 on_init=None):
        self.backing = str(backing)
        self.log = log
        self._mu = threading.RLock()
        self.files: dict[tuple[int, int], FileState] = {}
        self.names: dict[tuple[int, int], str] = {}
        self.handles: dict[int, Handle] = {}
        self.dirs: dict[int, str] = {}
        self.journal = Journal(Path(backing), Path(stash))
        self.faults: dict[int, Fault] = {}
        self.down = False
        self.mmap_re = re.compile(mmap_pattern)
        self._next_fh = 1
        self._next_fault = 1
        self._on_init = on_init

    # -- helpers
    @staticmethod
    def _caller() -> int:
        return fuse_get_context()[2]

    def _abs(self, rel: str) -> str:
        return os.path.join(self.backing, rel)

    @staticmethod
    def _rel(path: str | None) -> str:
        return (path or "").lstrip("/")

    def _check_up(self) -> None:
        if self.down:
            raise FuseOSError(errno.EIO)

    def _handle(self, fi) -> Handle:
        h = self.handles.get(_fh(fi))
        if h is None:
            raise FuseOSError(errno.EBADF)
        return h

    def _name(self, h: Handle) -> str:
        """The current name of an open file (renames update it; the path argument is NULL)."""
        return self.names.get(h.key, h.path)

    def _state(self, h: Handle) -> FileState:
        fs = self.files.get(h.key)
        if fs is None:
            fs = self.files[h.key] = FileState(os.dup(h.fd))
        self.names.setdefault(h.key, h.path)
        return fs

    def _forget_inode(self, key) -> None:
        """The inode is gone (last name unlinked, last handle closed)."""
        self._drop_state(key)
        self.names.pop(key, None)

    def _drop_state(self, key) -> None:
        fs = self.files.pop(key, None)
        if fs is not None:
            fs.close()

    def _open_handles(self, key) -> int:
        return sum(1 for h in self.handles.values() if h.key == key)

    def _fault(self, kind: str, op: str, rel: str, extends: bool = False) -> Fault | None:
        """The first armed fault of ``kind`` that fires on this operation (counted under lock)."""
        for fault in self.faults.values():
            if fault.kind == kind and fault.matches(op, rel, extends) and fault.decide():
                return fault
        return None

    def _slow(self, op: str, rel: str, pid: int) -> None:
        with self._mu:
            fault = self._fault("slow_io", op, rel)
        if fault is not None:
            self.log.emit("fault", pid, kind="slow_io", id=fault.id, op=op, path=rel,
                          delay=fault.delay)
            time.sleep(fault.delay)

    def _io_error(self, op: str, rel: str, pid: int, extends: bool = False, **fields) -> Fault | None:
        fault = self._fault("io_error", op, rel, extends)
        if fault is not None:
            self.log.emit("fault", pid, kind="io_error", id=fault.id, op=op, path=rel,
                          errno=fault.errno_name, **fields)
        return fault

    # -- lifecycle
    def init_with_config(self, conn, config) -> None:
        if config is not None:
            config.use_ino = 1
            config.hard_remove = 1
            config.nullpath_ok = 1
            config.attr_timeout = 0.0
            config.entry_timeout = 0.0
            config.negative_timeout = 0.0
        self.log.emit("mount", backing=self.backing)
        if self._on_init is not None:
            self._on_init()

    def destroy(self, path) -> None:
        with self._mu:
            if not self.down:
                self.sync_all(reason="unmount")
            for key in list(self.files):
                self._drop_state(key)
            self.journal.close()
        self.log.emit("unmount")

    # -- control (called from the control thread, never from a FUSE request)
    def arm(self, spec: dict) -> dict:
        """Arm a fault (see :mod:`chaos.fs.faults`); returns its description with its id."""
        with self._mu:
            fault = parse_fault(self._next_fault, spec)
            self._next_fault += 1
            self.faults[fault.id] = fault
        self.log.emit("arm", **fault.describe())
        return fault.describe()

    def disarm(self, fault_id: int | None = None) -> list[dict]:
        """Disarm one fault (or all); returns their final descriptions."""
        with self._mu:
            ids = list(self.faults) if fault_id is None else [fault_id]
            gone = [self.faults.pop(i).describe() for i in ids if i in self.faults]
        for desc in gone:
            self.log.emit("disarm", **desc)
        return gone

    def power_cut(self, reason: str = "power_cut", pid: int = 0) -> dict:
        """Drop every file's unsynced data, undo uncommitted namespace operations, go down."""
        with self._mu:
            dropped = []
            for key, fs in list(self.files.items()):
                if not fs.is_clean():
                    dropped.append({"path": self.names.get(key, "?"),
                                    "bytes": fs.unsynced_bytes(),
                                    "forgotten_pages": len(fs.pages) - len(fs.dirty),
                                    "size": fs.size, "durable_size": fs.durable_size})
                self._drop_state(key)
            undone = self.journal.undo_all()
            self.down = True
        rec = self.log.emit("power_cut", pid, reason=reason, dropped=dropped, undone=undone)
        return {"dropped": dropped, "undone": undone, "mono": rec["mono"]}

    def power_on(self) -> dict:
        """Leave the down state: operations work again on the durable state."""
        with self._mu:
            was = self.down
            self.down = False
        self.log.emit("power_on", was_down=was)
        return {"was_down": was}

    def sync_all(self, reason: str = "sync") -> dict:
        """Make everything durable (a clean shutdown): flush every file, commit the journal."""
        with self._mu:
            flushed = sum(fs.flush() for fs in self.files.values())
            committed = self.journal.commit_all()
            for key in [k for k, fs in self.files.items() if fs.is_clean()]:
                self._drop_state(key)
        self.log.emit("sync", reason=reason, len=flushed, committed=committed)
        return {"flushed": flushed, "committed": committed}

    def status(self) -> dict:
        """Faults with counters, down flag, unsynced bytes per file, pending namespace ops."""
        with self._mu:
            return {"down": self.down,
                    "faults": [f.describe() for f in self.faults.values()],
                    "unsynced": {self.names.get(k, "?"): fs.unsynced_bytes()
                                 for k, fs in self.files.items() if fs.unsynced_bytes()},
                    "pending_namespace": [e.op + " " + e.path + (" " + e.dest if e.dest else "")
                                          for e in self.journal.entries]}

    # -- attributes
    def getattr(self, path, fh=None):
        with self._mu:
            h = self.handles.get(_fh(fh)) if fh is not None else None
            st = os.fstat(h.fd) if h is not None else os.lstat(self._abs(self._rel(path)))
            attrs = {k: getattr(st, k) for k in STAT_KEYS}
            attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            fs = self.files.get((st.st_dev, st.st_ino)) if stat.S_ISREG(st.st_mode) else None
            if fs is not None:
                attrs["st_size"] = fs.size
                attrs["st_blocks"] = max(st.st_blocks, (fs.size + 511) // 512)
            return attrs

    def access(self, path, amode):
        if not os.access(self._abs(self._rel(path)), amode, follow_symlinks=False):
            raise FuseOSError(errno.EACCES)
        return 0

    def _meta_target(self, path, fh):
        """A descriptor (open file) or backing path for chmod/chown/utimens."""
        h = self.handles.get(_fh(fh)) if fh is not None else None
        if h is not None:
            return h.fd
        if path is None:
            raise FuseOSError(errno.ENOENT)
        return self._abs(self._rel(path))

    def chmod(self, path, mode, fh=None):
        with self._mu:
            self._check_up()
            os.chmod(self._meta_target(path, fh), mode)
        return 0

    def chown(self, path, uid, gid, fh=None):
        with self._mu:
            self._check_up()
            target = self._meta_target(path, fh)
            if isinstance(target, int):
                os.fchown(target, uid, gid)
            else:
                os.chown(target, uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path, times=None, fh=None):
        with self._mu:
            self._check_up()
            target = self._meta_target(path, fh)
            if isinstance(target, int):
                os.utime(target, ns=times)
            else:
                os.utime(target, ns=times, follow_symlinks=False)
        return 0

    def statfs(self, path):
        st = os.statvfs(self.backing)
        return {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                            "f_bavail", "f_files", "f_ffree", "f_favail",
                                            "f_flag", "f_namemax")}

    # -- namespace
    def _dir(self, path, fh) -> str:
        """The relative path of an open directory (the path argument is NULL)."""
        return self.dirs.get(fh, self._rel(path)) if path is None else self._rel(path)

    def readdir(self, path, fh):
        # use_ino: an entry without its inode number would read as d_ino 0, which readdir skips
        where = self._abs(self._dir(path, fh))
        here = os.lstat(where)
        out = [(".", {"st_ino": here.st_ino, "st_mode": here.st_mode}, 0),
               ("..", {"st_ino": 1, "st_mode": stat.S_IFDIR}, 0)]
        with os.scandir(where) as it:
            for entry in it:
                mode = entry.stat(follow_symlinks=False).st_mode
                out.append((entry.name, {"st_ino": entry.inode(), "st_mode": mode}, 0))
        return out

    def readlink(self, path):
        return os.readlink(self._abs(self._rel(path)))

    def opendir(self, path):
        with self._mu:
            fh, self._next_fh = self._next_fh, self._next_fh + 1
            self.dirs[fh] = self._rel(path)
            return fh

    def releasedir(self, path, fh):
        with self._mu:
            self.dirs.pop(fh, None)
        return 0

    def _namespace(self, ev: str, entry: Entry, **fields) -> None:
        self.journal.record(entry)
        self.log.emit(ev, self._caller(), path=entry.path, **fields)

    def _fail(self, op: str, rel: str, **fields) -> None:
        """Raise the armed ``io_error`` for a namespace operation, if one fires on it."""
        fault = self._io_error(op, rel, self._caller(), **fields)
        if fault is not None:
            raise FuseOSError(fault.errno)

    def mknod(self, path, mode, dev):
        rel = self._rel(path)
        with self._mu:
            self._check_up()
            self._fail("mknod", rel)
            os.mknod(self._abs(rel), mode, dev)
            self._namespace("create", Entry("create", rel))
        return 0

    def mkdir(self, path, mode):
        rel = self._rel(path)
        with self._mu:
            self._check_up()
            self._fail("mkdir", rel)
            os.mkdir(self._abs(rel), mode)
            self._namespace("mkdir", Entry("mkdir", rel))
        return 0

    def symlink(self, target, source):
        rel = self._rel(target)
        with self._mu:
            self._check_up()
            self._fail("symlink", rel)
            os.symlink(source, self._abs(rel))
            self._namespace("symlink", Entry("symlink", rel))
        return 0

    def link(self, target, source):
        rel, src = self._rel(target), self._rel(source)
        with self._mu:
            self._check_up()
            self._fail("link", rel, source=src)
            os.link(self._abs(src), self._abs(rel), follow_symlinks=False)
            self._namespace("link", Entry("link", rel), source=src)
        return 0

    def unlink(self, path):
        rel = self._rel(path)
        with self._mu:
            self._check_up()
            self._fail("unlink", rel)
            st = os.lstat(self._abs(rel))
            stash = self.journal.before_remove(rel)
            os.unlink(self._abs(rel))
            key = (st.st_dev, st.st_ino)
            if st.st_nlink <= 1 and not self._open_handles(key):
                self._forget_inode(key)
            self._namespace("unlink", Entry("unlink", rel, stash=stash))
        return 0

    def rmdir(self, path):
        rel = self._rel(path)
        with self._mu:
            self._check_up()
            self._fail("rmdir", rel)
            mode = stat.S_IMODE(os.lstat(self._abs(rel)).st_mode)
            os.rmdir(self._abs(rel))
            self._namespace("rmdir", Entry("rmdir", rel, mode=mode))
        return 0

    def rename(self, old, new, flags: int = 0):
        src, dst = self._rel(old), self._rel(new)
        with self._mu:
            self._check_up()
            if flags & ~RENAME_NOREPLACE:
                raise FuseOSError(errno.EINVAL)  # RENAME_EXCHANGE / WHITEOUT: not supported
            self._fail("rename", src, dest=dst)
            if flags & RENAME_NOREPLACE and os.path.lexists(self._abs(dst)):
                raise FuseOSError(errno.EEXIST)
            st = os.lstat(self._abs(src))
            stash = self.journal.before_remove(dst)
            os.rename(self._abs(src), self._abs(dst))
            key = (st.st_dev, st.st_ino)
            if key in self.names:
                self.names[key] = dst
            self._namespace("rename", Entry("rename", src, dest=dst, stash=stash), dest=dst)
        return 0

    # -- files
    def _open_backing(self, rel: str, flags: int, mode: int = 0o600) -> tuple[int, bool]:
        writable = (flags & os.O_ACCMODE) != os.O_RDONLY
        base = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC
        return os.open(self._abs(rel), base | (flags & (os.O_CREAT | os.O_EXCL)), mode), writable

    def _new_handle(self, fi, fd: int, rel: str, writable: bool) -> int:
        st = os.fstat(fd)
        h = Handle(fd, (st.st_dev, st.st_ino), rel, writable, bool(fi.flags & os.O_DSYNC))
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        self.handles[fh] = h
        self.names[h.key] = rel
        fi.fh = fh
        mapped = bool(self.mmap_re.search(rel))
        fi.direct_io = 0 if mapped else 1
        fi.keep_cache = 1 if mapped else 0
        if writable and fi.flags & os.O_TRUNC:
            self._state(h).truncate(0)
        return 0

    def open(self, path, fi):
        rel = self._rel(path)
        pid = self._caller()
        with self._mu:
            fault = self._io_error("open", rel, pid)
            if fault is not None:
                raise FuseOSError(fault.errno)
            fd, writable = self._open_backing(rel, fi.flags)
            if writable and self.down and fi.flags & os.O_TRUNC:
                os.close(fd)
                raise FuseOSError(errno.EIO)
            return self._new_handle(fi, fd, rel, writable)

    def create(self, path, mode, fi):
        rel = self._rel(path)
        pid = self._caller()
        with self._mu:
            self._check_up()
            fault = self._io_error("open", rel, pid)
            if fault is not None:
                raise FuseOSError(fault.errno)
            existed = os.path.lexists(self._abs(rel))
            fd, _ = self._open_backing(rel, fi.flags | os.O_CREAT | os.O_RDWR, mode)
            if not existed:
                self._namespace("create", Entry("create", rel))
            return self._new_handle(fi, fd, rel, True)

    def read(self, path, size, offset, fi):
        h = self._handle(fi)
        with self._mu:
            fault = self._io_error("read", self._name(h), self._caller(),
                                   off=offset, len=size)
            if fault is not None:
                raise FuseOSError(fault.errno)
            fs = self.files.get(h.key)
            return fs.read(offset, size) if fs is not None else os.pread(h.fd, size, offset)

    def write(self, path, data, offset, fi):
        h = self._handle(fi)
        rel = self._name(h)
        pid = self._caller()
        self._slow("write", rel, pid)
        with self._mu:
            self._check_up()
            if not h.writable:
                raise FuseOSError(errno.EBADF)
            fs = self._state(h)
            fault = self._io_error("write", rel, pid, offset + len(data) > fs.size,
                                   off=offset, len=len(data))
            if fault is not None:
                raise FuseOSError(fault.errno)
            torn = self._fault("torn_write", "write", rel)
            if torn is not None:
                return self._tear(fs, h, rel, offset, data, torn, pid)
            fs.write(offset, data)
            self.log.emit("write", pid, path=rel, off=offset, len=len(data))
            if h.sync:
                fs.flush()
            return len(data)

    def _tear(self, fs: FileState, h: Handle, rel: str, offset: int, data: bytes, fault: Fault,
              pid: int) -> int:
        """The torn write: what the disk had queued before it (this file's earlier writes and
        the namespace journal) lands, then the first ``keep_bytes`` of this write, then the
        power is cut."""
        kept = data[:fault.keep_bytes]
        self.journal.commit_all()
        fs.persist_prefix(offset, kept)
        self.log.emit("fault", pid, kind="torn_write", id=fault.id, path=rel, off=offset,
                      len=len(data), kept=len(kept))
        self.power_cut(reason=f"torn_write {fault.id}", pid=pid)
        return len(data)

    def truncate(self, path, length, fh=None):
        pid = self._caller()
        with self._mu:
            self._check_up()
            h = self.handles.get(_fh(fh)) if fh is not None else None
            self._fail("truncate", self._name(h) if h is not None else self._rel(path),
                       len=length)
            if h is not None:
                rel, fs = self._name(h), self._state(h)
            else:
                rel = self._rel(path)
                fd = os.open(self._abs(rel), os.O_RDWR | os.O_CLOEXEC)
                st = os.fstat(fd)
                key = (st.st_dev, st.st_ino)
                fs = self.files.get(key)
                if fs is None:
                    fs = self.files[key] = FileState(fd)
                    self.names[key] = rel
                else:
                    os.close(fd)
            fs.truncate(length)
            self.log.emit("truncate", pid, path=rel, len=length)
        return 0

    def fallocate(self, path, mode, offset, size, fi):
        if mode:
            raise FuseOSError(errno.EOPNOTSUPP)
        h = self._handle(fi)
        with self._mu:
            self._check_up()
            fs = self._state(h)
            if offset + size > fs.size:
                fs.truncate(offset + size)
        return 0

    def flush(self, path, fi):
        return 0

    def fsync(self, path, datasync, fi):
        h = self._handle(fi)
        rel = self._name(h)
        pid = self._caller()
        self._slow("fsync", rel, pid)
        with self._mu:
            self._check_up()
            fs = self.files.get(h.key)
            fault = self._io_error("fsync", rel, pid, datasync=bool(datasync))
            if fault is not None:
                forgotten = fs.forget() if fs is not None else 0
                self.log.emit("fsync", pid, path=rel, datasync=bool(datasync), len=0,
                              forgotten=forgotten, err=fault.errno_name)
                raise FuseOSError(fault.errno)
            flushed = fs.flush() if fs is not None else 0
            if fs is not None and fs.is_clean():
                self._drop_state(h.key)
            self.log.emit("fsync", pid, path=rel, datasync=bool(datasync), len=flushed)
        return 0

    def fsyncdir(self, path, datasync, fh):
        pid = self._caller()
        with self._mu:
            rel = self._dir(path, fh)
            self._check_up()
            fault = self._io_error("fsync", rel, pid, dir=True)
            if fault is not None:
                self.log.emit("fsyncdir", pid, path=rel, committed=0, err=fault.errno_name)
                raise FuseOSError(fault.errno)
            committed = self.journal.commit_dir(rel)
            self.log.emit("fsyncdir", pid, path=rel, committed=committed)
        return 0

    def release(self, path, fi):
        with self._mu:
            h = self.handles.pop(_fh(fi), None)
            if h is None:
                return 0
            try:
                gone = os.fstat(h.fd).st_nlink == 0
            finally:
                os.close(h.fd)
            if gone and not self._open_handles(h.key):
                self._forget_inode(h.key)
        return 0
