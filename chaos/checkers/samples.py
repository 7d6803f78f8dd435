"""Reading the sampler's ``sample`` records and checker parameters (SPEC §16.3).

The record format is documented in :mod:`chaos.sampler`. Checkers use samples for what no role
can say about itself: which process held which ``-wal`` inode, who owned the write lock, who was
stopped or waiting at a given moment.
"""

from __future__ import annotations

import bisect
from typing import Iterable


def seconds(value, name: str) -> float | None:
    """A checker duration parameter in seconds (a number, or '5s'/'500ms'/'1m'); None stays None.

    Raises:
        ValueError: not a duration (names the parameter).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name}: {value!r} is not a duration")
    if isinstance(value, (int, float)):
        return float(value)
    from ..scenario import parse_duration  # lazy: the scenario module is large

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


class Samples:
    """The ``sample`` records of a history, sorted by ``t``, with lookups by time.

    Attributes:
        records: the samples that carry data (``unavailable`` ones excluded).
        unavailable: the reason the sampler could not sample (no ``/proc``), else None.
    """

    def __init__(self, history: Iterable[dict]) -> None:
        recs = [r for r in history if r.get("type") == "sample"]
        self.unavailable = next((r["unavailable"] for r in recs if r.get("unavailable")), None)
        self.records = sorted((r for r in recs if not r.get("unavailable")),
                              key=lambda r: float(r.get("t", 0.0)))
        self._ts = [float(r.get("t", 0.0)) for r in self.records]

    def __len__(self) -> int:
        return len(self.records)

    def at_or_after(self, t: float) -> dict | None:
        """The first sample taken at or after ``t`` (None past the end)."""
        i = bisect.bisect_left(self._ts, t)
        return self.records[i] if i < len(self.records) else None

    def at_or_before(self, t: float) -> dict | None:
        """The last sample taken at or before ``t`` (None before the first)."""
        i = bisect.bisect_right(self._ts, t)
        return self.records[i - 1] if i > 0 else None

    def nearest(self, t: float) -> dict | None:
        """The sample closest in time to ``t``."""
        a, b = self.at_or_before(t), self.at_or_after(t)
        if a is None or b is None:
            return a or b
        return a if t - float(a["t"]) <= float(b["t"]) - t else b

    def between(self, t0: float, t1: float) -> list[dict]:
        """Samples with ``t0 <= t <= t1``."""
        return self.records[bisect.bisect_left(self._ts, t0):bisect.bisect_right(self._ts, t1)]


def observed_states(history: Iterable[dict]) -> dict[str, dict]:
    """``{state: first sample showing it}`` for the sampled states a scenario may require in
    ``must_observe`` (:data:`chaos.scenario.SAMPLED_STATES`): ``retired_wal_held`` (a role
    process holds a ``-wal`` that is not the one at the path), ``write_lock_held`` (someone owns
    the WAL write lock), ``lock_wait`` (a process waits: a blocked lock request, or a write in
    flight while another process owns the write lock)."""
    out: dict[str, dict] = {}
    for s in Samples(history).records:
        if "retired_wal_held" not in out and any(
                p.get("wal") and not p["wal"].get("current") for p in s.get("procs") or []):
            out["retired_wal_held"] = s
        if "write_lock_held" not in out and s.get("write_lock"):
            out["write_lock_held"] = s
        if "lock_wait" not in out and s.get("waiting"):
            out["lock_wait"] = s
    return out


def proc_entry(sample: dict | None, process: str) -> dict | None:
    """The role process's own entry (not a descendant's) in ``sample``'s ``procs``."""
    for p in (sample or {}).get("procs") or []:
        if p.get("process") == process and p.get("parent") is None:
            return p
    return None


def holding(entry: dict) -> list[str]:
    """Which store files a ``procs`` entry holds: ``["db", "wal (retired)", ...]``."""
    out = []
    for key in ("db", "wal", "shm"):
        f = entry.get(key)
        if f:
            out.append(key if f.get("current") else f"{key} (retired)")
    return out


def moment(sample: dict | None) -> dict:
    """What a sample says about one moment, for evidence: holders, write-lock owner, waiters,
    stopped processes and the WAL size."""
    if sample is None:
        return {"sample": None, "note": "no sample near this moment"}
    holders = []
    stopped = []
    for p in sample.get("procs") or []:
        files = holding(p)
        if files:
            who = p["process"] + (f" (child pid {p['pid']})" if p.get("parent") else "")
            holders.append(f"PID {p['pid']} {who}: {', '.join(files)}")
        if p.get("status") == "stopped":
            stopped.append(f"PID {p['pid']} {p['process']}")
    wl = sample.get("write_lock")
    owner = None if not wl else (f"PID {wl['pid']} {wl.get('process') or '(not a role)'}"
                                 f" ({wl.get('command', '?')})")
    return {"sample_t": sample.get("t"), "seq": sample.get("seq"), "holders": holders,
            "write_lock_owner": owner, "waiting": sample.get("waiting") or [],
            "stopped": stopped, "wal_bytes": sample.get("wal_bytes")}
