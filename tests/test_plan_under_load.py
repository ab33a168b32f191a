"""The operator's plan checked under load: the plan's arm, its regret and the crossover.

Arithmetic on small frames in the serving run's own formats (levels.csv, requests.csv); the
real server is driven with the plan's flags in tests/test_serving.py.
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specbench.cli.main import main
from specbench.measure.serving import (Arm, LoadDefinition, LoadError, ServingConfig,
                                       client_argv, load_plan, plan_arm)
from specbench.report.plan import under_load

PLAN = {"calibration": {"sweep": "sweep-x", "sku": "cpu-x", "microbench": None},
        "static_gamma": 4, "batch_schedule": [[1, 1, 6], [2, 8, 2]],
        "serve_dynamic": "vllm serve …", "recommendation": [
            {"batch": 1, "gamma": 6, "best_speedup": 1.7},
            {"batch": 2, "gamma": 2, "best_speedup": 1.4},
            {"batch": 4, "gamma": 2, "best_speedup": 1.2},
            {"batch": 8, "gamma": 0, "best_speedup": 0.9}],
        "engine": {"schedule_probe": {"honoured": True}}}


def test_the_plan_arm_is_its_schedule_where_honoured_else_its_static_gamma():
    assert plan_arm(PLAN) == Arm("plan", 6, ((1, 1, 6), (2, 8, 2)))
    refused = {**PLAN, "engine": {"schedule_probe": {"honoured": False}}}
    assert plan_arm(refused) == Arm("plan", 4)
    assert plan_arm({**refused, "static_gamma": 0}) == Arm("plan", 0)
    cfg = ServingConfig(model="/m", gammas=(0, 4), plan=PLAN)
    assert [a.name for a in cfg.arms()] == ["off", "γ=4", "plan"]


@pytest.mark.parametrize("text, field", [
    ("not json", "not a plan"),
    (json.dumps({"static_gamma": 2}), "'calibration' missing"),
    (json.dumps({**PLAN, "engine": {}, "static_gamma": "x"}), "cannot be served"),
    (json.dumps({**PLAN, "batch_schedule": [[0, 1]]}), "cannot be served"),
])
def test_a_bad_plan_file_is_one_error_naming_the_file_and_field(tmp_path, text, field):
    path = tmp_path / "plan.json"
    path.write_text(text)
    with pytest.raises(LoadError, match=field) as err:
        load_plan(path)
    assert str(path) in str(err.value)


def test_serve_bench_refuses_a_bad_plan_before_any_server(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text("{}")
    with pytest.raises(SystemExit) as done:
        main(["serve-bench", "--plan", str(path), "--root", str(tmp_path)])
    assert done.value.code == 2
    assert f"{path}: field 'calibration' missing" in capsys.readouterr().err


def test_a_prompt_file_is_sent_with_the_chat_template_and_checked_first(tmp_path):
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text('{"prompt": "Summarise: a b c a b c"}\n')

    class _Server:
        port, settings = 1, type("S", (), {"model": "/m"})
    load = LoadDefinition(workloads=(f"file:{prompts}",), concurrencies=(1,), request_rates=())
    assert load.validate() == {}
    argv = client_argv(_Server, f"file:{prompts}", prompts, load, "concurrency", 1, 2, tmp_path)
    at = argv.index("--dataset-name")
    assert argv[at:at + 4] == ["--dataset-name", "custom", "--dataset-path", str(prompts)]
    assert "--skip-chat-template" not in argv   # the plan's pass applied it too
    prompts.write_text('{"text": "no prompt field"}\n')
    with pytest.raises(LoadError, match=f"{prompts}, line 1: field 'prompt'"):
        load.validate()


# -- regret and crossover, on a serving run's tables -----------------------------------------

class _Run:
    """A serving run as the report reads it: its manifest and two tables."""

    def __init__(self, tpot: dict, plan=PLAN):
        rng = np.random.default_rng(0)
        reqs, levels = [], []
        for (arm, gamma, level), ms in tpot.items():
            values = ms * (1 + 0.01 * rng.standard_normal(20))
            reqs.append(pd.DataFrame({"arm": arm, "gamma": gamma, "mode": "concurrency",
                                      "level": level, "tpot_ms": values}))
            levels.append({"arm": arm, "gamma": gamma, "mode": "concurrency",
                           "concurrency": level, "goodput": 100 / ms, "mean_running": level})
        self._tables = {"requests.csv": pd.concat(reqs, ignore_index=True),
                        "levels.csv": pd.DataFrame(levels)}
        self.manifest = {"kind": "serving", "plan": plan}

    def table(self, name):
        return self._tables[name]


def _tpot(plan_ms: dict) -> dict:
    """off 20 ms everywhere; γ=2 pays to 4, γ=4/6 pay at 1 only (latencies in ms)."""
    fixed = {("off", 0): [20, 20, 20, 20], ("γ=2", 2): [14, 15, 18, 24],
             ("γ=4", 4): [12, 16, 21, 26], ("γ=6", 6): [11, 17, 23, 28]}
    out = {(arm, g, c): ms[i] for (arm, g), ms in fixed.items()
           for i, c in enumerate((1, 2, 4, 8))}
    out.update({("plan", 6, c): ms for c, ms in plan_ms.items()})
    return out


CALIBRATION = pd.DataFrame({"workload": ["repeat"] * 3 + ["edit"] * 3 + ["repeat", "edit"],
                            "gamma": [2, 4, 6] * 2 + [6, 6], "batch": [1] * 6 + [4, 4],
                            "speedup": [2.5, 3.5, 4.5, 1.8, 2.2, 2.6, 1.2, 1.05]})


def test_regret_is_over_the_best_arm_per_level_and_the_baselines_get_the_same_score():
    run = _Run(_tpot({1: 11.5, 2: 15, 4: 18, 8: 22}))
    table = under_load.regrets(run, CALIBRATION)
    assert list(table["best_arm"]) == ["γ=6", "plan", "γ=2", "off"]
    assert table["plan_regret"].iloc[0] == pytest.approx(11.5 / 11 - 1, abs=0.02)
    assert table["plan_regret"].iloc[3] == pytest.approx(22 / 20 - 1, abs=0.02)
    # always γ=4: 12/11, 16/15, 21/18, 26/20
    assert table["always_g4_regret"].iloc[2] == pytest.approx(21 / 18 - 1, abs=0.02)
    # ratio transfer picks γ=6 from the calibration at every batch (acceptance-blind)
    assert list(table["ratio_transfer_gamma"]) == [6, 6, 6, 6]
    assert table["ratio_transfer_regret"].iloc[3] == pytest.approx(28 / 20 - 1, abs=0.02)
    assert (table["plan_regret_lo"] <= table["plan_regret"] + 1e-9).all()
    totals = under_load.summary(table)
    assert totals["plan_worst"] < totals["always_g4_worst"] < totals["ratio_transfer_worst"]


def test_the_crossover_is_measured_on_the_envelope_and_predicted_from_the_plan():
    cross = under_load.crossover(_Run(_tpot({1: 11, 2: 15, 4: 18, 8: 22})))
    assert cross["levels"] == [1, 2, 4, 8]
    # the plan's best predicted speedup falls below 1 between batch 4 (1.2) and 8 (0.9)
    assert cross["predicted"] == pytest.approx(2 ** (2 + 0.2 / 0.3))
    slower = _tpot({1: 11, 2: 15, 4: 18, 8: 22})
    slower[("γ=2", 2, 8)] = 25
    cross = under_load.crossover(_Run(slower))
    # envelope: 20/11, 20/14, 20/18, 20/24 -> below 1 between 4 and 8
    assert 4 < cross["measured"] < 8 and cross["measured_lo"] <= cross["measured"]
    assert cross["within_one_level"]
    far = {**PLAN, "recommendation": [{**r, "best_speedup": 0.8} for r in PLAN["recommendation"]]}
    assert not under_load.crossover(_Run(slower, far))["within_one_level"]


@pytest.mark.parametrize("point, low, high, inside", [
    ("inf", "inf", "inf", True),           # JSON has no infinity: the plan writes "inf"
    (float("inf"), 6.0, None, True),       # or a float that json reads as one
    (6.0, 5.0, "inf", True),               # a point in [4, 8) is not "never", but its
    (6.0, 5.0, 7.0, False),                # interval holds "never" only if it reaches it
    (None, None, None, False),             # null: unknown, predicts nothing
    ("-inf", "-inf", "-inf", False),
])
def test_a_load_prediction_of_never_holds_a_measured_never(point, low, high, inside):
    """Speculation pays at every level (measured crossover +inf): the prediction holds it when
    its interval reaches +inf or its point lies beyond the top level too."""
    paying = {k: (v if k[0] == "off" else v * 0.5) for k, v in _tpot({}).items()}
    paying.update({("plan", 6, c): 10 for c in (1, 2, 4, 8)})
    plan = {**PLAN, "load": {"crossover": {"point": point, "low": low, "high": high}}}
    cross = under_load.crossover(_Run(paying, plan))
    assert cross["measured"] == math.inf and cross["predicted_from"] == "load"
    assert cross["measured_in_predicted"] is inside


def test_the_printed_serve_line_round_trips_to_the_arm_served():
    from specbench.measure.serving import arm_from_serve_command
    from specbench.report.plan.own_prompts import serve_command
    line = serve_command("/m", "bfloat16", 6, {}, schedule=[[1, 1, 6], [2, 8, 2]],
                         max_num_seqs=8)
    assert arm_from_serve_command(line) == Arm("plan", 6, ((1, 1, 6), (2, 8, 2)))
    assert arm_from_serve_command(serve_command("/m", "bfloat16", 4, {})) == Arm("plan", 4)
    assert arm_from_serve_command("vllm serve /m --dtype bfloat16") == Arm("plan", 0)


def test_spec_bench_prompts_are_written_as_an_operators_file_after_the_swept_ones(tmp_path,
                                                                                 capsys):
    from specbench.measure.workloads.spec_bench import SpecBenchSource, default_path
    from specbench.measure.workloads.operator_file import read_prompts
    if not default_path().exists():
        pytest.skip(f"{default_path()} not present")
    out = tmp_path / "mine.jsonl"
    assert main(["spec-bench-prompts", "qa", "--count", "3", "--skip", "2", "--out",
                 str(out)]) in (0, None)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    order = [r.id for r in SpecBenchSource("qa").candidates()]
    assert [f"q{r['question_id']}" for r in rows] == order[2:5]
    assert {r["category"] for r in rows} == {"qa"} and len(read_prompts(out)) == 3
    with pytest.raises(SystemExit) as done:
        main(["spec-bench-prompts", "qa", "--count", "999", "--out", str(out)])
    assert done.value.code == 2 and "has 70 prompts after the first 10" in capsys.readouterr().err


# -- make plan-under-load, killed and run again ----------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
PLAN_COMMAND = "-m specbench.cli.main plan "
# Python's stand-in for the script: logs each command; `serve-bench` without --resume makes a
# run that is killed (status 'running') and records its folder as the run store would.
FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
case "$1 ${3:-}" in
  "scripts/host_calibration.py "*) echo "/store/cpu-x/sweep-1 - float32" ;;
  "-m spec-bench-prompts") if [[ "$*" == *--nearest-in-length* ]]; then echo translation; fi ;;
  "-m plan") echo '{"static_gamma": 2}' ;;
  "-m serve-bench")
    if [ "$4" != --resume ]; then
      run="$FAKE_STORE/serving-$(date +%s%N)"; mkdir -p "$run"
      echo '{"status": "running"}' > "$run/manifest.json"
      printf '%s' "$run" > "$SPECBENCH_RUN_RECORD"
      exit 137
    fi ;;
  *) exec "$REAL_PYTHON" "$@" ;;
esac
"""


def test_a_rerun_of_plan_under_load_resumes_its_incomplete_serving_run(tmp_path):
    fake, log, store = tmp_path / "python", tmp_path / "log", tmp_path / "store"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = {**os.environ, "SPECBENCH_PYTHON": str(fake), "FAKE_LOG": str(log),
           "FAKE_STORE": str(store), "REAL_PYTHON": sys.executable, "LEVELS": "1,2",
           "PLAN_UNDER_LOAD_DIR": str(tmp_path / "work"), "PROBE": "off"}

    def script(**extra):
        return subprocess.run([str(ROOT / "scripts" / "plan_under_load.sh")],
                              env={**env, **extra}, capture_output=True, text=True, timeout=60)

    assert script().returncode == 137                     # killed in its serving run
    (killed,) = store.iterdir()
    again = script()
    assert again.returncode == 0, again.stderr
    assert f"resuming the incomplete serving run {killed}" in again.stdout
    calls = log.read_text().splitlines()
    assert calls[-1] == f"-m specbench.cli.main serve-bench --resume {killed}"
    assert sum(c.startswith(PLAN_COMMAND) for c in calls) == 1    # not planned again
    assert script(LEVELS="1,2,4").returncode == 137       # other levels: a run of its own
    (killed / "manifest.json").write_text('{"status": "complete"}')
    assert script().returncode == 137                     # complete: a new run, not a resume
    assert len(list(store.iterdir())) == 3
    assert sum(c.startswith(PLAN_COMMAND) for c in log.read_text().splitlines()) == 3


def test_the_step_cost_probe_is_served_once_resumed_if_killed_and_prices_the_plan(tmp_path):
    fake, log, store = tmp_path / "python", tmp_path / "log", tmp_path / "store"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = {**os.environ, "SPECBENCH_PYTHON": str(fake), "FAKE_LOG": str(log),
           "FAKE_STORE": str(store), "REAL_PYTHON": sys.executable, "LEVELS": "1,2,4",
           "PLAN_UNDER_LOAD_DIR": str(tmp_path / "work"), "CATEGORY": "qa"}

    def script(**extra):
        return subprocess.run([str(ROOT / "scripts" / "plan_under_load.sh")],
                              env={**env, **extra}, capture_output=True, text=True, timeout=60)

    def calls():
        return log.read_text().splitlines()

    assert script().returncode == 137                     # killed in the probe
    (probe,) = store.iterdir()
    assert "--workloads translation --gammas 0,2,6 --concurrencies 1,2,4" in calls()[-1]
    assert script().returncode == 137                     # probe resumed, then the load killed
    assert f"serve-bench --resume {probe}" in "\n".join(calls())
    (plan,) = [c for c in calls() if c.startswith(PLAN_COMMAND)]
    assert plan.endswith(f"--step-probe {probe} --load-levels 1,2,4 --json")
    assert len(list(store.iterdir())) == 2
    assert script(CATEGORY="summarization", PROBE_CATEGORY="summarization").returncode == 2
