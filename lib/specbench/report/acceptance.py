"""Acceptance across its range: the tables and numbers of the acceptance chapter.

From :func:`specbench.derive.analysis.sweep_cells` (the latest cell of each kind per SKU) and the
latest 'lossless' run: a Spec-Bench-style table per category and γ, the α bands the measured
cells cover, and the lossless verdict at each temperature.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.store.runs import DEFAULT_ROOT, load_runs

__all__ = ["BANDS", "MIN_DRAFTING_SHARE", "display_workload", "category_table", "band_table",
           "lossless_table", "engine_fails_lossless", "speedup_curves", "primary_sku",
           "spec_bench_reference_table", "temperature_table"]

BANDS = ((0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9))
#: A cell says something about verification cost only when most of its steps draft.
MIN_DRAFTING_SHARE = 0.5


def display_workload(name: str) -> str:
    return name.split(":", 1)[1] if name.startswith("specbench:") else name


def category_table(cells: pd.DataFrame, sku: str, batch: int = 1) -> pd.DataFrame:
    """Per workload and γ on one SKU: speedup (paired), mean accepted tokens per drafting
    step, α, drafting share and tokens per step — the Spec-Bench table's columns."""
    c = cells[(cells["sku"] == sku) & (cells["batch"] == batch) & (cells["gamma"] > 0)
              & (cells["temperature"] == 0)]
    out = c.assign(workload=c["workload"].map(display_workload))[
        ["workload", "gamma", "speedup", "mean_acceptance_length", "alpha", "drafting_share",
         "divisor_counters", "n_requests"]]
    return out.rename(columns={"mean_acceptance_length": "mean accepted tokens",
                               "alpha": "α (counters)", "drafting_share": "drafting share",
                               "divisor_counters": "tokens per step", "gamma": "γ",
                               "n_requests": "prompts", "speedup": "speedup ×"}
                      ).sort_values(["workload", "γ"]).reset_index(drop=True)


def band_table(cells: pd.DataFrame) -> pd.DataFrame:
    """How many batch-1 greedy cells of one prompt class fall in each α band, and how many of
    those draft on at least :data:`MIN_DRAFTING_SHARE` of their steps."""
    c = cells[(cells["batch"] == 1) & (cells["gamma"] > 0) & (cells["temperature"] == 0)]
    rows = []
    for lo, hi in BANDS:
        inside = c[(c["alpha"] > lo) & (c["alpha"] <= hi)]
        drafting = inside[inside["drafting_share"] >= MIN_DRAFTING_SHARE]
        rows.append({"α band": f"{lo:.1f}–{hi:.1f}", "cells": len(inside),
                     f"drafting ≥ {MIN_DRAFTING_SHARE:.0%}": len(drafting),
                     "workloads": ", ".join(sorted({display_workload(w)
                                                    for w in inside["workload"]}))})
    return pd.DataFrame(rows)


def _patch_name(run) -> str:
    patch = (run.manifest.get("engine", {}).get("settings", {}) or {}).get("engine_patch")
    return patch or "as released"


def lossless_runs(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Every lossless run's verdict per temperature, one row each: SKU, dtype, the prompt
    sampled, the engine patch ("as released" or its name), and the test's outcome."""
    rows = []
    for run in load_runs(root, kind="lossless"):
        verdict = run.table("verdict.csv")
        for _, v in verdict.iterrows():
            rows.append({"run_id": run.run_id, "sku": run.sku, "dtype": run.manifest["dtype"],
                         "workload": run.manifest["grid"].get("workload", "repeat"),
                         "engine_patch": _patch_name(run), **v.to_dict()})
    return pd.DataFrame(rows)


def lossless_table(root=DEFAULT_ROOT) -> tuple[pd.DataFrame, str | None]:
    """The most powerful lossless run of the engine as released — the one whose speculative
    arm drafted the most tokens at temperature > 0 (the test sees only what speculation
    touches; the latest such run on a tie) — its verdict per temperature and its run id."""
    runs = lossless_runs(root)
    if runs.empty:
        return pd.DataFrame(), None
    released = runs[runs["engine_patch"] == "as released"]
    if released.empty:
        return pd.DataFrame(), None
    drafted = (released[released["temperature"] > 0].groupby("run_id", sort=False)
               ["draft_tokens"].sum())
    best = drafted[drafted == drafted.max()].index[-1] if len(drafted) else \
        released["run_id"].iloc[-1]
    return released[released["run_id"] == best].reset_index(drop=True), best


def engine_fails_lossless(root=DEFAULT_ROOT) -> bool:
    """Whether the engine as released fails the test: some run of it rejects equal
    distributions at a temperature > 0 (a prompt that rarely drafts cannot show the defect, so
    one rejection is the verdict, not the latest run)."""
    runs = lossless_runs(root)
    if runs.empty:
        return False
    hot = runs[(runs["engine_patch"] == "as released") & (runs["temperature"] > 0)]
    return bool(hot["rejects_lossless"].astype(bool).any())


def patched_passes_lossless(root=DEFAULT_ROOT) -> bool | None:
    """Whether every run with an engine patch passes at every temperature > 0 (None: no
    patched run in the store)."""
    runs = lossless_runs(root)
    if runs.empty:
        return None
    patched = runs[(runs["engine_patch"] != "as released") & (runs["temperature"] > 0)]
    if patched.empty:
        return None
    return not bool(patched["rejects_lossless"].astype(bool).any())


_CURVE_ALPHAS = np.linspace(0, 1, 41)


def speedup_curves(gammas, alphas=_CURVE_ALPHAS) -> pd.DataFrame:
    """Eq. 1's speedup αγ+1 (d = 0, every step drafting) per γ, for the figure's curves."""
    return pd.DataFrame([{"gamma": g, "alpha": a, "speedup": a * g + 1}
                         for g in gammas for a in alphas])


def primary_sku(cells: pd.DataFrame) -> str:
    """The SKU the prose quotes: the one with the most greedy speculative cells measured
    (ties: the later in the store)."""
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)]
    counts = spec.groupby("sku", sort=False).size()
    return counts[counts == counts.max()].index[-1]


def spec_bench_reference_table(cells: pd.DataFrame) -> pd.DataFrame:
    """The Spec-Bench leaderboard's published prompt-lookup row beside this project's batch-1
    speedups per category (every γ measured, and the best). Published values are quoted, not
    measured here: another model (Vicuna-7B) on another machine (an A100)."""
    from specbench.report.reference import SPEC_BENCH_PLD
    sku = primary_sku(cells)
    c = cells[(cells["sku"] == sku) & (cells["batch"] == 1) & (cells["gamma"] > 0)
              & (cells["temperature"] == 0) & cells["workload"].str.startswith("specbench:")]
    rows = []
    for category, published in SPEC_BENCH_PLD["speedup"].items():
        mine = c[c["workload"] == f"specbench:{category}"]
        row = {"category": category, "published PLD speedup ×": published}
        for _, r in mine.sort_values("gamma").iterrows():
            row[f"this project γ={int(r['gamma'])} ×"] = r["speedup"]
        rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["sku"] = sku
    table.attrs["runs"] = list(dict.fromkeys(c["run_id"]))
    return table


def temperature_table(cells: pd.DataFrame) -> pd.DataFrame:
    """The sampled (temperature > 0) speculative cells beside their greedy twins: α and speedup,
    with the engine build that sampled them (as released: not evidence; patched: evidence)."""
    hot = cells[(cells["temperature"] > 0) & (cells["gamma"] > 0)]
    rows = []
    for _, r in hot.iterrows():
        twin = cells[(cells["sku"] == r["sku"]) & (cells["workload"] == r["workload"])
                     & (cells["batch"] == r["batch"]) & (cells["gamma"] == r["gamma"])
                     & (cells["temperature"] == 0)]
        rows.append({"SKU": r["sku_label"], "engine": r.get("engine_patch", "as released"),
                     "workload": display_workload(r["workload"]),
                     "batch": r["batch"], "γ": r["gamma"], "temperature": r["temperature"],
                     "α": r["alpha"], "speedup ×": r["speedup"],
                     "greedy α": twin["alpha"].iloc[0] if len(twin) else np.nan,
                     "greedy speedup ×": twin["speedup"].iloc[0] if len(twin) else np.nan})
    return pd.DataFrame(rows)
