"""Validate and load a scenario: YAML -> one normalisation (:mod:`.normalise`) -> structure (the
generated JSON Schema) -> rules -> the typed :class:`~chaos.scenario.model.Scenario` (SPEC §16.4).

Every problem is reported, not only the first, sorted by line; a file with any problem raises
:class:`~chaos.scenario.problems.ScenarioError` (``python -m chaos`` exits 2 and nothing runs).
What passes here is what :mod:`chaos.runner` executes: both read the same typed model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import loading
from .loading import MAX_EXPANDED_NODES, FileProblem, Loader, line_of
from .model import Scenario, build
from .normalise import normalise
from .problems import (
    ROOT,
    Problem,
    ScenarioError,
    field_of,
    schema_problems,
    sorted_problems,
)
from .rules import (
    expect_rules,
    name_rules,
    path_rules,
    role_rules,
    step_rules,
    store_rules,
)
from .schema import SCHEMA
from .timing import (
    after_rules,
    duration_rules,
    failpoint_rules,
    phases_rules,
    schedule_rules,
    sweep_rules,
)

_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
#: The rule families run after the structure, in order (each tolerates any structure).
RULES = (name_rules, schedule_rules, role_rules, step_rules, expect_rules, store_rules, phases_rules, after_rules,
         failpoint_rules, sweep_rules, duration_rules, path_rules)


def load_scenario(path: str | Path) -> Scenario:
    """Read, validate and resolve a scenario file (SPEC §16.4).

    Returns:
        The resolved :class:`Scenario` (``source`` = ``str(path)``).

    Raises:
        ScenarioError: the file cannot be read, is not a regular file (FIFO, device...), is too
            large or not UTF-8, has a YAML syntax error (with its line), or has any structural or
            semantic problem: all of them are reported.
    """
    source = str(path)
    try:
        text = loading.read_text(path)
    except FileProblem as e:
        raise ScenarioError([Problem(source, e.line, "(file)", str(e))]) from None
    return load_scenario_text(text, source)


def load_scenario_text(text: str, source: str = "<string>") -> Scenario:
    """Validate and resolve a scenario given as YAML text (SPEC §16.4).

    Raises:
        ScenarioError: with every problem found (YAML syntax, schema, rules), sorted by line.
    """
    problems, data, root = validate(text, source)
    if problems:
        raise ScenarioError(problems)
    return build(data, root, source)


def validate_text(text: str, source: str = "<string>") -> list[Problem]:
    """Every problem of a scenario given as YAML text (empty list: valid); never raises for
    bad input."""
    return validate(text, source)[0]


def _parse(text: str, source: str, emit) -> tuple[Any, yaml.Node | None, list[Problem] | None]:
    """YAML text -> ``(data, root node, None)``, or ``(None, root, [problem])`` when there is
    nothing to validate."""
    loader = None
    try:
        try:
            loader = Loader(text)
            root = loader.get_single_node()
        except (yaml.YAMLError, RecursionError) as e:
            line = loading.yaml_error_line(e, text)
            msg = ("YAML nesting too deep" if isinstance(e, RecursionError)
                   else loading.yaml_error_message(e))
            return None, None, [Problem(source, line, "(yaml)", msg)]
        if root is None:
            msg = "the document is empty: expected a mapping with " + ", ".join(SCHEMA["required"])
            return None, None, [Problem(source, 1, ROOT, msg)]
        if loading.expanded_size(root) > MAX_EXPANDED_NODES:
            msg = (f"the document expands to more than {MAX_EXPANDED_NODES} nodes through YAML "
                   "aliases (an alias bomb?); write the values out")
            return None, root, [Problem(source, line_of(root, []), ROOT, msg)]
        loading.scan_nodes(root, emit)
        try:
            return loader.construct_document(root), root, None
        except Exception as e:  # noqa: BLE001 - PyYAML constructors raise assorted errors
            line = loading.yaml_error_line(e, text)
            return None, root, [Problem(source, line, "(yaml)", loading.yaml_error_message(e))]
    finally:
        if loader is not None:
            loader.dispose()


def validate(text: str, source: str) -> tuple[list[Problem], Any, yaml.Node | None]:
    """``(problems, data, root node)`` of a scenario text: YAML, then the structure (JSON
    Schema), then :data:`RULES`."""
    problems: list[Problem] = []
    root: yaml.Node | None = None

    def emit(path: list, line: int | None, message: str) -> None:
        problems.append(Problem(source, line, field_of(path), message))

    def emit_at(path: list, message: str, key: bool = False) -> None:
        emit(path, line_of(root, path, key), message)

    if not isinstance(text, str):
        return [Problem(source, None, "(file)", f"expected text, got {type(text).__name__}")], \
            None, None
    data, root, fatal = _parse(text, source, emit)
    if fatal is not None:
        return sorted_problems(problems + fatal), None, root
    loading.sanitize(data, emit_at)
    data = normalise(data, emit_at)  # what the schema, the rules and the model read
    try:
        for err in _VALIDATOR.iter_errors(data):
            for path, line, message, at_key in schema_problems(err):
                emit(path, line if line is not None else line_of(root, path, at_key), message)
        for rule in RULES:
            rule(data, emit_at)
    except RecursionError:
        emit([], line_of(root, []), "the document is nested too deeply or is recursive (aliases)")
    return sorted_problems(problems), data, root
