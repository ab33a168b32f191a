"""Sealed predictions: `specbench predict` from a calibration, `sweep --judged-against`, and the
book's check of the sealed table (real stored runs copied into a scratch store)."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from specbench.cli.main import main
from specbench.derive import sealed, transfer
from specbench.derive.analysis import sweep_cells
from specbench.store.runs import RunSchemaError, create_run, load_runs, open_run
from specbench.store.sealing import check_sku, sealed_record

HELD_OUT = "cpu-amd-epyc-f26m2-1t-bfloat16"
RUN_FIELDS = ("schema_version", "run_id", "status", "started_at", "finished_at", "files")


def _copy(run, root):
    target = root / run.sku / run.run_id
    shutil.copytree(run.path, target, ignore=shutil.ignore_patterns("*.ipynb", "parts"))
    return target


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Every stored sweep and microbenchmark except the held-out SKU's sweeps, and a
    calibration run made of that SKU's γ=0 cells (its latest sweep, γ=0 rows only)."""
    root = tmp_path_factory.mktemp("store")
    sweeps = [r for r in load_runs(kind="sweep") if r.sku == HELD_OUT]
    assert sweeps, f"the committed store has no sweep of {HELD_OUT}"
    for run in (load_runs(kind="sweep") + load_runs(kind="microbench")
                + load_runs(kind="prediction")):
        if not (run.sku == HELD_OUT and run.manifest["kind"] == "sweep"):
            _copy(run, root)
    greedy = [r for r in sweeps if (r.table("cells.csv")["temperature"] == 0).any()]
    source = greedy[-1]
    manifest = {k: v for k, v in source.manifest.items() if k not in RUN_FIELDS}
    manifest["grid"] = {**manifest["grid"], "gammas": [0]}
    calibration = create_run(root, manifest)
    cells = source.table("cells.csv")
    calibration.write_table("cells.csv", cells[cells["gamma"] == 0])
    calibration.finish()
    return root, calibration, source


@pytest.mark.data
def test_predict_seals_a_table_with_its_hash(store, capsys):
    root, calibration, _ = store
    assert main(["predict", "--calibration", str(calibration.path), "--root", str(root)]) == 0
    path = capsys.readouterr().out.splitlines()[0]
    run = open_run(path)
    assert run.manifest["kind"] == "prediction" and run.sku == HELD_OUT
    assert run.manifest["calibration"]["sweep"]["run_id"] == calibration.run_id
    table = run.table(sealed.PREDICTIONS)   # checks the hash the manifest records
    assert len(table) and (table["gamma"] > 0).all()
    assert (table["model_pot_ms"] > 0).all() and (table["ratio_pot_ms"] > 0).all()
    assert HELD_OUT not in {r["sku"] for r in run.manifest["from_runs"]}
    record = sealed_record(path)
    assert record["predictions_sha256"] == run.manifest["files"]["predictions.csv"]["sha256"]


@pytest.mark.data
def test_book_checks_the_sealed_table(store, capsys, tmp_path):
    """A sweep judged against a prediction: the book joins the two; a changed table fails."""
    shared, calibration, source = store
    root = tmp_path / "s"
    shutil.copytree(shared, root)
    cal = root / calibration.sku / calibration.run_id
    main(["predict", "--calibration", str(cal), "--root", str(root)])
    prediction = capsys.readouterr().out.splitlines()[0]
    record = sealed_record(prediction)
    sweep = _copy(source, root)
    manifest = json.loads((sweep / "manifest.json").read_text())
    manifest["judged_against"] = record
    manifest["started_at"] = "2099-01-01T00:00:00+00:00"   # measured after the sealing
    (sweep / "manifest.json").chmod(0o644)
    (sweep / "manifest.json").write_text(json.dumps(manifest))
    cells = sweep_cells(root)
    judged = sealed.judged(root, cells)
    assert HELD_OUT in set(judged["sku"])   # beside any SKU the store measured this way
    assert judged["model_err_pct"].notna().all()
    predictions = open_run(prediction).path / sealed.PREDICTIONS
    predictions.chmod(0o644)
    predictions.write_text(predictions.read_text().replace(",", ",0", 1))
    with pytest.raises(RunSchemaError, match="predictions.csv"):
        sealed.judged(root, cells)


@pytest.mark.data
def test_predict_refuses_a_sku_already_measured(store, capsys, tmp_path):
    root, calibration, source = store
    scratch = tmp_path / "s"
    shutil.copytree(root, scratch)
    _copy(source, scratch)
    cal = scratch / calibration.sku / calibration.run_id
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--calibration", str(cal), "--root", str(scratch)])
    assert stop.value.code == 2
    assert "not sealed" in capsys.readouterr().err


@pytest.mark.data
def test_predict_refuses_a_calibration_with_speculative_cells(store, capsys):
    root, _, source = store
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--calibration", str(source.path), "--root", str(root)])
    assert stop.value.code == 2
    assert "grid/gammas" in capsys.readouterr().err


@pytest.mark.data
def test_sweep_judged_against_refuses_anything_but_a_closed_prediction(store, capsys):
    _, calibration, _ = store
    with pytest.raises(SystemExit) as stop:
        main(["sweep", "--judged-against", str(calibration.path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "field kind" in err and "manifest.json" in err


def test_a_prediction_for_another_sku_is_refused():
    with pytest.raises(ValueError, match="engine threads"):
        check_sku({"sku": "cpu-x-2t-bfloat16", "run_id": "prediction-1"}, "cpu-x-1t-bfloat16")


@pytest.mark.data
def test_cost_structure_names_each_sku_and_batch(analysed_store):
    cells = analysed_store
    cost = transfer.cost_structure(cells)
    greedy = cells[cells["temperature"] == 0]
    assert len(cost) == greedy.groupby(["sku", "batch"]).ngroups
    assert cost["cost_differs"].isin([True, False]).all()
    assert (cost["h_ratio"] >= 0).all()


@pytest.mark.data
def test_transfer_predictions_match_the_leave_one_out_rows(analysed_store):
    """The sealed path and the evaluation share one prediction: fed the same inputs, equal."""
    loso = transfer.leave_one_sku_out(analysed_store)
    assert not loso.empty, "the committed store has one SKU only: nothing to leave out"
    row = loso.iloc[0]
    cells = analysed_store
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)]
    target = pd.DataFrame([{k: row[k] for k in (*transfer.KEY, "t_base_ms", "d")}])
    lenders = spec[(spec["sku"] != row["sku"]) & ~spec["sku"].str.endswith("-hf")]
    again = transfer.transfer_predictions(target, lenders)
    assert again["model_pot_ms"].iloc[0] == pytest.approx(row["model_pot_ms"])
    assert again["ratio_pot_ms"].iloc[0] == pytest.approx(row["ratio_pot_ms"])


def test_drift_scaled_rescales_by_the_sweeps_own_base():
    """A γ=0 arm that ran 20 % slower in the sweep than in the calibration: the predictions,
    scaled by it, are judged as if the calibration had held (hand-computed)."""
    judged = pd.DataFrame({"t_base_ms": [100.0, 50.0], "sweep_t_base_ms": [120.0, None],
                           "model_pot_ms": [40.0, 20.0], "ratio_pot_ms": [50.0, 25.0],
                           "pot_ms": [48.0, 20.0]})
    scaled = sealed.drift_scaled(judged)
    assert len(scaled) == 1                                   # no sweep base: left out
    assert scaled["model_scaled_err_pct"].iloc[0] == pytest.approx(0.0)    # 40·1.2 = 48
    assert scaled["ratio_scaled_err_pct"].iloc[0] == pytest.approx(25.0)   # 60 vs 48


MAKE_BOOK = ("cpu-amd-epyc-f23m1-1t-float32", "sweep-20261203T080622-bd8c15")


@pytest.fixture(scope="module")
def make_book_store(tmp_path_factory):
    """Every stored sweep and microbenchmark: a host whose `make book` sweep is the calibration
    (Zen 1, float32) and the other hosts that lend acceptance."""
    root = tmp_path_factory.mktemp("makebook")
    for run in load_runs(kind="sweep") + load_runs(kind="microbench"):
        _copy(run, root)
    calibration = root / MAKE_BOOK[0] / MAKE_BOOK[1]
    assert calibration.exists(), "the committed store has no make book sweep of the Zen 1"
    return root, calibration


@pytest.mark.data
def test_predict_seals_speedups_from_a_make_book_sweep(make_book_store, capsys):
    root, calibration = make_book_store
    assert main(["predict", "--calibration", str(calibration), "--root", str(root)]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    run = open_run(out[0])
    table = run.table(sealed.PREDICTIONS)
    # A calibration from before the step records: batch 1 and 4 as before, no step-time model.
    assert table["steps_speedup"].isna().all()
    assert "batch > 1 from the step-time model needs a new `make book`" in captured.err
    assert set(table["workload"]) == set(sealed.SPEC_BENCH)
    assert set(table["gamma"]) == {2, 6} and set(table["batch"]) == {1, 4}
    assert len(table) == 24 and "24 speedups" in out[1]
    assert (table["model_speedup"] > 0).all() and (table["ratio_speedup"] > 0).all()
    # Speedup = D / (1 + s·c) per prompt, harmonic mean over the prompts.
    one = table[table["batch"] == 1]
    assert (one["lent"].str.startswith("per prompt")).all()
    assert (one["questions"].str.split().str.len() == 2).all()
    assert (table["c"] >= table["d"]).all()        # verify compute is part of the step cost
    assert run.manifest["calibration"]["microbench"]["run_id"].startswith("microbench-20261203")
    sessions = {r["sku"] for r in run.manifest["from_runs"]}
    assert MAKE_BOOK[0] not in sessions


@pytest.mark.data
def test_predict_refuses_the_calibration_workloads(make_book_store, capsys):
    root, calibration = make_book_store
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--calibration", str(calibration), "--root", str(root),
              "--workloads", "edit,specbench:qa"])
    assert stop.value.code == 2
    assert "calibration" in capsys.readouterr().err


@pytest.mark.data
def test_predict_refuses_a_workload_this_host_session_measured(make_book_store, capsys,
                                                               tmp_path):
    """A Spec-Bench sweep of the same host session (a copy of another SKU's, relabelled) makes
    a prediction for that category no longer sealed; another category still is."""
    root, calibration = make_book_store
    scratch = tmp_path / "s"
    shutil.copytree(root, scratch)
    source = open_run(scratch / "cpu-amd-epyc-f25m1-1t-float32" / "sweep-20261201T123820-01b94f")
    target = scratch / MAKE_BOOK[0] / "sweep-20261203T090000-aaaaaa"
    shutil.copytree(source.path, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest.update(sku=MAKE_BOOK[0], run_id=target.name, judged_against=None,
                    started_at="2026-12-03T09:00:00+00:00",
                    finished_at="2026-12-03T09:30:00+00:00")
    (target / "manifest.json").chmod(0o644)
    (target / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--calibration", str(scratch / MAKE_BOOK[0] / MAKE_BOOK[1]),
              "--root", str(scratch), "--workloads", "specbench:qa"])
    assert stop.value.code == 2
    assert "not sealed" in capsys.readouterr().err
