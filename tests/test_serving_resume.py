"""Serving runs resume: each finished level is written into the run as it completes, and a
killed run resumes from the levels it has (``specbench serve-bench --resume RUN_DIR``).

Without an engine the server and the measurement of a level are stand-ins (here only, never in
the measurement path), so the bookkeeping is tested exactly: which levels are in the run when a
level fails, what a resume measures and which servers it starts, and that the tables built from
the parts are the ones the run used to write at its end. Marked ``engine``: a real serving run
killed with SIGKILL after its first level, then resumed.
"""
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from specbench.cli.main import main
from specbench.measure.serving import (SLO, LoadDefinition, LoadError, ServerError,
                                       ServingConfig, ServingInterrupted, keep_level, level_key,
                                       measured_levels, run_serving)
from specbench.measure.serving import run as serving_run
from specbench.store.runs import open_run

ROOT = Path(__file__).resolve().parents[1]


# -- stand-ins for the server and the client (tests only) --------------------------------------

class _Server:
    """Records which γ had a server started; serves nothing."""
    started: list[int] = []
    ports = itertools.count(8000)

    def __init__(self, settings, port=None, ready_timeout_s=300.0, log_dir=None):
        self.settings, self.port, self.startup_s = settings, port or next(_Server.ports), 1.0
        self.base_url = f"http://127.0.0.1:{self.port}"

    def command(self):
        return ["python", "-m", "vllm.entrypoints.openai.api_server", "--port", str(self.port)]

    def __enter__(self):
        _Server.started.append(self.settings.gamma)
        return self

    def __exit__(self, *exc):
        return None

    def leftover_pids(self):
        return []

    def kv_cache(self):
        return {"tokens": 93184, "bytes": 2147483648, "bytes_per_token": 2147483648 / 93184}


class _Bench:
    """measure_level's stand-in: deterministic rows with what JSON must carry unchanged (numpy
    scalars, NaN, None, awkward floats, a column only speculating arms have); fails with
    ``failure`` on call number ``fail_at``."""

    def __init__(self):
        self.calls, self.outputs, self.warmups = [], [], []
        self.fail_at, self.failure = None, None

    def __call__(self, server, workload, dataset, load, mode, level, result_dir):
        gamma, n = server.settings.gamma, load.num_prompts
        self.calls.append((gamma, Path(workload).parent.name, mode, level))
        if len(self.calls) == self.fail_at:
            raise self.failure
        base = 10.0 / 3 * (1 + gamma) * level * (2 if "b/" in workload else 1)
        row = {"mode": mode, "concurrency": int(level) if mode == "concurrency" else np.nan,
               "request_rate": float(level) if mode == "rate" else np.nan,
               **{f"p{p}_{m}_ms": np.float64(base * p / 7) for p in (50, 95, 99)
                  for m in ("ttft", "tpot", "itl")},
               "goodput": base / 11, "qualified_tokens_per_s": np.float64(base * 1.1),
               "mean_running": min(level, n) * 0.97, "slo_met_p95": np.bool_(gamma != 2),
               "completed": np.int64(n), "alpha": np.nan if gamma == 0 else 0.6,
               "client_per_position": "" if gamma == 0 else "0.7;0.5",
               "max_concurrent_requests": None if mode == "rate" else int(level)}
        if gamma:
            row["client_draft_tokens"] = np.int64(12 * gamma)
        requests = pd.DataFrame({"prompt_len": [12 + i for i in range(n)], "output_len": [8] * n,
                                 "ttft_ms": [base / (i + 3) for i in range(n)],
                                 "tpot_ms": [base / (i + 7) for i in range(n)],
                                 "ok": [True] * n, "good": [i % 2 == 0 for i in range(n)]})
        self.outputs.append((row, requests))
        return row, requests


def _contract(kind, model, dtype, **_):
    """The manifest's contract without probing the machine (no roofline probe, no engine)."""
    from specbench.measure.contract import model_identity
    return {"kind": kind, "sku": "cpu-test", "code": {"revision": "test"},
            "model": model_identity(model), "dtype": dtype, "hardware": {},
            "engine": {"name": "vllm-cpu", "version": "test", "settings": {}}}


@pytest.fixture
def bench(monkeypatch):
    bench = _Bench()
    _Server.started = []
    monkeypatch.setattr("specbench.measure.contract.contract", _contract)
    monkeypatch.setattr(serving_run, "Server", _Server)
    monkeypatch.setattr(serving_run, "measure_level", bench)
    monkeypatch.setattr(serving_run, "run_client", lambda argv: bench.warmups.append(argv))
    return bench


@pytest.fixture
def prompts(tmp_path) -> list[Path]:
    """Two operator prompt files of one name in two folders (their parts must not collide)."""
    files = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        files.append(tmp_path / folder / "mine.jsonl")
        files[-1].write_text(f'{{"prompt": "Summarise {folder}: a b c"}}\n'
                             f'{{"prompt": "Summarise {folder}: d e f"}}\n')
    return files


def _cfg(tmp_path, prompts, gammas=(0, 2), root="runs", plan=None, concurrencies=(1, 2)):
    (tmp_path / "model").mkdir(exist_ok=True)
    load = LoadDefinition(workloads=tuple(f"file:{p}" for p in prompts),
                          concurrencies=concurrencies, request_rates=(0.5,), num_prompts=3,
                          output_len=8, slo=SLO(1000, 100))
    return ServingConfig(model=str(tmp_path / "model"), gammas=gammas, load=load,
                         dtype="float32", root=str(tmp_path / root), plan=plan)


def _quiet(_):
    return None


def _parts(run_path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_path / "parts").glob("*.json"))}


def _broken_run(tmp_path, prompts, bench, fail_at, failure=None, **cfg):
    """A run whose ``fail_at``-th level fails (the server died): the run is left incomplete."""
    bench.fail_at, bench.failure = fail_at, failure or ServerError("the server died")
    with pytest.raises(type(bench.failure)) as err:
        run_serving(_cfg(tmp_path, prompts, **cfg), progress=_quiet)
    (path,) = (tmp_path / "runs" / "cpu-test").iterdir()
    bench.calls.clear()
    bench.warmups.clear()
    bench.fail_at = None
    _Server.started = []
    return path, err.value


# -- each level is written as it finishes ----------------------------------------------------

def test_each_finished_level_is_in_the_run_when_a_later_one_fails(tmp_path, prompts, bench):
    path, error = _broken_run(tmp_path, prompts, bench, fail_at=4)
    assert error.run_path == path                  # the CLI names the run to resume
    parts = [json.loads(b) for b in _parts(path).values()]
    assert len(parts) == 3 and not (path / "levels.csv").exists()
    assert {(p["arm"], p["mode"], p["level"]) for p in parts} == {
        ("off", "concurrency", 1), ("off", "concurrency", 2), ("off", "rate", 0.5)}
    assert open_run(path).manifest["status"] == "running"


def test_tables_from_the_parts_are_the_tables_written_at_the_end_before(tmp_path, prompts,
                                                                        bench):
    """JSON carries every value unchanged: the tables equal those the run built in memory from
    the measured rows (the code before parts), byte for byte."""
    run = run_serving(_cfg(tmp_path, prompts), progress=_quiet)
    rows, frames = [], []
    for (gamma, folder, mode, level), (row, reqs) in zip(bench.calls, bench.outputs,
                                                         strict=True):
        arm = "off" if gamma == 0 else f"γ={gamma}"
        key = {"arm": arm, "workload": f"file:{tmp_path / folder / 'mine.jsonl'}",
               "gamma": gamma, "source": "file", "measured_as": arm}
        rows.append({**key, **row})
        frames.append(reqs.assign(**key, mode=mode, level=level, request=range(len(reqs))))
    assert (run.path / "levels.csv").read_text() == pd.DataFrame(rows).to_csv(index=False)
    assert (run.path / "requests.csv").read_text() == \
        pd.concat(frames, ignore_index=True).to_csv(index=False)
    assert run.complete and len(_parts(run.path)) == 12 and _Server.started == [0, 2]


def test_a_measured_level_is_never_written_again(tmp_path, prompts, bench):
    run = run_serving(_cfg(tmp_path, prompts), close=False, progress=_quiet)
    level = measured_levels(_cfg(tmp_path, prompts))[0]
    kept = _parts(run.path)
    with pytest.raises(FileExistsError, match="measured already"):
        keep_level(run, level, {"row": {}, "requests": {}})
    assert _parts(run.path) == kept


def test_level_keys_are_safe_file_names_distinct_for_files_of_one_name():
    a = level_key("γ=2", "file:/x/a/mine.jsonl", "concurrency", 4)
    b = level_key("γ=2", "file:/x/b/mine.jsonl", "concurrency", 4)
    assert a != b
    assert re.fullmatch(r"level-g2-mine-concurrency-4-[0-9a-f]{8}", a)
    assert re.fullmatch(r"level-off-summarization-rate-0\.5-[0-9a-f]{8}",
                        level_key("off", "summarization", "rate", 0.5))


# -- a killed run resumes from the levels it has ---------------------------------------------

def test_a_resumed_run_measures_only_what_it_lacks_and_ends_as_an_unbroken_run(
        tmp_path, prompts, bench):
    unbroken = run_serving(_cfg(tmp_path, prompts, root="unbroken"), progress=_quiet)
    expected_calls = list(bench.calls)
    bench.calls.clear()
    path, _ = _broken_run(tmp_path, prompts, bench, fail_at=5)
    kept = _parts(path)
    torn = path / "parts" / ".level-x.json.abc123.tmp"   # a write the kill cut short
    torn.write_text('{"row": {"goo')
    run = run_serving(None, resume=path, progress=_quiet)
    assert bench.calls == expected_calls[4:]
    assert {name: data for name, data in _parts(path).items() if name in kept} == kept
    assert not torn.exists() and run.complete
    for table in ("levels.csv", "requests.csv"):
        assert (path / table).read_bytes() == (unbroken.path / table).read_bytes()
    assert [r["levels_done"] for r in run.manifest["resumes"]] == [4]
    assert [s["gamma"] for s in run.manifest["servers"]] == [0, 0, 2]  # off twice: two sessions


def test_an_arm_whose_levels_are_all_done_starts_no_server(tmp_path, prompts, bench):
    path, _ = _broken_run(tmp_path, prompts, bench, fail_at=7)    # γ=2's first level
    run_serving(None, resume=path, progress=_quiet)
    assert _Server.started == [2] and len(bench.calls) == 6
    assert len(bench.warmups) == 2                 # γ=2's server warms up for each workload
    unclosed = run_serving(_cfg(tmp_path, prompts, root="open"), close=False, progress=_quiet)
    _Server.started = []
    run = run_serving(None, resume=unclosed.path, progress=_quiet)   # every level done
    assert _Server.started == [] and run.complete


def test_a_plan_of_a_fixed_gammas_configuration_is_measured_once(tmp_path, prompts, bench):
    plan = {"static_gamma": 2, "batch_schedule": None, "engine": {}}
    run = run_serving(_cfg(tmp_path, prompts, plan=plan), progress=_quiet)
    levels = pd.read_csv(run.path / "levels.csv")
    assert len(_parts(run.path)) == 12 and _Server.started == [0, 2]
    plan_rows = levels[levels["arm"] == "plan"].reset_index(drop=True)
    fixed = levels[levels["arm"] == "γ=2"].reset_index(drop=True)
    assert set(plan_rows["measured_as"]) == {"γ=2"}
    pd.testing.assert_frame_equal(plan_rows.drop(columns="arm"), fixed.drop(columns="arm"),
                                  check_names=False)


def test_a_resume_keeps_the_load_its_manifest_recorded(tmp_path, prompts, bench):
    path, _ = _broken_run(tmp_path, prompts, bench, fail_at=2)
    other = _cfg(tmp_path, prompts[:1], gammas=(0,), concurrencies=(8,))
    run_serving(other, resume=path, progress=_quiet)
    assert len(bench.calls) == 11 and (0, "a", "concurrency", 8) not in bench.calls
    with pytest.raises(SystemExit) as done:
        main(["serve-bench", "--resume", str(path), "--concurrencies", "8"])
    assert done.value.code == 2


def test_a_complete_run_refuses_to_resume_in_one_line_naming_it(tmp_path, prompts, bench,
                                                               capsys):
    run = run_serving(_cfg(tmp_path, prompts), progress=_quiet)
    with pytest.raises(LoadError, match=f"{re.escape(str(run.path))}: the serving run is "
                                        "complete"):
        run_serving(None, resume=run.path, progress=_quiet)
    capsys.readouterr()
    assert main(["serve-bench", "--resume", str(run.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run.path) in err and "complete" in err


def test_a_changed_prompt_file_is_refused_naming_it(tmp_path, prompts, bench):
    path, _ = _broken_run(tmp_path, prompts, bench, fail_at=2)
    kept = _parts(path)
    prompts[1].write_text('{"prompt": "another prompt"}\n')
    with pytest.raises(LoadError, match=f"the prompt file {re.escape(str(prompts[1]))} "
                                        "changed since the run started"):
        run_serving(None, resume=path, progress=_quiet)
    assert bench.calls == [] and _Server.started == [] and _parts(path) == kept


def test_an_interrupt_keeps_the_finished_levels_and_prints_the_resume_command(
        tmp_path, prompts, bench, capsys):
    (tmp_path / "model").mkdir()
    bench.fail_at, bench.failure = 2, KeyboardInterrupt()
    args = ["serve-bench", "--model", str(tmp_path / "model"), "--workloads",
            f"file:{prompts[0]}", "--gammas", "0", "--concurrencies", "1,2",
            "--request-rates", "", "--num-prompts", "3", "--output-len", "8",
            "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100", "--dtype", "float32",
            "--root", str(tmp_path / "runs")]
    previous = signal.getsignal(signal.SIGTERM)
    assert main(args) == 130
    assert signal.getsignal(signal.SIGTERM) is previous
    (path,) = (tmp_path / "runs" / "cpu-test").iterdir()
    err = capsys.readouterr().err
    assert f"1 of 2 levels kept. Resume with: specbench serve-bench --resume {path}" in err
    bench.fail_at = None
    assert main(["serve-bench", "--resume", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith(str(path))
    assert len(pd.read_csv(path / "levels.csv")) == 2 and open_run(path).complete


def test_an_interrupt_in_the_library_names_the_run(tmp_path, prompts, bench):
    path, stop = _broken_run(tmp_path, prompts, bench, fail_at=3, failure=KeyboardInterrupt())
    assert isinstance(stop, ServingInterrupted)
    assert (stop.path, stop.done, stop.total) == (path, 2, 12)
    assert f"specbench serve-bench --resume {path}" in str(stop)


# -- a real serving run, killed and resumed ---------------------------------------------------

def _wait_for_first_level(harness, root: Path, seconds: float) -> Path:
    deadline = time.time() + seconds
    while time.time() < deadline and harness.poll() is None:
        found = sorted(root.glob("*/*/parts/level-*.json"))
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no level was written in {seconds:.0f} s "
                         f"(harness exit code {harness.poll()})")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: set[int], seconds: float = 60) -> None:
    """The killed harness's server stops by itself (its parent-death signal); a process this
    test started that outlives the wait is killed by its id."""
    deadline = time.time() + seconds
    while time.time() < deadline and any(_running(p) for p in pids):
        time.sleep(0.5)
    left = [p for p in pids if _running(p)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"the killed harness left its server behind: {left}"


@pytest.mark.engine
@pytest.mark.second_lane
def test_a_killed_serving_run_resumes_with_its_first_level_unchanged(tmp_path, engine_dtype):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "specbench.cli.main", "serve-bench", "--gammas", "0",
           "--workloads", "repeat", "--concurrencies", "1,2", "--request-rates", "",
           "--num-prompts", "4", "--output-len", "48", "--slo-ttft-ms", "60000",
           "--slo-tpot-ms", "10000", "--dtype", engine_dtype, "--root", str(root)]
    with open(tmp_path / "killed.log", "wb") as log:
        harness = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        first = _wait_for_first_level(harness, root, 600)
        server = {c.pid for c in psutil.Process(harness.pid).children(recursive=True)}
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=30)
    finally:
        if harness.poll() is None:
            harness.kill()
    run_path = first.parents[1]
    assert [p.name for p in (run_path / "parts").glob("level-*.json")] == [first.name], \
        "the second level finished before the kill: nothing was left to resume"
    measured = first.read_bytes()
    _wait_gone(server)
    done = subprocess.run([sys.executable, "-m", "specbench.cli.main", "serve-bench",
                           "--resume", str(run_path)], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert first.read_bytes() == measured                       # never rewritten
    run = open_run(run_path)
    assert run.complete and [r["levels_done"] for r in run.manifest["resumes"]] == [1]
    record = json.loads(measured)
    lines = (run_path / "levels.csv").read_text().splitlines(keepends=True)
    assert "".join(lines[:2]) == pd.DataFrame([record["row"]]).to_csv(index=False)
    requests = (run_path / "requests.csv").read_text().splitlines(keepends=True)
    assert "".join(requests[:5]) == pd.DataFrame(record["requests"]).to_csv(index=False)
    levels = run.table("levels.csv")
    assert list(levels["concurrency"]) == [1, 2] and list(levels["completed"]) == [4, 4]
    assert len(run.table("requests.csv")) == 8
