"""The measured chapter's numbers: what the store holds (one table row per SKU, one per run),
the harness's own cost, and the one table of published reference values."""
from __future__ import annotations

import pandas as pd

from specbench.derive.overhead import overhead_summary
from specbench.derive import analysis, transfer
from specbench.report.numbers import (
    Numbers,
    floor_split,
    greedy_cells,
    latest_floor,
    run_ids,
)
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.theory.errors import mape_of, percent_change

__all__ = ["numbers", "published_table", "published_summary", "sku_table"]


def numbers(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> Numbers:
    runs = load_runs(root)
    n = Numbers()
    kinds = pd.Series([r.manifest["kind"] for r in runs])
    sweeps = [r.run_id for r in runs if r.manifest["kind"] == "sweep"]
    n.add([r.run_id for r in runs], n_runs=len(runs), n_skus=len({r.sku for r in runs}),
          n_sweeps=len(sweeps), n_other=int((kinds != "sweep").sum()),
          n_other_kinds=int(kinds[kinds != "sweep"].nunique()),
          latest_sweep=sweeps[-1] if sweeps else "none")
    n.tables["skus"] = sku_table(runs)
    first = greedy_cells(root, cells)
    n.add(first_label=first["sku_label"].iloc[0] if len(first) else "none")
    bench = [r for r in runs if r.manifest["kind"] == "overhead"]
    if bench:
        summary = overhead_summary(bench[-1].table("overhead.csv"))
        n.add(overhead_pct=float(summary["overhead_pct"]),
              overhead_pot_pct=float(summary["pot_overhead_pct"]),
              counter_read_ms=float(bench[-1].manifest.get("counter_read_ms", float("nan"))),
              overhead_run=bench[-1].run_id)
    else:
        n.add(overhead_pct=float("nan"), overhead_pot_pct=float("nan"),
              counter_read_ms=float("nan"), overhead_run="none")
    return n


def sku_table(runs: list[Run]) -> pd.DataFrame:
    """One row per SKU: its label, its id in the store, the CPU family and model it was told
    apart by, and how many runs of each kind it holds (a table that grows with the store,
    where a paragraph would)."""
    from specbench.derive.analysis import sku_label
    rows = {}
    for run in runs:
        hw = run.manifest["hardware"]
        row = rows.setdefault(run.sku, {
            "SKU": sku_label(run), "store folder": run.sku,
            "CPU family, model": (f"{hw['cpu_family']}, {hw.get('cpu_model_number')}"
                                  if hw.get("cpu_family") is not None else
                                  (hw.get("gpus") or [{}])[0].get("name", "not recorded")),
            "engine": run.manifest["engine"]["name"], "kinds": {}})
        row["kinds"][run.manifest["kind"]] = row["kinds"].get(run.manifest["kind"], 0) + 1
    for row in rows.values():
        kinds = row.pop("kinds")
        row["sweeps"] = kinds.pop("sweep", 0)
        row["other runs"] = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) or "—"
    return pd.DataFrame(list(rows.values()))


def _project_values(root, cells: pd.DataFrame) -> tuple[dict, dict]:
    """This project's value of every published quantity, per SKU label, and the runs each
    SKU's values were computed from."""
    from specbench.theory import economics
    calibration = cells["sku"].iloc[0]
    ours, sources = {}, {}
    for sku, group in cells.groupby("sku", sort=False):
        label = group["sku_label"].iloc[0]
        h = analysis.published_quantities(group)
        spec = group[group["gamma"] > 0]
        rep = spec[spec["workload"] == "repeat"]
        values = {**h,
                  "mape_eq1_repeat": mape_of(rep["err_eq1_pct"]),
                  "mape_eq1_open": mape_of(spec[spec["workload"] == "open"]["err_eq1_pct"]),
                  "residual_mean_ms": rep[rep["batch"] == 1]["residual_ms"].mean(),
                  **economics.worksheet_values()}
        used = run_ids(group)
        if sku != calibration:   # held out: α from the first SKU
            held = transfer.held_out(cells, calibration, sku)
            values["transfer_mape"] = mape_of(held["model_err_pct"])
            used = run_ids(cells[cells["sku"] == calibration]) + used
        floor = latest_floor(root, sku)
        if floor is not None:
            per_step, _, _ = floor_split(floor)
            small, large = per_step.iloc[0], per_step.iloc[1]
            values.update(floor_host_ms=small["host_ms"], host_share_pct=100 * small["host_share"],
                          host_size_invariance_pct=abs(percent_change(large["host_ms"],
                                                                        small["host_ms"])))
            used.append(floor.run_id)
        ours[label] = values
        sources[label] = ", ".join(used)
    return ours, sources


def _fmt(v, unit: str) -> str:
    return "—" if v is None or pd.isna(v) else f"{v:.3g}{unit}"


def published_table(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """The published-reference comparison: one row per quantity, the published value and
    this project's value per SKU; the last row names the runs each column was computed from."""
    from specbench.report.reference import PUBLISHED
    ours, sources = _project_values(root, greedy_cells(root, cells))
    rows = []
    for key, quantity, value, unit, source in PUBLISHED:
        row = {"quantity": quantity, "published": f"{value:g}{unit}", "source": source}
        row.update({f"this project: {label}": _fmt(values.get(key), unit)
                    for label, values in ours.items()})
        rows.append(row)
    rows.append({"quantity": "runs", "published": "—", "source": "A, B",
                 **{f"this project: {label}": used for label, used in sources.items()}})
    return pd.DataFrame(rows)


def published_summary(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """The comparison in six columns whatever the number of SKUs: the published value, this
    project's on its first SKU, the range over every SKU with a value, and how many have one."""
    from specbench.report.reference import PUBLISHED
    ours, _ = _project_values(root, greedy_cells(root, cells))
    first = next(iter(ours))
    rows = []
    for key, quantity, value, unit, source in PUBLISHED:
        have = [v[key] for v in ours.values() if v.get(key) is not None and not pd.isna(v[key])]
        span = (_fmt(min(have), unit) if len(have) == 1 or min(have) == max(have) else
                f"{min(have):.3g}–{max(have):.3g}{unit}") if have else "—"
        rows.append({"quantity": quantity, "published": f"{value:g}{unit}", "source": source,
                     "this project, first SKU": _fmt(ours[first].get(key), unit),
                     "range over SKUs": span, "SKUs with a value": f"{len(have)} of {len(ours)}"})
    return pd.DataFrame(rows)
