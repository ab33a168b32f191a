"""The operator's answer: which γ to run, what it saves, what it costs — from numbers or runs.

Two ways in, one rule out:

* **explicit numbers** (:func:`plan_explicit`): a baseline step t_base, one acceptance α and the
  verify overhead d(γ) of every candidate γ give eq. 1's per-token latency
  pot(γ) = (t_base·(1 + d(γ)) + h) / (αγ + 1), h only for γ > 0;
* **measured runs** (:func:`plan_from_runs`): the SKU's latest sweep supplies t_base (its γ=0
  cell), the counter α and the exact divisor (tokens per step from counters), the model
  supplies d(γ) and the per-cycle host term h — all through :func:`model_inputs`, the one
  place where the model's inputs are chosen.

The recommendation (:func:`recommend`) is the γ with the lowest predicted pot; speculation is
off (γ = 0) unless some γ is strictly faster than t_base, and a tie goes to the smaller γ.

The rest turns measurements into the economics worksheet's terms: verification overhead v and
break-even acceptance (:func:`break_even_table`), per-position acceptance from the counters
(:func:`per_position_acceptance`), whole-replica cost per million SLO-qualified tokens
(:func:`priced`), hypothetical draft-model KV capacity (:func:`hypothetical_draft_kv`), the
cells where speculation did not pay (:func:`negative_cells`), and the planning chapter's named
numbers (:func:`chapter_numbers`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from specbench.theory import economics

from specbench.theory import model
from specbench.theory._validate import check
from specbench.theory.roofline import ModelShape, Sku, verify_overhead
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs

__all__ = [
    "recommend", "plan_explicit", "parse_d", "ModelInputs", "model_inputs", "next_token_divisor",
    "plan_from_runs",
    "format_plan", "per_position_acceptance", "break_even_table", "priced", "priced_decisions",
    "recommendation_summary", "counter_rows", "kv_bytes_per_token", "hypothetical_draft_kv",
    "rep_intervals", "negative_cells", "chapter_numbers", "main",
]

# A recommendation that misses the fastest measured γ but whose own measured speedup is within
# this many percent of the fastest is reported as near it (about the repetitions' spread).
NEAR_BEST_PCT = 5.0

# Two predicted latencies closer than this (relative) are a tie: eq. 1 with a compute-bound
# d(γ) ∝ γ gives the same pot at several γ, equal up to the last bits of a float.
TIE_RTOL = 1e-9


# -- the rule ------------------------------------------------------------------------------

def recommend(pot_by_gamma: dict[int, float], t_base: float) -> int:
    """The γ with the lowest pot; 0 unless it is strictly below ``t_base``; ties → smaller γ."""
    best_gamma, best_pot = 0, float(t_base)
    for gamma in sorted(g for g in pot_by_gamma if g > 0):
        pot = float(pot_by_gamma[gamma])
        if pot < best_pot and not math.isclose(pot, best_pot, rel_tol=TIE_RTOL):
            best_gamma, best_pot = gamma, pot
    return best_gamma


def _pot(t_base, alpha, gamma, d, host_ms, divisor=None):
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
    pots.update({int(g): _pot(t_base_ms, alpha, int(g), d, host_ms)
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
            raise ValueError(f"malformed γ in {item!r}: expected a whole number before ':'")
        try:
            d = float(d_text)
        except ValueError:
            raise ValueError(f"malformed d in {item!r}: expected a number after ':'")
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


def _micro_delta(root, sku: str, batch: int):
    """The latest kernel microbenchmark of the SKU: extra kernel ms of a verify step as a
    function of γ (linear between the measured γ), or None without such a run."""
    from specbench.measure.microbench import latest_verify
    v = latest_verify(root).get(sku)
    if v is None:
        return None
    v = v[v["batch"] == batch].sort_values("gamma")
    if v.empty:
        return None
    return lambda g: float(np.interp(g, v["gamma"], v["delta_ms"]))


def model_inputs(run_cells: pd.DataFrame, run: Run, batch: int, workload: str,
                 cells: pd.DataFrame | None = None, root=DEFAULT_ROOT) -> ModelInputs:
    """t_base, counter α, d(γ), host term h and exact divisor for one batch × workload.

    With ``cells`` (:func:`specbench.report.analysis.sweep_cells`), the book's headline model: a
    drafting share s of the steps pays the microbenchmarked verify cost d and the cross-fitted
    host term h, so eq. 1's d(γ) becomes s·(d + h/t_base) and h_ms = 0 (d at γ+1 interpolated
    between the microbenchmarked γ). Without them, or for a SKU with no microbenchmark, the
    frozen roofline with h = 0 (the paper's eq. 1).
    """
    mine = run_cells[(run_cells["batch"] == batch) & (run_cells["workload"] == workload)]
    base = mine[mine["gamma"] == 0]
    if base.empty:
        raise ValueError(f"{run.path}: no γ=0 cell for workload {workload!r}, batch {batch}")
    spec = mine[mine["gamma"] > 0].sort_values("gamma")
    gammas = [int(g) for g in spec["gamma"]]
    t_base = float(base["pot_ms"].iloc[0])
    share = _drafting_share(spec, run)
    delta = _micro_delta(root, run.sku, batch) if cells is not None else None
    headline = None
    if delta is not None:
        headline = cells[(cells["sku"] == run.sku) & (cells["batch"] == batch)
                         & (cells["workload"] == workload) & (cells["temperature"] == 0)
                         & (cells["gamma"] > 0)].set_index("gamma")
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
        divisor = {int(g): float(t) for g, t in zip(spec["gamma"], spec["tokens_per_step"])
                   if pd.notna(t) and t > 0}
    pp = per_position_acceptance(counter_rows(run))
    pp = pp[(pp["workload"] == workload) & (pp["batch"] == batch)]
    return ModelInputs(
        t_base_ms=t_base,
        alpha_by_gamma={int(g): float(a) for g, a in zip(spec["gamma"], spec["alpha"])},
        d_by_gamma=d_by_gamma, h_ms=0.0, divisor_by_gamma=divisor,
        sources={"t_base": "measured γ=0 cell", "alpha": "engine counters", "d": d_source,
                 "h": h_source, "divisor": "tokens per step from counters (exact)"},
        share_by_gamma=share,
        alpha_pp_by_gamma={int(g): float(a) for g, a in
                           zip(pp["gamma"], pp["alpha_per_position"]) if pd.notna(a)})


def _drafting_share(spec: pd.DataFrame, run: Run) -> dict[int, float]:
    """Drafting steps / decode steps per γ, from counters and token counts. Newer runs store
    it; older ones store drafts and the divisor, whose decoded tokens give the steps back."""
    if "drafting_share" in spec and spec["drafting_share"].notna().all():
        return {int(g): float(x) for g, x in zip(spec["gamma"], spec["drafting_share"])}
    if not {"drafts", "tokens_per_step", "n_reps"} <= set(spec.columns):
        return {}
    decoded = spec["n_reps"] * spec["batch"] * (run.manifest["grid"]["max_tokens"] - 1)
    steps = decoded / spec["tokens_per_step"]
    return {int(g): float(min(1.0, dr / st)) for g, dr, st in
            zip(spec["gamma"], spec["drafts"], steps) if st > 0}


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


# -- from runs -----------------------------------------------------------------------------

class PlanInputError(LookupError):
    """A from-runs request the store cannot answer; ``argument`` names the CLI option."""

    def __init__(self, argument: str, message: str):
        super().__init__(message)
        self.argument = argument


def _sku_runs(root, sku: str) -> Run:
    """The SKU's latest sweep with greedy cells (a run of temperature cells alone is not a
    plan's basis: planning is for greedy decoding)."""
    runs = [r for r in load_runs(root, kind="sweep") if r.sku == sku and not _ok_cells(r).empty]
    if not runs:
        known = sorted({r.sku for r in load_runs(root, kind="sweep")})
        raise PlanInputError("--sku", f"no complete sweep run of SKU {sku!r} under {root}/ "
                             f"(SKUs with a sweep: {', '.join(known) or 'none'})")
    return runs[-1]


def _ok_cells(run: Run) -> pd.DataFrame:
    """The run's measured greedy cells, with the counter divisor as ``tokens_per_step``.

    Runs since the paired design name the divisor ``emitted_per_step`` and may add a
    temperature axis; planning is for greedy decoding (temperature 0), as the older runs are.
    """
    cells = run.table("cells.csv")
    cells = cells[cells["status"] == "ok"].copy()
    if "tokens_per_step" not in cells and "emitted_per_step" in cells:
        cells["tokens_per_step"] = cells["emitted_per_step"]
    if "temperature" in cells:
        cells = cells[cells["temperature"].fillna(0.0) == 0]
    return cells


def plan_from_runs(sku: str, root=DEFAULT_ROOT, batch: int | None = None,
                   workload: str | None = None,
                   headline_cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per workload × batch × γ of the SKU's latest sweep: prediction beside measurement.

    Columns: run_id, sku, workload, batch, gamma, alpha, divisor, divisor_source, d, h_ms,
    t_base_ms, pred_pot_ms, pred_speedup, measured_speedup, marginal_speedup (predicted
    speedup at γ+1 minus at γ, with d(γ+1) from the model and the divisor at γ+1 from
    :func:`next_token_divisor`), marginal_divisor (how that divisor was had), recommended
    (the γ of :func:`recommend` on the predictions), measured_best.
    """
    run = _sku_runs(root, sku)
    cells = _ok_cells(run)
    if headline_cells is None:   # the model's inputs (analysis.sweep_cells), read once
        from specbench.report.analysis import sweep_cells
        headline_cells = sweep_cells(root)
    if batch is not None and batch not in set(cells["batch"]):
        raise PlanInputError("--batch", f"batch {batch} was not measured in {run.run_id} "
                             f"(batches: {sorted(set(cells['batch']))})")
    if workload is not None and workload not in set(cells["workload"]):
        raise PlanInputError("--workload", f"workload {workload!r} was not measured in "
                             f"{run.run_id} (workloads: {sorted(set(cells['workload']))})")
    rows, skipped = [], []
    for (w, b), group in cells.groupby(["workload", "batch"], sort=True):
        if (batch is not None and b != batch) or (workload is not None and w != workload):
            continue
        if not (group["gamma"] == 0).any():   # no baseline measured: nothing to plan against
            skipped.append(f"'{w}' batch {int(b)}")
            continue
        inputs = model_inputs(cells, run, int(b), w, headline_cells, root)
        measured = dict(zip(group["gamma"].astype(int), group["speedup"]))
        part = []
        for gamma in [0] + sorted(inputs.alpha_by_gamma):
            alpha = inputs.alpha_by_gamma.get(gamma, np.nan)
            exact = inputs.divisor_by_gamma.get(gamma)
            divisor = 1.0 if gamma == 0 else (exact if exact else alpha * gamma + 1)
            d = inputs.d_by_gamma.get(gamma, 0.0)
            pot = _pot(inputs.t_base_ms, alpha, gamma, d, inputs.h_ms, divisor)
            margin, margin_source = np.nan, "—"
            if gamma > 0:
                next_divisor, margin_source = next_token_divisor(inputs, gamma)
                # Like with like: the counter divisor on both sides, or αγ+1 on both.
                here = pot if margin_source == "counters" else \
                    _pot(inputs.t_base_ms, alpha, gamma, d, inputs.h_ms)
                next_pot = _pot(inputs.t_base_ms, alpha, gamma + 1,
                                inputs.d_by_gamma[gamma + 1], inputs.h_ms, next_divisor)
                margin = inputs.t_base_ms / next_pot - inputs.t_base_ms / here
            part.append({"run_id": run.run_id, "sku": sku, "workload": w, "batch": int(b),
                         "gamma": gamma, "alpha": alpha, "divisor": divisor,
                         "divisor_source": ("—" if gamma == 0 else
                                            "counters" if exact else "αγ+1"),
                         "d": d, "h_ms": inputs.h_ms, "t_base_ms": inputs.t_base_ms,
                         "pred_pot_ms": pot, "pred_speedup": inputs.t_base_ms / pot,
                         "measured_speedup": measured.get(gamma, np.nan),
                         "marginal_speedup": margin, "marginal_divisor": margin_source})
        pots = {r["gamma"]: r["pred_pot_ms"] for r in part}
        best = recommend(pots, inputs.t_base_ms)
        measured_best = recommend({g: inputs.t_base_ms / s for g, s in measured.items()
                                   if g > 0 and s > 0}, inputs.t_base_ms)
        for r in part:
            r.update(recommended=best, measured_best=measured_best, sources=inputs.sources)
        rows += part
    if not rows:
        raise PlanInputError("--sku", f"{run.run_id} has no γ=0 cell to plan against "
                             f"({', '.join(skipped)})")
    frame = pd.DataFrame(rows)
    frame.attrs["skipped"] = skipped
    return frame


def format_plan(frame: pd.DataFrame) -> str:
    """The plain-text report of :func:`plan_from_runs`."""
    first = frame.iloc[0]
    src = first["sources"]
    lines = [f"SKU {first['sku']} — latest sweep {first['run_id']}",
             f"model inputs: t_base = {src['t_base']}; α = {src['alpha']}; d(γ) = {src['d']}; "
             f"h = {src['h']}",
             f"divisor: {src['divisor']} where the counters give it (marked 'counters'), "
             "else αγ+1; the +1 token column: predicted speedup at γ+1 minus at γ, with "
             "d(γ+1) from the model and D(γ+1) = D(γ) + s·α_pp^(γ+1) (s drafting share, α_pp "
             "per-position α, both from counters)"]
    if frame.attrs.get("skipped"):
        lines.append(f"skipped, no γ=0 cell measured: {', '.join(frame.attrs['skipped'])}")
    for (w, b), g in frame.groupby(["workload", "batch"], sort=False):
        rec, meas = int(g["recommended"].iloc[0]), int(g["measured_best"].iloc[0])
        row = g[g["gamma"] == rec].iloc[0]
        verdict = ("speculation off (no γ predicted faster than γ=0)" if rec == 0 else
                   f"γ={rec}: predicted {row['pred_speedup']:.2f}×, measured "
                   f"{row['measured_speedup']:.2f}×")
        lines += ["", f"workload {w!r}, batch {b}: t_base {g['t_base_ms'].iloc[0]:.2f} ms → "
                      f"recommend {verdict}; best measured γ={meas}",
                  f"  {'γ':>3} {'α':>6} {'divisor':>16} {'d':>7} {'pred ms':>9} "
                  f"{'pred ×':>7} {'meas ×':>7} {'+1 token Δ×':>12}"]
        for _, r in g.iterrows():
            alpha = "—" if r["gamma"] == 0 else f"{r['alpha']:.3f}"
            div = f"{r['divisor']:.3f} {r['divisor_source']}" if r["gamma"] else "1"
            margin = "—" if pd.isna(r["marginal_speedup"]) else f"{r['marginal_speedup']:+.3f}"
            lines.append(f"  {r['gamma']:>3} {alpha:>6} {div:>16} {r['d']:>7.3f} "
                         f"{r['pred_pot_ms']:>9.2f} {r['pred_speedup']:>7.2f} "
                         f"{r['measured_speedup']:>7.2f} {margin:>12}")
    return "\n".join(lines)


# -- economics on measured data ------------------------------------------------------------

def _positions(text) -> list[int]:
    if not isinstance(text, str) or not text.strip():
        return []
    return [int(float(x)) for x in text.split(";")]


def per_position_acceptance(reps: pd.DataFrame) -> pd.DataFrame:
    """Per cell (workload, γ, batch), from the counters summed over repetitions:

    * ``drafts`` N, ``accepted_at_pos`` a_0…a_{γ−1} (drafts whose position i was accepted);
    * ``alpha_first`` = a_0 / N, the first position's acceptance;
    * ``alpha_per_position`` — the independent per-position α of the worksheet's formula,
      fitted by maximum likelihood to the accepted prefix lengths: each draft accepts L ≤ γ
      tokens with P(L) = α^L(1−α) for L < γ and α^γ for L = γ, so α̂ = A / (A + N − a_{γ−1})
      with A = Σ a_i (every counted quantity; no timing);
    * ``aggregate_r`` = accepted / proposed, the telemetry fraction that is *not* that α.

    The fit assumes every draft proposed γ tokens (vLLM counts γ draft tokens per draft); a
    draft cut short near the end of the text counts as rejected at its missing positions.
    """
    spec = reps[reps["gamma"] > 0]
    rows = []
    for (w, g, b), group in spec.groupby(["workload", "gamma", "batch"]):
        width = int(g)
        per_pos = np.zeros(width)
        for text in group.get("accepted_per_pos", pd.Series(dtype=object)):
            values = _positions(text)[:width]
            per_pos[:len(values)] += values
        drafts, accepted = int(group["drafts"].sum()), float(per_pos.sum())
        proposed = int(group["draft_tokens"].sum())
        not_full = drafts - per_pos[-1]
        alpha_pp = (accepted / (accepted + not_full) if accepted + not_full > 0 else np.nan)
        rows.append({"workload": w, "gamma": int(g), "batch": int(b), "drafts": drafts,
                     "accepted_at_pos": ";".join(str(int(x)) for x in per_pos),
                     "alpha_first": per_pos[0] / drafts if drafts else np.nan,
                     "alpha_per_position": alpha_pp,
                     "aggregate_r": (group["accepted_tokens"].sum() / proposed
                                     if proposed else np.nan)})
    return pd.DataFrame(rows, columns=["workload", "gamma", "batch", "drafts", "accepted_at_pos",
                                       "alpha_first", "alpha_per_position", "aggregate_r"])


def counter_rows(run: Run) -> pd.DataFrame:
    """The speculative arm's counter deltas per timed call or repetition, with per-position
    acceptance: from reps.csv where it has ``accepted_per_pos`` (runs before the paired
    design), else from the calls stored in the run's parts. Greedy cells only."""
    reps = run.table("reps.csv")
    if "accepted_per_pos" in reps:
        return reps
    rows = []
    for record in run.parts().values():
        if record.get("status") != "ok" or record.get("temperature", 0.0):
            continue
        for call in record.get("calls", []):
            counters = call.get("counters") or {}
            if call.get("arm") != "spec" or not counters:
                continue
            rows.append({"workload": record["workload"], "gamma": record["gamma"],
                         "batch": record["batch"],
                         **{k: counters.get(k, 0) for k in ("drafts", "draft_tokens",
                                                            "accepted_tokens")},
                         "accepted_per_pos": counters.get("accepted_per_pos", "")})
    columns = ["workload", "gamma", "batch", "drafts", "draft_tokens", "accepted_tokens",
               "accepted_per_pos"]
    return pd.DataFrame(rows, columns=columns)


def _break_even(gamma: int, v: float) -> float:
    try:
        return economics.break_even_alpha(int(gamma), 0.0, v)
    except ValueError:   # not even α = 1 pays at this overhead
        return np.nan


def break_even_table(root=DEFAULT_ROOT, headline_cells: pd.DataFrame | None = None
                     ) -> pd.DataFrame:
    """Per SKU × batch × workload × γ of each SKU's latest sweep: the engine's verification
    overhead v, the break-even per-position α at that v, and where the workload's measured
    per-position α sits.

    The worksheet charges a speculative iteration 1 + k·(c + v) baseline steps. Here k = γ,
    c = 0 (n-gram drafting runs no draft model; its CPU lookup is inside the host terms) and
    the model charges (t_base·(1 + d(γ)) + h) / t_base, so v = (d(γ) + h/t_base) / γ.
    """
    if headline_cells is None:   # the model's inputs (analysis.sweep_cells), read once
        from specbench.report.analysis import sweep_cells
        headline_cells = sweep_cells(root)
    rows = []
    for run in _latest_sweeps(root):
        cells = _ok_cells(run)
        pp = per_position_acceptance(counter_rows(run)).set_index(
            ["workload", "gamma", "batch"])
        for (w, b), group in cells.groupby(["workload", "batch"]):
            if not (group["gamma"] == 0).any():
                continue
            inputs = model_inputs(cells, run, int(b), w, headline_cells, root)
            for gamma in sorted(inputs.alpha_by_gamma):
                v = (inputs.d_by_gamma[gamma] + inputs.h_ms / inputs.t_base_ms) / gamma
                be = _break_even(gamma, v)
                acc = pp.loc[(w, gamma, int(b))] if (w, gamma, int(b)) in pp.index else None
                alpha_pp = float(acc["alpha_per_position"]) if acc is not None else np.nan
                cell = cells[(cells["workload"] == w) & (cells["batch"] == b)
                             & (cells["gamma"] == gamma)].iloc[0]
                rows.append({"run_id": run.run_id, "sku": run.sku, "batch": int(b),
                             "workload": w, "gamma": gamma, "v": v, "break_even_alpha": be,
                             "alpha_per_position": alpha_pp,
                             "alpha_first": float(acc["alpha_first"]) if acc is not None
                             else np.nan,
                             "aggregate_r": float(acc["aggregate_r"]) if acc is not None
                             else np.nan,
                             "side": ("no break-even" if np.isnan(be) else
                                      "above" if alpha_pp > be else "below"),
                             "measured_speedup": float(cell["speedup"])})
    return pd.DataFrame(rows)


def _latest_sweeps(root) -> list[Run]:
    latest: dict[str, Run] = {}
    for run in load_runs(root, kind="sweep"):   # oldest first; greedy runs only
        if not _ok_cells(run).empty:
            latest[run.sku] = run
    if not latest:
        raise FileNotFoundError(f"no complete sweep run under {root}/")
    return list(latest.values())


def priced(price_per_replica_hour: float, itl_slo_ms: float, demand_tokens_per_s: float,
           root=DEFAULT_ROOT) -> pd.DataFrame:
    """Cost per million SLO-qualified accepted tokens, whole replicas, per measured cell.

    A replica is one engine as measured (one SKU, one batch size). Its decode throughput is
    batch × 1000 / pot_ms output tokens per second — every output token is an accepted token
    (rejected drafts emit nothing), prefill excluded as in the manifests. A cell meets the SLO
    when the slowest repetition's median per-token latency is within ``itl_slo_ms``; a cell
    that misses it qualifies no tokens and gets no price. Replicas = ceil(demand / throughput),
    all paid for, serving exactly the demand.
    """
    for name, value in [("price_per_replica_hour", price_per_replica_hour),
                        ("itl_slo_ms", itl_slo_ms), ("demand_tokens_per_s", demand_tokens_per_s)]:
        check(name, value, low=0, low_open=True)
    rows = []
    for run in _latest_sweeps(root):
        intervals = rep_intervals(run)
        for _, c in _ok_cells(run).iterrows():
            key = (c["workload"], int(c["gamma"]), int(c["batch"]), "spec")
            slowest = float(intervals.loc[key, "pot_ms_max"]) if key in intervals.index \
                else float(c["pot_ms"])
            tokens_per_s = int(c["batch"]) * 1000.0 / float(c["pot_ms"])
            meets = slowest <= itl_slo_ms
            replicas = cost = np.nan
            if meets:
                replicas, cost = economics.cost_per_million(
                    1, price_per_replica_hour, tokens_per_s, demand_tokens_per_s,
                    demand_tokens_per_s)
            rows.append({"run_id": run.run_id, "sku": run.sku, "workload": c["workload"],
                         "batch": int(c["batch"]), "gamma": int(c["gamma"]),
                         "pot_ms": float(c["pot_ms"]), "slowest_rep_pot_ms": slowest,
                         "tokens_per_s": tokens_per_s, "meets_slo": meets,
                         "replicas": replicas, "usd_per_million": cost})
    return pd.DataFrame(rows)


def priced_decisions(price: pd.DataFrame) -> pd.DataFrame:
    """Per SKU × workload × batch of :func:`priced`: the γ=0 cost, the cheapest γ and its cost
    (NaN where no γ meets the SLO), and the saving against γ=0 where both qualify."""
    rows = []
    for (sku, w, b), g in price.groupby(["sku", "workload", "batch"], sort=False):
        base = g[g["gamma"] == 0].iloc[0]
        ok = g[g["meets_slo"]]
        best = ok.loc[ok["usd_per_million"].idxmin()] if len(ok) else None
        rows.append({"sku": sku, "workload": w, "batch": int(b),
                     "γ=0 replicas": base["replicas"], "γ=0 USD/M": base["usd_per_million"],
                     "cheapest γ": int(best["gamma"]) if best is not None else None,
                     "replicas": best["replicas"] if best is not None else np.nan,
                     "USD/M": best["usd_per_million"] if best is not None else np.nan,
                     "saving %": (100 * (1 - best["usd_per_million"] / base["usd_per_million"])
                                  if best is not None and base["meets_slo"] else np.nan)})
    out = pd.DataFrame(rows)
    for column in ("γ=0 replicas", "cheapest γ", "replicas"):
        out[column] = out[column].astype("Int64")   # whole numbers; <NA> where none qualifies
    return out


def kv_bytes_per_token(shape: ModelShape) -> float:
    """Keys and values of every layer for one token: 2 · layers · kv_heads · head_dim · bytes."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * shape.act_bytes


def _weight_bytes(shape: ModelShape) -> float:
    hd = shape.head_dim
    per_layer = (shape.hidden * (shape.heads * hd + 2 * shape.kv_heads * hd)
                 + shape.heads * hd * shape.hidden + 3 * shape.hidden * shape.intermediate)
    return (shape.layers * per_layer + shape.vocab * shape.hidden) * shape.weight_bytes


def hypothetical_draft_kv(run: Run, draft_layer_fraction: float = 0.25) -> dict:
    """HYPOTHETICAL: the KV-cache capacity a draft *model* would cost this run's engine.

    n-gram drafting has no draft model and no draft KV cache, so the measured configuration
    loses nothing. The hypothetical draft is the target's own architecture with
    ``draft_layer_fraction`` of its layers (an assumption, not a measured or published model);
    its weights and its per-token KV come out of the engine's KV pool (the manifest's
    ``cpu_kvcache_gib``), as in the worksheet's worked example.
    """
    target = ModelShape(**run.manifest["model_shape"])
    pool = float(run.manifest["engine"]["settings"]["cpu_kvcache_gib"]) * 2**30
    draft = ModelShape(**{**run.manifest["model_shape"], "name": "hypothetical draft",
                          "layers": max(1, round(target.layers * draft_layer_fraction))})
    per_token, draft_per_token = kv_bytes_per_token(target), kv_bytes_per_token(draft)
    without = economics.kv_capacity_tokens(pool, per_token)
    with_draft = economics.kv_capacity_tokens(max(pool - _weight_bytes(draft), 0),
                                              per_token + draft_per_token)
    return {"run_id": run.run_id, "sku": run.sku, "pool_bytes": pool,
            "target_kv_bytes_per_token": per_token, "draft_layers": draft.layers,
            "draft_weight_bytes": _weight_bytes(draft), "draft_kv_bytes_per_token": draft_per_token,
            "tokens_without_draft": without, "tokens_with_draft": with_draft,
            "capacity_loss_pct": 100 * (1 - with_draft / without)}


# -- negative cells ------------------------------------------------------------------------

def rep_intervals(run: Run) -> pd.DataFrame:
    """Per greedy cell and arm: the range of the per-repetition latencies (min, max), from
    reps.csv. Paired runs time a γ=0 ``base`` arm beside every cell's ``spec`` arm; older runs
    have only the spec arm (their γ=0 cells are the baseline)."""
    reps = run.table("reps.csv")
    if "arm" not in reps:
        reps = reps.assign(arm="spec")
    if "temperature" in reps:
        reps = reps[reps["temperature"].fillna(0.0) == 0]
    return reps.groupby(["workload", "gamma", "batch", "arm"])["pot_ms"].agg(
        pot_ms_min="min", pot_ms_max="max", reps="count")


def _speedup_interval(iv: pd.DataFrame, workload: str, gamma: int, batch: int):
    """(low, high, reps) of a speculative cell's speedup from the repetitions' extremes, against
    its paired base arm where measured, else the γ=0 cell; None without repetitions."""
    spec = (workload, gamma, batch, "spec")
    base = (workload, gamma, batch, "base")
    if base not in iv.index:
        base = (workload, 0, batch, "spec")
    if spec not in iv.index or base not in iv.index:
        return None
    return (iv.loc[base, "pot_ms_min"] / iv.loc[spec, "pot_ms_max"],
            iv.loc[base, "pot_ms_max"] / iv.loc[spec, "pot_ms_min"], int(iv.loc[spec, "reps"]))


def negative_cells(root=DEFAULT_ROOT, all_runs: bool = True) -> pd.DataFrame:
    """Every measured speculative cell whose speedup interval does not lie wholly above 1.

    The interval brackets the speedup with the repetitions' extremes: from the slowest
    speculative repetition against the fastest baseline one (low) to the fastest against the
    slowest (high). ``did not pay`` — the whole interval is below 1; ``within noise`` — it
    contains 1. Cells whose interval lies above 1 paid and are left out.
    """
    runs = load_runs(root, kind="sweep")
    if not all_runs:
        runs = _latest_sweeps(root)
    rows = []
    for run in runs:
        cells, iv = _ok_cells(run), rep_intervals(run)
        for _, c in cells[cells["gamma"] > 0].iterrows():
            interval = _speedup_interval(iv, c["workload"], int(c["gamma"]), int(c["batch"]))
            if interval is None or interval[0] > 1:
                continue
            low, high, reps = interval
            rows.append({"run_id": run.run_id, "sku": run.sku, "workload": c["workload"],
                         "batch": int(c["batch"]), "gamma": int(c["gamma"]),
                         "alpha": float(c["alpha"]), "speedup": float(c["speedup"]),
                         "low": float(low), "high": float(high),
                         "reps": reps,
                         "taken under load": bool(c.get("loaded", False)),
                         "verdict": "did not pay" if high < 1 else "within noise"})
    columns = ["run_id", "sku", "workload", "batch", "gamma", "alpha", "speedup", "low", "high",
               "reps", "taken under load", "verdict"]
    return pd.DataFrame(rows, columns=columns)


# -- the planning chapter ------------------------------------------------------------------

def _quoted(names) -> str:
    names = [f"'{n}'" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _cases(frame: pd.DataFrame, gamma: bool = False) -> str:
    return "; ".join(f"{r.sku} '{r.workload}' batch {r.batch}"
                     + (f" γ={r.gamma}" if gamma else "") for r in frame.itertuples())


def _near_best(plans: pd.DataFrame, miss: pd.DataFrame) -> int:
    """How many misses lose less than NEAR_BEST_PCT of the fastest measured speedup."""
    near = 0
    for r in miss.itertuples():
        g = plans[(plans["sku"] == r.sku) & (plans["workload"] == r.workload)
                  & (plans["batch"] == r.batch)].set_index("gamma")["measured_speedup"]
        if g[r.recommended] >= g[r.measured_best] * (1 - NEAR_BEST_PCT / 100):
            near += 1
    return near


def _recommendation_phrases(recs: pd.DataFrame, plans: pd.DataFrame) -> dict:
    """Wording chosen from the data: which workloads the tool turns off/on everywhere."""
    by_w = recs.groupby("workload")["recommended"]
    off = sorted(w for w, g in by_w if (g == 0).all())
    on = sorted(w for w, g in by_w if (g > 0).all())
    mixed = sorted(set(recs["workload"]) - set(off) - set(on))
    parts = []
    if off:
        parts.append(f"turns speculation off for {_quoted(off)} on every SKU and batch")
    if on:
        parts.append(f"turns it on for {_quoted(on)} on every SKU and batch")
    if mixed:
        parts.append(f"switches it by SKU or batch for {_quoted(mixed)}")
    agree = recs["recommended"] == recs["measured_best"]
    miss = recs[~agree]
    return {
        "rec_phrase": "The tool " + ", and ".join(parts),
        "agree_phrase": ("picks the fastest measured γ in every case" if agree.all() else
                         f"picks the fastest measured γ in {int(agree.sum())} of {len(recs)} "
                         f"cases; it misses on {_cases(miss)}, and in "
                         f"{_near_best(plans, miss)} of these {len(miss)} misses the measured "
                         f"speedup at the recommended γ is within {NEAR_BEST_PCT:g} percent "
                         "of the fastest"),
        "miss_batches": sorted(set(int(b) for b in miss["batch"])),
    }


def _range(values, fmt: str) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return format(lo, fmt) if math.isclose(lo, hi, abs_tol=5e-4) else \
        f"{format(lo, fmt)} to {format(hi, fmt)}"


def _margin_phrase(spec: pd.DataFrame) -> str:
    """Per batch: the marginal value of one more token where the tool turns speculation on,
    and where it keeps it off."""
    parts = []
    for b, g in spec.groupby("batch"):
        on, off = g[g["recommended"] > 0], g[g["recommended"] == 0]
        bits = []
        if len(on):
            bits.append(f"{_range(on['marginal_speedup'], '+.3f')}× where the tool turns "
                        "speculation on")
        if len(off):
            bits.append(f"{_range(off['marginal_speedup'], '+.3f')}× where it keeps it off")
        parts.append(f"at batch {b} it is " + " and ".join(bits))
    return ("; ".join(parts)).capitalize()


def _miss_phrase(plans: pd.DataFrame) -> str:
    """Where the tool turns speculation on but at another γ than the fastest measured one:
    the model's prediction and d(γ) at the fastest measured γ, with wording chosen by sign."""
    rows = []
    for _, g in plans.groupby(["sku", "workload", "batch"], sort=False):
        rec, best = int(g["recommended"].iloc[0]), int(g["measured_best"].iloc[0])
        if rec > 0 and best > 0 and rec != best:
            rows.append(g[g["gamma"] == best].iloc[0])
    if not rows:
        return ("Wherever the tool turns speculation on, it picks the fastest measured γ.")
    miss = pd.DataFrame(rows)
    under = (miss["pred_speedup"] < miss["measured_speedup"]).all()
    text = (f"Where it turns speculation on at another γ than the fastest measured one "
            f"({_cases(miss)}), it predicts {_range(miss['pred_speedup'], '.2f')}× at that "
            f"fastest γ against a measured {_range(miss['measured_speedup'], '.2f')}×, with the "
            f"model's d(γ) there at {_range(miss['d'], '.2f')}")
    if under:
        text += (": the model prices verification above what the measurement shows, so that "
                 "miss is the model's d(γ), not the data's.")
    else:
        text += "."
    return text


def _v_phrase(be: pd.DataFrame) -> str:
    return "; ".join(f"at batch {b}, v is {_range(g['v'], '.3f')} and the break-even "
                     f"per-position α {_range(g['break_even_alpha'], '.2f')}"
                     for b, g in be.groupby("batch"))


def _negative_phrase(neg: pd.DataFrame, paid_at_zero: pd.DataFrame) -> str:
    if neg.empty:
        return "Every speculative cell paid, beyond the spread of its repetitions."
    within = int((neg["verdict"] == "within noise").sum())
    text = (f"Of these, {int((neg['verdict'] == 'did not pay').sum())} did not pay (the whole "
            f"interval below 1) and {within} {'is' if within == 1 else 'are'} within noise "
            "(the interval contains 1).")
    loaded = int(neg["taken under load"].sum())
    if loaded:
        text += (f" {loaded} of the {len(neg)} were taken while other processes loaded the "
                 "CPU (flagged by their run), so their timing is suspect.")
    if len(paid_at_zero):
        one = len(paid_at_zero) == 1
        text += (f" {len(paid_at_zero)} {'cell' if one else 'cells'} with zero acceptance "
                 f"{'shows' if one else 'show'} a speedup whose whole interval lies above 1 "
                 f"({_cases(paid_at_zero, gamma=True)}, run {paid_at_zero['run_id'].iloc[0]}"
                 f"{'' if one else ' …'}): speculation cannot have "
                 "saved a step there, so that gap is drift between the engines of the two "
                 "arms, larger than the spread of the repetitions within each.")
    return text


def _priced_phrase(decisions: pd.DataFrame) -> str:
    cheaper = decisions[(decisions["saving %"] > 0)]
    rescued = decisions[decisions["γ=0 USD/M"].isna() & decisions["cheapest γ"].notna()
                        & (decisions["cheapest γ"].fillna(0) > 0)]
    none = decisions[decisions["cheapest γ"].isna()]
    base_best = decisions[decisions["cheapest γ"] == 0]
    parts = [f"speculation lowers the cost below a qualifying γ=0 in {len(cheaper)} of "
             f"{len(decisions)} SKU × workload × batch cases"]
    if len(rescued):
        parts.append(f"in {len(rescued)} more γ=0 misses the SLO and only speculation meets "
                     f"it ({_cases(rescued)})")
    if len(base_best):
        parts.append(f"γ=0 is cheapest in {len(base_best)}")
    if len(none):
        parts.append(f"no γ meets the SLO in {len(none)} ({_cases(none)})")
    return "At these assumptions " + "; ".join(parts) + "."


def recommendation_summary(plans: pd.DataFrame) -> pd.DataFrame:
    """One row per SKU × workload × batch: the recommended γ with predicted and measured
    speedup side by side, and the fastest measured γ."""
    rows = []
    for (sku, w, b), g in plans.groupby(["sku", "workload", "batch"], sort=False):
        g = g.set_index("gamma")
        rec, best = int(g["recommended"].iloc[0]), int(g["measured_best"].iloc[0])
        rows.append({"sku": sku, "workload": w, "batch": b, "recommended γ": rec,
                     "predicted ×": g.loc[rec, "pred_speedup"],
                     "measured × at it": g.loc[rec, "measured_speedup"],
                     "fastest measured γ": best,
                     "measured × there": g.loc[best, "measured_speedup"],
                     "+1 token Δ× at it": g.loc[rec, "marginal_speedup"]})
    return pd.DataFrame(rows).set_index(["sku", "workload", "batch"])


def _aggregate_phrase(be: pd.DataFrame) -> str:
    # A workload with partial acceptance shows the aggregate fraction drifting with γ while
    # the per-position α does not; with none in the store, say so.
    mid = be[(be["alpha_per_position"] > 0) & (be["alpha_per_position"] < 1)]
    if mid.empty:
        return ("No measured workload has a per-position α strictly between 0 and 1, so the "
                "two acceptance measures coincide on these runs.")
    first = mid.iloc[0]
    same = mid[(mid["sku"] == first["sku"]) & (mid["batch"] == first["batch"])
               & (mid["workload"] == first["workload"])].sort_values("gamma")
    r = ", ".join(f"{x:.3f}" for x in same["aggregate_r"])
    a = ", ".join(f"{x:.3f}" for x in same["alpha_per_position"])
    g = ", ".join(str(x) for x in same["gamma"])
    return (f"On {first['sku']} '{first['workload']}' at batch {first['batch']} (γ = {g}) the "
            f"aggregate accepted/proposed fraction is {r}, while the per-position α is {a}: "
            "the aggregate counts every proposed position, including those after a rejection "
            "that could never be accepted, so it is not the formula's α.")


def _serving_phrase(root) -> str:
    serving = load_runs(root, kind="serving")
    if not serving:
        return ("No serving run is in the store, so the throughput is the sweep's decode "
                "throughput of one engine at a fixed batch, not a served request rate.")
    return (f"{len(serving)} serving run(s) are in the store "
            f"({', '.join(r.run_id for r in serving)}); this chapter prices the sweep's decode "
            "throughput, which the serving runs do not replace.")


def chapter_numbers(root=DEFAULT_ROOT, price_per_replica_hour: float = 1.0,
                    itl_slo_ms: float = 40.0, demand_tokens_per_s: float = 500.0) -> dict:
    """The planning chapter's named numbers, computed wording and tables, with the run ids.

    The price, SLO and demand are the chapter's stated assumptions, not measurements.
    """
    runs = _latest_sweeps(root)
    first = runs[0]
    from specbench.report.analysis import sweep_cells
    headline = sweep_cells(root)
    plans = pd.concat([plan_from_runs(r.sku, root, headline_cells=headline) for r in runs],
                      ignore_index=True)
    recs = plans.drop_duplicates(["sku", "workload", "batch"]).copy()
    at_rec = plans[plans["gamma"] == plans["recommended"]]
    on = at_rec[at_rec["gamma"] > 0]
    spec = plans[plans["gamma"] > 0]
    be = break_even_table(root, headline)
    neg = negative_cells(root)
    price = priced(price_per_replica_hour, itl_slo_ms, demand_tokens_per_s, root)
    decisions = priced_decisions(price)
    # The KV pool is a CPU engine setting; a GPU run's manifest records none.
    kv = hypothetical_draft_kv(next((r for r in runs if "cpu_kvcache_gib" in
                                     r.manifest["engine"]["settings"]), first))
    all_sweeps = load_runs(root, kind="sweep")
    zero = []
    for run in all_sweeps:
        iv = rep_intervals(run)
        for _, c in _ok_cells(run).query("gamma > 0 and alpha == 0").iterrows():
            interval = _speedup_interval(iv, c["workload"], int(c["gamma"]), int(c["batch"]))
            if interval is not None and interval[0] > 1:
                zero.append({"sku": run.sku, "workload": c["workload"],
                             "batch": int(c["batch"]), "gamma": int(c["gamma"]),
                             "run_id": run.run_id})
    paid_at_zero = pd.DataFrame(zero, columns=["sku", "workload", "batch", "gamma", "run_id"])
    consistent = (be["side"] == "above") == (be["measured_speedup"] > 1)
    numbers = {
        "run_ids": ", ".join(r.run_id for r in runs),
        "all_run_ids": ", ".join(r.run_id for r in all_sweeps),
        "n_runs_all": len(all_sweeps),
        "first_sku": first.sku,
        "draft_methods": ", ".join(sorted({r.manifest["engine"].get("speculative_method", "?")
                                           for r in runs})),
        "n_plans": int(len(recs)),
        "n_agree": int((recs["recommended"] == recs["measured_best"]).sum()),
        "n_exact_divisor": int((spec["divisor_source"] == "counters").sum()),
        "n_spec_rows": int(len(spec)),
        "rec_gap_max_pct": float((100 * (on["pred_speedup"] / on["measured_speedup"] - 1))
                                 .abs().max()) if len(on) else float("nan"),
        "margin_phrase": _margin_phrase(spec),
        "miss_phrase": _miss_phrase(plans),
        "v_phrase": _v_phrase(be),
        "n_above": int((be["side"] == "above").sum()),
        "n_below": int((be["side"] == "below").sum()),
        "n_be_rows": int(len(be)),
        "n_consistent": int(consistent.sum()),
        "inconsistent_phrase": ("" if consistent.all() else
                                " The exceptions: " + _cases(be[~consistent], gamma=True) + "."),
        "n_negative": int(len(neg)),
        "n_did_not_pay": int((neg["verdict"] == "did not pay").sum()),
        "n_within_noise": int((neg["verdict"] == "within noise").sum()),
        "n_spec_cells_all_runs": int(sum((_ok_cells(r)["gamma"] > 0).sum() for r in all_sweeps)),
        "negative_phrase": _negative_phrase(neg, paid_at_zero),
        "price_per_replica_hour": float(price_per_replica_hour), "itl_slo_ms": float(itl_slo_ms),
        "demand_tokens_per_s": float(demand_tokens_per_s),
        "priced_phrase": _priced_phrase(decisions),
        "kv_sku": kv["sku"], "kv_pool_gib": kv["pool_bytes"] / 2**30,
        "kv_tokens_without": int(kv["tokens_without_draft"]),
        "kv_tokens_with": int(kv["tokens_with_draft"]),
        "kv_loss_pct": float(kv["capacity_loss_pct"]), "kv_draft_layers": int(kv["draft_layers"]),
        "kv_target_layers": int(first.manifest["model_shape"]["layers"]),
        "kv_target_bytes_per_token": int(kv["target_kv_bytes_per_token"]),
        "kv_draft_weight_mib": kv["draft_weight_bytes"] / 2**20,
    }
    numbers.update(_recommendation_phrases(recs, plans))
    numbers["miss_batches"] = ", ".join(map(str, numbers["miss_batches"])) or "none"
    numbers.update(aggregate_phrase=_aggregate_phrase(be), serving_phrase=_serving_phrase(root))
    numbers["tables"] = {"plans": plans.drop(columns=["sources"]),
                         "recommendations": recommendation_summary(plans),
                         "break_even": be, "negative": neg, "priced": price,
                         "decisions": decisions, "kv": kv, "paid_at_zero": paid_at_zero}
    return numbers


# -- command line --------------------------------------------------------------------------

class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a user error is one line on stderr (no usage block) and exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_ms(text):
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 ms, got {text!r}")
    return value


def _nonneg_ms(text):
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 ms, got {text!r}")
    return value


def _acceptance(text):
    value = _finite(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"acceptance must be in [0, 1], got {text!r}")
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _finite(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _d_list(text):
    try:
        return parse_d(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(
        prog="specbench plan",
        description="Recommend γ from explicit numbers (--t-base-ms, --alpha, --d) or from a "
                    "SKU's latest sweep (--sku): eq. 1, pot = (T·(1+D) + H)/(A·γ + 1).")
    p.add_argument("--t-base-ms", type=_positive_ms, help="baseline (γ=0) decode step, ms")
    p.add_argument("--alpha", type=_acceptance, help="acceptance α in [0, 1]")
    p.add_argument("--d", type=_d_list, metavar="G:D[,G:D...]",
                   help="verify overhead D at each candidate γ, e.g. 2:0.015,4:0.077")
    p.add_argument("--host-ms", type=_nonneg_ms, help="per-cycle host term H, ms (γ>0; 0)")
    p.add_argument("--sku", help="plan from the latest sweep run of this SKU")
    p.add_argument("--batch", type=_positive_int, help="only this batch size (--sku)")
    p.add_argument("--workload", help="only this workload (--sku)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help="run store folder (runs)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def _check_mode(p, args) -> None:
    explicit = {"--t-base-ms": args.t_base_ms, "--alpha": args.alpha, "--d": args.d}
    given = [k for k, v in explicit.items() if v is not None]
    if args.sku is not None:
        clash = given + (["--host-ms"] if args.host_ms is not None else [])
        if clash:
            p.error(f"argument --sku: not allowed with {', '.join(clash)}")
        if not (Path(args.root) / args.sku).is_dir():
            p.error(f"argument --sku: unknown SKU {args.sku!r}: no folder {args.root}/{args.sku}")
        return
    for name in ("--batch", "--workload"):
        if getattr(args, name[2:]) is not None:
            p.error(f"argument {name}: only with --sku")
    if not given and args.host_ms is None:
        p.error("either --sku SKU or --t-base-ms T --alpha A --d G:D[,G:D...] is required")
    missing = [k for k, v in explicit.items() if v is None]
    if missing:
        p.error(f"argument {missing[0]}: required with "
                f"{', '.join(given + (['--host-ms'] if args.host_ms is not None else []))}")


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    _check_mode(p, args)                   # every user error exits here, before any read
    if args.sku is None:
        result = plan_explicit(args.t_base_ms, args.alpha, args.d, args.host_ms or 0.0)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"{'γ':>3} {'pot ms':>10} {'speedup':>8}")
            for row in result["rows"]:
                print(f"{row['gamma']:>3} {row['pot_ms']:>10.3f} {row['speedup']:>8.3f}")
            g = result["recommended_gamma"]
            print("recommend: speculation off (γ=0): no γ is strictly faster than t_base"
                  if g == 0 else f"recommend: γ={g}")
        return 0
    try:
        frame = plan_from_runs(args.sku, args.root, args.batch, args.workload)
    except PlanInputError as exc:
        p.error(f"argument {exc.argument}: {exc}")
    if args.json:
        out = frame.drop(columns=["sources"]).replace({np.nan: None})
        print(json.dumps({"sku": args.sku, "run_id": frame["run_id"].iloc[0],
                          "sources": frame["sources"].iloc[0],
                          "rows": out.to_dict(orient="records")}))
    else:
        print(format_plan(frame))
    return 0


if __name__ == "__main__":
    sys.exit(main())
