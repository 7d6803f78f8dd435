"""Progress display of the long operator commands (issue 18): rich, on stderr, after 2 s.

The store's long operations take plain callbacks (a phase name, done and total counts); this
module turns them into a ``rich`` progress line on **stderr**, never stdout, so ``--json``
output and redirected exports stay byte-clean. It is shown only when stderr is a terminal
(and the command was not asked for ``--json``), or when ``--progress`` forces it (for a log
file or a CI job), and only once the command has run for :data:`DELAY_S`: a short command
prints nothing. A spinner and the elapsed time keep moving while SQLite works inside one long
statement (``VACUUM``, ``quick_check``): rich refreshes from its own thread and ``sqlite3``
releases the GIL while a statement runs.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

#: Seconds a command runs before its progress line appears.
DELAY_S = 2.0


def wanted(args: Any) -> bool:
    """``--progress`` forces it; otherwise stderr is a TTY and no ``--json`` was asked.

    Never without ``rich`` (a store-only install: ``pip install hermes-state`` has psutil
    alone, ``hermes-state[chaos]`` adds rich): the command runs the same, without the line.
    """
    if getattr(args, "progress", False):
        return _have_rich()
    if getattr(args, "json", False):
        return False
    try:
        return sys.stderr.isatty() and _have_rich()
    except (AttributeError, ValueError):
        return False


def _have_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


class ProgressDisplay:
    """A progress line that appears after ``delay`` seconds, or never when disabled.

    Use as a context manager; :meth:`phase` names what runs now (optionally with a total),
    :meth:`update` moves the count. Both are cheap and thread-safe, and do nothing when the
    display is off.
    """

    def __init__(self, enabled: bool, label: str, delay: float | None = None,
                 stream: Any = None) -> None:
        self.enabled = enabled
        self.delay = DELAY_S if delay is None else delay
        self.stream = stream
        self._lock = threading.Lock()
        self._label = label
        self._done: int | None = None
        self._total: int | None = None
        self._progress = None
        self._task = None
        self._timer: threading.Timer | None = None
        self._closed = False
        self.shown = False
        self.t0 = time.monotonic()

    def __enter__(self) -> "ProgressDisplay":
        if self.enabled and self.delay <= 0:
            self._show()
        elif self.enabled:
            self._timer = threading.Timer(self.delay, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._progress is not None:
                self._refresh()
                self._progress.stop()

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with self._lock:
            if self._closed:
                return
            console = Console(file=self.stream or sys.stderr, stderr=self.stream is None)
            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                      BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=console, transient=False)
            self._task = self._progress.add_task(self._label, total=self._total,
                                                 completed=self._done or 0)
            self._progress.start()
            self.shown = True

    def _refresh(self) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=self._label, total=self._total,
                                  completed=self._done or 0)

    def phase(self, label: str, total: int | None = None) -> None:
        """Start a new phase: ``label``, its ``total`` (None = unknown: a spinner only)."""
        if not self.enabled:
            return
        with self._lock:
            self._label, self._total, self._done = label, total, 0
            self._refresh()

    def update(self, done: int, total: int | None = None) -> None:
        """``done`` units of the current phase (and its ``total`` when it is known now)."""
        if not self.enabled:
            return
        with self._lock:
            self._done = done
            if total is not None:
                self._total = total
            self._refresh()

    def __call__(self, label: str, done: int | None = None, total: int | None = None) -> None:
        """The store's callback shape: ``progress(phase, done, total)``."""
        if not self.enabled:
            return
        with self._lock:
            if label != self._label:
                self._label, self._done, self._total = label, 0, None
            if done is not None:
                self._done = done
            if total is not None:
                self._total = total
            self._refresh()


def progress_display(args: Any, label: str) -> ProgressDisplay:
    """The display for a CLI command with parsed ``args`` (see :func:`wanted`)."""
    return ProgressDisplay(wanted(args), label)
