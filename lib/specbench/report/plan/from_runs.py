"""The plan from a SKU's stored runs: its latest sweep's cells through the model's inputs."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.report.plan.gamma import (
    ModelInputs,
    model_inputs,
    next_token_divisor,
    predicted_pot,
    recommend,
    run_acceptance,
)
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs

__all__ = ["PlanInputError", "ok_cells", "plan_basis", "plan_from_runs", "format_plan",
           "latest_sweeps", "input_table"]




# -- from runs -----------------------------------------------------------------------------

class PlanInputError(LookupError):
    """A from-runs request the store cannot answer; ``argument`` names the CLI option."""

    def __init__(self, argument: str, message: str):
        super().__init__(message)
        self.argument = argument


def plan_basis(runs: list[Run]) -> Run | None:
    """The sweep a plan explains, of one SKU's ``runs`` (oldest first): the latest that measured
    speculation greedy (planning is for greedy decoding; a γ=0 calibration or a run of
    temperature cells alone is not a basis), preferring one not judged against sealed
    predictions (``make measure-host``'s check is kept aside, used only where the SKU has no
    other), and one of the project's own workloads over one of Spec-Bench categories alone (a
    host's check, sealed or not: ``make measure-host``'s sweep)."""
    speculative = [r for r in runs if (ok_cells(r)["gamma"] > 0).any()]
    unjudged = [r for r in speculative if not r.manifest.get("judged_against")]
    own = [r for r in unjudged if not _spec_bench_only(r)]
    return (own or unjudged or speculative or [None])[-1]


def _spec_bench_only(run: Run) -> bool:
    workloads = run.manifest.get("grid", {}).get("workloads") or []
    return bool(workloads) and all(str(w).startswith("specbench:") for w in workloads)


def _sku_runs(root, sku: str) -> Run:
    """The SKU's plan basis (:func:`plan_basis`)."""
    run = plan_basis([r for r in load_runs(root, kind="sweep") if r.sku == sku])
    if run is None:
        known = sorted({r.sku for r in load_runs(root, kind="sweep")})
        raise PlanInputError("--sku", f"no complete sweep run of SKU {sku!r} under {root}/ "
                             f"(SKUs with a sweep: {', '.join(known) or 'none'})")
    return run


def ok_cells(run: Run) -> pd.DataFrame:
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
    cells = ok_cells(run)
    if headline_cells is None:   # the model's inputs (analysis.sweep_cells), read once
        from specbench.derive.analysis import sweep_cells
        headline_cells = sweep_cells(root, every_session=True)
    if batch is not None and batch not in set(cells["batch"]):
        raise PlanInputError("--batch", f"batch {batch} was not measured in {run.run_id} "
                             f"(batches: {sorted(set(cells['batch']))})")
    if workload is not None and workload not in set(cells["workload"]):
        raise PlanInputError("--workload", f"workload {workload!r} was not measured in "
                             f"{run.run_id} (workloads: {sorted(set(cells['workload']))})")
    rows, skipped = [], []
    acceptance = run_acceptance(run)
    for (w, b), group in cells.groupby(["workload", "batch"], sort=True):
        if (batch is not None and b != batch) or (workload is not None and w != workload):
            continue
        if not (group["gamma"] == 0).any():   # no baseline measured: nothing to plan against
            skipped.append(f"'{w}' batch {int(b)}")
            continue
        inputs = model_inputs(cells, run, int(b), w, headline_cells, root, acceptance)
        measured = dict(zip(group["gamma"].astype(int), group["speedup"], strict=True))
        part = [dict(run_id=run.run_id, sku=sku, workload=w, batch=int(b),
                     **_gamma_row(inputs, gamma, measured))
                for gamma in [0] + sorted(inputs.alpha_by_gamma)]
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


def _gamma_row(inputs: ModelInputs, gamma: int, measured: dict) -> dict:
    """One γ of a workload × batch: the prediction, its speedup beside the measured one, and
    the predicted gain of one more drafted token."""
    alpha = inputs.alpha_by_gamma.get(gamma, np.nan)
    exact = inputs.divisor_by_gamma.get(gamma)
    divisor = 1.0 if gamma == 0 else (exact if exact else alpha * gamma + 1)
    d = inputs.d_by_gamma.get(gamma, 0.0)
    pot = predicted_pot(inputs.t_base_ms, alpha, gamma, d, inputs.h_ms, divisor)
    margin, margin_source = np.nan, "—"
    if gamma > 0:
        next_divisor, margin_source = next_token_divisor(inputs, gamma)
        # Like with like: the counter divisor on both sides, or αγ+1 on both.
        here = pot if margin_source == "counters" else \
            predicted_pot(inputs.t_base_ms, alpha, gamma, d, inputs.h_ms)
        next_pot = predicted_pot(inputs.t_base_ms, alpha, gamma + 1,
                                 inputs.d_by_gamma[gamma + 1], inputs.h_ms, next_divisor)
        margin = inputs.t_base_ms / next_pot - inputs.t_base_ms / here
    return {"gamma": gamma, "alpha": alpha, "divisor": divisor,
            "divisor_source": ("—" if gamma == 0 else "counters" if exact else "αγ+1"),
            "d": d, "h_ms": inputs.h_ms, "t_base_ms": inputs.t_base_ms,
            "pred_pot_ms": pot, "pred_speedup": inputs.t_base_ms / pot,
            "measured_speedup": measured.get(gamma, np.nan),
            "marginal_speedup": margin, "marginal_divisor": margin_source}


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


def latest_sweeps(root) -> list[Run]:
    """Per SKU, the sweep its plan explains (:func:`plan_basis`)."""
    by_sku: dict[str, list[Run]] = {}
    for run in load_runs(root, kind="sweep"):   # oldest first
        by_sku.setdefault(run.sku, []).append(run)
    latest = [run for run in map(plan_basis, by_sku.values()) if run is not None]
    if not latest:
        raise FileNotFoundError(f"no complete sweep run under {root}/")
    return latest


_INPUTS = (("t_base", "t_base, the γ=0 step", "measurement"),
           ("alpha", "α, accepted / drafted", "measurement"),
           ("divisor", "tokens per step", "measurement"),
           ("d", "d(γ), verify overhead", "model"),
           ("h", "h, per-cycle host term", "model"))


def input_table(plans: pd.DataFrame) -> pd.DataFrame:
    """Where the planner's inputs came from, read back from the plans it made (the ``sources``
    each plan records): one row per input, every distinct source with the number of
    SKU × batch × workload plans that used it."""
    import re
    recs = plans.drop_duplicates(["sku", "workload", "batch"])
    rows = []
    for key, name, kind in _INPUTS:
        used = [re.sub(r"\s*\(h/t_base = [^)]*\)", "", s.get(key, "—")) for s in recs["sources"]]
        counts = pd.Series(used).value_counts()
        rows.append({"input": name, "kind": kind,
                     "source": "; ".join(f"{src} ({n} of {len(used)} plans)"
                                          for src, n in counts.items())})
    return pd.DataFrame(rows)
