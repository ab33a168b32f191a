"""The cluster path without a cluster: profiles, grids, task planning, the run record, the
self-test's resume, and the command line's user errors. The real Slurm is in test_slurm.py."""
import json
import os

import pytest

from specbench.cli import main as cli

from specbench.cli import cluster

from specbench.store import runs
from specbench.cli.notebooks import NOTEBOOKS

ROOT = NOTEBOOKS.parent


def test_example_profile_has_two_gpu_partitions_and_a_cpu_one():
    profile = cluster.load_profile(ROOT / "cluster" / "profiles.example.toml")
    assert set(profile) == {"h100", "h200", "cpu"}
    h100 = profile["h100"].executor_parameters()
    assert h100["slurm_gres"] == "gpu:h100:1" and h100["slurm_partition"] == "h100"
    assert h100["timeout_min"] == 120          # from [defaults]
    assert profile["h200"].executor_parameters()["slurm_gres"] == "gpu:h200:1"
    cpu = profile["cpu"].executor_parameters()
    assert "slurm_gres" not in cpu and "gpus_per_node" not in cpu
    assert cpu["timeout_min"] == 60 and cpu["cpus_per_task"] == 2


def test_local_profile_matches_the_local_cluster():
    profile = cluster.load_profile(ROOT / "cluster" / "profiles.local.toml")
    assert profile["gpu"].executor_parameters()["gpus_per_node"] == 1
    assert profile["cpu"].gpus_per_task == 0


@pytest.mark.parametrize("text, field", [
    ("[partitions.a]\ngpus = 1\n", "partitions.a.gpus: unknown field"),
    ("[partitions.a]\ncpus_per_task = 'two'\n", "partitions.a.cpus_per_task: expected"),
    ("[partitions.a]\nmem_gb = 0\n", "partitions.a.mem_gb: out of range"),
    ("[defaults]\ntime_min = 0\n[partitions.a]\n", "partitions.a.time_min: out of range"),
    ("[defaults]\ntime_min = 5\n", "no [partitions.<name>] table"),
    ("[partitions.a\n", "not valid TOML"),
])
def test_bad_profile_names_file_and_field(tmp_path, text, field):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(cluster.ClusterError, match=f"{path}: .*{field}".replace("[", r"\[")
                       .replace(".<", r"\.<")):
        cluster.load_profile(path)


def test_missing_profile_points_to_the_example(tmp_path):
    with pytest.raises(cluster.ClusterError, match="profiles.example.toml"):
        cluster.load_profile(tmp_path / "absent.toml")


def test_split_gammas_keeps_the_baseline_in_every_group():
    assert cluster.split_gammas([0, 2, 4, 6]) == [[0, 2], [0, 4], [0, 6]]
    assert cluster.split_gammas([0]) == [[0]]
    assert cluster.split_gammas([3, 5]) == [[3], [5]]


def test_plan_is_one_task_per_group_per_partition():
    tasks = cluster.plan_tasks("sweep", {"reps": 5}, {"batches": [[1], [4]]}, ["h100", "cpu"],
                               split_gamma=True)
    # 2 batch groups x 3 γ groups (default gammas 0,2,4,6) x 2 partitions
    assert len(tasks) == 12 and len({t.key for t in tasks}) == 12
    assert {t.partition for t in tasks} == {"h100", "cpu"}
    assert all(t.parameters["reps"] == 5 and t.parameters["gammas"][0] == 0 for t in tasks)
    assert sorted({tuple(t.parameters["gammas"]) for t in tasks}) == [(0, 2), (0, 4), (0, 6)]


def test_plan_without_grid_is_one_task_per_partition():
    tasks = cluster.plan_tasks("host_floor", {}, {}, ["h100", "h200"])
    assert [(t.key, t.parameters) for t in tasks] == [("h100-000", {}), ("h200-000", {})]


@pytest.mark.parametrize("fixed, grid, message", [
    ({"gamma": 2}, {}, "no parameter 'gamma'"),
    ({}, {"run_path_file": ["x"]}, "no parameter 'run_path_file'"),
    ({}, {"reps": 3}, "grid axis 'reps': expected a non-empty list"),
    ({}, {"reps": []}, "grid axis 'reps': expected a non-empty list"),
])
def test_plan_rejects_bad_parameters(fixed, grid, message):
    with pytest.raises(cluster.ClusterError, match=message):
        cluster.plan_tasks("sweep", fixed, grid, ["cpu"])


def test_notebook_parameters_are_read_from_the_parameters_cell():
    params = cluster.notebook_parameters("selftest")
    assert params["value"] == 1.0 and params["steps"] == 1 and "resume" in params
    with pytest.raises(cluster.ClusterError, match="no .*nope.md"):
        cluster.notebook_parameters("nope")


def test_sacct_folded_array_ids_are_expanded():
    assert cluster.jobs._expand("12_[3-5%2]") == ["12_3", "12_4", "12_5"]
    assert cluster.jobs._expand("12_[0,2]") == ["12_0", "12_2"]
    assert cluster.jobs._expand("12_7") == ["12_7"]


def test_create_run_writes_the_run_record_when_asked(tmp_path, monkeypatch):
    record = tmp_path / "task.run"
    monkeypatch.setenv(runs.RUN_RECORD_ENV, str(record))
    run = cluster.run_selftest(2.0, root=tmp_path / "store")
    assert record.read_text() == str(run.path.resolve())


def test_selftest_resumes_its_run_without_redoing_steps(tmp_path):
    run = cluster.run_selftest(3.0, steps=3, root=tmp_path)
    first = run.parts()["step-000"]
    # As if the task had been killed after its first step.
    for late in ("step-001", "step-002"):
        (run.path / "parts" / f"{late}.json").unlink()
    resumed = cluster.run_selftest(3.0, resume=run.path)
    assert resumed.path == run.path
    assert resumed.parts()["step-000"] == first
    table = resumed.table("selftest.csv")
    assert table["step"].tolist() == [0, 1, 2] and (table["result"] == 9.0).all()


def test_selftest_rejects_a_negative_value(tmp_path):
    with pytest.raises(ValueError, match="value must be a number >= 0"):
        cluster.run_selftest(-1, root=tmp_path)


def test_cli_dry_run_prints_the_plan(tmp_path, capsys):
    assert cli.main(["cluster", "submit", "selftest", "--profile",
                     str(ROOT / "cluster" / "profiles.example.toml"), "--partition", "cpu",
                     "-g", "value", "[1, 2]", "--root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    request = json.loads(out[0].removeprefix("# cpu: "))
    assert request["slurm_partition"] == "cpu" and request["cpus_per_task"] == 2
    assert [line.split()[0] for line in out[1:3]] == ["cpu-000", "cpu-001"]
    assert json.loads(out[2].split(None, 2)[2]) == {"root": str(tmp_path), "value": 2}


@pytest.mark.parametrize("argv, message", [
    (["-p", "gamma", "2"], "no parameter 'gamma'"),
    (["--partition", "a100"], "partition 'a100' is not in the profile"),
    (["--profile", "/nonexistent.toml"], "/nonexistent.toml: no such profile file"),
])
def test_cli_user_errors_exit_2_naming_the_argument(argv, message, capsys):
    base = ["cluster", "submit", "sweep", "--dry-run", "--profile",
            str(ROOT / "cluster" / "profiles.example.toml")]
    with pytest.raises(SystemExit) as exc:
        cli.main(base + argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_status_of_a_folder_without_submission_is_a_user_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["cluster", "status", str(tmp_path)])
    assert exc.value.code == 2
    assert f"{tmp_path}/submission.json: no submission here" in capsys.readouterr().err


def test_sacct_states_become_outcomes_with_log_tails(tmp_path, monkeypatch, capsys):
    """Real `sacct -X -n -P -o JobID,State` output (a stand-in sacct prints it) for every kind
    of ending; the Slurm tests produce completed, failed and cancelled for real."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\nprintf '%s\\n' '7_0|COMPLETED' '7_1|TIMEOUT' "
                                   "'7_2|CANCELLED by 0' '7_3|OUT_OF_MEMORY' '7_[4-5%2]|PENDING'\n")
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    folder = tmp_path / "sub"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "7_1_0_log.err").write_text(
        "".join(f"line {i}\n" for i in range(30)) + "slurmstepd: *** DUE TO TIME LIMIT ***\n")
    tasks = [{"key": f"cpu-{i:03d}", "partition": "cpu", "parameters": {},
              "attempts": [{"job_id": f"7_{i}"}]} for i in range(5)]
    tasks.append({"key": "cpu-005", "partition": "cpu", "parameters": {}, "attempts": []})
    (folder / "submission.json").write_text(json.dumps({"notebook": "selftest", "tasks": tasks}))

    found = cluster.statuses(folder)
    assert [s.outcome for s in found] == ["completed", "timed out", "cancelled", "failed",
                                          "pending", "pending"]
    assert [s.state for s in found][-1] == "NOT SUBMITTED"
    assert found[1].log_tail.splitlines()[-1] == "slurmstepd: *** DUE TO TIME LIMIT ***"
    assert len(found[1].log_tail.splitlines()) == cluster.LOG_TAIL_LINES
    assert found[0].log_tail == ""
    # Still pending at the bound: exit 3, and collect returned without waiting longer.
    assert cli.main(["cluster", "collect", str(folder), "--timeout", "0"]) == 3
    assert "6 tasks: 1 completed, 1 timed out, 1 cancelled, 1 failed, 2 pending" \
        in capsys.readouterr().out
