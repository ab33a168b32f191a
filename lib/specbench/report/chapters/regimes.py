"""The regimes chapter's numbers: which regime each cell is in and how close eq. 1 comes."""
from __future__ import annotations

from specbench.report import curves, wording
from specbench.report.chapters.base import (
    EQ1_FIT_PCT,
    Numbers,
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



def numbers(root=DEFAULT_ROOT) -> Numbers:
    cells = greedy_cells(root)
    first = first_sku(cells)
    run = sweep_run(root, first["run_id"].iloc[0])
    counts = step_counts(root, first)
    n = Numbers()
    n.add(run_ids(cells), sku0=first["sku_label"].iloc[0],
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
    # Batch 1 over every SKU: does eq. 1 fit every cell, and where is the worst one?
    fits = eq1_fits_batch1(cells)
    abl = curves.error_ablation(cells)
    worst = abl[abl["batch"] == 1].sort_values("eq1_abs_pct").iloc[-1]
    n.add(eq1_fit_pct=EQ1_FIT_PCT, b1_fit_where=wording.across(fits),
          b1_worst_err_pct=float(worst["eq1_abs_pct"]), b1_worst_sku=worst["sku_label"],
          b1_worst_cell=f"'{worst['workload']}' at γ={int(worst['gamma'])}")
    spec = cells[cells["gamma"] > 0]
    n.add(emitted_bound=claim((spec["emitted_per_step"] <= spec["gamma"] + 1 + 1e-9).all(),
                              "a step emits at most γ+1 tokens",
                              "a cell's measured tokens per step exceeds γ+1"))
    spec_all = cells[cells["gamma"] > 0]
    per_sku = [f"{int((g['outputs_equal'] == False).sum())} of {len(g)} on {label}"  # noqa: E712
               for label, g in spec_all.groupby("sku_label", sort=False)]
    n.add(mismatch_sentence="; ".join(per_sku))
    return n


