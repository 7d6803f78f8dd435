"""``AsyncSessionDB``: the store for asyncio code (UPSTREAM_API §1).

Every callable attribute of the wrapped :class:`~hermes_state.db.SessionDB` becomes a coroutine
function that runs the call in a worker thread (``asyncio.to_thread``), so a slow write (a lock
wait with retries, SPEC §4) never blocks the event loop; other attributes pass through. The
SessionDB is safe to share between threads (one lock around its connection).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any


class AsyncSessionDB:
    """Async facade over a :class:`~hermes_state.db.SessionDB`.

    Example::

        adb = AsyncSessionDB(SessionDB(path))
        await adb.create_session("s1", "cli")
        rows = await adb.get_messages("s1")
    """

    def __init__(self, db: Any) -> None:
        self._db = db

    @property
    def db(self) -> Any:
        """The wrapped SessionDB."""
        return self._db

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._db, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(attr, *args, **kwargs)

        return call

    async def __aenter__(self) -> "AsyncSessionDB":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._db.close)
