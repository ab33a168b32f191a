"""``specbench cluster``: submit, status, collect and resubmit from the command line."""
from __future__ import annotations

import ast
import json

try:
    import submitit
    _Checkpointable = submitit.helpers.Checkpointable
except ImportError:  # the `cluster` extra is not installed: submit() says so
    submitit = None
    _Checkpointable = object

from specbench.cli.cluster.jobs import TaskStatus, collect, resubmit, submit
from specbench.cli.cluster.profiles import ClusterError, Partition, load_profile
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["add_arguments", "main"]



# -- command line (``specbench cluster ...``) ------------------------------------------------

EXIT_ALL_COMPLETED, EXIT_SOME_FAILED, EXIT_STILL_RUNNING = 0, 1, 3


def add_arguments(parser) -> None:
    """The ``specbench cluster`` subcommands."""
    actions = parser.add_subparsers(dest="action", required=True)
    sub = actions.add_parser(
        "submit", help="submit a notebook's grid: one job array per partition",
        description="Submit notebooks/<NOTEBOOK>.md as one task per parameter group per "
                    "partition of the profile. Prints the submission folder that status, "
                    "collect and resubmit take.")
    sub.add_argument("notebook", help="sweep, host_floor, selftest, ... (notebooks/<name>.md)")
    sub.add_argument("--profile", default="cluster/profiles.toml",
                     help="cluster profile, TOML (default cluster/profiles.toml; see "
                          "cluster/profiles.example.toml)")
    sub.add_argument("--partition", action="append", metavar="NAME",
                     help="a partition of the profile; repeat for several (default: all)")
    sub.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUE"), help="a notebook parameter for every task "
                     "(Python literal)")
    sub.add_argument("-g", "--grid", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUES"), help="a grid axis: a Python list, one task per "
                     "element; several axes multiply")
    sub.add_argument("--split-gamma", action="store_true",
                     help="one task per γ (each re-measures the γ=0 baseline, so no shared "
                          "base): more base arms, shorter tasks, one γ's engine in memory")
    sub.add_argument("--root", default=str(DEFAULT_ROOT),
                     help="run store on the shared filesystem (default: the checkout's runs/)")
    sub.add_argument("--folder", help="submission folder: logs, run records, submission.json "
                                      "(default cluster-jobs/<notebook>-<time>)")
    sub.add_argument("--dry-run", action="store_true", help="print the tasks, submit nothing")
    for name, text in (("status", "one look at every task"),
                       ("collect", "wait until every task ends (bounded), then report")):
        p = actions.add_parser(name, help=text, description=f"{text}. Exit status: 0 every "
                               "task completed, 1 some task failed, timed out or was cancelled, "
                               "3 some task is still pending or running.")
        p.add_argument("folder", help="the folder `cluster submit` printed")
        p.add_argument("--timeout", type=float, default=0 if name == "status" else 3600,
                       help="seconds to wait at most (default %(default)s)")
    again = actions.add_parser("resubmit", help="submit again the tasks that did not complete "
                               "(their runs resume)")
    again.add_argument("folder")


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _report(found: list[TaskStatus]) -> int:
    print(f"{'task':12s} {'partition':10s} {'job':12s} {'state':12s} {'outcome':10s} run")
    for s in found:
        print(f"{s.key:12s} {s.partition:10s} {s.job_id or '-':12s} {s.state:12s} "
              f"{s.outcome:10s} {s.run or '-'}")
        if s.log_tail:
            print(f"  | last lines of {s.log}:")
            print("\n".join(f"  | {line}" for line in s.log_tail.splitlines()))
    counts = {o: sum(s.outcome == o for s in found)
              for o in dict.fromkeys(s.outcome for s in found)}
    print(f"{len(found)} tasks: " + ", ".join(f"{n} {o}" for o, n in counts.items()))
    if not all(s.final for s in found):
        return EXIT_STILL_RUNNING
    return EXIT_ALL_COMPLETED if all(s.outcome == "completed" for s in found) else EXIT_SOME_FAILED


def main(args, parser) -> int:
    """Run one ``specbench cluster`` action; user errors go through ``parser.error`` (exit 2)."""
    try:
        if args.action == "submit":
            grid = {name: _literal(values) for name, values in args.grid}
            folder, submission = submit(
                args.notebook, load_profile(args.profile), args.partition,
                fixed={k: _literal(v) for k, v in args.parameter}, grid=grid, root=args.root,
                folder=args.folder, split_gamma=args.split_gamma, dry_run=args.dry_run)
            for name, fields in submission["partitions"].items():
                request = Partition(**{**fields, "setup": tuple(fields["setup"])})
                print(f"# {name}: {json.dumps(request.executor_parameters())}")
            for task in submission["tasks"]:
                job = task["attempts"][-1]["job_id"] if task["attempts"] else "dry-run"
                print(f"{task['key']:12s} {job:12s} {json.dumps(task['parameters'])}")
            print(folder)
            return 0
        if args.action in ("status", "collect"):
            return _report(collect(args.folder, timeout_s=args.timeout))
        if args.action == "resubmit":
            keys = resubmit(args.folder)
            print(f"resubmitted {len(keys)} task(s): {' '.join(keys) or '-'}")
            return 0
    except ClusterError as exc:
        parser.error(str(exc))
    raise AssertionError(args.action)
