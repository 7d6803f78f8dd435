"""Checkers of a mixed fleet (issue 23 item 4): ``fts_exact`` and ``older_release_opens``.

``fts_exact``: ``integrity`` runs FTS5's own ``integrity-check``, which for the trigram index (it
leaves tool rows out) can only judge internal consistency. Here, on a temporary COPY of the final
store, :func:`hermes_state.schema.fts_layout.verify_fts` compares every FTS table term by term
with what its layout says it indexes (``messages_fts`` every row, ``messages_fts_trigram`` every
row but tool rows, newer releases' views included): both indexes exact, whichever release wrote
which row; ``fts_stale`` set is a failure. Rows a pending back-fill has not reached are allowed
(SPEC §2.4). No params.

``older_release_opens``: a user upgrading one process at a time keeps running the old release on
the same file, also after the new one migrated and wrote it. On a temporary COPY of the final
store (with its ``-wal``), the release named by ``version`` (a cached upstream release,
:mod:`hermes_state.testing.upstream_release`) is started in its own process and must open the
store with its own ``SessionDB`` (its own migrations, if any, run on the copy), count every
message (``message_count()``) as plain SQLite counts them, read the messages of every session
holding payload ids (``get_messages``), and find with its own ``search_messages`` the newest
message of every writer process by its payload id. This checker starts one process (the release
under test): the question is what that code does. SKIPPED (with the fetch command) when the
release is not cached.
"""


from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ..params import param
from .base import (
    CheckContext,
    Verdict,
    problems_as_cases,
    verdict_from,
)
from .store import connect_copy, copied_store

OLDER_NAME = "older_release_opens"


@dataclass(frozen=True, kw_only=True)
class OlderParams:
    """The named upstream release opens, counts, reads and searches the final store."""

    version: str = param("0.19.0", "The upstream release that must still open the store "
                         "(cached with `python -m chaos upstream fetch VERSION`).",
                         pattern=r"^[0-9]+(\.[0-9]+){1,3}$")


def _facts(copy: Path) -> tuple[int, dict[str, str], dict[str, int]]:
    """``(messages, {process: newest payload id}, {session: active messages})`` of the copy."""
    conn = connect_copy(copy)
    try:
        total = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        newest: dict[str, str] = {}
        for pid, in conn.execute("SELECT platform_message_id FROM messages WHERE "
                                 "platform_message_id IS NOT NULL ORDER BY id"):
            proc, _, seq = str(pid).rpartition("-")
            if "-" in proc and seq.isdigit():  # a run's payload id <role>-<index>-<n>
                newest[proc] = str(pid)
        per = dict(conn.execute("SELECT session_id, COUNT(*) FROM messages WHERE "
                                "platform_message_id IS NOT NULL AND COALESCE(active, 1) = 1 "
                                "GROUP BY session_id"))
    finally:
        conn.close()
    return total, newest, per


def check_older(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it."""
    from hermes_state.testing import upstream_release as ur

    version = params.version
    if ur.cached(version) is None:
        reason = str(ur.NotCached(version))
        return verdict_from(OLDER_NAME, {}, {"reason": reason, "version": version}, summary="",
                            skipped=reason)
    fig: dict = {"version": version}
    problems: list[str] = []
    with copied_store(ctx.store_path) as copy:
        total, newest, per = _facts(copy)
        fig.update(messages=total, writers=len(newest), sessions=len(per))
        home = Path(tempfile.mkdtemp(prefix="chaos-older-"))
        try:
            with ur.UpstreamProcess(version, home) as up:
                opened = up.open(copy)
                fig.update(schema_version=opened["schema_version"],
                           journal_mode=opened["journal_mode"])
                counted = up.call("message_count")
                fig["counted_by_release"] = counted
                if counted != total:
                    problems.append(f"{version} counts {counted} messages, SQLite {total}")
                short = [f"{sid}: {n} -> {len(got)}" for sid, n in per.items()
                         if len(got := up.call("get_messages", sid)) < n]
                if short:
                    problems.append(f"{version} reads fewer messages in {len(short)} "
                                    f"session(s): {short[:3]}")
                missing = []
                for proc, pid in sorted(newest.items()):
                    hits = up.call("search_messages", f'"{pid}"', limit=5)
                    if not hits:
                        missing.append(pid)
                fig["searched"] = len(newest)
                fig["not_found"] = missing[:10]
                if missing:
                    problems.append(f"{version} finds no hit for {len(missing)} of "
                                    f"{len(newest)} writers' newest messages: {missing[:3]}")
        except (ur.UpstreamError, ur.UpstreamDied) as exc:
            problems.append(f"{version} could not open or read the store: {exc}")
            fig["error"] = str(exc)[:800]
        finally:
            shutil.rmtree(home, ignore_errors=True)
    summary = "" if problems else (
        f"upstream {version} opens the store (schema {fig['schema_version']}, "
        f"{fig['journal_mode']}), counts all {total} messages and finds every writer's newest one")
    return verdict_from(OLDER_NAME, problems_as_cases("older_release", problems), fig,
                        summary=summary, fail_summary="; ".join(problems),
                        evidence=[{"problem": p} for p in problems], cases_as_evidence=False)


FTS_NAME = "fts_exact"


@dataclass(frozen=True, kw_only=True)
class FtsParams:
    """Every FTS index equals what its layout indexes from messages."""


def check_fts(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it."""
    from hermes_state.testing import verify_fts

    with copied_store(ctx.store_path) as copy:
        conn = connect_copy(copy)
        try:
            verdicts = verify_fts(conn)
            stale = conn.execute("SELECT value FROM state_meta WHERE key = 'fts_stale'"
                                 ).fetchone()
        finally:
            conn.close()
    fig = {"tables": verdicts, "fts_stale": stale is not None}
    bad = {t: v for t, v in verdicts.items() if v != "ok"}
    problems = ([] if verdicts else ["no FTS table to verify"]) + (
        [f"{t}: {v}" for t, v in bad.items()] or (["fts_stale is set"] if stale is not None
                                                   else []))
    return verdict_from(FTS_NAME, problems_as_cases("fts", problems), fig,
                        summary=f"{len(verdicts)} FTS index(es) exact: " + ", ".join(sorted(verdicts)),
                        fail_summary="; ".join(problems),
                        evidence=[{"table": t, "verdict": v} for t, v in bad.items()],
                        cases_as_evidence=False)


FTS_EXACT = SimpleNamespace(NAME=FTS_NAME, Params=FtsParams, check=check_fts)
OLDER_RELEASE_OPENS = SimpleNamespace(NAME=OLDER_NAME, Params=OlderParams, check=check_older)
