"""``specbench spec-bench-prompts CATEGORY --out FILE``: Spec-Bench prompts written as an
operator's prompt file, the stand-in for your own prompts in ``plan --workload-file`` and
``serve-bench``. A category, count or file that does not work is one line and exit 2."""
from __future__ import annotations

import argparse

from specbench.cli import args as cliargs

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run"]

HELP = ("write Spec-Bench prompts as an operator's prompt file (the stand-in for your own "
        "prompts in plan --workload-file and serve-bench)")
DESCRIPTION = ("Write COUNT prompts of a Spec-Bench category (first turn; after the first SKIP "
               "of the order a short sweep measures) to OUT in vLLM's custom-dataset JSONL, "
               "with each question id beside its prompt. Keep OUT outside the project: the "
               "prompts are Spec-Bench's, and runs record only the file's hash and the ids.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("category", help="a Spec-Bench category (multi-turn, translation, "
                   "summarization, qa, math_reasoning, rag)")
    p.add_argument("--count", type=cliargs.positive_int, default=40, help="prompts (40)")
    p.add_argument("--skip", type=int, default=10, help="prompts skipped first, so the set "
                   "is not one a sweep measured (10)")
    p.add_argument("--spec-bench", default=None, help="question.jsonl (default: "
                   "$SPECBENCH_SPEC_BENCH, else ../shared/data/spec_bench/question.jsonl)")
    p.add_argument("--out", help="the JSONL to write (required unless --nearest-in-length)")
    p.add_argument("--nearest-in-length", action="store_true",
                   help="print the other category whose prompts are nearest in length (what "
                        "make plan-under-load's step-cost probe serves) and write nothing")


def run(args, p: argparse.ArgumentParser) -> int:
    from specbench.measure.workloads.spec_bench import nearest_in_length, write_prompt_file
    if args.nearest_in_length:
        try:
            print(nearest_in_length(args.category, args.spec_bench))
        except (ValueError, FileNotFoundError, OSError) as exc:
            p.error(str(exc))
        return 0
    if not args.out:
        p.error("--out is required (the JSONL to write)")
    try:
        ids = write_prompt_file(args.category, args.count, args.out, args.skip,
                                args.spec_bench)
    except (ValueError, FileNotFoundError, OSError) as exc:
        p.error(str(exc))
    print(f"{args.out}: {len(ids)} {args.category} prompts, question ids {ids}")
    return 0
