"""The measured chapter's numbers and the one table of published reference values."""
from __future__ import annotations

import pandas as pd

from specbench.measure.overhead import overhead_summary  # noqa: F401  (the chapter's table)
from specbench.report import analysis, transfer
from specbench.report.chapters.base import (
    Numbers,
    floor_split,
    greedy_cells,
    latest_floor,
    regime_sentence,
    regime_table,
    run_ids,
)
from specbench.store.runs import DEFAULT_ROOT, load_runs

__all__ = ["numbers", "published_table"]



def numbers(root=DEFAULT_ROOT) -> Numbers:
    runs = load_runs(root)
    cells = greedy_cells(root)
    table = regime_table(root, cells)
    n = Numbers()
    sweeps = [r.run_id for r in runs if r.manifest["kind"] == "sweep"]
    n.add([r.run_id for r in runs], n_runs=len(runs), latest_sweep=sweeps[-1],
          regime_sentence=regime_sentence(table))
    return n


def published_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    """The published-reference comparison: one row per quantity, the published value and
    this project's value per SKU; the last row names the runs each column was computed from."""
    from specbench.report.reference import PUBLISHED
    from specbench.theory import economics
    cells = greedy_cells(root)
    calibration = cells["sku"].iloc[0]
    ours, sources = {}, {}
    for sku, group in cells.groupby("sku", sort=False):
        label = group["sku_label"].iloc[0]
        h = analysis.headline(group)
        spec = group[group["gamma"] > 0]
        rep = spec[spec["workload"] == "repeat"]
        values = {**h,
                  "mape_eq1_repeat": rep["err_eq1_pct"].abs().mean(),
                  "mape_eq1_open": spec[spec["workload"] == "open"]["err_eq1_pct"].abs().mean(),
                  "residual_mean_ms": rep[rep["batch"] == 1]["residual_ms"].mean(),
                  **economics.worksheet_values()}
        used = run_ids(group)
        if sku != calibration:   # held out: α from the first SKU
            held = transfer.held_out(cells, calibration, sku)
            values["transfer_mape"] = held["model_err_pct"].abs().mean()
            used = run_ids(cells[cells["sku"] == calibration]) + used
        floor = latest_floor(root, sku)
        if floor is not None:
            per_step, _, _ = floor_split(floor)
            small, large = per_step.iloc[0], per_step.iloc[1]
            values.update(floor_host_ms=small["host_ms"], host_share_pct=100 * small["host_share"],
                          host_size_invariance_pct=100 * abs(large["host_ms"] / small["host_ms"] - 1))
            used.append(floor.run_id)
        ours[f"this project: {label}"] = values
        sources[f"this project: {label}"] = ", ".join(used)
    rows = []
    for key, quantity, value, unit, source in PUBLISHED:
        row = {"quantity": quantity, "published": f"{value:g}{unit}", "source": source}
        for column, values in ours.items():
            v = values.get(key)
            row[column] = "—" if v is None or pd.isna(v) else f"{v:.3g}{unit}"
        rows.append(row)
    rows.append({"quantity": "runs", "published": "—", "source": "A, B", **sources})
    return pd.DataFrame(rows)
