"""Generators in the suite: a sample in every run, the full sweep in a marked slower tier.

``cases(all, sample)`` gives pytest params: the sample runs always; the rest carry the ``sweep``
marker and are deselected by ``tests/conftest.py`` (pytest counts them as deselected, apart
from passed and skipped, and the closing summary names the command that runs them) unless
``HERMES_FULL_SWEEP=1``. The full tier: ``HERMES_FULL_SWEEP=1 pytest -m sweep`` (or the whole
suite with the variable set). ``examples(sample, full)`` sizes a hypothesis run the same way.

``tally(request, generator, cases, findings)`` records what one test of a generator ran and
found (as user properties, which xdist carries to the controller); the session summary
(``tests/conftest.py``) prints the totals per generator. ``CHAOS_GENERATORS=full`` (the
toolkit's generators' switch) asks for the full sweep too.
"""

from __future__ import annotations

import os
from typing import Iterable

import pytest

FULL = (os.environ.get("HERMES_FULL_SWEEP") == "1"
        or os.environ.get("CHAOS_GENERATORS", "") == "full")  # the toolkit's generators' switch
SKIP_REASON = "full sweep only: HERMES_FULL_SWEEP=1 pytest -m sweep"


def cases(all_cases: Iterable, sample: Iterable, *, ids=None) -> list:
    """``pytest.param`` for each case: the sample plain, the rest ``sweep``-marked (deselected
    unless the full sweep is asked for; the skip mark keeps them out where no conftest runs)."""
    sample = list(sample)
    out = []
    for case in all_cases:
        marks = [] if case in sample else [pytest.mark.sweep,
                                           pytest.mark.skipif(not FULL, reason=SKIP_REASON)]
        out.append(pytest.param(case, marks=marks, id=ids(case) if ids else None))
    return out


def examples(sample: int, full: int) -> int:
    """Hypothesis ``max_examples``: ``sample`` in every run, ``full`` in the full sweep."""
    return full if FULL else sample


def tally(request, generator: str, cases_run: int, findings: Iterable[str] = ()) -> None:
    """Record ``cases_run`` and ``findings`` (descriptions of failures) of one test of
    ``generator`` as user properties; ``tests/conftest.py`` prints the totals at the end."""
    request.node.user_properties.append(("generator_cases", (generator, int(cases_run))))
    request.node.user_properties.append(("generator_findings", (generator, list(findings))))
