"""``python -m chaos repro BUNDLE [-o scenario.yaml]``: a user's bundle becomes a scenario (issue 25).

A bundle (``hermes-state doctor --bundle FILE``) is one moment of a user's store. The repro
decides which lockup class it shows (:mod:`.cases`: a retired sidecar generation, a stopped lock
owner, a full disk, a maintenance command beside a writer, a long reader, a starved checkpointer)
and writes a scenario that makes that state again with real processes (:mod:`.recipes`): the
same roles and counts, a store at the same schema version, FTS layout and size class, the fault,
and first under ``expect`` the checker that names the user's symptom, so the run FAILS with it
and ``chaos shrink`` preserves it. YAML comments cite the bundle field (and line) behind every
choice and list what could not be inferred.

Exit codes: 0 the scenario was written (stdout, or ``-o FILE``); 2 the file is not a readable
bundle; 3 the toolkit failed; 5 the bundle shows a state the toolkit cannot reproduce yet (the
reasons on stderr).
"""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

from .build import DURATION, Draft
from .cases import NotReproducible, classify
from .recipes import RECIPES
from .source import Bundle, BundleError

EXIT_WRITTEN, EXIT_BAD_BUNDLE, EXIT_TOOLKIT, EXIT_NOT_REPRODUCIBLE = 0, 2, 3, 5
WIDTH = 98

__all__ = ["Bundle", "BundleError", "EXIT_NOT_REPRODUCIBLE", "NotReproducible", "Repro",
           "cmd_repro", "make_repro"]


@dataclass
class Repro:
    """A scenario made from a bundle: ``kind`` (the lockup class), ``checker`` (the one that
    names the user's symptom and is expected to FAIL), ``text`` (the YAML, validated)."""

    kind: str
    title: str
    checker: str
    symptom: str
    text: str
    name: str


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=100_000,
                          allow_unicode=True).strip()


def _comment(lines: list[str], indent: int = 0) -> list[str]:
    pad = " " * indent
    out = []
    for line in lines:
        out += textwrap.wrap(line, WIDTH - indent - 2, initial_indent=f"{pad}# ",
                             subsequent_indent=f"{pad}#   ", break_on_hyphens=False,
                             break_long_words=False) or [f"{pad}#"]
    return out


def render(d: Draft, b: Bundle) -> str:
    """The scenario as YAML text with its comments (header, then every item)."""
    made = b.get("bundle", "created_at")
    head = [f"Made by `python -m chaos repro {b.path.name}` from a hermes-state bundle "
            f"(created {made}, {b.get('bundle', 'made_by')}; SQLite "
            f"{b.get('versions', 'sqlite')}, Python {b.get('versions', 'python')}).",
            f"Lockup class: {d.case.kind}: {d.case.title}."]
    head += [f"  {f}" for f in d.case.facts]
    head += [f"Expected verdict: {d.checker} FAIL: the user's symptom, {d.symptom}.",
             f"Run: python -m chaos run FILE; minimise: python -m chaos shrink RUN_DIR "
             f"--checker {d.checker}.",
             f"The fix (docs/REPRO.md): {d.fix}."]
    if d.not_modeled:
        head.append("Processes of the bundle not modeled (no role, or not a client of the "
                    "store):")
        head += [f"  {x}" for x in d.not_modeled]
    head.append("Could not be inferred from the bundle:")
    head += [f"  {x}" for x in d.not_inferred]
    lines = _comment(head)
    lines += [f"name: {d.name}", f"description: {json.dumps(d.description)}", "seed: 1",
              f"duration: {DURATION}  # a safety bound: the terminate steps end the run "
              "once the state was shown"]
    lines += _comment(d.store.why)
    lines.append(f"store: {_flow(d.store.value)}")
    lines.append("roles:")
    for r in d.roles:
        lines += _comment(r.why, 2)
        lines.append(f"  - {_flow(r.value)}")
    lines.append("nemesis:")
    for k, s in enumerate(d.nemesis):
        lines += _comment([f"step {k}: " + w if j == 0 else w for j, w in enumerate(s.why)]
                          or [f"step {k}"], 2)
        lines.append(f"  - {_flow(s.value)}")
    lines.append("expect:")
    for name, params, why in d.expect:
        lines += _comment(why, 2)
        lines.append(f"  {name}: {_flow(params)}")
    if d.must_observe:
        lines += _comment(["the run is INCONCLUSIVE, not green, when the fault never fired"])
        lines.append(f"must_observe: {_flow(d.must_observe)}")
    return "\n".join(lines) + "\n"


def make_repro(bundle_path: str | os.PathLike) -> Repro:
    """Read a bundle, decide its lockup class, write and validate the scenario.

    Raises:
        BundleError: not a readable bundle. NotReproducible: no class matched (``reasons``).
        RuntimeError: the scenario written does not validate (a toolkit bug).
    """
    from ..scenario import ScenarioError, load_scenario_text

    b = Bundle(bundle_path)
    case = classify(b)
    draft = RECIPES[case.kind](b, case)
    text = render(draft, b)
    try:
        load_scenario_text(text, f"<repro of {b.path.name}>")
    except ScenarioError as exc:
        raise RuntimeError("the scenario made from the bundle is invalid (a toolkit bug): "
                           + "; ".join(str(p) for p in exc.problems)) from None
    return Repro(case.kind, case.title, draft.checker, draft.symptom, text, draft.name)


# ---------------------------------------------------------------------- command line

def write_output(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (created or truncated), never through a symbolic link and never
    into a FIFO or device.

    Raises:
        OSError: cannot write, or ``path`` is not a regular file.
    """
    import errno
    import stat

    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.ftruncate(fd, 0)
        with os.fdopen(os.dup(fd), "w", encoding="utf-8") as fh:
            fh.write(text)
    finally:
        os.close(fd)


def cmd_repro(args, err) -> int:
    """``python -m chaos repro``: 0 written, 2 bad bundle, 5 not reproducible yet."""
    try:
        repro = make_repro(args.bundle)
    except BundleError as exc:
        err.print(f"chaos repro: {exc}", markup=False, highlight=False)
        return EXIT_BAD_BUNDLE
    except NotReproducible as exc:
        err.print(f"chaos repro: {args.bundle} shows a state the toolkit cannot reproduce yet "
                  "(none of: retired sidecar generation, stopped lock owner, full disk, "
                  "maintenance beside a writer, long reader, starved checkpointer):",
                  markup=False, highlight=False)
        for reason in exc.reasons:
            err.print(f"  - {reason}", markup=False, highlight=False)
        err.print("  attach the bundle to the issue as it is: a developer reads it by hand",
                  markup=False, highlight=False)
        return EXIT_NOT_REPRODUCIBLE
    if args.output is None:
        print(repro.text, end="")
    else:
        from hermes_state.testing import owning_store

        owned = owning_store(args.output)
        if owned:  # never a path a store owns (issue 22 item 3): state.db, a lock file, ...
            err.print(f"chaos repro: refusing to write {args.output}: it is {owned[1]} (store "
                      f"{owned[0]}); choose a path outside the store's files",
                      markup=False, highlight=False)
            return EXIT_BAD_BUNDLE
        try:
            write_output(args.output, repro.text)
        except OSError as exc:
            err.print(f"chaos repro: cannot write {args.output}: {exc.strerror or exc}",
                      markup=False, highlight=False)
            return EXIT_BAD_BUNDLE
    err.print(f"lockup class: {repro.kind} ({repro.title}); expected: {repro.checker} FAIL"
              + (f"; wrote {args.output}" if args.output else ""), markup=False,
              highlight=False)
    err.print(f"next: python -m chaos run {args.output or 'SCENARIO.yaml'}, then python -m "
              f"chaos shrink RUN_DIR --checker {repro.checker}", markup=False, highlight=False)
    return EXIT_WRITTEN
