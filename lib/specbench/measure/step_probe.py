"""The mixed step probe: what a step costs when it holds more rows, longer contexts and other
requests' prefill than `make book`'s calls ever put in one.

`make book`'s calls decode one or four rows with their prompts cached, so their steps hold
neither prefill nor more than four rows, and the step-time model's per-row and per-prefill-token
terms are not identified by them. The probe drives each engine the sweep already started
(:meth:`specbench.engine.vllm_engine.Engine.drive`): for each batch of 1, 2, 4 and 8 rows it
starts the rows twice, once at contexts spread up to ``max_model_len`` minus the output and once
all at one moderate context (so the number of rows and the context read vary apart: with the
spread alone, more rows always meant longer contexts and the per-row and per-context-token
terms traded off), and while they decode, prefills of 64 to 1,024 tokens arrive (the middle
sizes are those of real prompts: a serving run's 700-token prompts were predicted from a slope
set by a few 4,000-token prefills, 25 % too slow). The engine's step records hold what each step
did; the probe only records its window on the monotonic clock (the run manifest's
``step_probe``), so its steps can be told from the calls'. It times nothing itself.
"""
from __future__ import annotations

from importlib import resources

__all__ = ["ROWS", "CONTEXTS", "SCHEDULES", "PREFILLS", "OUTPUT", "FLAT_CONTEXT",
           "probe_text_ids", "arrivals", "run_probe", "probe_into"]

ROWS = (1, 2, 4, 8)
CONTEXTS = ("spread", "flat")
#: The probe's schedules in the order it drives them: (decoding rows, how their contexts are set).
SCHEDULES = tuple((rows, contexts) for contexts in CONTEXTS for rows in ROWS)
PREFILLS = (64, 256, 512, 768, 1024)
FLAT_CONTEXT = 512     # every row's prompt in a 'flat' schedule
OUTPUT = 48            # tokens each decoding row generates
PREFILL_EVERY = 2      # a prefill arrives every this many steps while rows decode (a γ=6 row
                       # copying text emits up to 7 tokens a step: the prefills must come early)


def probe_text_ids(tokenizer, length: int, offset: int = 0) -> list[int]:
    """``length`` token ids of the project's own passages (repeated as needed) from
    ``offset``: real text, so the n-gram proposer drafts on some steps and not on others, as it
    does in serving; rows start at different offsets, so no row's prompt is another's prefix."""
    texts = resources.files("specbench.measure.workloads") / "texts"
    text = " ".join(p.read_text() for p in sorted(texts.iterdir()) if p.name.endswith(".txt"))
    ids = tokenizer.encode(text, add_special_tokens=False)
    while len(ids) < offset + length:
        ids = ids + ids
    return ids[offset:offset + length]


def _contexts(rows: int, kind: str, longest: int) -> list[int]:
    """The rows' prompt lengths: 'spread' geometric from 64 to ``longest`` (every context range
    is held, and the rows' own prefill, which the probe pays before they decode, stays short);
    'flat' all :data:`FLAT_CONTEXT` (or ``longest``, if shorter)."""
    if kind == "flat":
        return [min(FLAT_CONTEXT, longest)] * rows
    if rows == 1:
        return [longest // 2]
    return [int(64 * (longest / 64) ** (i / (rows - 1))) for i in range(rows)]


def arrivals(tokenizer, max_model_len: int) -> list[list[tuple[int, list[int], int]]]:
    """One arrival plan per schedule of :data:`SCHEDULES`: the rows at step 0 (:func:`_contexts`,
    none longer than ``max_model_len − OUTPUT − 1``), then a prefill every
    :data:`PREFILL_EVERY` steps, one of each of :data:`PREFILLS`. Each prefill generates one
    token. No prompt starts where another does, in its schedule or any other: `make measure`
    caches prefixes, and a repeated prompt would be a cache hit, not a prefill."""
    longest = max_model_len - OUTPUT - 1
    schedules = []
    for s, (rows, kind) in enumerate(SCHEDULES):
        contexts = _contexts(rows, kind, longest)
        plan = [(0, probe_text_ids(tokenizer, n, offset=97 * i + 7 * s), OUTPUT)
                for i, n in enumerate(contexts)]
        plan += [(PREFILL_EVERY * (k + 1),
                  probe_text_ids(tokenizer, size, offset=1000 + 37 * k + 7 * s), 1)
                 for k, size in enumerate(PREFILLS)]
        schedules.append(plan)
    return schedules


def run_probe(engine) -> dict:
    """Drive ``engine`` through every schedule; the probe's windows for the manifest."""
    windows = []
    for (rows, kind), schedule in zip(SCHEDULES, arrivals(engine.tokenizer,
                                                          engine.settings.max_model_len),
                                      strict=True):
        start, end = engine.drive(schedule)
        windows.append({"rows": rows, "contexts": kind, "monotonic_ns": [start, end]})
    return {"gamma": engine.settings.gamma, "windows": windows}


def probe_into(run, engine, enabled: bool) -> None:
    """The probe in ``engine`` when ``enabled`` and the engine records its steps (a vLLM engine
    of a sweep); its windows are appended to ``run``'s manifest (``step_probe``)."""
    settings = getattr(engine, "settings", None)
    if not enabled or not getattr(settings, "step_records", None):
        return
    run.update_manifest(step_probe=[*run.manifest.get("step_probe", []), run_probe(engine)])
