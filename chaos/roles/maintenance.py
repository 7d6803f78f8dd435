"""The ``maintenance`` role: runs an operator CLI command as a subprocess (SPEC §16.1).

``python -m hermes_state --home H <command>`` (``sessions optimize``, ``optimize-storage``,
``prune``, ``backup``, ``doctor``, ``recover``, ``replay-spool``), first at ``first_at`` seconds
after the instance starts, then every ``every`` seconds (0 = once), at most ``times`` times.
Each run is one op named ``run`` with ``command``, ``force``, ``dry_run``: ``ok`` on exit 0,
``fail`` on any other exit status (a refusal, SPEC §11: the command changed nothing), ``info``
when it was killed or timed out (outcome unknown). Every completion carries ``exit_code``,
``argv``, ``stdout``/``stderr`` excerpts, ``named_pids`` (the holders a refusal names) and the
command process's ``child_pid`` (shared code: :mod:`chaos.nemesis.commands`).

Workload: ``command``, ``force``, ``dry_run``, ``args`` (extra CLI words, e.g.
``["--older-than", "0", "--source", "cli"]``), ``first_at``, ``every``, ``times``, ``timeout``.
"""

from __future__ import annotations

import time

from ..nemesis.commands import DEFAULT_TIMEOUT_S, run_command
from .base import RoleContext


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w = ctx.cfg.workload
    command = str(w.get("command", "doctor"))
    every = float(w.get("every", 0))
    times = int(w.get("times", 1)) if every > 0 else 1
    ctx.sleep(float(w.get("first_at", 0)))
    for _ in range(times):
        if ctx.should_stop():
            break
        started = time.monotonic()
        run_once(ctx, command, force=bool(w.get("force", False)),
                 dry_run=bool(w.get("dry_run", False)), args=list(w.get("args") or []),
                 timeout=float(w.get("timeout", DEFAULT_TIMEOUT_S)))
        if every > 0:
            ctx.sleep(every - (time.monotonic() - started))


def run_once(ctx: RoleContext, command: str, *, force: bool, dry_run: bool, args: list[str],
             timeout: float) -> None:
    """Run ``command`` once and record ``invoke`` then ``ok``/``fail``/``info`` (op ``run``)."""
    op_id = ctx.history.next_op_id()
    fields = {"command": command, "force": force, "dry_run": dry_run, "args": args}
    ctx.history.record("invoke", op="run", op_id=op_id, **fields)
    try:
        result = run_command(command, ctx.cfg.home, ctx.cfg.db_path, force=force,
                             dry_run=dry_run, args=args, timeout=timeout)
    except (ValueError, OSError) as exc:
        ctx.history.record("fail", op="run", op_id=op_id, error=type(exc).__name__,
                           message=str(exc)[:800], **fields)
        return
    res = result.fields()
    res.pop("command", None)
    if result.exit_code == 0:
        ctx.history.record("ok", op="run", op_id=op_id, latency_s=result.duration_s,
                           value=0, **fields, **res)
    elif result.exit_code is not None and result.exit_code > 0:
        first = (result.stderr.strip() or result.stdout.strip()).splitlines()[:1]
        ctx.history.record("fail", op="run", op_id=op_id, latency_s=result.duration_s,
                           error=f"exit {result.exit_code}",
                           message=(first[0] if first else "")[:800], **fields, **res)
    else:
        ctx.history.record("info", op="run", op_id=op_id, latency_s=result.duration_s,
                           error="killed" if not result.timed_out else "timeout", **fields, **res)
    print(f"{ctx.cfg.process}: {' '.join(result.argv[2:])} -> exit {result.exit_code}",
          flush=True)
