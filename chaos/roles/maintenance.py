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
from dataclasses import dataclass

from ..nemesis.commands import CommandParams, run_command
from ..params import Duration, param
from .base import RoleContext

KIND = "maintenance"
SUMMARY = "runs a CLI command as a subprocess"
WRITER = False


@dataclass(frozen=True, kw_only=True)
class Params(CommandParams):
    """Runs `python -m hermes_state --home H <command>` as a subprocess, first at `first_at`,
    then every `every` (0 = once), at most `times` times; records exit code and output."""

    timeout: Duration = param(60, "The command is killed after this long (the op is recorded "
                              "as info).")
    first_at: Duration = param(0, "Delay before the first run, from the instance's start.")
    every: Duration = param(0, "Period between runs (0 = run once).")
    times: int = param(1, "Runs at most (with `every` > 0).", minimum=1, maximum=10_000)

    #: Durations that must be > 0.
    POSITIVE = ("timeout",)


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    command = w.command
    every = w.every
    times = w.times if every > 0 else 1
    ctx.sleep(w.first_at)
    for _ in range(times):
        if ctx.should_stop():
            break
        started = time.monotonic()
        run_once(ctx, command, force=w.force, dry_run=w.dry_run, args=list(w.args),
                 timeout=w.timeout, failpoint_spec=w.failpoints)
        if every > 0:
            ctx.sleep(every - (time.monotonic() - started))


def run_once(ctx: RoleContext, command: str, *, force: bool, dry_run: bool, args: list[str],
             timeout: float, failpoint_spec: str = "") -> None:
    """Run ``command`` once and record ``invoke`` then ``ok``/``fail``/``info`` (op ``run``)."""
    op_id = ctx.history.next_op_id()
    fields = {"command": command, "force": force, "dry_run": dry_run, "args": args}
    ctx.history.record("invoke", op="run", op_id=op_id, **fields)
    try:
        result = run_command(command, ctx.cfg.home, ctx.cfg.db_path, force=force,
                             dry_run=dry_run, args=args, timeout=timeout,
                             failpoint_spec=failpoint_spec)
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
