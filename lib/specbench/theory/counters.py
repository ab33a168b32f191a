"""The speculative-decoding counters as values, and the rates defined on them once.

:class:`SpecCounters` holds the four cumulative counters of vLLM's spec-decode metrics;
subtracting two gives the delta over a timed call, and the derived rates are defined as vLLM
defines them (``vllm/v1/spec_decode/metrics.py``):

* acceptance rate α = accepted tokens / draft tokens;
* mean acceptance length = 1 + accepted tokens / drafts (a *draft* is one verification step
  that proposed something: an n-gram proposer that finds no match drafts nothing); it includes
  the bonus token, as vLLM's does;
* tokens emitted per decode step (the *exact divisor* of eq. 1, ``emitted_per_step``) =
  decoded tokens / decode steps, with
  decode steps = max(drafts, decoded − accepted): every step emits one token plus its accepted
  drafts. It needs the decoded-token count, so it lives on :class:`DecodeTally`.

**Zero-draft convention** (one, used everywhere): when nothing was drafted, α = 0 and the mean
acceptance length is 1. A step that drafted nothing emits exactly one token, which is what eq. 1
says of a step with α = 0 — so αγ+1 stays "tokens per cycle" and eq. 1 stays defined. A table
that needs to tell "no draft" from "drafts all rejected" reads ``draft_tokens == 0``.

Pure values: the engine's readers (:mod:`specbench.engine.counters`) build them from a live
engine, the derived tables and the report from stored counts.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SpecCounters", "DecodeTally", "accepted_lengths"]


@dataclass(frozen=True)
class SpecCounters:
    """Cumulative spec-decode counters, summed over engines. ``drafts`` is None for a V0
    capture without ``num_speculative_tokens`` (V0 counted no drafts)."""
    drafts: int | None
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...] = ()

    def __sub__(self, earlier: "SpecCounters") -> "SpecCounters":
        """The counts between ``earlier`` and this snapshot."""
        if not isinstance(earlier, SpecCounters):
            return NotImplemented
        width = max(len(self.accepted_per_pos), len(earlier.accepted_per_pos))
        pad = lambda t: tuple(t) + (0,) * (width - len(t))  # noqa: E731
        drafts = (None if self.drafts is None or earlier.drafts is None
                  else self.drafts - earlier.drafts)
        delta = SpecCounters(
            drafts, self.draft_tokens - earlier.draft_tokens,
            self.accepted_tokens - earlier.accepted_tokens,
            tuple(a - b for a, b in zip(pad(self.accepted_per_pos), pad(earlier.accepted_per_pos),
                                        strict=True)))
        if min(delta.draft_tokens, delta.accepted_tokens, delta.drafts or 0) < 0:
            raise ValueError(f"counters went backwards (engine restarted?): {earlier} -> {self}")
        return delta

    @property
    def acceptance_rate(self) -> float:
        """α = accepted / draft tokens; 0 when nothing was drafted (the zero-draft convention)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    alpha = acceptance_rate

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts, bonus token included (tokens per verification step that had a
        draft); 1 when nothing was drafted (the zero-draft convention)."""
        if self.drafts is None:
            raise ValueError("mean acceptance length needs the drafts count, which this "
                             "V0 capture lacks: pass num_speculative_tokens")
        return 1 + self.accepted_tokens / self.drafts if self.drafts else 1.0

    def as_row(self, prefix: str = "") -> dict:
        """Flat columns for a tidy table (per-position counts joined by ';')."""
        return {f"{prefix}drafts": self.drafts, f"{prefix}draft_tokens": self.draft_tokens,
                f"{prefix}accepted_tokens": self.accepted_tokens,
                f"{prefix}accepted_per_pos": ";".join(map(str, self.accepted_per_pos))}


@dataclass(frozen=True)
class DecodeTally:
    """Counter deltas over a decode plus the tokens it decoded (outputs minus the one token
    each request's prefill emits): enough for the exact divisor, still without any timing."""
    counters: SpecCounters
    decoded_tokens: int

    def __post_init__(self):
        if self.decoded_tokens < 0:
            raise ValueError(f"decoded_tokens must be >= 0, got {self.decoded_tokens}")

    @property
    def alpha(self) -> float:
        return self.counters.acceptance_rate

    @property
    def mean_acceptance_length(self) -> float:
        return self.counters.mean_acceptance_length

    @property
    def decode_steps(self) -> int:
        """decoded − accepted (a step emits one token plus its accepted drafts). vLLM counts
        the drafts accepted in a request's last step even when max_tokens cuts them off, so
        that can fall below the number of drafting steps; every drafting step is a step."""
        return max(self.counters.drafts or 0, self.decoded_tokens - self.counters.accepted_tokens)

    @property
    def emitted_per_step(self) -> float:
        """The exact divisor, *measured*: decoded tokens per decode step (1 with no draft);
        NaN with no step at all. Named apart from ``economics.tokens_per_step``, the
        worksheet's *modelled* expectation (1−α^(k+1))/(1−α)."""
        steps = self.decode_steps
        return self.decoded_tokens / steps if steps else float("nan")


def accepted_lengths(gamma: int, drafts: int, accepted_per_pos):
    """Drafts by accepted length L = 0…γ, from the number of drafts and vLLM's per-position
    accepted counts (``accepted_per_pos``: a sequence, or the stored ``"a;b;c"`` text): a draft
    accepting position i accepted every position before it, so the count at L is the drafts
    accepting ≥ L minus those accepting ≥ L + 1."""
    import numpy as np
    if isinstance(accepted_per_pos, str):
        accepted_per_pos = [x for x in accepted_per_pos.split(";") if x.strip()]
    per_pos = [int(float(x)) for x in accepted_per_pos]
    per_pos = (per_pos + [0] * gamma)[:gamma]
    at_least = [int(drafts)] + per_pos + [0]     # drafts accepting ≥ 0, ≥ 1, …, > γ
    return np.array([at_least[i] - at_least[i + 1] for i in range(gamma + 1)], dtype=float)
