"""The runner's live view of the growing history (:mod:`chaos.runner`): counts for the
schedule's ``after:`` triggers, the progress line and the notes printed while a run lasts.
It reads the per-process history files as they grow and judges nothing."""

from __future__ import annotations

from pathlib import Path

from . import history as hist
from . import store
from .schedule import Counts


class HistoryTail:
    """Reads the role history files as they grow: counts for ``after:`` triggers and progress."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._tail = hist.JsonlTail(directory, skip=(store.history_file(store.RUNNER_PROCESS),
                                                     store.history_file(store.SAMPLER_PROCESS)))
        self.ok_by_role_op: dict[tuple[str, str], int] = {}
        self.roles: dict[str, str] = {}  # process -> role (filled by the runner at spawn)
        self.seen = Counts()
        self.counts = {"ok": 0, "fail": 0, "info": 0, "retry": 0, "refusal": 0, "capture": 0,
                       "checkpoint": 0}
        self.new_notes: list[str] = []

    def poll(self) -> None:
        for rec in self._tail.new_records():
            self._count(rec)

    def _count(self, rec: dict) -> None:
        proc = rec.get("process", "")
        self.seen.add_record(rec, self.roles.get(proc) or proc.rsplit("-", 1)[0])
        typ = rec.get("type")
        if typ in ("ok", "fail", "info"):
            self.counts[typ] += 1
            if typ == "ok":
                role = rec.get("process", "").rsplit("-", 1)[0]
                key = (role, rec.get("op", ""))
                self.ok_by_role_op[key] = self.ok_by_role_op.get(key, 0) + 1
            elif rec.get("op") == "open":
                self.new_notes.append(f"{rec.get('process')} open refused: {rec.get('error')}")
        elif typ == "event":
            ev = rec.get("event")
            if ev in self.counts:
                self.counts[ev] += 1
            if ev in ("refusal", "capture", "write_gave_up", "failpoint"):
                detail = rec.get("dir") or rec.get("reason") or ""
                if ev == "failpoint":
                    detail = f"{rec.get('name')}={rec.get('action')} at hit {rec.get('hit')}"
                self.new_notes.append(f"{rec.get('process')} {ev} {detail}")
