"""Store housekeeping through the API: FTS optimize and rebuild, VACUUM, and the periodic
prune-and-vacuum a gateway runs at start (SPEC §8, §11; UPSTREAM_API §2.13).

``optimize_fts``, ``vacuum`` and ``maybe_auto_prune_and_vacuum`` rewrite large parts of the
store and go through the live-writer gate (SPEC §11): while another process holds the store they
refuse (:class:`~hermes_state.processes.writer_gate.MaintenanceRefused`; the auto run reports it in
``"error"`` and records no run, so the next start tries again). ``force=True`` skips the gate.
"""

from __future__ import annotations

import sqlite3
import time

from ..fts.repair import rebuild_fts
from ..processes import checkpoint_lock
from ..processes.writer_gate import MaintenanceRefused, gate_held

FTS_OPTIMIZE_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")
AUTO_PRUNE_META_KEY = "last_auto_prune"


def _present(c: sqlite3.Connection) -> list[str]:
    marks = ",".join("?" * len(FTS_OPTIMIZE_TABLES))
    names = {r[0] for r in c.execute(
        f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks})",
        FTS_OPTIMIZE_TABLES)}
    return [t for t in FTS_OPTIMIZE_TABLES if t in names]


def _each_fts(command: str):
    """``fn(conn) -> int`` running the FTS5 ``command`` on each existing FTS table."""
    def fn(c: sqlite3.Connection) -> int:
        tables = _present(c)
        for t in tables:
            c.execute(f"INSERT INTO {t}({t}) VALUES ('{command}')")
        return len(tables)

    return fn


def _gate(db, command: str, force: bool):
    """The live-writer gate, holding the store's write lock through the action (SPEC §11,
    issue 11: no writer starts between the decision and the rewrite)."""
    return gate_held(db.db_path, command, force=force)


class HousekeepingMixin:
    """Housekeeping API; needs ``self._write``, ``self._read``, ``self.connection`` and
    ``self.db_path``."""

    def optimize_fts(self, *, force: bool = False) -> int:
        """FTS5 ``'optimize'`` (merge every index segment into one) on each existing FTS table.
        Results and snippets are unchanged; idempotent.

        Returns:
            How many tables were optimized (a fresh store: 2; without trigram support: 1).
        Raises:
            MaintenanceRefused: another process holds the store (without ``force``).
        """
        with _gate(self, "optimize-fts", force):
            return self._optimize_fts()

    def _optimize_fts(self) -> int:
        return self._write(_each_fts("optimize"), op="optimize_fts")

    def rebuild_fts(self) -> int:
        """Rebuild every FTS index from ``messages`` (after corruption, SPEC §12: the index is
        switched back on and ``fts_stale`` cleared). A legacy layout is replaced by the v23 one
        built from ``messages`` (its own copy of the text would miss rows written while the
        index was off): :func:`hermes_state.fts.repair.rebuild_fts`.

        Returns:
            How many FTS tables were rebuilt.
        """
        rebuild_fts(self.connection)
        return len(self._read(_present))

    def vacuum(self, *, force: bool = False) -> int:
        """``optimize_fts``, PASSIVE checkpoint, ``VACUUM``, TRUNCATE checkpoint, then the
        handle re-records the files' identities (SPEC §8, §10.1: its own TRUNCATE may give the
        WAL a new inode).

        Returns:
            How many FTS tables were optimized.
        Raises:
            MaintenanceRefused: another process holds the store (without ``force``).
        """
        with _gate(self, "vacuum", force):
            return self._vacuum()

    def _vacuum(self) -> int:
        """VACUUM and the TRUNCATE checkpoint overlap no write transaction of the store
        (issue 12): the store's write lock is held exclusively (re-entrant under the gate)."""
        with checkpoint_lock.exclusive_unless_unusable(self.db_path, purpose="vacuum"):
            optimized = self._optimize_fts()
            conn = self.connection
            conn.checkpoint("PASSIVE", trigger="vacuum")
            self._read(lambda c: c.execute("VACUUM"))
            conn.checkpoint("TRUNCATE", trigger="vacuum")
            conn.rerecord_generation()
            return optimized

    def maybe_auto_prune_and_vacuum(self, retention_days: float = 90,
                                    min_interval_hours: float = 24, vacuum: bool = True,
                                    sessions_dir: str | None = None, *,
                                    force: bool = False) -> dict:
        """Prune old sessions at most once per ``min_interval_hours`` (the last run is
        ``state_meta['last_auto_prune']``, epoch seconds; a value that is not a number counts
        as no run), VACUUM when something was pruned and ``vacuum``.

        Returns:
            ``{"skipped", "pruned", "vacuumed"}``, plus ``"error"`` when something failed;
            never raises. A run records ``last_auto_prune`` = now even when nothing was pruned;
            a refusal by the live-writer gate records nothing (``skipped`` True, ``error`` the
            refusal).
        """
        out = {"skipped": False, "pruned": 0, "vacuumed": False}
        try:
            try:
                last = float(self.get_meta(AUTO_PRUNE_META_KEY))
            except (TypeError, ValueError):
                last = None
            now = time.time()
            if last is not None and now - last < float(min_interval_hours) * 3600.0:
                out["skipped"] = True
                return out
            try:
                with _gate(self, "auto-prune", force):
                    out["pruned"] = self.prune_sessions(older_than_days=retention_days,
                                                        sessions_dir=sessions_dir)
                    self.set_meta(AUTO_PRUNE_META_KEY, str(now))
                    if vacuum and out["pruned"] > 0:
                        self._vacuum()
                        out["vacuumed"] = True
            except MaintenanceRefused as exc:  # raised by the gate, before anything ran
                out.update(skipped=True, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a start-up chore must never stop the caller
            out["error"] = f"{type(exc).__name__}: {exc}"
        return out
