"""The regimes chapter's numbers: which regime each cell is in and how close eq. 1 comes."""
from __future__ import annotations

import pandas as pd

from specbench.report import curves
from specbench.report.numbers import (
    EQ1_FIT_PCT,
    Numbers,
    count_of,
    eq1_fits_batch1,
    first_sku,
    greedy_cells,
    pct,
    penalty,
    range_phrase,
    run_ids,
    step_counts,
    sweep_run,
)
from specbench.report.wording import claim
from specbench.store.runs import DEFAULT_ROOT, load_runs

__all__ = ["numbers"]



def numbers(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> Numbers:
    cells = greedy_cells(root, cells)
    first = first_sku(cells)
    run = sweep_run(root, first["run_id"].iloc[0])
    counts = step_counts(root, first)
    n = Numbers()
    n.add(run_ids(cells), sku0=first["sku_label"].iloc[0], sku0_runs=", ".join(run_ids(first)),
          open_penalty=penalty(run, "open"), repeat_penalty=penalty(run, "repeat"),
          n_sweeps=len(load_runs(root, kind="sweep")), n_shown=len(run_ids(cells)))
    b1 = first[first["batch"] == 1]
    spec1 = b1[b1["gamma"] > 0]
    n.add(t_base_b1=float(b1[b1["gamma"] == 0]["pot_ms"].median()),
          b1_max_err_pct=float(spec1["err_eq1_pct"].abs().max()),
          b4_max_err_pct=float(first[(first["batch"] == 4) & (first["gamma"] > 0)]
                               ["err_eq1_pct"].abs().max()))
    for w in ("repeat", "open"):
        spec = first[(first["workload"] == w) & (first["gamma"] > 0)]
        c = counts[(counts["workload"] == w) & (counts["gamma"] > 0)]
        n.add(**{f"{w}_alpha_lo": float(spec["alpha"].min()),
                 f"{w}_alpha_hi": float(spec["alpha"].max()),
                 f"{w}_pot_lo": float(spec["pot_ms"].min()),
                 f"{w}_pot_hi": float(spec["pot_ms"].max()),
                 f"{w}_drafting_pct": range_phrase(pct(c["drafting_share"].min()),
                                             pct(c["drafting_share"].max()), ".1f")})
    c1 = counts[(counts["workload"] == "open") & (counts["gamma"] > 0) & (counts["batch"] == 1)]
    row = c1.iloc[0]
    n.add(open_b1_drafting_steps=int(row["drafting_steps"] // first["n_reps"].iloc[0]),
          open_b1_steps=int(row["decode_steps"] // first["n_reps"].iloc[0]),
          open_b1_one_row_pct=pct(1 - c1["drafting_share"].max()))
    # Acceptance over every SKU: the two workloads' α never overlap.
    spec = cells[cells["gamma"] > 0]
    n.add(all_repeat_alpha_min=float(spec[spec["workload"] == "repeat"]["alpha"].min()),
          all_open_alpha_max=float(spec[spec["workload"] == "open"]["alpha"].max()),
          n_skus=int(cells["sku"].nunique()))
    # Batch 1 over every SKU: does eq. 1 fit every cell, and where is the worst one? By count;
    # the table names the SKUs.
    fits = eq1_fits_batch1(cells)
    abl = curves.error_ablation(cells)
    worst = abl[abl["batch"] == 1].sort_values("eq1_abs_pct").iloc[-1]
    n.add(eq1_fit_pct=EQ1_FIT_PCT, b1_fit_where=count_of(fits),
          b1_fit_lead=("For the paper" if all(fits.values()) else "Against the paper"),
          b1_worst_err_pct=float(worst["eq1_abs_pct"]), b1_worst_sku=worst["sku_label"],
          b1_worst_cell=f"'{worst['workload']}' at γ={int(worst['gamma'])}")
    n.add(emitted_bound=claim((spec["emitted_per_step"] <= spec["gamma"] + 1 + 1e-9).all(),
                              "a step emits at most γ+1 tokens",
                              "a cell's measured tokens per step exceeds γ+1"))
    n.add(equal_sentence=_equal_sentence(spec))
    n.tables["per_sku"] = per_sku_table(abl, spec, fits)
    return n


def _equal_sentence(spec: pd.DataFrame) -> str:
    """Greedy speculative tokens against the γ=0 tokens, token for token, by dtype: where
    they differ only in low precision, near-tie numerics of batched verification is the
    reading; a float32 cell that differs would be a defect, and the sentence says so."""
    known = spec[spec["outputs_equal"].notna()]
    f32 = known[known["dtype"] == "float32"]
    low = known[known["dtype"] != "float32"]
    f32_equal = int(f32["outputs_equal"].eq(True).sum())
    low_equal = int(low["outputs_equal"].eq(True).sum())
    low_part = f"{low_equal} of {len(low)} bfloat16 cells"
    if f32_equal == len(f32):
        return (f"Speculative greedy tokens equal the γ=0 tokens in every float32 cell "
                f"({f32_equal} of {len(f32)}) but in {low_part}: near-tie numerics of "
                "verifying γ+1 rows in one pass in low precision")
    return (f"Speculative greedy tokens differ from the γ=0 tokens in {len(f32) - f32_equal} "
            f"of {len(f32)} float32 cells, where they should not, and equal them in {low_part}")


def per_sku_table(abl: pd.DataFrame, spec: pd.DataFrame, fits: dict) -> pd.DataFrame:
    """One row per SKU: eq. 1's worst error at batches 1 and 4, whether it fits every batch-1
    cell, and how many speculative cells emit other tokens than γ=0."""
    rows = []
    for label, g in spec.groupby("sku_label", sort=False):
        a = abl[abl["sku_label"] == label]
        worst = {b: a[a["batch"] == b]["eq1_abs_pct"].max() for b in (1, 4)}
        rows.append({"SKU": label, "dtype": g["dtype"].iloc[0],
                     "worst batch-1 error (%)": worst[1],
                     f"within {EQ1_FIT_PCT:.0f} % at batch 1": fits.get(label, False),
                     "worst batch-4 error (%)": worst[4],
                     "cells with other tokens than γ=0":
                         f"{int(g['outputs_equal'].eq(False).sum())} of {len(g)}"})
    return pd.DataFrame(rows)
