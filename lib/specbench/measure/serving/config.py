"""What a serving run measures: its SLO (defined in :mod:`specbench.theory.slo`), the load
definition and the run's configuration."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from specbench.engine.hardware import resolve_dtype
from specbench.engine.vllm_engine import EngineSettings, on_gpu
from specbench.measure.workloads import builtin as workloads
from specbench.measure.workloads.operator_file import read_prompts
from specbench.store.runs import REPO_ROOT
from specbench.theory.slo import CPU_SLO, GPU_SLO, SLO

__all__ = ["LOOPBACK", "DEFAULT_DATASET", "PERCENTILES", "METRICS", "SLO", "CPU_SLO", "GPU_SLO",
           "default_slo", "LoadError", "spec_bench_categories", "LoadDefinition", "ServingConfig",
           "Arm", "draft_arm", "plan_arm", "load_plan", "arm_from_serve_command", "FILE_PREFIX",
           "workload_file"]

LOOPBACK = "127.0.0.1"
# A workload named "file:<path>" is an operator's prompt file (vLLM's custom-dataset JSONL).
FILE_PREFIX = "file:"
DEFAULT_DATASET = REPO_ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"
PERCENTILES = (50, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")


def default_slo() -> SLO:
    """The SLO of this machine's kind (:mod:`specbench.theory.slo` says why each)."""
    return GPU_SLO if on_gpu() else CPU_SLO


# -- the load definition ----------------------------------------------------------------------

class LoadError(ValueError):
    """A load definition that cannot run; raised before any server starts."""


def spec_bench_categories(path: str | Path) -> dict[str, list[int]]:
    """Question ids per category of a Spec-Bench ``question.jsonl``, in file order."""
    path = Path(path)
    if not path.is_file():
        raise LoadError(f"{path}: Spec-Bench question file not found")
    found: dict[str, list[int]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            found.setdefault(row["category"], []).append(int(row["question_id"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise LoadError(f"{path}: line {number}: not a Spec-Bench question "
                            f"(needs question_id, category, turns): {exc}") from exc
    if not found:
        raise LoadError(f"{path}: the dataset is empty (no questions)")
    return found


@dataclass(frozen=True)
class LoadDefinition:
    """What the benchmark client sends. ``workloads`` names 'repeat'/'open' (this project's
    prompts) or Spec-Bench categories; each level sends ``num_prompts`` requests of exactly
    ``output_len`` tokens, either with at most ``concurrency`` in flight (closed loop,
    all requests released at once) or at a Poisson ``request_rate`` (open loop)."""
    workloads: tuple[str, ...] = ("repeat", "open", "summarization", "translation",
                                  "math_reasoning")
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)
    request_rates: tuple[float, ...] = (1.0,)
    num_prompts: int = 8
    output_len: int = 64
    slo: SLO = field(default_factory=default_slo)
    dataset_path: str = str(DEFAULT_DATASET)
    warmup_prompts: int = 2
    seed: int = 0

    def validate(self) -> dict[str, list[int]]:
        """Fail on a load that cannot run; return the Spec-Bench question ids it uses."""
        if not self.workloads:
            raise LoadError("workloads must name at least one workload")
        if not self.concurrencies and not self.request_rates:
            raise LoadError("give at least one concurrency or request rate")
        for c in self.concurrencies:
            if isinstance(c, bool) or int(c) != c or c < 1:
                raise LoadError(f"concurrency must be a whole number >= 1, got {c!r}")
        for r in self.request_rates:
            if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
                raise LoadError(f"request rate must be a finite number > 0 requests/s, "
                                f"got {r!r}")
        if int(self.num_prompts) != self.num_prompts or self.num_prompts < 1:
            raise LoadError(f"num_prompts must be >= 1, got {self.num_prompts!r}")
        if int(self.output_len) != self.output_len or self.output_len < 2:
            raise LoadError(f"output_len must be >= 2 tokens (TPOT needs two), got "
                            f"{self.output_len!r}")
        if self.warmup_prompts < 0:
            raise LoadError(f"warmup_prompts must be >= 0, got {self.warmup_prompts!r}")
        try:
            self.slo.validate()
        except ValueError as exc:
            raise LoadError(str(exc)) from exc
        for w in self.workloads:
            if (path := workload_file(w)) is not None:
                try:
                    read_prompts(path)
                except (ValueError, FileNotFoundError) as exc:
                    raise LoadError(str(exc)) from exc
        categories = [w for w in self.workloads
                      if w not in workloads.WORKLOADS and workload_file(w) is None]
        if not categories:
            return {}
        available = spec_bench_categories(self.dataset_path)
        ids = {}
        for category in categories:
            if category not in available:
                raise LoadError(
                    f"workload {category!r} is neither a project workload "
                    f"({', '.join(sorted(workloads.WORKLOADS))}) nor a Spec-Bench category of "
                    f"{self.dataset_path} ({', '.join(sorted(available))})")
            # The client takes the first num_prompts of a category in file order
            # (--disable-shuffle); fewer would be oversampled (repeated).
            ids[category] = available[category][:self.num_prompts]
        return ids

    def levels(self) -> list[tuple[str, float]]:
        """("concurrency", c) and ("rate", r) levels, in the order they are measured."""
        return ([("concurrency", int(c)) for c in self.concurrencies]
                + [("rate", float(r)) for r in self.request_rates])


def workload_file(workload: str) -> Path | None:
    """The prompt file a ``file:<path>`` workload names; None for any other workload."""
    return Path(workload[len(FILE_PREFIX):]) if workload.startswith(FILE_PREFIX) else None


# -- the arms: fixed γ, and the operator's plan ----------------------------------------------

@dataclass(frozen=True)
class Arm:
    """One server configuration under load: a fixed γ (0 is speculation off), or the plan's
    configuration (a static γ, or vLLM's batch-size schedule of γ where the plan gave one and
    this engine build honours it). An arm with a ``draft_depth`` drafts with the model's
    first K layers (vLLM's ``draft_model`` proposer, :mod:`specbench.engine.drafts`) instead of
    n-gram lookup."""
    name: str
    gamma: int
    schedule: tuple[tuple[int, int, int], ...] | None = None
    draft_depth: int | None = None

    @property
    def planned(self) -> bool:
        return self.name == "plan"

    @property
    def configuration(self) -> tuple:
        """What a server for this arm serves: two arms of one configuration are one server."""
        return (self.gamma, self.schedule, self.draft_depth)


def draft_arm(depth: int, gamma: int) -> Arm:
    """The arm drafting ``gamma`` tokens with the depth-``depth`` draft."""
    return Arm(f"draft k{depth} γ={gamma}", int(gamma), draft_depth=int(depth))


def load_plan(path: str | Path) -> dict:
    """The answer of ``specbench plan --calibration … --workload-file … --json``, checked: an
    unreadable file or a missing field is one error naming the file and the field."""
    path = Path(path)
    try:
        plan = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise LoadError(f"{path}: not a plan (the JSON of `specbench plan --calibration RUN "
                        f"--workload-file FILE --json`): {exc}") from exc
    for field_name in ("calibration", "static_gamma", "batch_schedule", "recommendation",
                       "engine"):
        if not isinstance(plan, dict) or field_name not in plan:
            raise LoadError(f"{path}: field {field_name!r} missing: not the JSON of "
                            "`specbench plan --calibration RUN --workload-file FILE --json`")
    plan_arm(plan, path)        # a schedule or γ that cannot be served fails here
    return plan


def plan_arm(plan: dict, path: str | Path = "the plan") -> Arm:
    """The server the plan says to run: its batch-size schedule where it gave one and the
    engine honoured it when probed, else its static γ (0: speculation off)."""
    schedule = plan.get("batch_schedule")
    probe = (plan.get("engine") or {}).get("schedule_probe") or {}
    try:
        if schedule and plan.get("serve_dynamic") and probe.get("honoured"):
            entries = tuple(tuple(int(x) for x in entry) for entry in schedule)
            if any(len(e) != 3 or e[0] < 1 or e[1] < e[0] or e[2] < 0 for e in entries):
                raise ValueError(f"expected [first batch, last batch, γ] ranges, got {schedule}")
            return Arm("plan", max(e[2] for e in entries), entries)
        gamma = int(plan["static_gamma"])
        if gamma < 0:
            raise ValueError(f"a γ >= 0, got {gamma}")
        return Arm("plan", gamma)
    except (TypeError, ValueError) as exc:
        raise LoadError(f"{path}: field 'batch_schedule'/'static_gamma' cannot be served: "
                        f"{exc}") from exc


def arm_from_serve_command(line: str) -> Arm:
    """The speculative configuration of a ``vllm serve … --speculative-config '{…}'`` line as
    `specbench plan` prints it (γ, and the batch-size schedule where there is one), so the
    printed flags can be served as they are."""
    import shlex
    words = shlex.split(line)
    if "--speculative-config" not in words:
        return Arm("plan", 0)
    config = json.loads(words[words.index("--speculative-config") + 1])
    schedule = config.get("num_speculative_tokens_per_batch_size")
    return Arm("plan", int(config["num_speculative_tokens"]),
               tuple(tuple(int(x) for x in e) for e in schedule) if schedule else None)


@dataclass
class ServingConfig:
    model: str | None = None
    gammas: tuple[int, ...] = (0, 2, 4)
    load: LoadDefinition = field(default_factory=LoadDefinition)
    dtype: str | None = None   # None: this machine's fast dtype (hardware.resolve_dtype)
    root: str = "runs"
    price_per_replica_hour: float = 0.10   # USD; a parameter, not a measurement
    demand_tokens_per_s: float = 1000.0    # peak output-token demand the fleet must serve
    ready_timeout_s: float = 300.0
    notes: str = ""
    # A short run whose servers' step records price a plan's load prediction (`make
    # plan-under-load`'s probe): recorded in the manifest, so the serving chapter skips it.
    step_cost_probe: bool = False
    # The operator's plan (`specbench plan … --json`, read by load_plan): measured as one more
    # arm beside the fixed γ, so its regret is read under the same load.
    plan: dict | None = None
    # Draft-model arms, (draft depth, γ) each (`make serving-drafts`): a run with any is of
    # kind 'draft-serving', kept apart from the n-gram serving runs every analysis pools.
    drafts: tuple[tuple[int, int], ...] = ()

    def arms(self) -> list[Arm]:
        """Fixed γ in the order given, then the draft arms, then the plan's configuration
        where there is a plan."""
        fixed = [Arm("off" if g == 0 else f"γ={g}", int(g)) for g in self.gammas]
        drafted = [draft_arm(depth, gamma) for depth, gamma in self.drafts]
        return fixed + drafted + ([plan_arm(self.plan)] if self.plan else [])

    @property
    def kind(self) -> str:
        """The run kind: 'draft-serving' where an arm drafts with a draft model."""
        return "draft-serving" if self.drafts else "serving"

    def draft_folder(self, depth: int) -> str:
        """The depth-``depth`` draft of the served model, built once (a depth out of range
        is a :class:`~specbench.engine.drafts.DraftError`, before any server starts)."""
        from specbench.engine.drafts import built_draft
        return built_draft(self.resolved_model(), depth)

    def engine_settings(self, arm: Arm, **extra) -> EngineSettings:
        """The engine a server for ``arm`` runs."""
        draft = self.draft_folder(arm.draft_depth) if arm.draft_depth and arm.gamma else None
        return EngineSettings(model=self.resolved_model(), dtype=self.dtype, gamma=arm.gamma,
                              batch_schedule=arm.schedule, draft_model=draft,
                              speculative_method="draft_model" if draft else "ngram", **extra)

    def __post_init__(self):
        self.dtype = resolve_dtype(self.dtype)

    @classmethod
    def from_manifest(cls, manifest: dict) -> "ServingConfig":
        """The configuration a serving run was started with, read back from its manifest: a
        resumed run measures its missing levels under the load its first levels had."""
        grid, load, slo = manifest["grid"], manifest["load"], manifest["slo"]
        economics = manifest["economics"]
        dataset = os.path.normpath(REPO_ROOT / manifest["dataset"]["spec_bench_path"])
        return cls(
            model=manifest["model"]["path"], gammas=tuple(grid["gammas"]),
            load=LoadDefinition(
                workloads=tuple(grid["workloads"]), concurrencies=tuple(grid["concurrencies"]),
                request_rates=tuple(grid["request_rates"]), num_prompts=load["num_prompts"],
                output_len=load["output_len"], slo=SLO(slo["ttft_ms"], slo["tpot_ms"],
                                                       slo.get("why", "")),
                dataset_path=dataset, warmup_prompts=load["warmup_prompts"], seed=load["seed"]),
            dtype=manifest["dtype"], price_per_replica_hour=economics["price_per_replica_hour_usd"],
            demand_tokens_per_s=economics["demand_tokens_per_s"],
            notes=manifest.get("notes", ""), plan=manifest.get("plan"),
            step_cost_probe=bool(manifest.get("step_cost_probe", False)),
            drafts=tuple(tuple(int(x) for x in pair) for pair in grid.get("drafts", [])))

    def validate(self) -> dict[str, list[int]]:
        if not self.gammas or 0 not in self.gammas:
            raise LoadError("gammas must include 0: speedups are measured against no "
                            "speculation")
        for g in self.gammas:
            if isinstance(g, bool) or int(g) != g or g < 0:
                raise LoadError(f"gamma must be a whole number >= 0, got {g!r}")
        for pair in self.drafts:
            if len(pair) != 2 or any(isinstance(x, bool) or int(x) != x for x in pair) \
                    or pair[1] < 1:
                raise LoadError(f"a draft arm is (draft depth, γ >= 1), got {pair!r}")
        for name in ("price_per_replica_hour", "demand_tokens_per_s"):
            if not getattr(self, name) > 0:
                raise LoadError(f"{name} must be > 0, got {getattr(self, name)!r}")
        ids = self.load.validate()
        for arm in self.arms():     # a plan's schedule this engine build cannot take fails here
            self.engine_settings(arm).validate()
        return ids

    def resolved_model(self) -> str:
        if self.model:
            return str(self.model)
        from specbench.engine.assets import embedded_model_dir
        return str(embedded_model_dir())


