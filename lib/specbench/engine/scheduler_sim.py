"""vLLM's own v1 scheduler, driven in-process without a model: which steps a served load is
made of.

**Why the real scheduler.** Under load a step holds what the scheduler puts in it: other
requests' prefill chunks beside the running rows' decode tokens and drafts, within the token
budget and ``max_num_seqs``, and — with a batch-size schedule of γ
(``num_speculative_tokens_per_batch_size``) — the γ vLLM looks up by the number of requests it
schedules in that step. A model of "the batch is the concurrency" got that wrong (the running
batch averaged 6.95 at concurrency 8). Driving ``vllm.v1.core.sched.scheduler.Scheduler`` with
the config the server would build from the same engine arguments (``EngineArgs``) gets the token
budget, chunked prefill, the KV cache's block accounting, padding and the dynamic γ lookup from
vLLM itself instead of re-implementing them.

**What stands in for the model.** Each step, every scheduled row whose prompt is done emits one
token plus the drafts it accepts; the acceptance is drawn per request from a
:class:`DraftProfile` (the counters of the operator's own prompts, not timing). After the step,
rows propose drafts as the n-gram proposer would on those prompts (a row inside a matched run
keeps drafting; otherwise it starts one with the profile's chance), and the scheduler takes them
through ``update_draft_token_ids`` as ``EngineCore.post_step`` hands them over. Token ids are
placeholders (no EOS: the load's requests run to ``max_tokens``, as the benchmark client asks
with ``ignore_eos``).

**What comes out.** Step compositions counted by the same function the step-record plugin uses
(:func:`specbench.engine.step_records.count_step`), and each request's arrival, first-token and
finish step. Times are not simulated here: in a closed loop the next request is sent when one
finishes, so the schedule does not depend on how long a step takes, and the caller charges each
step its time afterwards (a step-time model, many draws of it, one schedule).

**When a sent request reaches the scheduler.** The client, the API server's tokenizer and the
hop to the engine core take milliseconds, while a busy engine starts its next step within
0.1–2 ms (the servers' step records; decode steps take 20 ms and more). So a request sent
when another finishes arrives while the next step runs and joins the one after; an idle
engine wakes on the first arrival and runs its prefill alone, the requests sent with it
joining the step after. (Sending every request before the next ``schedule()``
instead put the prefills of requests sent together into one step and kept the decode of the
others clear of them — a synchronised load no server ran.)

vLLM internals are imported in this module only (the engine layer; import-linter's contract
keeps them out of the layers below and of the report).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbench.engine.step_records import count_step

__all__ = ["DraftProfile", "SimulatedLoad", "LoadNotHeld", "scheduler_config", "kv_blocks",
           "check_held", "simulate_closed_loop", "PLACEHOLDER_TOKEN"]

PLACEHOLDER_TOKEN = 100     # any id but EOS: requests stop at max_tokens


class LoadNotHeld(ValueError):
    """A load level the scheduler cannot hold at once (more requests than ``max_num_seqs``, or
    than the KV cache's blocks allow)."""


@dataclass(frozen=True)
class DraftProfile:
    """One prompt's drafting, from the counters of a pass at γ = ``len(lengths) - 1``:
    ``start`` the chance that a step outside a matched run starts one (drafts / decode steps),
    ``lengths`` the probability of each accepted length L = 0…γ of a draft. A run of L accepted
    tokens emits L + 1 tokens; at a smaller γ' it spans ceil((L+1)/(γ'+1)) drafting steps (the
    match persists), as :func:`specbench.theory.counters.accepted_lengths` assumes."""
    prompt_tokens: int
    start: float
    lengths: tuple[float, ...]

    def draw_run(self, rng: np.random.Generator) -> int:
        """Tokens a new run emits (accepted length + 1)."""
        return int(rng.choice(len(self.lengths), p=np.asarray(self.lengths))) + 1


@dataclass(frozen=True)
class SimulatedLoad:
    """The steps of one closed-loop level and its requests' step indices."""
    steps: pd.DataFrame          # count_step's columns (``rows``: the running batch), 'gamma'
    requests: pd.DataFrame       # request, prompt_tokens, arrival_step, first_step, finish_step,
    #                              output_tokens (arrival_step: the step during which it was
    #                              sent; the scheduler sees it from the step after, module text)


def _engine_args(model: str, dtype: str, gamma: int, schedule, settings: dict):
    from vllm.engine.arg_utils import EngineArgs
    spec = None
    if gamma > 0:
        spec = {"method": "ngram", "num_speculative_tokens": int(gamma),
                "prompt_lookup_min": int(settings.get("prompt_lookup_min", 2)),
                "prompt_lookup_max": int(settings.get("prompt_lookup_max", 4))}
        if schedule:
            spec["num_speculative_tokens_per_batch_size"] = [list(e) for e in schedule]
    return EngineArgs(model=model, dtype=dtype,
                      max_model_len=int(settings.get("max_model_len", 2048)),
                      max_num_seqs=int(settings.get("max_num_seqs", 8)),
                      enable_prefix_caching=bool(settings.get("enable_prefix_caching", False)),
                      async_scheduling=False, seed=0, speculative_config=spec)


def scheduler_config(model: str, dtype: str, gamma: int, schedule=None,
                     settings: dict | None = None):
    """The ``VllmConfig`` the server builds from these engine arguments (the serving harness's
    ``vllm serve`` flags: :mod:`specbench.measure.serving.server`), with the OpenAI server's
    defaults (on a CPU its token budget is half the ``LLM`` class's)."""
    from vllm.usage.usage_lib import UsageContext
    return _engine_args(model, dtype, gamma, schedule, settings or {}).create_engine_config(
        UsageContext.OPENAI_API_SERVER)


def kv_blocks(config, kvcache_gib: float) -> int:
    """KV cache blocks of ``kvcache_gib`` GiB (vLLM's CPU backend sizes its cache so:
    ``VLLM_CPU_KVCACHE_SPACE``), for the model's layers, KV heads and head size."""
    model = config.model_config
    layers = model.get_num_layers(config.parallel_config)
    heads = model.get_num_kv_heads(config.parallel_config)
    per_block = (2 * layers * heads * model.get_head_size() * config.cache_config.block_size
                 * _dtype_bytes(model.dtype))
    return int(kvcache_gib * 2**30 // per_block)


def _dtype_bytes(dtype) -> int:
    import torch
    return torch.empty((), dtype=dtype).element_size()


def _kv_config(config, num_blocks: int):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    model = config.model_config
    spec = FullAttentionSpec(block_size=config.cache_config.block_size,
                             num_kv_heads=model.get_num_kv_heads(config.parallel_config),
                             head_size=model.get_head_size(), dtype=model.dtype)
    layers = [f"model.layers.{i}.self_attn.attn"
              for i in range(model.get_num_layers(config.parallel_config))]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(layer_names=layers,
                                                           kv_cache_spec=spec)])


def check_held(config, num_blocks: int, concurrency: int, prompt_tokens: int,
               output_tokens: int) -> None:
    """Raise :class:`LoadNotHeld` (one line) where ``concurrency`` requests of the longest
    prompt cannot all run at once."""
    max_seqs = config.scheduler_config.max_num_seqs
    if concurrency > max_seqs:
        raise LoadNotHeld(f"concurrency {concurrency} exceeds max_num_seqs={max_seqs}: the "
                          "scheduler would queue the rest, not run them")
    block = config.cache_config.block_size
    gamma = (config.speculative_config.num_speculative_tokens
             if config.speculative_config else 0)
    need = concurrency * -(-(prompt_tokens + output_tokens + gamma) // block)
    if need > num_blocks:
        raise LoadNotHeld(f"concurrency {concurrency} needs {need} KV blocks of {block} tokens "
                          f"for prompts of {prompt_tokens} tokens, the cache holds {num_blocks}")


def _scheduler(config, num_blocks: int):
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager
    config.cache_config.num_gpu_blocks = num_blocks     # as EngineCore sets it
    return Scheduler(config, _kv_config(config, num_blocks), StructuredOutputManager(config),
                     block_size=config.cache_config.block_size)


def _request(index: int, profile: DraftProfile, output_tokens: int):
    from vllm import SamplingParams
    from vllm.v1.request import Request
    params = SamplingParams(max_tokens=output_tokens, ignore_eos=True, temperature=0.0)
    return Request(f"r{index}", [PLACEHOLDER_TOKEN + 1] * profile.prompt_tokens, params, None,
                   arrival_time=0.0)


class _Drafting:
    """Each request's matched run: tokens it has left to emit."""

    def __init__(self, profiles: dict[str, DraftProfile], rng: np.random.Generator):
        self.profiles, self.rng, self.left = profiles, rng, {}

    def emitted(self, req_id: str, drafts: int) -> int:
        """Tokens a decode row emits when ``drafts`` were verified (1 without drafts)."""
        left = self.left.get(req_id, 0)
        if drafts == 0 or left == 0:
            self.left[req_id] = max(left - 1, 0)
            return 1
        out = min(left, drafts + 1)
        self.left[req_id] = left - out
        return out

    def propose(self, req_id: str, gamma: int) -> list[int]:
        """Drafts the proposer hands over after a step: γ where a run continues or starts."""
        if self.left.get(req_id, 0) == 0:
            profile = self.profiles[req_id]
            if self.rng.random() < profile.start:
                self.left[req_id] = profile.draw_run(self.rng)
        return [PLACEHOLDER_TOKEN] * gamma if self.left.get(req_id, 0) >= 1 else []


class _ClosedLoop:
    """vLLM's scheduler with a closed-loop client: the requests still to send, each request's
    timeline (in steps), the tokens each has emitted, and the steps so far."""

    def __init__(self, config, num_blocks: int, profiles: list[DraftProfile],
                 output_tokens: int, seed: int):
        spec = config.speculative_config
        self.gamma = spec.num_speculative_tokens if spec is not None else 0
        self.scheduler = _scheduler(config, num_blocks)
        self.profiles, self.output_tokens = profiles, output_tokens
        self.drafting = _Drafting({f"r{i}": p for i, p in enumerate(profiles)},
                                  np.random.default_rng(seed))
        self.timeline = {f"r{i}": {"request": f"r{i}", "prompt_tokens": p.prompt_tokens}
                         for i, p in enumerate(profiles)}
        self.queue = list(range(len(profiles)))
        self.emitted: dict[str, int] = {}
        self.steps: list[dict] = []

    def send(self) -> None:
        """The next request reaches the scheduler; it was sent as the step now to run began
        (its time to first token counts from there)."""
        index = self.queue.pop(0)
        self.scheduler.add_request(_request(index, self.profiles[index], self.output_tokens))
        self.timeline[f"r{index}"].setdefault("arrival_step", len(self.steps))

    def sent(self, count: int) -> None:
        """The next ``count`` requests are sent now, while the step about to run runs: they
        reach the scheduler after that step (:meth:`send`)."""
        for index in self.queue[:count]:
            self.timeline[f"r{index}"]["arrival_step"] = len(self.steps)

    def idle(self) -> bool:
        return not self.scheduler.get_num_unfinished_requests()

    def sampled(self, output, rid: str, first_tokens: set) -> list[int]:
        """What the model would sample for one scheduled row (module text)."""
        request = self.scheduler.requests[rid]
        if request.num_output_tokens == 0:
            done = request.num_computed_tokens + output.num_scheduled_tokens[rid]
            if done < request.num_prompt_tokens:
                return []                          # a prefill chunk: nothing sampled yet
            first_tokens.add(rid)
            return [PLACEHOLDER_TOKEN]
        drafts = output.scheduled_spec_decode_tokens.get(rid) or ()
        real = sum(1 for t in drafts if t >= 0)
        return [PLACEHOLDER_TOKEN] * self.drafting.emitted(rid, real)

    def step(self) -> int:
        """One engine step: schedule, sample, update, hand over the next drafts. Returns how
        many requests finished (0 for a step that only cleared finished requests)."""
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
        output = self.scheduler.schedule()
        if not output.total_num_scheduled_tokens:
            # A step after the last requests finished only clears them (EngineCore steps so
            # too); nothing scheduled with requests left is a level it cannot hold.
            if self.scheduler.get_num_unfinished_requests():
                raise RuntimeError("vLLM's scheduler scheduled nothing with requests waiting "
                                   "(a level it cannot hold)")
            return 0
        counts = count_step(output)
        counts["gamma"] = int(getattr(output, "num_spec_tokens_to_schedule", self.gamma) or 0)
        first_tokens: set[str] = set()
        req_ids = list(output.num_scheduled_tokens)
        result = ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[self.sampled(output, rid, first_tokens) for rid in req_ids])
        finished = self._record(self.scheduler.update_from_output(output, result), first_tokens)
        live = [r for r in req_ids if r in self.scheduler.requests
                and not self.scheduler.requests[r].is_finished()
                and self.scheduler.requests[r].num_output_tokens > 0]
        if self.gamma > 0 and live:
            # The proposer drafts the γ the scheduler chose for the step just run (vLLM's
            # model runner passes num_spec_tokens_to_schedule to it); they are verified next.
            self.scheduler.update_draft_token_ids(DraftTokenIds(
                live, [self.drafting.propose(r, counts["gamma"]) for r in live]))
        self.steps.append(counts)
        return finished

    def _record(self, engine_outputs, first_tokens: set) -> int:
        step = len(self.steps)
        for rid in first_tokens:
            self.timeline[rid]["first_step"] = step
        finished = 0
        for out in (o for outs in engine_outputs.values() for o in outs.outputs):
            self.emitted[out.request_id] = (self.emitted.get(out.request_id, 0)
                                            + len(out.new_token_ids))
            if out.finish_reason is not None:
                self.timeline[out.request_id] |= {"finish_step": step, "output_tokens":
                                                  self.emitted[out.request_id]}
                finished += 1
        return finished


def simulate_closed_loop(config, num_blocks: int, profiles: list[DraftProfile],
                         concurrency: int, output_tokens: int, seed: int = 0,
                         max_steps: int = 200_000) -> SimulatedLoad:
    """A closed loop of ``len(profiles)`` requests, at most ``concurrency`` in flight (vLLM's
    benchmark client with ``--max-concurrency``: all released at once, the next sent when one
    finishes), through vLLM's scheduler. Raises :class:`LoadNotHeld` for a level it cannot
    hold at once."""
    check_held(config, num_blocks, concurrency, max(p.prompt_tokens for p in profiles),
               output_tokens)
    loop = _ClosedLoop(config, num_blocks, profiles, output_tokens, seed)
    in_flight = min(concurrency, len(profiles))    # sent, not yet seen by the scheduler
    while loop.scheduler.has_requests() or in_flight:
        if len(loop.steps) >= max_steps:
            raise RuntimeError(f"the simulated load did not finish in {max_steps} steps")
        if in_flight and loop.idle():
            loop.send()                            # an idle engine wakes on the first arrival
            in_flight -= 1
        loop.sent(in_flight)                       # the rest arrive while this step runs
        finished = loop.step()
        for _ in range(in_flight):
            loop.send()
        in_flight = min(finished, len(loop.queue))
    return SimulatedLoad(pd.DataFrame(loop.steps), pd.DataFrame(list(loop.timeline.values())))
