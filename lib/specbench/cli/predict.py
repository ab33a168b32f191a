"""``specbench predict``: seal a SKU's predicted latencies before its sweep measures them.

The SKU has only its calibration — a sweep of the γ=0 arm (``specbench sweep --gammas 0``) and
a kernel microbenchmark (``specbench microbench``), both taken with the SKU's threads and
dtype. Everything else comes from the other SKUs in the store (:mod:`specbench.report.sealed`).
The predictions go into a closed 'prediction' run whose manifest hashes the table; then
``specbench sweep --judged-against RUN`` measures the SKU and the book compares the two.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from specbench.cli import args as cliargs
from specbench.report.sealed import PREDICTIONS, calibration_cells, predict
from specbench.store.runs import DEFAULT_ROOT, Run, create_run, load_runs, open_run, sha256_file

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run"]

HELP = "seal a SKU's predicted per-token latencies before its sweep (a 'prediction' run)"
DESCRIPTION = __doc__.split("\n\n")[0].strip("`") + (
    " From a SKU's γ=0 calibration sweep and its kernel microbenchmark, predict every "
    "speculative cell with acceptance pooled from the other SKUs, and write a closed "
    "'prediction' run; then measure with `specbench sweep --judged-against RUN`.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", required=True, metavar="SWEEP_RUN",
                   type=cliargs.run_folder_of("sweep"),
                   help="the SKU's calibration: a complete sweep of γ=0 only")
    p.add_argument("--microbench", metavar="MICROBENCH_RUN",
                   type=cliargs.run_folder_of("microbench"),
                   help="the SKU's kernel microbenchmark (default: its latest in the store)")
    p.add_argument("--gammas", type=cliargs.gamma_list, default=(2, 4, 6),
                   help="speculative γ to predict (2,4,6)")
    p.add_argument("--root", type=cliargs.existing_dir, default=str(DEFAULT_ROOT),
                   help="the run store the other SKUs are read from and the prediction "
                        "written to (default: $SPECBENCH_RUNS, else the checkout's runs/)")


def _calibration(path: Path) -> Run:
    run = open_run(path)
    where = path / "manifest.json"
    if not run.complete:
        raise ValueError(f"{where}: field status is 'running': finish the calibration first")
    if run.manifest["grid"]["gammas"] != [0]:
        raise ValueError(f"{where}: field grid/gammas is {run.manifest['grid']['gammas']}: a "
                         "sealed prediction uses the γ=0 arm only (specbench sweep --gammas 0)")
    return run


def _microbench(path: Path | None, root: Path, sku: str) -> Run:
    if path is None:
        found = [r for r in load_runs(root, kind="microbench") if r.sku == sku]
        if not found:
            raise ValueError(f"no microbenchmark of SKU {sku!r} under {root}: run `specbench "
                             "microbench` with the calibration's threads and dtype")
        return found[-1]
    run = open_run(path)
    if run.sku != sku:
        raise ValueError(f"{path / 'manifest.json'}: field sku is {run.sku!r}, the "
                         f"calibration's is {sku!r}")
    return run


def _others(root: Path, sku: str):
    """The other SKUs' cells, and refusal when this SKU already has speculative cells (a
    prediction made after them would not be sealed)."""
    from specbench.report.analysis import sweep_cells
    cells = sweep_cells(root)
    seen = cells[(cells["sku"] == sku) & (cells["gamma"] > 0)]
    if len(seen):
        raise ValueError(f"SKU {sku!r} already has speculative cells (run "
                         f"{seen['run_id'].iloc[0]}): a prediction made now is not sealed")
    # The lenders leave-one-SKU-out uses, so a sealed prediction is that same prediction.
    from specbench.report.transfer import lends
    return cells[(cells["sku"] != sku) & lends(cells["sku"])]


def run(args, parser: argparse.ArgumentParser) -> int:
    root = Path(args.root)
    try:
        calibration = _calibration(Path(args.calibration))
        micro = _microbench(Path(args.microbench) if args.microbench else None, root,
                            calibration.sku)
        others = _others(root, calibration.sku)
        rows = calibration_cells(calibration.table("cells.csv"), micro.table("verify.csv"),
                                 list(args.gammas))
        if rows.empty:
            raise ValueError(f"{calibration.path / 'cells.csv'}: no successful greedy γ=0 "
                             "cell to calibrate t_base from")
        table = predict(others, rows)
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    if table.empty:
        parser.exit(2, f"{parser.prog}: error: no other SKU measured any cell of the "
                       "calibration's grid: nothing to predict from")
    m = calibration.manifest
    from specbench.store.runs import code_revision
    used = others.drop_duplicates("run_id")
    manifest = {
        "kind": "prediction", "sku": calibration.sku, "code": code_revision(),
        "model": m["model"], "engine": m["engine"], "hardware": m["hardware"],
        "dtype": m["dtype"],
        "grid": {"gammas": list(args.gammas), "batches": sorted(table["batch"].unique().tolist()),
                 "workloads": sorted(table["workload"].unique().tolist())},
        "calibration": {"sweep": _ref(calibration, "cells.csv"),
                        "microbench": _ref(micro, "verify.csv")},
        "from_runs": [{"sku": r.sku, "run_id": r.run_id} for r in used.itertuples()],
        "method": "specbench.report.sealed: acceptance (D, drafting share) pooled from the "
                  "other SKUs' counters, h/t_base fitted on them, t_base and d the SKU's own",
    }
    out = create_run(root, manifest)
    out.write_table(PREDICTIONS, table)
    out.finish()
    print(out.path)
    print(f"sealed {len(table)} cells: {PREDICTIONS} sha256 "
          f"{sha256_file(out.path / PREDICTIONS)}; now measure with "
          f"`specbench sweep --judged-against {out.path}`")
    return 0


def _ref(run: Run, table: str) -> dict:
    return {"run_id": run.run_id, table: sha256_file(run.path / table)}
