"""Workspace metadata of sessions: working directory, git branch, repository root
(UPSTREAM_API §2.1 ``workspace_key``, §2.2)."""

from __future__ import annotations

import sqlite3
from typing import Any, Mapping

from .text import clean_text


def workspace_key(row: Mapping[str, Any]) -> str | None:
    """The workspace a session row belongs to: its stripped ``git_repo_root`` when non-empty,
    else its stripped ``cwd``, else None."""
    for key in ("git_repo_root", "cwd"):
        value = row.get(key) if hasattr(row, "get") else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _stripped(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return clean_text(value) if value else None


class WorkspaceMixin:
    """cwd / git metadata API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def update_session_cwd(self, session_id: str, cwd: str, git_branch: str | None = None,
                           git_repo_root: str | None = None) -> None:
        """Record where a session runs. No-op without ``session_id`` or ``cwd``.

        ``cwd`` is always set; ``git_branch`` / ``git_repo_root`` (stripped) only when non-empty
        after stripping, so ``""`` never clobbers a captured value.
        """
        if not session_id or not cwd:
            return
        sets, args = ["cwd = ?"], [clean_text(cwd)]
        for col, value in (("git_branch", _stripped(git_branch)),
                           ("git_repo_root", _stripped(git_repo_root))):
            if value is not None:
                sets.append(f"{col} = ?")
                args.append(value)
        args.append(clean_text(session_id))
        self._write(lambda c: c.execute(
            f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", args), op="update_session_cwd")

    def backfill_repo_roots(self, cwd_to_root: Mapping[str, str]) -> None:
        """In one transaction, set ``git_repo_root`` of rows with exactly that ``cwd`` whose root
        is NULL or ``''``; pairs with an empty side are skipped."""
        pairs = [(clean_text(root), clean_text(cwd)) for cwd, root in dict(cwd_to_root).items()
                 if cwd and root]
        if not pairs:
            return
        self._write(lambda c: c.executemany(
            "UPDATE sessions SET git_repo_root = ? WHERE cwd = ? AND "
            "(git_repo_root IS NULL OR git_repo_root = '')", pairs), op="backfill_repo_roots")

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict]:
        """``[{"cwd", "sessions", "last_active"}]``, one per distinct non-blank ``cwd`` (children
        counted); ``last_active`` = the newest ``COALESCE(ended_at, started_at, 0)`` (float).
        Archived rows only with ``include_archived``. Ordered by ``last_active`` DESC."""
        where = "" if include_archived else " AND COALESCE(archived, 0) = 0"

        def fn(c: sqlite3.Connection) -> list[dict]:
            return [{"cwd": r[0], "sessions": int(r[1]), "last_active": float(r[2])}
                    for r in c.execute(
                        "SELECT cwd, COUNT(*), MAX(COALESCE(ended_at, started_at, 0)) AS la "
                        f"FROM sessions WHERE cwd IS NOT NULL AND TRIM(cwd) != ''{where} "
                        "GROUP BY cwd ORDER BY la DESC, cwd")]

        return self._read(fn)
