"""What every ``hermes-state`` subcommand module shares: exit codes, the error to print,
JSON output, and opening the store read-only or writable (SPEC §15)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..files.paths import default_db_path

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
#: Help texts shared by every subcommand that takes the option (issue 16: every argument has one).
JSON_HELP = "print JSON on stdout instead of text"
DRY_RUN_HELP = "show what would be done; change nothing (never refused)"
SOURCE_HELP = "only sessions of this platform (cli, telegram, discord, ...)"


class CliError(Exception):
    """A failure to print as ``error: <message>`` (+ a ``next:`` line) with exit code 1."""

    def __init__(self, message: str, next_step: str = "") -> None:
        super().__init__(message)
        self.next_step = next_step


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(value: Any, width: int = 0, *, cut: int = 0, right: bool = False) -> str:
    """Any stored value as one printable cell of human output (issue 22 item 7).

    None → ``""``; bytes decoded with U+FFFD; numbers and other objects by ``str``; control
    characters (a terminal escape in a title) written as ``\\xNN``; cut to ``cut`` characters,
    then padded to ``width`` (left-aligned, or ``right``). Never raises.
    """
    from ..api.text import display_text

    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", display_text(value))
    if cut:
        text = text[:cut]
    return text.rjust(width) if right else text.ljust(width)


def safe_streams() -> None:
    """stdout/stderr write what they cannot encode as backslash escapes (a lone surrogate from
    a command line argument), never a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def store_path(args: argparse.Namespace) -> Path:
    return default_db_path(args.home, args.profile)


def store_exists(path: Path) -> bool:
    """Whether the store file exists; a directory this user cannot enter is a permission
    problem named as such (SPEC §4), never "no session store"."""
    try:
        os.stat(path)
        return True
    except FileNotFoundError:
        return False
    except PermissionError:
        from ..files.paths import access_problem, permission_error

        raise access_problem(path, write=False) or permission_error(path, "read") from None


def open_ro(args: argparse.Namespace):
    from ..db import SessionDB

    path = store_path(args)
    if not store_exists(path):
        raise CliError(f"no session store at {path}",
                       "check --home/--profile (or HERMES_HOME); the store is created on first use")
    db = SessionDB(path, read_only=True)
    # the open's own settled scan (it chose immutable=1 for them): one wait, not two
    _warn_if_retired(path, [h for h in db.connection.retired_holders if h.pid != os.getpid()])
    copy = db.connection.migrated_copy
    if copy is not None and sys.stderr.isatty():
        print(f"note: {path} is at schema {copy['schema_version']}: shown from a migrated "
              "private copy (the store is unchanged; the next writable open migrates it)",
              file=sys.stderr)
    return db


def _warn_if_retired(path: Path, retired: list) -> None:
    """Read commands still work under a retired-WAL holder (SPEC §10.4), but what they show
    misses that holder's last writes: say so on stderr, naming the holders and ``doctor``."""
    if retired:
        from ..processes.capture import others_at_risk

        names = ", ".join(f"PID {h.pid} ({h.command})" for h in retired)
        risk = others_at_risk(path, retired)  # "nothing is lost" only with a capture (22.1)
        print(f"warning: {names} still hold(s) a retired WAL generation of {path}: what is shown "
              "here lacks what they wrote since; "
              + (f"{risk} Run `hermes-state doctor` now (it saves the log), then stop them."
                 if risk else "nothing is lost. Stop them, then run `hermes-state doctor`."),
              file=sys.stderr)


def require_store(args: argparse.Namespace, why: str) -> Path:
    """The store path; CliError when it does not exist (a mistyped --home must not mint one)."""
    path = store_path(args)
    if not store_exists(path):
        raise CliError(f"no session store at {path}: {why}",
                       "check --home/--profile (or HERMES_HOME)")
    return path


def open_rw(args: argparse.Namespace):
    from ..db import SessionDB

    return SessionDB(store_path(args))


# --------------------------------------------------------------------------- doctor / backup
