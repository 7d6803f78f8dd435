"""The process side of :class:`hermes_state.testing.upstream_release.UpstreamProcess`.

Run as ``python -S -E upstream_driver.py SITE DEPS``: the standard library only, then the
unpacked upstream release (``SITE``) and its few dependencies (``DEPS``) first on ``sys.path``;
it imports upstream's ``hermes_state`` (never this package, which is not on the path) and
answers JSON lines on stdin with JSON lines on stdout: ``{"ok": true, "value": ...}`` or
``{"ok": false, "error": "<class>", "message": "..."}``. The first line is a hello
(``{"file", "schema_version"}``).

Requests: ``{"op": "open", "db_path", "kwargs"}``, ``{"op": "call", "method", "args",
"kwargs"}``, ``{"op": "run", "script", "kwargs"}`` (a workload run here, timed here: see
:data:`SCRIPTS`), ``{"op": "close"}``, ``{"op": "exit"}``.

``HERMES_UPSTREAM_CRASH='{"pattern": REGEX, "nth": N}'`` arms a crash: every connection the
release opens gets an SQLite trace callback that SIGKILLs this process when the N-th statement
matching REGEX is about to run (a failpoint in code we do not own). The process asks the kernel
to kill it when its parent dies (PR_SET_PDEATHSIG), so it never outlives a killed chaos role.
"""

import json
import os
import re
import signal
import sqlite3
import sys
import time
import traceback


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the parent's kill reaps us instead
        pass
    if os.getppid() == 1:  # the parent is already gone
        raise SystemExit(1)


def _arm_crash() -> None:
    spec = os.environ.get("HERMES_UPSTREAM_CRASH")
    if not spec:
        return
    cfg = json.loads(spec)
    pattern, nth = re.compile(cfg["pattern"], re.I), int(cfg.get("nth", 1))
    seen = [0]
    connect = sqlite3.connect

    def trace(sql: str) -> None:
        if pattern.search(sql or ""):
            seen[0] += 1
            if seen[0] >= nth:
                sys.stderr.write(f"upstream crash at statement {seen[0]}: {sql[:200]}\n")
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(10)

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(trace)
        return conn

    sqlite3.connect = traced


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    try:
        return {k: _jsonable(value[k]) for k in value.keys()}  # sqlite3.Row
    except Exception:  # noqa: BLE001
        return str(value)


def _store_facts(path: str) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    return {"schema_version": version, "journal_mode": mode}


# ------------------------------------------------------------------ workloads run in-process
def _append(db, session_id, n, size=200, tool_every=0, prefix="up"):
    """``n`` appends to ``session_id``; returns per-call latencies (s)."""
    pad = "lorem ipsum dolor sit amet " * (size // 27 + 1)
    out = []
    for i in range(n):
        kw = {}
        if tool_every and i % tool_every == 0:
            kw["tool_calls"] = [{"id": f"c{i}", "type": "function",
                                 "function": {"name": "terminal", "arguments": "{}"}}]
        t = time.perf_counter()
        db.append_message(session_id, "assistant" if i % 2 else "user",
                          f"{prefix}{i} {pad[:size]}", **kw)
        out.append(time.perf_counter() - t)
    return out


def _timed(db, method, args=(), kwargs=None, repeat=1):
    """``repeat`` calls of ``db.method``; returns their latencies (s) and the last result size."""
    fn = getattr(db, method)
    out, size = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        res = fn(*args, **(kwargs or {}))
        out.append(time.perf_counter() - t)
        size = len(res) if hasattr(res, "__len__") else None
    return {"latencies": out, "size": size}


def _pragma(db, sql):
    """A PRAGMA on the release's own connection (the benchmarks' same-durability rows)."""
    conn = getattr(db, "_conn", None)
    if conn is None:
        raise RuntimeError("this release has no single connection to set a pragma on")
    with getattr(db, "_lock", None) or _NoLock():
        return _jsonable(conn.execute(sql).fetchall())


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


SCRIPTS = {"append": _append, "timed": _timed, "pragma": _pragma}


def main() -> int:
    _die_with_parent()
    site, deps = sys.argv[1], sys.argv[2]
    sys.path[:0] = [site, deps]
    _arm_crash()
    out = sys.stdout

    def reply(**msg):
        out.write(json.dumps(msg, default=str) + "\n")
        out.flush()

    try:
        import hermes_state as upstream
    except BaseException as exc:  # noqa: BLE001
        reply(ok=False, error=type(exc).__name__, message=traceback.format_exc()[-2000:])
        return 1
    reply(ok=True, value={"file": upstream.__file__,
                          "schema_version": getattr(upstream, "SCHEMA_VERSION", None)})
    db = None
    path = None
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        try:
            if op == "open":
                t = time.perf_counter()
                path = req["db_path"]
                from pathlib import Path

                db = upstream.SessionDB(db_path=Path(path), **(req.get("kwargs") or {}))
                value = {**_store_facts(path), "seconds": time.perf_counter() - t}
            elif op == "call":
                value = _jsonable(getattr(db, req["method"])(*req.get("args", []),
                                                             **(req.get("kwargs") or {})))
            elif op == "run":
                value = _jsonable(SCRIPTS[req["script"]](db, **(req.get("kwargs") or {})))
            elif op in ("close", "exit"):
                if db is not None:
                    db.close()
                    db = None
                value = _store_facts(path) if path else None
            else:
                raise ValueError(f"unknown op {op!r}")
        except BaseException as exc:  # noqa: BLE001 - every outcome goes back to the caller
            reply(ok=False, error=type(exc).__name__, message=str(exc)[:2000])
            if op == "exit":
                return 1
            continue
        reply(ok=True, value=value)
        if op == "exit":
            return 0
    if db is not None:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
