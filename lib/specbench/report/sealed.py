"""Sealed predictions: a SKU's latencies predicted from its calibration before its sweep.

A SKU that has only a cheap calibration — a sweep of its γ=0 arm and its kernel
microbenchmark — gets, for every speculative cell of the grid, the transfer prediction of
:func:`specbench.report.transfer.transfer_predictions`: acceptance (D, drafting share) pooled
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
from specbench.theory import model
from specbench.report.transfer import KEY, transfer_predictions

__all__ = ["PREDICTIONS", "MAX_T_BASE_DRIFT_PCT", "calibration_cells", "predict", "judged",
           "drift_scaled"]

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


def judged(root, cells: pd.DataFrame) -> pd.DataFrame:
    """Every sweep measured against a sealed prediction: its cells (as ``cells`` — the
    :func:`specbench.report.analysis.sweep_cells` table — holds them) beside the numbers
    predicted before the sweep started, with both errors per cell."""
    frames = []
    for sweep in load_runs(root, kind="sweep"):
        if not sweep.manifest.get("judged_against"):
            continue
        table, manifest = _sealed(sweep)
        measured = cells.loc[(cells["run_id"] == sweep.run_id) & (cells["gamma"] > 0)
                             & (cells["temperature"] == 0),
                             ["sku", *KEY, "pot_ms", "alpha", "unstable"]]
        both = measured.merge(table, on=KEY, how="inner")
        # The sweep measures the SKU's γ=0 arm again: if it moved since the calibration, the
        # sealed t_base did not hold and the miss is not all the model's (see drift_scaled).
        base = cells.loc[(cells["run_id"] == sweep.run_id) & (cells["gamma"] == 0)
                         & (cells["temperature"] == 0), ["workload", "batch", "pot_ms"]]
        both = both.merge(base.rename(columns={"pot_ms": "sweep_t_base_ms"}),
                          on=["workload", "batch"], how="left")
        both["prediction_run"] = manifest["run_id"]
        both["sealed_at"] = manifest["finished_at"]
        both["measured_from"] = sweep.manifest["started_at"]
        frames.append(both)
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out["model_err_pct"] = model.cell_errors(out["model_pot_ms"], out["pot_ms"])
    out["ratio_err_pct"] = model.cell_errors(out["ratio_pot_ms"], out["pot_ms"])
    out["t_base_drift_pct"] = (out["sweep_t_base_ms"] / out["t_base_ms"] - 1) * 100
    return out


def drift_scaled(judged: pd.DataFrame) -> pd.DataFrame:
    """A diagnostic made after measurement, never sealed: both predictions scaled by the
    ratio of the sweep's own γ=0 latency to the calibration's (proportional, so the
    microbenchmark's absolute verify time scales too — an approximation), with their errors
    (``model_scaled_err_pct``, ``ratio_scaled_err_pct``). It separates a calibration that
    did not hold from a model that did not transfer."""
    judged = judged.dropna(subset=["sweep_t_base_ms"])
    scale = judged["sweep_t_base_ms"] / judged["t_base_ms"]
    return judged.assign(model_scaled_err_pct=model.cell_errors(
        judged["model_pot_ms"] * scale, judged["pot_ms"]),
        ratio_scaled_err_pct=model.cell_errors(judged["ratio_pot_ms"] * scale,
                                               judged["pot_ms"]))
