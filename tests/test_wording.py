"""Computed wording and guards (specbench.report.wording)."""
import math

import pytest

from specbench.report import wording
from specbench.report.wording import ClaimError, claim, compare, regime, size_word


def test_claim_returns_the_sentence_or_names_it():
    assert claim(True, "α is at most one") == "α is at most one"
    with pytest.raises(ClaimError, match="'α is at most one'.*cell 3"):
        claim(False, "α is at most one", "cell 3 has α = 1.2")


def test_compare_needs_a_difference_beyond_both_spreads():
    # 100 ± 2 % against 95 ± 2 %: allowed 2 + 1.9 = 3.9 < 5 → a real difference.
    assert compare(100, 2, 95, 2) == "higher"
    assert compare(95, 2, 100, 2) == "lower"
    assert compare(100, 2, 95, 2, faster=True) == "slower"
    assert compare(95, 2, 100, 2, faster=True) == "faster"
    # 100 ± 5 % against 96 ± 0 %: allowed 5 + 0.96 (noise floor) > 4 → within noise.
    assert compare(100, 5, 96, 0) == "within noise"
    # The noise floor applies even to spreads reported as zero.
    assert compare(100.5, 0, 100, 0) == "within noise"


def test_size_word_thresholds_are_ordered_and_stated_once():
    bounds = [b for b, _ in wording.COST_WORDS]
    assert bounds == sorted(bounds) and math.isinf(bounds[-1])
    assert size_word(0.01) == "almost free"
    assert size_word(0.03) == "small"
    assert size_word(0.139) == "moderate"
    assert size_word(0.56) == "large"
    with pytest.raises(ValueError, match="NaN"):
        size_word(float("nan"))


def test_regime_from_the_host_share():
    assert regime(0.36) == "compute-dominated"
    assert regime(0.6) == "host-dominated"
    assert regime(float("nan")).startswith("not measured")


def test_spread_is_half_the_range_in_percent_of_the_median():
    assert wording.spread_pct(9.0, 11.0, 10.0) == pytest.approx(10.0)
