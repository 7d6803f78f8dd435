"""Windows of a transcript around one message (UPSTREAM_API §2.3 ``get_messages_around``,
``get_anchored_view``): what a search hit opens onto. Inactive rows are included (a hit may be a
compacted row); rows are returned as :meth:`get_messages` returns them.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable

from .messages import message_row
from .text import clean_text


def _window(c: sqlite3.Connection, sid: str, anchor: int, window: int) -> dict | None:
    row = c.execute("SELECT * FROM messages WHERE id = ? AND session_id = ?",
                    (anchor, sid)).fetchone()
    if row is None:
        return None
    n = max(int(window or 0), 0)
    before = c.execute("SELECT * FROM messages WHERE session_id = ? AND id < ? "
                       "ORDER BY id DESC LIMIT ?", (sid, anchor, n)).fetchall()[::-1]
    after = c.execute("SELECT * FROM messages WHERE session_id = ? AND id > ? "
                      "ORDER BY id LIMIT ?", (sid, anchor, n)).fetchall()
    return {"before": [message_row(r) for r in before], "anchor": message_row(row),
            "after": [message_row(r) for r in after]}


def _view(before: list, anchor: dict, after: list) -> dict:
    return {"window": before + [anchor] + after, "messages_before": len(before),
            "messages_after": len(after)}


class AnchorsMixin:
    """Windowed reads; needs ``self._read(fn)``."""

    def get_messages_around(self, session_id: str, around_message_id: int,
                            window: int = 5) -> dict:
        """Up to ``window`` rows before the anchor, the anchor, up to ``window`` after, by id.

        Returns:
            ``{"window": [rows], "messages_before": n, "messages_after": n}`` (the counts are
            the rows returned on each side); empty with zero counts when the anchor is not a
            message of that session. A negative window counts as 0.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> dict:
            w = _window(c, sid, around_message_id, window)
            if w is None:
                return {"window": [], "messages_before": 0, "messages_after": 0}
            return _view(w["before"], w["anchor"], w["after"])

        return self._read(fn)

    def get_anchored_view(self, session_id: str, around_message_id: int, window: int = 5,
                          bookend: int = 3,
                          keep_roles: Iterable[str] | None = ("user", "assistant")) -> dict:
        """:meth:`get_messages_around` filtered to ``keep_roles`` (the anchor always stays;
        None keeps every role), plus ``bookend_start`` / ``bookend_end``: the first / last
        ``bookend`` rows before / after the window with a kept role and non-empty content,
        ascending id.

        Returns:
            ``{"window", "messages_before", "messages_after", "bookend_start",
            "bookend_end"}``; all empty when the anchor is not a message of that session.
        """
        sid = clean_text(session_id)
        roles = None if keep_roles is None else list(keep_roles)
        n_book = max(int(bookend or 0), 0)

        def kept(r: dict) -> bool:
            return roles is None or r["role"] in roles

        def fn(c: sqlite3.Connection) -> dict:
            w = _window(c, sid, around_message_id, window)
            if w is None:
                return {"window": [], "messages_before": 0, "messages_after": 0,
                        "bookend_start": [], "bookend_end": []}
            first = (w["before"] or [w["anchor"]])[0]["id"]
            last = (w["after"] or [w["anchor"]])[-1]["id"]
            role_sql, args = "", []
            if roles is not None:
                role_sql = f" AND role IN ({','.join('?' * len(roles))})"
                args = roles
            nonempty = " AND content IS NOT NULL AND content != ''"
            start = c.execute(f"SELECT * FROM messages WHERE session_id = ? AND id < ?"
                              f"{role_sql}{nonempty} ORDER BY id LIMIT ?",
                              (sid, first, *args, n_book)).fetchall()
            end = c.execute(f"SELECT * FROM messages WHERE session_id = ? AND id > ?"
                            f"{role_sql}{nonempty} ORDER BY id DESC LIMIT ?",
                            (sid, last, *args, n_book)).fetchall()[::-1]
            view = _view([r for r in w["before"] if kept(r)], w["anchor"],
                         [r for r in w["after"] if kept(r)])
            view["bookend_start"] = [message_row(r) for r in start]
            view["bookend_end"] = [message_row(r) for r in end]
            return view

        return self._read(fn)
