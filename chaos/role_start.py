"""How role processes start (SPEC §16.1: never forked from a process that holds a connection).

A fork server forks each role process: a fresh interpreter, started by the runner before it
opens anything, that never opens the store and has imported :mod:`chaos.roles` once. One import
instead of one per role process, which was most of a role's start-up (about 0.25 s of CPU each)
and of ``python -m chaos run``'s overhead (SPEC §17). Where the platform has no fork server,
each role process is a spawned interpreter. A role process takes the runner's environment and
working directory at its launch from its configuration (:func:`chaos.roles.role_main`), not the
fork server's. Standard library only: ``python -m chaos run`` starts the server first thing, so
that its imports overlap the runner's own (:func:`start_early`). docs/decisions/0027-role-start.md.
"""

from __future__ import annotations

import multiprocessing
import os

#: What the fork server imports once, before it forks any role process.
PRELOAD = ["chaos.roles"]
#: ``CHAOS_ROLE_START=spawn``: every role process a fresh spawned interpreter that imports for
#: itself (``chaos audit`` sets it: its probe proves that each role process imported the
#: mutated copy, which a forked process never does).
ENV_VAR = "CHAOS_ROLE_START"


def context():
    """The ``multiprocessing`` context role processes start from: ``forkserver`` preloading
    :data:`PRELOAD` where the platform has it and :data:`ENV_VAR` does not say ``spawn``, else
    ``spawn``."""
    if ("forkserver" not in multiprocessing.get_all_start_methods()
            or os.environ.get(ENV_VAR, "").strip().lower() == "spawn"):
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_early() -> None:
    """Start the fork server now, in the background (it exits with this process): its imports
    run while the caller imports its own. No-op where role processes are spawned."""
    if context().get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    forkserver.ensure_running()
