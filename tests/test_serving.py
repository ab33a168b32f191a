"""Serving under load: load definitions, goodput and crossover arithmetic, and — marked
``engine`` — a real vLLM server on loopback driven by vLLM's own benchmark client.

The engine tests share one speculating server (module fixture); the kill tests start their own,
because they kill it.
"""
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from specbench.measure import serving
from specbench.measure.serving import run as serving_run
from specbench.report import serving_economics
from specbench.report.serving_economics import serving_tables
from specbench.engine.vllm_engine import EngineSettings
from specbench.measure.serving import (SLO, LoadDefinition, LoadError, Server, ServerError,
                                       ServingConfig, qualified)
from specbench.report.serving_economics import crossover_point

ROOT = Path(__file__).resolve().parents[1]
DATASET = serving.DEFAULT_DATASET
needs_dataset = pytest.mark.skipif(not DATASET.exists(), reason=f"{DATASET} not present")


# -- bad load definitions are rejected before any server starts -------------------------------

@pytest.fixture
def no_server(monkeypatch):
    def refuse(self):
        raise AssertionError("a server was started for a load definition that cannot run")
    monkeypatch.setattr(Server, "start", refuse)


def _cfg(tmp_path, **load):
    base = dict(workloads=("repeat",), concurrencies=(1,), request_rates=(), num_prompts=2,
                output_len=8, slo=SLO(1000, 100))
    return ServingConfig(model=str(tmp_path), root=str(tmp_path / "runs"),
                         load=LoadDefinition(**{**base, **load}))


@pytest.mark.parametrize("load, message", [
    ({"concurrencies": (0,)}, "concurrency must be a whole number >= 1"),
    ({"concurrencies": (2, -1)}, "concurrency must be a whole number >= 1"),
    ({"concurrencies": (), "request_rates": ()}, "at least one concurrency or request rate"),
    ({"request_rates": (0.0,)}, "request rate must be"),
    ({"slo": SLO(0, 100)}, "SLO ttft_ms must be a positive"),
    ({"slo": SLO(1000, -5)}, "SLO tpot_ms must be a positive"),
    ({"num_prompts": 0}, "num_prompts must be >= 1"),
    ({"output_len": 1}, "output_len must be >= 2"),
    ({"workloads": ()}, "at least one workload"),
])
def test_bad_load_is_rejected_before_any_server(tmp_path, no_server, load, message):
    with pytest.raises(LoadError, match=message):
        serving.run_serving(_cfg(tmp_path, **load))
    assert not (tmp_path / "runs").exists(), "a run folder was created for a bad load"


@needs_dataset
def test_unknown_category_is_rejected_naming_the_choices(tmp_path, no_server):
    with pytest.raises(LoadError, match="'cooking' is neither a project workload.*"
                                        "summarization"):
        serving.run_serving(_cfg(tmp_path, workloads=("repeat", "cooking")))


def test_empty_or_missing_dataset_is_rejected(tmp_path, no_server):
    empty = tmp_path / "question.jsonl"
    empty.write_text("\n")
    with pytest.raises(LoadError, match="the dataset is empty"):
        serving.run_serving(_cfg(tmp_path, workloads=("summarization",),
                                 dataset_path=str(empty)))
    with pytest.raises(LoadError, match="not found"):
        serving.run_serving(_cfg(tmp_path, workloads=("qa",),
                                 dataset_path=str(tmp_path / "absent.jsonl")))
    empty.write_text('{"question_id": 1, "turns": ["x"]}\n')
    with pytest.raises(LoadError, match="line 1: not a Spec-Bench question"):
        serving.run_serving(_cfg(tmp_path, workloads=("qa",), dataset_path=str(empty)))


def test_gammas_must_include_zero(tmp_path, no_server):
    with pytest.raises(LoadError, match="gammas must include 0"):
        serving.run_serving(replace(_cfg(tmp_path), gammas=(2, 4)))


def test_cli_exits_2_on_a_bad_load(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    out = subprocess.run([sys.executable, "-m", "specbench.cli.main", "serve-bench", "--model",
                          str(tmp_path), "--concurrencies", "0", "--root", str(tmp_path)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert "concurrency must be a whole number >= 1, got 0" in out.stderr


@needs_dataset
def test_question_ids_are_the_first_of_each_category_in_file_order():
    ids = LoadDefinition(workloads=("repeat", "summarization", "qa"), num_prompts=3).validate()
    assert set(ids) == {"summarization", "qa"}
    assert all(len(v) == 3 for v in ids.values())
    cats = serving.spec_bench_categories(DATASET)
    assert ids["qa"] == cats["qa"][:3]


# -- the client's command line and the server's ---------------------------------------------

def test_server_command_binds_loopback_with_the_sweep_settings(tmp_path):
    spec = Server(EngineSettings(model=str(tmp_path), gamma=4), port=12345).command()
    assert spec[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert spec[spec.index("--host") + 1] == "127.0.0.1"
    assert "--no-enable-prefix-caching" in spec and "--enforce-eager" in spec
    assert '"num_speculative_tokens": 4' in spec[spec.index("--speculative-config") + 1]
    plain = Server(EngineSettings(model=str(tmp_path), gamma=0), port=12345).command()
    assert "--speculative-config" not in plain


def test_client_argv_is_greedy_with_goodput_and_three_percentiles(tmp_path):
    server = Server(EngineSettings(model=str(tmp_path), gamma=0), port=4321)
    load = LoadDefinition(workloads=("open", "qa"), slo=SLO(3000, 150))
    argv = serving.client_argv(server, "open", tmp_path / "open.jsonl", load, "concurrency",
                               4, 8, tmp_path)
    joined = " ".join(argv)
    assert "--temperature 0" in joined and "--host 127.0.0.1" in joined
    assert "--goodput ttft:3000 tpot:150" in joined
    assert "--metric-percentiles 50,95,99" in joined and "--max-concurrency 4" in joined
    assert "--dataset-name custom" in joined and "--skip-chat-template" in joined
    assert "--repetition-penalty 1.2" in joined      # 'open' as in the sweep
    qa = " ".join(serving.client_argv(server, "qa", DATASET, load, "rate", 0.5, 8, tmp_path))
    assert "--dataset-name spec_bench" in qa and "--spec-bench-category qa" in qa
    assert "--request-rate 0.5" in qa and "--disable-shuffle" in qa


# -- goodput, cost, speedup and crossover arithmetic --------------------------------------------

def _result(ttfts_s, latencies_s, output_lens):
    return {"input_lens": [10] * len(ttfts_s), "output_lens": output_lens, "ttfts": ttfts_s,
            "latencies": latencies_s, "itls": [[0.01] * (n - 1) for n in output_lens],
            "errors": [""] * len(ttfts_s)}


def test_qualified_requests_follow_the_clients_goodput_rule():
    # TPOT = (E2E − TTFT) / (n − 1): 0.1 s over 11 tokens = 10 ms; 1.1 s = 110 ms.
    frame = qualified(_result([0.5, 0.5, 2.5, 0.5], [0.6, 1.6, 2.6, 0.7], [11, 11, 11, 1]),
                      SLO(2000, 100))
    assert frame["tpot_ms"].round(6).tolist() == [10.0, 110.0, 10.0, 0.0]
    assert frame["good"].tolist() == [True, False, False, True]   # one token: TPOT counts 0


def test_cost_per_million_qualified_tokens_on_whole_replicas(tmp_path):
    cfg = replace(_cfg(tmp_path), price_per_replica_hour=0.10, demand_tokens_per_s=1000.0)
    levels = serving_economics.add_costs(
        pd.DataFrame({"qualified_tokens_per_s": [20.0, 0.0, 30.0]}),
        cfg.price_per_replica_hour, cfg.demand_tokens_per_s)
    # 1000 / 20 = 50 replicas at $0.10/h = $5/h for 3.6 M tokens/h → $1.389 per million.
    assert levels["replicas"].tolist()[0] == 50
    assert levels["cost_per_million_usd"][0] == pytest.approx(5 / 3.6)
    assert math.isnan(levels["cost_per_million_usd"][1])   # no qualified token: no price
    assert levels["replicas"][2] == 34                        # ceil(33.3): whole replicas


def test_crossover_point_hand_computed_and_limits():
    # Falls below 1 between 2 and 4: 1.2 → 0.8, halfway in log2 → 2^1.5.
    assert crossover_point(np.array([1, 2, 4]), np.array([1.5, 1.2, 0.8])) == \
        pytest.approx(2 ** 1.5)
    assert crossover_point(np.array([1, 2, 4]), np.array([2.0, 1.5, 1.1])) == math.inf
    assert crossover_point(np.array([1, 2, 4]), np.array([0.9, 0.8, 0.7])) == -math.inf
    assert crossover_point(np.array([4, 1, 2]), np.array([0.8, 1.5, 1.2])) == \
        pytest.approx(2 ** 1.5)                                # order of levels is irrelevant


def _requests(tpot_by_gamma_and_level, n=8, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for (gamma, level), tpot in tpot_by_gamma_and_level.items():
        for _ in range(n):
            rows.append({"workload": "w", "gamma": gamma, "mode": "concurrency",
                         "level": level, "tpot_ms": tpot * (1 + 0.01 * rng.standard_normal())})
    return pd.DataFrame(rows)


def test_speedup_and_crossover_from_requests():
    reqs = _requests({(0, 1): 30, (2, 1): 15, (0, 2): 40, (2, 2): 40 / 1.2,
                      (0, 4): 60, (2, 4): 75})
    speed = serving_economics.speedups(reqs).set_index("concurrency")
    assert speed.loc[1, "speedup"] == pytest.approx(2.0, rel=0.02)
    assert (speed["speedup_lo"] <= speed["speedup"]).all()
    assert (speed["speedup"] <= speed["speedup_hi"]).all()
    cross = serving_economics.crossovers(reqs).iloc[0]
    assert 2 < cross["crossover"] < 4 and cross["verdict"].startswith("crossover at")
    assert cross["crossover_lo"] <= cross["crossover"] <= cross["crossover_hi"]
    none = serving_economics.crossovers(_requests({(0, 1): 30, (2, 1): 15, (0, 2): 40, (2, 2): 20}))
    assert none.iloc[0]["verdict"] == "no crossover up to 2"


PROM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:request_inference_time_seconds Histogram of time spent in RUNNING phase for request.
# TYPE vllm:request_inference_time_seconds histogram
vllm:request_inference_time_seconds_sum{engine="0",model_name="m"} 12.5
vllm:request_inference_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:request_inference_time_seconds_count{engine="0",model_name="m"} 4.0
"""


def test_gauge_and_histogram_readers():
    assert serving.gauge(PROM, "vllm:num_requests_running") == 3.0
    assert serving.histogram_sum(PROM, serving.RUNNING_TIME) == 12.5
    with pytest.raises(LookupError):
        serving.gauge(PROM, "vllm:num_requests_waiting")


# -- a real server --------------------------------------------------------------------------

def _model():
    from specbench.engine.assets import embedded_model_dir
    return str(embedded_model_dir())


def _alive(pids):
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory, engine_dtype):
    """One speculating server (γ=2) shared by the engine tests of this module, started from
    the flags `specbench plan` prints: its static γ and the batch-size schedule of vLLM's
    dynamic speculation (γ=2 at every batch size, so the tests below read a γ=2 server)."""
    from specbench.report.plan.own_prompts import serve_command
    printed = serve_command(_model(), engine_dtype, 2, {"prompt_lookup_min": 2,
                                                         "prompt_lookup_max": 4},
                            schedule=[[1, 1, 2], [2, 8, 2]], max_num_seqs=8)
    arm = serving.arm_from_serve_command(printed)
    assert arm.gamma == 2 and arm.schedule == ((1, 1, 2), (2, 8, 2))
    settings = EngineSettings(model=_model(), gamma=arm.gamma, dtype=engine_dtype,
                              batch_schedule=arm.schedule)
    with Server(settings, log_dir=tmp_path_factory.mktemp("server")) as server:
        assert "num_speculative_tokens_per_batch_size" in " ".join(server.command())
        yield server
    assert not _alive(server.pids), "server processes outlived the fixture"


@pytest.fixture(scope="module")
def repeat_dataset(tmp_path_factory):
    from transformers import AutoTokenizer
    folder = tmp_path_factory.mktemp("data")
    return serving.custom_dataset("repeat", 3, AutoTokenizer.from_pretrained(_model()), folder)


@pytest.mark.engine
def test_real_server_on_a_free_loopback_port_answers_and_its_counters_agree(
        spec_server, repeat_dataset, tmp_path):
    api = psutil.Process(spec_server.proc.pid)
    listening = [c.laddr for c in api.net_connections(kind="inet") if c.status == "LISTEN"]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening)
    assert any(addr.port == spec_server.port for addr in listening)
    load = LoadDefinition(workloads=("repeat",), num_prompts=3, output_len=16,
                          slo=SLO(60_000, 10_000))
    row, requests = serving.measure_level(spec_server, "repeat", repeat_dataset, load,
                                          "concurrency", 2, tmp_path)
    assert row["completed"] == 3 and row["failed"] == 0
    assert (requests["output_len"] == 16).all() and requests["good"].all()
    for metric in ("ttft", "itl", "tpot", "e2el"):
        assert row[f"p50_{metric}_ms"] <= row[f"p95_{metric}_ms"] <= row[f"p99_{metric}_ms"]
    assert row["goodput"] == pytest.approx(row["goodput_check"])
    # vLLM's client read /metrics around its load; this project's reader read it around the
    # same call: the same window, so the same counts.
    assert row["draft_tokens"] > 0
    assert row["client_draft_tokens"] == row["draft_tokens"]
    assert row["client_accepted_tokens"] == row["accepted_tokens"]
    assert row["client_acceptance_rate"] == pytest.approx(row["alpha"], abs=1e-12)
    assert row["client_acceptance_length"] == pytest.approx(row["mean_acceptance_length"])
    per_pos = [float(x) for x in row["client_per_position"].split(";")]
    counts = [int(x) for x in row["accepted_per_pos"].split(";")]
    assert per_pos == pytest.approx([c / row["drafts"] for c in counts], abs=1e-6)
    assert 0 < row["mean_running"] <= 2 + 1e-9
    assert row["cpu_worker_cores"] > 0


@pytest.mark.engine
@needs_dataset
def test_spec_bench_category_through_the_clients_own_dataset(spec_server, tmp_path):
    load = LoadDefinition(workloads=("qa",), num_prompts=2, output_len=8,
                          slo=SLO(60_000, 10_000))
    ids = load.validate()
    serving_run._check_question_ids(load.dataset_path, "qa", 2, ids["qa"])
    row, requests = serving.measure_level(spec_server, "qa", DATASET, load, "rate", 4.0,
                                          tmp_path)
    assert row["completed"] == 2 and row["mode"] == "rate" and row["request_rate"] == 4.0


@pytest.mark.engine
def test_killing_the_server_mid_load_is_a_clear_error_and_leaves_no_process(
        repeat_dataset, tmp_path, engine_dtype):
    load = LoadDefinition(workloads=("repeat",), num_prompts=6, output_len=200,
                          slo=SLO(60_000, 10_000))
    with pytest.raises(ServerError, match=r"exited with code -9 during the load \(repeat"):
        with Server(EngineSettings(model=_model(), gamma=0, dtype=engine_dtype),
                    log_dir=tmp_path) as server:
            pids = set(server.pids)
            killer = threading.Timer(4.0, os.kill, (server.proc.pid, signal.SIGKILL))
            killer.start()
            try:
                serving.measure_level(server, "repeat", repeat_dataset, load, "concurrency",
                                      2, tmp_path)
            finally:
                killer.cancel()
    assert len(pids) >= 3      # API server, engine core, worker
    assert not _alive(pids | server.pids)


@pytest.mark.engine
def test_a_terminated_harness_takes_its_server_with_it(tmp_path, engine_dtype):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    cmd = [sys.executable, "-m", "specbench.cli.main", "serve-bench", "--gammas", "0",
           "--workloads", "repeat", "--concurrencies", "1", "--request-rates", "",
           "--num-prompts", "8", "--output-len", "200", "--dtype", engine_dtype,
           "--root", str(tmp_path / "runs")]
    with open(tmp_path / "harness.err", "wb") as err:
        harness = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    seen: set[int] = set()
    try:
        deadline = time.time() + 400
        while time.time() < deadline and harness.poll() is None:
            children = psutil.Process(harness.pid).children(recursive=True)
            seen |= {c.pid for c in children}
            if any("VLLM::Worker" in c.name() or "EngineCor" in c.name()
                   for c in children if c.is_running()):
                time.sleep(8)   # the server is up and serving its load
                seen |= {c.pid for c in psutil.Process(harness.pid).children(recursive=True)}
                break
            time.sleep(1)
        assert harness.poll() is None, "the harness ended before its server was up"
        harness.send_signal(signal.SIGTERM)
        assert harness.wait(timeout=60) == 130
    finally:
        if harness.poll() is None:
            harness.kill()
    (run,) = (tmp_path / "runs").glob("*/serving-*")
    # SIGTERM stops the run as Ctrl-C does: the run is kept, and the command that resumes it said.
    assert f"Resume with: specbench serve-bench --resume {run}" in \
        (tmp_path / "harness.err").read_text()
    servers = [p for p in seen if p != harness.pid]
    assert servers
    deadline = time.time() + 30
    while _alive(servers) and time.time() < deadline:
        time.sleep(0.5)
    assert not _alive(servers), f"left behind: {_alive(servers)}"


# -- the committed run and the chapter's numbers --------------------------------------------------

def _committed_serving_run():
    from specbench.report import serving as serving_report
    from specbench.store.runs import DEFAULT_ROOT
    return serving_report.latest_run(DEFAULT_ROOT)   # FileNotFoundError when none: a failure


@pytest.mark.data
def test_committed_serving_run_has_the_promised_columns_and_agreeing_acceptance():
    run = _committed_serving_run()
    levels = run.table("levels.csv")
    for column in ("concurrency", "p50_itl_ms", "p95_itl_ms", "p99_itl_ms", "p50_ttft_ms",
                   "p95_ttft_ms", "p99_ttft_ms", "goodput"):
        assert column in levels
    assert {"repeat", "open"} <= set(levels["workload"])
    assert (levels["source"] == "spec_bench").groupby(levels["workload"]).any().sum() >= 3
    assert {0, 2, 4} <= set(levels["gamma"])
    assert levels.loc[levels["mode"] == "concurrency", "concurrency"].nunique() >= 3
    assert (levels["failed"] == 0).all()
    spec = levels[levels["gamma"] > 0].dropna(subset=["client_acceptance_rate"])
    assert len(spec) and (spec["client_draft_tokens"] == spec["draft_tokens"]).all()
    assert (spec["client_acceptance_rate"] - spec["alpha"]).abs().max() < 1e-9
    m = run.manifest
    assert m["kind"] == "serving" and m["dataset"]["spec_bench_sha256"]
    assert all(len(ids) == m["load"]["num_prompts"]
               for ids in m["dataset"]["question_ids"].values())
    assert "127.0.0.1" in m["server"]["command"]
    assert m["slo"]["ttft_ms"] > 0 and m["slo"]["tpot_ms"] > 0


@pytest.mark.data
def test_chapter_numbers_name_their_run_and_state_the_crossover():
    from specbench.report.chapters import serving as chapter
    run = _committed_serving_run()
    numbers = chapter.numbers(run)
    assert numbers["run_id"] == run.run_id
    crossover = serving_tables(run)[2]
    assert numbers["n_crossover"] + numbers["n_no_crossover"] + numbers["n_below_from_start"] \
        == len(crossover)
    assert numbers["n_pairs"] == len(crossover)
    # The prose quotes the pair whose speedup falls furthest with load, and counts the others.
    speed = serving_tables(run)[1]
    ends = speed.pivot_table(index=["workload", "gamma"], columns="concurrency", values="speedup")
    fall = ends[numbers["load_lo"]] - ends[numbers["load_hi"]]
    assert numbers["n_falls"] == (fall > 0).sum()
    assert numbers["drop_from"] - numbers["drop_to"] == pytest.approx(fall.max())
    assert numbers["acceptance_counts_equal"] == numbers["acceptance_levels"]
