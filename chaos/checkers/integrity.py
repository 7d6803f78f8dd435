"""``integrity``: the final store is structurally sound (SPEC §16.3, §2, §2.4).

SPEC §16.3: "``PRAGMA integrity_check`` = ok, ``foreign_key_check`` empty, FTS ``integrity-check``
ok, ``sessions.message_count`` equals the counted rows."

Runs on a temporary COPY of the final store:

* ``PRAGMA integrity_check`` returns the single row ``ok``;
* ``PRAGMA foreign_key_check`` returns no row;
* ``messages_fts`` (required, SPEC §2.4): ``INSERT INTO messages_fts(messages_fts, rank)
  VALUES('integrity-check', 1)`` (the index is also compared with the ``messages`` content). While
  a background rebuild is pending (``state_meta`` ``fts_rebuild_high_water`` present) rows in the
  back-fill range are legitimately unindexed, so only the index's internal consistency is checked
  (rank 0) and the figure says so;
* ``messages_fts_trigram`` if present: ``INSERT INTO messages_fts_trigram(messages_fts_trigram)
  VALUES('integrity-check')`` (internal consistency: the trigram table excludes ``role='tool'``
  rows, so it cannot equal the content table);
* ``sessions.message_count`` equals ``COUNT(*)`` of its messages for every session.

No params.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from .base import CheckContext, Verdict, problems_as_cases, verdict_from
from .store import connect_copy, copied_store


@dataclass(frozen=True, kw_only=True)
class Params:
    """integrity_check, foreign_key_check, FTS integrity and message counts."""


NAME = "integrity"


def _fts_check(conn: sqlite3.Connection, sql: str) -> str:
    try:
        conn.execute(sql)
        return "ok"
    except sqlite3.Error as exc:
        return f"{type(exc).__name__}: {exc}"


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules and the
    ``params`` keys are in this module's docstring."""
    fig: dict = {}
    evidence: list = []
    problems: list[str] = []
    if not ctx.store_path.is_file():
        why = f"no store at {ctx.store_path}"
        return verdict_from(NAME, problems_as_cases("store", [why]), {"store": str(ctx.store_path)},
                            summary="", fail_summary=why, cases_as_evidence=False)
    with copied_store(ctx.store_path) as copy:
        conn = connect_copy(copy)
        try:
            _run_checks(conn, fig, evidence, problems)
        except sqlite3.DatabaseError as exc:
            fig["error"] = f"{type(exc).__name__}: {exc}"
            problems.append(f"store unreadable: {fig['error']}")
            evidence.append({"error": fig["error"]})
        finally:
            conn.close()
    summary = ("" if problems else f"integrity ok: {fig['sessions']} sessions, "
               f"{fig['messages']} messages, FTS ok, message_count matches")
    return verdict_from(NAME, problems_as_cases("integrity", problems), fig, summary=summary,
                        fail_summary="; ".join(problems), evidence=evidence,
                        cases_as_evidence=False)


def _run_checks(conn: sqlite3.Connection, fig: dict, evidence: list, problems: list) -> None:
    rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    fig["integrity_check"] = "ok" if rows == ["ok"] else rows[:20]
    if rows != ["ok"]:
        problems.append("integrity_check: " + "; ".join(map(str, rows[:3])))
        evidence.extend({"integrity_check": r} for r in rows[:10])

    fk = conn.execute("PRAGMA foreign_key_check").fetchall()
    fig["foreign_key_check"] = len(fk)
    if fk:
        problems.append(f"foreign_key_check: {len(fk)} violation(s)")
        evidence.extend({"foreign_key_check": {"table": r[0], "rowid": r[1], "parent": r[2],
                                               "fkid": r[3]}} for r in fk[:10])

    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    pending = False
    if "state_meta" in names:
        pending = conn.execute("SELECT 1 FROM state_meta WHERE key = "
                               "'fts_rebuild_high_water'").fetchone() is not None
    fig["fts_rebuild_pending"] = pending
    if "messages_fts" in names:
        rank = 0 if pending else 1
        res = _fts_check(conn, "INSERT INTO messages_fts(messages_fts, rank) "
                               f"VALUES('integrity-check', {rank})")
        fig["messages_fts"] = res if not pending else f"{res} (index only: rebuild pending)"
        if res != "ok":
            problems.append(f"messages_fts integrity-check: {res}")
    else:
        fig["messages_fts"] = "missing"
        problems.append("messages_fts is missing (SPEC §2.4)")
    if "messages_fts_trigram" in names:
        res = _fts_check(conn, "INSERT INTO messages_fts_trigram(messages_fts_trigram) "
                               "VALUES('integrity-check')")
        fig["messages_fts_trigram"] = res
        if res != "ok":
            problems.append(f"messages_fts_trigram integrity-check: {res}")
    else:
        fig["messages_fts_trigram"] = "absent"

    fig["sessions"] = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    fig["messages"] = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    bad = conn.execute(
        "SELECT s.id, s.message_count, COUNT(m.id) FROM sessions s "
        "LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.id "
        "HAVING COALESCE(s.message_count, 0) != COUNT(m.id)").fetchall()
    fig["message_count_mismatches"] = len(bad)
    if bad:
        problems.append(f"message_count differs from counted rows in {len(bad)} session(s)")
        evidence.extend({"session_id": r[0], "message_count": r[1], "counted": r[2]}
                        for r in bad[:10])
