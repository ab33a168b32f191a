"""``specbench draft``: build (once) the layer-truncated drafts of the embedded model.

Prints each draft's folder and the ``--speculative-config`` that serves it with vLLM's
``draft_model`` proposer. A depth out of range, or a cached folder whose provenance does not
match its key, is one line on stderr and exit 2.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from specbench.cli import args as cliargs

__all__ = ["HELP", "DESCRIPTION", "add_arguments", "run"]

HELP = "build layer-truncated drafts of the embedded model (first k decoder layers)"
DESCRIPTION = ("Cut the first K decoder layers (with the final norm, the tied embedding and the "
               "tokenizer) out of the target model into a draft checkpoint in the user cache, "
               "keyed by the target's weights hash and K; reused when it exists. The draft "
               "serves vLLM's draft_model proposer and transformers' assistant_model.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--depth", type=cliargs.positive_int, action="append",
                       help="decoder layers the draft keeps (repeat for several drafts)")
    which.add_argument("--best", action="store_true",
                       help="print 'DEPTH GAMMA' of the measured draft configuration with the "
                            "highest median speedup in the store's draft sweeps (what `make "
                            "serving-drafts` serves), and build nothing")
    parser.add_argument("--root", type=cliargs.existing_dir, default=None,
                        help="the run store --best reads (default: runs/)")
    parser.add_argument("--model", type=cliargs.model_ref, default=None,
                        help="the target checkpoint folder (default: the embedded model)")
    parser.add_argument("--gamma", type=cliargs.positive_int, default=2,
                        help="num_speculative_tokens in the printed config (2)")


def run(args, parser: argparse.ArgumentParser) -> int:
    if args.best:
        return _best(args, parser)
    from specbench.engine.assets import build_embedded_model
    from specbench.engine.drafts import DraftError, build_draft

    target = Path(args.model) if args.model else build_embedded_model()
    for depth in args.depth:
        try:
            folder = build_draft(target, depth)
        except (DraftError, FileNotFoundError) as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")
        config = {"method": "draft_model", "model": str(folder),
                  "num_speculative_tokens": args.gamma}
        print(f"{folder}\t--speculative-config '{json.dumps(config)}'")
    return 0


def _best(args, parser: argparse.ArgumentParser) -> int:
    from specbench.derive.drafts import best_draft
    from specbench.store.runs import DEFAULT_ROOT

    root = args.root or DEFAULT_ROOT
    best = best_draft(root)
    if best is None:
        parser.exit(2, f"{parser.prog}: error: {root}: no draft-sweep run to choose from; run "
                       "`make measure-drafts` first\n")
    print(*best)
    return 0
