"""Parameter declarations: one place for each parameter's type, default, range and description.

Every role workload (``chaos/roles``), nemesis fault (``chaos/nemesis``) and checker
(``chaos/checkers``) declares its parameters once, as a frozen dataclass whose fields are made
with :func:`param`. :mod:`chaos.scenario` generates from those declarations the published JSON
Schema, the defaults, the validation errors and the README's scenario reference, and builds the
typed objects the run reads: what ``validate`` accepts is what ``run`` executes.

Durations are written ``10s``, ``500ms``, ``2m`` or as a number of seconds (:func:`parse_duration`)
and always reach the code as float seconds.
"""

from __future__ import annotations

import math
import re
from typing import Any

DURATION_PATTERN = r"^[0-9]+(\.[0-9]+)?(ms|s|m)$"
_DURATION_RE = re.compile(r"^(?P<num>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|s|m)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0}
#: Longest duration a scenario may use (a chaos run of 7 days is a typo).
MAX_DURATION_S = 7 * 24 * 3600.0


def is_duration_text(value: Any) -> bool:
    """True for a string shaped like a duration (``10s``, ``500ms``, ``2m``)."""
    return isinstance(value, str) and _DURATION_RE.match(value) is not None


def parse_duration(value: Any) -> float:
    """Parse a scenario duration into float seconds (SPEC §16.4).

    Args:
        value: a non-negative int/float of seconds, or a string ``"<N>s"``, ``"<N>ms"`` or
            ``"<N>m"`` where N is a decimal number (``"10s"``, ``"500ms"``, ``"1.5s"``, ``"2m"``).

    Returns:
        The duration in seconds, e.g. ``parse_duration("500ms") == 0.5``.

    Raises:
        ValueError: a negative or non-finite number, a bool, a string without a known unit, or
            any other type.
    """
    if isinstance(value, bool):
        raise ValueError(f"bad duration {value!r}: a boolean is not a duration")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError(f"bad duration {value!r}: too large") from None
        if not math.isfinite(seconds):
            raise ValueError(f"bad duration {value!r}: not a finite number")
        if seconds < 0:
            raise ValueError(f"bad duration {value!r}: must be >= 0")
        return seconds
    if isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m:
            seconds = float(m["num"]) * _UNIT_SECONDS[m["unit"]]
            if math.isfinite(seconds):
                return seconds
        raise ValueError(
            f"bad duration {value!r}: expected a number of seconds or a string like "
            "'10s', '500ms', '2m'"
        )
    raise ValueError(f"bad duration {value!r}: expected a number or a string like '10s'")
