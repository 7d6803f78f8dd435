"""The README's scenario reference, generated from the declarations (SPEC §16.4).

One table per role kind, fault and checker: parameter, default, description (the same
declarations the JSON Schema and the validation come from). ``python -m chaos.scenario
--write-schema`` rewrites the block between :data:`BEGIN` and :data:`END` in ``README.md``;
a test keeps it equal to :func:`reference_markdown`.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..checkers import CHECKERS
from ..nemesis import FAULTS
from ..params import reference_rows
from ..roles import ROLES

BEGIN = "<!-- scenario-reference -->"
END = "<!-- /scenario-reference -->"
README = Path(__file__).resolve().parent.parent.parent / "README.md"


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
    lines = ["#### Role workloads (`roles[].workload`, by `kind`)", ""]
    for kind, role in ROLES.items():
        lines += _table(f"`{kind}`", role.summary, role.Params)
    lines += ["#### Faults (`nemesis[]`, by `fault`; each step also takes `at` or `after`)", ""]
    for name, fault in FAULTS.items():
        lines += _table(f"`{name}`", fault.summary, fault.Params)
    lines += ["#### Checkers (`expect`, by name)", ""]
    for name, checker in CHECKERS.items():
        lines += _table(f"`{name}`", checker.summary, checker.Params)
    return "\n".join(lines).rstrip() + "\n"


def readme_block(text: str) -> str | None:
    """The generated block of a README text, or None when it has no markers."""
    m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return m.group(1) if m else None


def write_readme(path: Path = README) -> bool:
    """Rewrite the reference block of ``README.md``; True when it changed.

    Raises:
        ValueError: the README has no reference markers.
    """
    text = path.read_text(encoding="utf-8")
    if readme_block(text) is None:
        raise ValueError(f"{path}: no {BEGIN} ... {END} block")
    new = re.sub(re.escape(BEGIN) + r"\n.*?" + re.escape(END),
                 lambda m: f"{BEGIN}\n{reference_markdown()}{END}", text, flags=re.S)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
