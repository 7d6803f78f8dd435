"""Checkers: invariants judged on a run's history and final store (SPEC §16.3).

``CHECKERS`` maps a checker name (the key used under a scenario's ``expect:``) to a
:class:`Checker`: its ``Params`` and ``check(ctx: CheckContext, params) -> Verdict``. Each
checker lives in its own module, is a pure function of the history and the final files (it
starts no process and works on copies), and documents which sentence of SPEC §16.3 it enforces.

:func:`run_checkers` runs the ``expect`` mapping in order. A checker that raises yields a FAIL
verdict carrying the traceback summary in ``figures["error"]``: a checker bug must never look
green. A name with no checker is a FAIL too (a scenario that expects an invariant nobody checks
tested nothing).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Callable

from . import (
    checkpoint_cadence,
    durability,
    error_taxonomy,
    fixture_preserved,
    fleet,
    integrity,
    isolation,
    latency,
    liveness_after_heal,
    maintenance_refusal,
    no_lockup,
    no_lost_writes,
    prune_respects_turns,
    quarantine_evidence,
    recovery,
    retry_jitter,
    single_wal_generation,
    snapshot_complete,
    stale_wal_refusal,
    sticky_refusal,
    wal_growth,
)
from .base import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SKIPPED,
    CheckContext,
    Verdict,
    params_of,
    stamp_evidence,
)
from .store import NoStore


@dataclass(frozen=True)
class Checker:
    """One checker (SPEC §16.3): its parameters, declared once, and its ``check``.

    Calling it with a dict of parameters fills the defaults (:func:`chaos.params.build`).
    """

    name: str
    Params: type
    check: Callable[[CheckContext, object], Verdict]
    #: its FAIL may come from the machine's load (a wall-clock bound: ``TIMING_BOUND`` in its
    #: module); the gate reruns a row failed only by such checkers once (issue 27 item 5)
    timing_bound: bool = False

    @property
    def summary(self) -> str:
        """One line for the scenario reference (the first paragraph of ``Params``' docstring)."""
        return " ".join((self.Params.__doc__ or "").strip().split("\n\n")[0].split())

    def __call__(self, ctx: CheckContext, params) -> Verdict:
        return self.check(ctx, params_of(self.Params, params))


#: Every checker by the name used under a scenario's ``expect:``, in reference order.
CHECKERS: dict[str, Checker] = {m.NAME: Checker(m.NAME, m.Params, m.check,
                                                getattr(m, "TIMING_BOUND", False)) for m in (
    no_lost_writes, stale_wal_refusal, integrity, retry_jitter, checkpoint_cadence, recovery,
    maintenance_refusal, no_lockup, latency, single_wal_generation, liveness_after_heal,
    error_taxonomy, fixture_preserved, durability,
    isolation.CHECKPOINT_ISOLATION, isolation.WRITE_EXCLUSION, prune_respects_turns,
    snapshot_complete,
    sticky_refusal, quarantine_evidence, wal_growth, fleet.FTS_EXACT,
    fleet.OLDER_RELEASE_OPENS)}


#: The checkers whose FAIL may be the machine's load, not the store (see :class:`Checker`).
TIMING_BOUND: frozenset[str] = frozenset(n for n, c in CHECKERS.items() if c.timing_bound)


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
            verdict = fn(ctx, params)
            if not isinstance(verdict, Verdict):
                raise TypeError(f"checker {name} returned {type(verdict).__name__}, not Verdict")
        except NoStore as exc:  # the run lost its store: a FAIL that says so, not a crash
            verdict = Verdict(name, FAIL, f"{exc}: nothing to judge",
                              {"store": str(ctx.store_path)})
        except Exception as exc:  # noqa: BLE001 - a crashing checker is a FAIL, never green
            tb = traceback.format_exc()
            verdict = Verdict(name, FAIL,
                              f"checker crashed: {type(exc).__name__}: "
                              f"{(str(exc).splitlines() or [''])[0]}",
                              {"error": tb[-4000:]})
        verdict.figures.setdefault("elapsed_s", round(time.monotonic() - t0, 3))
        out.append(stamp_evidence(verdict, ctx.history))
    return out


__all__ = ["CHECKERS", "TIMING_BOUND", "run_checkers", "CheckContext", "Verdict", "PASS", "FAIL",
           "INCONCLUSIVE", "SKIPPED"]
