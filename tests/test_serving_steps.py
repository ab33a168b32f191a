"""A serving run's step records assigned to its levels (specbench.derive.serving_steps): a
step belongs to the level whose window holds its start, on its own arm's file; steps outside
every window (warmup, between levels) belong to none. The fixture is a committed serving run
copied out of runs/ with two levels' windows and two arms' record files written in the
step-record format."""
import json
import shutil
from pathlib import Path

import pytest

from specbench.derive import serving_steps
from specbench.engine import step_records
from specbench.store.runs import open_run

pytestmark = pytest.mark.data

RUNS = Path(__file__).resolve().parents[1] / "runs"


def _write_records(path: Path, gamma: int, steps: list[tuple[int, int, int, int]]) -> None:
    """(start, end, rows, prefill) per step."""
    header = {"format": step_records.FORMAT, "version": step_records.VERSION, "gamma": gamma,
              "fields": list(step_records.FIELDS)}
    lines = [json.dumps(header)]
    for i, (start, end, rows, prefill) in enumerate(steps):
        lines.append(json.dumps({"step": i, "t_start_ns": start, "t_end_ns": end, "rows": rows,
                                 "decode_tokens": rows, "draft_tokens": 2 * rows * (gamma > 0),
                                 "draft_padded": 0, "prefill_tokens": prefill,
                                 "context_tokens": 100 * rows, "gamma": gamma,
                                 "overhead_ns": 0, "decode_pairs": 101 * rows,
                                 "prefill_pairs": prefill * (prefill + 1) // 2}))
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def run(tmp_path):
    found = sorted(RUNS.glob("*/serving-*/manifest.json"))
    if not found:
        pytest.skip(f"no serving run under {RUNS}")
    copy = tmp_path / found[-1].parent.name
    shutil.copytree(found[-1].parent, copy, ignore=shutil.ignore_patterns("step_records"))
    windows = {("off", 1): (1_000, 2_000), ("off", 2): (3_000, 4_000)}
    for part in (copy / "parts").glob("*.json"):
        record = json.loads(part.read_text())
        key = (record["arm"], int(record["level"]))
        if record.get("mode") == "concurrency" and key in windows:
            record["monotonic_ns"] = list(windows[key])
        else:
            record.pop("monotonic_ns", None)
        part.write_text(json.dumps(record))
    folder = copy / "step_records"
    folder.mkdir()
    # warmup (before the first window), two steps of level 1, a gap, three of level 2
    _write_records(folder / "arm-0-111.jsonl", 0, [
        (500, 900, 1, 300), (1_000, 1_100, 1, 0), (1_200, 1_500, 1, 0),
        (3_000, 3_100, 2, 0), (3_200, 3_400, 2, 0), (3_500, 3_600, 2, 50), (5_000, 5_100, 1, 0)])
    # another arm's file: same clock, never counted as off's
    _write_records(folder / "arm-2-222.jsonl", 2, [(1_050, 1_150, 4, 0)])
    return open_run(copy)


def test_steps_belong_to_the_level_whose_window_holds_them(run):
    steps = serving_steps.level_steps(run)
    assert sorted(steps.groupby("concurrency").size().items()) == [(1, 2), (2, 3)]
    assert set(steps["arm"]) == {"off"}


def test_compositions_are_time_weighted(run):
    table = serving_steps.level_compositions(run).set_index("concurrency")
    assert table.loc[1, "steps"] == 2 and table.loc[1, "running"] == pytest.approx(1.0)
    assert table.loc[2, "prefill_tokens_per_step"] == pytest.approx(50 / 3)
    assert table.loc[1, "step_ms"] == pytest.approx(200 / 1e6)   # median of 100 and 300 ns
    assert table.loc[2, "gap_ms"] == pytest.approx(100 / 1e6)


def test_a_run_without_records_has_no_compositions(run):
    shutil.rmtree(run.path / "step_records")
    assert serving_steps.level_compositions(run).empty


def test_file_prefix_names_the_plan_apart():
    assert serving_steps.arm_file_prefix(6, True) == "arm-6-plan"
    assert serving_steps.arm_file_prefix(0, False) == "arm-0"


# -- the servers' own steps price a load prediction (make plan-under-load's probe) -----------

def _recorded_serving_run():
    for manifest in sorted(RUNS.glob("*/serving-*/manifest.json"), reverse=True):
        if (manifest.parent / "step_records").is_dir():
            return open_run(manifest.parent)
    pytest.skip(f"no serving run with step records under {RUNS}")


def test_a_serving_run_prices_a_step_from_its_servers_own_steps():
    from specbench.measure.load_prediction import server_step_cost
    run = _recorded_serving_run()
    cost = server_step_cost(run)
    assert cost.source == "server" and cost.record()["source"] == "server"
    table = serving_steps.level_compositions(run)
    alone = table[(table["arm"] == "off") & (table["concurrency"] == 1)].iloc[0]
    # one row, no drafts: the fixed term is the step, to the host's noise
    assert cost.model.coef["s0"] * 1e3 == pytest.approx(alone["step_ms"], rel=0.15)
    assert 0 <= cost.gap_s < 0.01


def test_the_gap_between_steps_is_taken_per_kind_of_server():
    # servers without a speculative config left more time between two steps than those with
    # one: a step of speculation off is charged its own servers' gap
    from specbench.measure.load_prediction import server_step_cost
    run = _recorded_serving_run()
    cost = server_step_cost(run)
    assert cost.record()["gap_off_s"] == cost.gap_off_s and 0 <= cost.gap_off_s < 0.01
    step = serving_steps.level_steps(run).head(1)
    plain, speculative = cost.seconds(step, speculative=False), cost.seconds(step)
    assert plain - speculative == pytest.approx(cost.gap_off_s - cost.gap_s)


def test_a_probe_that_is_not_a_recorded_serving_run_is_one_line_naming_it(run, tmp_path):
    from specbench.measure.load_prediction import server_step_cost
    shutil.rmtree(run.path / "step_records")
    with pytest.raises(ValueError, match="step_records: the serving run kept no step records"):
        server_step_cost(run)
    sweep = open_run(next(iter(sorted(RUNS.glob("*/sweep-*/manifest.json")))).parent)
    with pytest.raises(ValueError, match="manifest.json: field kind: 'sweep'"):
        server_step_cost(sweep)


def test_a_probe_from_another_host_session_is_refused():
    from specbench.cli.plan_prompts import _probe_cost
    probe = _recorded_serving_run()
    other = [m.parent for m in sorted(RUNS.glob("*/sweep-*/manifest.json"))
             if open_run(m.parent).manifest.get("host", {}).get("boot_id")
             != probe.manifest.get("host", {}).get("boot_id")]
    with pytest.raises(ValueError, match="field host is host session"):
        _probe_cost(probe.path, open_run(other[-1]))


def test_the_serving_chapter_never_reads_a_step_cost_probe(tmp_path):
    from specbench.report.serving import latest_run
    plain = [m.parent for m in sorted(RUNS.glob("*/serving-*/manifest.json"))
             if not json.loads(m.read_text()).get("plan")]
    if not plain:
        pytest.skip(f"no serving run without a plan under {RUNS}")
    source = plain[-1]
    store = tmp_path / "runs" / source.parent.name
    older, probe = store / source.name, store / f"{source.name}-probe"
    for folder, started, flag in ((older, "2026-01-01T00:00:00+00:00", False),
                                  (probe, "2026-01-02T00:00:00+00:00", True)):
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("step_records"))
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest.update(started_at=started, step_cost_probe=flag)
        (folder / "manifest.json").write_text(json.dumps(manifest))
    assert latest_run(tmp_path / "runs").path == older
