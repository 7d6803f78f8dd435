"""``python -m chaos.scenario [--write-schema | FILE...]``: print or write the generated schema
(and docs/SCENARIO_REFERENCE.md), or validate files (exit 2 on any problem)."""

from __future__ import annotations

import sys

from .problems import ScenarioError
from .reference import REFERENCE, write_reference
from .schema import SCHEMA_PATH, schema_json
from .validate import load_scenario


def main(argv: list[str]) -> int:
    """Returns 0, or 2 when a file is invalid."""
    if argv == ["--write-schema"]:
        SCHEMA_PATH.write_text(schema_json(), encoding="utf-8")
        print(f"wrote {SCHEMA_PATH}")
        if write_reference():
            print(f"rewrote {REFERENCE}")
        return 0
    if not argv:
        sys.stdout.write(schema_json())
        return 0
    rc = 0
    for f in argv:
        try:
            load_scenario(f)
            print(f"{f}: ok")
        except ScenarioError as e:
            print(e, file=sys.stderr)
            rc = 2
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
