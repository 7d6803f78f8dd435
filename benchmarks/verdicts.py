"""A row's verdict and the run's exit status (issue 24 item 5, SPEC §17).

A row's ``pass`` says whether its ratio met its target in the measurement the row was judged
by. The verdict adds what the reader needs to believe it:

- ``PASS``: the target was met.
- ``FAIL``: missed, and nothing below explains it. Exit status 1.
- ``EXPLAINED``: missed the issue's reference, but within the same target of its SPEC bound
  (bare SQLite doing the work SPEC asks of the command beyond that reference: a backup that
  is verified and hashed, a recover that copies its source first). The miss is that work,
  named in the row's notes, not our overhead. Counted apart; does not fail the run.
- ``LOADED``: missed twice (the run and its rerun), both while the machine's 1-minute load
  was above :data:`LOADED_PER_CPU` per CPU. A ratio measured then says more about the other
  jobs than about the code: inconclusive, never a pass. Exit status 3 when no row FAILed.
- ``info``: no target (a cost shown for the record).

Rows of results files written before verdicts existed are judged from ``pass`` alone.
"""

from __future__ import annotations

#: Above this 1-minute load per CPU (for the run and its rerun alike) a repeated miss is
#: inconclusive (``LOADED``): 3 per CPU is six runnable tasks on 2 cores, three times what
#: the suite meets beside two CPU burners.
LOADED_PER_CPU = 3.0

EXIT_OK, EXIT_FAIL, EXIT_LOADED = 0, 1, 3


def verdict(row: dict, cpus: int) -> str:
    """``row``'s verdict (module docstring): PASS, FAIL, EXPLAINED, LOADED or info.

    Args:
        row: a row of a results file (``benchmarks.rows.row``), after any rerun.
        cpus: the machine's CPU count (``machine()["cpu_count"]``).
    """
    if row["pass"] is True:
        return "PASS"
    if row["pass"] is None:
        return "info"
    extra = row.get("extra") or {}
    if extra.get("explained"):
        return "EXPLAINED"
    rerun = extra.get("rerun")
    if rerun:
        loads = [row.get("load"), (rerun.get("first") or {}).get("load")]
        if all(load and load[0] / max(cpus, 1) > LOADED_PER_CPU for load in loads):
            return "LOADED"
    return "FAIL"


def judge(rows: list[dict], cpus: int) -> int:
    """Set ``row["verdict"]`` on every row; return the run's exit status: 1 when a row
    FAILed, else 3 when a row was LOADED, else 0."""
    for r in rows:
        r["verdict"] = verdict(r, cpus)
    found = {r["verdict"] for r in rows}
    return EXIT_FAIL if "FAIL" in found else EXIT_LOADED if "LOADED" in found else EXIT_OK


def counts(rows: list[dict]) -> str:
    """``"12 PASS, 2 EXPLAINED, 1 LOADED, 9 info"``: every verdict present, counted apart."""
    order = ["PASS", "FAIL", "EXPLAINED", "LOADED", "info"]
    found = [r.get("verdict") or {True: "PASS", False: "FAIL", None: "info"}[r["pass"]]
             for r in rows]
    return ", ".join(f"{found.count(v)} {v}" for v in order if v in found)
