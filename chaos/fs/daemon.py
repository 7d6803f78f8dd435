"""The faulty filesystem's own process: ``python -m chaos.fs.daemon`` (started by
:class:`chaos.fs.mount.FaultyMount`, not by hand).

It mounts :class:`~chaos.fs.ops.FaultyOps` with libfuse (mfusepy) in the foreground, serves the
control socket, writes one byte to ``--ready-fd`` once the kernel connection is up, and watches
``--lifeline-fd``: end of file there means the process that mounted it died, and the daemon
unmounts lazily (``fusermount3 -uz``) so no mount outlives its run. ``auto_unmount`` covers the
daemon itself being killed (libfuse leaves a fusermount3 watchdog). At a clean unmount every
unsynced byte is flushed to the backing directory, which is kept.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m chaos.fs.daemon")
    p.add_argument("--backing", required=True)
    p.add_argument("--mountpoint", required=True)
    p.add_argument("--stash", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--ready-fd", type=int, required=True)
    p.add_argument("--lifeline-fd", type=int, required=True)
    p.add_argument("--mmap-pattern", default=r"-shm$")
    return p.parse_args(argv)


def main(argv=None) -> int:
    """Mount and serve until unmounted; 0 on a clean unmount."""
    args = _parse(argv)
    import mfusepy

    from .control import serve
    from .mount import lazy_unmount
    from .fslog import FsLog
    from .ops import FaultyOps

    class _Fuse(mfusepy.FUSE):
        """mfusepy drops renameat2 flags and the file handle of ftruncate/fchmod/fchown/futimens
        (with nullpath_ok their path is NULL): pass them on."""

        def _path(self, path):
            return None if path is None else path.decode(self.encoding, self.errors)

        def rename_fuse_3(self, old, new, flags):
            return self.operations.rename(self._path(old), self._path(new), flags)

        def truncate_fuse_3(self, path, length, fip):
            return self.operations.truncate(self._path(path), length, fip.contents if fip else None)

        def chmod_fuse_3(self, path, mode, fip):
            return self.operations.chmod(self._path(path), mode, fip.contents if fip else None)

        def chown_fuse_3(self, path, uid, gid, fip):
            uid = -1 if mfusepy.c_uid_t(uid + 1).value == 0 else uid
            gid = -1 if mfusepy.c_gid_t(gid + 1).value == 0 else gid
            return self.operations.chown(self._path(path), uid, gid, fip.contents if fip else None)

        def utimens_fuse_3(self, path, buf, fip):
            times = None
            if buf:
                times = (mfusepy.time_of_timespec(buf.contents.actime, use_ns=True),
                         mfusepy.time_of_timespec(buf.contents.modtime, use_ns=True))
            return self.operations.utimens(self._path(path), times, fip.contents if fip else None)

    def ready():
        try:
            os.write(args.ready_fd, b"R")
            os.close(args.ready_fd)
        except OSError:
            pass

    def lifeline():
        try:
            while os.read(args.lifeline_fd, 64):
                pass
        except OSError:
            pass
        log.emit("lifeline_lost")
        lazy_unmount(args.mountpoint)

    log = FsLog(Path(args.log))
    ops = FaultyOps(Path(args.backing), Path(args.stash), log, args.mmap_pattern, on_init=ready)
    server = serve(ops, args.control)
    threading.Thread(target=lifeline, name="fs-lifeline", daemon=True).start()
    try:
        _Fuse(ops, args.mountpoint, raw_fi=True, foreground=True, allow_other=True,
              default_permissions=True, auto_unmount=True, fsname="chaos-faultyfs",
              subtype="faulty")
    finally:
        server.shutdown()
        server.server_close()
        for remove in (os.unlink, os.rmdir):  # the socket, then its private directory
            try:
                remove(args.control if remove is os.unlink else os.path.dirname(args.control))
            except OSError:
                pass
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
