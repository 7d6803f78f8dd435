"""The faulty filesystem tier (SPEC §16.2, issue 15): a FUSE filesystem in the style of Jepsen's
LazyFS mounted over a run's home. It passes every operation through to a backing directory but
keeps data written and not yet fsynced in a cache of its own, so a power cut can drop it; it
tears writes, injects errno failures and stalls, and logs every write, fsync and rename.

:mod:`.tmpfs_guard` gives a run's tmpfs the same lifeline as this tier's daemon.

Public names: :class:`FaultyMount` (mount, control, unmount), :func:`fuse_unavailable_reason`,
:class:`FsUnavailable`, :class:`FsControl`, :func:`read_fs_log`.
"""

from .control import FsControl, FsControlError
from .fslog import read_fs_log
from .mount import FaultyMount, FsUnavailable, fuse_unavailable_reason

__all__ = ["FaultyMount", "FsControl", "FsControlError", "FsUnavailable",
           "fuse_unavailable_reason", "read_fs_log"]
