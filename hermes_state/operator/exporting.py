"""``sessions export`` written as it is read: one message in memory at a time (issue 18).

A session of tens of thousands of messages (a gateway thread of a year) is exported without
building its dict, its list of messages or its JSON text in memory: the session row is read,
then its messages in pages of :data:`PAGE` rows, all inside one read transaction (the export of
one session is one point in time, like :meth:`SessionDB.export_session`), and each message is
encoded and written before the next page is read. Memory stays at a page of rows whatever
the session's size.

Formats (the same data as :meth:`SessionDB.export_session` / ``iter_export``):

* ``json``: an array of sessions; each session's fields one per line, its ``messages`` one
  compact JSON object per line (the C encoder: an indented dump of every message is
  several times slower and was most of an export's time);
* ``jsonl``: one session per line, messages inline;
* ``md``: a heading per session and one paragraph per message.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Callable, Iterable, Iterator, TextIO

from ..api.messages import ACTIVE_SQL, message_row
from ..api.sessions import session_row
from ..api.text import CleaningConnection, clean_text
from ..store.reads import in_snapshot

#: Messages read per query while streaming (a page of 60 KB tool outputs is 12 MB of text).
PAGE = 200

#: ``progress(done, total)`` after each page: messages written so far, and the total when known.
Progress = Callable[[int, "int | None"], None]

_LAST_ACTIVE = ("COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id), "
                "s.started_at)")


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


def _messages(c: sqlite3.Connection, sid: str) -> Iterator[dict]:
    """The session's visible messages in id order, read :data:`PAGE` rows at a time."""
    last = None
    while True:
        if last is None:
            rows = c.execute(f"SELECT * FROM messages WHERE session_id = ? AND {ACTIVE_SQL} "
                             "ORDER BY id LIMIT ?", (sid, PAGE)).fetchall()
        else:
            rows = c.execute(f"SELECT * FROM messages WHERE session_id = ? AND {ACTIVE_SQL} "
                             "AND id > ? ORDER BY id LIMIT ?", (sid, last, PAGE)).fetchall()
        for r in rows:
            yield message_row(r)
        if len(rows) < PAGE:
            return
        last = rows[-1]["id"]
        del rows, r  # the next page is read with this one already freed


class _Writer:
    """Writes sessions in one format to ``out``; ``progress`` counts messages."""

    def __init__(self, out: TextIO, fmt: str, progress: Progress | None = None,
                 total: int | None = None) -> None:
        if fmt not in ("json", "jsonl", "md"):
            raise ValueError(f"unknown export format {fmt!r}: json, jsonl or md")
        self.out, self.fmt, self.progress, self.total = out, fmt, progress, total
        self.sessions = 0
        self.messages = 0

    def begin(self) -> None:
        if self.fmt == "json":
            self.out.write("[")

    def end(self) -> None:
        if self.fmt == "json":
            self.out.write("\n]\n" if self.sessions else "]\n")

    def _tick(self) -> None:
        self.messages += 1
        if self.progress is not None and self.messages % PAGE == 0:
            self.progress(self.messages, self.total)

    def session(self, row: dict, messages: Iterable[dict]) -> None:
        """Write one session: ``row`` (without ``messages``) and its messages, streamed."""
        out, fmt = self.out, self.fmt
        if fmt == "md":
            out.write(f"# {row.get('title') or row['id']}\n\nsession `{row['id']}` · source "
                      f"{row.get('source')} · model {row.get('model')}\n\n")
            for m in messages:
                out.write(f"**{m['role']}**: {m.get('content') or ''}\n\n")
                self._tick()
            out.write("\n")
        elif fmt == "jsonl":
            head = _dumps(row)
            out.write(head[:-1] + (', "messages": [' if len(head) > 2 else '"messages": ['))
            for n, m in enumerate(messages):
                out.write((", " if n else "") + _dumps(m))
                self._tick()
            out.write("]}\n")
        else:
            head = json.dumps(row, indent=2, ensure_ascii=False, default=str)
            head = head[:-2] if len(head) > 2 else "{"  # drop "\n}": the fields go on
            out.write(("," if self.sessions else "") + "\n  " + head.replace("\n", "\n  ")
                      + (",\n" if len(row) else "\n") + '    "messages": [')
            n = 0
            for n, m in enumerate(messages, 1):
                out.write(("," if n > 1 else "") + "\n      " + _dumps(m))
                self._tick()
            out.write(("\n    ]" if n else "]") + "\n  }")
        self.sessions += 1


def export_session_to(db, session_id: str, out: TextIO, fmt: str = "json",
                      progress: Progress | None = None) -> bool:
    """Write one session as a one-element export (an array for ``json``) to ``out``.

    Args:
        db: a :class:`~hermes_state.db.SessionDB` (read-only is enough).
        fmt: ``json``, ``jsonl`` or ``md``.
        progress: ``progress(messages_written, total)`` every :data:`PAGE` messages.
    Returns:
        False (nothing written) for an unknown session.
    Raises:
        ValueError: unknown ``fmt``.
    """
    sid = clean_text(session_id)

    def fn(c: sqlite3.Connection) -> bool:
        row = session_row(c.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone(), c)
        if row is None:
            return False
        total = c.execute(f"SELECT count(*) FROM messages WHERE session_id = ? AND {ACTIVE_SQL}",
                          (sid,)).fetchone()[0]
        w = _Writer(out, fmt, progress, total)
        w.begin()
        w.session(row, _messages(c, sid))
        w.end()
        return True

    return _read(db, lambda c: in_snapshot(c, lambda: fn(c)))


def _read(db, fn):
    """``fn(conn)`` in one read through the store's connection (texts cleaned, SPEC §2.2)."""
    return db.connection.read(lambda c: fn(CleaningConnection(c)))


def export_all_to(db, out: TextIO, fmt: str = "json", source: str | None = None,
                  progress: Progress | None = None) -> int:
    """Write every session (of ``source``) with ``last_active``, most recently active first
    (the order of :meth:`SessionDB.iter_export`), each in its own read transaction.

    Returns:
        The number of sessions written (a session deleted before its turn is skipped).
    Raises:
        ValueError: unknown ``fmt``.
    """
    src = clean_text(source)
    ids = _read(db, lambda c: [r[0] for r in c.execute(
        "SELECT s.id FROM sessions s WHERE (? IS NULL OR s.source = ?) "
        f"ORDER BY {_LAST_ACTIVE} DESC, s.started_at DESC, s.id DESC", (src, src))])
    total = _read(db, lambda c: c.execute(
        "SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id "
        f"WHERE (? IS NULL OR s.source = ?) AND {ACTIVE_SQL.replace('active', 'm.active')}",
        (src, src)).fetchone()[0])
    w = _Writer(out, fmt, progress, total)
    w.begin()
    for sid in ids:
        def fn(c: sqlite3.Connection, sid: str = sid) -> None:
            row = session_row(c.execute(f"SELECT s.*, {_LAST_ACTIVE} AS last_active "
                                        "FROM sessions s WHERE s.id = ?", (sid,)).fetchone(), c)
            if row is not None:
                w.session(row, _messages(c, sid))

        _read(db, lambda c, fn=fn: in_snapshot(c, lambda: fn(c)))
    w.end()
    return w.sessions
