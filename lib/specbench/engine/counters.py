"""vLLM's speculative-decoding counters, read from every form the engine exposes.

One value type, :class:`SpecCounters`, holds the four cumulative counters; subtracting two
gives the delta over a timed call, and the derived rates are defined once, as vLLM defines them
(``vllm/v1/spec_decode/metrics.py``):

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

Readers:

* :func:`from_vllm_metrics` — ``LLM.get_metrics()`` objects (V1 engine, offline; the whole
  process's registry, which holds only the newest engine's counters);
* :func:`from_prometheus_text` — a server's ``/metrics`` text, V1 names (``<name>_total``
  beside a ``<name>_created`` series) or the older V0 names; the offline engine adapter reads
  its own collectors through it too (:mod:`specbench.engine.vllm_engine`).

A metric that is absent is an error, not a zero: vLLM omits the spec-decode metrics entirely
when speculation is off or stats logging is disabled, and a zero would read as "nothing was
accepted".
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["SpecCounters", "DecodeTally", "MissingSpecMetrics", "CounterFormatError",
           "from_vllm_metrics", "from_prometheus_text"]

PREFIX = "vllm:spec_decode_"
DRAFTS = PREFIX + "num_drafts"
DRAFT_TOKENS = PREFIX + "num_draft_tokens"
ACCEPTED = PREFIX + "num_accepted_tokens"
PER_POS = PREFIX + "num_accepted_tokens_per_pos"
V0_EMITTED = PREFIX + "num_emitted_tokens"


class MissingSpecMetrics(LookupError):
    """The spec-decode metrics are absent: speculation is off or stats logging is disabled."""


class CounterFormatError(ValueError):
    """A counter capture that cannot be read (not the format, or a count that is not a
    whole number >= 0); the message names the source and the metric."""


def _count(value, metric: str, source: str) -> int:
    """A counter value as an int: a whole number >= 0, or a clear error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CounterFormatError(f"{source}: {metric} is {value!r}, not a count")
    if value != value or value in (float("inf"), float("-inf")) or value < 0 \
            or value != int(value):
        raise CounterFormatError(f"{source}: {metric} is {value!r}, not a whole number >= 0")
    return int(value)


def _missing(names: Iterable[str], source: str) -> MissingSpecMetrics:
    return MissingSpecMetrics(
        f"{source}: no {', '.join(sorted(names))} — speculative decoding is off, or stats "
        "logging is disabled (pass disable_log_stats=False to the engine)")


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
            tuple(a - b for a, b in zip(pad(self.accepted_per_pos), pad(earlier.accepted_per_pos))))
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


def _add_vectors(vectors: list[list[int]]) -> tuple[int, ...]:
    width = max((len(v) for v in vectors), default=0)
    return tuple(sum(v[i] for v in vectors if i < len(v)) for i in range(width))


def from_vllm_metrics(metrics) -> SpecCounters:
    """Read ``LLM.get_metrics()`` (``vllm.v1.metrics.reader`` Counter/Vector objects)."""
    source = "LLM.get_metrics()"
    totals: dict[str, int] = {}
    vectors: list[list[int]] = []
    for metric in metrics:
        name = getattr(metric, "name", None)
        try:
            if name == PER_POS:
                vectors.append([_count(v, PER_POS, source) for v in metric.values])
            elif name in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
                totals[name] = totals.get(name, 0) + _count(metric.value, name, source)
        except (AttributeError, TypeError) as exc:  # no .value / .values, or not a list
            raise CounterFormatError(f"{source}: {name} is not a counter ({exc})") from exc
    absent = {DRAFTS, DRAFT_TOKENS, ACCEPTED} - totals.keys()
    if absent:
        raise _missing(absent, "LLM.get_metrics()")
    return SpecCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED],
                        _add_vectors(vectors))


def from_prometheus_text(text: str, num_speculative_tokens: int | None = None,
                         source: str = "/metrics") -> SpecCounters:
    """Read a Prometheus exposition (a vLLM server's ``/metrics``).

    Counters are taken from their ``_total`` samples; the ``_created`` timestamps that
    prometheus_client writes beside each counter are ignored (summing them would add a Unix
    time to the count). V1 names are preferred; V0 names (no drafts counter) are read when
    V1's are absent, with drafts = draft tokens / ``num_speculative_tokens`` when given.
    """
    totals: dict[str, float] = {}
    per_pos: dict[tuple, dict[int, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise CounterFormatError(f"{source}: not a Prometheus text exposition: {exc}") from exc
    for family in families:
        # A counter's family is <name> with samples <name>_total (and <name>_created); an
        # exposition whose TYPE line already carries _total parses as family <name>_total.
        name = family.name.removesuffix("_total")
        if not name.startswith(PREFIX) or name.endswith("_created"):
            continue  # vLLM exposes each counter's creation time as a <name>_created gauge
        for sample in family.samples:
            if sample.name not in (name + "_total", name):
                continue  # the _created timestamps, never summed into a count
            if name not in (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS):
                continue  # V0 gauges (acceptance rate, efficiency) are not counts
            value = _count(sample.value, sample.name, source)
            if name == PER_POS:
                key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "position"))
                position = sample.labels.get("position", "")
                if not position.isdigit():
                    raise CounterFormatError(f"{source}: {sample.name} has position label "
                                             f"{position!r}, not a whole number")
                per_pos.setdefault(key, {})[int(position)] = value
            else:
                totals[name] = totals.get(name, 0) + value
    if DRAFTS in totals:
        absent = {DRAFT_TOKENS, ACCEPTED} - totals.keys()
        if absent:
            raise _missing(absent, source)
        drafts = int(totals[DRAFTS])
    elif DRAFT_TOKENS in totals and ACCEPTED in totals:  # V0 engine
        drafts = (int(totals[DRAFT_TOKENS]) // num_speculative_tokens
                  if num_speculative_tokens else None)
    else:
        raise _missing({DRAFTS, DRAFT_TOKENS, ACCEPTED} - totals.keys(), source)
    vectors = [[int(by_pos.get(i, 0)) for i in range(max(by_pos) + 1)]
               for by_pos in per_pos.values()]
    return SpecCounters(drafts, int(totals[DRAFT_TOKENS]), int(totals[ACCEPTED]),
                        _add_vectors(vectors))
