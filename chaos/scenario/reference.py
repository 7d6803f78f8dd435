"""The scenario reference (``docs/SCENARIO_REFERENCE.md``), generated from the declarations
(SPEC §16.4).

One table per role kind, fault and checker: parameter, default, description (the same
declarations the JSON Schema and the validation come from). ``python -m chaos.scenario
--write-schema`` rewrites the file; a test keeps it equal to :func:`reference_document`.
"""

from __future__ import annotations

from pathlib import Path

from ..checkers import CHECKERS
from ..nemesis import FAULTS
from ..params import reference_rows
from ..roles import ROLES

REFERENCE = Path(__file__).resolve().parent.parent.parent / "docs" / "SCENARIO_REFERENCE.md"
HEADER = """# Scenario reference

Generated from the declarations by `python -m chaos.scenario --write-schema` (never edit by hand;
`tests/test_scenario.py` keeps it equal to them). How to write a scenario, with worked examples:
[SCENARIOS.md](SCENARIOS.md); the toolkit's guide: [TOOLKIT.md](TOOLKIT.md).
"""


def _table(title: str, summary: str, cls: type) -> list[str]:
    rows = reference_rows(cls)
    out = [f"**{title}**: {summary}", ""]
    if not rows:
        return out + ["(no parameters)", ""]
    out += ["| parameter | default | what |", "|---|---|---|"]
    out += [f"| `{name}` | `{default}` | {what.replace('|', '/')} |"
            for name, default, what in rows]
    return out + [""]


def reference_markdown() -> str:
    """The scenario reference as Markdown (role workloads, faults, checkers)."""
    lines = ["## Role workloads (`roles[].workload`, by `kind`)", ""]
    for kind, role in ROLES.items():
        lines += _table(f"`{kind}`", role.summary, role.Params)
    lines += ["## Faults (`nemesis[]`, by `fault`; each step also takes `at` or `after`)", ""]
    for name, fault in FAULTS.items():
        lines += _table(f"`{name}`", fault.summary, fault.Params)
    lines += ["## Checkers (`expect`, by name)", ""]
    for name, checker in CHECKERS.items():
        lines += _table(f"`{name}`", checker.summary, checker.Params)
    return "\n".join(lines).rstrip() + "\n"


def reference_document() -> str:
    """The whole of ``docs/SCENARIO_REFERENCE.md``: a header, then :func:`reference_markdown`."""
    return (f"{HEADER}\n" + reference_markdown())


def write_reference(path: Path = REFERENCE) -> bool:
    """Rewrite ``docs/SCENARIO_REFERENCE.md`` from the declarations; True when it changed."""
    new = reference_document()
    old = path.read_text(encoding="utf-8") if path.exists() else None
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old
