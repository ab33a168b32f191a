"""Sealed predictions: a SKU's latencies predicted from its calibration before its sweep.

A SKU that has only a cheap calibration — a sweep of its γ=0 arm and its kernel
microbenchmark — gets, for every speculative cell of the grid, the transfer prediction of
:func:`specbench.derive.transfer.transfer_predictions`: acceptance (D, drafting share) pooled
from the other SKUs' counters, the host ratio fitted on them, t_base and d its own. ``specbench
predict`` writes these numbers into a 'prediction' run before that SKU's sweep starts; the
sweep names the run it is judged against (``specbench sweep --judged-against RUN``) and records
the predictions table's hash, and :func:`judged` joins the sealed numbers with what was measured
afterwards — checking that neither the table nor the record of it changed since.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specbench.store.runs import RunSchemaError, load_runs, open_run
from specbench.theory.errors import percent_change, percent_error
from specbench.theory.step_time import StepTimeModel, cells_speedup
from specbench.derive.transfer import KEY, transfer_predictions

__all__ = ["PREDICTIONS", "MAX_T_BASE_DRIFT_PCT", "SPEC_BENCH", "calibration_cells", "predict",
           "predict_speedups", "judged", "drift_scaled"]

PREDICTIONS = "predictions.csv"
#: Beyond this median drift of a SKU's γ=0 arm between its calibration and its judged sweep,
#: the sealed t_base is taken not to have held (the repetitions of one cell spread about 5 %).
MAX_T_BASE_DRIFT_PCT = 5.0


def calibration_cells(sweep: pd.DataFrame, verify: pd.DataFrame,
                      gammas: list[int]) -> pd.DataFrame:
    """The rows to predict: every (workload, γ>0, batch) of the calibration sweep's γ=0 cells,
    with t_base (the γ=0 cell's latency) and d (the microbenchmark's extra verify time over
    t_base)."""
    base = sweep[(sweep["gamma"] == 0) & (sweep["status"] == "ok")
                 & (sweep["temperature"] == 0)]
    delta = verify.set_index(["batch", "gamma"])["delta_ms"]
    rows = [{"workload": c["workload"], "gamma": g, "batch": int(c["batch"]),
             "t_base_ms": c["pot_ms"],
             "d": delta.get((int(c["batch"]), g), np.nan) / c["pot_ms"]}
            for _, c in base.iterrows() for g in gammas if g > 0]
    return pd.DataFrame(rows, columns=[*KEY, "t_base_ms", "d"])


def predict(others: pd.DataFrame, calibration: pd.DataFrame) -> pd.DataFrame:
    """The sealed table: one row per predicted cell (cells no other SKU measured are left out;
    a cell without a microbenchmarked d is not predicted, never given d = 0)."""
    if calibration["d"].isna().any():
        missing = calibration.loc[calibration["d"].isna(), ["gamma", "batch"]].drop_duplicates()
        raise ValueError("the microbenchmark has no verify time for (γ, batch) "
                         f"{sorted(map(tuple, missing.to_numpy().tolist()))}: run "
                         "`specbench microbench` with those γ and batches")
    spec = others[(others["gamma"] > 0) & (others["temperature"] == 0)]
    out = transfer_predictions(calibration, spec)
    cols = [*KEY, "t_base_ms", "d", "h_ms", "alpha_transferred", "divisor_transferred",
            "share_transferred", "from_skus", "model_pot_ms", "ratio_pot_ms"]
    return out[cols].sort_values(KEY).reset_index(drop=True)


SPEC_BENCH = tuple(f"specbench:{c}" for c in
                   ("multi-turn", "translation", "summarization", "qa", "math_reasoning", "rag"))
SPEEDUP_COLUMNS = [*KEY, "prompts", "questions", "c", "c_cells", "d", "host_part",
                   "divisor_transferred", "share_transferred", "lent", "from_sessions",
                   "model_speedup", "ratio_speedup", "steps_speedup", "t_base_ms",
                   "model_pot_ms", "ratio_pot_ms"]


def predict_speedups(calibration: pd.DataFrame, verify: pd.DataFrame | None,
                     lender_cells: pd.DataFrame, lender_requests: pd.DataFrame,
                     workloads=SPEC_BENCH, gammas=(2, 6), batches=(1, 4),
                     prompts: int = 2, steps: StepTimeModel | None = None,
                     output_tokens: int = 64) -> pd.DataFrame:
    """The sealed table of a `make book` calibration (:mod:`specbench.derive.step_cost`): per
    workload × γ × batch, the speedup over the paired γ=0 arm from this host's step cost
    c(γ, b) and D, s lent by the other hosts (``lender_cells`` and ``lender_requests``:
    :func:`specbench.derive.analysis.sweep_cells` with ``every_session`` and
    :func:`~specbench.derive.analysis.request_predictors`, other host sessions only); ratio
    transfer beside it (the geometric mean of the lenders' measured speedups for the cell). A
    latency follows as the calibration's median γ=0 step at that batch over the speedup — its
    t_base is not the predicted workload's, so the latency is a guide and the speedup is what
    is judged. Cells without a step cost on this host or without a lender are left out.

    With ``steps`` (the calibration's step-time model, :mod:`specbench.theory.step_time`),
    ``steps_speedup`` is sealed beside it: each prompt's γ=0 and γ cells built from their
    steps (``rows`` = batch, the lent D and s, the lenders' prompt length, ``output_tokens``),
    the cell's speedup the harmonic mean over its prompts; NaN without a model."""
    from specbench.derive import step_cost
    cost = step_cost.step_costs(calibration, verify).set_index(["gamma", "batch"])
    base = calibration[(calibration["gamma"] == 0) & (calibration["temperature"] == 0)]
    t_base = base.groupby("batch")["pot_ms"].median()
    dtype = calibration["dtype"].iloc[0] if "dtype" in calibration else None
    order = step_cost.question_order(lender_requests) if len(lender_requests) else {}
    rows = []
    for w, g, b in ((w, g, b) for w in workloads for g in gammas for b in batches):
        if (g, b) not in cost.index:
            continue
        questions = step_cost.target_questions(order.get(w, []), prompts, b)
        lent = step_cost.lend(w, g, b, questions, dtype, lender_cells, lender_requests)
        if lent is None:
            continue
        theirs = lender_cells[(lender_cells["workload"] == w) & (lender_cells["gamma"] == g)
                              & (lender_cells["batch"] == b) & (lender_cells["temperature"] == 0)]
        rows.append({"workload": w, "gamma": g, "batch": b, "prompts": prompts,
                     "questions": " ".join(questions), "t_base_ms": t_base.get(b, np.nan),
                     **_cell_predictions(cost.loc[(g, b)], lent, theirs, steps, output_tokens)})
    out = pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)
    out["model_pot_ms"] = out["t_base_ms"] / out["model_speedup"]
    out["ratio_pot_ms"] = out["t_base_ms"] / out["ratio_speedup"]
    return out.sort_values(KEY).reset_index(drop=True)


def _cell_predictions(c: pd.Series, lent: dict, theirs: pd.DataFrame,
                      steps: StepTimeModel | None, output_tokens: int) -> dict:
    """One sealed cell's predictions: the model's (this host's step cost ``c``, the lent D and
    s), ratio transfer's (the lenders' geometric-mean speedup) and the step-time model's."""
    from specbench.derive import step_cost
    speedup, d_mean, s_mean = step_cost.speedup(lent["per_prompt"], c["c"])
    prompt_tokens = (float(theirs["prompt_tokens"].mean()) if "prompt_tokens" in theirs
                     else np.nan)
    gamma, batch = int(theirs["gamma"].iloc[0]), int(theirs["batch"].iloc[0])
    return {"c": c["c"], "c_cells": int(c["c_cells"]), "d": c["d"],
            "host_part": c["host_part"], "divisor_transferred": d_mean,
            "share_transferred": s_mean, "lent": lent["lent"], "from_sessions": lent["sessions"],
            "model_speedup": speedup,
            "ratio_speedup": float(np.exp(np.log(theirs["speedup"]).mean())),
            "steps_speedup": (cells_speedup(steps, lent["per_prompt"], gamma, batch,
                                            prompt_tokens, output_tokens)
                              if steps is not None and np.isfinite(prompt_tokens) else np.nan)}


def _sealed(sweep) -> tuple[pd.DataFrame, dict]:
    """The prediction a sweep names, after checking the table is the one it recorded."""
    record = sweep.manifest["judged_against"]
    where = Path(sweep.path).parent.parent
    path = where / record["sku"] / record["run_id"]
    prediction = open_run(path)
    stored = prediction.manifest.get("files", {}).get(PREDICTIONS, {}).get("sha256")
    if stored != record["predictions_sha256"]:
        raise RunSchemaError(f"{sweep.path / 'manifest.json'}: field judged_against/"
                             f"predictions_sha256 is {record['predictions_sha256']}, but "
                             f"{path / 'manifest.json'} records {stored}: the sealed "
                             "prediction is not the one the sweep was judged against")
    if prediction.manifest["finished_at"] > sweep.manifest["started_at"]:
        raise RunSchemaError(f"{path}: finished {prediction.manifest['finished_at']}, not "
                             f"before the sweep {sweep.run_id} started: not sealed")
    return prediction.table(PREDICTIONS), prediction.manifest   # table() checks the hash


def judged(root, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every sweep measured against a sealed prediction: its own cells beside the numbers
    predicted before it started, with both errors per cell.

    The cells are read from the judged sweep alone (:func:`specbench.derive.analysis.run_cells`),
    never from the store's latest-cell table: a later run of the same SKU, from this host or
    another, leaves a sealed verdict as it was. (``cells`` is accepted for older callers and
    not used.)

    Speedup over the paired γ=0 arm is what is judged (``model_speedup_err_pct``,
    ``ratio_speedup_err_pct``): the measured speedup is the sweep's paired γ=0 latency over its
    speculative latency. Tables sealed as speedups (a `make book` calibration) carry the
    predicted speedup; tables sealed as latencies (a γ=0 calibration) are scored as speedups
    too — the calibration's t_base over the sealed latency — so a γ=0 arm that moved between
    calibration and sweep does not count as the model's miss. The latency errors
    (``model_err_pct``, ``ratio_err_pct``; the sealed latency against the measured one) stay
    beside them with the γ=0 drift (``t_base_drift_pct``) that explains them."""
    from specbench.derive.analysis import run_cells
    frames = []
    for sweep in load_runs(root, kind="sweep"):
        if not sweep.manifest.get("judged_against"):
            continue
        table, manifest = _sealed(sweep)
        own = run_cells(sweep)
        greedy = own[own["temperature"] == 0]
        measured = greedy.loc[greedy["gamma"] > 0, ["sku", *KEY, "pot_ms", "alpha", "unstable",
                                                    "t_base_ms"]]
        measured = measured.rename(columns={"t_base_ms": "paired_t_base_ms"})
        both = measured.merge(table, on=KEY, how="inner")
        # The sweep measures the SKU's γ=0 arm again: if it moved since the calibration, the
        # sealed t_base did not hold and the miss is not all the model's (see drift_scaled).
        base = greedy.loc[greedy["gamma"] == 0, ["workload", "batch", "pot_ms"]]
        both = both.merge(base.rename(columns={"pot_ms": "sweep_t_base_ms"}),
                          on=["workload", "batch"], how="left")
        both["prediction_run"] = manifest["run_id"]
        both["sealed_at"] = manifest["finished_at"]
        both["measured_from"] = sweep.manifest["started_at"]
        frames.append(both)
    if not frames:
        return pd.DataFrame()
    return _errors(pd.concat(frames, ignore_index=True))


def _errors(out: pd.DataFrame) -> pd.DataFrame:
    """Speedup errors of every sealed predictor, latency errors, and the γ=0 drift."""
    for column in ("model_speedup", "ratio_speedup"):
        if column not in out:
            out[column] = np.nan
    latency_sealed = out["model_speedup"].isna()
    out.loc[latency_sealed, "model_speedup"] = (
        out["t_base_ms"] / out["model_pot_ms"])[latency_sealed]
    out.loc[latency_sealed, "ratio_speedup"] = (
        out["t_base_ms"] / out["ratio_pot_ms"])[latency_sealed]
    out["sealed_as"] = np.where(latency_sealed, "latency", "speedup")
    out["measured_speedup"] = out["paired_t_base_ms"] / out["pot_ms"]
    # Tables sealed before the step-time model carry no steps_speedup.
    if "steps_speedup" not in out:
        out["steps_speedup"] = np.nan
    for name in ("model", "ratio", "steps"):
        out[f"{name}_speedup_err_pct"] = percent_error(out[f"{name}_speedup"].astype(float),
                                                       out["measured_speedup"])
    out["model_err_pct"] = percent_error(out["model_pot_ms"], out["pot_ms"])
    out["ratio_err_pct"] = percent_error(out["ratio_pot_ms"], out["pot_ms"])
    out["t_base_drift_pct"] = percent_change(out["sweep_t_base_ms"], out["t_base_ms"])
    return out


def drift_scaled(judged: pd.DataFrame) -> pd.DataFrame:
    """A diagnostic made after measurement, never sealed: both predictions scaled by the
    ratio of the sweep's own γ=0 latency to the calibration's (proportional, so the
    microbenchmark's absolute verify time scales too — an approximation), with their errors
    (``model_scaled_err_pct``, ``ratio_scaled_err_pct``). It separates a calibration that
    did not hold from a model that did not transfer."""
    judged = judged.dropna(subset=["sweep_t_base_ms"])
    scale = judged["sweep_t_base_ms"] / judged["t_base_ms"]
    return judged.assign(model_scaled_err_pct=percent_error(
        judged["model_pot_ms"] * scale, judged["pot_ms"]),
        ratio_scaled_err_pct=percent_error(judged["ratio_pot_ms"] * scale,
                                               judged["pot_ms"]))
