"""The γ decision: eq. 1 with the model's inputs (chosen in one place, :func:`model_inputs`),
the recommendation rule, and explicit-number plans."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specbench.report.plan.acceptance import counter_rows, per_position_acceptance
from specbench.store.cache import memoised
from specbench.store.runs import DEFAULT_ROOT, Run
from specbench.theory._validate import check
from specbench.theory.gamma_rule import (  # the one rule, re-exported here
    TIE_RTOL,
    fastest,
    recommend,
    recommend_by_speedup,
    relative_pot,
)
from specbench.theory.roofline import ModelShape, Sku, verify_overhead

__all__ = ["NEAR_BEST_PCT", "TIE_RTOL", "recommend", "fastest", "relative_pot",
           "recommend_by_speedup", "predicted_pot", "plan_explicit", "parse_d", "ModelInputs",
           "model_inputs", "run_acceptance", "next_token_divisor"]


# A recommendation that misses the fastest measured γ but whose own measured speedup is within
# this many percent of the fastest is reported as near it (about the repetitions' spread).
NEAR_BEST_PCT = 5.0


def predicted_pot(t_base, alpha, gamma, d, host_ms, divisor=None):
    """Eq. 1 with the host term only for γ > 0 and, optionally, an exact divisor."""
    if gamma == 0:
        return float(t_base)
    cycle = t_base * (1 + d) + host_ms
    return float(cycle / (divisor if divisor is not None else alpha * gamma + 1))


def plan_explicit(t_base_ms: float, alpha: float, d_by_gamma: dict[int, float],
                  host_ms: float = 0.0) -> dict:
    """``{"recommended_gamma": g, "rows": [{"gamma", "pot_ms", "speedup"}, ...]}``, γ=0 first.

    pot = (T·(1 + D) + H) / (A·γ + 1) for every γ given; the γ = 0 row is pot = T.
    """
    check("t_base_ms", t_base_ms, low=0, low_open=True)
    check("alpha", alpha, low=0, high=1)
    check("host_ms", host_ms, low=0)
    for gamma, d in d_by_gamma.items():
        if int(gamma) != gamma or gamma < 1:
            raise ValueError(f"d: γ must be a whole number >= 1, got {gamma!r}")
        check(f"d at γ={gamma}", d, low=-1, low_open=True)
    pots = {0: float(t_base_ms)}
    pots.update({int(g): predicted_pot(t_base_ms, alpha, int(g), d, host_ms)
                 for g, d in sorted(d_by_gamma.items())})
    rows = [{"gamma": g, "pot_ms": p, "speedup": float(t_base_ms) / p} for g, p in pots.items()]
    return {"recommended_gamma": recommend(pots, t_base_ms), "rows": rows}


def parse_d(text: str) -> dict[int, float]:
    """``"2:0.015,4:0.08"`` → ``{2: 0.015, 4: 0.08}``; raises ``ValueError`` naming the item."""
    out: dict[int, float] = {}
    for item in text.split(","):
        item = item.strip()
        gamma_text, sep, d_text = item.partition(":")
        if not sep or not d_text.strip():
            raise ValueError(f"γ {gamma_text or item!r} has no d (expected G:D, e.g. 2:0.015)")
        try:
            gamma = int(gamma_text)
        except ValueError:
            raise ValueError(
                f"malformed γ in {item!r}: expected a whole number before ':'") from None
        try:
            d = float(d_text)
        except ValueError:
            raise ValueError(f"malformed d in {item!r}: expected a number after ':'") from None
        if gamma < 1:
            raise ValueError(f"γ must be >= 1 in {item!r} (the γ=0 row is always shown)")
        if not math.isfinite(d) or d <= -1:
            raise ValueError(f"d must be a finite number > -1 in {item!r}")
        if gamma in out:
            raise ValueError(f"γ {gamma} is given twice")
        out[gamma] = d
    return out


# -- the model's inputs: the ONE place to swap the model -----------------------------------

@dataclass(frozen=True)
class ModelInputs:
    """What eq. 1 needs for one SKU × batch × workload, and where each piece came from."""
    t_base_ms: float
    alpha_by_gamma: dict[int, float]
    d_by_gamma: dict[int, float]           # covers every measured γ and γ+1 (for the margin)
    h_ms: float
    divisor_by_gamma: dict[int, float]     # exact tokens per step from counters, where given
    sources: dict[str, str] = field(default_factory=dict)
    # For the next proposed token: the share of steps that drafted and the per-position α
    # fitted to the accepted prefixes (counters), where the run records them.
    share_by_gamma: dict[int, float] = field(default_factory=dict)
    alpha_pp_by_gamma: dict[int, float] = field(default_factory=dict)


def _roofline_d(run: Run, run_cells: pd.DataFrame, gammas, batch: int) -> dict[int, float]:
    # The same predictor and context as analysis._verify_overheads, at any γ (not only the
    # measured ones), so the marginal token's d(γ+1) comes from the model, not from a cell.
    shape, sku = run.manifest.get("model_shape"), run.manifest.get("roofline_sku")
    if not shape or not sku:
        return {int(g): 0.0 for g in gammas}
    context = int(run_cells["prompt_tokens"].mean() + run.manifest["grid"]["max_tokens"] / 2)
    return {int(g): float(verify_overhead(ModelShape(**shape), Sku(**sku), int(g), int(batch),
                                          context)) for g in gammas}


@dataclass(frozen=True)
class _HostInputs:
    """Per run id: its host session, and the verify-step table of the latest kernel
    microbenchmark of its SKU on that session (runs without one are absent: another host's
    kernels are not this one's)."""
    sessions: dict[str, str]
    verify: dict[str, pd.DataFrame]


@memoised
def _host_inputs(root) -> _HostInputs:
    """Read once per store: the planner asks for every workload × batch of every SKU."""
    from specbench.store.hosts import host_sessions, latest_per_session
    from specbench.store.runs import load_runs
    every = load_runs(root)
    sessions = host_sessions(every)
    latest = latest_per_session(every, sessions)
    return _HostInputs(sessions, {r.run_id: latest[(r.sku, sessions[r.run_id])].table("verify.csv")
                                  for r in every if (r.sku, sessions[r.run_id]) in latest})


def _micro_delta(host: _HostInputs, run: Run, batch: int):
    """Extra kernel ms of a verify step as a function of γ (linear between the measured γ),
    from the run's host session's microbenchmark, or None."""
    v = host.verify.get(run.run_id)
    if v is None:
        return None
    v = v[v["batch"] == batch].sort_values("gamma")
    if v.empty:
        return None
    return lambda g: float(np.interp(g, v["gamma"], v["delta_ms"]))


def run_acceptance(run: Run) -> pd.DataFrame:
    """:func:`per_position_acceptance` of the run's counters: what :func:`model_inputs` reads
    per workload × batch (a caller planning many of them reads it once and hands it in)."""
    return per_position_acceptance(counter_rows(run))


def model_inputs(run_cells: pd.DataFrame, run: Run, batch: int, workload: str,
                 cells: pd.DataFrame | None = None, root=DEFAULT_ROOT,
                 acceptance: pd.DataFrame | None = None) -> ModelInputs:
    """t_base, counter α, d(γ), host term h and exact divisor for one batch × workload.

    With ``cells`` (:func:`specbench.derive.analysis.sweep_cells`), the book's headline model: a
    drafting share s of the steps pays the microbenchmarked verify cost d and the cross-fitted
    host term h, so eq. 1's d(γ) becomes s·(d + h/t_base) and h_ms = 0 (d at γ+1 interpolated
    between the microbenchmarked γ). Without them, or for a SKU with no microbenchmark, the
    frozen roofline with h = 0 (the paper's eq. 1). ``acceptance`` is the run's
    :func:`run_acceptance`, read here where not given.
    """
    mine = run_cells[(run_cells["batch"] == batch) & (run_cells["workload"] == workload)]
    base = mine[mine["gamma"] == 0]
    if base.empty:
        raise ValueError(f"{run.path}: no γ=0 cell for workload {workload!r}, batch {batch}")
    spec = mine[mine["gamma"] > 0].sort_values("gamma")
    gammas = [int(g) for g in spec["gamma"]]
    t_base = float(base["pot_ms"].iloc[0])
    share = _drafting_share(spec, run)
    delta, headline = _headline(cells, run, batch, workload, root)
    if headline is not None and len(headline):
        h_ratio = float(headline["h_ratio"].iloc[0])
        d_by_gamma = {}
        for g in sorted(set(gammas) | {g + 1 for g in gammas}):
            s = share.get(g, share.get(g - 1, 1.0))
            t = float(headline["t_base_ms"].get(g, headline["t_base_ms"].get(g - 1, t_base)))
            d_by_gamma[g] = s * (delta(g) / t + h_ratio)
        d_source = ("headline: s·(d + h/t_base), d from the kernel microbenchmark, h "
                    "cross-fitted on the other workloads")
        h_source = f"inside d (h/t_base = {h_ratio:.3f}, paid by drafting steps)"
    else:
        d_by_gamma = _roofline_d(run, run_cells, sorted(set(gammas) | {g + 1 for g in gammas}),
                                 batch)
        d_source = ("roofline (manifest ceilings)" if run.manifest.get("model_shape")
                    else "none recorded: d = 0")
        h_source = "none (h = 0, the paper's eq. 1)"
    divisor = {}
    if "tokens_per_step" in spec:
        divisor = {int(g): float(t)
                   for g, t in zip(spec["gamma"], spec["tokens_per_step"], strict=True)
                   if pd.notna(t) and t > 0}
    pp = run_acceptance(run) if acceptance is None else acceptance
    pp = pp[(pp["workload"] == workload) & (pp["batch"] == batch)]
    return ModelInputs(
        t_base_ms=t_base,
        alpha_by_gamma={int(g): float(a)
                        for g, a in zip(spec["gamma"], spec["alpha"], strict=True)},
        d_by_gamma=d_by_gamma, h_ms=0.0, divisor_by_gamma=divisor,
        sources={"t_base": "measured γ=0 cell", "alpha": "engine counters", "d": d_source,
                 "h": h_source, "divisor": "tokens per step from counters (exact)"},
        share_by_gamma=share,
        alpha_pp_by_gamma={int(g): float(a) for g, a in
                           zip(pp["gamma"], pp["alpha_per_position"], strict=True) if pd.notna(a)})


def _headline(cells: pd.DataFrame | None, run: Run, batch: int, workload: str, root):
    """The verify cost d(γ) of the run's host session's microbenchmark and the headline
    model's speculative cells of the same session, SKU, batch and workload (greedy, by γ); None
    for both without ``cells`` or a microbenchmark."""
    host = _host_inputs(root) if cells is not None else None
    delta = _micro_delta(host, run, batch) if host is not None else None
    if delta is None:
        return None, None
    # The run's own host session: another host's h and t_base are not this one's.
    return delta, cells[(cells["host_session"] == host.sessions.get(run.run_id))
                        & (cells["sku"] == run.sku) & (cells["batch"] == batch)
                        & (cells["workload"] == workload) & (cells["temperature"] == 0)
                        & (cells["gamma"] > 0)].set_index("gamma")


def _drafting_share(spec: pd.DataFrame, run: Run) -> dict[int, float]:
    """Drafting steps / decode steps per γ, from counters and token counts. Newer runs store
    it; older ones store drafts and the divisor, whose decoded tokens give the steps back."""
    if "drafting_share" in spec and spec["drafting_share"].notna().all():
        return {int(g): float(x)
                for g, x in zip(spec["gamma"], spec["drafting_share"], strict=True)}
    if not {"drafts", "tokens_per_step", "n_reps"} <= set(spec.columns):
        return {}
    decoded = spec["n_reps"] * spec["batch"] * (run.manifest["grid"]["max_tokens"] - 1)
    steps = decoded / spec["tokens_per_step"]
    return {int(g): float(min(1.0, dr / st)) for g, dr, st in
            zip(spec["gamma"], spec["drafts"], steps, strict=True) if st > 0}


def next_token_divisor(inputs: ModelInputs, gamma: int) -> tuple[float, str]:
    """Tokens per step at γ+1, and how it was had.

    Each drafting step emits 1 + Σ_{i=1..γ} α^i tokens under independent per-position
    acceptance, so one more proposed position adds α^(γ+1) per drafting step:
    D(γ+1) = D(γ) + s·α^(γ+1), with D the counter divisor, s the drafting share and α the
    per-position α, all from counters. Without them: the paper's α(γ+1)+1.
    """
    exact = inputs.divisor_by_gamma.get(gamma)
    share, alpha_pp = inputs.share_by_gamma.get(gamma), inputs.alpha_pp_by_gamma.get(gamma)
    if exact and share is not None and alpha_pp is not None:
        return exact + share * alpha_pp ** (gamma + 1), "counters"
    return inputs.alpha_by_gamma[gamma] * (gamma + 1) + 1, "αγ+1"
