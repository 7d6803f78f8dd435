"""``hermes-state sessions export``: where the export goes and in which format (SPEC §15).

Parsing and printing only: the target is checked (never a store file, never through a planted
link, a FIFO opened without blocking), the rows come from :mod:`hermes_state.operator.exporting`.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from pathlib import Path

from .. import failpoints
from ..files import atomic
from ..files.paths import owning_store
from ..files.sqlite_format import SQLITE_HEADER, WAL_MAGIC_BYTES
from .common import EXIT_OK, CliError, open_ro, store_path
from .progress import progress_display


def markdown(data: dict) -> str:
    """One session as Markdown; a value of any type is shown as text (issue 22 item 7)."""
    from ..api.text import display_text

    lines = [f"# {display_text(data.get('title') or data.get('id'))}", "",
             f"session `{display_text(data.get('id'))}` · source "
             f"{display_text(data.get('source'))} · model {display_text(data.get('model'))}", ""]
    for m in data.get("messages", []):
        lines.append(f"**{display_text(m.get('role'))}**: {display_text(m.get('content'))}")
        lines.append("")
    return "\n".join(lines)


_STORE_MAGICS = (SQLITE_HEADER, *WAL_MAGIC_BYTES)


def _check_export_target(output: str, db_path: Path) -> str:
    """What ``--output`` names: ``"new"`` (nothing there), ``"file"`` (a regular file, replaced
    by an atomic rename) or ``"fifo"`` (a named pipe, streamed into). Checked with ``lstat``
    before anything is opened: a symlink is never written through, a device or a FIFO is never
    opened for reading.

    Refuses one of the store's own files or any existing SQLite database / WAL: an export that
    replaced them would destroy the store it reads (and a live writer would go on
    acknowledging writes into a malformed file).

    Raises:
        CliError: naming the file and the next step.
    """
    import stat

    target = Path(output).expanduser().absolute()
    owned = owning_store(target, db_path)
    if owned:  # a store's files, lock files, evidence: never an export target (issue 22.3)
        raise CliError(f"--output {output} is {owned[1]} (store {owned[0]}); exporting there "
                       "would replace a file the store owns", "choose another path for the "
                       "export")
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise CliError(f"--output {output}: {exc.strerror}", "choose another path") from None
    if st is None:
        return "new"
    if stat.S_ISFIFO(st.st_mode):
        return "fifo"
    if not stat.S_ISREG(st.st_mode):
        raise CliError(f"--output {output} is {atomic.describe_mode(st.st_mode)}, not a regular "
                       "file; refusing to write through it",
                       "choose a new file name, or use `-o -` and a shell redirect")
    try:
        with atomic.open_regular(target) as fh:
            head = fh.read(16)
    except OSError:
        head = b""
    if any(head.startswith(m) for m in _STORE_MAGICS):
        raise CliError(f"--output {output} is an existing SQLite database or WAL; refusing to "
                       "overwrite it", "choose another path for the export")
    return "file"


def _open_fifo(path: str) -> int:
    """Open a FIFO for writing without blocking: no reader ⇒ a CliError at once (ENXIO)."""
    import errno
    import fcntl

    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise CliError(f"--output {path} is a FIFO (named pipe) with no reader",
                           "start the reading process first, or use `-o -`") from None
        raise
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def cmd_export(args: argparse.Namespace) -> int:
    """``sessions export [ID]``: json/jsonl/md streamed to stdout (``-o -``), a new or replaced
    file (written as ``.partial``, 0600, fsynced, renamed) or a FIFO; never a store file. Written
    as it is read (:mod:`hermes_state.operator.exporting`): memory stays flat whatever the size."""
    from ..operator.exporting import export_all_to, export_session_to

    output = None if args.output in (None, "-") else args.output
    kind = _check_export_target(output, store_path(args)) if output else None
    with open_ro(args) as db, progress_display(args, "exporting messages") as bar:
        def write(out) -> None:
            if args.id:
                if not export_session_to(db, args.id, out, args.format, progress=bar.update):
                    raise CliError(f"no session {args.id!r}", "list them with `sessions list`")
            else:
                export_all_to(db, out, args.format, source=args.source, progress=bar.update)

        if args.id and db.get_session(args.id) is None:
            raise CliError(f"no session {args.id!r}", "list them with `sessions list`")
        if output is None:
            write(sys.stdout)
            sys.stdout.flush()
        elif kind == "fifo":
            with open(_open_fifo(output), "w", encoding="utf-8") as out:
                write(out)
        else:
            target = Path(output).expanduser().absolute()
            atomic.clean_partials(target.parent, rf"{re.escape(target.name)}(-\d+)?\.partial")
            with atomic.PartialFile(target) as part:
                out = io.TextIOWrapper(part.file, encoding="utf-8")
                write(out)
                out.flush()
                out.detach()  # part.file stays open: publish flushes and fsyncs it
                failpoints.hit("cmd.export.before_publish")
                part.publish(replace=(kind == "file"))
    return EXIT_OK
