"""Mount the faulty filesystem over a directory for the duration of a run, in its own process.

:class:`FaultyMount` starts ``python -m chaos.fs.daemon``, waits for its ready byte (an event,
not a sleep), and offers the control client. ``close()`` flushes, unmounts lazily and reaps the
daemon; if the process holding the ``FaultyMount`` dies instead, the daemon sees its lifeline
pipe close and unmounts itself. The backing directory always survives as evidence.
:func:`fuse_unavailable_reason` says why FUSE cannot be used here (checkers SKIP with it).
"""

from __future__ import annotations

import ctypes.util
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .control import FsControl, FsControlError

READY_TIMEOUT_S = 60.0     # generous: a loaded 2-core machine starting a Python process
EXIT_TIMEOUT_S = 30.0


def lazy_unmount(mountpoint: str) -> bool:
    """``fusermount3 -uz MOUNTPOINT`` (or fusermount, or umount -l); True if one succeeded."""
    for cmd in (["fusermount3", "-uz", mountpoint], ["fusermount", "-uz", mountpoint],
                ["umount", "-l", mountpoint]):
        if shutil.which(cmd[0]) is None:
            continue
        if subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0:
            return True
    return False


class FsUnavailable(RuntimeError):
    """FUSE cannot be mounted here; the message says why."""


def fuse_unavailable_reason() -> str | None:
    """None when a FUSE mount can be attempted here, else the reason it cannot."""
    if not sys.platform.startswith("linux"):
        return f"FUSE tier needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "FUSE tier needs root (allow_other mounts and role processes of any uid)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (load the fuse module or run the container with --device /dev/fuse)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "no fusermount3 (install the fuse3 package: apt-get install fuse3)"
    if not (ctypes.util.find_library("fuse3") or ctypes.util.find_library("fuse")):
        return "no libfuse (install the fuse3 package: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy is not importable ({exc}): pip install -e '.[fs]'"
    return None


class FaultyMount:
    """A faulty filesystem over ``mountpoint`` backed by ``backing`` (both directories; created if
    missing), logging to ``log_path``. Use as a context manager or call start()/close()."""

    def __init__(self, backing: Path, mountpoint: Path, log_path: Path, *,
                 mmap_pattern: str = r"-shm$"):
        self.backing = Path(backing).absolute()
        self.mountpoint = Path(mountpoint).absolute()
        self.log_path = Path(log_path).absolute()
        self.stash = self.backing.parent / f".{self.backing.name}.fs-stash"
        self.mmap_pattern = mmap_pattern
        # the control socket's private directory (0700) is made by start(); see chaos.fs.control
        self.control_dir: Path | None = None
        self.address = ""
        self.control = FsControl(self.address)
        self.proc: subprocess.Popen | None = None
        self._lifeline_w: int | None = None
        self.stderr_path = self.log_path.with_suffix(".stderr")

    # -- lifecycle
    def start(self) -> "FaultyMount":
        """Mount; returns self once the kernel connection is up.

        Raises:
            FsUnavailable: FUSE cannot be used here, or the mount failed (its stderr quoted).
        """
        reason = fuse_unavailable_reason()
        if reason:
            raise FsUnavailable(reason)
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if os.path.ismount(self.mountpoint):
            raise FsUnavailable(f"{self.mountpoint} is already a mount point")
        self.control_dir = Path(tempfile.mkdtemp(prefix="chaos-fs-"))  # mode 0700, ours
        if len(str(self.control_dir)) > 90:  # a Unix socket path has ~107 bytes
            os.rmdir(self.control_dir)
            self.control_dir = Path(tempfile.mkdtemp(prefix="chaos-fs-", dir="/tmp"))
        self.address = str(self.control_dir / "control.sock")
        self.control = FsControl(self.address)
        ready_r, ready_w = os.pipe()
        life_r, life_w = os.pipe()
        cmd = [sys.executable, "-m", "chaos.fs.daemon", "--backing", str(self.backing),
               "--mountpoint", str(self.mountpoint), "--stash", str(self.stash),
               "--log", str(self.log_path), "--control", self.address,
               "--ready-fd", str(ready_w), "--lifeline-fd", str(life_r),
               f"--mmap-pattern={self.mmap_pattern}"]
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         pass_fds=(ready_w, life_r), cwd="/", env=env,
                                         start_new_session=True)
        os.close(ready_w)
        os.close(life_r)
        self._lifeline_w = life_w
        try:
            ok = self._wait_ready(ready_r)
        finally:
            os.close(ready_r)
        if not ok:
            self.close()
            raise FsUnavailable(f"FUSE mount of {self.mountpoint} failed: {self._stderr_tail()}")
        return self

    def _wait_ready(self, fd: int) -> bool:
        ready, _, _ = select.select([fd], [], [], READY_TIMEOUT_S)
        return bool(ready) and os.read(fd, 1) == b"R"

    def _stderr_tail(self) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace").strip()
        except OSError:
            return "(no stderr)"
        return text[-800:] or "(daemon exited without a message)"

    @property
    def mounted(self) -> bool:
        """True while the daemon runs and the mount point is a mount."""
        return self.proc is not None and self.proc.poll() is None and os.path.ismount(self.mountpoint)

    def _remove_control_dir(self) -> None:
        """Remove the control socket and its private directory (nothing else is in it)."""
        if self.control_dir is None:
            return
        try:
            os.unlink(self.control_dir / "control.sock")
        except OSError:
            pass
        try:
            os.rmdir(self.control_dir)
        except OSError:
            pass
        self.control_dir = None

    def close(self) -> None:
        """Flush (unless down), unmount lazily, reap the daemon. Never raises; idempotent."""
        if self.proc is None:
            self._remove_control_dir()
            return
        if self.proc.poll() is None:
            try:
                if not self.control.status()["down"]:
                    self.control.sync()
            except (FsControlError, KeyError, ValueError):
                pass
            lazy_unmount(str(self.mountpoint))
        if self._lifeline_w is not None:
            os.close(self._lifeline_w)
            self._lifeline_w = None
        try:
            self.proc.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # a process still holds a file on the detached mount
            self.proc.kill()
            self.proc.wait()
        if os.path.ismount(self.mountpoint):
            lazy_unmount(str(self.mountpoint))
        shutil.rmtree(self.stash, ignore_errors=True)
        self._remove_control_dir()
        self.proc = None

    def __enter__(self) -> "FaultyMount":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- control shortcuts
    def arm(self, **spec) -> dict:
        """Arm a fault (see :mod:`chaos.fs.faults`); returns its description with ``id``."""
        return self.control.arm(**spec)

    def disarm(self, fault_id: int | None = None) -> list[dict]:
        """Disarm one fault or all."""
        return self.control.disarm(fault_id)

    def power_cut(self, reason: str = "power_cut") -> dict:
        """Drop every unsynced byte and namespace change; the filesystem is down until power_on."""
        return self.control.power_cut(reason)

    def power_on(self) -> dict:
        """Bring the filesystem back up on its durable state."""
        return self.control.power_on()

    def status(self) -> dict:
        """Armed faults with counters, down flag, unsynced bytes, pending namespace ops."""
        return self.control.status()

    def wait_down(self, timeout: float) -> bool:
        """Wait until a torn write cut the power (polls status); True if it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.control.status()["down"]:
                return True
            time.sleep(0.02)
        return False
