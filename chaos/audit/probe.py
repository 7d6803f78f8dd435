"""Proof that a mutant's code is the code that ran (issue 14).

The audit puts a ``sitecustomize.py`` (:data:`SOURCE`) beside each mutated copy of
``hermes_state``; the copy's directory comes first on ``PYTHONPATH``, so every Python process of
the run (the ``chaos run`` driver, each spawned role, each maintenance command) executes it at
start-up. It installs a meta-path finder that records, the moment ``hermes_state`` is imported,
the pid, the command and the file the import resolved to, one JSON line appended to the file
named by ``HERMES_AUDIT_PROBE``. :func:`verify` then proves from that log that every process
that imported the store imported the mutant copy, and that every role process of the run did:
a mutant that silently runs the real code is refused, loudly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ENV_LOG = "HERMES_AUDIT_PROBE"

SOURCE = '''\
"""chaos audit probe: records where hermes_state is imported from (chaos/audit/probe.py)."""
import json as _json
import os as _os
import sys as _sys

_LOG = _os.environ.get("HERMES_AUDIT_PROBE")


class _HermesAuditProbe:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "hermes_state":
            return None
        spec = None
        for finder in list(_sys.meta_path):
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        line = _json.dumps({"pid": _os.getpid(), "origin": getattr(spec, "origin", None),
                            "argv": _sys.argv[:6]}) + "\\n"
        fd = _os.open(_LOG, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
        try:
            _os.write(fd, line.encode())
        finally:
            _os.close(fd)
        return spec


if _LOG:
    _sys.meta_path.insert(0, _HermesAuditProbe)
'''


def install(root: Path) -> None:
    """Write the probe as ``root/sitecustomize.py`` (``root`` holds the copied package)."""
    (root / "sitecustomize.py").write_text(SOURCE, encoding="utf-8")


def records(log: Path) -> list[dict]:
    """The probe's lines (a torn last line of a killed process is skipped)."""
    out = []
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def verify(log: Path, package: Path, role_pids: list[int]) -> list[str]:
    """Problems proving the run did NOT run ``package`` (empty list: it did).

    Args:
        log: the probe log of the run.
        package: the ``hermes_state`` directory of the copy that must have been imported.
        role_pids: pids of the run's role processes (each must have imported the copy).
    Returns:
        One line per problem: an import from another place, no import recorded at all, or a
        role process that recorded none.
    """
    expected = os.path.realpath(package / "__init__.py")
    recs = records(log)
    problems = []
    if not recs:
        problems.append(f"no process recorded importing hermes_state (probe log {log}): the "
                        "probe did not run, so nothing proves the mutant ran")
    for rec in recs:
        origin = rec.get("origin")
        if origin is None or os.path.realpath(origin) != expected:
            problems.append(f"pid {rec.get('pid')} ({' '.join(map(str, rec.get('argv') or []))})"
                            f" imported hermes_state from {origin}, not from the copy {expected}")
    seen = {rec.get("pid") for rec in recs}
    for pid in role_pids:
        if pid not in seen:
            problems.append(f"role process pid {pid} recorded no import of hermes_state from the "
                            "copy")
    return problems
