"""Fault specifications of the faulty filesystem and the decision "does this operation fail?".

Each armed fault counts the operations that match it (op kind and path regex, searched in the
path relative to the mount root, e.g. ``state.db-wal``) and decides per operation whether it
fires. Specs are plain dicts on the control channel; :func:`parse_fault` validates them and
raises ``ValueError`` naming the field.

- ``torn_write {path, nth, keep_bytes}``: the nth matching write keeps its first ``keep_bytes``
  bytes, then the power is cut.
- ``io_error {op: write|fsync|read|open|truncate|mkdir|rmdir|unlink|rename|link|symlink|mknod|any,
  path, errno: EIO|ENOSPC|EROFS|EDQUOT, nth | probability, persistent, extending, seed}``: the
  operation fails with the errno. ``persistent``: every later matching operation fails too (a
  dead disk); ``extending`` (writes): only writes that grow the file count (ENOSPC while the WAL
  grows). ``any`` counts every operation that opens a file or changes the filesystem (all of the
  above but ``read``; an ``fsync`` of a directory included): "fail the Nth file operation", the
  SQLite test harness's I/O error sweep (issue 22).
- ``slow_io {op: write|fsync, path, delay, nth, count}``: the operation sleeps ``delay`` seconds
  first; ``nth`` delays only that one, ``count`` the first ``count`` from ``nth`` on (default: all).
Not done here: applying the fault (see :mod:`chaos.fs.ops`).
"""

from __future__ import annotations

import errno as errno_mod
import random
import re
from dataclasses import dataclass, field

ERRNOS = {"EIO": errno_mod.EIO, "ENOSPC": errno_mod.ENOSPC, "EROFS": errno_mod.EROFS,
          "EDQUOT": errno_mod.EDQUOT}
KINDS = ("torn_write", "io_error", "slow_io")
#: Operations that change the filesystem or open a file: what ``op: any`` counts.
CHANGE_OPS = ("write", "fsync", "open", "truncate", "mkdir", "rmdir", "unlink", "rename", "link",
              "symlink", "mknod")
IO_ERROR_OPS = (*CHANGE_OPS, "read", "any")
SLOW_OPS = ("write", "fsync")


@dataclass
class Fault:
    """One armed fault and its counters."""
    id: int
    kind: str
    op: str
    path: re.Pattern
    nth: int | None = None
    probability: float | None = None
    persistent: bool = False
    extending: bool = False
    keep_bytes: int = 0
    errno: int = errno_mod.EIO
    errno_name: str = "EIO"
    delay: float = 0.0
    count: int | None = None
    rng: random.Random = field(default_factory=random.Random)
    matched: int = 0
    fired: int = 0
    tripped: bool = False    # a persistent error has fired once: every later match fails

    def describe(self) -> dict:
        """JSON-ready summary with the counters."""
        out = {"id": self.id, "kind": self.kind, "op": self.op, "path": self.path.pattern,
               "matched": self.matched, "fired": self.fired}
        for key in ("nth", "probability", "count"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.kind == "torn_write":
            out["keep_bytes"] = self.keep_bytes
        if self.kind == "io_error":
            out.update(errno=self.errno_name, persistent=self.persistent, extending=self.extending)
        if self.kind == "slow_io":
            out["delay"] = self.delay
        return out

    def matches(self, op: str, rel_path: str, extends: bool = False) -> bool:
        """True when the operation is one this fault counts."""
        if op != self.op and not (self.op == "any" and op in CHANGE_OPS):
            return False
        if not self.path.search(rel_path):
            return False
        return not (self.extending and not extends)

    def decide(self) -> bool:
        """Count one matching operation; True when the fault fires on it."""
        self.matched += 1
        if self.kind == "slow_io":
            first = self.nth or 1
            last = None if self.count is None and self.nth is None else first + (self.count or 1) - 1
            fire = self.matched >= first and (last is None or self.matched <= last)
        elif self.tripped:
            fire = True
        elif self.probability is not None:
            fire = self.rng.random() < self.probability
        else:
            fire = self.matched == self.nth
        if fire:
            self.fired += 1
            if self.persistent:
                self.tripped = True
        return fire


def _int(spec: dict, key: str, default: int | None, low: int) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{key}: expected an integer >= {low}, got {value!r}")
    return value


def parse_fault(fault_id: int, spec: dict) -> Fault:
    """Validate a fault spec dict. Raises ``ValueError`` naming the bad field."""
    if not isinstance(spec, dict):
        raise ValueError(f"a fault is a mapping, got {type(spec).__name__}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    known = {"kind", "path", "op", "nth", "probability", "persistent", "extending", "keep_bytes",
             "errno", "delay", "count", "seed"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field for {kind}")
    try:
        path = re.compile(str(spec.get("path", "")))
    except re.error as exc:
        raise ValueError(f"path: not a regular expression ({exc})") from None
    fault = Fault(id=fault_id, kind=kind, op="write", path=path,
                  rng=random.Random(spec.get("seed", 0)))
    if kind == "torn_write":
        fault.nth = _int(spec, "nth", 1, 1)
        fault.keep_bytes = _int(spec, "keep_bytes", 0, 0)
    elif kind == "io_error":
        fault.op = spec.get("op", "write")
        if fault.op not in IO_ERROR_OPS:
            raise ValueError(f"op: expected one of {', '.join(IO_ERROR_OPS)}, got {fault.op!r}")
        name = spec.get("errno", "EIO")
        if name not in ERRNOS:
            raise ValueError(f"errno: expected one of {', '.join(ERRNOS)}, got {name!r}")
        fault.errno, fault.errno_name = ERRNOS[name], name
        fault.persistent = bool(spec.get("persistent", False))
        fault.extending = bool(spec.get("extending", False))
        if fault.extending and fault.op != "write":
            raise ValueError("extending: only for op: write")
        prob = spec.get("probability")
        if prob is not None:
            if "nth" in spec:
                raise ValueError("nth: give nth or probability, not both")
            if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0 < prob <= 1:
                raise ValueError(f"probability: expected a number in (0, 1], got {prob!r}")
            fault.probability = float(prob)
        else:
            fault.nth = _int(spec, "nth", 1, 1)
    else:  # slow_io
        fault.op = spec.get("op", "fsync")
        if fault.op not in SLOW_OPS:
            raise ValueError(f"op: expected one of {', '.join(SLOW_OPS)}, got {fault.op!r}")
        delay = spec.get("delay")
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 < delay <= 600:
            raise ValueError(f"delay: expected seconds in (0, 600], got {delay!r}")
        fault.delay = float(delay)
        fault.nth = _int(spec, "nth", None, 1)
        fault.count = _int(spec, "count", None, 1)
    return fault
