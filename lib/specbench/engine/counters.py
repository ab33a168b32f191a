"""vLLM's speculative-decoding counters, read from every form the engine exposes, as
:class:`~specbench.theory.counters.SpecCounters` (where α, the mean acceptance length and the
zero-draft convention are defined).

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

from prometheus_client.parser import text_string_to_metric_families

from specbench.theory.counters import SpecCounters

__all__ = ["MissingSpecMetrics", "CounterFormatError", "from_vllm_metrics", "from_prometheus_text"]

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
