"""The run-time control channel of a mounted faulty filesystem: JSON lines over a Unix socket in
the abstract namespace (no path under the mount, no length limit from a deep tmp dir).

Request ``{"cmd": NAME, ...}``, reply ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error": MESSAGE}``. Commands: ``ping``, ``status``, ``arm`` (``fault``: a spec, see
:mod:`chaos.fs.faults`), ``disarm`` (``id`` or none for all), ``power_cut``, ``power_on``, ``sync``.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading

COMMANDS = ("ping", "status", "arm", "disarm", "power_cut", "power_on", "sync")


class FsControlError(RuntimeError):
    """The filesystem refused a control command (bad fault spec) or cannot be reached."""


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
    """Start serving ``ops`` on abstract socket ``address`` in a daemon thread; returns the server."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            for line in self.rfile:
                try:
                    reply = {"ok": True, "result": _dispatch(ops, json.loads(line))}
                except (ValueError, TypeError, OSError) as exc:
                    reply = {"ok": False, "error": str(exc)}
                self.wfile.write((json.dumps(reply) + "\n").encode())
                self.wfile.flush()

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    server = Server("\0" + address, Handler)
    threading.Thread(target=server.serve_forever, name="fs-control", daemon=True).start()
    return server


class FsControl:
    """Client of a filesystem's control socket (``address`` without the leading NUL)."""

    def __init__(self, address: str, timeout: float = 120.0):
        self.address = address
        self.timeout = timeout

    def call(self, cmd: str, **fields):
        """Send one command; returns its result. Raises ``FsControlError``."""
        req = json.dumps({"cmd": cmd, **fields}) + "\n"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect("\0" + self.address)
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
