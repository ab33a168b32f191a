"""``specbench plan``: the γ recommendation from explicit numbers or a SKU's runs."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from specbench.cli import args as cliargs
from specbench.report.plan import (
    PlanInputError,
    format_plan,
    parse_d,
    plan_explicit,
    plan_from_runs,
)
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run"]




# -- command line --------------------------------------------------------------------------

def _one_line_error(parser: argparse.ArgumentParser):
    """A user error is one line on stderr (no usage block) and exit 2."""
    def error(message):
        parser.exit(2, f"{parser.prog}: error: {message}\n")
    return error


def _positive_ms(text):
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 ms, got {text!r}")
    return value


def _nonneg_ms(text):
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 ms, got {text!r}")
    return value


def _acceptance(text):
    value = _finite(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"acceptance must be in [0, 1], got {text!r}")
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _finite(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _gammas(text):
    return cliargs.int_list(text, 1, "gamma")


def _load_levels(text):
    return () if not text.strip() else cliargs.int_list(text, 1, "concurrency")


def _d_list(text):
    try:
        return parse_d(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


HELP = "recommend γ from explicit numbers, a SKU's runs, or your own prompts on this host"
DESCRIPTION = ("Recommend γ from explicit numbers (--t-base-ms, --alpha, --d) or from a SKU's "
               "latest sweep (--sku): eq. 1, pot = (T·(1+D) + H)/(A·γ + 1). Or, for your own "
               "prompts (--calibration RUN --workload-file FILE.jsonl): one untimed pass of the "
               "engine at the largest γ reads acceptance from its counters, this host's `make "
               "book` calibration gives the step cost, and the plan recommends γ or speculation "
               "off per batch size with a predicted interval, and prints the `vllm serve` "
               "flags (specbench.report.plan.own_prompts).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``specbench plan`` subcommand's options (errors are one line, checked before any
    read)."""
    p.error = _one_line_error(p)
    p.add_argument("--t-base-ms", type=_positive_ms, help="baseline (γ=0) decode step, ms")
    p.add_argument("--alpha", type=_acceptance, help="acceptance α in [0, 1]")
    p.add_argument("--d", type=_d_list, metavar="G:D[,G:D...]",
                   help="verify overhead D at each candidate γ, e.g. 2:0.015,4:0.077")
    p.add_argument("--host-ms", type=_nonneg_ms, help="per-cycle host term H, ms (γ>0; 0)")
    p.add_argument("--sku", help="plan from the latest sweep run of this SKU")
    p.add_argument("--batch", type=_positive_int, help="only this batch size (--sku)")
    p.add_argument("--workload", help="only this workload (--sku)")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help="run store folder (runs)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    own = p.add_argument_group("your own prompts on this host")
    own.add_argument("--calibration", metavar="SWEEP_RUN", type=cliargs.run_folder_of("sweep"),
                     help="this host's `make book` sweep (its step cost; same boot)")
    own.add_argument("--workload-file", metavar="FILE.jsonl", type=cliargs.existing_file,
                     help="your prompts in vLLM's custom-dataset format (one JSON object per "
                          "line with 'prompt' and optional 'output_tokens')")
    own.add_argument("--microbench", metavar="MICROBENCH_RUN",
                     type=cliargs.run_folder_of("microbench"),
                     help="the kernel microbenchmark giving d(γ) (default: the latest of the "
                          "calibration's SKU and boot in its store)")
    own.add_argument("--gammas", type=_gammas, default=(2, 4, 6),
                     help="γ to plan (2,4,6); the pass runs the largest")
    own.add_argument("--batches", type=cliargs.batch_list, default=(1, 2, 4, 8),
                     help="batch sizes to plan (1,2,4,8); outside the calibration's the step "
                          "cost is extrapolated, and the table says how")
    own.add_argument("--max-tokens", type=cliargs.positive_int, default=64,
                     help="tokens per prompt without its own output_tokens (64)")
    own.add_argument("--prompts", type=cliargs.positive_int, default=None,
                     help="only the first N prompts of the file (default: all)")
    own.add_argument("--load-levels", type=_load_levels, default=None,
                     metavar="C[,C...]",
                     help="closed-loop concurrencies to predict under load through vLLM's own "
                          "scheduler with this host's step-time model (default 1,2,4,8 where "
                          "the calibration kept step records, else skipped with a note; '' "
                          "skips): "
                          "every prompt of the file is one request per level, as "
                          "`make plan-under-load` serves them")
    own.add_argument("--step-probe", metavar="SERVING_RUN",
                     type=cliargs.run_folder_of("serving"),
                     help="a short serving run on this host (same boot) whose servers "
                          "recorded their steps: the load prediction prices each step from "
                          "them, not from the calibration's offline steps (`make "
                          "plan-under-load` serves one before it plans)")
    own.add_argument("--no-dynamic-probe", dest="dynamic_probe", action="store_false",
                     help="skip the check that this engine honours vLLM's batch-size schedule")


def _check_mode(p, args) -> None:
    if args.calibration is not None or args.workload_file is not None:
        missing = "--workload-file" if args.workload_file is None else (
            "--calibration" if args.calibration is None else None)
        if missing:
            p.error(f"argument {missing}: required with "
                    f"{'--calibration' if missing == '--workload-file' else '--workload-file'}")
        clash = [flag for flag, value in (("--sku", args.sku), ("--t-base-ms", args.t_base_ms),
                                          ("--alpha", args.alpha), ("--d", args.d),
                                          ("--host-ms", args.host_ms), ("--batch", args.batch),
                                          ("--workload", args.workload)) if value is not None]
        if clash:
            p.error(f"argument --calibration: not allowed with {', '.join(clash)}")
        return
    explicit = {"--t-base-ms": args.t_base_ms, "--alpha": args.alpha, "--d": args.d}
    given = [k for k, v in explicit.items() if v is not None]
    if args.sku is not None:
        clash = given + (["--host-ms"] if args.host_ms is not None else [])
        if clash:
            p.error(f"argument --sku: not allowed with {', '.join(clash)}")
        if not (Path(args.root) / args.sku).is_dir():
            p.error(f"argument --sku: unknown SKU {args.sku!r}: no folder {args.root}/{args.sku}")
        return
    for name in ("--batch", "--workload"):
        if getattr(args, name[2:]) is not None:
            p.error(f"argument {name}: only with --sku")
    if not given and args.host_ms is None:
        p.error("either --sku SKU or --t-base-ms T --alpha A --d G:D[,G:D...] is required")
    missing = [k for k, v in explicit.items() if v is None]
    if missing:
        p.error(f"argument {missing[0]}: required with "
                f"{', '.join(given + (['--host-ms'] if args.host_ms is not None else []))}")


def run(args, p: argparse.ArgumentParser) -> int:
    _check_mode(p, args)                   # every user error exits here, before any read
    if args.calibration is not None:
        from specbench.cli.plan_prompts import run as run_own_prompts
        return run_own_prompts(args, p)
    if args.sku is None:
        result = plan_explicit(args.t_base_ms, args.alpha, args.d, args.host_ms or 0.0)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"{'γ':>3} {'pot ms':>10} {'speedup':>8}")
            for row in result["rows"]:
                print(f"{row['gamma']:>3} {row['pot_ms']:>10.3f} {row['speedup']:>8.3f}")
            g = result["recommended_gamma"]
            print("recommend: speculation off (γ=0): no γ is strictly faster than t_base"
                  if g == 0 else f"recommend: γ={g}")
        return 0
    try:
        frame = plan_from_runs(args.sku, args.root, args.batch, args.workload)
    except PlanInputError as exc:
        p.error(f"argument {exc.argument}: {exc}")
    if args.json:
        out = frame.drop(columns=["sources"]).replace({np.nan: None})
        print(json.dumps({"sku": args.sku, "run_id": frame["run_id"].iloc[0],
                          "sources": frame["sources"].iloc[0],
                          "rows": out.to_dict(orient="records")}))
    else:
        print(format_plan(frame))
    return 0


