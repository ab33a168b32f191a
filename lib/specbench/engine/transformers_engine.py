"""A second engine: Hugging Face transformers' prompt-lookup decoding, behind the same
interface as the vLLM adapter (:class:`specbench.engine.protocol.SpecEngine`).

Same checkpoint, same chat template (the tokenizer's, through
:func:`specbench.engine.encode_messages`), same sampling (greedy unless told; temperature,
top-p, top-k, repetition penalty and seed otherwise), exactly ``max_tokens`` new tokens with EOS
ignored (vLLM's ``ignore_eos=True``: generation config without an EOS id, so EOS may be emitted
and decoding goes on; no logit is masked). γ > 0 is ``generate(..., prompt_lookup_num_tokens=γ)``;
γ = 0 is plain greedy/sampled ``generate``. Eager attention, bf16 or fp32, the torch thread count
from the settings. Batch 1 only: transformers refuses assisted generation above batch size 1,
so a call with more than one prompt is a :class:`ValueError` (at every γ, so the paired γ = 0
baseline runs the same shape).

**Counters from the engine itself.** transformers builds a ``PromptLookupCandidateGenerator`` in
``GenerationMixin._get_candidate_generator`` for each assisted ``generate`` call and, after
every forward pass, calls its ``update_candidate_strategy(input_ids, scores, num_matches)``
with the number of candidates the model accepted (a method the prompt-lookup generator
inherits as a no-op). :class:`RecordingPromptLookup` subclasses it to record, per forward pass,
candidates proposed and matched; the engine injects it by overriding
``_get_candidate_generator`` on its own model instance (the transformers object is built by
transformers' own code, then adopted by the subclass — no global patch). The counts go into a
:class:`PromptLookupTally` in vLLM's shape (:class:`specbench.counters.SpecCounters`).

**n-gram window.** vLLM's 'ngram' proposer looks for the longest suffix n-gram with
``prompt_lookup_min`` ≤ n ≤ ``prompt_lookup_max`` (2..4 here) and proposes what followed its
earliest occurrence. transformers tries n = ``max_matching_ngram_size`` down to 1 and takes the
leftmost occurrence with a continuation. Set alike: max n = ``prompt_lookup_max`` = 4. Differs:
transformers has no minimum (it falls back to 1-gram matches, vLLM drafts nothing below 2), and
it skips candidates a logits processor forbids. Both propose fewer than γ where the match
is near the end of the text.

**Per-request timings** come from a ``transformers`` streamer (:class:`_TokenClock`), not a
LogitsProcessor: a logits processor would join the list prompt lookup consults to filter
candidates, and sees logits before the token is chosen. ``generate`` hands the streamer the prompt
first, then the tokens of each forward pass as they are appended (one ``put`` per pass in both
the plain and the assisted loop; on CPU and CUDA the put is synchronous), so TTFT = first token's
time − call start and the decode window = first token to last token, as for vLLM.

**A draft model** (``draft_model``: a layer-truncated draft, :mod:`specbench.engine.drafts`)
replaces prompt lookup with transformers' assisted generation: ``generate(...,
assistant_model=draft)`` with a constant ``num_assistant_tokens`` = γ and no confidence
threshold (transformers' default would stop a draft early and retune γ), recorded by the same
tally through :class:`RecordingAssisted`. As for prompt lookup, the prefill pass proposes
nothing; the draft then reads the prompt on the first decode pass (vLLM's draft runs its
prefill in the target's prefill step).
"""
from __future__ import annotations

import copy
import os
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transformers.generation.candidate_generator import (
    AssistedCandidateGenerator,
    PromptLookupCandidateGenerator,
)

from specbench.engine.vllm_engine import CHAT_TEMPLATE, Generation, encode_messages
from specbench.theory.counters import SpecCounters

__all__ = ["HFEngineSettings", "TransformersEngine", "HFGeneration", "PromptLookupTally",
           "RecordingPromptLookup", "RecordingAssisted", "hf_engine_version", "ENGINE_NAME",
           "SKU_SUFFIX"]

ENGINE_NAME = "transformers"
SKU_SUFFIX = "-hf"      # a transformers SKU is the hardware SKU id + "-hf"
DTYPES = ("bfloat16", "float32")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "seed")
BATCH_ONE = ("transformers runs prompt-lookup (assisted) generation at batch size 1 only; "
             "this engine is batch 1 at every γ (got {n} prompts in one call)")


def _default_threads() -> int:
    """The thread count vLLM's CPU backend would use here (the SKU id's ``<n>t``)."""
    from specbench.engine.hardware import cpu_threads
    return cpu_threads({
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "vllm_cpu_omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
        "vllm_cpu_num_of_reserved_cpu": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU",
                                                       "default")})


@dataclass(frozen=True)
class HFEngineSettings:
    model: str
    gamma: int = 0
    dtype: str = "bfloat16"
    max_model_len: int = 2048
    seed: int = 0
    threads: int | None = None          # torch intra-op threads; None: vLLM's CPU count
    prompt_lookup_max: int = 4          # -> transformers' max_matching_ngram_size
    attn_implementation: str = "eager"
    device: str = "cpu"
    # transformers would already look up candidates in the prompt on the prefill pass; vLLM's
    # prefill step emits one token and drafts nothing. False (default) matches vLLM.
    draft_in_prefill: bool = False
    # A draft checkpoint's folder: assisted generation with it instead of prompt lookup.
    draft_model: str | None = None

    def validate(self) -> None:
        if self.gamma < 0:
            raise ValueError(f"gamma must be >= 0, got {self.gamma}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES} for the transformers engine, "
                             f"got {self.dtype!r}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.prompt_lookup_max < 1:
            raise ValueError(f"prompt_lookup_max must be >= 1, got {self.prompt_lookup_max}")
        looks_like_path = self.model.startswith(("/", ".", "~")) or self.model.count("/") != 1
        if looks_like_path and not Path(self.model).expanduser().exists():
            raise FileNotFoundError(f"model path {self.model!r} does not exist")
        if self.draft_model is not None and not Path(self.draft_model).is_dir():
            raise FileNotFoundError(f"draft_model {self.draft_model!r} does not exist (build it "
                                    "with `specbench draft --depth K`)")

    def resolved_threads(self) -> int:
        return self.threads or _default_threads()

    def manifest_fields(self) -> dict:
        if self.draft_model is not None:
            from specbench.engine.drafts import draft_record
            return {**self._common_fields(),
                    "speculative_method": "assisted generation (assistant_model)",
                    "draft_model": draft_record(self.draft_model),
                    "assistant": {"num_assistant_tokens": "γ",
                                  "num_assistant_tokens_schedule": "constant",
                                  "assistant_confidence_threshold": 0}}
        return {**self._common_fields(), "speculative_method": "prompt_lookup",
                "ngram_window": {
                    "max_matching_ngram_size": self.prompt_lookup_max,
                    "min_matching_ngram_size": "1 (transformers has no minimum; vLLM's is "
                                               "prompt_lookup_min = 2)",
                    "occurrence": "leftmost with a continuation (vLLM: earliest)"}}

    def _common_fields(self) -> dict:
        return {"engine_name": ENGINE_NAME,
                "attn_implementation": self.attn_implementation,
                "graph_mode": "eager (transformers generate, no torch.compile)",
                "torch_threads": self.resolved_threads(),
                "draft_in_prefill": self.draft_in_prefill,
                "batch": "1 only (transformers refuses assisted generation above batch 1)"}


def hf_engine_version() -> dict:
    from importlib import metadata
    out = {"name": ENGINE_NAME}
    for dist in ("transformers", "torch"):
        try:
            out["version" if dist == "transformers" else dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out["version" if dist == "transformers" else dist] = "not installed"
    return out


class PromptLookupTally:
    """Cumulative per-forward-pass counts of a prompt-lookup engine, in vLLM's shape.

    Bookkeeping (exact, no timing): one *forward pass* is one round of transformers'
    assisted loop — ``get_candidates`` proposes ``k`` ≥ 0 tokens, the model verifies them in one
    forward, ``update_candidate_strategy`` reports ``num_matches`` = m (0 ≤ m ≤ k; transformers
    recounts m after cropping to ``max_new_tokens``), and the loop appends m + 1 tokens (the
    matched candidates and the model's own next token). Hence, over any span of calls,

        output tokens = accepted tokens + forward passes.

    The first forward of each call is the prefill; with ``draft_in_prefill=False`` it proposes
    nothing and emits one token, as vLLM's prefill step does, so decode steps = forward passes
    − 1 and output tokens = 1 (prefill) + decode steps + accepted tokens.

    vLLM's counters: ``drafts`` = passes with k ≥ 1, ``draft_tokens`` = Σk, ``accepted_tokens``
    = Σm, ``accepted_per_pos[i]`` = passes with m > i (i < γ). (vLLM counts drafts accepted in a
    request's last step even when ``max_tokens`` cuts them; transformers' m is after the cut.)
    """

    def __init__(self, width: int):
        if width < 1:
            raise ValueError(f"width (γ) must be >= 1, got {width}")
        self.width = width
        self.forwards = 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.per_pos = [0] * width

    def record(self, proposed: int, matched: int) -> None:
        if not 0 <= matched <= proposed <= self.width:
            raise ValueError(f"impossible step: {matched} matched of {proposed} proposed "
                             f"(γ = {self.width})")
        self.forwards += 1
        if proposed:
            self.drafts += 1
            self.draft_tokens += proposed
            self.accepted_tokens += matched
            for i in range(matched):
                self.per_pos[i] += 1

    def counters(self) -> SpecCounters:
        return SpecCounters(self.drafts, self.draft_tokens, self.accepted_tokens,
                            tuple(self.per_pos))


class _Recording:
    """A transformers candidate generator recording each forward pass's proposed and matched
    candidates into a :class:`PromptLookupTally` (and, with ``draft_in_prefill=False``,
    proposing nothing on the prefill pass). Mixed in before the generator's own class."""

    def __init__(self, *args, tally: PromptLookupTally, draft_in_prefill: bool = False,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self._start_recording(tally, draft_in_prefill)

    @classmethod
    def adopt(cls, generator, tally: PromptLookupTally, draft_in_prefill: bool = False):
        """The generator transformers built, its settings unchanged, now recording."""
        adopted = cls.__new__(cls)
        adopted.__dict__.update(vars(generator))
        adopted._start_recording(tally, draft_in_prefill)
        return adopted

    def _start_recording(self, tally: PromptLookupTally, draft_in_prefill: bool) -> None:
        self.tally, self.draft_in_prefill = tally, draft_in_prefill
        self.passes, self._proposed = 0, None

    def get_candidates(self, input_ids, **kwargs):
        if self.passes == 0 and not self.draft_in_prefill:
            candidates, logits = input_ids, None   # transformers' own "no candidate" answer
        else:
            candidates, logits = super().get_candidates(input_ids, **kwargs)
        self._proposed = int(candidates.shape[1] - input_ids.shape[1])
        return candidates, logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        if self._proposed is None:
            raise RuntimeError("update_candidate_strategy without get_candidates: "
                               "transformers' assisted loop changed; counters unreliable")
        self.tally.record(self._proposed, int(num_matches))
        self._proposed = None
        self.passes += 1
        return super().update_candidate_strategy(input_ids, scores, num_matches)


class RecordingPromptLookup(_Recording, PromptLookupCandidateGenerator):
    """transformers' prompt-lookup candidate generator, recording (:class:`_Recording`)."""


class RecordingAssisted(_Recording, AssistedCandidateGenerator):
    """transformers' assisted (draft-model) candidate generator, recording
    (:class:`_Recording`); not the class transformers checks for to retune its confidence
    threshold, so γ stays constant."""

    def _update_past_and_masks(self, input_ids, *args, **kwargs):
        # The prefill pass proposed nothing, so the draft has no cache yet and its inputs
        # still describe the prompt alone; transformers updates them only beside a cache. The
        # draft now reads the prompt and the first token: extend its attention mask (every
        # token is real) and drop the prompt's position ids (the draft's own generate derives
        # them again from the longer input).
        kwargs_ = self.assistant_kwargs
        if kwargs_.get("past_key_values") is None:
            import torch
            mask = kwargs_.get("attention_mask")
            if mask is not None and mask.shape[-1] < input_ids.shape[-1]:
                extra = mask.new_ones((mask.shape[0], input_ids.shape[-1] - mask.shape[-1]))
                kwargs_["attention_mask"] = torch.cat([mask, extra], dim=-1)
            position = kwargs_.get("position_ids")
            if position is not None and position.shape[-1] < input_ids.shape[-1]:
                kwargs_.pop("position_ids")
        return super()._update_past_and_masks(input_ids, *args, **kwargs)


#: transformers' generator class → its recording subclass.
RECORDING = {PromptLookupCandidateGenerator: RecordingPromptLookup,
             AssistedCandidateGenerator: RecordingAssisted}


class _TokenClock:
    """A ``generate`` streamer that timestamps each forward pass's tokens (BaseStreamer's
    ``put``/``end`` interface; the first ``put`` is the prompt and is skipped)."""

    def __init__(self):
        self.prompt_seen = False
        self.times: list[float] = []
        self.counts: list[int] = []

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.times.append(time.perf_counter())
        self.counts.append(int(value.numel()))

    def end(self) -> None:
        pass


@dataclass
class HFGeneration(Generation):
    """A :class:`Generation` with the candidate generator's own pass count (γ > 0), which the
    streamer's pass count (``iterations``) must equal."""
    candidate_passes: int | None = None
    token_times: list[list[float]] = field(default_factory=list)  # per request, per pass


class TransformersEngine:
    """A transformers model for one γ, batch 1. Use as a context manager."""

    def __init__(self, settings: HFEngineSettings):
        settings.validate()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
        from transformers.generation.utils import GenerationMixin

        self.settings = settings
        started = time.perf_counter()
        torch.set_num_threads(settings.resolved_threads())
        torch.manual_seed(settings.seed)   # the engine's generator, as vLLM's LLM(seed=...)
        self.tokenizer = AutoTokenizer.from_pretrained(settings.model)
        model = AutoModelForCausalLM.from_pretrained(
            settings.model, dtype=getattr(torch, settings.dtype),
            attn_implementation=settings.attn_implementation)
        self.model = model.to(settings.device).eval()
        # A clean default generation config: no EOS id (vLLM's ignore_eos), nothing else the
        # checkpoint's generation_config.json might fill in.
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.model.config.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id or 0
        self._pad = pad
        self.model.generation_config = GenerationConfig(
            bos_token_id=self.model.config.bos_token_id, pad_token_id=pad, eos_token_id=None)
        self.assistant = (self._load_assistant(settings)
                          if settings.draft_model is not None and settings.gamma > 0 else None)
        self.tally = PromptLookupTally(settings.gamma) if settings.gamma > 0 else None
        if settings.gamma > 0:
            if not hasattr(GenerationMixin, "_get_candidate_generator"):
                raise RuntimeError("this transformers version has no "
                                   "GenerationMixin._get_candidate_generator: the counter "
                                   "hook needs updating")
            self._install_recorder()
        self.prompt_notes: list[str] = []
        self.startup_s = time.perf_counter() - started

    def _load_assistant(self, settings: HFEngineSettings):
        """The draft as transformers' assistant: γ candidates every pass (constant schedule, no
        confidence threshold), no EOS (as the target)."""
        import torch
        from transformers import AutoModelForCausalLM
        draft = AutoModelForCausalLM.from_pretrained(
            settings.draft_model, dtype=getattr(torch, settings.dtype),
            attn_implementation=settings.attn_implementation).to(settings.device).eval()
        config = copy.deepcopy(self.model.generation_config)
        config.num_assistant_tokens = settings.gamma
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
        draft.generation_config = config
        return draft

    def _install_recorder(self) -> None:
        """Override ``_get_candidate_generator`` on this model instance only: transformers
        builds its candidate generator as usual, and the recording subclass adopts it."""
        model, tally, prefill = self.model, self.tally, self.settings.draft_in_prefill
        original = type(model)._get_candidate_generator
        expected = (AssistedCandidateGenerator if self.assistant is not None
                    else PromptLookupCandidateGenerator)
        def _get_candidate_generator(self_model, *args, **kwargs):
            generator = original(self_model, *args, **kwargs)
            if type(generator) is not expected:
                raise RuntimeError(f"expected transformers' {expected.__name__}, got "
                                   f"{type(generator).__name__}")
            return RECORDING[expected].adopt(generator, tally, prefill)

        model._get_candidate_generator = types.MethodType(_get_candidate_generator, model)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        model, self.model = getattr(self, "model", None), None
        self.assistant = None
        if model is not None:
            del model
            import gc
            gc.collect()

    def encode_chat(self, messages: list[dict], continue_final: bool = True) -> list[int]:
        return encode_messages(self.tokenizer, list(messages), self.prompt_notes, continue_final)

    @property
    def prompt_format(self) -> str:
        return "; ".join(sorted(set(self.prompt_notes))) or CHAT_TEMPLATE

    def counters(self) -> SpecCounters | None:
        return self.tally.counters() if self.tally is not None else None

    def _generation_config(self, max_tokens: int, sampling: dict):
        from transformers import GenerationConfig
        unknown = set(sampling) - set(SAMPLING_KEYS)
        if unknown:
            raise ValueError(f"sampling keys {sorted(unknown)} are not supported by the "
                             f"transformers engine (known: {', '.join(SAMPLING_KEYS)})")
        temperature = float(sampling.get("temperature", 0.0))
        top_k = int(sampling.get("top_k", 0) or 0)
        penalty = float(sampling.get("repetition_penalty", 1.0))
        sample = temperature > 0
        g = self.settings.gamma
        return GenerationConfig(
            max_new_tokens=max_tokens, min_new_tokens=None, do_sample=sample,
            temperature=temperature if sample else None,
            top_p=float(sampling.get("top_p", 1.0)) if sample else None,
            top_k=(top_k if top_k > 0 else 0) if sample else None,  # vLLM: off unless set
            repetition_penalty=penalty if penalty != 1.0 else None,
            num_beams=1, use_cache=True, eos_token_id=None, pad_token_id=self._pad,
            bos_token_id=self.model.config.bos_token_id,
            **({} if self.assistant is not None else {
                "prompt_lookup_num_tokens": g if g > 0 else None,
                "max_matching_ngram_size": self.settings.prompt_lookup_max if g > 0 else None}))

    def generate(self, prompts: list[list[int]], max_tokens: int | list[int],
                 sampling: dict | list[dict] | None = None,
                 read_counters: bool = True) -> HFGeneration:
        """One call of exactly ``max_tokens`` new tokens for one prompt (see the module text);
        ``iterations`` = forward passes (prefill included) counted by the streamer."""
        import torch
        if len(prompts) != 1:
            raise ValueError(BATCH_ONE.format(n=len(prompts)))
        prompt = list(prompts[0])
        length = max_tokens[0] if isinstance(max_tokens, list) else max_tokens
        params = (sampling[0] if isinstance(sampling, list) else sampling) or {}
        if len(prompt) + length > self.settings.max_model_len:
            raise ValueError(f"prompt ({len(prompt)}) + max_tokens ({length}) exceeds "
                             f"max_model_len {self.settings.max_model_len}")
        config = self._generation_config(length, params)
        if "seed" in params:
            torch.manual_seed(int(params["seed"]))
        ids = torch.tensor([prompt], dtype=torch.long, device=self.settings.device)
        clock = _TokenClock()
        before = self.counters() if read_counters else None
        passes_before = self.tally.forwards if self.tally is not None else 0
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                      generation_config=config, streamer=clock,
                                      **({"assistant_model": self.assistant}
                                         if self.assistant is not None else {}))
        wall = time.perf_counter() - start
        after = self.counters() if read_counters else None
        new = out[0, len(prompt):].tolist()
        if sum(clock.counts) != len(new):
            raise RuntimeError(f"streamer saw {sum(clock.counts)} tokens, generate returned "
                               f"{len(new)}")
        passes = (self.tally.forwards - passes_before) if self.tally is not None else None
        if passes == 0:
            raise RuntimeError("γ > 0 but the recording candidate generator was never used: "
                               "no counters (transformers did not speculate)")
        return HFGeneration(
            wall_s=wall,
            ttft_s=[clock.times[0] - start],
            decode_s=[clock.times[-1] - clock.times[0]],
            output_tokens=[len(new)],
            token_ids=[new],
            texts=[self.tokenizer.decode(new)],
            counters=(after - before) if (before is not None and after is not None) else None,
            counters_after=after,
            iterations=len(clock.times),
            candidate_passes=passes,
            token_times=[[t - start for t in clock.times]])

    def describe(self) -> dict:
        return {"settings": asdict(self.settings), "startup_s": round(self.startup_s, 2),
                "prompt_format": self.prompt_format, "engine": hf_engine_version(),
                **self.settings.manifest_fields()}
