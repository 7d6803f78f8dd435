"""Validation problems of a scenario file and their wording (SPEC §16.4).

Every problem is ``file:line: field: problem``: the file, the 1-based line of the offending YAML
node, the dotted field path (``roles[1].kind``) and what is wrong and what is allowed. A JSON
Schema error (:mod:`jsonschema`) is translated here into that wording.
"""

from __future__ import annotations

import difflib
import re
import reprlib
from typing import Any, Iterable, NamedTuple

import jsonschema

from .schema import CHECKER_NAMES

ROOT = "(root)"


class Problem(NamedTuple):
    """One validation problem of a scenario file (SPEC §16.4).

    Attributes:
        file: the scenario file (or the ``source`` given to :func:`load_scenario_text`).
        line: 1-based line of the offending YAML node, ``None`` when unknown (unreadable file).
        field: dotted field path such as ``roles[1].kind``; ``(root)``, ``(yaml)`` or ``(file)``
            for problems of the whole document, its syntax or the file itself.
        message: what is wrong and what is allowed.
    """

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.field}: {self.message}"


class ScenarioError(Exception):
    """A scenario file is invalid (SPEC §16.4; ``python -m chaos`` exits 2).

    Attributes:
        problems: every problem found, sorted by line; ``str(error)`` is one per line.
    """

    def __init__(self, problems: Iterable[Problem]):
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


def field_of(path: Iterable[Any]) -> str:
    """``["roles", 1, "kind"]`` -> ``roles[1].kind`` (``(root)`` for the empty path)."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or ROOT


def sorted_problems(problems: list[Problem]) -> list[Problem]:
    """Deduplicate; sort by line, then by field (``roles[2]`` before ``roles[10]``)."""

    def key(p: Problem) -> tuple:
        parts = re.split(r"(\d+)", p.field)
        natural = tuple((0, int(x), "") if x.isdecimal() and x.isascii() else (1, 0, x)
                        for x in parts)
        return (p.line if p.line is not None else 0, natural)

    return sorted(dict.fromkeys(problems), key=key)


_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "object": "a mapping",
    "array": "a list",
    "boolean": "true or false",
    "null": "null",
}
_UNKNOWN_KEY_NOUN = {"expect": "checker"}
_PLAIN_TITLES = {"chaos scenario", "role", "nemesis step"}


#: Keys that belong one level down in a nemesis step: ``{key: the hint}`` (issue 16 item 5).
_STEP_MISPLACED = {
    "delay": " - `delay` belongs inside `after:` (it waits that long after the trigger), e.g. "
             "`after: {role: gateway, ok: 60, delay: 1s}`; for a fixed time use `at: 2s`",
}


def _flow(value: Any) -> str:
    """``value`` as YAML flow text, as the user would write it (``{role: gateway, ok: 60}``)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return short(value) if not isinstance(value, (str, int, float)) or isinstance(value, bool) \
        else str(value)


def _misplaced(key: Any, title: str | None, step: Any = None) -> str:
    """The hint for a key written at the step level that belongs inside ``after:``: the
    step's own ``after:`` with the key moved in when the step has one."""
    if not (isinstance(key, str) and key in _STEP_MISPLACED and (title or "").endswith("step")):
        return ""
    if isinstance(step, dict) and isinstance(step.get("after"), dict) and key not in step["after"]:
        moved = {**step["after"], key: step[key]}
        return (f" - `{key}` belongs inside `after:` (it waits that long after the trigger): "
                f"write `after: {_flow(moved)}`")
    if isinstance(step, dict) and "at" in step and key == "delay":
        return (f" - `delay` goes inside `after:` (it waits that long after the trigger); with "
                f"`at: {_flow(step['at'])}` add the delay to the time instead")
    return _STEP_MISPLACED[key]


def hint(value: Any, options: Iterable[Any]) -> str:
    """`` - did you mean 'x'?`` for a near miss among ``options``, else ``""``."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [o for o in options if isinstance(o, str)], n=1)
    return f" - did you mean {close[0]!r}?" if close else ""


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlevel = 60, 60, 2
_REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxtuple = 4


def short(value: Any) -> str:
    """A bounded repr: YAML aliases can build huge shared structures."""
    try:
        r = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a repr of untrusted YAML data must never break reporting
        r = f"<{type(value).__name__}>"
    return r if len(r) <= 80 else r[:77] + "..."


def _kind_of(value: Any) -> str:
    if value is None:
        return "an empty value (null)"
    if isinstance(value, bool):
        return f"boolean {value!r}"
    if isinstance(value, int):
        return f"integer {short(value)}"
    if isinstance(value, float):
        return f"number {short(value)}"
    if isinstance(value, str):
        return f"string {short(value)}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {short(value)}"


def schema_problems(err: jsonschema.ValidationError) -> list[tuple[list, int | None, str, bool]]:
    """Translate one jsonschema error into ``(path, line_override, message, at_key)`` items."""
    path = list(err.absolute_path)
    v, inst = err.validator, err.instance
    schema = err.schema if isinstance(err.schema, dict) else {}
    title = schema.get("title")
    if v == "additionalProperties" and isinstance(inst, dict):
        allowed = list(schema.get("properties", {}))
        noun = _UNKNOWN_KEY_NOUN.get(title, "key")
        where = f" in {title}" if title and noun == "key" and title not in _PLAIN_TITLES else ""
        allowed_s = ", ".join(allowed) if allowed else "none"
        return [
            (
                path + [k],
                None,
                f"unknown {noun} {k!r}{where} (allowed: {allowed_s})"
                f"{_misplaced(k, title, inst) or hint(k, allowed)}",
                True,
            )
            for k in inst
            if k not in schema.get("properties", {})
        ]
    if v == "required" and isinstance(inst, dict):
        missing = [k for k in err.validator_value if k not in inst]
        return [(path + [k], None, f"missing required key {k!r}", False) for k in missing]
    if v == "anyOf" and title == "duration":
        msg = (
            f"bad duration {short(inst)}: expected a number of seconds >= 0 or a string like "
            "'10s', '500ms', '1.5s', '2m'"
        )
        return [(path, None, msg, False)]
    if v == "type":
        types = err.validator_value
        types = types if isinstance(types, list) else [types]
        want = " or ".join(_TYPE_NAMES.get(t, t) for t in types)
        msg = f"expected {want}, got {_kind_of(inst)}"
        if inst is None and "object" in types:
            msg += " (write {} for no parameters)"
        return [(path, None, msg, False)]
    if v == "enum":
        allowed = ", ".join(str(x) for x in err.validator_value)
        if title:
            near = hint(inst, err.validator_value)
            msg = f"unknown {title} {short(inst)} (allowed: {allowed}){near}"
            return [(path, None, msg, False)]
        return [(path, None, f"{short(inst)} is not one of: {allowed}", False)]
    if v == "pattern":
        if title == "name":
            msg = (
                f"bad name {short(inst)}: use lowercase letters, digits, '-' and '_', "
                "starting with a letter or digit"
            )
        elif err.validator_value == "\\S":
            msg = "must not be empty or blank"
        else:
            msg = f"{short(inst)} does not match {err.validator_value}"
        return [(path, None, msg, False)]
    if v == "minimum":
        return [(path, None, f"must be >= {err.validator_value}, got {short(inst)}", False)]
    if v == "maximum":
        return [(path, None, f"must be <= {err.validator_value}, got {short(inst)}", False)]
    if v == "maxLength" and isinstance(inst, str):
        n = err.validator_value
        return [(path, None, f"must be at most {n} characters, got {len(inst)}", False)]
    if v == "minItems":
        n = err.validator_value
        return [(path, None, f"must have at least {n} item{'s' if n != 1 else ''}", False)]
    if v == "minProperties":
        if title == "expect":
            msg = f"name at least one checker (allowed: {', '.join(CHECKER_NAMES)})"
        else:
            msg = f"must have at least {err.validator_value} key(s)"
        return [(path, None, msg, False)]
    if v == "uniqueItems" and isinstance(inst, list):
        dups = list(dict.fromkeys(short(x) for i, x in enumerate(inst) if x in inst[:i]))
        return [(path, None, f"items must be unique (repeated: {', '.join(dups)})", False)]
    return [(path, None, err.message, False)]
