"""The unsynced data of one file: what a power cut may drop (LazyFS's page cache, in Python).

A :class:`FileState` sits between the application and the backing file, which holds only what
was made durable. Writes and truncates change the state; ``flush`` (fsync/fdatasync) writes the
dirty pages into the backing file; ``drop`` (power cut) forgets everything not flushed;
``forget`` (a failed fsync, Linux's behaviour since "fsyncgate") keeps the data readable but
never flushes it, so a later successful fsync leaves a hole where it was.

Invariant: every byte at or past ``size`` reads as zero (the tail of a page beyond a truncate is
zeroed), so extending a file after a truncate never resurrects old bytes.
Not done here: locking (the caller holds one lock), logging, fault decisions, paths.
"""

from __future__ import annotations

import os

PAGE = 4096


class FileState:
    """Unsynced state of one inode over its backing file descriptor ``fd`` (owned: closed by
    :meth:`close`). Offsets and lengths are bytes."""

    def __init__(self, fd: int):
        self.fd = fd
        self.durable_size = os.fstat(fd).st_size
        self.size = self.durable_size
        self.pages: dict[int, bytearray] = {}
        self.dirty: set[int] = set()
        self.trunc_to: int | None = None   # lowest size truncated to since the last flush

    # -- reading
    def _floor(self) -> int:
        """Backing bytes at or past this offset are stale (truncated away) or absent."""
        return self.durable_size if self.trunc_to is None else min(self.trunc_to, self.durable_size)

    def _backing_page(self, index: int) -> bytearray:
        start = index * PAGE
        floor = self._floor()
        page = bytearray(PAGE)
        if start < floor:
            data = os.pread(self.fd, min(PAGE, floor - start), start)
            page[:len(data)] = data
        return page

    def read(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset+length)`` as the application sees them (short at EOF)."""
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        out = bytearray()
        pos = offset
        while pos < end:
            index, within = divmod(pos, PAGE)
            take = min(PAGE - within, end - pos)
            page = self.pages.get(index)
            if page is None:
                page = self._backing_page(index)
            out += page[within:within + take]
            pos += take
        return bytes(out)

    # -- changing
    def write(self, offset: int, data: bytes) -> None:
        """Apply a write at ``offset`` (unsynced until :meth:`flush`)."""
        pos, view = offset, memoryview(data)
        while view:
            index, within = divmod(pos, PAGE)
            take = min(PAGE - within, len(view))
            page = self.pages.get(index)
            if page is None:
                page = self.pages[index] = self._backing_page(index)
            page[within:within + take] = view[:take]
            self.dirty.add(index)
            pos += take
            view = view[take:]
        self.size = max(self.size, offset + len(data))

    def truncate(self, length: int) -> None:
        """Set the size to ``length`` (shrink or extend with zeros), unsynced."""
        if length < self.size:
            for index in [i for i in self.pages if i * PAGE >= length]:
                del self.pages[index]
                self.dirty.discard(index)
            index, within = divmod(length, PAGE)
            if within:
                page = self.pages.get(index)
                if page is None:
                    page = self.pages[index] = self._backing_page(index)
                page[within:] = bytes(PAGE - within)
                self.dirty.add(index)
            self.trunc_to = length if self.trunc_to is None else min(self.trunc_to, length)
        self.size = length

    # -- durability
    def unsynced_bytes(self) -> int:
        """Bytes a power cut would drop now (dirty pages, clamped to the size)."""
        return sum(min(PAGE, max(0, self.size - i * PAGE)) for i in self.dirty)

    def is_clean(self) -> bool:
        """True when nothing differs from the backing file."""
        return not self.pages and self.trunc_to is None and self.size == self.durable_size

    def flush(self) -> int:
        """fsync: write dirty pages, truncate and extend into the backing file. Returns the bytes
        written. Forgotten pages (after a failed fsync) stay unflushed: the file keeps a hole."""
        if self.trunc_to is not None and self.trunc_to < self.durable_size:
            os.ftruncate(self.fd, self.trunc_to)
        written = 0
        for index in sorted(self.dirty):
            start = index * PAGE
            if start >= self.size:
                continue
            chunk = self.pages[index][:min(PAGE, self.size - start)]
            os.pwrite(self.fd, chunk, start)
            written += len(chunk)
        if os.fstat(self.fd).st_size != self.size:
            os.ftruncate(self.fd, self.size)
        for index in self.dirty:
            self.pages.pop(index, None)
        self.dirty.clear()
        self.trunc_to = None
        self.durable_size = self.size
        return written

    def persist_prefix(self, offset: int, data: bytes) -> None:
        """A torn write: flush what came before, then put ``data`` (the kept prefix) straight
        into the backing file at ``offset``."""
        self.flush()
        if data:
            os.pwrite(self.fd, data, offset)
            self.durable_size = max(self.durable_size, offset + len(data))
            self.size = max(self.size, self.durable_size)

    def forget(self) -> int:
        """A failed fsync: dirty pages stay readable but will never be flushed. Returns the bytes
        forgotten."""
        lost = self.unsynced_bytes()
        self.dirty.clear()
        return lost

    def close(self) -> None:
        """Close the owned backing descriptor."""
        try:
            os.close(self.fd)
        except OSError:
            pass
