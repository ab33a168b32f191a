"""An untimed pass over an operator's prompts that reads only the engine's counters.

``specbench plan --workload-file`` needs acceptance on prompts nobody measured, not their
latency (the host's step cost comes from its `make book` calibration). One engine at the
largest γ planned decodes each prompt alone (batch 1, greedy, as the calibration decoded), and
the spec-decode counter delta around each call gives that prompt's drafts, draft tokens,
accepted tokens and accepted tokens per draft position; with the tokens it decoded, that is its
tokens per step and drafting share (:class:`specbench.theory.counters.DecodeTally`). Nothing is
timed, so the pass may run while the machine is busy; it writes nothing.

The same engine answers whether this build honours vLLM's dynamic speculation for the n-gram
proposer on this platform: it starts with the batch-size schedule "γ at batch 1, one token from
batch 2 on" (:data:`PROBE_BATCH_GAMMA`), so the batch-1 calls above are unchanged, and one more
call decodes the first prompts together; the counters then say how many tokens each draft
proposed at each batch size. An engine that refuses the schedule is started again without it
and the refusal is the answer.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields, replace

import pandas as pd

from specbench.theory.counters import DecodeTally
from specbench.engine.vllm_engine import Engine, EngineSettings

__all__ = ["COLUMNS", "PROBE_BATCH_GAMMA", "PassResult", "DynamicProbe", "engine_settings",
           "acceptance_pass"]

#: The γ the probe schedule asks for from batch 2 on: a draft of more tokens at batch > 1 means
#: the schedule was ignored (an n-gram draft may be shorter than asked, never longer).
PROBE_BATCH_GAMMA = 1

COLUMNS = ["request", "prompt_tokens", "output_tokens", "gamma", "decoded", "drafts",
           "draft_tokens", "accepted_tokens", "accepted_per_pos", "decode_steps"]


@dataclass
class DynamicProbe:
    """Tokens per draft at batch 1 and at ``batch`` under the probe schedule, or why the engine
    refused the schedule (``error``)."""
    schedule: tuple
    batch: int = 0
    per_draft_batch1: float | None = None
    per_draft_batched: float | None = None
    error: str | None = None

    @property
    def honoured(self) -> bool | None:
        if self.error:
            return False
        if self.per_draft_batched is None or self.per_draft_batch1 is None:
            return None
        # The batched call ends with steps at batch 1 (its requests finish apart), so its
        # drafts average a little above the probe's γ even where the schedule holds; ignored,
        # they would average what batch 1 does. Nearer the probe's γ is honoured.
        return (self.per_draft_batch1 > PROBE_BATCH_GAMMA and self.per_draft_batched
                < (self.per_draft_batch1 + PROBE_BATCH_GAMMA) / 2)


@dataclass
class PassResult:
    rows: pd.DataFrame          # one row per prompt decoded (COLUMNS)
    skipped: list[str]          # prompts longer than the context leaves room for
    startup_s: float
    wall_s: float
    dynamic: DynamicProbe | None = None
    lengths: list[int] = field(default_factory=list)   # prompt tokens of ``count_only``


def engine_settings(calibration_manifest: dict, model: str, gamma: int) -> EngineSettings:
    """The calibration's engine settings (dtype, n-gram window, context, patch) at speculation
    length ``gamma``: acceptance depends on the proposer's window and the dtype, so the pass
    runs the engine the calibration ran. Prefix caching, the profiler and step records are
    off."""
    recorded = calibration_manifest.get("engine", {}).get("settings") or {}
    known = {f.name for f in fields(EngineSettings)}
    kept = {k: v for k, v in recorded.items() if k in known and k not in (
        "model", "gamma", "enable_prefix_caching", "profiler_dir", "gpu_memory_utilization",
        "batch_schedule", "step_records")}
    return EngineSettings(**{**kept, "model": model, "gamma": gamma,
                             "dtype": calibration_manifest["dtype"]})


def _start(settings: EngineSettings, probe: bool) -> tuple[Engine, DynamicProbe | None]:
    """The pass's engine: with the probe schedule where asked, else (or where the engine
    refuses it) plain."""
    if not probe or settings.gamma <= PROBE_BATCH_GAMMA:
        return Engine(settings), None
    schedule = ((1, 1, settings.gamma), (2, settings.max_num_seqs, PROBE_BATCH_GAMMA))
    try:
        return Engine(replace(settings, batch_schedule=schedule)), DynamicProbe(schedule)
    except Exception as exc:  # the refusal is the probe's answer
        message = str(exc).strip().splitlines()
        return Engine(settings), DynamicProbe(schedule, error=f"{type(exc).__name__}: "
                                                             f"{message[0] if message else ''}")


def _per_draft(counters) -> float | None:
    return counters.draft_tokens / counters.drafts if counters.drafts else None


def acceptance_pass(settings: EngineSettings, requests, max_tokens: int, sampling: dict,
                    progress=None, probe_dynamic: bool = True,
                    count_only=()) -> PassResult:
    """Decode every request (a workload source's :class:`Request`) alone on one engine at
    ``settings.gamma``; per prompt, the counter delta around its call. With ``probe_dynamic``
    the engine carries the probe schedule and one batched call follows (module text).
    ``count_only``: requests only tokenized (their lengths in ``PassResult.lengths``)."""
    started = time.perf_counter()
    rows, skipped, prompts = [], [], []
    engine, probe = _start(settings, probe_dynamic)
    with engine:
        for request in requests:
            ids = engine.encode_chat(request.messages, request.continue_final)
            tokens = request.max_tokens or max_tokens
            if len(ids) + tokens > settings.max_model_len:
                skipped.append(request.id)
                continue
            gen = engine.generate([ids], tokens, sampling)
            counters = gen.counters
            tally = DecodeTally(counters, max(gen.output_tokens[0] - 1, 0))
            prompts.append((ids, tokens))
            rows.append({"request": request.id, "prompt_tokens": len(ids),
                         "output_tokens": gen.output_tokens[0], "gamma": settings.gamma,
                         "decoded": tally.decoded_tokens, "drafts": counters.drafts,
                         "draft_tokens": counters.draft_tokens,
                         "accepted_tokens": counters.accepted_tokens,
                         "accepted_per_pos": ";".join(map(str, counters.accepted_per_pos)),
                         "decode_steps": tally.decode_steps})
            if progress is not None:
                progress.update()
        if probe is not None and probe.error is None and len(prompts) >= 2:
            together = prompts[:min(4, settings.max_num_seqs)]
            gen = engine.generate([p for p, _ in together], [t for _, t in together], sampling)
            drafted = sum(r["draft_tokens"] for r in rows)
            probe.batch = len(together)
            probe.per_draft_batch1 = drafted / max(sum(r["drafts"] for r in rows), 1)
            probe.per_draft_batched = _per_draft(gen.counters)
        startup = engine.startup_s
        # the prompt length of every request a load will send (tokenized, not decoded)
        lengths = [len(engine.encode_chat(r.messages, r.continue_final)) for r in count_only]
    return PassResult(pd.DataFrame(rows, columns=COLUMNS), skipped, startup,
                      time.perf_counter() - started, probe, lengths)
