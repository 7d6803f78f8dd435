"""``recovery``: after the run doctor says what is there, and a fresh writer can write
(SPEC §16.3).

SPEC §16.3: "after the run, ``doctor`` reports what the scenario expects and a fresh writer can
write."

* The fresh writer: a temporary COPY of the final store is opened with
  :class:`hermes_state.SessionDB` (migration, generation identity, write path), a session
  created, a message appended, read back, closed. Any exception ⇒ FAIL with the error.
* The doctor (``doctor: true``): ``hermes-state doctor --json`` runs (the user's command, in a
  child process) on a copy of the run's home (the store, its WAL, the retired-WAL captures
  beside it and the spool), and its diagnosis is compared with what the toolkit reads itself
  from those copies (payload ids, :mod:`chaos.checkers.store`), by :func:`doctor_cases`:

  - messages that exist only in a capture (payloads in a capture and not in the store) ⇒
    doctor exits 1 and its FIRST finding is an issue naming that capture (they need action
    before anything else: salvage before the gateway restarts); none ⇒ no finding says so;
  - spooled messages not in the store ⇒ an issue says spooled messages are not in the store
    yet; none ⇒ no finding says so.

Figures: sessions and messages in the store (before the probe); with ``doctor``, its exit code,
first finding and the payloads only in captures or the spool.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..params import param
from .base import CheckContext, Verdict, params_of, problems_as_cases, verdict_from
from .store import (connect_copy, copied_store, find_captures, payload_ids_in_capture,
                    payload_ids_in_db, spool_payload_ids)

#: How long ``doctor --json`` may take on the copy (s).
DOCTOR_TIMEOUT_S = 120.0
#: Words of doctor's findings (hermes_state.operator.doctor) the rules look for.
CAPTURE_ONLY_WORDS = "exist only in the capture"
SPOOL_PENDING_WORDS = "spooled message(s)"
SPOOL_PENDING_TAIL = "are not in the store yet"


@dataclass(frozen=True, kw_only=True)
class Params:
    """After the run, doctor reports what is expected and a fresh writer writes."""

    doctor: bool = param(False, "Also run `hermes-state doctor --json` on a copy of the run's "
                         "home and check its diagnosis: messages only in a retired-WAL capture "
                         "are its first issue, spooled messages not in the store an issue, and "
                         "neither is claimed when false.")


NAME = "recovery"


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules and the
    ``params`` keys are in this module's docstring."""
    from hermes_state import SessionDB

    p = params_of(Params, params)
    fig: dict = {"store": str(ctx.store_path)}
    doctor_cases_found: dict = {}
    if p.doctor:
        doctor_cases_found = {"doctor": doctor_cases(*_doctor_on_copy(ctx, fig))}
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
        return verdict_from(NAME, {**doctor_cases_found, **problems_as_cases("fresh_writer", [why])},
                            fig, summary="",
                            fail_summary=why, evidence=[{"step": step, "error": fig["error"]}],
                            cases_as_evidence=False)
    return verdict_from(NAME, doctor_cases_found, fig,
                        summary=("doctor's diagnosis matches the files; " if p.doctor else "")
                        + f"a fresh writer wrote and read back on a copy of the final store "
                        f"({fig.get('sessions', '?')} sessions, {fig.get('messages', '?')} "
                        "messages)")


def _doctor_on_copy(ctx: CheckContext, fig: dict) -> tuple[dict | None, str, Counter, Counter]:
    """Run ``doctor --json`` on a copy of the run's home; read the truth from the same copies.

    Returns:
        ``(doctor's JSON report or None, why it is missing, payloads only in captures,
        spooled payloads not in the store)``.
    """
    home = Path(ctx.home)
    store = Path(ctx.store_path)
    with tempfile.TemporaryDirectory(prefix="chaos-doctor-") as tmp:
        copy = Path(tmp) / "home"
        copy.mkdir()
        for name in (store.name, f"{store.name}-wal"):
            if (store.parent / name).is_file():
                shutil.copyfile(store.parent / name, copy / name)
        for cap in find_captures(home, store.parent):  # beside the store in the run's home
            if not cap.path.is_symlink() and not (copy / cap.path.name).exists():
                shutil.copytree(cap.path, copy / cap.path.name, symlinks=True)
        if (home / "sessions").is_dir() and not (home / "sessions").is_symlink():
            shutil.copytree(home / "sessions", copy / "sessions", symlinks=True)
        in_store = payload_ids_in_db(copy / store.name)
        in_captures: Counter = Counter()
        for cap in find_captures(copy):
            try:
                in_captures.update(payload_ids_in_capture(cap))
            except (OSError, sqlite3.Error):
                continue  # a capture that cannot be opened holds nothing doctor could compare
        spooled, _problems = spool_payload_ids(copy)
        only_captured = Counter({p: 1 for p in in_captures if p not in in_store})
        pending = Counter({p: 1 for p in spooled if p not in in_store})
        env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_FAILPOINTS"}
        try:
            proc = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(copy),
                                   "doctor", "--json"], capture_output=True, text=True,
                                  timeout=DOCTOR_TIMEOUT_S, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            return None, f"doctor gave no report within {DOCTOR_TIMEOUT_S:g}s", \
                only_captured, pending
    report = None
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pass
    why = "" if isinstance(report, dict) else (
        f"doctor --json printed no JSON report (exit {proc.returncode}): "
        f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    if isinstance(report, dict):
        findings = report.get("findings") or []
        fig["doctor"] = {"exit_code": proc.returncode,
                         "first": (findings[0] if findings else None),
                         "only_in_captures": len(only_captured),
                         "spooled_not_in_store": len(pending)}
    return (report if isinstance(report, dict) else None), why, only_captured, pending


def doctor_cases(report: dict | None, why: str, only_captured: Counter,
                 pending: Counter) -> list[dict]:
    """The doctor rules of the module docstring, on doctor's JSON ``report`` (None: ``why``)."""
    if report is None:
        return [{"violation": "doctor_no_report", "why": why}]
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    exit_code = report.get("exit_code")
    out = []

    def says(words: str, tail: str = "") -> list[dict]:
        return [f for f in findings if words in str(f.get("title", ""))
                and tail in str(f.get("title", ""))]

    claims = says(CAPTURE_ONLY_WORDS)
    first = findings[0] if findings else {}
    if only_captured:
        example = sorted(only_captured)[0]
        if exit_code != 1 or first.get("level") != "issue" or CAPTURE_ONLY_WORDS not in str(
                first.get("title", "")):
            out.append({"violation": "capture_only_not_first_issue", "payload_id": example,
                        "first_finding": first, "exit_code": exit_code,
                        "why": f"{len(only_captured)} acknowledged message(s) exist only in a "
                               f"retired-WAL capture (e.g. {example}), but doctor (exit "
                               f"{exit_code}) does not say so first as an issue: its first "
                               f"finding is [{first.get('level')}] {first.get('title')!r}"})
    elif claims:
        out.append({"violation": "capture_only_claimed", "finding": claims[0],
                    "why": f"doctor says {claims[0].get('title')!r}, but every payload of the "
                           "captures is in the store"})
    spool_claims = says(SPOOL_PENDING_WORDS, SPOOL_PENDING_TAIL)
    if pending and not any(f.get("level") == "issue" for f in spool_claims):
        example = sorted(pending)[0]
        out.append({"violation": "spool_pending_not_reported", "payload_id": example,
                    "why": f"{len(pending)} spooled message(s) are not in the store (e.g. "
                           f"{example}), but doctor reports no issue saying so"})
    elif not pending and spool_claims:
        out.append({"violation": "spool_pending_claimed", "finding": spool_claims[0],
                    "why": f"doctor says {spool_claims[0].get('title')!r}, but every spooled "
                           "message is in the store"})
    return out
