"""Become another user after start-up, so /proc shows a real same-user process we cannot read.

Usage (as root): ``drop_uid.py UID hold DB`` opens DB read-only, drops to UID (which makes the
process not dumpable: its /proc/<pid>/fd is unreadable to other processes of UID), prints
``HOLDING`` and waits for stdin to close. ``drop_uid.py UID cli ARGS...`` drops to UID and runs
``hermes-state ARGS...``, exiting with its code.
"""

import os
import sys

from hermes_state.cli import main as cli


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
    os.setgid(int(uid))
    os.setuid(int(uid))
    return cli(rest)


if __name__ == "__main__":
    sys.exit(main())
