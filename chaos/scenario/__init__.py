"""Scenario files (SPEC §16.4): one typed model, its generated JSON Schema, validation with
``file:line: field: problem``, and the resolved :class:`Scenario` the run executes.

A scenario (YAML) names **roles** (processes running a workload against the store), a
**nemesis** schedule (faults) and the **checkers** to run (``expect``). Every parameter is
declared once, in the module that uses it (:mod:`chaos.params`); this package assembles them:

* :mod:`.schema` -- the published JSON Schema, generated from the declarations;
* :mod:`.loading` -- bounded file reading, YAML with line numbers;
* :mod:`.problems` -- problems and their wording;
* :mod:`.rules`, :mod:`.timing` -- the rules the schema cannot express (references, times,
  paths that must stay inside the run);
* :mod:`.model` -- the typed, resolved :class:`Scenario`;
* :mod:`.validate` -- the pipeline and :func:`load_scenario`.

Regenerate the published schema and the README's reference after changing a declaration::

    python -m chaos.scenario --write-schema
"""

from ..history import SAMPLED_STATES
from ..params import parse_duration
from .model import NemesisStep, RoleSpec, Scenario
from .problems import Problem, ScenarioError
from .schema import (
    AFTER_OUTCOMES,
    EVENT_KINDS,
    ROLE_KINDS,
    SCHEMA,
    SCHEMA_PATH,
    schema_json,
)
from .schema import (
    CHECKER_NAMES as CHECKERS,
)
from .schema import (
    FAULT_NAMES as FAULTS,
)
from .validate import load_scenario, load_scenario_text, validate_text

__all__ = ["AFTER_OUTCOMES", "CHECKERS", "EVENT_KINDS", "FAULTS", "NemesisStep", "Problem",
           "ROLE_KINDS", "RoleSpec", "SAMPLED_STATES", "SCHEMA", "SCHEMA_PATH", "Scenario",
           "ScenarioError", "load_scenario", "load_scenario_text", "parse_duration",
           "schema_json", "validate_text"]
