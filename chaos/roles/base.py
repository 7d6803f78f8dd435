"""What every role process shares: history, op recording, the stop flag, opening the store.

A role process is spawned (multiprocessing ``spawn`` context: a fresh interpreter, never a fork
of a process that holds a connection, SPEC §16.1) and runs :func:`chaos.roles.role_main` with a
plain-dict config. It records every operation as ``invoke`` then ``ok``/``fail``/``info``.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hermes_state import (
    DeletedWalGenerationError,
    StateDbReplacedError,
    StorePermissionError,
    WriteContentionError,
)

from ..history import HistoryWriter

#: Errors that prove the operation did not take effect (refused or rolled back): ``fail``.
#: Anything else leaves the outcome unknown: ``info`` (Jepsen's indeterminate result).
DEFINITE_FAILURES: tuple[type[BaseException], ...] = (
    DeletedWalGenerationError,
    StateDbReplacedError,
    WriteContentionError,
    StorePermissionError,
    sqlite3.IntegrityError,
    TypeError,
    ValueError,
)


@dataclass
class RoleConfig:
    """The plain data a role process receives (picklable).

    Attributes:
        role: role name in the scenario; ``kind``: its kind; ``index``: instance number.
        process: ``<role>-<index>``, the history's ``process`` field.
        db_path, home, history_dir, log_path: absolute paths as strings.
        seed: the run seed; the workload RNG is seeded with ``f"{seed}:{process}"``.
        t0: the run's start on CLOCK_MONOTONIC; ``deadline``: monotonic time to stop by.
        workload: the kind's workload parameters (defaults filled by the scenario loader).
        failpoints: ``HERMES_STATE_FAILPOINTS`` value for this process ("" = none).
        synchronous: the store's ``PRAGMA synchronous`` (scenario ``store.synchronous``); ``OFF``
            is forced on the writer connection (the store refuses it) to prove the durability
            checker.
        undumpable: the process makes itself not dumpable before its workload starts.
        ptrace_cap: False: the process drops CAP_SYS_PTRACE from its bounding set first.
        upstream: ``{"version"}`` of an ``upstream`` role (the release it runs), else None.
    """

    role: str
    kind: str
    index: int
    process: str
    db_path: str
    home: str
    history_dir: str
    log_path: str
    seed: int
    t0: float
    deadline: float
    workload: dict = field(default_factory=dict)
    failpoints: str = ""
    synchronous: str = "NORMAL"
    undumpable: bool = False
    ptrace_cap: bool = True
    upstream: dict | None = None


class RoleContext:
    """Per-process helpers handed to a role's ``run(ctx)``."""

    def __init__(self, cfg: RoleConfig, params: Any = None) -> None:
        self.cfg = cfg
        #: the workload parameters (the kind's typed ``Params``, every default filled)
        self.params = params
        self.rng = random.Random(f"{cfg.seed}:{cfg.process}")
        self.history = HistoryWriter(Path(cfg.history_dir) / f"{cfg.process}.jsonl", cfg.process)
        self.stopping = False
        self._payload_seq = 0

    # -- the store
    def open_db(self):
        """``SessionDB(db_path)`` at the scenario's synchronous level (raises what it raises)."""
        from hermes_state import SessionDB

        level = self.cfg.synchronous.upper()
        if level == "OFF":  # a store that never syncs: its WAL sync thread off too (issue 24)
            from hermes_state.testing import WAL_SYNC_ENV_VAR

            os.environ[WAL_SYNC_ENV_VAR] = "off"
        db = SessionDB(self.cfg.db_path, synchronous="NORMAL" if level == "OFF" else level)
        if level == "OFF":
            db.connection.conn.execute("PRAGMA synchronous=OFF")
        return db

    # -- lifecycle
    def should_stop(self) -> bool:
        return self.stopping or time.monotonic() >= self.cfg.deadline

    def sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking early when asked to stop."""
        end = time.monotonic() + max(0.0, seconds)
        while not self.should_stop():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def next_payload_id(self) -> str:
        """A run-unique payload id ``<process>-<n>`` for the next appended message."""
        self._payload_seq += 1
        return f"{self.cfg.process}-{self._payload_seq}"

    # -- recording
    def op(self, name: str, fn: Callable[[], Any], *, on_fail: Callable[[BaseException], dict]
           | None = None, definite: tuple[type[BaseException], ...] = DEFINITE_FAILURES,
           **fields: Any) -> tuple[bool, Any]:
        """Run one operation and record ``invoke`` then ``ok``/``fail``/``info``.

        Args:
            name: the ``op`` field; ``fn``: the call; ``fields``: e.g. ``payload_id``.
            on_fail: called with the exception before the ``fail`` record; returns extra fields
                (the gateway spools the refused message here and returns ``{"spooled": True}``).
            definite: exception types recorded as ``fail``; others are ``info``.
        Returns:
            ``(True, value)`` or ``(False, exception)``. Never raises (except KeyboardInterrupt).
            A scalar value is recorded as the ``ok`` record's ``value``, a dict as its ``result``.
        """
        op_id = self.history.next_op_id()
        start = time.monotonic()
        self.history.record("invoke", op=name, op_id=op_id, **fields)
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - every outcome is recorded
            latency = time.monotonic() - start
            kind = "fail" if isinstance(exc, definite) else "info"
            extra = {}
            if on_fail is not None:
                try:
                    extra = on_fail(exc) or {}
                except Exception as spool_exc:  # noqa: BLE001
                    extra = {"spool_error": repr(spool_exc)}
            self.history.record(kind, op=name, op_id=op_id, latency_s=latency,
                                error=type(exc).__name__, message=str(exc)[:800], **fields,
                                **extra)
            return False, exc
        latency = time.monotonic() - start
        extra = {"result": value} if isinstance(value, dict) else {}
        self.history.record("ok", op=name, op_id=op_id, latency_s=latency,
                            value=value if isinstance(value, (int, float, str, bool)) else None,
                            **fields, **extra)
        return True, value
