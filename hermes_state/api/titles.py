"""Titles and lineage numbering (SPEC §5, §7).

The unique-title index and the repair of duplicate titles an open makes before creating it
(SPEC §3) are schema work: :func:`hermes_state.schema.tables.ensure_title_index`.

Decisions recorded here (the SPEC leaves them open):

* **Hand-set vs automatic titles.** The schema has no column for it and schema changes are not
  ours to make, so the origin lives in ``state_meta``: :meth:`TitlesMixin.set_auto_title` writes
  ``state_meta['auto_title:<session_id>'] = <the title it set>``. A session's title counts as
  automatic **iff** that key exists and its value equals the session's current title; anything
  else (no key, a different value, a title written by older code or by hand through
  :meth:`TitlesMixin.set_session_title`) counts as set by hand. Comparing values instead of
  trusting a flag means a stale key can never make a hand-set title replaceable: the failure
  mode is "treated as manual", the safe side. ``set_session_title`` deletes the key of the
  session it titles (and of an ancestor whose title it takes); ``delete_session`` and
  ``prune_sessions`` delete the keys of the sessions they remove (see :func:`auto_title_key`).
* **Automatic titles never raise for length**: a cleaned title over 100 characters is cut to
  100 (and the base is cut further when a ``#N`` suffix must fit), because a generated title is
  not the user's input. An empty automatic title sets nothing and returns None. An automatic
  title may be given to an untitled session even if its title was cleared by hand.
* **Compression ancestor** (SPEC §7): the holder H of a title is a compression ancestor of S when
  walking ``parent_session_id`` up from S reaches H through sessions that all ended with
  ``end_reason='compression'`` (H included): every link on the way is a context-compression
  split. A parent of any other kind (a live session that spawned a sub-agent, a session ended by
  the user) keeps its title, and S gets the "already in use" error.
* Lookups (:meth:`TitlesMixin.get_session_by_title`, :meth:`TitlesMixin.resolve_session_by_title`,
  :meth:`TitlesMixin.get_next_title_in_lineage`) take the string as given (exact, case-sensitive,
  no sanitising) and never use ``LIKE``: numbered variants are found with a binary range scan on
  the unique title index, so ``_``, ``%`` and ``\\`` are literal.
* Lineage walks are cycle-safe (a visited set) and bounded by :data:`MAX_LINEAGE_DEPTH` hops.
"""

from __future__ import annotations

import re
import sqlite3

from .sessions import session_row
from .text import clean_text

MAX_TITLE_LENGTH = 100

#: A lineage walk never takes more hops than this (defends against corrupt parent links).
MAX_LINEAGE_DEPTH = 10_000

AUTO_TITLE_META_PREFIX = "auto_title:"

# ASCII control characters except \t \n \r, which the whitespace collapse turns into spaces.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Invisible and bidirectional-control characters (SPEC §7).
_INVISIBLE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]")
_WHITESPACE = re.compile(r"\s+")
_NUMBERED = re.compile(r"^(.*) #(\d+)$", re.DOTALL)


def auto_title_key(session_id: str) -> str:
    """The ``state_meta`` key recording the automatic title of ``session_id`` (module docstring)."""
    return AUTO_TITLE_META_PREFIX + str(clean_text(session_id))


def clean_title(text: str | None) -> str | None:
    """Sanitise without the length check: the common part of manual and automatic titles."""
    if not text:
        return None
    if not isinstance(text, str):
        raise TypeError(f"a title must be a string or None, not {type(text).__name__}")
    cleaned = clean_text(text)  # lone surrogates -> U+FFFD (SPEC §2.2)
    cleaned = _CONTROL.sub("", cleaned)
    cleaned = _INVISIBLE.sub("", cleaned)
    cleaned = _WHITESPACE.sub(" ", cleaned).strip()
    return cleaned or None


def sanitize_title(text: str | None) -> str | None:
    """Clean a session title (SPEC §7).

    Strips ASCII control characters (tab, newline and carriage return count as whitespace),
    invisible/bidi characters U+200B–U+200F, U+2028–U+202E, U+2060–U+2069, U+FEFF and the
    interlinear annotation / object replacement characters U+FFF9–U+FFFC (upstream), replaces
    lone surrogates with U+FFFD (SPEC §2.2), collapses every run of whitespace to one space and
    trims. Idempotent.

    Args:
        text: the raw title, or None.
    Returns:
        The cleaned title, or None when nothing is left.
    Raises:
        ValueError: ``"Title too long (N chars, max 100)"`` when the cleaned title is longer than
            100 characters.
        TypeError: ``text`` is neither a string nor None.
    """
    cleaned = clean_title(text)
    if cleaned is not None and len(cleaned) > MAX_TITLE_LENGTH:
        raise ValueError(f"Title too long ({len(cleaned)} chars, max {MAX_TITLE_LENGTH})")
    return cleaned


def split_numbered(title: str) -> tuple[str, int | None]:
    """``"base #N"`` → ``("base", N)``; any other title → ``(title, None)`` (SPEC §7)."""
    m = _NUMBERED.match(title)
    if m and m.group(1):
        return m.group(1), int(m.group(2))
    return title, None


def _numbered_variants(c: sqlite3.Connection, base: str, exclude_id: str | None = None
                       ) -> list[sqlite3.Row]:
    """Rows ``(id, title, started_at)`` whose title is exactly ``base #<digits>``.

    A binary range scan on the title index: ``base + " #" <= title < base + " $"`` selects every
    title starting with ``base #`` (``$`` follows ``#`` in code-point order), then the digits are
    checked in Python. No LIKE, so no wildcard and no case folding.
    """
    rows = c.execute(
        "SELECT id, title, started_at FROM sessions WHERE title >= ? AND title < ? "
        "AND (? IS NULL OR id != ?) ORDER BY started_at DESC, rowid DESC",
        (base + " #", base + " $", exclude_id, exclude_id)).fetchall()
    out = []
    for r in rows:
        b, n = split_numbered(r["title"])
        if n is not None and b == base:
            out.append(r)
    return out


def _max_number(c: sqlite3.Connection, base: str, exclude_id: str | None = None) -> int | None:
    """Highest N among ``base`` (counts as 1) and ``base #N`` titles; None when neither exists."""
    best: int | None = None
    exact = c.execute("SELECT 1 FROM sessions WHERE title = ? AND (? IS NULL OR id != ?)",
                      (base, exclude_id, exclude_id)).fetchone()
    if exact is not None:
        best = 1
    for r in _numbered_variants(c, base, exclude_id):
        n = split_numbered(r["title"])[1]
        best = n if best is None else max(best, n)
    return best


def _holder(c: sqlite3.Connection, title: str, session_id: str) -> str | None:
    """The id of another session holding ``title``, or None."""
    row = c.execute("SELECT id FROM sessions WHERE title = ? AND id != ?",
                    (title, session_id)).fetchone()
    return None if row is None else row[0]


def is_compression_ancestor(c: sqlite3.Connection, holder_id: str, session_id: str) -> bool:
    """True when ``holder_id`` is reached from ``session_id`` through compression splits only.

    Walks ``parent_session_id`` upwards from ``session_id``; every ancestor visited (the holder
    included) must have ``end_reason='compression'`` (SPEC §7). Cycle-safe and bounded by
    :data:`MAX_LINEAGE_DEPTH`.
    """
    row = c.execute("SELECT parent_session_id FROM sessions WHERE id = ?",
                    (session_id,)).fetchone()
    seen = {session_id}
    cur = None if row is None else row[0]
    hops = 0
    while cur is not None and cur not in seen and hops < MAX_LINEAGE_DEPTH:
        hops += 1
        seen.add(cur)
        row = c.execute("SELECT parent_session_id, end_reason FROM sessions WHERE id = ?",
                        (cur,)).fetchone()
        if row is None or row["end_reason"] != "compression":
            return False
        if cur == holder_id:
            return True
        cur = row["parent_session_id"]
    return False


def _take_title(c: sqlite3.Connection, title: str | None, session_id: str) -> None:
    """Make ``title`` free for ``session_id``: a compression ancestor holding it loses it;
    any other holder raises ``ValueError`` (checked before whether ``session_id`` exists, as
    upstream does)."""
    if title is None:
        return
    holder = _holder(c, title, session_id)
    if holder is None:
        return
    if not is_compression_ancestor(c, holder, session_id):
        raise ValueError(f"Title '{title}' is already in use by session {holder}")
    c.execute("UPDATE sessions SET title = NULL WHERE id = ?", (holder,))
    c.execute("DELETE FROM state_meta WHERE key = ?", (auto_title_key(holder),))


def _fit(base: str, n: int) -> str:
    """``base #n`` cut (on the base side) to at most 100 characters."""
    suffix = f" #{n}"
    room = MAX_TITLE_LENGTH - len(suffix)
    if len(base) > room:
        base = base[:room].rstrip()
    return base + suffix


class TitlesMixin:
    """Title API (SPEC §5, §7); needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    #: Exposed so callers can validate input before a write: ``SessionDB.sanitize_title(t)``.
    sanitize_title = staticmethod(sanitize_title)
    MAX_TITLE_LENGTH = MAX_TITLE_LENGTH

    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set (or clear) a session's title by hand (SPEC §5, §7).

        The title is sanitised first (:func:`sanitize_title`); an empty result clears it. Titles
        are unique among non-NULL titles. When another session holds the title and that session
        is a compression ancestor of ``session_id`` (module docstring), the title moves: the
        ancestor's becomes NULL and this session takes it, in the same transaction. The title is
        recorded as hand-set, so :meth:`set_auto_title` never replaces it.

        Args:
            session_id: the session to title.
            title: the new title; None or blank clears it.
        Returns:
            True when the session exists (and now has the title); False for an unknown id.
        Raises:
            ValueError: the cleaned title is longer than 100 characters, or
                ``"Title '<t>' is already in use by session <id>"`` when any other session
                holds it (both checked before whether the session exists, as upstream does).
        """
        clean = sanitize_title(title)
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> bool:
            _take_title(c, clean, sid)
            cur = c.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, sid))
            if cur.rowcount == 0:
                return False
            c.execute("DELETE FROM state_meta WHERE key = ?", (auto_title_key(sid),))
            return True

        return self._write(fn, op="set_session_title")

    def set_auto_title_if_empty(self, session_id: str, title: str | None) -> bool:
        """Title an untitled session; never replaces a title (UPSTREAM_API §2.6).

        Same cleaning, length check and uniqueness rules as :meth:`set_session_title` (a holder
        that is a compression ancestor gives the title up); the check and the write happen in
        one transaction. The title counts as automatic (:meth:`set_auto_title` may replace it).

        Returns:
            True when the title was written; False when the session already has one, is
            unknown, or the cleaned title is empty.
        Raises:
            ValueError: too long, or held by another session.
        """
        clean = sanitize_title(title)
        sid = clean_text(session_id)
        if clean is None:
            return False

        def fn(c: sqlite3.Connection) -> bool:
            row = c.execute("SELECT title FROM sessions WHERE id = ?", (sid,)).fetchone()
            if row is None or row["title"] is not None:
                return False
            _take_title(c, clean, sid)
            c.execute("UPDATE sessions SET title = ? WHERE id = ?", (clean, sid))
            c.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) "
                      "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                      (auto_title_key(sid), clean))
            return True

        return self._write(fn, op="set_auto_title_if_empty")

    def set_auto_title(self, session_id: str, title: str | None) -> str | None:
        """Give a session an automatic title; never fails on a collision (SPEC §5).

        The title is cleaned like :func:`sanitize_title` but cut to 100 characters instead of
        raising. If another session holds it, the next free number is taken: strip a trailing
        ``#N`` to get the base, start at ``max(N) + 1`` over the other sessions' ``base`` (counts
        as 1) and ``base #N`` titles, and go up until the title is free (the base is shortened
        if ``base #N`` would exceed 100 characters). A title set by hand is never replaced;
        a previous automatic title is.

        Args:
            session_id: the session to title.
            title: the generated title.
        Returns:
            The title now set; None when the session is unknown, holds a hand-set title, or the
            cleaned title is empty (nothing changed in those cases).
        """
        cleaned = clean_title(title)
        sid = clean_text(session_id)
        if cleaned is None:
            return None
        if len(cleaned) > MAX_TITLE_LENGTH:
            cleaned = cleaned[:MAX_TITLE_LENGTH].rstrip()

        def fn(c: sqlite3.Connection) -> str | None:
            row = c.execute("SELECT title FROM sessions WHERE id = ?", (sid,)).fetchone()
            if row is None:
                return None
            current = row["title"]
            key = auto_title_key(sid)
            if current is not None:
                meta = c.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
                if meta is None or meta[0] != current:
                    return None  # set by hand: never replaced
            cand = cleaned
            if _holder(c, cand, sid) is not None:
                base = split_numbered(cand)[0]
                n = (_max_number(c, base, exclude_id=sid) or 1) + 1
                cand = _fit(base, n)
                while _holder(c, cand, sid) is not None:
                    n += 1
                    cand = _fit(base, n)
            c.execute("UPDATE sessions SET title = ? WHERE id = ?", (cand, sid))
            c.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) "
                      "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, cand))
            return cand

        return self._write(fn, op="set_auto_title")

    def is_auto_title(self, session_id: str) -> bool:
        """True when the session's current title was set by :meth:`set_auto_title`."""
        def fn(c: sqlite3.Connection) -> bool:
            row = c.execute(
                "SELECT 1 FROM sessions s JOIN state_meta m ON m.key = ? "
                "WHERE s.id = ? AND s.title IS NOT NULL AND m.value = s.title",
                (auto_title_key(session_id), clean_text(session_id))).fetchone()
            return row is not None
        return self._read(fn)

    def get_session_title(self, session_id: str) -> str | None:
        """The session's title, or None (untitled or unknown id) (SPEC §5)."""
        row = self._read(lambda c: c.execute(
            "SELECT title FROM sessions WHERE id = ?", (clean_text(session_id),)).fetchone())
        return None if row is None else row[0]

    def get_session_by_title(self, title: str) -> dict | None:
        """The session row (raw columns, D7) whose title is exactly ``title``, or None."""
        if title is None:
            return None
        return self._read(lambda c: session_row(c.execute(
            "SELECT * FROM sessions WHERE title = ?", (clean_text(title),)).fetchone(), c))

    def resolve_session_by_title(self, title: str) -> str | None:
        """Resolve a title to the newest session of its lineage (SPEC §5, §7).

        Returns:
            The id of the newest (by ``started_at``) session titled ``title #N`` if any such
            exists, else the id of the session titled exactly ``title``, else None. ``_``, ``%``
            and ``\\`` are literal; matching is case-sensitive.
        """
        if title is None:
            return None
        t = clean_text(title)

        def fn(c: sqlite3.Connection) -> str | None:
            variants = _numbered_variants(c, t)
            if variants:
                return variants[0]["id"]
            row = c.execute("SELECT id FROM sessions WHERE title = ?", (t,)).fetchone()
            return None if row is None else row[0]

        return self._read(fn)

    def get_next_title_in_lineage(self, title: str) -> str:
        """The title the next session of a lineage should take (SPEC §7).

        Strip a trailing `` #N`` to get the base; if neither the base nor any ``base #N`` exists
        return the base, else ``base #(max(N)+1)`` where the bare base counts as 1. Wildcards are
        literal (``test_project`` is not matched by ``testXproject #2``).

        Args:
            title: a title, numbered or not.
        Returns:
            The next title (not sanitised, not reserved: another writer may take it first).
        """
        base = split_numbered(clean_text(title))[0]
        top = self._read(lambda c: _max_number(c, base))
        return base if top is None else f"{base} #{top + 1}"
