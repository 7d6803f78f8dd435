"""Maintenance commands as faults (SPEC §16.2 ``run``) and as the ``maintenance`` role's work.

Both run the operator CLI exactly as a user would: ``python -m hermes_state --home H <command>``
in a child process (never in-process: the gate of SPEC §11 must see the role processes as other
processes, and a command that crashes must not take the caller with it). The result — argv, exit
code, stdout/stderr excerpts, the PIDs the output names — is what the nemesis ``done`` record and
the role's ``ok``/``fail`` record carry, so ``maintenance_refusal`` can check a refusal named the
holders (SPEC §11, §16.3).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from hermes_state import failpoints

from .. import store
from ..params import Duration, param
from .base import Fault, NemesisEnv, NemesisError

#: Command name (scenario vocabulary) -> the CLI words after ``--home H`` (SPEC §15).
COMMANDS: dict[str, list[str]] = {
    "optimize": ["sessions", "optimize"],
    "optimize-storage": ["sessions", "optimize-storage"],
    "prune": ["sessions", "prune", "--yes"],
    "backup": ["backup"],
    "doctor": ["doctor"],
    "recover": ["sessions", "recover"],
    "replay-spool": ["sessions", "replay-spool"],
    "restore": ["backup", "restore"],
    # every capture beside the store unless args name some; --dry-run (or a listing) wins
    "salvage": ["sessions", "salvage", "--apply"],
}
#: Commands behind the live-writer gate (SPEC §11): only they take ``--force``.
GATED_COMMANDS = ("optimize", "optimize-storage", "prune", "salvage")
#: Commands that take ``--dry-run``.
DRY_RUN = ("optimize", "optimize-storage", "prune", "replay-spool", "salvage")
#: Arguments of a command that name a path: they must stay inside the run (issue 11 item 2).
#: Relative values are resolved from the home (the command's cwd); ``-p``/``--profile`` names a
#: directory under ``home/profiles``.
PATH_ARGS = ("--home", "--output", "--source", "--from", "--report", "--out", "--into", "--dest",
             "-o")
PROFILE_ARGS = ("-p", "--profile")
#: Commands whose bare words (not a flag, not a flag's value) are paths: recover's FILE,
#: salvage's CAPTURE_DIRs.
POSITIONAL_PATHS = {"recover": "FILE", "salvage": "CAPTURE_DIR"}


def path_args(args, command: str | None = None) -> list[tuple[int, str, str, tuple[str, ...]]]:
    """``(index, flag, value, base)`` of every path-valued word of a command's ``args``
    (``--home DIR``, ``--output=FILE``, ``--profile NAME`` ..., and the bare words of the
    :data:`POSITIONAL_PATHS` commands, ``flag`` then naming the argument); ``base`` is where a
    relative value starts, as path parts below the run directory (``("home",)`` or
    ``("home", "profiles")``). Words that are not strings are skipped."""
    out: list[tuple[int, str, str, tuple[str, ...]]] = []
    if not isinstance(args, list):
        return out
    for i, word in enumerate(args):
        if not isinstance(word, str):
            continue
        prev = args[i - 1] if i else None
        if (command in POSITIONAL_PATHS and not word.startswith("-")
                and not (isinstance(prev, str) and prev in PATH_ARGS + PROFILE_ARGS)):
            out.append((i, POSITIONAL_PATHS[command], word, ("home",)))
            continue
        flag, eq, value = word.partition("=")
        if flag not in PATH_ARGS and flag not in PROFILE_ARGS:
            continue
        base = ("home", "profiles") if flag in PROFILE_ARGS else ("home",)
        if eq:
            out.append((i, flag, value, base))
        elif i + 1 < len(args) and isinstance(args[i + 1], str):
            out.append((i + 1, flag, args[i + 1], base))
    return out


def check_paths(args, run_dir: str | os.PathLike, command: str | None = None) -> None:
    """Refuse a command whose path arguments resolve outside ``run_dir`` (symlinks followed).

    Raises:
        ValueError: names the argument and where it leads.
    """
    for _, flag, value, base in path_args(args, command):
        target = Path(run_dir, *base, os.path.expanduser(value))
        if not store.inside(target, run_dir):
            raise ValueError(f"{flag} {value!r} resolves to {os.path.realpath(target)}, outside "
                             f"the run directory {run_dir}: refused")

Command = Literal["optimize", "optimize-storage", "prune", "backup", "doctor", "recover",
                  "replay-spool", "restore", "salvage"]
_COMMAND_DOC = ("The CLI command run as `python -m hermes_state --home H ...`: optimize / "
                "optimize-storage / prune (`sessions ...`, gated, SPEC §11), backup, doctor, "
                "recover (default `--from state.db --inspect-only`), replay-spool, restore "
                "(`backup restore ID`; without args the newest snapshot that is not a "
                "pre-restore copy), salvage (`sessions salvage --apply`: what the retired-WAL "
                "captures beside the store hold that it lacks; gated).")


@dataclass(frozen=True, kw_only=True)
class CommandParams:
    """A maintenance command and its flags (the ``maintenance`` role and the ``run`` fault)."""

    command: Command = param("doctor", _COMMAND_DOC, title="maintenance command")
    force: bool = param(False, "Add --force (gated commands only: skips the live-writer gate).")
    dry_run: bool = param(False, "Add --dry-run (optimize, optimize-storage, prune, "
                          "replay-spool).")
    args: list[str] = param([], "Extra CLI words, e.g. [\"--older-than\", \"0\", \"--source\", "
                            "\"cli\"] for prune (default --older-than 90; --yes is always given); "
                            "a path they name must stay inside the run directory.")
    timeout: Duration = param(60, "The command is killed after this long (the runner records "
                              "the exit as null).")
    failpoints: str = param("", "HERMES_STATE_FAILPOINTS of the command process, e.g. "
                            "`cmd.maintenance.locked=sleep(3000)`: a gated command that holds "
                            "the store's write lock 3 s (a slow maintenance beside a writer); "
                            "empty: none.")


@dataclass(frozen=True, kw_only=True)
class RunParams(CommandParams):
    """Run a maintenance command now, waited for."""

    command: Command = param(description=_COMMAND_DOC, title="maintenance command")
#: Characters of stdout/stderr kept in a history record (the head and the tail).
EXCERPT_CHARS = 1500
DEFAULT_TIMEOUT_S = 60.0

_PID_RE = re.compile(r"\bPID (\d+)")
_UNREADABLE_RE = re.compile(r"could not inspect PID\(s\) (\d+(?:, \d+)*)")


@dataclass
class CommandResult:
    """Outcome of one command.

    Attributes:
        command: the scenario's command name; ``argv``: the full argv run.
        exit_code: the exit status (negative = killed by that signal; None = timed out and
            killed).
        stdout, stderr: excerpts (head and tail, :data:`EXCERPT_CHARS` each at most).
        child_pid: the command process's pid (not ``pid``: a history record's ``pid`` is the
            process that wrote it); ``duration_s``: wall seconds it ran.
        named_pids: every ``PID N`` the output mentions (holders of a refusal), in order.
        timed_out: True when it ran past the timeout and was killed.
    """

    command: str
    argv: list[str]
    exit_code: int | None
    stdout: str
    stderr: str
    child_pid: int
    duration_s: float
    named_pids: list[int] = field(default_factory=list)
    timed_out: bool = False

    def fields(self) -> dict:
        """The result as history-record fields (JSON-safe)."""
        return asdict(self)


def command_argv(command: str, home: str | os.PathLike, db_path: str | os.PathLike, *,
                 force: bool = False, dry_run: bool = False, args: list[str] | None = None
                 ) -> list[str]:
    """The argv of ``python -m hermes_state --home HOME <command> ...`` (SPEC §15).

    ``prune`` gets ``--yes`` (no terminal to confirm on) and ``--older-than 90`` unless ``args``
    gives one; ``recover`` gets ``--from <db_path> --inspect-only`` unless ``args`` names a
    source (it never changes the source either way, SPEC §14); ``restore`` without an id in
    ``args`` restores the newest snapshot that is not a pre-restore copy, looked up now
    (:func:`newest_snapshot_id`).

    Raises:
        ValueError: an unknown command, ``force`` on a command that is not gated, ``dry_run`` on
            one that has no preview, a path argument that leads outside the run directory
            (the directory above ``home``).
    """
    check_paths(list(args or []), Path(home).parent, command)
    if command not in COMMANDS:
        raise ValueError(f"unknown maintenance command {command!r} (known: "
                         f"{', '.join(COMMANDS)})")
    if force and command not in GATED_COMMANDS:
        raise ValueError(f"--force only applies to the gated commands {', '.join(GATED_COMMANDS)}")
    if dry_run and command not in DRY_RUN:
        raise ValueError(f"--dry-run only applies to {', '.join(DRY_RUN)}")
    extra = list(args or [])
    words = list(COMMANDS[command])
    if command == "prune" and "--older-than" not in extra:
        words += ["--older-than", "90"]
    if command == "recover" and not {"--source", "--from"} & {w.split("=")[0] for w in extra}:
        words += ["--from", str(db_path), "--inspect-only"]
    if command == "restore" and not extra:
        words.append(newest_snapshot_id(db_path) or "none")
    words += extra
    if force:
        words.append("--force")
    if dry_run:
        words.append("--dry-run")
    return [sys.executable, "-m", "hermes_state", "--home", str(home), *words]


def named_pids(output: str) -> list[int]:
    """Every ``PID N`` a command's output names (the holders of a refusal), in order, once."""
    found = [int(p) for p in _PID_RE.findall(output)]
    for listed in _UNREADABLE_RE.findall(output):  # an incomplete holder scan (SPEC §10.2)
        found += [int(p) for p in re.findall(r"\d+", listed)]
    return list(dict.fromkeys(found))


def newest_snapshot_id(db_path: str | os.PathLike) -> str | None:
    """Id of the newest verified snapshot of the store that is not a pre-restore copy (or of
    the newest verified one), None when there is none (SPEC §13 ``backup list``)."""
    from hermes_state.testing import PRE_RESTORE_REASON, list_snapshots

    good = [s for s in list_snapshots(db_path) if s.get("verified") is True]
    plain = [s for s in good if s.get("reason") != PRE_RESTORE_REASON]
    pick = (plain or good or [None])[0]
    return None if pick is None else str(pick["id"])


def _excerpt(text: str) -> str:
    if len(text) <= 2 * EXCERPT_CHARS:
        return text
    return text[:EXCERPT_CHARS] + "\n...\n" + text[-EXCERPT_CHARS:]


def run_command(command: str, home: str | os.PathLike, db_path: str | os.PathLike, *,
                force: bool = False, dry_run: bool = False, args: list[str] | None = None,
                timeout: float = DEFAULT_TIMEOUT_S, failpoint_spec: str = "") -> CommandResult:
    """Run one maintenance command in a child process and wait for it.

    The child gets the caller's environment without ``HERMES_STATE_FAILPOINTS`` (a role's
    failpoints are its own; ``failpoint_spec`` gives the command its own) and a new session (a
    SIGINT meant for the runner does not reach it).
    Past ``timeout`` seconds it is SIGKILLed and the result says ``timed_out``.

    Args:
        command: a key of :data:`COMMANDS`; ``home``: the HERMES_HOME; ``db_path``: its
            ``state.db`` (the default ``recover`` source); ``force``/``dry_run``/``args``: as in
            :func:`command_argv`; ``timeout``: seconds.
    Returns:
        A :class:`CommandResult`.
    Raises:
        ValueError: see :func:`command_argv`.
        OSError: the child could not be started.
    """
    argv = command_argv(command, home, db_path, force=force, dry_run=dry_run, args=args)
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    if failpoint_spec:
        failpoints.parse(failpoint_spec)  # ValueError: a bad spec runs nothing
        env[failpoints.ENV_VAR] = failpoint_spec
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(Path(home)), start_new_session=True,
                            errors="replace")
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        out, err = proc.communicate()
    code = None if timed_out else proc.returncode
    named = named_pids(out + "\n" + err)
    return CommandResult(command, argv, code, _excerpt(out), _excerpt(err), proc.pid,
                         round(time.monotonic() - start, 4), named,
                         timed_out)


def run(env: NemesisEnv, params: RunParams) -> dict:
    """The ``run`` fault: a maintenance command against the run's store, now (SPEC §16.2).

    Params: ``command`` (a key of :data:`COMMANDS`), ``force``, ``dry_run``, ``args`` (extra CLI
    words), ``timeout`` (seconds). The runner waits for the command (its schedule pauses meanwhile).
    Returns the :class:`CommandResult` fields for the nemesis ``done`` record; a non-zero exit is a
    result (a refusal is expected under a live writer), not a nemesis error.

    Raises:
        NemesisError: the command could not be started or is invalid.
    """
    try:
        result = run_command(params.command, env.db_path.parent, env.db_path,
                             force=params.force, dry_run=params.dry_run,
                             args=list(params.args or []), timeout=params.timeout,
                             failpoint_spec=params.failpoints)
    except (ValueError, OSError, KeyError) as exc:
        raise NemesisError(f"run {params.command!r}: {exc}") from exc
    return result.fields()


RUN = Fault("run", RunParams, run, "a maintenance command (optionally --force), waited for")
