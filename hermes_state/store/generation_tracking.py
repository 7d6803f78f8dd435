"""The generation check of every write and close: is the store under this connection still the
one on disk? (SPEC §10.1, §10.3-§10.5).

:class:`GenerationTracking` is part of :class:`hermes_state.store.connection.StoreConnection` (it
needs its ``conn``, ``db_path``, ``generation`` and ``checkpoint``): identities recorded at
open, compared before each write (the on-disk header read through SQLite's own descriptor), and
on a mismatch the sticky refusal, the retired-WAL capture and the stale sidecars moved aside.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .. import events
from ..errors import (
    HOLDER_SELF,
    REPLACED_DB_USER_MESSAGE,
    DeletedWalGenerationError,
    StateDbReplacedError,
)
from ..files import atomic
from ..files.paths import utc_stamp
from ..files.sqlite_format import application_id
from ..processes.generation import DirStamp, Generation, diff, identity, own_descriptors
from .capture_obligation import CaptureObligation
from .pragmas import disable_checkpoint_on_close

log = logging.getLogger("hermes_state")


class GenerationTracking:
    """Mixin of :class:`~hermes_state.store.connection.StoreConnection`: identities and refusals.

    It needs, from the class it is mixed into: ``conn``, ``db_path``, ``journal_mode``,
    ``generation`` and :meth:`checkpoint` (declared below, defined by the write path).
    """

    def checkpoint(self, mode: str = "PASSIVE", *, trigger: str = "manual", **kw):
        """Provided by :class:`~hermes_state.store.connection.StoreConnection` (SPEC §4)."""
        raise NotImplementedError

    def record_generation(self) -> None:
        """Record the store's identities and database token after the open (SPEC §10.1)."""
        token = self.conn.execute(
            "SELECT value FROM state_meta WHERE key='db_file_generation'").fetchone()[0]
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        self.generation = Generation.read(self.db_path, app_id, token)
        self._dir_stamp = DirStamp(self.db_path)
        self._main_fd = None
        if self.journal_mode == "wal" and self._disk_application_id() != app_id:
            # Page 1 with our application_id is still only in the WAL (fresh store): move it to
            # the file so that the on-disk header can be compared before every write.
            self.checkpoint("PASSIVE", trigger="open")
        self._initial_disk_app_id = self._disk_application_id()

    def _disk_application_id(self) -> int | None:
        """``application_id`` in the 100-byte header ON DISK, read through SQLite's own descriptor.

        A read through the connection would be served from the page cache or our own WAL frames
        and never see a ``cp other.db state.db`` (same inode, new content). ``os.pread`` on the
        descriptor SQLite already holds opens nothing and closes nothing (SPEC §4). Returns None
        when no descriptor of ours has the recorded inode (non-Linux), -1 for a file whose header
        is not SQLite's.
        """
        assert self.generation is not None
        fd = self._main_fd
        if fd is not None:
            # The descriptor found earlier is the lowest of this process on the recorded inode,
            # not necessarily SQLite's: its owner may close it and the number be reused (a copy
            # of the store reads this store's application_id), so its identity is verified at
            # every call (tests/test_header_descriptor_reuse.py).
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != tuple(self.generation.db or ()):
                    fd = None
            except OSError:
                fd = None
        if fd is None:
            fds = own_descriptors(self.generation.db)
            fd = fds[0] if fds else None
            self._main_fd = fd
        if fd is None:
            return None
        try:
            header = os.pread(fd, 100, 0)
        except OSError:
            return None
        app_id = application_id(header)
        if app_id is None:
            return -1 if header else 0
        return app_id

    def rerecord_generation(self) -> None:
        """Re-take the identities after this handle's own VACUUM/TRUNCATE (SPEC §8, §10.1)."""
        with self._lock:
            self.record_generation()

    def _check_generation(self, stamp_taken: tuple | None = None) -> None:
        """SPEC §10.1: the store under the connection must still be the one on disk.

        The header's application_id is read on every call; the three identities are compared
        by ``lstat`` unless the store's directory is unchanged since a full comparison found
        nothing (one ``stat``, :class:`~hermes_state.processes.generation.DirStamp`).

        Args:
            stamp_taken: ``(stamp, wall ns)`` of the store's directory already taken in this write
                transaction (by the checkpoint lock's identity check, after locking), else
                None: taken here.
        """
        assert self.generation is not None
        app_id = self._live_application_id()
        stamps = self._dir_stamp
        stamp, taken = stamp_taken if stamp_taken is not None else stamps.take()
        if stamp is not None and stamp == stamps.kept and \
                app_id == self.generation.application_id:
            return
        found = diff(self.generation, self.db_path, app_id)
        if found is None:
            stamps.keep(stamp, taken)
            return
        stamps.kept = None
        kind, detail = found
        self._retire(kind, detail, trigger="halt")
        raise self._sticky  # type: ignore[misc]

    def _live_application_id(self) -> int:
        """The recorded application_id unless the header on disk proves another file is there."""
        assert self.generation is not None
        disk = self._disk_application_id()
        if disk is None or disk in (self.generation.application_id, self._initial_disk_app_id):
            return self.generation.application_id
        return disk

    def _retire(self, kind: str, detail: str, trigger: str) -> None:
        """Make the refusal sticky, capture the retired WAL (an obligation kept until a
        verified capture exists: :mod:`hermes_state.store.capture_obligation`), never
        checkpoint again."""
        self._retired = True
        ob = CaptureObligation(self.db_path, self.generation, self.conn)  # type: ignore[arg-type]
        self._obligation = ob
        ob.attempt(trigger)
        self._stale_move_error = None
        if kind == "replaced_db":
            detail += self._move_stale_sidecars_aside(ob.capture_dir)
        self._retire_info = (kind, detail)
        self._sticky = self.retired_error()
        events.enabled() and events.emit("refusal", reason=kind, detail=detail,
                                         capture_pending=ob.pending)
        disable_checkpoint_on_close(self.conn, str(self.db_path))

    def retry_capture(self) -> None:
        """Another attempt at a pending capture (every call on a retired handle, issue 22.1);
        the sticky refusal then says what is true now."""
        ob = self._obligation
        if ob is not None and ob.pending:
            ob.attempt("retry")
            if self._retire_info is not None:
                self._sticky = self.retired_error()
        self.retry_stale_move()

    def retry_stale_move(self) -> None:
        """Another attempt at moving this generation's sidecars away from the path of a
        replaced ``state.db`` when the first one failed (every call, close; issue 22.1)."""
        if not self._stale_move_error or self._retire_info is None:
            return
        ob = self._obligation
        moved = self._move_stale_sidecars_aside(ob.capture_dir if ob is not None else None)
        if moved:
            kind, detail = self._retire_info
            self._retire_info = (kind, detail + moved)
        self._sticky = self.retired_error()

    def retired_error(self) -> StateDbReplacedError:
        """The refusal of a retired handle as things stand: "Nothing is lost" only with a
        verified capture; otherwise what is at risk and where (issue 22 item 1)."""
        kind, detail = self._retire_info  # type: ignore[misc]
        ob = self._obligation
        capture = ob.capture_dir if ob is not None else None
        if capture:
            detail += f"; evidence captured in {capture} (verified)"
        stale = self._stale_move_error
        if stale:
            detail += (f"; {stale}: a process opening the store now would replay that log onto "
                       "the new state.db, so opens move it aside first or refuse (retried at "
                       "every call and at close)")
        elif ob is not None and ob.pending:
            detail += (f"; capture PENDING after {ob.attempts} attempt(s): "
                       f"{ob.error.user_message if ob.error else 'not attempted'}")
        at_risk = ob.at_risk() if ob is not None else None
        if kind == "retired_wal":
            # This handle holds the retired generation itself (issue 16 item 4).
            return DeletedWalGenerationError(
                f"held by this process: PID {os.getpid()}, the connection that was writing; "
                f"{detail}", capture_dir=capture, held_by=HOLDER_SELF, pid=os.getpid(),
                own_connection=True, at_risk=at_risk)
        if at_risk is None:
            return StateDbReplacedError(detail)
        return StateDbReplacedError(detail, user_message=REPLACED_DB_USER_MESSAGE.replace(
            "Nothing this process wrote is lost: stop every process",
            at_risk.replace("exist only in that deleted log", "are in the write-ahead log of "
                            "the replaced file") + " Run `doctor` first, then stop every process"))

    def _move_stale_sidecars_aside(self, capture: str | None) -> str:
        """After ``state.db`` was replaced, our ``-wal``/``-shm`` still sit at the path.

        They belong to the file that was replaced; the next opener would replay our frames onto
        the new file. While they are still exactly ours (same inode as recorded), rename them into
        the capture directory (or beside the store) so the new file opens clean. Nothing is
        deleted: the bytes stay as evidence.
        """
        assert self.generation is not None
        moved: list[str] = []
        failed: list[str] = []
        for suffix, recorded in (("-wal", self.generation.wal), ("-shm", self.generation.shm)):
            path = Path(f"{self.db_path}{suffix}")
            if recorded is None or identity(path) != tuple(recorded):
                continue
            if capture:
                dest = Path(capture) / f"{path.name}.moved-from-path"
            else:
                dest = path.with_name(f"{path.name}.stale-{utc_stamp()}-{os.getpid()}")
            try:
                moved.append(str(atomic.move_aside(path, atomic.numbered(dest))))
            except OSError as exc:  # named and retried, never dropped (issue 22 item 1)
                why = (f"this generation's {path.name} is still at {path} (it could not be "
                       f"moved aside: {exc.strerror or exc})")
                if why != self._stale_move_error:
                    log.error("session storage: %s; retried at every call and at close", why)
                failed.append(why)
        self._stale_move_error = "; ".join(failed) or None
        return f"; moved this generation's sidecars aside: {', '.join(moved)}" if moved else ""
