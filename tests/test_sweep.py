"""The sweep harness: parameter checks, tables, failures. No engine starts here: the engine
is replaced by a stand-in that returns fixed numbers, since what is tested is the harness's
bookkeeping, not a measurement (tests/test_engine.py runs the real engine)."""
import subprocess
import sys

import pytest

import standin_sweep
from specbench.derive import sweep_tables
from specbench.measure import sweep
from specbench.store.runs import load_runs


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
    out = subprocess.run([sys.executable, "-m", "specbench.cli.main", "sweep", "--batches", "0"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "batch must be a whole number >= 1" in out.stderr
    assert "Traceback" not in out.stderr


class FailingEngine(standin_sweep.StandInEngine):
    """The shared stand-in, except γ=3 fails to start and the 'open' cells of γ=2 fail
    mid-cell (the only workload decoded with a repetition penalty)."""

    def __init__(self, settings):
        if settings.gamma == 3:
            raise RuntimeError("engine would not start")
        super().__init__(settings)

    def generate(self, prompts, max_tokens, sampling=None, read_counters=True):
        first = sampling[0] if isinstance(sampling, list) else sampling
        if self.settings.gamma == 2 and first and first.get("repetition_penalty", 1) > 1:
            raise RuntimeError("cell failed")
        return super().generate(prompts, max_tokens, sampling, read_counters)


def test_failing_cells_are_recorded_and_the_sweep_goes_on(tmp_path, model_dir, monkeypatch):
    monkeypatch.setattr(sweep, "Engine", FailingEngine)
    monkeypatch.setattr(sweep, "contract", standin_sweep.stand_in_contract)
    cfg = sweep.SweepConfig(model=str(model_dir), gammas=(0, 2, 3), batches=(1, 4), reps=2,
                            warmup=1, max_tokens=10, root=str(tmp_path / "runs"))
    run = sweep.run_sweep(cfg, progress=False)
    assert run.complete
    cells = run.table("cells.csv")
    # Paired: γ>0 cells are the units of work (8), and the γ=0 rows come from the base calls
    # of the cells that ran (repeat at batch 1 and 4).
    assert len(cells) == 10
    failed = cells[cells["status"] == "failed"]
    assert set(failed["gamma"]) == {2, 3} and len(failed) == 6
    assert failed["error"].str.contains("would not start").sum() == 4
    ok = cells[(cells["status"] == "ok") & (cells["gamma"] == 2)]
    assert (ok["alpha"] == 0.8).all() and (ok["speedup"] > 1).all()
    assert ok["counters_in_line"].all() and ok["paired"].all()
    zero = cells[cells["gamma"] == 0]
    assert set(zero["workload"]) == {"repeat"} and (zero["speedup"] == 1).all()
    # two ok cells × two arms (base, spec) × two repetitions
    assert len(run.table("reps.csv")) == 2 * 2 * 2
    requests = run.table("requests.csv")
    assert set(requests["arm"]) == {"base", "spec"}
    assert load_runs(tmp_path / "runs") and run.path.parent.name == "cpu-test-1t-bfloat16"


def _record(g, outputs, drafts, accepted, base_outputs=((1, 2, 3),), engine_steps=None):
    """A paired batch-1 cell of one request, one repetition, in the part format."""
    def call(arm, outs, counters, steps):
        return {"arm": arm, "rep": 0, "call": 0, "ids": ["repeat/0"], "wall_s": 1.0,
                "pot_ms": [10.0 / (1 + g) if arm == "spec" else 10.0], "ttft_ms": [5.0],
                "decode_s": [1.0], "output_tokens": [11], "iterations": steps,
                "loadavg_1m": 0.5, "foreign_cores": 0.0, "counters": counters,
                "draft_tokens_cumulative": drafts * g if counters else None,
                "outputs": [list(o) for o in outs],
                "output_sha256": [sweep._hash(list(o)) for o in outs]}
    counters = {"drafts": drafts, "draft_tokens": drafts * g, "accepted_tokens": accepted,
                "accepted_per_pos": ""}
    return {"status": "ok", "workload": "repeat", "gamma": g, "batch": 1, "temperature": 0.0,
            "store_outputs": True,
            "requests": [{"id": "repeat/0", "prompt_tokens": 100, "max_tokens": 11}],
            "calls": [call("base", base_outputs, None, None),
                      call("spec", outputs, counters, engine_steps)]}


def test_summarize_compares_outputs_and_derives_rates():
    reps, cells = sweep_tables.summarize({"b": _record(2, [[1, 2, 3]], 4, 6),
                                   "c": _record(4, [[1, 9, 3]], 3, 12)})
    cells = cells.set_index("gamma")
    assert cells.loc[2, "outputs_equal"] and not cells.loc[4, "outputs_equal"]
    assert cells.loc[4, "first_mismatch"] == 1
    assert cells.loc[2, "alpha"] == 0.75 and cells.loc[2, "mean_acceptance_length"] == 2.5
    # 10 decoded tokens, 6 of them accepted drafts: 4 steps of 2.5 tokens
    assert cells.loc[2, "emitted_per_step"] == 2.5
    assert cells.loc[2, "drafting_share"] == 1.0
    # 3 drafting steps accepted all 12 drafts, but max_tokens kept only 10 tokens: still 3 steps
    assert cells.loc[4, "emitted_per_step"] == pytest.approx(10 / 3)
    assert cells.loc[2, "speedup"] == pytest.approx(3.0)
    # the γ=0 row is the paired base
    assert cells.loc[0, "pot_ms"] == 10.0 and cells.loc[0, "speedup"] == 1.0
    assert not cells["loaded"].any()


def test_an_output_cut_short_mismatches_where_it_ends():
    """One output a prefix of the other: unequal, first mismatch at the shorter one's end
    (before, no position; beside another request's mismatch, min() of it and None raised)."""
    _, cells = sweep_tables.summarize({"b": _record(2, [[1, 2]], 4, 6)})
    cell = cells.set_index("gamma").loc[2]
    assert not cell["outputs_equal"] and cell["first_mismatch"] == 2


def test_no_draft_cell_has_alpha_zero_and_one_token_per_step():
    _, cells = sweep_tables.summarize({"b": _record(4, [[1, 2, 3]], 0, 0)})
    cell = cells.set_index("gamma").loc[4]
    assert cell["alpha"] == 0 and cell["draft_tokens"] == 0
    assert cell["emitted_per_step"] == 1.0 and cell["drafting_share"] == 0.0


@pytest.mark.parametrize("decoded, drafts, accepted, gamma, engine_steps, expected", [
    (10, 4, 6, 2, None, (4, False)),     # no cut: steps = decoded − accepted
    (10, 3, 12, 4, None, (3, False)),    # cut: every step drafted, so at least `drafts`
    (10, 3, 9, 4, 5, (4, True)),         # vLLM's step counter: 5 engine steps, one prefill
    (10, 3, 9, 4, 99, (3, False)),       # a step count outside the counters' bounds is ignored
])
def test_decode_steps_handles_the_cut_off(decoded, drafts, accepted, gamma, engine_steps,
                                          expected):
    assert sweep_tables.decode_steps(decoded, drafts, accepted, gamma, engine_steps) == expected


def test_cell_keys_name_temperature_and_sources():
    assert sweep.cell_key(4, "specbench:qa", 1) == "g4-specbench-qa-b1"
    assert sweep.cell_key(4, "repeat", 1, 0.5) == "g4-repeat-b1-t0.5"


def test_the_transformers_engine_runs_batch_one_only(model_dir):
    cfg = sweep.SweepConfig(model=str(model_dir), engine="transformers", batches=(1, 4))
    with pytest.raises(ValueError, match="batch 1 only"):
        cfg.validate()
    with pytest.raises(ValueError, match="engine must be one of"):
        sweep.SweepConfig(model=str(model_dir), engine="llama.cpp").validate()
    with pytest.raises(ValueError, match="vLLM settings"):
        sweep.SweepConfig(model=str(model_dir), engine="transformers", batches=(1,),
                          engine_patch="cpu-expand-fix").validate()


def test_a_transformers_sweep_resumes_as_one(model_dir):
    manifest = {"grid": {"gammas": [0, 2], "batches": [1], "workloads": ["repeat"],
                         "max_tokens": 8, "warmup": 0, "reps": 1},
                "dtype": "bfloat16", "load": {"max_load": 2.0}, "model": {"path": str(model_dir)},
                "engine": {"name": "transformers", "settings": {}}}
    assert sweep.SweepConfig.from_manifest(manifest).engine == "transformers"


class OrderedEngine(standin_sweep.StandInEngine):
    """The shared stand-in, logging which γ each timed call ran on; γ=4 fails on its third
    call when ``fail_gamma4`` is set."""
    log: list = []
    fail_gamma4 = False

    def generate(self, prompts, max_tokens, sampling=None, read_counters=True):
        self.log.append(self.settings.gamma)
        if self.fail_gamma4 and self.settings.gamma == 4 and self.log.count(4) == 3:
            raise RuntimeError("γ=4 call failed")
        return super().generate(prompts, max_tokens, sampling, read_counters)


def _shared_sweep(tmp_path, model_dir, monkeypatch, **change):
    OrderedEngine.log = []
    monkeypatch.setattr(sweep, "Engine", OrderedEngine)
    monkeypatch.setattr(sweep, "contract", standin_sweep.stand_in_contract)
    cfg = sweep.SweepConfig(**{"model": str(model_dir), "gammas": (0, 2, 4), "batches": (1,),
                               "workloads": ("repeat",), "prompts": 2, "reps": 3, "warmup": 0,
                               "max_tokens": 8, "root": str(tmp_path / "runs"), **change})
    return sweep.run_sweep(cfg, progress=False)


def test_a_shared_base_times_the_base_once_per_unit_round_robin(tmp_path, model_dir,
                                                                 monkeypatch):
    run = _shared_sweep(tmp_path, model_dir, monkeypatch)
    (key, part), = run.parts().items()
    assert key == "g2+4-repeat-b1" and part["gammas"] == [2, 4]
    # Two prompt groups × three repetitions, each round on base, γ=2 and γ=4 in the next
    # balanced order, base first: no arm always follows the same other.
    assert OrderedEngine.log == [0, 2, 4, 2, 4, 0, 4, 0, 2, 4, 2, 0, 0, 4, 2, 2, 0, 4]
    assert sum(c["arm"] == "base" for c in part["calls"]) == 6
    assert run.manifest["grid"]["shared_base"] is True
    cells = run.table("cells.csv").set_index("gamma")
    # The γ=0 row counts the shared base's repetitions once, and every cell is judged
    # against that same base.
    assert cells.loc[0, "n_reps"] == 3
    assert cells.loc[2, "base_pot_ms"] == cells.loc[4, "base_pot_ms"] == cells.loc[0, "pot_ms"]
    requests = run.table("requests.csv")
    assert requests[requests["arm"] == "base"]["base_shared"].all()
    assert len(run.table("reps.csv")) == 2 * 2 * 3      # γ>0 cells × arms × reps


def test_a_prefix_cached_sweep_warms_every_prompt_group_and_says_so(tmp_path, model_dir,
                                                                     monkeypatch):
    """With the prefix cache on, each arm's warmup sends every group the timed calls will (so
    none of them pays a prefill); the setting is in the manifest and a resume keeps it."""
    run = _shared_sweep(tmp_path, model_dir, monkeypatch, enable_prefix_caching=True, warmup=1)
    assert OrderedEngine.log[:6] == [0, 0, 2, 2, 4, 4]     # two groups, per arm, untimed
    assert len(OrderedEngine.log) == 6 + 18
    assert run.manifest["engine"]["settings"]["enable_prefix_caching"] is True
    assert "not a prefill time" in run.manifest["latency_definitions"]["ttft_ms"]
    assert sweep.SweepConfig.from_manifest(run.manifest).enable_prefix_caching is True
    with pytest.raises(ValueError, match="needs warmup >= 1"):
        sweep.SweepConfig(model=str(model_dir), enable_prefix_caching=True, warmup=0).validate()


class WarmupFailingEngine(OrderedEngine):
    def generate(self, prompts, max_tokens, sampling=None, read_counters=True):
        if self.settings.gamma == 4:
            raise RuntimeError("γ=4 call failed")
        return super().generate(prompts, max_tokens, sampling, read_counters)


def test_an_arm_failing_its_cached_warmup_leaves_and_the_others_go_on(tmp_path, model_dir,
                                                                      monkeypatch):
    monkeypatch.setattr(sweep, "Engine", WarmupFailingEngine)
    monkeypatch.setattr(sweep, "contract", standin_sweep.stand_in_contract)
    cfg = sweep.SweepConfig(model=str(model_dir), gammas=(0, 2, 4), batches=(1,),
                            workloads=("repeat",), prompts=2, reps=2, warmup=1, max_tokens=8,
                            root=str(tmp_path / "runs"), enable_prefix_caching=True)
    cells = sweep.run_sweep(cfg, progress=False).table("cells.csv").set_index("gamma")
    assert cells.loc[4, "status"] == "failed" and "γ=4 call failed" in cells.loc[4, "error"]
    assert cells.loc[2, "status"] == "ok" and cells.loc[0, "status"] == "ok"


def test_without_the_prefix_cache_the_warmup_sends_the_first_group_only(tmp_path, model_dir,
                                                                        monkeypatch):
    run = _shared_sweep(tmp_path, model_dir, monkeypatch, warmup=1)
    assert OrderedEngine.log[:3] == [0, 2, 4] and len(OrderedEngine.log) == 3 + 18
    assert run.manifest["engine"]["settings"]["enable_prefix_caching"] is False
    assert sweep.SweepConfig.from_manifest(run.manifest).enable_prefix_caching is False


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_balanced_orders_put_every_arm_after_every_other_equally_often(n):
    orders = sweep.balanced_orders(n)
    assert orders[0][0] == 0                                     # the base first
    assert all(sorted(o) == list(range(n)) for o in orders)
    follows = [(o[i], o[i + 1]) for o in orders for i in range(n - 1)]
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    assert len({follows.count(p) for p in pairs}) <= 1          # each ordered pair alike
    assert all(len({o[i] for o in orders}) == n for i in range(n))  # every arm at every place


def test_a_failing_arm_leaves_the_unit_and_the_others_go_on(tmp_path, model_dir, monkeypatch):
    OrderedEngine.fail_gamma4 = True
    try:
        run = _shared_sweep(tmp_path, model_dir, monkeypatch)
    finally:
        OrderedEngine.fail_gamma4 = False
    cells = run.table("cells.csv").set_index("gamma")
    assert cells.loc[4, "status"] == "failed" and "γ=4 call failed" in cells.loc[4, "error"]
    assert cells.loc[2, "status"] == "ok" and cells.loc[2, "n_reps"] == 3
    assert cells.loc[0, "status"] == "ok"


def test_a_base_per_gamma_keeps_one_part_per_cell(tmp_path, model_dir, monkeypatch):
    """Runs before the shared base (and their resumes) time a base beside each γ."""
    run = _shared_sweep(tmp_path, model_dir, monkeypatch, shared_base=False)
    assert set(run.parts()) == {"g2-repeat-b1", "g4-repeat-b1"}
    assert OrderedEngine.log[:4] == [0, 2, 0, 2] and OrderedEngine.log.count(0) == 12
    assert sweep.SweepConfig.from_manifest({**run.manifest, "grid": {
        k: v for k, v in run.manifest["grid"].items() if k != "shared_base"}}).shared_base is False
    cells = run.table("cells.csv").set_index("gamma")
    assert cells.loc[0, "n_reps"] == 6          # two bases of three repetitions each
