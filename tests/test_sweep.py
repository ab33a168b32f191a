"""The sweep harness: parameter checks, tables, failures. No engine starts here: the engine
is replaced by a stand-in that returns fixed numbers, since what is tested is the harness's
bookkeeping, not a measurement (tests/test_engine.py runs the real engine)."""
import subprocess
import sys

import pytest

from specbench import sweep
from specbench.counters import SpecCounters
from specbench.engine import Generation
from specbench.runs import load_runs


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(
        '{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}')
    (folder / "tokenizer.json").write_text("{}")
    return folder


@pytest.mark.parametrize("change, message", [
    ({"gammas": (0, -1)}, "gamma must be a whole number >= 0"),
    ({"gammas": (2, 4)}, "must include 0"),
    ({"batches": (0,)}, "batch must be a whole number >= 1"),
    ({"workloads": ("repeat", "poetry")}, "unknown workload 'poetry'"),
    ({"max_tokens": 1}, "max_tokens"),
    ({"model": "/no/such/model"}, "does not exist"),
])
def test_bad_parameters_fail_before_any_engine(change, message, model_dir):
    cfg = sweep.SweepConfig(**{"model": str(model_dir), **change})
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        cfg.validate()


def test_cli_reports_bad_parameters_cleanly():
    out = subprocess.run([sys.executable, "-m", "specbench.cli", "sweep", "--batches", "0"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "batch must be a whole number >= 1" in out.stderr
    assert "Traceback" not in out.stderr


class StandInEngine:
    """Fixed outputs: γ=3 fails to start, the 'open' cells of γ=2 fail mid-cell."""
    startup_s = 0.0

    def __init__(self, settings):
        if settings.gamma == 3:
            raise RuntimeError("engine would not start")
        self.settings = settings
        self.total = SpecCounters(0, 0, 0, ())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def encode_chat(self, messages):
        return [1, 2, 3]

    def generate(self, prompts, max_tokens, sampling=None, read_counters=True):
        g = self.settings.gamma
        if g == 2 and sampling and sampling.get("repetition_penalty", 1) > 1:
            raise RuntimeError("cell failed")
        delta = SpecCounters(10, 10 * g, 8 * g, (8,) * g) if g else None
        if delta:
            self.total = SpecCounters(self.total.drafts + 10, self.total.draft_tokens + 10 * g,
                                      self.total.accepted_tokens + 8 * g, ())
        n = len(prompts)
        return Generation(wall_s=1.0, ttft_s=[0.1] * n, decode_s=[0.9 / (1 + g)] * n,
                          output_tokens=[max_tokens] * n, token_ids=[[5] * max_tokens] * n,
                          texts=["x"] * n, counters=delta, counters_after=self.total if g else None)


def test_failing_cells_are_recorded_and_the_sweep_goes_on(tmp_path, model_dir, monkeypatch):
    monkeypatch.setattr(sweep, "Engine", StandInEngine)
    monkeypatch.setattr(sweep, "contract", lambda kind, model, dtype: {
        "kind": kind, "sku": "cpu-test-1t-bfloat16", "code": {"revision": "x"},
        "model": {"name": "m", "path": model, "weights_sha256": "a", "tokenizer_sha256": "b"},
        "engine": {"name": "stand-in", "version": "0", "settings": {}}, "hardware": {},
        "dtype": dtype})
    cfg = sweep.SweepConfig(model=str(model_dir), gammas=(0, 2, 3), batches=(1, 4), reps=2,
                            warmup=1, max_tokens=10, root=str(tmp_path / "runs"))
    run = sweep.run_sweep(cfg, progress=False)
    assert run.complete
    cells = run.table("cells.csv")
    assert len(cells) == 12
    failed = cells[cells["status"] == "failed"]
    assert set(failed["gamma"]) == {2, 3} and len(failed) == 6
    assert failed["error"].str.contains("would not start").sum() == 4
    ok = cells[(cells["status"] == "ok") & (cells["gamma"] == 2)]
    assert (ok["alpha"] == 0.8).all() and (ok["speedup"] > 1).all()
    assert ok["counters_in_line"].all()
    assert len(run.table("reps.csv")) == 6 * 2
    assert load_runs(tmp_path / "runs") and run.path.parent.name == "cpu-test-1t-bfloat16"


def test_summarize_compares_outputs_and_derives_rates():
    def part(g, outputs, drafts, accepted):
        reps = [{"rep": 0, "pot_ms": 10.0 / (1 + g), "ttft_ms": 5.0, "decode_s": 1.0,
                 "wall_s": 1.0, "output_tokens": 11, "loadavg_1m": 0.5, "foreign_cores": 0.0,
                 "drafts": drafts, "draft_tokens": drafts * g, "accepted_tokens": accepted,
                 "accepted_per_pos": "", "draft_tokens_cumulative": drafts * g}]
        return {"status": "ok", "workload": "repeat", "gamma": g, "batch": 1, "reps": reps,
                "outputs": outputs, "prompt_tokens": [100]}
    reps, cells = sweep.summarize({"a": part(0, [[1, 2, 3]], 0, 0),
                                   "b": part(2, [[1, 2, 3]], 4, 6),
                                   "c": part(4, [[1, 9, 3]], 3, 12)})
    cells = cells.set_index("gamma")
    assert cells.loc[2, "outputs_equal"] and not cells.loc[4, "outputs_equal"]
    assert cells.loc[4, "first_mismatch"] == 1
    assert cells.loc[2, "alpha"] == 0.75 and cells.loc[2, "mean_acceptance_length"] == 2.5
    # 10 decoded tokens, 6 of them accepted drafts: 4 steps of 2.5 tokens
    assert cells.loc[2, "emitted_per_step"] == 2.5
    # 3 drafting steps accepted all 12 drafts, but max_tokens kept only 10 tokens: still 3 steps
    assert cells.loc[4, "emitted_per_step"] == pytest.approx(10 / 3)
    assert cells.loc[2, "speedup"] == pytest.approx(3.0)
    assert not cells["loaded"].any()
