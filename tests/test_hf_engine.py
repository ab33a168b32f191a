"""The transformers prompt-lookup engine: counter bookkeeping without a model (fast), and a
small smoke test with the embedded model (marked ``engine``)."""
import warnings

import pytest
import torch

from specbench.theory.counters import SpecCounters
from specbench.engine.protocol import MEMBERS, SWEEP_MEMBERS, SpecEngine
from specbench.engine.transformers_engine import (BATCH_ONE, HFEngineSettings, PromptLookupTally,
                                 RecordingPromptLookup, TransformersEngine)


# ---- bookkeeping, no model -------------------------------------------------------------

def test_tally_counts_drafts_tokens_and_positions_as_vllm_does():
    tally = PromptLookupTally(4)
    for proposed, matched in [(0, 0), (4, 4), (4, 1), (0, 0), (2, 2), (3, 0)]:
        tally.record(proposed, matched)
    assert tally.forwards == 6
    assert tally.counters() == SpecCounters(drafts=4, draft_tokens=13, accepted_tokens=7,
                                            accepted_per_pos=(3, 2, 1, 1))


@pytest.mark.parametrize("proposed, matched", [(2, 3), (5, 1), (-1, 0), (1, -1)])
def test_tally_refuses_impossible_steps(proposed, matched):
    with pytest.raises(ValueError, match="impossible step"):
        PromptLookupTally(4).record(proposed, matched)


def _generator(tally, gamma=4, **kwargs):
    return RecordingPromptLookup(num_output_tokens=gamma, max_matching_ngram_size=2,
                                 max_length=1000, tally=tally, **kwargs)


def test_recording_generator_fed_synthetic_matches_keeps_the_identity():
    """Drive the generator as transformers' assisted loop does — get_candidates, then
    update_candidate_strategy with num_matches, then append matches + 1 tokens — with
    synthetic num_matches: output tokens = accepted + passes, the prefill pass drafts nothing."""
    tally = PromptLookupTally(4)
    gen = _generator(tally)
    cycle = [5, 6, 7, 8, 9, 10]
    ids = torch.tensor([cycle + cycle[:2]])
    prompt_len = ids.shape[1]
    for matches in (None, 2, 0, 4, 1):          # None: the prefill pass
        candidates, logits = gen.get_candidates(ids)
        proposed = candidates.shape[1] - ids.shape[1]
        if matches is None:
            assert proposed == 0 and logits is None   # no draft on prefill (as vLLM)
            matches = 0
        else:
            assert proposed >= 1                      # the repeated pattern always matches
            matches = min(matches, proposed)
        n = ids.shape[1]     # the text keeps cycling 5..10: append matches + 1 of it
        ids = torch.cat([ids, torch.tensor([[cycle[(n + i) % 6] for i in range(matches + 1)]])],
                        dim=1)
        gen.update_candidate_strategy(ids, None, matches)
    c = tally.counters()
    output = ids.shape[1] - prompt_len
    assert output == c.accepted_tokens + tally.forwards
    assert tally.forwards - 1 == c.drafts == 4                # every decode pass drafted here
    assert c.accepted_per_pos[0] == 3 and c.accepted_per_pos[3] <= 1


def test_draft_in_prefill_lets_the_first_pass_look_up_the_prompt():
    tally = PromptLookupTally(4)
    gen = _generator(tally, draft_in_prefill=True)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 5, 6]])
    candidates, _ = gen.get_candidates(ids)
    assert candidates[0, ids.shape[1]:].tolist() == [7, 8, 9, 10]


def test_update_without_candidates_is_an_error_not_a_silent_count():
    gen = _generator(PromptLookupTally(4))
    with pytest.raises(RuntimeError, match="without get_candidates"):
        gen.update_candidate_strategy(torch.tensor([[1, 2]]), None, 0)


def test_adopt_keeps_the_settings_transformers_chose():
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
    stock = PromptLookupCandidateGenerator(num_output_tokens=6, max_matching_ngram_size=4,
                                           max_length=300)
    adopted = RecordingPromptLookup.adopt(stock, PromptLookupTally(6))
    assert isinstance(adopted, PromptLookupCandidateGenerator)
    assert (adopted.num_output_tokens, adopted.max_matching_ngram_size, adopted.max_length) \
        == (6, 4, 300)


def test_the_vllm_engine_and_the_stand_in_have_every_protocol_method():
    from specbench.engine.vllm_engine import Engine
    from standin_sweep import StandInEngine
    for cls in (Engine, TransformersEngine):
        missing = [m for m in MEMBERS if m not in ("settings", "startup_s")
                   and not hasattr(cls, m)]
        assert not missing, (cls.__name__, missing)
    standin = StandInEngine(HFEngineSettings(model=".", gamma=2))
    assert all(hasattr(standin, m) for m in SWEEP_MEMBERS)


def test_settings_refuse_bad_values(tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        HFEngineSettings(model=str(tmp_path), dtype="int8").validate()
    with pytest.raises(ValueError, match="gamma"):
        HFEngineSettings(model=str(tmp_path), gamma=-1).validate()
    with pytest.raises(FileNotFoundError):
        HFEngineSettings(model=str(tmp_path / "absent")).validate()
    fields = HFEngineSettings(model=str(tmp_path), threads=1).manifest_fields()
    assert fields["ngram_window"]["max_matching_ngram_size"] == 4
    assert fields["torch_threads"] == 1 and fields["engine_name"] == "transformers"


# ---- the real model (small) ----------------------------------------------------------

TOKENS = 24


@pytest.fixture(scope="module")
def repeat_prompt():
    from specbench.measure import workloads
    request = next(iter(workloads.source("repeat").candidates()))
    return request


@pytest.fixture(scope="module")
def hf_engines(repeat_prompt, engine_dtype):
    from specbench.engine.assets import embedded_model_dir
    model = str(embedded_model_dir())
    engines = {g: TransformersEngine(HFEngineSettings(model=model, gamma=g, dtype=engine_dtype))
               for g in (0, 4)}
    prompt = engines[4].encode_chat(repeat_prompt.messages, repeat_prompt.continue_final)
    gens = {g: e.generate([prompt], TOKENS) for g, e in engines.items()}
    yield engines, prompt, gens
    for e in engines.values():
        e.close()


@pytest.mark.engine
def test_counter_identity_accepted_plus_steps_is_output(hf_engines):
    from specbench.derive.sweep_tables import decode_steps
    _, _, gens = hf_engines
    gen = gens[4]
    c = gen.counters
    assert gen.output_tokens == [TOKENS]
    # one streamer put per forward pass; the candidate generator saw the same passes
    assert gen.iterations == gen.candidate_passes
    steps = gen.iterations - 1                      # the prefill pass emits the first token
    assert c.accepted_tokens + steps + 1 == TOKENS
    assert c.drafts <= steps and c.draft_tokens <= 4 * c.drafts
    assert sum(c.accepted_per_pos) == c.accepted_tokens and len(c.accepted_per_pos) == 4
    # the sweep's step count from counters agrees exactly with the engine's
    assert decode_steps(TOKENS - 1, c.drafts, c.accepted_tokens, 4, gen.iterations) \
        == (steps, True)
    assert gens[0].iterations == TOKENS and gens[0].counters is None


@pytest.mark.engine
def test_repetitive_prompt_is_accepted_and_faster_per_step(hf_engines):
    engines, _, gens = hf_engines
    c = gens[4].counters
    assert c.draft_tokens > 0 and c.acceptance_rate > 0.5, c
    assert gens[4].iterations < gens[0].iterations
    for gen in gens.values():
        assert gen.ttft_s[0] > 0 and gen.decode_s[0] > 0
        assert gen.token_times[0] == sorted(gen.token_times[0])
    first_mismatch = next((i for i, (a, b) in enumerate(zip(gens[0].token_ids[0],
                                                            gens[4].token_ids[0], strict=False))
                           if a != b), None)
    if first_mismatch is not None:   # bf16 near-ties: numerics, reported, not a failure
        warnings.warn(f"{engines[4].settings.dtype} γ=4 output differs from γ=0 at token "
                      f"{first_mismatch}", stacklevel=1)


@pytest.mark.engine
def test_counters_are_read_in_line_and_batches_refused(hf_engines):
    engines, prompt, gens = hf_engines
    engine = engines[4]
    assert isinstance(engine, SpecEngine)
    before = engine.counters()
    gen = engine.generate([prompt], 8)
    assert gen.counters_after == engine.counters()
    assert gen.counters_after.accepted_tokens == before.accepted_tokens + \
        gen.counters.accepted_tokens
    for e in engines.values():
        with pytest.raises(ValueError, match="batch size 1"):
            e.generate([prompt, prompt], 8)
    assert BATCH_ONE.format(n=2) in str(pytest.raises(ValueError, engine.generate,
                                                      [prompt, prompt], 8).value)


@pytest.mark.engine
def test_fp32_prompt_lookup_output_equals_plain_greedy(repeat_prompt):
    from specbench.engine.assets import embedded_model_dir
    model = str(embedded_model_dir())
    outputs = {}
    for g in (0, 4):
        with TransformersEngine(HFEngineSettings(model=model, gamma=g, dtype="float32")) as e:
            prompt = e.encode_chat(repeat_prompt.messages, repeat_prompt.continue_final)
            outputs[g] = e.generate([prompt], TOKENS).token_ids[0]
    assert outputs[4] == outputs[0]


def test_a_draft_model_settings_name_assisted_generation(tmp_path):
    with pytest.raises(FileNotFoundError, match="specbench draft"):
        HFEngineSettings(model=str(tmp_path), draft_model=str(tmp_path / "absent")).validate()


@pytest.mark.engine
def test_assisted_generation_with_a_draft_keeps_the_identity_and_fp32_output(repeat_prompt):
    """transformers' assisted generation with the depth-4 draft: a constant γ (never more
    proposed per pass), output tokens = accepted + passes, and in fp32 the greedy output of
    plain decoding."""
    from specbench.engine.assets import embedded_model_dir
    from specbench.engine.drafts import build_draft
    model = embedded_model_dir()
    draft = str(build_draft(model, 4))
    outputs = {}
    for g in (0, 2):
        settings = HFEngineSettings(model=str(model), gamma=g, dtype="float32",
                                    draft_model=draft if g else None)
        with TransformersEngine(settings) as e:
            prompt = e.encode_chat(repeat_prompt.messages, repeat_prompt.continue_final)
            gen = e.generate([prompt], TOKENS)
            outputs[g] = gen.token_ids[0]
    c = gen.counters
    assert gen.iterations == gen.candidate_passes
    assert c.accepted_tokens + (gen.iterations - 1) + 1 == TOKENS
    assert c.drafts >= 1 and c.draft_tokens <= 2 * c.drafts and len(c.accepted_per_pos) == 2
    assert settings.manifest_fields()["draft_model"]["depth"] == 4
    assert outputs[2] == outputs[0]
