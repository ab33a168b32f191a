"""The step-time model: recovers known coefficients, leaves out what the records cannot
identify, and admits an extra term only when held-out error drops by more than the noise."""
import numpy as np
import pandas as pd
import pytest

from specbench.theory.step_time import admit_terms, fit_step_time, held_out_errors, step_class

TRUE = {"s0": 0.030, "decode_tokens": 0.002, "draft_tokens": 0.0008,
        "prefill_tokens": 0.00015, "context_tokens": 2e-6}


def _records(n=400, seed=0, drafting_cost=0.0, prefill=True):
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 9, n)
    gamma = rng.choice([0, 2, 6], n)
    drafted = rows * gamma * (rng.random(n) < 0.7)
    pre = rng.choice([0, 0, 0, 64, 512], n) if prefill else np.zeros(n, int)
    ctx = rows * rng.integers(100, 1500, n)
    r = pd.DataFrame({"rows": rows, "decode_tokens": rows, "draft_tokens": drafted,
                      "prefill_tokens": pre, "context_tokens": ctx})
    t = TRUE["s0"] + sum(TRUE[k] * r[k] for k in TRUE if k != "s0")
    t = t + drafting_cost * (drafted > 0)
    r["duration_s"] = t * (1 + rng.normal(0, 0.01, n))
    return r


def test_the_fit_recovers_the_coefficients_inside_its_intervals():
    model = fit_step_time(_records(), level=0.999)   # five intervals: none may miss by chance
    for name, value in TRUE.items():
        low, high = model.interval[name]
        assert low <= value <= high, name
    assert np.median(np.abs(held_out_errors(_records(), model.terms))) < 2


def test_a_term_that_never_varies_is_unidentified_not_guessed():
    model = fit_step_time(_records(prefill=False))
    assert "prefill_tokens" in model.unidentified and "prefill_tokens" not in model.coef
    assert 0 < model.fixed_share(_records(prefill=False)).min() < 1


def test_an_extra_term_enters_only_when_the_records_need_it():
    terms, verdicts = admit_terms(_records(drafting_cost=0.01))
    assert "drafting_step" in terms and verdicts["drafting_step"]["admitted"]
    terms, verdicts = admit_terms(_records())
    assert "drafting_step" not in terms and not verdicts["drafting_step"]["admitted"]


def test_too_few_steps_is_a_clear_error():
    with pytest.raises(ValueError, match="needs more than 5 steps"):
        fit_step_time(_records(n=4))


def test_steps_are_classed_by_what_they_hold():
    r = pd.DataFrame({"prefill_tokens": [0, 0, 5], "draft_tokens": [0, 3, 3]})
    assert list(step_class(r)) == ["pure decode", "decode with drafts", "mixed with prefill"]


def test_a_sealed_cell_from_its_steps_is_the_cell_predict_cells_builds():
    from specbench.theory.step_time import cells_speedup, predict_cells
    model = fit_step_time(_records())
    cells = pd.DataFrame({"workload": "w", "gamma": [0, 2], "batch": 4,
                          "drafting_share": [0.0, 0.8], "emitted_per_step": [1.0, 2.2],
                          "prompt_tokens": 300.0})
    expected = predict_cells(model, cells, 64)["speedup"].iloc[1]
    assert cells_speedup(model, [(2.2, 0.8)], 2, 4, 300.0, 64) == pytest.approx(expected)
    # Two prompts average as times do: the harmonic mean of their speedups.
    one, two = (cells_speedup(model, [p], 2, 4, 300.0, 64) for p in [(2.2, 0.8), (1.4, 0.5)])
    both = cells_speedup(model, [(2.2, 0.8), (1.4, 0.5)], 2, 4, 300.0, 64)
    assert both == pytest.approx(2 / (1 / one + 1 / two))


def _floored(n=400, seed=1, knee=8):
    """Steps of a forward pass with a floor: tokens up to ``knee`` cost nothing beyond s0,
    each one above it 1.5 ms whatever its class; attention 2 µs a decode query–key pair."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 9, n)
    gamma = rng.choice([0, 2, 6], n)
    drafted = rows * gamma * (rng.random(n) < 0.7)
    pre = rng.choice([0, 0, 0, 64, 512], n)
    ctx = rows * rng.integers(100, 1500, n)
    r = pd.DataFrame({"rows": rows, "decode_tokens": rows, "draft_tokens": drafted,
                      "draft_padded": 0, "prefill_tokens": pre, "context_tokens": ctx,
                      "decode_pairs": (rows + drafted) * ctx / rows,
                      "prefill_pairs": pre * (pre + 1) / 2})
    tokens = rows + drafted + pre
    t = 0.030 + 0.0015 * np.maximum(tokens - knee, 0) + 2e-6 * r["decode_pairs"]
    r["duration_s"] = t * (1 + rng.normal(0, 0.01, n))
    return r


def test_a_floor_under_the_forward_pass_replaces_the_token_terms_it_generalises():
    terms, verdicts = admit_terms(_floored())
    assert verdicts["tokens_over_floor"]["admitted"]
    assert verdicts["tokens_over_floor"]["form"] == "tokens_over_8"
    assert "tokens_over_8" in terms and "decode_kpairs" in terms
    assert not {"decode_tokens", "draft_tokens", "prefill_tokens"} & set(terms)
    model = fit_step_time(_floored(), terms)
    assert model.coef["tokens_over_8"] == pytest.approx(0.0015, rel=0.05)


def test_records_before_the_pairs_were_kept_leave_their_terms_out():
    terms, verdicts = admit_terms(_records())
    assert not verdicts["decode_kpairs"]["admitted"] and "not recorded" in (
        verdicts["decode_kpairs"]["why"])
    assert "decode_kpairs" not in terms


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_cells_floor_column_is_its_steps_when_every_row_drafts_alike(share):
    from specbench.theory.step_time import cell_steps
    steps = cell_steps(4, 6, share, 2.0, 300.0, 64)
    tokens = 4 + 4 * 6 * share
    assert steps["tokens_over_8"].iloc[0] == pytest.approx(max(tokens - 8, 0))
    q = 1 + 6 * share
    assert steps["decode_pairs"].iloc[0] == pytest.approx(4 * (q * 300 + q * (q + 1) / 2))
