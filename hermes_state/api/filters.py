"""Session filters shared by listing, prune, archive (UPSTREAM_API §2.4, §2.8).

Each builder returns ``(sql, params)`` where ``sql`` is a list of conditions over the alias
``s`` (sessions), to be ANDed.

What kind of child a session is, as SQL expressions (UPSTREAM_API §2.4, D10).

- **Branch child**: ``model_config.$._branched_from`` is set, or the parent ended with
  ``end_reason='branched'`` and the child started at or after that end.
- **Compression child** (continuation): the parent ended with ``end_reason='compression'``.
- **Delegate**: ``model_config.$._delegate_from`` is set (the parent id, or ``'__orphaned__'``):
  a sub-agent's session.
- **Listable row** (the default listing): parentless or a branch child, and not a delegate.

Every ``json_extract`` is guarded by ``json_valid`` (as upstream v31 does), so one row with a
``model_config`` that is not JSON never makes a listing raise.
"""

from __future__ import annotations

from typing import Any

from .text import clean_text

#: Keywords of ``prune_sessions``/``list_prune_candidates``/``archive_sessions`` besides
#: ``older_than_days`` and ``source``.
PRUNE_FILTERS = (
    "started_before", "started_after", "title_like", "model_like", "branch_like", "end_reason",
    "user_id", "chat_id", "chat_type", "provider", "cwd_prefix", "min_messages", "max_messages",
    "min_tokens", "max_tokens", "min_cost", "max_cost", "min_tool_calls", "max_tool_calls",
    "archived",
)


def cwd_prefix_sql(prefix: str, alias: str = "s") -> tuple[str, list]:
    """``cwd`` equal to the prefix (trailing ``/`` and ``\\`` stripped) or under it: ``/repo``
    matches ``/repo`` and ``/repo/sub``, never ``/repo-wt`` (ASCII case-insensitive LIKE, its
    wildcards not escaped, as upstream)."""
    p = clean_text(str(prefix)).rstrip("/\\")
    return (f"({alias}.cwd = ? OR {alias}.cwd LIKE ? OR {alias}.cwd LIKE ?)",
            [p, p + "/%", p + "\\%"])


def archived_sql(include_archived: bool, archived_only: bool, alias: str = "s") -> str | None:
    """The listing default: unarchived only, unless asked otherwise."""
    if archived_only:
        return f"COALESCE({alias}.archived, 0) = 1"
    if not include_archived:
        return f"COALESCE({alias}.archived, 0) = 0"
    return None


def prune_filter_sql(filters: dict[str, Any], source: str | None = None,
                     alias: str = "s") -> tuple[list[str], list]:
    """Conditions of the prune filters (UPSTREAM_API §2.8); ``ended_at IS NOT NULL`` always.

    Raises:
        TypeError: an unknown keyword.
    """
    unknown = set(filters) - set(PRUNE_FILTERS)
    if unknown:
        raise TypeError(f"unknown prune filter(s): {', '.join(sorted(unknown))}")
    a = alias
    conds = [f"{a}.ended_at IS NOT NULL"]
    params: list = []

    def add(sql: str, *values: Any) -> None:
        conds.append(sql)
        params.extend(values)

    if source is not None:
        add(f"{a}.source = ?", clean_text(source))
    f = {k: v for k, v in filters.items() if v is not None}
    if "started_before" in f:
        add(f"{a}.started_at < ?", float(f["started_before"]))
    if "started_after" in f:
        add(f"{a}.started_at >= ?", float(f["started_after"]))
    for key, col in (("title_like", "title"), ("model_like", "model"),
                     ("branch_like", "git_branch")):
        if key in f:
            add(f"{a}.{col} LIKE ?", f"%{clean_text(str(f[key]))}%")
    for key in ("end_reason", "user_id", "chat_id", "chat_type"):
        if key in f:
            add(f"{a}.{key} = ?", clean_text(f[key]))
    if "provider" in f:
        add(f"LOWER({a}.billing_provider) = LOWER(?)", clean_text(str(f["provider"])))
    if "cwd_prefix" in f:
        sql, vals = cwd_prefix_sql(f["cwd_prefix"], a)
        add(sql, *vals)
    ranges = (("messages", f"COALESCE({a}.message_count, 0)"),
              ("tokens", f"(COALESCE({a}.input_tokens, 0) + COALESCE({a}.output_tokens, 0))"),
              ("cost", f"COALESCE({a}.actual_cost_usd, {a}.estimated_cost_usd, 0)"),
              ("tool_calls", f"COALESCE({a}.tool_call_count, 0)"))
    for name, expr in ranges:
        if f"min_{name}" in f:
            add(f"{expr} >= ?", f[f"min_{name}"])
        if f"max_{name}" in f:
            add(f"{expr} <= ?", f[f"max_{name}"])
    if "archived" in f:
        add(f"COALESCE({a}.archived, 0) = ?", 1 if f["archived"] else 0)
    return conds, params



def marker(alias: str, key: str) -> str:
    """SQL: the ``model_config`` JSON key ``key`` of ``alias`` (NULL when absent/invalid)."""
    return (f"(CASE WHEN json_valid({alias}.model_config) "
            f"THEN json_extract({alias}.model_config, '$.{key}') END)")


def is_delegate(alias: str) -> str:
    """SQL: ``alias`` carries a ``_delegate_from`` marker."""
    return f"({marker(alias, '_delegate_from')} IS NOT NULL)"


def is_branched(alias: str) -> str:
    """SQL: ``alias`` carries a ``_branched_from`` marker."""
    return f"({marker(alias, '_branched_from')} IS NOT NULL)"


def is_branch_child(alias: str) -> str:
    """SQL: ``alias`` is a branch child (marker, or a child of a ``branched`` end)."""
    return (f"({is_branched(alias)} OR EXISTS (SELECT 1 FROM sessions bp "
            f"WHERE bp.id = {alias}.parent_session_id AND bp.end_reason = 'branched' "
            f"AND {alias}.started_at >= bp.ended_at))")


def is_listable(alias: str) -> str:
    """SQL: ``alias`` shows in the default listing."""
    return (f"(({alias}.parent_session_id IS NULL OR {is_branch_child(alias)}) "
            f"AND NOT {is_delegate(alias)})")


def is_continuation(alias: str) -> str:
    """SQL: ``alias`` may continue a compression chain forward: not a branch, not a delegate,
    not a tool session (its parent's end reason is checked by the caller)."""
    return (f"(NOT {is_branched(alias)} AND NOT {is_delegate(alias)} "
            f"AND {alias}.source IS NOT 'tool')")


def activity(alias: str) -> str:
    """SQL: the newest message timestamp of ``alias``, else its ``started_at``."""
    return (f"COALESCE((SELECT MAX(am.timestamp) FROM messages am "
            f"WHERE am.session_id = {alias}.id), {alias}.started_at)")
