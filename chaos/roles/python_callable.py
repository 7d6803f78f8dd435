"""The ``callable`` role: a Python function given by a test runs as the role (issue 16 item 6).

A scenario declares the role (``{name: plugin, kind: callable}``); the test binds a function
to it, which may be a closure over the test's locals::

    result = run_scenario(SCENARIO, roles={"plugin": lambda ctx: ...})

The function is shipped to a fresh, spawned interpreter with the ``multiprocess`` package (dill
pickles closures by value; never a fork of a process holding a SQLite connection, SPEC §16.1)
and called there as ``fn(ctx)`` with the role's :class:`chaos.roles.base.RoleContext`: record
each operation with ``ctx.op(name, call)``, stop when ``ctx.should_stop()``, sleep with
``ctx.sleep``, open the store with ``ctx.open_db()`` (or any SQLite client on
``ctx.cfg.db_path``). ``python -m chaos run`` cannot run such a scenario: there is no function.
An exception the function raises ends the role with exit code 70 and a ``role_crashed`` event.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import RoleContext

KIND = "callable"
SUMMARY = "a Python function a test passes to run_scenario(..., roles={name: fn})"
#: The module a missing ``multiprocess`` is installed from.
INSTALL_HINT = "pip install 'hermes-state[chaos]' (the multiprocess package)"


@dataclass(frozen=True, kw_only=True)
class Params:
    """A Python function given by the test that runs the scenario."""


class CallableRoleError(ValueError):
    """A ``callable`` role without its function, a function for no such role, or no
    ``multiprocess`` to ship it with."""


def run(ctx: RoleContext) -> None:
    """Never called: a ``callable`` role runs the test's function (:func:`chaos.roles.role_main`
    receives it from the runner)."""
    raise CallableRoleError(f"role {ctx.cfg.role!r} is kind callable but no function was given "
                            "(run it from a test: run_scenario(..., roles={name: fn}))")


def check_bindings(role_kinds: dict[str, str], functions: dict | None) -> dict:
    """The functions of the scenario's ``callable`` roles, checked.

    Args:
        role_kinds: ``{role name: kind}`` of the scenario.
        functions: what the test passed as ``roles=`` (None: nothing).
    Returns:
        ``{role name: function}`` for every callable role.
    Raises:
        CallableRoleError: a callable role without a function, a function for a role that is
            missing or not ``kind: callable``, a value that is not callable.
    """
    functions = dict(functions or {})
    wanted = [name for name, kind in role_kinds.items() if kind == KIND]
    problems = []
    for name in wanted:
        if name not in functions:
            problems.append(f"role {name!r} is kind callable: pass its function, "
                            f"run_scenario(..., roles={{{name!r}: fn}}) (python -m chaos run "
                            "cannot run it)")
    for name, fn in functions.items():
        if role_kinds.get(name) != KIND:
            problems.append(f"roles= names {name!r}, but the scenario has no role {name!r} of "
                            f"kind callable (its callable roles: {', '.join(wanted) or 'none'})")
        elif not callable(fn):
            problems.append(f"roles[{name!r}] is {type(fn).__name__}, not a function")
    if problems:
        raise CallableRoleError("; ".join(problems))
    return {name: functions[name] for name in wanted}


def spawn_context():
    """The ``multiprocess`` spawn context (dill pickling, a fresh interpreter).

    Raises:
        CallableRoleError: ``multiprocess`` is not installed.
    """
    try:
        import multiprocess
    except ImportError:
        raise CallableRoleError(f"callable roles need the multiprocess package: {INSTALL_HINT}"
                                ) from None
    return multiprocess.get_context("spawn")
