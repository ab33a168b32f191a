"""The decode window of a batched call: the span in which all of its requests decode together.

A batch-N call's requests finish prefill at different times. Timed from its own first to last
token, a request that finished prefill early decodes while the others still prefill, and those
steps are slow: its per-token latency then carries other requests' prefill. The decode window
removes that: it runs from the step in which the *last* request emitted its first token to the
step in which the *first* request emitted its last token. Every step inside it is a pure decode
step of all N requests.

Inside the window, request *j* emitted ``tokens[j]`` tokens over ``steps`` engine steps, so its
per-output-token latency is ``seconds / tokens[j]`` and its tokens per step (the divisor of the
model, at batch N) is ``tokens[j] / steps`` — counts of the engine's own steps and tokens, never
timing. ``overlap_s`` is the decode time the window leaves out (the earliest request's head
start). At batch 1 the window is the request's own first-to-last-token span, the definition
used everywhere before batch-N windows existed.

The timeline comes from the engine adapter: one entry per engine step, the time it returned and
each request's cumulative output tokens (:class:`specbench.engine.vllm_engine.Generation`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DecodeWindow", "decode_window"]


@dataclass(frozen=True)
class DecodeWindow:
    start_s: float            # the last request's first token (seconds since the call began)
    end_s: float              # the first request's last token
    tokens: tuple[int, ...]   # per request, tokens emitted inside the window
    steps: int                # engine steps inside the window
    overlap_s: float          # decode time before the window: the earliest request's head start

    @property
    def seconds(self) -> float:
        return max(0.0, self.end_s - self.start_s)

    @property
    def empty(self) -> bool:
        """No step in which every request decoded (one finished before another's first token)."""
        return self.steps == 0

    def pot_s(self) -> list[float]:
        """Per-output-token latency of each request inside the window."""
        return [self.seconds / k if k > 0 and not self.empty else math.nan for k in self.tokens]

    def tokens_per_step(self) -> list[float]:
        return [k / self.steps if self.steps else math.nan for k in self.tokens]

    def as_row(self) -> dict:
        return {"window_s": self.seconds, "window_tokens": list(self.tokens),
                "window_steps": self.steps, "overlap_s": self.overlap_s}


def decode_window(times: list[float], counts: list[list[int]]) -> DecodeWindow:
    """The decode window of one call from its step timeline: ``times[i]`` is when engine step
    *i* returned (seconds since the call began), ``counts[i][j]`` request *j*'s cumulative
    output tokens after it."""
    if not times or len(times) != len(counts):
        raise ValueError("a step timeline needs one count row per step time")
    n = len(counts[0])
    final = counts[-1]
    first = [next(i for i, row in enumerate(counts) if row[j] >= 1) for j in range(n)]
    last = [next(i for i, row in enumerate(counts) if row[j] >= final[j]) for j in range(n)]
    i0, i1 = max(first), min(last)
    overlap = times[i0] - times[min(first)]
    if i1 <= i0:
        return DecodeWindow(times[i0], times[i0], (0,) * n, 0, overlap)
    tokens = tuple(counts[i1][j] - counts[i0][j] for j in range(n))
    return DecodeWindow(times[i0], times[i1], tokens, i1 - i0, overlap)
