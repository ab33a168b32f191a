"""Command line: ``specbench sweep`` measures a run, ``specbench overhead`` benchmarks the
harness, ``specbench runs`` lists what is stored, ``specbench plan`` recommends γ.
``specbench <command> --help`` for details."""
from __future__ import annotations

import argparse
import sys


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}")


def _sweep_args(p: argparse.ArgumentParser) -> None:
    from .sweep import DEFAULT_REPS, DEFAULT_WARMUP
    p.add_argument("--model", help="checkpoint folder or hub id (default: the embedded "
                                   "SmolLM2-135M-Instruct built by scripts/setup.sh)")
    p.add_argument("--gammas", type=_ints, default=(0, 2, 4, 6), help="speculative tokens γ "
                   "(must include 0), default 0,2,4,6")
    p.add_argument("--batches", type=_ints, default=(1, 4), help="batch sizes, default 1,4")
    p.add_argument("--workloads", default="repeat,open", help="default repeat,open")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per request (128)")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help=f"warmup calls per cell "
                   f"({DEFAULT_WARMUP})")
    p.add_argument("--reps", type=int, default=DEFAULT_REPS, help=f"timed repetitions per cell "
                   f"({DEFAULT_REPS})")
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default) or float32")
    p.add_argument("--root", default="runs", help="run store folder (runs)")
    p.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run in place")
    p.add_argument("--notes", default="", help="free text recorded in the manifest")


def config_from_args(args):
    from .sweep import SweepConfig
    return SweepConfig(model=args.model, gammas=args.gammas, batches=args.batches,
                       workloads=tuple(args.workloads.split(",")), max_tokens=args.max_tokens,
                       warmup=args.warmup, reps=args.reps, dtype=args.dtype, root=args.root,
                       notes=args.notes)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["plan"]:   # its own parser: one-line errors, checked before any read
        from .plan import main as plan_main
        return plan_main(argv[1:])
    parser = argparse.ArgumentParser(prog="specbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="measure the γ × batch × workload grid into runs/",
                           description="Measure the γ × batch × workload grid with the real "
                           "vLLM engine and write one immutable run. Interrupted? Re-run with "
                           "--resume RUN_DIR.")
    _sweep_args(sweep)
    over = sub.add_parser("overhead", help="benchmark the cost of the in-line counter reads")
    over.add_argument("--model")
    over.add_argument("--pairs", type=int, default=8, help="alternating pairs (8)")
    over.add_argument("--root", default="runs")
    sub.add_parser("plan", help="recommend γ from explicit numbers or a SKU's runs "
                   "(specbench plan --help)", add_help=False)
    lst = sub.add_parser("runs", help="list the runs in the store")
    lst.add_argument("--root", default="runs")
    args = parser.parse_args(argv)

    if args.command == "sweep":
        from .sweep import run_sweep
        cfg = config_from_args(args)
        try:
            cfg.validate()
        except (ValueError, FileNotFoundError) as exc:
            parser.error(str(exc))
        run = run_sweep(cfg, resume=args.resume)
        print(run.path)
    elif args.command == "overhead":
        from .overhead import run_overhead
        run = run_overhead(model=args.model, pairs=args.pairs, root=args.root)
        print(run.path)
    elif args.command == "runs":
        from .runs import load_runs
        for run in load_runs(args.root, include_incomplete=True):
            m = run.manifest
            print(f"{m['status']:9s} {m['kind']:9s} {m['sku']:40s} {run.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
