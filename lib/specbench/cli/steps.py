"""``specbench steps``: fit the step-time model to a sweep's step records and say how well it
predicts steps it did not see (and another run's steps, with ``--predict``)."""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from specbench.cli import args as cliargs

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run"]

HELP = "fit the step-time model to a sweep's step records"
DESCRIPTION = ("Fit t_step = s0 + s_dec·decode + s_draft·drafted + s_pre·prefill + s_kv·context "
               "to the steps a sweep's engines recorded during its calls, with 95 % intervals; "
               "print each coefficient, the terms the records admit beyond it, the median "
               "absolute held-out error per step class, and with --predict the error on "
               "another run's steps.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=cliargs.run_folder_of("sweep"), help="the sweep to fit")
    parser.add_argument("--predict", type=cliargs.run_folder_of("sweep"), default=None,
                        help="a second sweep (the same host session) whose steps to predict")


def _steps(path) -> pd.DataFrame:
    from specbench.derive.steps import step_table
    from specbench.store.runs import open_run
    run = open_run(path)
    table = step_table(run.path, run.parts(), run.manifest.get("step_probe"))
    if table.empty:
        raise ValueError(f"{run.path}: no step records (measured before they were kept): "
                         "measure again with `make book`")
    return table[table["arm"].notna()].reset_index(drop=True)


def _per_class(records: pd.DataFrame, errors) -> pd.Series:
    from specbench.theory.step_time import step_class
    return pd.Series(np.abs(errors)).groupby(step_class(records).to_numpy()).median()


def run(args, parser: argparse.ArgumentParser) -> int:
    from specbench.theory.step_time import admit_terms, fit_step_time, held_out_errors
    from specbench.theory.errors import percent_error
    try:
        records = _steps(args.run)
        other = _steps(args.predict) if args.predict else None
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    terms, verdicts = admit_terms(records)
    model = fit_step_time(records, terms)
    print(f"{model.steps} steps inside calls; terms: {', '.join(terms)}"
          + (f"; unidentified: {', '.join(model.unidentified)}" if model.unidentified else ""))
    for name, value in model.coef.items():
        low, high = model.interval[name]
        print(f"  {name:16s} {1e3 * value:10.5f} ms  [{1e3 * low:.5f}, {1e3 * high:.5f}]")
    for term, verdict in verdicts.items():
        print(f"  candidate {term}: {'admitted' if verdict['admitted'] else 'not admitted'}"
              + (f" (held-out gain {verdict['gain_pp']:.2f} pp)" if "gain_pp" in verdict
                 else f" ({verdict['why']})"))
    share = model.fixed_share(records)
    print(f"fixed share s0/t_step: median {np.median(share):.2f} (range {share.min():.2f}–"
          f"{share.max():.2f})")
    print("median |held-out error| per step class (%):")
    print(_per_class(records, held_out_errors(records, terms)).round(2).to_string())
    if other is not None:
        errors = percent_error(model.predict(other), other["duration_s"].to_numpy())
        print(f"on {args.predict.name} ({len(other)} steps), median |error| per class (%):")
        print(_per_class(other, errors).round(2).to_string())
        _cells(model, args.predict)
    return 0


def _cells(model, path) -> None:
    """The second run's cells predicted from their steps: time per output token and speedup
    over the paired γ=0 cell, mean absolute error per batch."""
    from specbench.store.runs import open_run
    from specbench.theory.errors import mape, percent_error
    from specbench.theory.step_time import predict_cells
    run = open_run(path)
    cells = run.table("cells.csv")
    cells = cells[(cells["status"] == "ok") & cells["emitted_per_step"].notna()]
    predicted = predict_cells(model, cells, run.manifest["grid"]["max_tokens"])
    measured_pot = cells["pot_ms"].to_numpy() / 1e3
    print("cells predicted from their steps: MAPE per batch (%)")
    for batch in sorted(cells["batch"].unique()):
        at = (cells["batch"] == batch).to_numpy()
        spec = at & (cells["gamma"] > 0).to_numpy()
        pot = mape(predicted["pot_s"].to_numpy()[at], measured_pot[at])
        speed = mape(predicted["speedup"].to_numpy()[spec], cells["speedup"].to_numpy()[spec])
        worst = abs(percent_error(predicted["speedup"].to_numpy()[spec],
                                  cells["speedup"].to_numpy()[spec])).max()
        print(f"  batch {batch}: time per token {pot:.1f}, speedup {speed:.1f} "
              f"(worst {worst:.1f}, {spec.sum()} speculative cells)")
