"""``specbench predict``: seal a host's predicted speedups before its sweep measures them.

The operator's flow: `make book` on a host measures 'repeat', 'open' and 'edit' at γ 0/2/6 and
batches 1 and 4 (and the kernel microbenchmark); ``specbench predict --calibration <that sweep>``
then seals, for every Spec-Bench category × γ × batch, the speedup over the paired γ=0 arm
from the step cost this host measured and the tokens per step and drafting share the other
hosts measured per prompt (:mod:`specbench.derive.step_cost`). A prediction is refused for a
workload the calibration's host session already measured with speculation (it would not be
sealed). A calibration of the γ=0 arm alone (``specbench sweep --gammas 0``) takes the older
latency path (:func:`specbench.derive.sealed.predict`). Either way the predictions go into a
closed 'prediction' run whose manifest hashes the table; then ``specbench sweep
--judged-against RUN`` measures the host and the book compares the two.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specbench.cli import args as cliargs
from specbench.derive.sealed import (
    PREDICTIONS,
    SPEC_BENCH,
    calibration_cells,
    predict,
    predict_speedups,
)
from specbench.derive.step_cost import CALIBRATION_WORKLOADS
from specbench.store.runs import DEFAULT_ROOT, Run, create_run, load_runs, open_run, sha256_file

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run"]

HELP = "seal a host's predicted speedups before its sweep (a 'prediction' run)"
DESCRIPTION = __doc__.split("\n\n")[0].strip("`") + (
    " From a host's `make book` sweep (or a γ=0 calibration) and its kernel microbenchmark, "
    "predict every Spec-Bench category × γ × batch with tokens per step and drafting share "
    "lent per prompt by the other hosts, and write a closed 'prediction' run; then measure "
    "with `specbench sweep --judged-against RUN`.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", required=True, metavar="SWEEP_RUN",
                   type=cliargs.run_folder_of("sweep"),
                   help="this host's calibration: its `make book` sweep (repeat, open, "
                        "edit at γ 0/2/6), or a sweep of γ=0 only (latency predictions)")
    p.add_argument("--microbench", metavar="MICROBENCH_RUN",
                   type=cliargs.run_folder_of("microbench"),
                   help="the SKU's kernel microbenchmark (default: its latest in the store)")
    p.add_argument("--gammas", type=cliargs.gamma_list, default=None,
                   help="speculative γ to predict (2,6 from a make book sweep; 2,4,6 from a "
                        "γ=0 calibration)")
    p.add_argument("--batches", type=cliargs.batch_list, default=(1, 4),
                   help="batches to predict (1,4; make book calibrations)")
    p.add_argument("--workloads", default=",".join(SPEC_BENCH),
                   help="workloads to predict (default: the six Spec-Bench categories)")
    p.add_argument("--prompts", type=int, default=2,
                   help="prompts per category the judged sweep will run (2): the question "
                        "ids whose acceptance is lent")
    p.add_argument("--root", type=cliargs.existing_dir, default=str(DEFAULT_ROOT),
                   help="the run store the other SKUs are read from and the prediction "
                        "written to (default: $SPECBENCH_RUNS, else the checkout's runs/)")


def open_calibration(path: Path) -> Run:
    run = open_run(path)
    where = path / "manifest.json"
    if not run.complete:
        raise ValueError(f"{where}: field status is 'running': finish the calibration first")
    grid = run.manifest["grid"]
    if grid["gammas"] != [0] and not set(grid.get("workloads", [])) <= set(
            CALIBRATION_WORKLOADS):
        raise ValueError(f"{where}: field grid/gammas is {grid['gammas']} on workloads "
                         f"{grid.get('workloads')}: a calibration measures speculation on "
                         f"{', '.join(CALIBRATION_WORKLOADS)} only (`make book`'s sweep), or "
                         "the γ=0 arm alone (specbench sweep --gammas 0)")
    return run


def _is_make_book(run: Run) -> bool:
    return run.manifest["grid"]["gammas"] != [0]


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
    from specbench.derive.analysis import sweep_cells
    cells = sweep_cells(root)
    seen = cells[(cells["sku"] == sku) & (cells["gamma"] > 0)]
    if len(seen):
        raise ValueError(f"SKU {sku!r} already has speculative cells (run "
                         f"{seen['run_id'].iloc[0]}): a prediction made now is not sealed")
    # The lenders leave-one-SKU-out uses, so a sealed prediction is that same prediction.
    from specbench.derive.transfer import lends
    return cells[(cells["sku"] != sku) & lends(cells["sku"])]


def _session_microbench(path: Path | None, root: Path, calibration: Run,
                        session: str, sessions: dict[str, str]) -> Run | None:
    """The microbenchmark named, else the latest of the calibration's SKU on its host session
    (another host's kernels are not this one's); None where that session has none."""
    if path is not None:
        return _microbench(path, root, calibration.sku)
    from specbench.store.hosts import latest_per_session
    return latest_per_session(load_runs(root, kind="microbench"), sessions).get(
        (calibration.sku, session))


def _lenders(root: Path, calibration: Run, workloads: list[str]):
    """Every other host session's cells and batch-1 requests, after refusing workloads this
    host session already measured with speculation (a prediction made after them would not
    be sealed; 'repeat', 'open' and 'edit' are the calibration itself, never predicted)."""
    from specbench.derive.analysis import request_predictors, sweep_cells
    from specbench.derive.transfer import lends
    from specbench.store.hosts import host_sessions
    calibrating = sorted(set(workloads) & set(CALIBRATION_WORKLOADS))
    if calibrating:
        raise ValueError(f"--workloads names {', '.join(calibrating)}: `make book` measured "
                         "them on this host as the calibration; they are not predicted")
    every = load_runs(root)
    sessions = host_sessions(every if calibration.run_id in {r.run_id for r in every}
                             else [*every, calibration])
    session = sessions[calibration.run_id]
    cells = sweep_cells(root, every_session=True)
    seen = cells[(cells["sku"] == calibration.sku) & (cells["host_session"] == session)
                 & (cells["gamma"] > 0) & cells["workload"].isin(workloads)]
    if len(seen):
        raise ValueError(f"host session {session} already measured {seen['workload'].iloc[0]!r} "
                         f"with speculation (run {seen['run_id'].iloc[0]}): a prediction made "
                         "now is not sealed")
    requests = request_predictors(root, sessions=sessions)
    lending = cells[(cells["host_session"] != session) & lends(cells["sku"])]
    requests = requests[(requests["host_session"] != session) & lends(requests["sku"])]
    return session, sessions, lending, requests


def _run_make_book(args, parser, root: Path, calibration: Run) -> int:
    """Speedups from a `make book` calibration (see the module text)."""
    from specbench.derive.analysis import run_cells
    from specbench.derive.step_cost import step_costs
    gammas = list(args.gammas or (2, 6))
    workloads = [w for w in args.workloads.split(",") if w]
    try:
        session, sessions, lending, requests = _lenders(root, calibration, workloads)
        micro = _session_microbench(Path(args.microbench) if args.microbench else None, root,
                                    calibration, session, sessions)
        cells = run_cells(calibration)
        verify = micro.table("verify.csv") if micro is not None else None
        if step_costs(cells, verify).empty:
            raise ValueError(f"{calibration.path / 'cells.csv'}: no 'repeat' or 'edit' cell "
                             "with speculation to measure this host's step cost from")
        from specbench.derive.step_fits import fit_run
        steps = fit_run(calibration)
        table = predict_speedups(cells, verify, lending, requests, workloads, gammas,
                                 list(args.batches), args.prompts, steps=steps,
                                 output_tokens=calibration.manifest["grid"]["max_tokens"])
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    if table.empty:
        parser.exit(2, f"{parser.prog}: error: no other host measured any cell asked for: "
                       "nothing to lend acceptance from")
    if steps is None:
        print(f"note: {calibration.path} kept no step records or ran no step probe: the "
              "step-time model's speedups are not sealed (steps_speedup empty); batch > 1 from "
              "the step-time model needs a new `make book` on this host", file=sys.stderr)
    used = lending[lending["workload"].isin(table["workload"])].drop_duplicates("run_id")
    manifest = _manifest(calibration, table, gammas, micro, used)
    manifest["grid"]["prompts"] = args.prompts
    manifest["host_session"] = session
    manifest["method"] = (
        "specbench.derive.step_cost: speedup over the paired γ=0 arm = D/(1 + s·c(γ, b)), "
        "c this host's step cost from its make book 'repeat'/'edit' cells, D and s lent per "
        "prompt by other host sessions (batch 1; pooled cell counters at batch > 1); "
        "steps_speedup beside it where the calibration kept step records and ran the step "
        "probe: each cell built from its steps with this host's step-time model "
        "(specbench.theory.step_time)")
    return _seal(root, manifest, table, f"{len(table)} speedups on host session {session} "
                 f"({table['workload'].nunique()} workloads × γ {gammas} × batches "
                 f"{sorted(table['batch'].unique().tolist())})")


def _manifest(calibration: Run, table, gammas, micro: Run | None, used) -> dict:
    from specbench.store.runs import code_revision
    m = calibration.manifest
    return {
        "kind": "prediction", "sku": calibration.sku, "code": code_revision(),
        "model": m["model"], "engine": m["engine"], "hardware": m["hardware"],
        "dtype": m["dtype"],
        "grid": {"gammas": gammas, "batches": sorted(table["batch"].unique().tolist()),
                 "workloads": sorted(table["workload"].unique().tolist())},
        "calibration": {"sweep": _ref(calibration, "cells.csv"),
                        "microbench": _ref(micro, "verify.csv") if micro is not None else None},
        "from_runs": [{"sku": r.sku, "run_id": r.run_id} for r in used.itertuples()],
    }


def _seal(root: Path, manifest: dict, table, what: str) -> int:
    out = create_run(root, manifest)
    out.write_table(PREDICTIONS, table)
    out.finish()
    print(out.path)
    print(f"sealed {what}: {PREDICTIONS} sha256 {sha256_file(out.path / PREDICTIONS)}; now "
          f"measure with `specbench sweep --judged-against {out.path}`")
    return 0


def run(args, parser: argparse.ArgumentParser) -> int:
    root = Path(args.root)
    try:
        calibration = open_calibration(Path(args.calibration))
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    if _is_make_book(calibration):
        return _run_make_book(args, parser, root, calibration)
    args.gammas = args.gammas or (2, 4, 6)
    try:
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
    used = others.drop_duplicates("run_id")
    manifest = _manifest(calibration, table, list(args.gammas), micro, used)
    manifest["method"] = ("specbench.derive.sealed: acceptance (D, drafting share) pooled from "
                          "the other SKUs' counters, h/t_base fitted on them, t_base and d the "
                          "SKU's own")
    return _seal(root, manifest, table, f"{len(table)} cells")


def _ref(run: Run, table: str) -> dict:
    return {"run_id": run.run_id, table: sha256_file(run.path / table)}
