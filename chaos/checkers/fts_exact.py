"""``fts_exact``: every FTS index holds exactly the rows it should (issue 23 item 4).

``integrity`` runs FTS5's own ``integrity-check``, which for the trigram index (it leaves tool
rows out) can only judge internal consistency. Here, on a temporary COPY of the final store,
:func:`hermes_state.schema.fts_layout.verify_fts` compares every FTS table term by term with
what its layout says it indexes (``messages_fts`` every row, ``messages_fts_trigram`` every row
but tool rows, newer releases' views included): both indexes exact, whichever release wrote
which row. Rows a pending back-fill has not reached are allowed (SPEC §2.4). No params.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import FAIL, PASS, CheckContext, Verdict
from .store import connect_copy, copied_store

NAME = "fts_exact"


@dataclass(frozen=True, kw_only=True)
class Params:
    """Every FTS index equals what its layout indexes from messages."""


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it."""
    from hermes_state.schema.fts_layout import verify_fts

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
    if not verdicts:
        return Verdict(NAME, FAIL, "no FTS table to verify", fig)
    if bad or stale is not None:
        text = "; ".join(f"{t}: {v}" for t, v in bad.items()) or "fts_stale is set"
        return Verdict(NAME, FAIL, text, fig, [{"table": t, "verdict": v} for t, v in bad.items()])
    return Verdict(NAME, PASS, f"{len(verdicts)} FTS index(es) exact: "
                   + ", ".join(sorted(verdicts)), fig)
