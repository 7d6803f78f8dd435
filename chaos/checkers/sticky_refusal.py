"""``sticky_refusal``: a handle that refused for its store's sake refuses for good, without new
evidence each time (SPEC §10.1: a retired or replaced generation makes the handle refuse every
later write, sticky, captured once; SPEC §12: structural corruption seen on a live handle is
sticky, "no further writes on that handle").

A role process works through one handle from its ``open`` op until its next ``open`` op (a
gateway opens once; a CLI once per run). A handle turns sticky at its first op that failed with
one of :data:`STICKY_ERRORS` (a read or a write that met a retired generation, a replaced file
or a damaged page).

Two case functions:

* :func:`written_after_refusal_cases`: an ``ok`` write op of the same handle that started after
  that failure;
* :func:`recaptured_cases`: more than one ``capture`` event from one handle (the retired WAL is
  evidence once; a capture per refused write means the refusal was decided anew each time).

INCONCLUSIVE when no handle turned sticky (nothing was tested).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..history import WRITE_OPS, Op, brief, pair_ops
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from

NAME = "sticky_refusal"
STICKY_ERRORS = ("StateDbCorruptError", "DeletedWalGenerationError", "StateDbReplacedError")


@dataclass(frozen=True, kw_only=True)
class Params:
    """A handle that refused (retired generation, replaced file, corruption) writes nothing more
    and captures its evidence once (SPEC §10.1, §12)."""

    min_handles: int = param(1, "Handles that must have turned sticky (fewer: INCONCLUSIVE).",
                             minimum=1)


def handles(history: list[dict]) -> dict[tuple[str, int], dict]:
    """``{(process, n): {"ops": [Op], "captures": [record]}}``: each process's ops and capture
    events, split at its ``open`` ops, in time order."""
    out: dict[tuple[str, int], dict] = {}
    epoch: dict[str, int] = {}
    items = [(o.t_invoke, 0, o) for o in pair_ops(history)]
    items += [(float(r.get("t", 0.0)), 1, r) for r in history
              if r.get("type") == "event" and r.get("event") == "capture"]
    for _, kind, item in sorted(items, key=lambda x: (x[0], x[1])):
        process = item.process if kind == 0 else item.get("process")
        if kind == 0 and item.op == "open":
            epoch[process] = epoch.get(process, 0) + 1
        h = out.setdefault((process, epoch.get(process, 0)), {"ops": [], "captures": []})
        h["ops" if kind == 0 else "captures"].append(item)
    return out


def _first_refusal(ops: list[Op]) -> Op | None:
    return next((o for o in ops if o.kind != "ok" and o.error in STICKY_ERRORS), None)


def written_after_refusal_cases(by_handle: dict[tuple[str, int], dict]) -> list[dict]:
    """Writes acknowledged on a handle after it refused."""
    out = []
    for (process, n), h in by_handle.items():
        first = _first_refusal(h["ops"])
        if first is None or first.t_done is None:
            continue
        later = [o for o in h["ops"] if o.kind == "ok" and o.op in WRITE_OPS
                 and o.t_invoke > first.t_done]
        if later:
            out.append({"violation": "written_after_refusal", "process": process, "handle": n,
                        "refusal": brief(first.record()), "write": brief(later[0].record()),
                        "writes": len(later),
                        "why": f"{process} wrote {len(later)} time(s) on a handle after it "
                               f"refused ({first.op} failed with {first.error})"})
    return out


def recaptured_cases(by_handle: dict[tuple[str, int], dict]) -> list[dict]:
    """Handles that wrote more than one retired-WAL capture."""
    out = []
    for (process, n), h in by_handle.items():
        caps = h["captures"]
        if len(caps) > 1:
            out.append({"violation": "recaptured", "process": process, "handle": n,
                        "captures": len(caps), "first": brief(caps[0]), "second": brief(caps[1]),
                        "why": f"{process} captured its retired WAL {len(caps)} times on one "
                               "handle (the refusal was not sticky)"})
    return out


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    by_handle = handles(ctx.history)
    sticky = sum(1 for h in by_handle.values() if _first_refusal(h["ops"]) is not None)
    cases = {"written_after_refusal": written_after_refusal_cases(by_handle),
             "recaptured": recaptured_cases(by_handle)}
    fig = {"handles": len(by_handle), "refused": sticky,
           "captures": sum(len(h["captures"]) for h in by_handle.values())}
    summary = f"{sticky} of {len(by_handle)} handle(s) refused; {fig['captures']} capture(s)"
    why = None if sticky >= p.min_handles else (f"only {sticky} handle(s) refused "
                                                f"(min_handles {p.min_handles})")
    return verdict_from(NAME, cases, fig, summary=summary, inconclusive=why)
