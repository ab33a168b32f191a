"""The mixed step probe: what a step costs when it holds more rows, longer contexts and other
requests' prefill than `make book`'s calls ever put in one.

`make book`'s calls decode one or four rows with their prompts cached, so their steps hold
neither prefill nor more than four rows, and the step-time model's per-row and per-prefill-token
terms are not identified by them. The probe drives each engine the sweep already started
(:meth:`specbench.engine.vllm_engine.Engine.drive`): for each batch of 1, 2, 4 and 8 rows it
starts the rows twice, once all at a short context (:data:`SHORT_CONTEXT`, where the sweep's
and a server's rows are) and once at contexts spread up to ``max_model_len`` minus the output,
so the number of rows and the context read vary apart. While they decode, two prefills arrive:
a fresh prompt of 64 to 1,024 tokens (64, 256 and 512 beside short rows and beside long ones,
with a different number of rows), and a few new tokens after a long cached prefix (a
follow-up turn, a retrieved passage: those tokens read the prefix, which a fresh prompt's do
not).

The long rows take their prompts from one pool (:func:`long_contexts`) that every long schedule
shares, longest first, so only the first pays their prefill; the rest find it in the prefix
cache (`make measure` caches prefixes), as the cached-prefix prefills do on purpose. That keeps
the probe within its two minutes on a 2-core CPU. The engine's step records hold what each step
did; the probe only records its window on the monotonic clock (the run manifest's
``step_probe``), so its steps can be told from the calls'. It times nothing itself.
"""
from __future__ import annotations

from importlib import resources

__all__ = ["ROWS", "CONTEXTS", "SCHEDULES", "PREFILLS", "SHORT_PREFILLS", "EXTENSIONS", "OUTPUT",
           "SHORT_CONTEXT", "POOL", "long_contexts", "probe_text_ids", "arrivals", "run_probe",
           "probe_into"]

ROWS = (8, 4, 2, 1)                   # the most rows first: their long prompts fill the cache
CONTEXTS = ("long", "short")
#: The probe's schedules in the order it drives them: (decoding rows, how their contexts are set).
SCHEDULES = tuple((rows, contexts) for contexts in CONTEXTS for rows in ROWS)
PREFILLS = (1024, 512, 256, 64)        # fresh prompts beside long rows, one per schedule
SHORT_PREFILLS = (256, 64, 512, 128)   # and beside short rows (1,024 once: the two minutes)
EXTENSIONS = (32, 64, 128, 96)         # new tokens after a cached long prefix, one per schedule
SHORT_CONTEXT = 128    # every row's prompt in a 'short' schedule
POOL = 8               # long prompts, geometric from 64 tokens to the longest
OUTPUT = 28            # tokens each decoding row generates
PREFILL_EVERY = 2      # a prefill arrives every this many steps while rows decode (a γ=6 row
                       # copying text emits up to 7 tokens a step: the prefills must come early)
_LONG_OFFSET, _SHORT_OFFSET, _FRESH_OFFSET = 7, 3001, 5003   # where each kind's texts start


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


def long_contexts(longest: int) -> list[int]:
    """The pool's prompt lengths: :data:`POOL` of them, geometric from 64 to ``longest``."""
    return [int(64 * (longest / 64) ** (i / (POOL - 1))) for i in range(POOL)]


def _pool_rows(rows: int) -> list[int]:
    """Which pool prompts a long schedule of ``rows`` rows decodes: spread over the pool, the
    longest always among them."""
    if rows == 1:
        return [POOL - 1]
    return [round(i * (POOL - 1) / (rows - 1)) for i in range(rows)]


def arrivals(tokenizer, max_model_len: int) -> list[list[tuple[int, list[int], int]]]:
    """One arrival plan per schedule of :data:`SCHEDULES`: the rows at step 0 (none longer than
    ``max_model_len − OUTPUT − 1``), then, :data:`PREFILL_EVERY` steps apart, a fresh prompt of
    one of :data:`PREFILLS` and a pool prompt extended by one of :data:`EXTENSIONS` new tokens.
    Each prefill generates one token. A fresh prompt starts where no other prompt does; a long
    row's prompt is its pool prompt (shared with the other long schedules, so a cache hit after
    the first), and an extension starts with one (a cache hit for the prefix only)."""
    longest = max_model_len - OUTPUT - 1
    pool = [probe_text_ids(tokenizer, n, offset=_LONG_OFFSET + 211 * i)
            for i, n in enumerate(long_contexts(longest))]
    schedules = []
    for s, (rows, kind) in enumerate(SCHEDULES):
        if kind == "long":
            prompts = [pool[i] for i in _pool_rows(rows)]
        else:
            prompts = [probe_text_ids(tokenizer, min(SHORT_CONTEXT, longest),
                                      offset=_SHORT_OFFSET + 97 * i + 13 * s)
                       for i in range(rows)]
        size = (PREFILLS if kind == "long" else SHORT_PREFILLS)[s % len(PREFILLS)]
        fresh = probe_text_ids(tokenizer, size, offset=_FRESH_OFFSET + 37 * s)
        prefix = pool[POOL - 1 - s % 3]
        extended = prefix + probe_text_ids(tokenizer, EXTENSIONS[s % len(EXTENSIONS)],
                                           offset=_FRESH_OFFSET + 500 + 41 * s)
        schedules.append([(0, p, OUTPUT) for p in prompts]
                         + [(PREFILL_EVERY, fresh, 1),
                            (2 * PREFILL_EVERY, extended[:max_model_len - 1], 1)])
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
