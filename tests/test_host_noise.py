"""A noisy host is read from the run's own repetitions (specbench.derive.noise.repetition_cv_pct),
recorded in the manifest, warned about, and named in the accuracy chapter."""
import itertools
import warnings
from pathlib import Path

import pandas as pd
import pytest

import standin_sweep
from specbench.measure import sweep
from specbench.derive.evaluation import host_noise_summary as _host_noise
from specbench.derive.noise import NOISY_HOST_CV_PCT, repetition_cv_pct
from specbench.store.runs import load_runs

FIXTURES = Path(__file__).parent / "fixtures"


def _requests(name: str) -> pd.DataFrame:
    (run,) = load_runs(FIXTURES / name, kind="sweep")
    return run.table("requests.csv")


def test_the_quiet_and_the_noisy_make_book_runs_fall_on_either_side_of_the_threshold():
    # The same sweep: a Zen 4 on 1 December, the same kind on 2 December, a Zen 5 that day.
    quiet = repetition_cv_pct(_requests("store_make_book_zen4"))
    noisy = [repetition_cv_pct(_requests(f"store_make_book_{s}"))
             for s in ("zen4_noisy", "zen5_noisy")]
    assert quiet < 2 < NOISY_HOST_CV_PCT < 7 < min(noisy)


def _rows(workload, gamma, arm, values):
    return [{"workload": workload, "gamma": gamma, "batch": 1, "temperature": 0.0, "arm": arm,
             "rep": i, "pot_ms": v} for i, v in enumerate(values)]


def test_a_shared_base_counts_once_and_one_repetition_says_nothing():
    shared = [10.0, 11.0, 12.0]   # the same base calls, copied under γ=2, 4 and 6
    reps = pd.DataFrame(_rows("w", 2, "base", shared) + _rows("w", 4, "base", shared)
                        + _rows("w", 6, "base", shared) + _rows("w", 2, "spec", [5.0, 5.0, 5.0])
                        + _rows("w", 4, "spec", [4.0, 4.0, 4.0]))
    # Three groups (base once, two spec), CVs 9.1, 0, 0: the median is 0. Counting the base
    # three times would make it 9.1.
    assert repetition_cv_pct(reps) == 0
    assert pd.isna(repetition_cv_pct(pd.DataFrame(_rows("w", 2, "spec", [5.0]))))


def test_unlike_the_range_the_cv_does_not_grow_with_the_repetitions():
    three = pd.DataFrame(_rows("w", 2, "spec", [9.0, 10.0, 11.0]))
    six = pd.DataFrame(_rows("w", 2, "spec", [9.0, 10.0, 11.0] * 2))
    assert repetition_cv_pct(six) == pytest.approx(repetition_cv_pct(three), rel=0.15)


class JitteryEngine(standin_sweep.StandInEngine):
    """The stand-in whose calls take 1.0, 1.4, 0.7 … times as long, in turn."""
    factors = itertools.cycle([1.0, 1.4, 0.7])

    def generate(self, prompts, max_tokens, sampling=None, read_counters=True):
        gen = super().generate(prompts, max_tokens, sampling, read_counters)
        f = next(self.factors)
        gen.decode_s = [d * f for d in gen.decode_s]
        return gen


def _sweep(tmp_path, monkeypatch, engine):
    monkeypatch.setattr(sweep, "Engine", engine)
    monkeypatch.setattr(sweep, "contract", standin_sweep.stand_in_contract)
    model = standin_sweep.model_folder(tmp_path / "model")
    cfg = sweep.SweepConfig(model=str(model), gammas=(0, 2), batches=(1,), workloads=("repeat",),
                            prompts=1, reps=3, warmup=0, max_tokens=8,
                            root=str(tmp_path / "runs"))
    return sweep.run_sweep(cfg, progress=False)


def test_a_noisy_sweep_says_so_in_its_manifest_and_warns(tmp_path, monkeypatch):
    with pytest.warns(UserWarning, match="this host was noisy"):
        run = _sweep(tmp_path, monkeypatch, JitteryEngine)
    assert run.manifest["load"]["noisy_host"] is True
    assert run.manifest["load"]["repetition_cv_pct"] > NOISY_HOST_CV_PCT


def test_a_quiet_sweep_does_not_warn(tmp_path, monkeypatch):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*host was noisy")
        run = _sweep(tmp_path, monkeypatch, standin_sweep.StandInEngine)
    assert run.manifest["load"]["noisy_host"] is False


def _cells(sku, cv, errors):
    return [{"sku": sku, "sku_label": sku, "gamma": 2, "batch": b, "temperature": 0.0,
             "workload": f"w{i}", "host_cv_pct": cv, "noisy_host": cv > NOISY_HOST_CV_PCT,
             "err_model_pct": e, "err_eq1_pct": 2 * e}
            for i, (b, e) in enumerate(errors)]


def test_the_chapter_names_a_noisy_sku_and_judges_the_goal_on_quiet_hosts():
    cells = pd.DataFrame(_cells("quiet A", 1.5, [(1, 1.0), (4, -2.0)])
                         + _cells("noisy B", 9.3, [(1, 20.0), (4, -10.0)]))
    n = _host_noise(cells)
    assert n["noisy_skus"] == 1 and n["noisy_cells"] == 2
    assert n["noisy_mape"] == pytest.approx(15.0) and n["quiet_host_mape"] == pytest.approx(1.5)
    assert "noisy B (9.3 percent)" in n["noisy_sentence"]
    assert "goal of 3 percent is" in n["noisy_sentence"]


def test_with_every_host_quiet_the_chapter_says_so():
    n = _host_noise(pd.DataFrame(_cells("quiet A", 1.5, [(1, 1.0)])
                                 + _cells("quiet C", 2.5, [(1, 2.0)])))
    assert n["noisy_skus"] == 0
    assert n["noisy_sentence"].startswith("Every SKU was measured on a quiet host")
    assert "1.5–2.5 percent" in n["noisy_sentence"]
