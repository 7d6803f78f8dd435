"""``fixture_preserved``: every row of an old-schema fixture survived its migration (SPEC §16.6).

SPEC §16.6: fixture stores of historical schema versions are "opened by the current code: plain,
with a concurrent writer, and with a crash at every migration step (failpoints) followed by a
reopen. The gate checks: every row preserved and readable [...], version 23, search finds
pre-migration content".

The run's store started as ``store: {fixture: schema_vN}`` (``<run>/fixture-manifest.json``
records version and seed). The fixture is deterministic, so the checker rebuilds the same
fixture in a temporary directory to get its full manifest (every row as written), checks the
rebuilt counts equal the recorded ones, and runs
:func:`hermes_state.testing.check_migrated` on a COPY of the final store, tolerating the
sessions and messages the run's roles added (``extra_messages``). FAIL lists the problems.
INCONCLUSIVE when the run did not start from a ``schema_vN`` fixture.

``unmigrated: true`` is the rule for a run with read-only opens only (SPEC §2.2: a read-only
command on a store a writable open would migrate reads a migrated private copy; the store is
never changed): the final store must still be the fixture as built, by :func:`shape_cases` (the
same schema objects with the same SQL, the same row count in every table).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..params import param
from ..store import FIXTURE_MANIFEST
from .base import (
    CheckContext,
    Verdict,
    params_of,
    problems_as_cases,
    verdict_from,
)
from .store import connect_copy, copied_store


@dataclass(frozen=True, kw_only=True)
class Params:
    """Every row of the schema_vN fixture survived the migration to version 23 and is
    searchable (SPEC §16.6)."""

    unmigrated: bool = param(False, "The run opens the store read-only only: the final store "
                             "must still be the fixture as built (schema objects and row "
                             "counts), never migrated in place (SPEC §2.2).")


NAME = "fixture_preserved"
MANIFEST_NAME = FIXTURE_MANIFEST


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules and the
    ``params`` keys are in this module's docstring."""
    from hermes_state.testing import build_fixture, check_migrated

    path = Path(ctx.run_dir) / MANIFEST_NAME
    if not path.is_file():
        return verdict_from(NAME, {}, {}, summary="", inconclusive="the run did not start "
                            f"from a schema_vN fixture (no {MANIFEST_NAME})")
    recorded = json.loads(path.read_text(encoding="utf-8"))
    version, seed = recorded["version"], recorded.get("seed", 0)
    p = params_of(Params, params)
    with tempfile.TemporaryDirectory(prefix="chaos-fixture-") as tmp:
        manifest = build_fixture(Path(tmp) / "state.db", version, seed=seed,
                                 write_sessions_json=False)
        built = shape_of(Path(tmp) / "state.db") if p.unmigrated else None
    fig: dict = {"version": version, "seed": seed, "counts": manifest["counts"]}
    if manifest["counts"] != recorded.get("counts"):
        why = "the rebuilt fixture differs from the one the run used (build_fixture is not deterministic?)"
        return verdict_from(NAME, problems_as_cases("fixture", [why]),
                            {**fig, "recorded_counts": recorded.get("counts")}, summary="",
                            fail_summary=why, cases_as_evidence=False)
    if built is not None:
        cases = shape_cases(built, shape_of(ctx.store_path))
        fig["changed"] = len(cases)
        return verdict_from(NAME, {"unmigrated": cases}, fig,
                            summary=f"the v{version} fixture is unchanged: no open migrated it "
                                    "in place")
    with copied_store(ctx.store_path) as copy:
        conn = connect_copy(copy)
        try:
            problems = check_migrated(conn, manifest, extra_messages=True)
        finally:
            conn.close()
    fig["problems"] = len(problems)
    rows = sum(n for t, n in manifest["counts"].items() if t != "schema_version")
    return verdict_from(
        NAME, problems_as_cases("preserved", problems), fig,
        summary=f"every one of {rows} rows of the v{version} fixture is preserved and searchable "
                "at version 23",
        fail_summary=(f"{len(problems)} problem(s) in the migrated v{version} fixture: "
                      f"{problems[0]}" if problems else None),
        evidence=[{"problem": p} for p in problems[:20]], cases_as_evidence=False)


def shape_of(db_path: Path) -> dict:
    """``{"objects": {(type, name): sql}, "rows": {table: count}}`` of a store (read on a copy;
    SQLite's own tables and FTS shadow tables are counted like any other)."""
    with copied_store(db_path) as copy:
        conn = connect_copy(copy)
        try:
            objects = {(t, n): sql for t, n, sql in conn.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
            rows = {n: conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]
                    for (t, n) in objects if t == "table"}
        finally:
            conn.close()
    return {"objects": objects, "rows": rows}


def shape_cases(built: dict, final: dict) -> list[dict]:
    """How the final store differs from the fixture as built: schema objects added, dropped or
    changed, and tables whose row count changed (one case each)."""
    out = []
    for key in sorted(set(built["objects"]) | set(final["objects"])):
        before, after = built["objects"].get(key), final["objects"].get(key)
        if before != after:
            what = ("added" if before is None else "dropped" if after is None else "changed")
            out.append({"violation": "schema_changed", "object": list(key), "change": what,
                        "why": f"{key[0]} {key[1]} was {what} in the store: an open migrated "
                               "it in place"})
    for table in sorted(set(built["rows"]) & set(final["rows"])):
        if built["rows"][table] != final["rows"][table]:
            out.append({"violation": "rows_changed", "table": table,
                        "before": built["rows"][table], "after": final["rows"][table],
                        "why": f"{table} has {final['rows'][table]} row(s), the fixture as built "
                               f"{built['rows'][table]}"})
    return out
