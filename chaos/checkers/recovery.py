"""``recovery``: after the run a fresh writer can write (SPEC §16.3).

SPEC §16.3: "after the run, ``doctor`` reports what the scenario expects and a fresh writer can
write." This checker covers the second half: it opens a temporary COPY of the final store with
:class:`hermes_state.SessionDB` (a fresh writer: migration, generation identity, write path),
creates a session, appends a message, reads it back and closes. Any exception ⇒ FAIL with the
error. Figures: sessions and messages in the store (before the probe). No params.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass

from .base import CheckContext, Verdict, problems_as_cases, verdict_from
from .store import connect_copy, copied_store


@dataclass(frozen=True, kw_only=True)
class Params:
    """After the run, doctor reports what is expected and a fresh writer writes."""


NAME = "recovery"


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules and the
    ``params`` keys are in this module's docstring."""
    from hermes_state import SessionDB

    fig: dict = {"store": str(ctx.store_path)}
    step = "copy the store"
    try:
        with copied_store(ctx.store_path) as copy:
            step = "count rows"
            conn = connect_copy(copy)
            try:
                fig["sessions"] = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
                fig["messages"] = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
            except sqlite3.Error as exc:
                fig["count_error"] = f"{type(exc).__name__}: {exc}"
            finally:
                conn.close()
            step = "open with SessionDB"
            db = SessionDB(db_path=copy)
            try:
                sid = f"chaos-recovery-{uuid.uuid4().hex[:12]}"
                text = f"recovery probe {sid}"
                step = "create_session"
                db.create_session(sid, source="chaos-check")
                step = "append_message"
                db.append_message(sid, "user", text)
                step = "read back"
                got = db.get_messages(sid)
                if [m["content"] for m in got] != [text]:
                    raise AssertionError(f"read back {got!r}, expected one message {text!r}")
            except BaseException:
                try:
                    db.close()
                except Exception:  # noqa: BLE001 - the first error is the one reported
                    pass
                raise
            step = "close"
            db.close()
    except Exception as exc:  # noqa: BLE001 - the failure is the verdict
        fig["error"] = f"{type(exc).__name__}: {exc}"
        fig["step"] = step
        why = (f"a fresh writer failed at {step}: {type(exc).__name__}: "
               f"{str(exc).splitlines()[0] if str(exc) else ''}")
        return verdict_from(NAME, problems_as_cases("fresh_writer", [why]), fig, summary="",
                            fail_summary=why, evidence=[{"step": step, "error": fig["error"]}],
                            cases_as_evidence=False)
    return verdict_from(NAME, {}, fig,
                        summary=f"a fresh writer wrote and read back on a copy of the final store "
                        f"({fig.get('sessions', '?')} sessions, {fig.get('messages', '?')} "
                        "messages)")
