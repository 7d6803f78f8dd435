"""docs/SCENARIOS.md lists every ``must_observe`` observable with what it means and the history
records it matches (issue 27 item 11: `refusal` is the store's write refusal, not a refused
maintenance command, and no page said so)."""

from __future__ import annotations

import re
from pathlib import Path

from chaos.history import SAMPLED_STATES
from chaos.scenario.schema import EVENT_KINDS, SCHEMA

DOC = Path(__file__).resolve().parents[1] / "docs" / "SCENARIOS.md"


def _rows() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Observables (`must_observe`)"):]
    section = section[:section.index("\n## ")]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([a-z_]+)` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def test_every_observable_the_schema_accepts_is_documented_with_what_it_matches():
    enum = SCHEMA["properties"]["must_observe"]["items"]["enum"]
    rows = _rows()
    for name in list(EVENT_KINDS) + list(SAMPLED_STATES):
        assert name in enum
        assert name in rows, f"{name} is not in docs/SCENARIOS.md, Observables"
        kind = "sample" if name in SAMPLED_STATES else f"event: {name}"
        assert kind in rows[name], rows[name]
    assert "any fault name" in DOC.read_text(encoding="utf-8")


def test_refusal_is_documented_as_the_stores_write_refusal():
    row = _rows()["refusal"]
    assert "the store's write refusal" in row and "is **not** one" in row
    assert "maintenance command" in row
