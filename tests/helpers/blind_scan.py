"""``/proc`` access of a same-user process that cannot read another (SPEC §10.2).

``blind_scan.py hold DB``: make this process not dumpable, open the store, print ``HOLDING``,
hold it until stdin closes.
``blind_scan.py cli ARGS...``: drop CAP_SYS_PTRACE from the bounding set, then run
``python -m hermes_state ARGS...`` (which therefore lacks it) and exit with its code.
"""

import subprocess
import sys

from chaos.roles import procfs


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "hold":
        procfs.apply(undumpable=True, ptrace_cap=True)
        from hermes_state import SessionDB

        with SessionDB(args[0]) as db:
            db.append_message("s", "user", "held")
            print("HOLDING", flush=True)
            sys.stdin.read()
        return 0
    procfs.apply(undumpable=False, ptrace_cap=False)
    return subprocess.call([sys.executable, "-m", "hermes_state", *args], stdin=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())
