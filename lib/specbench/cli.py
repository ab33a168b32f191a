"""Command line: ``specbench sweep`` measures a run, ``specbench overhead`` benchmarks the
harness, ``specbench serve-bench`` measures a real server under load, ``specbench runs`` lists
what is stored. ``specbench <command> --help`` for details."""
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


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",")) if text else ()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")


def _serve_args(p: argparse.ArgumentParser) -> None:
    from .serving import DEFAULT_DATASET, default_slo
    slo = default_slo()
    p.add_argument("--model", help="checkpoint folder (default: the embedded model)")
    p.add_argument("--gammas", type=_ints, default=(0, 2, 4), help="γ per server, must "
                   "include 0 (0,2,4)")
    p.add_argument("--workloads", default="repeat,open,summarization,translation,"
                   "math_reasoning", help="'repeat', 'open' and/or Spec-Bench categories")
    p.add_argument("--concurrencies", type=_ints, default=(1, 2, 4, 8),
                   help="closed-loop levels, requests in flight (1,2,4,8)")
    p.add_argument("--request-rates", type=_floats, default=(1.0,),
                   help="open-loop levels, Poisson requests/s (1); '' for none")
    p.add_argument("--num-prompts", type=int, default=8, help="requests per level (8)")
    p.add_argument("--output-len", type=int, default=64, help="tokens per request (64)")
    p.add_argument("--slo-ttft-ms", type=float, default=slo.ttft_ms,
                   help=f"TTFT limit per request ({slo.ttft_ms:g} here)")
    p.add_argument("--slo-tpot-ms", type=float, default=slo.tpot_ms,
                   help=f"TPOT limit per request ({slo.tpot_ms:g} here)")
    p.add_argument("--dataset", default=str(DEFAULT_DATASET), help="Spec-Bench question.jsonl")
    p.add_argument("--price-per-replica-hour", type=float, default=0.10, help="USD (0.10)")
    p.add_argument("--demand-tokens-per-s", type=float, default=1000.0,
                   help="peak demand the fleet serves, output tokens/s (1000)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--root", default="runs")
    p.add_argument("--notes", default="")


def serving_config_from_args(args):
    from .serving import SLO, LoadDefinition, ServingConfig, default_slo
    load = LoadDefinition(
        workloads=tuple(w for w in args.workloads.split(",") if w),
        concurrencies=args.concurrencies, request_rates=args.request_rates,
        num_prompts=args.num_prompts, output_len=args.output_len,
        slo=SLO(args.slo_ttft_ms, args.slo_tpot_ms, default_slo().why),
        dataset_path=args.dataset)
    return ServingConfig(model=args.model, gammas=args.gammas, load=load, dtype=args.dtype,
                         root=args.root, price_per_replica_hour=args.price_per_replica_hour,
                         demand_tokens_per_s=args.demand_tokens_per_s, notes=args.notes)


def main(argv=None) -> int:
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
    serve = sub.add_parser("serve-bench", help="a real vLLM server under load from vLLM's own "
                           "benchmark client (a 'serving' run)",
                           description="Start a vLLM OpenAI server on 127.0.0.1 per γ, load it "
                           "with vLLM's benchmark client at each level, write a 'serving' run.")
    _serve_args(serve)
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
    elif args.command == "serve-bench":
        from .serving import LoadError, run_serving
        cfg = serving_config_from_args(args)
        try:
            cfg.validate()
        except (LoadError, ValueError, FileNotFoundError) as exc:
            parser.error(str(exc))
        print(run_serving(cfg).path)
    elif args.command == "runs":
        from .runs import load_runs
        for run in load_runs(args.root, include_incomplete=True):
            m = run.manifest
            print(f"{m['status']:9s} {m['kind']:9s} {m['sku']:40s} {run.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
