"""Run one ``hermes-state`` command (or a few lines of API code) for the planted-file matrix.

Usage: ``planted_child.py [--remove-on-check PATH] cli ARGS...`` runs the CLI in this process
and exits with its code; ``planted_child.py [--remove-on-check PATH] py CODE`` runs CODE (it
prints ``OK ...`` or ``REFUSED <type>: <message>`` itself). An exception that escapes prints
its traceback (what the matrix looks for).

``--remove-on-check PATH``: the first time the store checks PATH (``lstat`` passed) and before
it opens it, PATH is removed (a directory with its content): "removed between check and use",
deterministically, through ``hermes_state.files.atomic.RACE_HOOKS``.
"""

import os
import shutil
import sys

from hermes_state.files import atomic


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--remove-on-check"]:
        target = os.path.abspath(args[1])
        args = args[2:]

        def remove(path: str) -> None:
            path = os.path.abspath(path)
            inside = path == target or path.startswith(target + os.sep)
            if not inside or not os.path.lexists(target):
                return
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            else:
                os.unlink(target)
            print(f"removed between check and use: {target}", file=sys.stderr)

        atomic.RACE_HOOKS.append(remove)
    mode, rest = args[0], args[1:]
    if mode == "py":
        exec(compile(rest[0], "<planted_child py>", "exec"), {"__name__": "__planted__"})
        return 0
    from hermes_state.cli import main as cli

    return cli(rest)


if __name__ == "__main__":
    sys.exit(main())
