"""Command line: ``specbench sweep`` measures a run, ``specbench overhead`` benchmarks the
harness, ``specbench runs`` lists what is stored. ``specbench <command> --help`` for details."""
from __future__ import annotations

import argparse
import signal
import sys

from . import cliargs

# The sweep flags a resumed run ignores (it keeps the grid it was started with).
GRID_FLAGS = ["--model", "--gammas", "--batches", "--workloads", "--max-tokens", "--warmup",
              "--reps", "--dtype"]


def _workload_names():
    from .workloads import WORKLOADS
    return WORKLOADS


def _sweep_args(p: argparse.ArgumentParser) -> None:
    from .sweep import DEFAULT_REPS, DEFAULT_WARMUP
    p.add_argument("--model", type=cliargs.model_ref,
                   help="checkpoint folder or hub id (default: the embedded "
                        "SmolLM2-135M-Instruct built by scripts/setup.sh)")
    p.add_argument("--gammas", type=cliargs.gamma_list, default=(0, 2, 4, 6),
                   help="speculative tokens γ (must include 0), default 0,2,4,6")
    p.add_argument("--batches", type=cliargs.batch_list, default=(1, 4),
                   help="batch sizes, default 1,4")
    p.add_argument("--workloads", type=cliargs.choice_list(_workload_names),
                   default=("repeat", "open"), help="default repeat,open")
    p.add_argument("--max-tokens", type=cliargs.positive_int, default=128,
                   help="new tokens per request (128)")
    p.add_argument("--warmup", type=cliargs.nonnegative_int, default=DEFAULT_WARMUP,
                   help=f"warmup calls per cell ({DEFAULT_WARMUP})")
    p.add_argument("--reps", type=cliargs.positive_int, default=DEFAULT_REPS,
                   help=f"timed repetitions per cell ({DEFAULT_REPS})")
    p.add_argument("--dtype", type=cliargs.dtype, default="bfloat16",
                   help=f"one of {', '.join(cliargs.DTYPES)} (bfloat16)")
    p.add_argument("--root", type=cliargs.store_root, default="runs",
                   help="run store folder (runs)")
    p.add_argument("--resume", metavar="RUN_DIR", type=cliargs.run_folder_of("sweep"),
                   help="finish an interrupted run in place (no grid flags with it)")
    p.add_argument("--notes", default="", help="free text recorded in the manifest")


def config_from_args(args):
    from .sweep import SweepConfig
    return SweepConfig(model=args.model, gammas=args.gammas, batches=args.batches,
                       workloads=tuple(args.workloads), max_tokens=args.max_tokens,
                       warmup=args.warmup, reps=args.reps, dtype=args.dtype,
                       root=str(args.root), notes=args.notes)


def _fail(message: str, status: int = 1, after_bar: bool = False) -> int:
    """A one-line error for what is not a usage error (damaged run, full disk); on a line of
    its own after a progress bar."""
    print(f"{chr(10) if after_bar else ''}specbench: error: {message}", file=sys.stderr)
    return status


def _sigterm_as_interrupt(*_):
    # `kill PID` stops the sweep the way Ctrl-C does: engines shut down, the run resumable.
    raise KeyboardInterrupt


def _list_runs(root) -> int:
    from .runs import scan_runs
    status = 0
    for path, run, error in scan_runs(root):
        if error is not None:
            print(f"{'damaged':9s} {'?':9s} {'?':40s} {path}  ({error})")
            status = 1
            continue
        m = run.manifest
        print(f"{m['status']:9s} {m['kind']:9s} {m['sku']:40s} {run.path}")
    return status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="specbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="measure the γ × batch × workload grid into runs/",
                           description="Measure the γ × batch × workload grid with the real "
                           "vLLM engine and write one immutable run. Interrupted? Re-run with "
                           "--resume RUN_DIR.")
    _sweep_args(sweep)
    over = sub.add_parser("overhead", help="benchmark the cost of the in-line counter reads")
    over.add_argument("--model", type=cliargs.model_ref,
                      help="checkpoint folder or hub id (default: the embedded model)")
    over.add_argument("--pairs", type=cliargs.positive_int, default=8,
                      help="alternating pairs (8)")
    over.add_argument("--root", type=cliargs.store_root, default="runs")
    lst = sub.add_parser("runs", help="list the runs in the store")
    lst.add_argument("--root", type=cliargs.existing_dir, default="runs")
    args = parser.parse_args(argv)

    from .runs import RunSchemaError
    if args.command == "sweep":
        return _sweep(sweep, args)
    if args.command == "overhead":
        from .overhead import run_overhead
        try:
            run = run_overhead(model=args.model, pairs=args.pairs, root=str(args.root))
        except RunSchemaError as exc:
            return _fail(str(exc))
        print(run.path)
    elif args.command == "runs":
        return _list_runs(args.root)
    return 0


def _sweep(parser: argparse.ArgumentParser, args) -> int:
    from .runs import RunSchemaError
    from .sweep import SweepInterrupted, run_sweep
    cliargs.reject_with(parser, args, "--resume", GRID_FLAGS + ["--root", "--notes"],
                        "a resumed run keeps the settings it was started with")
    if args.resume is None:
        cfg = config_from_args(args)
        try:
            cfg.validate()
        except (ValueError, FileNotFoundError) as exc:
            parser.error(str(exc))
    else:
        cfg = None
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        run = run_sweep(cfg, resume=args.resume)
    except SweepInterrupted as stop:
        print(f"\nspecbench: interrupted; engines stopped, {stop.done} of {stop.total} cells "
              f"kept. Resume with: specbench sweep --resume {stop.path}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # before the run folder existed (hardware probe, roofline)
        print("\nspecbench: interrupted before the run started; nothing was written",
              file=sys.stderr)
        return 130
    except RunSchemaError as exc:
        return _fail(str(exc), after_bar=True)
    except OSError as exc:
        where = getattr(exc, "run_path", None)
        hint = f"; the run is resumable: specbench sweep --resume {where}" if where else ""
        return _fail(f"{exc}{hint}", after_bar=True)
    print(run.path)
    failed = run.table("cells.csv").query("status != 'ok'")
    if len(failed):
        print(f"specbench: {len(failed)} of {len(run.table('cells.csv'))} cells failed "
              f"(causes in {run.path / 'cells.csv'}, column 'error'):", file=sys.stderr)
        for _, cell in failed.iterrows():
            print(f"  γ={cell['gamma']} {cell['workload']} b{cell['batch']}: {cell['error']}",
                  file=sys.stderr)
    return 1 if len(failed) == len(run.table("cells.csv")) else 0


if __name__ == "__main__":
    sys.exit(main())
