"""scripts/gpu_device_check.py: its pure parts, and a CPU dry run (--device cpu --tiny) that
goes through every section and lays its output out as a valid run of kind 'gpucheck'."""
import importlib.util
import json
from pathlib import Path

import pytest

from specbench.theory import roofline

from specbench.store import runs

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_device_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_device_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verify_rows_are_the_sweeps_grid(check):
    assert sorted({r for _, _, r in check.verify_rows()}) == [1, 3, 4, 5, 7, 12, 20, 28]
    assert (4, 6, 28) in check.verify_rows()


def test_linear_layers_of_llama_8b(check):
    layers = {name: (d_in, d_out, n) for name, d_in, d_out, n in
              check.linear_layers(roofline.MODELS["llama-3.1-8b"])}
    assert layers["qkv_proj"] == (4096, 4096 + 2 * 1024, 32)
    assert layers["gate_up_proj"] == (4096, 2 * 14336, 32)
    assert layers["lm_head"] == (4096, 128256, 1)


def test_roofline_time_matches_the_predictor(check):
    sku = roofline.SKUS["h200"]
    # One 4096x4096 bf16 weight at 1 row is memory-bound: bytes / bandwidth.
    expected = (4096 * 4096 * 2 + 2 * 4096 * 2) / sku.bandwidth
    assert check.roofline_s(4096, 4096, 1, sku) == pytest.approx(expected)


def test_per_step_difference_and_median(check):
    steps = []
    for rep, jitter in enumerate([0.0, 3.0, -3.0]):
        for n, wall, comp in [(1, 100 + jitter, 40), (11, 200 + jitter, 90)]:
            steps.append({"model": "m", "tokens": n, "rep": rep, "wall_ms": wall,
                          "compute_ms": comp, "compute_ms_key_averages": comp,
                          "unprofiled_wall_ms": wall - 5, "event_ms": wall})
    (row,) = check.per_step(steps)
    assert row["wall_ms"] == pytest.approx(10.0) and row["compute_ms"] == pytest.approx(5.0)
    assert row["host_share"] == pytest.approx(0.5) and row["reps"] == 3


def test_bad_arguments_exit_2(check):
    with pytest.raises(SystemExit) as exc:
        check.parse_args(["--out", "x", "--tokens", "1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        check.parse_args([])


def test_cpu_dry_run_is_a_gpucheck_run(check, tmp_path):
    out = tmp_path / "out"
    assert check.main(["--device", "cpu", "--tiny", "--out", str(out), "--reps", "1",
                       "--tokens", "3", "--prompt-tokens", "8",
                       "--ceilings-of", "NVIDIA H100 80GB HBM3"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["kind"] == "gpucheck" and m["engine"]["name"] == "transformers"
    assert m["roofline_sku"]["status"] == "datasheet"
    assert not m["sections_skipped_for_budget"]
    assert len(list(out.iterdir())) <= 8          # what the device tool brings back
    gemm = (out / "gemm.csv").read_text().splitlines()
    assert len(gemm) == 1 + 5 * 8                 # 5 linear layers x 8 row counts
    assert "d_linear_measured" in (out / "gemm_d.csv").read_text()
    assert (out / "decode.csv").read_text().startswith("model,reps,wall_ms,compute_ms")
    stored = check.adopt(out, tmp_path / "runs")
    run = runs.open_run(stored)                   # validates against the run schema
    assert run.manifest["kind"] == "gpucheck" and run.sku == m["sku"]
    assert [r.run_id for r in runs.load_runs(tmp_path / "runs", kind="gpucheck")] == [m["run_id"]]
    with pytest.raises(SystemExit, match="already in the store"):
        check.adopt(out, tmp_path / "runs")
