"""Token usage and per-model usage rows (SPEC §2.3, §5 ``update_token_counts``).

Decisions recorded here (the SPEC leaves them open):

* A cost argument that is None (``estimated_cost_usd``, ``actual_cost_usd``) means "unknown" and
  leaves the stored value unchanged, in delta and in absolute mode, on the session row and on the
  usage row. A given cost is added (delta) or stored (absolute); NULL counts as 0 when adding.
* ``cost_status``, ``cost_source`` and ``pricing_version`` overwrite when given, else are kept.
* ``model`` and ``billing_*`` are back-filled on the session row only while it has none (the
  model a session started with stays its model; per-model usage is what the usage rows are for).
* The usage row is keyed ``(session_id, model, billing_provider, billing_base_url, billing_mode,
  task)`` with exactly the values this call passed, ``''`` for a part passed as None (SPEC §2.3:
  "'' for unknown parts"). It does not borrow the session row's model or billing route: the key
  of a call never depends on earlier calls. Every call upserts its row, also when all counts are
  0 (it still records ``last_seen``).
* Token counts and ``api_call_count`` given as None count as 0.
"""

from __future__ import annotations

import sqlite3
import time

from .text import clean_text

_COUNT_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                  "reasoning_tokens", "api_call_count")
_COST_COLUMNS = ("estimated_cost_usd", "actual_cost_usd")
_KEY_COLUMNS = ("model", "billing_provider", "billing_base_url", "billing_mode")


def _int(value: object) -> int:
    return int(value or 0)


def _float(value: object) -> float | None:
    return None if value is None else float(value)


class UsageMixin:
    """``update_token_counts``; needs ``self._write(fn)``."""

    def update_token_counts(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0,
                            model: str | None = None, cache_read_tokens: int = 0,
                            cache_write_tokens: int = 0, reasoning_tokens: int = 0,
                            estimated_cost_usd: float | None = None,
                            actual_cost_usd: float | None = None, api_call_count: int = 0,
                            absolute: bool = False, task: str = "",
                            billing_provider: str | None = None,
                            billing_base_url: str | None = None,
                            billing_mode: str | None = None, cost_status: str | None = None,
                            cost_source: str | None = None,
                            pricing_version: str | None = None) -> bool:
        """Record token usage on the session row and its ``session_model_usage`` row (SPEC §5).

        One write transaction: update the ``sessions`` counters, then upsert the usage row for
        ``(model, billing_provider, billing_base_url, billing_mode, task)`` (module docstring for
        the key and the None rules). Delta mode (default) adds the values, to the session and to
        the usage row; ``absolute=True`` stores them as the new totals of both (the caller holds
        cumulative numbers). ``first_seen`` is set when the usage row is created, ``last_seen`` on
        every call.

        Args:
            session_id: an existing session.
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
                api_call_count: counts (deltas, or totals when ``absolute``).
            model: the model of this usage; back-fills ``sessions.model`` when NULL.
            estimated_cost_usd, actual_cost_usd: USD; None leaves the stored value.
            absolute: set instead of add.
            task: the usage axis (``''`` = the main conversation).
            billing_provider, billing_base_url, billing_mode: billing route (back-filled on the
                session when NULL; part of the usage key).
            cost_status, cost_source, pricing_version: overwrite when given.
        Returns:
            True when the session exists; False for an unknown id (nothing written).
        """
        counts = {"input_tokens": _int(input_tokens), "output_tokens": _int(output_tokens),
                  "cache_read_tokens": _int(cache_read_tokens),
                  "cache_write_tokens": _int(cache_write_tokens),
                  "reasoning_tokens": _int(reasoning_tokens),
                  "api_call_count": _int(api_call_count)}
        costs = {"estimated_cost_usd": _float(estimated_cost_usd),
                 "actual_cost_usd": _float(actual_cost_usd)}
        given = {"model": model, "billing_provider": billing_provider,
                 "billing_base_url": billing_base_url, "billing_mode": billing_mode}
        given = {k: clean_text(v) for k, v in given.items()}
        labels = {"cost_status": clean_text(cost_status), "cost_source": clean_text(cost_source)}
        pricing = clean_text(pricing_version)
        sid = clean_text(session_id)
        task_key = clean_text(task) or ""
        now = time.time()

        if absolute:
            count_sql = ", ".join(f"{col} = ?" for col in _COUNT_COLUMNS)
            cost_sql = ", ".join(f"{col} = COALESCE(?, {col})" for col in _COST_COLUMNS)
        else:
            count_sql = ", ".join(f"{col} = COALESCE({col}, 0) + ?" for col in _COUNT_COLUMNS)
            cost_sql = ", ".join(
                f"{col} = CASE WHEN ? IS NULL THEN {col} ELSE COALESCE({col}, 0) + ? END"
                for col in _COST_COLUMNS)
        session_sql = (
            f"UPDATE sessions SET {count_sql}, {cost_sql}, "
            "cost_status = COALESCE(?, cost_status), cost_source = COALESCE(?, cost_source), "
            "pricing_version = COALESCE(?, pricing_version), "
            + ", ".join(f"{col} = COALESCE({col}, ?)" for col in _KEY_COLUMNS)
            + " WHERE id = ?")
        session_args: list = [counts[c] for c in _COUNT_COLUMNS]
        for col in _COST_COLUMNS:
            session_args += [costs[col]] if absolute else [costs[col], costs[col]]
        session_args += [labels["cost_status"], labels["cost_source"], pricing]
        session_args += [given[c] for c in _KEY_COLUMNS]
        session_args.append(sid)

        if absolute:
            upd_counts = ", ".join(f"{col} = excluded.{col}" for col in _COUNT_COLUMNS)
            upd_costs = ", ".join(f"{col} = COALESCE(excluded.{col}, {col})"
                                  for col in _COST_COLUMNS)
        else:
            upd_counts = ", ".join(f"{col} = COALESCE({col}, 0) + excluded.{col}"
                                   for col in _COUNT_COLUMNS)
            upd_costs = ", ".join(
                f"{col} = CASE WHEN excluded.{col} IS NULL THEN {col} "
                f"ELSE COALESCE({col}, 0) + excluded.{col} END" for col in _COST_COLUMNS)
        usage_cols = (("session_id",) + _KEY_COLUMNS + ("task",) + _COUNT_COLUMNS + _COST_COLUMNS
                      + ("cost_status", "cost_source", "first_seen", "last_seen"))
        usage_sql = (
            f"INSERT INTO session_model_usage ({', '.join(usage_cols)}) "
            f"VALUES ({', '.join('?' * len(usage_cols))}) "
            "ON CONFLICT(session_id, model, billing_provider, billing_base_url, billing_mode, "
            "task) "
            f"DO UPDATE SET {upd_counts}, {upd_costs}, "
            "cost_status = COALESCE(excluded.cost_status, cost_status), "
            "cost_source = COALESCE(excluded.cost_source, cost_source), "
            "last_seen = excluded.last_seen")

        def fn(c: sqlite3.Connection) -> bool:
            cur = c.execute(session_sql, session_args)
            if cur.rowcount == 0:
                return False
            key = [given[col] or "" for col in _KEY_COLUMNS]
            c.execute(usage_sql, [sid, *key, task_key, *(counts[col] for col in _COUNT_COLUMNS),
                                  *(costs[col] for col in _COST_COLUMNS), labels["cost_status"],
                                  labels["cost_source"], now, now])
            return True

        return self._write(fn, op="update_token_counts")

    def get_model_usage(self, session_id: str) -> list[dict]:
        """The session's ``session_model_usage`` rows as dicts, oldest ``first_seen`` first."""
        return self._read(lambda c: [dict(r) for r in c.execute(
            "SELECT * FROM session_model_usage WHERE session_id = ? "
            "ORDER BY first_seen, rowid", (clean_text(session_id),))])
