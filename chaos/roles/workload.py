"""Deterministic message generation from the role's seeded RNG (SPEC §16.5: same seed, same run)."""

from __future__ import annotations

import random

_WORDS = ("deploy docker build session gateway agent memory search index commit checkpoint "
          "retry lock writer reader profile cron desktop token usage title lineage split "
          "compression message tool result error log fix test python sqlite wal frame").split()


def message_text(rng: random.Random, payload_id: str, size: int) -> str:
    """``[payload_id] word word ...`` of about ``size`` characters."""
    parts = [f"[{payload_id}]"]
    length = len(parts[0])
    while length < size:
        w = rng.choice(_WORDS)
        parts.append(w)
        length += len(w) + 1
    return " ".join(parts)


def tool_calls(rng: random.Random, n: int) -> list[dict]:
    """``n`` OpenAI-style tool calls with deterministic ids."""
    return [{"id": f"call_{rng.getrandbits(32):08x}", "type": "function",
             "function": {"name": rng.choice(("terminal", "read_file", "web_search")),
                          "arguments": "{}"}} for _ in range(n)]
