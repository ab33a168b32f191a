"""Words chosen from data, and guards for claims that must hold on any data.

A chapter's qualitative sentences come in two kinds, and this module serves both:

* **Computed wording** for anything a reader's own hardware can flip ("faster", "small",
  "host-dominated"): :func:`compare`, :func:`size_word`, :func:`regime` pick the word from the
  numbers against a threshold stated once, below. A re-run on another machine changes the word,
  never breaks the build.
* **Guards** for claims that must hold whatever the hardware — an identity, a limit, a
  definition ("every drafting step drafts γ tokens"): :func:`claim` raises
  :class:`ClaimError` naming the sentence when the data contradicts it, which fails the
  chapter's execution and so the book build.
"""
from __future__ import annotations

import math

__all__ = ["ClaimError", "claim", "across", "and_list", "compare", "size_word", "regime",
           "spread_pct", "SMALL_COST", "NOISE_FLOOR_PCT", "HOST_DOMINATED_SHARE",
           "MODEL_SIZE_INVARIANT_PCT", "CLOSE_ERRORS_PCT", "paired_verdict"]

# Thresholds, stated once. Each is a judgement, written here so a reader can disagree with it
# in one place and see every sentence that depends on it change.
#: A relative extra cost below this is "small" (the paper calls d ≤ 2.3 % "almost free").
SMALL_COST = 0.05
#: Below this a cost is "almost free"; above SMALL_COST it is "large" from LARGE_COST on.
ALMOST_FREE_COST = 0.025
LARGE_COST = 0.25
#: Two measured quantities differ only if they differ by more than their spreads allow; the
#: spread is never taken below this floor (percent), the rep-to-rep resolution of a timer.
NOISE_FLOOR_PCT = 1.0
#: A step is "host-dominated" when its host-exposed share exceeds this.
HOST_DOMINATED_SHARE = 0.5
#: A per-step term is "model-size invariant" when two model sizes differ by less than this (%).
#: The paper reports 4 % between a 1B and an 8B model.
MODEL_SIZE_INVARIANT_PCT = 10.0
#: Two models' errors are "about the same" when their MAPEs differ by less than this (points).
CLOSE_ERRORS_PCT = 3.0

COST_WORDS = ((ALMOST_FREE_COST, "almost free"), (SMALL_COST, "small"),
              (LARGE_COST, "moderate"), (math.inf, "large"))


class ClaimError(AssertionError):
    """The data contradicts a sentence of the book; the message quotes the sentence."""


def claim(condition, sentence: str, detail: str = "") -> str:
    """Return ``sentence`` when ``condition`` holds; raise :class:`ClaimError` naming it if not.

    For claims that must hold on any hardware (identities, limits, definitions). ``detail``
    says which numbers broke it.
    """
    if not bool(condition):
        raise ClaimError(f"the data contradicts the sentence {sentence!r}"
                         + (f": {detail}" if detail else ""))
    return sentence


def across(holds: dict[str, bool]) -> str:
    """Where a claim holds, over every SKU it was evaluated on: "on every SKU", "on no SKU",
    or "on k of n SKUs (not on A, B)" — the exceptions named, so one SKU that contradicts a
    general claim changes the sentence instead of hiding behind the others."""
    if not holds:
        raise ValueError("a claim over SKUs needs at least one SKU")
    yes = [s for s, ok in holds.items() if ok]
    no = [s for s, ok in holds.items() if not ok]
    if not no:
        return "on every SKU" if len(holds) > 1 else f"on {yes[0]}"
    if not yes:
        return "on no SKU" if len(holds) > 1 else f"not on {no[0]}"
    return f"on {len(yes)} of {len(holds)} SKUs (not on {', '.join(no)})"


def and_list(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def span(values, digits: int = 0) -> str:
    """'3' where every value reads the same at ``digits``, else 'low–high'; missing values are
    left out, and none at all reads '—'."""
    values = [x for x in (float(v) for v in values if v is not None) if not math.isnan(x)]
    if not values:
        return "—"
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}–{high}"


def spread_pct(low: float, high: float, centre: float) -> float:
    """Half the min–max range of the repetitions, in percent of the centre (the median)."""
    return 100.0 * (high - low) / 2.0 / centre


def compare(a: float, a_spread_pct: float, b: float, b_spread_pct: float,
            faster: bool = False) -> str:
    """Is ``a`` larger than ``b`` beyond their spreads (percent of each)?

    Returns "higher"/"lower"/"within noise", or with ``faster=True`` for latencies
    "slower"/"faster"/"within noise" (a larger latency is slower). The difference must exceed
    the sum of the two spreads, each floored at :data:`NOISE_FLOOR_PCT`.
    """
    allowed = (max(a_spread_pct, NOISE_FLOOR_PCT) * abs(a)
               + max(b_spread_pct, NOISE_FLOOR_PCT) * abs(b)) / 100.0
    if abs(a - b) <= allowed:
        return "within noise"
    if a > b:
        return "slower" if faster else "higher"
    return "faster" if faster else "lower"


def size_word(x: float, thresholds=COST_WORDS) -> str:
    """The first word whose upper bound exceeds ``x``: thresholds are (bound, word) pairs,
    increasing; the default grades a relative extra cost (0.03 → "small")."""
    if x != x:  # NaN
        raise ValueError("size_word needs a number, got NaN")
    for bound, word in thresholds:
        if x < bound:
            return word
    return thresholds[-1][1]


def regime(host_share: float) -> str:
    """Which cost dominates a decode step, from the measured host-exposed share."""
    if host_share != host_share:
        return "not measured (no host-floor run)"
    return "host-dominated" if host_share > HOST_DOMINATED_SHARE else "compute-dominated"


def paired_verdict(low: float, high: float) -> str:
    """Which of two predictions did better on the same cells, from the bootstrap interval of
    the mean difference of their absolute errors (first minus second;
    :func:`specbench.theory.errors.mape_difference`): "better" when the whole interval
    lies below zero, "worse" above it, "tie" when it spans zero or there is none."""
    if low != low or high != high:   # NaN: too few cells for an interval
        return "tie"
    if high < 0:
        return "better"
    if low > 0:
        return "worse"
    return "tie"
