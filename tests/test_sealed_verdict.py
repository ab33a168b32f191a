"""A sealed verdict is the judged sweep's own: another host's newer run of the same SKU leaves
it byte-identical, and "better" needs an interval that excludes zero."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from specbench.derive import sealed

from specbench.report import wording
from specbench.report.chapters.accuracy import sealed_numbers
from specbench.store.runs import DEFAULT_ROOT, open_run

SKU = "cpu-amd-epyc-f25m1-1t-float32"
JUDGED = "sweep-20261201T123820-01b94f"


@pytest.fixture
def store(tmp_path):
    source = DEFAULT_ROOT / SKU
    if not (source / JUDGED).exists():
        pytest.skip(f"no stored sealed sweep {JUDGED}")
    root = tmp_path / "runs"
    shutil.copytree(source, root / SKU, ignore=shutil.ignore_patterns("*.ipynb", "parts"))
    return root


def _another_host(root):
    """A newer run of the same SKU from another host: the judged sweep's cells, twice as slow
    on the speculative arm, under a fingerprint with another boot id."""
    target = root / SKU / "sweep-20261204T090000-bbbbbb"
    shutil.copytree(root / SKU / JUDGED, target)
    for f in target.iterdir():
        f.chmod(0o644)
    cells = pd.read_csv(target / "cells.csv")
    cells.loc[cells["gamma"] > 0, "pot_ms"] *= 2
    cells.to_csv(target / "cells.csv", index=False)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest.update(run_id=target.name, judged_against=None,
                    started_at="2026-12-04T09:00:00+00:00",
                    finished_at="2026-12-04T09:30:00+00:00",
                    host={"boot_id": "ffffeeee-0000", "machine_id": "other", "kernel": "k",
                          "hypervisor": "KVM", "host_id": "ffffeeee0000"})
    manifest["files"]["cells.csv"]["sha256"] = __import__(
        "specbench.store.runs", fromlist=["sha256_file"]).sha256_file(target / "cells.csv")
    (target / "manifest.json").write_text(json.dumps(manifest))
    assert open_run(target).table("cells.csv") is not None   # a valid run


@pytest.mark.data
def test_a_newer_run_from_another_host_leaves_the_verdict_unchanged(store):
    before = sealed_numbers(store).values["hm_sealed_sentence"]
    table_before = sealed.judged(store).to_csv(index=False)
    _another_host(store)
    assert sealed_numbers(store).values["hm_sealed_sentence"].encode() == before.encode()
    assert sealed.judged(store).to_csv(index=False).encode() == table_before.encode()


@pytest.mark.data
def test_stored_latency_predictions_are_scored_as_speedups(store):
    judged = sealed.judged(store)
    # The SKU's later sealed sweeps were sealed as speedups (a `make book` calibration); the
    # judged sweep of 2026-12-01, from a γ=0 calibration, as latencies.
    latency = judged[judged["sealed_as"] == "latency"]
    prediction = open_run(store / SKU / JUDGED).manifest["judged_against"]["run_id"]
    assert set(latency["prediction_run"]) == {prediction}
    expected = latency["t_base_ms"] / latency["model_pot_ms"]
    assert (latency["model_speedup"] - expected).abs().max() < 1e-9
    measured = judged["paired_t_base_ms"] / judged["pot_ms"]
    assert (judged["measured_speedup"] - measured).abs().max() < 1e-9


def test_better_only_where_the_interval_excludes_zero():
    assert wording.paired_verdict(-3.0, -0.5) == "better"
    assert wording.paired_verdict(0.2, 4.0) == "worse"
    assert wording.paired_verdict(-1.0, 0.9) == "tie"
    assert wording.paired_verdict(float("nan"), float("nan")) == "tie"
