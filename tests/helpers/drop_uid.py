"""Become another user after start-up, so /proc shows a real same-user process we cannot read.

Usage (as root): ``drop_uid.py UID hold DB`` opens DB read-only, drops to UID (which makes the
process not dumpable: its /proc/<pid>/fd is unreadable to other processes of UID), prints
``HOLDING`` and waits for stdin to close. ``drop_uid.py UID cli ARGS...`` drops to UID and runs
``hermes-state ARGS...``, exiting with its code. ``drop_uid.py UID py CODE`` drops to UID and
runs the Python source CODE.
"""

import importlib
import importlib.metadata  # noqa: F401 - used by --version after the drop
import math  # noqa: F401 - used by argument types after the drop
import os
import pkgutil
import sys

import hermes_state
from hermes_state.cli import main as cli


def preload() -> None:
    """Import every hermes_state module (and what they import) while still root: after the
    drop, UID may not be able to read the checkout, the venv or Python's own library (a
    ``mktemp -d`` clone is mode 0700, so is root's pyenv), and the CLI imports lazily."""
    for mod in pkgutil.walk_packages(hermes_state.__path__, "hermes_state."):
        if not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)


def main() -> int:
    uid, mode, *rest = sys.argv[1:]
    if mode == "hold":
        fh = open(rest[0], "rb")  # noqa: SIM115 - held until exit on purpose
        os.setgid(int(uid))
        os.setuid(int(uid))
        print("HOLDING", flush=True)
        sys.stdin.read()
        fh.close()
        return 0
    preload()
    os.setgid(int(uid))
    os.setuid(int(uid))
    if mode == "py":
        exec(compile(rest[0], "<drop_uid py>", "exec"), {"__name__": "__drop_uid__"})
        return 0
    return cli(rest)


if __name__ == "__main__":
    sys.exit(main())
