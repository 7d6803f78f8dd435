"""Checkers: invariants judged on a run's history and final store (SPEC §16.3).

``CHECKERS`` maps a checker name (the key used under a scenario's ``expect:``) to
``check(ctx: CheckContext, params: dict) -> Verdict``. Each checker lives in its own module, is a
pure function of the history and the final files (it starts no process and works on copies), and
documents which sentence of SPEC §16.3 it enforces.

:func:`run_checkers` runs the ``expect`` mapping in order. A checker that raises yields a FAIL
verdict carrying the traceback summary in ``figures["error"]``: a checker bug must never look
green. A name with no checker is a FAIL too (a scenario that expects an invariant nobody checks
tested nothing).
"""

from __future__ import annotations

import time
import traceback
from typing import Callable

from . import (
    checkpoint_cadence,
    error_taxonomy,
    fixture_preserved,
    integrity,
    latency,
    liveness_after_heal,
    maintenance_refusal,
    no_lockup,
    no_lost_writes,
    recovery,
    retry_jitter,
    single_wal_generation,
    stale_wal_refusal,
)
from .base import FAIL, INCONCLUSIVE, PASS, SKIPPED, CheckContext, Verdict

CHECKERS: dict[str, Callable[[CheckContext, dict], Verdict]] = {
    "no_lost_writes": no_lost_writes.check,
    "stale_wal_refusal": stale_wal_refusal.check,
    "integrity": integrity.check,
    "retry_jitter": retry_jitter.check,
    "checkpoint_cadence": checkpoint_cadence.check,
    "recovery": recovery.check,
    "fixture_preserved": fixture_preserved.check,
    "maintenance_refusal": maintenance_refusal.check,
    "no_lockup": no_lockup.check,
    "latency": latency.check,
    "single_wal_generation": single_wal_generation.check,
    "liveness_after_heal": liveness_after_heal.check,
    "error_taxonomy": error_taxonomy.check,
}


def run_checkers(ctx: CheckContext, expect: dict[str, dict]) -> list[Verdict]:
    """Run every checker named in ``expect`` (in its order) with its params.

    Args:
        ctx: the run's history and files.
        expect: ``{checker name: params dict or None}``.
    Returns:
        One :class:`Verdict` per entry; never raises for a checker's failure.
    """
    out: list[Verdict] = []
    for name, params in (expect or {}).items():
        fn = CHECKERS.get(name)
        if fn is None:
            out.append(Verdict(name, FAIL, f"no checker named {name!r} (known: "
                               f"{', '.join(sorted(CHECKERS))})", {"error": "unknown checker"}))
            continue
        t0 = time.monotonic()
        try:
            verdict = fn(ctx, dict(params or {}))
            if not isinstance(verdict, Verdict):
                raise TypeError(f"checker {name} returned {type(verdict).__name__}, not Verdict")
        except Exception as exc:  # noqa: BLE001 - a crashing checker is a FAIL, never green
            tb = traceback.format_exc()
            verdict = Verdict(name, FAIL,
                              f"checker crashed: {type(exc).__name__}: "
                              f"{(str(exc).splitlines() or [''])[0]}",
                              {"error": tb[-4000:]})
        verdict.figures.setdefault("elapsed_s", round(time.monotonic() - t0, 3))
        out.append(verdict)
    return out


__all__ = ["CHECKERS", "run_checkers", "CheckContext", "Verdict", "PASS", "FAIL",
           "INCONCLUSIVE", "SKIPPED"]
