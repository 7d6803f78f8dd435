"""Token usage, per-model usage rows and the billing route (SPEC §2.3, §5 ``update_token_counts``;
UPSTREAM_API §2.7, D8).

Rules, as upstream's users rely on them:

* ``update_token_counts`` first runs the ``create_session`` upsert with ``source='unknown'`` and
  the call's ``model``: an unknown id creates a row, and a NULL ``sessions.model`` takes
  ``model`` even when nothing is counted. Everything happens in ONE write transaction here
  (upstream uses two; nothing observable depends on the split).
* The summary row: counts are added (or set with ``absolute``); ``estimated_cost_usd`` becomes
  ``COALESCE(old, 0) + COALESCE(new, 0)`` (or ``COALESCE(new, 0)``), so it is never NULL after a
  call; ``actual_cost_usd`` is kept when None, else added/set; ``cost_status``, ``cost_source``
  and ``pricing_version`` take the new value when given.
* A call has *accounted usage* when a token count, ``api_call_count`` or a cost is truthy. Only
  then do ``model`` and ``billing_*`` fill NULL summary columns (never replacing a value), and
  the *first accounted route* rule runs: while the row's ``api_call_count`` is 0, a call naming
  both ``model`` and ``billing_provider`` that differ from the row's sets the four route
  columns to exactly the call's values (None included).
* The usage row ``(session_id, model, billing_provider, billing_base_url, billing_mode, task)``
  is written only in delta mode and when a token count, ``api_call_count`` or
  ``estimated_cost_usd`` is truthy. A falsy key part takes the session row's value, then
  ``'unknown'`` (model) or ``''``. Counts and both costs are added (None = 0.0): usage costs are
  never NULL (upstream declares them NOT NULL).
* ``task`` (this store's extension, default ``''``) keys the usage row of auxiliary work; see
  also :meth:`UsageMixin.record_auxiliary_usage`.
"""

from __future__ import annotations

import sqlite3
import time

from . import system_prompts
from .sessions import upsert_session
from .text import clean_text, int_arg

_COUNT_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                  "reasoning_tokens", "api_call_count")
_ROUTE_COLUMNS = ("model", "billing_provider", "billing_base_url", "billing_mode")
_USAGE_KEY = "session_id, model, billing_provider, billing_base_url, billing_mode, task"


def _int(value: object, name: str = "a token count") -> int:
    return int_arg(value or 0, name)


def _float(value: object) -> float | None:
    return None if value is None else float(value)


def upsert_usage_row(c: sqlite3.Connection, key: tuple, counts: dict, estimated: float | None,
                     actual: float | None, cost_status: str | None, cost_source: str | None,
                     now: float) -> None:
    """Add ``counts`` and costs to the usage row ``key`` (inserted when absent)."""
    cols = _USAGE_KEY.split(", ") + list(_COUNT_COLUMNS) + [
        "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source", "first_seen",
        "last_seen"]
    adds = ", ".join(f"{col} = COALESCE({col}, 0) + excluded.{col}" for col in
                     list(_COUNT_COLUMNS) + ["estimated_cost_usd", "actual_cost_usd"])
    c.execute(
        f"INSERT INTO session_model_usage ({', '.join(cols)}) "
        f"VALUES ({', '.join('?' * len(cols))}) ON CONFLICT({_USAGE_KEY}) DO UPDATE SET {adds}, "
        "cost_status = COALESCE(excluded.cost_status, cost_status), "
        "cost_source = COALESCE(excluded.cost_source, cost_source), "
        "last_seen = excluded.last_seen",
        [*key, *(counts[col] for col in _COUNT_COLUMNS), estimated or 0.0, actual or 0.0,
         cost_status, cost_source, now, now])


class UsageMixin:
    """Usage API; needs ``self._write(fn)`` and ``self._read(fn)``."""

    def update_token_counts(self, session_id: str, input_tokens: int = 0, output_tokens: int = 0,
                            model: str | None = None, cache_read_tokens: int = 0,
                            cache_write_tokens: int = 0, reasoning_tokens: int = 0,
                            estimated_cost_usd: float | None = None,
                            actual_cost_usd: float | None = None, cost_status: str | None = None,
                            cost_source: str | None = None, pricing_version: str | None = None,
                            billing_provider: str | None = None,
                            billing_base_url: str | None = None,
                            billing_mode: str | None = None, api_call_count: int = 0,
                            absolute: bool = False, task: str = "") -> None:
        """Record token usage on the session row and its usage row (module docstring; D8).

        Args:
            session_id: the session; an unknown id creates a row with ``source='unknown'``.
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
                api_call_count: counts (deltas, or totals when ``absolute``); None = 0.
            model: the model of this usage.
            estimated_cost_usd, actual_cost_usd: USD.
            cost_status, cost_source, pricing_version: overwrite when given.
            billing_provider, billing_base_url, billing_mode: the billing route.
            absolute: set the summary instead of adding; writes no usage row.
            task: usage-row axis (``''`` = the main conversation).
        """
        counts = {"input_tokens": _int(input_tokens), "output_tokens": _int(output_tokens),
                  "cache_read_tokens": _int(cache_read_tokens),
                  "cache_write_tokens": _int(cache_write_tokens),
                  "reasoning_tokens": _int(reasoning_tokens),
                  "api_call_count": _int(api_call_count)}
        estimated, actual = _float(estimated_cost_usd), _float(actual_cost_usd)
        route = {"model": clean_text(model), "billing_provider": clean_text(billing_provider),
                 "billing_base_url": clean_text(billing_base_url),
                 "billing_mode": clean_text(billing_mode)}
        labels = (clean_text(cost_status), clean_text(cost_source), clean_text(pricing_version))
        sid = clean_text(session_id)
        task_key = clean_text(task) or ""
        accounted = any(counts.values()) or bool(estimated) or bool(actual)
        usage_row = not absolute and (any(counts.values()) or bool(estimated))

        def fn(c: sqlite3.Connection) -> None:
            now = time.time()
            upsert_session(c, sid, "unknown", model=route["model"])
            before = c.execute("SELECT api_call_count, model, billing_provider FROM sessions "
                               "WHERE id = ?", (sid,)).fetchone()
            if (accounted and route["model"] and route["billing_provider"]
                    and not (before["api_call_count"] or 0)
                    and (before["model"], before["billing_provider"])
                    != (route["model"], route["billing_provider"])):
                c.execute("UPDATE sessions SET model = ?, billing_provider = ?, "
                          "billing_base_url = ?, billing_mode = ? WHERE id = ?",
                          (*(route[k] for k in _ROUTE_COLUMNS), sid))
            if absolute:
                sets = [f"{col} = ?" for col in _COUNT_COLUMNS]
                sets += ["estimated_cost_usd = COALESCE(?, 0)",
                         "actual_cost_usd = COALESCE(?, actual_cost_usd)"]
                args: list = [counts[col] for col in _COUNT_COLUMNS] + [estimated, actual]
            else:
                sets = [f"{col} = COALESCE({col}, 0) + ?" for col in _COUNT_COLUMNS]
                sets += ["estimated_cost_usd = COALESCE(estimated_cost_usd, 0) + COALESCE(?, 0)",
                         "actual_cost_usd = CASE WHEN ? IS NULL THEN actual_cost_usd "
                         "ELSE COALESCE(actual_cost_usd, 0) + ? END"]
                args = [counts[col] for col in _COUNT_COLUMNS] + [estimated, actual, actual]
            sets += ["cost_status = COALESCE(?, cost_status)",
                     "cost_source = COALESCE(?, cost_source)",
                     "pricing_version = COALESCE(?, pricing_version)"]
            args += list(labels)
            if accounted:
                sets += [f"{col} = COALESCE({col}, ?)" for col in _ROUTE_COLUMNS]
                args += [route[col] for col in _ROUTE_COLUMNS]
            c.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", (*args, sid))
            if not usage_row:
                return
            row = c.execute("SELECT model, billing_provider, billing_base_url, billing_mode "
                            "FROM sessions WHERE id = ?", (sid,)).fetchone()
            key = (sid, route["model"] or row["model"] or "unknown",
                   route["billing_provider"] or row["billing_provider"] or "",
                   route["billing_base_url"] or row["billing_base_url"] or "",
                   route["billing_mode"] or row["billing_mode"] or "", task_key)
            upsert_usage_row(c, key, counts, estimated, actual, labels[0], labels[1], now)

        self._write(fn, op="update_token_counts")

    def record_auxiliary_usage(self, session_id: str, task: str, *, model: str | None = None,
                               billing_provider: str | None = None,
                               billing_base_url: str | None = None, input_tokens: int = 0,
                               output_tokens: int = 0, cache_read_tokens: int = 0,
                               cache_write_tokens: int = 0, reasoning_tokens: int = 0,
                               estimated_cost_usd: float | None = None) -> None:
        """Record one auxiliary call (title generation, compression, ...) as a usage row keyed
        with ``task``; the session's summary columns are not touched.

        No-op unless ``session_id`` and ``task`` are non-empty. Ensures the session row
        (``source='unknown'``). Key: ``model`` or ``'unknown'``, provider/base URL as given or
        ``''``, mode ``''`` (never the session's route). Adds ``api_call_count`` 1, the counts
        and ``estimated_cost_usd`` (None = 0).
        """
        if not session_id or not task:
            return
        sid = clean_text(session_id)
        counts = {"input_tokens": _int(input_tokens), "output_tokens": _int(output_tokens),
                  "cache_read_tokens": _int(cache_read_tokens),
                  "cache_write_tokens": _int(cache_write_tokens),
                  "reasoning_tokens": _int(reasoning_tokens), "api_call_count": 1}
        key = (sid, clean_text(model) or "unknown", clean_text(billing_provider) or "",
               clean_text(billing_base_url) or "", "", clean_text(task))
        estimated = _float(estimated_cost_usd)

        def fn(c: sqlite3.Connection) -> None:
            upsert_session(c, sid, "unknown")
            upsert_usage_row(c, key, counts, estimated, None, None, None, time.time())

        self._write(fn, op="record_auxiliary_usage")

    def update_session_model(self, session_id: str, model: str | None) -> None:
        """Set ``sessions.model`` unconditionally (a later ``update_token_counts`` only fills
        NULL, so it never reverts this)."""
        self._write(lambda c: c.execute("UPDATE sessions SET model = ? WHERE id = ?",
                                        (clean_text(model), clean_text(session_id))),
                    op="update_session_model")

    def update_session_billing_route(self, session_id: str, *, provider: str | None,
                                     base_url: str | None, billing_mode: str | None = None
                                     ) -> None:
        """Set ``billing_provider`` and ``billing_base_url`` unconditionally, ``billing_mode``
        only when not None, and clear ``system_prompt`` (a new route rebuilds the prompt)."""
        def fn(c: sqlite3.Connection) -> None:
            c.execute(
                "UPDATE sessions SET billing_provider = ?, billing_base_url = ?, "
                "billing_mode = COALESCE(?, billing_mode), system_prompt = NULL WHERE id = ?",
                (clean_text(provider), clean_text(base_url), clean_text(billing_mode),
                 clean_text(session_id)))
            if system_prompts.separate(c):  # schema 25+: the hash would shadow the NULL (D4)
                system_prompts.write(c, clean_text(session_id), None)

        self._write(fn, op="update_session_billing_route")

    def get_model_usage(self, session_id: str) -> list[dict]:
        """The session's ``session_model_usage`` rows as dicts, oldest ``first_seen`` first."""
        return self._read(lambda c: [dict(r) for r in c.execute(
            "SELECT * FROM session_model_usage WHERE session_id = ? "
            "ORDER BY first_seen, rowid", (clean_text(session_id),))])
