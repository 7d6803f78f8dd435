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

import copy
import dataclasses
import functools
import json
import math
import re
import types
import typing
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


# ------------------------------------------------------------------------------ declarations
class Duration(float):
    """Type marker of a duration parameter: written ``10s``/``500ms``/``2m`` or seconds, read as
    float seconds (:func:`parse_duration`)."""


_REQUIRED = object()
_FIELD_KEY = "chaos.param"


def param(default: Any = _REQUIRED, description: str = "", **schema: Any) -> Any:
    """Declare one parameter of a params dataclass: default, one-line description and the
    JSON Schema keywords that bound it (``minimum``, ``maximum``, ``pattern``, ``enum``,
    ``minItems``, ``uniqueItems``, ``maxLength``, ``title``...).

    ``default`` omitted: the parameter is required. ``None``: optional, no default (absent
    from the resolved document). A list default is copied for every instance.
    """
    meta = {_FIELD_KEY: {"description": description, "schema": schema,
                         "required": default is _REQUIRED}}
    if default is _REQUIRED:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d),
                                 metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declared parameter: name, JSON Schema, default (``None``: none), required."""

    name: str
    schema: dict
    default: Any
    required: bool
    duration: bool

    @property
    def has_default(self) -> bool:
        return self.default is not None


def _type_schema(tp: Any) -> tuple[dict, bool]:
    """JSON Schema of a field type; ``(schema, is_duration)``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _type_schema(args[0])
    if tp is Duration:
        return {"$ref": DURATION_REF}, True
    if tp is bool:
        return {"type": "boolean"}, False
    if tp is int:
        return {"type": "integer"}, False
    if tp is float:
        return {"type": "number"}, False
    if tp is str:
        return {"type": "string"}, False
    if tp is dict:
        return {"type": "object"}, False
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(tp))}, False
    if origin in (list, tuple):
        (item,) = typing.get_args(tp)[:1]
        return {"type": "array", "items": _type_schema(item)[0]}, False
    raise TypeError(f"no JSON Schema for parameter type {tp!r}")


#: Where the duration definition lives in the published schema.
DURATION_REF = "#/$defs/duration"


@functools.lru_cache(maxsize=None)
def declared(cls: type) -> tuple[Declared, ...]:
    """The declared parameters of a params dataclass, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_FIELD_KEY, {"description": "", "schema": {}, "required": False})
        schema, is_dur = _type_schema(hints[f.name])
        extra = dict(meta["schema"])
        if "items" in extra and "items" in schema:
            schema["items"] = {**schema["items"], **extra.pop("items")}
        schema.update(extra)
        if meta["description"]:
            schema["description"] = meta["description"]
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        if default is not None:
            schema["default"] = list(default) if isinstance(default, tuple) else default
        out.append(Declared(f.name, schema, default, meta["required"], is_dur))
    return tuple(out)


def object_schema(cls: type, title: str | None = None) -> dict:
    """The JSON Schema object of a params dataclass: every declared parameter, unknown keys
    refused (``additionalProperties: false``); description = the class docstring's first
    paragraph."""
    out: dict = {}
    if title:
        out["title"] = title
    doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
    if doc:
        out["description"] = doc
    out.update({"type": "object", "additionalProperties": False,
                "properties": {d.name: d.schema for d in declared(cls)}})
    required = [d.name for d in declared(cls) if d.required]
    if required:
        out["required"] = required
    return out


def defaults(cls: type) -> dict:
    """``{name: default}`` of the parameters that have one (durations as float seconds)."""
    return {d.name: (parse_duration(d.default) if d.duration else copy.deepcopy(d.default))
            for d in declared(cls) if d.has_default}


def resolve(cls: type, given: dict | None) -> dict:
    """``given`` (valid for ``cls``'s schema) with every default filled, durations as float
    seconds; parameters without a default and not given are absent."""
    out = {}
    given = given or {}
    for d in declared(cls):
        if d.name in given and given[d.name] is not None:
            value = copy.deepcopy(given[d.name])
        elif d.has_default:
            value = copy.deepcopy(d.default)
        else:
            continue
        out[d.name] = parse_duration(value) if d.duration else value
    return out


def build(cls: type, given: dict | None = None):
    """An instance of the params dataclass ``cls`` from ``given`` (:func:`resolve` first)."""
    return cls(**resolve(cls, given))


def as_dict(params: Any) -> dict:
    """A params instance as the resolved JSON data (``None`` values left out)."""
    return {k: copy.deepcopy(v) for k, v in dataclasses.asdict(params).items() if v is not None}


def reference_rows(cls: type) -> list[tuple[str, str, str]]:
    """``(name, default, description)`` per parameter: the README's scenario reference."""
    rows = []
    for d in declared(cls):
        default = "required" if d.required else ("-" if not d.has_default else
                                                  json.dumps(d.default))
        rows.append((d.name, default, d.schema.get("description", "")))
    return rows
