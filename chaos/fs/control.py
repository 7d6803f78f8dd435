"""The run-time control channel of a mounted faulty filesystem: JSON lines over a Unix socket.

The socket is a file of mode 0600 in a directory of mode 0700 owned by the runner (never in the
abstract namespace, which any local user can reach), and the server checks every peer's
credentials (``SO_PEERCRED``): only the runner's uid or root may send a command (issue 22
item 8: any user could cut the power of a root run). The client checks the server's the same way.

Request ``{"cmd": NAME, ...}``, reply ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error": MESSAGE}``. Commands: ``ping``, ``status``, ``arm`` (``fault``: a spec, see
:mod:`chaos.fs.faults`), ``disarm`` (``id`` or none for all), ``power_cut``, ``power_on``, ``sync``.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import stat
import struct
import threading
from pathlib import Path

COMMANDS = ("ping", "status", "arm", "disarm", "power_cut", "power_on", "sync")
#: How long a refused peer may take to send its request before the connection is closed (s).
REFUSAL_READ_S = 5.0


class FsControlError(RuntimeError):
    """The filesystem refused a control command (bad fault spec) or cannot be reached."""


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (``SO_PEERCRED``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def trusted(uid: int) -> bool:
    """Only this process's uid and root may command (or answer as) a faulty filesystem."""
    return uid in (os.getuid(), 0)


def private_dir_problem(directory: Path) -> str | None:
    """Why ``directory`` cannot hold the control socket (not a directory of ours, mode 0700),
    or None."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return (f"{directory} must be a directory of uid {os.getuid()} with mode 0700 "
                f"(it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})")
    return None


def _dispatch(ops, req: dict):
    cmd = req.get("cmd")
    if cmd == "ping":
        return "pong"
    if cmd == "status":
        return ops.status()
    if cmd == "arm":
        return ops.arm(req.get("fault"))
    if cmd == "disarm":
        return ops.disarm(req.get("id"))
    if cmd == "power_cut":
        return ops.power_cut(reason=str(req.get("reason", "power_cut")))
    if cmd == "power_on":
        return ops.power_on()
    if cmd == "sync":
        return ops.sync_all()
    raise ValueError(f"cmd: expected one of {', '.join(COMMANDS)}, got {cmd!r}")


def serve(ops, address: str) -> socketserver.BaseServer:
    """Serve ``ops`` on the Unix socket at path ``address`` (in a private directory: mode 0700,
    ours) in a daemon thread; the socket file is made 0600. Returns the server.

    Raises:
        FsControlError: the directory is not private (a planted or shared directory).
    """
    path = Path(address)
    problem = private_dir_problem(path.parent)
    if problem:
        raise FsControlError(f"control socket not created: {problem}")

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            uid = peer_uid(self.request)
            if not trusted(uid):
                reply = {"ok": False, "error": f"refused: peer uid {uid} is neither the runner's "
                         f"(uid {os.getuid()}) nor root"}
                self.request.settimeout(REFUSAL_READ_S)
                try:  # read its request first, so the refusal is what it reads back
                    self.rfile.readline(65536)
                    self.wfile.write((json.dumps(reply) + "\n").encode())
                except OSError:
                    pass
                return
            for line in self.rfile:
                try:
                    reply = {"ok": True, "result": _dispatch(ops, json.loads(line))}
                except (ValueError, TypeError, OSError) as exc:
                    reply = {"ok": False, "error": str(exc)}
                self.wfile.write((json.dumps(reply) + "\n").encode())
                self.wfile.flush()

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    old = os.umask(0o177)  # the socket is born 0600 (chmod below too: no window)
    try:
        server = Server(str(path), Handler)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    threading.Thread(target=server.serve_forever, name="fs-control", daemon=True).start()
    return server


class FsControl:
    """Client of a filesystem's control socket (``address``: its path)."""

    def __init__(self, address: str, timeout: float = 120.0):
        self.address = address
        self.timeout = timeout

    def call(self, cmd: str, **fields):
        """Send one command; returns its result. Raises ``FsControlError``."""
        req = json.dumps({"cmd": cmd, **fields}) + "\n"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect(self.address)
                uid = peer_uid(sock)
                if not trusted(uid):
                    raise FsControlError(f"faulty filesystem control {self.address!r}: served "
                                         f"by uid {uid}, neither ours nor root: not used")
                sock.sendall(req.encode())
                with sock.makefile("rb") as f:
                    line = f.readline()
        except OSError as exc:
            raise FsControlError(f"faulty filesystem control {self.address!r}: {exc}") from None
        if not line:
            raise FsControlError(f"faulty filesystem control {self.address!r}: no reply")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise FsControlError(reply.get("error", "refused"))
        return reply["result"]

    def arm(self, **spec) -> dict:
        """Arm a fault; returns its description (``id`` to disarm it)."""
        return self.call("arm", fault=spec)

    def disarm(self, fault_id: int | None = None) -> list[dict]:
        """Disarm fault ``fault_id`` or all; returns their final counters."""
        return self.call("disarm", id=fault_id)

    def power_cut(self, reason: str = "power_cut") -> dict:
        """Drop all unsynced data and go down. Returns ``{"dropped", "undone", "mono"}``."""
        return self.call("power_cut", reason=reason)

    def power_on(self) -> dict:
        """Accept changes again after a power cut."""
        return self.call("power_on")

    def sync(self) -> dict:
        """Make everything durable now."""
        return self.call("sync")

    def status(self) -> dict:
        """Armed faults with counters, down flag, unsynced bytes, pending namespace ops."""
        return self.call("status")
