"""Proof that a mutant's code is the code that ran (issue 14).

The audit puts a ``sitecustomize.py`` (:data:`SOURCE`) beside each mutated copy of
``hermes_state``; the copy's directory comes first on ``PYTHONPATH``, so every Python process of
the run (the ``chaos run`` driver, each spawned role, each maintenance command) executes it at
start-up. It installs a meta-path finder that records, the moment ``hermes_state`` is imported,
the pid, the command and the file the import resolved to, one JSON line appended to the file
named by ``HERMES_AUDIT_PROBE``. :func:`verify` then proves from that log that every process
that imported the store imported the mutant copy, and that every role process of the run did:
a mutant that silently runs the real code is refused, loudly.

The probe also shows whether a run reached the mutated code (issue 27 item 7): the copy's
``audit-sites.json`` names the mutated statements (:mod:`chaos.audit.reach`); when a module
holding one is imported, the probe compiles it from its source with a call planted before (or
after) each such statement (in the syntax tree: the file on disk stays exactly the mutant, and
line numbers are kept), and the first time a process runs one it appends a ``reached`` record.
:func:`reached` reads them back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import history

ENV_LOG = "HERMES_AUDIT_PROBE"

SOURCE = '''\
\"\"\"chaos audit probe: records where hermes_state is imported from, and whether the mutated
statements ran (chaos/audit/probe.py).\"\"\"
import json as _json
import os as _os
import sys as _sys

_LOG = _os.environ.get("HERMES_AUDIT_PROBE")
_SITES_FILE = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "audit-sites.json")
_ROOT = _os.path.dirname(_SITES_FILE)
_SEEN = set()


def _append(record):
    line = _json.dumps(record) + "\\n"
    fd = _os.open(_LOG, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
    try:
        _os.write(fd, line.encode())
    finally:
        _os.close(fd)


def _reached(site):
    if site in _SEEN:
        return
    _SEEN.add(site)
    _append({"pid": _os.getpid(), "reached": site, "argv": _sys.argv[:6]})


def _load_sites():
    try:
        with open(_SITES_FILE, encoding="utf-8") as fh:
            data = _json.load(fh)
    except (OSError, ValueError):
        return {}
    return {_os.path.realpath(_os.path.join(_ROOT, rel)): (rel, sites)
            for rel, sites in data.items()}


_SITES = _load_sites() if _LOG else {}


def _marked_loader():
    import ast
    import builtins
    from importlib.machinery import SourceFileLoader

    builtins.__hermes_audit_reached__ = _reached

    def mark(tree, rel, sites):
        before = {(s["line"], s["col"]) for s in sites if s.get("where") != "after"}
        after = {(s["line"], s["col"]) for s in sites if s.get("where") == "after"}

        def call(st):
            node = ast.Expr(ast.Call(ast.Name("__hermes_audit_reached__", ast.Load()),
                                     [ast.Constant(f"{rel}:{st.lineno}")], []))
            return ast.copy_location(node, st)

        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                stmts = getattr(node, name, None)
                if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.stmt):
                    continue
                out = []
                for st in stmts:
                    key = (st.lineno, st.col_offset)
                    future = isinstance(st, ast.ImportFrom) and st.module == "__future__"
                    if key in before and not future:
                        out.append(call(st))
                    out.append(st)
                    if key in after or (key in before and future):
                        out.append(call(st))
                setattr(node, name, out)
        # __future__ imports stay first (a mark planted before them would be a SyntaxError)
        body = tree.body
        futures = [st for st in body if isinstance(st, ast.ImportFrom)
                   and st.module == "__future__"]
        if futures:
            rest = [st for st in body if st not in futures]
            doc = rest[:1] if (isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant)) else []
            tree.body = doc + futures + rest[len(doc):]
        return ast.fix_missing_locations(tree)

    class MarkedLoader(SourceFileLoader):
        def get_code(self, fullname):
            path = self.get_filename(fullname)
            data = self.get_data(path)
            real = _os.path.realpath(path)
            rel, sites = _SITES[real]
            tree = mark(ast.parse(data, path), rel, sites)
            return compile(tree, path, "exec", dont_inherit=True)

    return MarkedLoader


_LOADER = _marked_loader() if _SITES else None


class _HermesAuditProbe:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "hermes_state" and not (_LOADER and name.startswith("hermes_state.")):
            return None
        spec = None
        for finder in list(_sys.meta_path):
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        if name == "hermes_state":
            _append({"pid": _os.getpid(), "origin": getattr(spec, "origin", None),
                     "argv": _sys.argv[:6]})
        origin = getattr(spec, "origin", None)
        if _LOADER and origin and _os.path.realpath(origin) in _SITES:
            spec.loader = _LOADER(name, origin)
        return spec


if _LOG:
    _sys.meta_path.insert(0, _HermesAuditProbe)
'''


SITES_FILE = "audit-sites.json"


def install(root: Path, sites: dict | None = None) -> None:
    """Write the probe as ``root/sitecustomize.py`` (``root`` holds the copied package), and
    the mutated statements to mark, ``sites`` (:data:`chaos.audit.reach.Sites`), beside it."""
    (root / "sitecustomize.py").write_text(SOURCE, encoding="utf-8")
    if sites:
        (root / SITES_FILE).write_text(json.dumps(sites, indent=1), encoding="utf-8")


def records(log: Path) -> list[dict]:
    """The probe's lines (a torn last line of a killed process is skipped), read as a run's
    history is (:func:`chaos.history.read_file`: never through a link or from a FIFO); [] when
    no process wrote one."""
    if not os.path.lexists(log):
        return []
    return history.read_file(log)


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
        if "reached" in rec:
            continue
        origin = rec.get("origin")
        if origin is None or os.path.realpath(origin) != expected:
            problems.append(f"pid {rec.get('pid')} ({' '.join(map(str, rec.get('argv') or []))})"
                            f" imported hermes_state from {origin}, not from the copy {expected}")
    seen = {rec.get("pid") for rec in recs if "origin" in rec}
    for pid in role_pids:
        if pid not in seen:
            problems.append(f"role process pid {pid} recorded no import of hermes_state from the "
                            "copy")
    return problems


def reached(log: Path) -> list[str]:
    """The mutated statements some process of the run reached (``"<file>:<line>"``, each once,
    in the order first reached)."""
    seen: dict[str, None] = {}
    for rec in records(log):
        site = rec.get("reached")
        if isinstance(site, str):
            seen.setdefault(site, None)
    return list(seen)
