"""Transcript files of removed sessions (UPSTREAM_API §2.8).

With a ``sessions_dir``, every session a delete or prune removed also loses
``<sessions_dir>/<id>.json``, ``<id>.jsonl`` and ``request_dump_<id>_*.json``, after the commit.
Missing files and OS errors are ignored. Safety (DEVELOPERS.md: every path stays inside its
directory, nothing follows a planted link): an id that is empty, contains a path separator, NUL
or is ``.``/``..`` touches no file; glob characters in an id are literal; ``unlink`` removes a
symbolic link itself, never its target; only regular files and links are removed.
"""

from __future__ import annotations

import glob
import os
import stat
from pathlib import Path
from typing import Iterable

from ..files.names import name_problem


def _safe_id(session_id: str) -> bool:
    """The id can name ``<id>.jsonl`` inside the directory (:mod:`hermes_state.files.names`;
    a leading ``-`` is allowed: these files are only ever removed, never created)."""
    return name_problem(session_id, suffix=".jsonl", allow_dash=True) is None


def transcript_paths(sessions_dir: str | os.PathLike, session_id: str) -> list[Path]:
    """The transcript files of one session that exist now (none for an unsafe id)."""
    if not _safe_id(session_id):
        return []
    base = Path(sessions_dir)
    found = [base / f"{session_id}.json", base / f"{session_id}.jsonl"]
    pattern = str(base / f"request_dump_{glob.escape(session_id)}_*.json")
    try:
        found += [Path(p) for p in sorted(glob.glob(pattern))]
    except (OSError, UnicodeEncodeError):  # a name no filesystem can hold: nothing is there
        pass
    out = []
    for p in found:
        try:
            mode = os.lstat(p).st_mode
        except (OSError, UnicodeEncodeError):
            continue
        if (stat.S_ISREG(mode) or stat.S_ISLNK(mode)) and p.parent == base:
            out.append(p)
    return out


def remove_transcripts(sessions_dir: str | os.PathLike | None, session_ids: Iterable[str]) -> int:
    """Delete the transcript files of ``session_ids``; returns how many files were removed."""
    if sessions_dir is None:
        return 0
    removed = 0
    for sid in session_ids:
        for path in transcript_paths(sessions_dir, sid):
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
    return removed
