"""What kind of child a session is, as SQL expressions (UPSTREAM_API §2.4, D10).

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
