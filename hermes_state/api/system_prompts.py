"""System prompts in stores whose release keeps them apart (schema 25+, UPSTREAM_API.md §4.5, D4).

From schema 25 upstream stores the prompt text once in ``system_prompts(hash TEXT PRIMARY KEY,
prompt TEXT NOT NULL)`` and points to it from ``sessions.system_prompt_hash`` (lower-case hex
SHA-256 of the UTF-8 text); ``sessions.system_prompt`` is NULL on migrated rows. Upstream reads
``COALESCE(system_prompts.prompt, sessions.system_prompt)``: the hash wins over the column.

This code keeps its own schema (the prompt in ``sessions.system_prompt``) and follows the store
as it is: on a store with that table and column, reads resolve the hash first and writes store
the prompt the way the newer release shows it -- insert-or-ignore ``(hash, prompt)`` (before the
session row points at it: fresh v25+ stores declare a foreign key), set the hash, NULL the
column. ``system_prompts`` rows are never deleted here (upstream prunes unreferenced ones).
"""

from __future__ import annotations

import hashlib
import sqlite3

TABLE = "system_prompts"
HASH_COLUMN = "system_prompt_hash"


def prompt_hash(prompt: str) -> str:
    """Lower-case hex SHA-256 of the UTF-8 ``prompt`` (the key upstream uses)."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def separate(conn: sqlite3.Connection) -> bool:
    """True when the store keeps prompts in ``system_prompts`` (table and hash column exist)."""
    row = conn.execute(
        "SELECT (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?), "
        "(SELECT 1 FROM pragma_table_info('sessions') WHERE name = ?)",
        (TABLE, HASH_COLUMN)).fetchone()
    return bool(row[0] and row[1])


def resolve(conn: sqlite3.Connection, row: dict) -> dict:
    """Set ``row["system_prompt"]`` to what the store shows: the hashed prompt wins (D4).

    Args:
        row: a ``sessions`` row as a dict (modified in place and returned).
    """
    digest = row.get(HASH_COLUMN)
    if digest:
        try:
            found = conn.execute(f"SELECT prompt FROM {TABLE} WHERE hash = ?",
                                 (digest,)).fetchone()
        except sqlite3.OperationalError:
            found = None
        if found is not None and found[0] is not None:
            row["system_prompt"] = found[0]
    return row


def write(conn: sqlite3.Connection, session_id: str, prompt: str | None) -> None:
    """Store ``prompt`` as the session's system prompt the way the store keeps it.

    Separate stores (:func:`separate`): insert-or-ignore ``(hash, prompt)``, point the session
    at it and NULL the column (None clears both). Other stores: the column. Runs inside the
    caller's write transaction; an unknown session changes nothing.
    """
    if not separate(conn):
        conn.execute("UPDATE sessions SET system_prompt = ? WHERE id = ?", (prompt, session_id))
        return
    if prompt is None:
        conn.execute(f"UPDATE sessions SET system_prompt = NULL, {HASH_COLUMN} = NULL "
                     "WHERE id = ?", (session_id,))
        return
    digest = prompt_hash(prompt)
    conn.execute(f"INSERT OR IGNORE INTO {TABLE}(hash, prompt) VALUES (?, ?)", (digest, prompt))
    conn.execute(f"UPDATE sessions SET system_prompt = NULL, {HASH_COLUMN} = ? WHERE id = ?",
                 (digest, session_id))


def move_column_prompt(conn: sqlite3.Connection, session_id: str) -> None:
    """After an upsert that passed a prompt: keep it the way a separate store keeps it.

    A row without a hash gets the column's prompt moved behind its hash; a row that already has
    one keeps it (the stored prompt wins, D5) and the column an upsert may have filled is
    cleared again. Nothing on other stores. Runs inside the caller's write transaction.
    """
    if not separate(conn):
        return
    row = conn.execute(f"SELECT system_prompt, {HASH_COLUMN} FROM sessions WHERE id = ?",
                       (session_id,)).fetchone()
    if row is None or row[0] is None:
        return
    if row[1] is None:
        write(conn, session_id, row[0])
    else:
        conn.execute("UPDATE sessions SET system_prompt = NULL WHERE id = ?", (session_id,))
