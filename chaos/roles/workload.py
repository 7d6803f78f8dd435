"""Deterministic workload generation from the role's seeded RNG (SPEC §16.1, §16.5).

Every role draws its choices (message roles, texts, CJK or Latin, tool calls, burst timing, search
terms) from ``ctx.rng``, seeded with ``f"{seed}:{process}"``: the same seed replays the same
workload (OS scheduling aside). Every appended message carries its payload id at the start of its
content (``[gateway-0-17] ...``) and in ``platform_message_id`` so checkers find it.
"""

from __future__ import annotations

import random

from ..params import param


def message_bytes(default: int):
    """The ``message_bytes`` parameter of a writing role (its default differs per role)."""
    return param(default, "Size of each message's content (characters).", minimum=1,
                 maximum=1_000_000)


def share(default: float, description: str):
    """A probability parameter in [0, 1]."""
    return param(default, description, minimum=0, maximum=1)


def cjk_share(default: float = 0.0):
    """The ``cjk_share`` parameter of a writing role."""
    return share(default, "Share of messages written in CJK (Han, Kana, Hangul) words.")


def tool_call_share(default: float):
    """The ``tool_call_share`` parameter of a writing role."""
    return share(default, "Share of assistant messages carrying 1-3 tool calls.")


def rate(default: float, description: str):
    """An ``appends_per_s`` parameter (0 = as fast as possible)."""
    return param(default, description, minimum=0)

_WORDS = ("deploy docker build session gateway agent memory search index commit checkpoint "
          "retry lock writer reader profile cron desktop token usage title lineage split "
          "compression message tool result error log fix test python sqlite wal frame").split()

#: CJK words (Han, Kana, Hangul) so search routing to the CJK/trigram indexes is exercised (§6.3).
_CJK_WORDS = ("记忆断裂 聊天记录 问题复现 通信协议 数据库 检查点 会话 写入 锁 日志 東京 世界 "
              "こんにちは ありがとう 検索 안녕 세션 데이터").split()

_TOOLS = ("terminal", "read_file", "web_search")


def message_text(rng: random.Random, payload_id: str, size: int, cjk_share: float = 0.0) -> str:
    """``[payload_id] word word ...`` of about ``size`` characters.

    Args:
        rng: the role's RNG; ``payload_id``: run-unique id put first in the text.
        size: target length in characters (the text is at least the bracketed id).
        cjk_share: probability (0..1) that this message is written in CJK words instead of Latin.
    Returns:
        The content string.
    """
    words = _CJK_WORDS if cjk_share > 0 and rng.random() < cjk_share else _WORDS
    parts = [f"[{payload_id}]"]
    length = len(parts[0])
    while length < size:
        w = rng.choice(words)
        parts.append(w)
        length += len(w) + 1
    return " ".join(parts)


def tool_calls(rng: random.Random, n: int) -> list[dict]:
    """``n`` OpenAI-style tool calls with deterministic ids."""
    return [{"id": f"call_{rng.getrandbits(32):08x}", "type": "function",
             "function": {"name": rng.choice(_TOOLS), "arguments": "{}"}} for _ in range(n)]


def make_message(rng: random.Random, payload_id: str, role: str, workload) -> dict:
    """The ``append_message`` keyword arguments of one message (SPEC §5).

    Args:
        rng: the role's RNG.
        payload_id: stored in ``platform_message_id`` and at the start of the content.
        role: ``user``, ``assistant`` or ``tool``.
        workload: the role's params: ``message_bytes``, ``cjk_share`` and ``tool_call_share``
            (the probability that an assistant message carries 1-3 tool calls).
    Returns:
        ``{"role", "content", "platform_message_id"[, "tool_calls"][, "tool_name"]}``.
    """
    msg = {"role": role,
           "content": message_text(rng, payload_id, workload.message_bytes, workload.cjk_share),
           "platform_message_id": payload_id}
    if role == "assistant" and rng.random() < workload.tool_call_share:
        msg["tool_calls"] = tool_calls(rng, rng.randint(1, 3))
    if role == "tool":
        msg["tool_name"] = rng.choice(_TOOLS)
    return msg


def search_query(rng: random.Random, cjk_share: float = 0.0) -> str:
    """One search query: a word the generator uses (CJK with probability ``cjk_share``)."""
    words = _CJK_WORDS if cjk_share > 0 and rng.random() < cjk_share else _WORDS
    return rng.choice(words)


class Pacer:
    """Paces appends at ``rate`` per second with optional bursts (SPEC §16.1 "rates, bursts").

    Every ``burst_every`` seconds (0 = never) the next ``burst_size`` appends go back to back,
    ignoring the rate; otherwise appends are spaced ``1/rate`` s apart (rate 0 = as fast as
    possible). :meth:`delay` returns how long to sleep before the next append (seconds).
    """

    def __init__(self, now: float, rate: float, burst_size: int = 0, burst_every: float = 0.0):
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.next_at = now
        self.burst_size = max(0, burst_size)
        self.burst_every = burst_every
        self.next_burst = now + burst_every if burst_every > 0 and burst_size > 0 else None
        self.in_burst = 0

    def delay(self, now: float) -> float:
        """Seconds to wait before the next append (0 = now); also counts bursts down."""
        if self.next_burst is not None and now >= self.next_burst:
            self.in_burst = self.burst_size
            self.next_burst = now + self.burst_every
        if self.in_burst > 0:
            self.in_burst -= 1
            self.next_at = now
            return 0.0
        if not self.interval:
            return 0.0
        self.next_at += self.interval
        wait = self.next_at - now
        if wait < 0:
            self.next_at = now
            return 0.0
        return wait
