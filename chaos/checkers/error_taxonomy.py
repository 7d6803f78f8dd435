"""``error_taxonomy``: only the errors the scenario allows reach the roles (SPEC §16.3, §12).

SPEC §16.3: "only the errors the scenario allows reach the roles; SQLITE_CORRUPT, SQLITE_NOTADB or
"malformed" fail the run unless the scenario injected them."

Errors that reached a role: every ``fail``/``info`` record a role process wrote itself with an
``error`` (exception class name; the synthesized ``info`` of a killed call carries none), and
every ``role_crashed`` event (class read from its traceback's last line).

Corruption signals: an error class in :data:`CORRUPT_CLASSES`, or any record of a role whose
``error``/``message``/``stdout``/``stderr``/``output``/``detail`` text matches
:data:`CORRUPT_WORDS` ("malformed", "file is not a database", SQLITE_CORRUPT, SQLITE_NOTADB), and
the store's ``quarantine`` event and ``refusal`` events with reason ``corrupt``/``fts_corrupt``.
A corruption signal is *injected* when a corrupting nemesis fault
(:data:`chaos.nemesis.CORRUPTING_FAULTS`, the faults declared ``corrupting``)
started at or before it; injected corruption errors are allowed without being listed.

FAIL when an error class outside ``allow`` reached a role, or a corruption signal appears that no
earlier corrupting fault explains. Evidence: the first records of each offending class.
Params: ``allow`` (error class names, default none). INCONCLUSIVE when the history has no
operation of a role at all.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..history import TOOLKIT_PROCESSES, brief, fmt_t, run_start
from ..nemesis import CORRUPTING_FAULTS
from ..params import param
from .base import (
    CheckContext,
    Verdict,
    params_of,
    problems_as_cases,
    verdict_from,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """Only the allowed error classes reach the roles; corruption errors fail unless a
    corrupting fault was injected."""

    allow: list[str] = param([], "Error class names a role may see (e.g. "
                             "DeletedWalGenerationError).", uniqueItems=True)


NAME = "error_taxonomy"
CORRUPT_CLASSES = frozenset({"StateDbCorruptError"})
CORRUPT_WORDS = re.compile(r"malformed|file is not a database|SQLITE_CORRUPT|SQLITE_NOTADB",
                           re.IGNORECASE)
TEXT_FIELDS = ("error", "message", "stdout", "stderr", "output", "detail")
_TB_LAST = re.compile(r"^(?:[\w.]+\.)?(\w+)(?::|$)")


def crash_class(traceback_text: str) -> str:
    """The exception class of a formatted traceback (its last non-empty line), or ``?``."""
    lines = [ln for ln in (traceback_text or "").splitlines() if ln.strip()]
    m = _TB_LAST.match(lines[-1].strip()) if lines else None
    return m.group(1) if m else "?"


def _text(rec: dict) -> str:
    return " ".join(str(rec[k]) for k in TEXT_FIELDS if isinstance(rec.get(k), str))


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    allow = set(p.allow)
    hist = ctx.history
    injected_at = min((float(r["t"]) for r in hist if r.get("type") == "nemesis"
                       and r.get("fault") in CORRUPTING_FAULTS
                       and r.get("phase") in ("start", "done")), default=None)
    role_recs = [r for r in hist if r.get("process") not in TOOLKIT_PROCESSES
                 and r.get("process")]
    n_ops = sum(1 for r in role_recs if r.get("type") == "invoke")

    by_class: Counter = Counter()
    by_class_proc: dict[str, Counter] = defaultdict(Counter)
    bad_class: dict[str, list] = defaultdict(list)
    corrupt_injected, corrupt_unexplained = 0, []
    for r in role_recs:
        typ = r.get("type")
        cls = None
        if typ in ("fail", "info") and r.get("error") and not r.get("synthesized"):
            cls = str(r["error"])
        elif typ == "event" and r.get("event") == "role_crashed":
            cls = crash_class(str(r.get("error", "")))
        corrupt = (cls in CORRUPT_CLASSES or bool(CORRUPT_WORDS.search(_text(r)))
                   or (typ == "event" and (r.get("event") == "quarantine" or (
                       r.get("event") == "refusal"
                       and r.get("reason") in ("corrupt", "fts_corrupt")))))
        if cls is not None:
            by_class[cls] += 1
            by_class_proc[cls][r["process"]] += 1
        if corrupt:
            if injected_at is not None and float(r.get("t", 0.0)) >= injected_at:
                corrupt_injected += 1
            else:
                corrupt_unexplained.append(r)
            continue  # judged as corruption, not by class
        if cls is not None and cls not in allow:
            bad_class[cls].append(r)

    fig: dict = {"allow": sorted(allow), "errors_by_class": dict(by_class),
                 "errors_by_class_and_process": {c: dict(p) for c, p in by_class_proc.items()},
                 "not_allowed": {c: len(v) for c, v in bad_class.items()},
                 "corruption_injected_at": injected_at,
                 "corruption_signals_injected": corrupt_injected,
                 "corruption_signals_unexplained": len(corrupt_unexplained), "role_ops": n_ops}
    evidence: list = []
    problems: list[str] = []
    if corrupt_unexplained:
        first = corrupt_unexplained[0]
        problems.append(f"{len(corrupt_unexplained)} corruption signal(s) with no corrupting fault "
                        f"injected before (first: {first.get('process')} at "
                        f"t={fmt_t(first.get('t'), run_start(ctx.history))}: {_text(first)[:120] or first.get('event')})")
        evidence.extend({"violation": "corruption not injected", "record": brief(r)}
                        for r in corrupt_unexplained[:5])
    for cls, recs in sorted(bad_class.items(), key=lambda kv: -len(kv[1])):
        procs = sorted({r["process"] for r in recs})
        problems.append(f"{len(recs)} {cls} reached {', '.join(procs)} (not in allow)")
        evidence.extend({"violation": f"{cls} not allowed", "record": brief(r)} for r in recs[:3])
    seen = ", ".join(f"{c} x{n}" for c, n in by_class.most_common()) or "no error"
    summary = (f"{n_ops} role ops; errors that reached roles: {seen}"
               + (f"; {corrupt_injected} injected corruption signal(s)"
                  if corrupt_injected else ""))
    return verdict_from(NAME, problems_as_cases("errors", problems), fig, summary=summary,
                        fail_summary="; ".join(problems), evidence=evidence,
                        cases_as_evidence=False,
                        inconclusive="no role operation in the history" if n_ops == 0 else None)
