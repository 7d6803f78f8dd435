"""How loaded the machine is, measured, so that time bounds about the machine scale with it
(issue 27 item 5).

A bound such as ``no_lockup``'s 5 s is about the machine, not the store: on a 2-core machine at
a load of 20, the process holding SQLite's write lock waits its turn for a CPU and everybody
waits with it. Such a bound is multiplied by the run's **load factor**; a bound about the store
(a retry sleep's 20-150 ms draw, 15 attempts, a lost write) never is.

The factor comes from a CPU calibration: this thread spins for :data:`CALIBRATION_CPU_S` of its
own CPU time and measures the wall time that took. On an idle core the ratio wall/CPU is 1; when
runnable processes outnumber the cores it is about their count per core, which is exactly the
stretch a descheduled lock owner's hold suffers. The runner measures it twice (before the run's
clock starts, with every role process launched and idle, and after the roles stopped) and
records each as a ``load`` history record; the factor is the larger ratio, at least 1 and at
most :data:`MAX_LOAD_FACTOR` (a bound is stretched, never made meaningless). ``loadavg/ncpu``
is recorded beside it for the reader, not used: it lags by a minute and counts processes in
uninterruptible sleep (a FUSE wait) as load.
"""

from __future__ import annotations

import os
import time

#: CPU seconds each calibration spins (in slices of :data:`_SLICE_S`).
CALIBRATION_CPU_S = 0.08
_SLICE_S = 0.004
#: The factor never exceeds this: a bound may stretch 3x on a loaded machine, no more.
MAX_LOAD_FACTOR = 3.0
#: The ``type`` of the history records the runner writes with each measurement.
LOAD_RECORD = "load"


def calibrate(cpu_s: float = CALIBRATION_CPU_S) -> dict:
    """Spin this thread for ``cpu_s`` CPU seconds; ``{"cpu_s", "wall_s", "ratio"}`` (wall time
    per CPU second: 1 on an idle core, about the runnable processes per core when loaded)."""
    c0, w0 = time.thread_time(), time.monotonic()
    x = 0
    while time.thread_time() - c0 < cpu_s:
        end = time.thread_time() + _SLICE_S
        while time.thread_time() < end:
            x += 1
    cpu, wall = time.thread_time() - c0, time.monotonic() - w0
    return {"cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
            "ratio": round(max(1.0, wall / cpu) if cpu > 0 else 1.0, 3)}


def loadavg_per_cpu() -> float | None:
    """The 1-minute load average per CPU, or None where the OS has none."""
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 3)
    except (OSError, AttributeError):
        return None


def measure(when: str) -> dict:
    """One measurement: :func:`calibrate` plus ``loadavg_per_cpu`` and ``when`` (a label)."""
    return {"when": when, **calibrate(), "loadavg_per_cpu": loadavg_per_cpu(),
            "cpus": os.cpu_count()}


def factor_of(measurements: list[dict]) -> float:
    """The load factor of ``measurements`` (:func:`measure` dicts): the largest ``ratio``,
    clamped to [1, :data:`MAX_LOAD_FACTOR`]; 1 without any."""
    ratios = [float(m["ratio"]) for m in measurements
              if isinstance(m, dict) and isinstance(m.get("ratio"), (int, float))]
    return round(min(MAX_LOAD_FACTOR, max([1.0] + ratios)), 3)


_FIELDS = ("when", "ratio", "cpu_s", "wall_s", "loadavg_per_cpu", "cpus")


def load_summary(history: list[dict]) -> dict:
    """``{"factor", "measurements": [{when, ratio, cpu_s, wall_s, loadavg_per_cpu, cpus}]}``
    of a run's history, for ``results.json``."""
    found = [r for r in history if r.get("type") == LOAD_RECORD]
    return {"factor": factor_of(found),
            "measurements": [{k: r.get(k) for k in _FIELDS} for r in found]}


def history_load_factor(history: list[dict]) -> float:
    """The load factor recorded in a run's history (its ``load`` records); 1 when it has none
    (a hand-made history, or a run before issue 27: bounds are not scaled)."""
    return factor_of([r for r in history if r.get("type") == LOAD_RECORD])
