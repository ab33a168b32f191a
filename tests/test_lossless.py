"""The distribution test must keep its level on equal samplers and detect a biased one."""
import numpy as np
import pytest

from specbench.measure.lossless import LEVEL, permutation_test, tv_statistic


def _sampler(bias: float, n: int, length: int, seed: int):
    """A Markov chain over 12 tokens; ``bias`` moves that much probability to token 0."""
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(99).dirichlet(np.ones(12), size=12)
    probs = (1 - bias) * base + bias * np.eye(12)[0]
    out = []
    for _ in range(n):
        s, t = [], 3
        for _ in range(length):
            t = int(rng.choice(12, p=probs[t]))
            s.append(t)
        out.append(s)
    return out


def test_statistic_is_zero_for_identical_samples_and_one_for_disjoint():
    a = [[1, 2, 3]] * 4
    assert tv_statistic(a, a, 3) == 0
    assert tv_statistic(a, [[4, 5, 6]] * 4, 3) == 1


def test_detects_a_biased_sampler():
    _, p = permutation_test(_sampler(0.0, 60, 8, 1), _sampler(0.25, 60, 8, 2), 8,
                            permutations=500)
    assert p < LEVEL


def test_keeps_its_level_on_one_sampler():
    rejections = sum(permutation_test(_sampler(0.0, 40, 6, 10 + k), _sampler(0.0, 40, 6, 50 + k),
                                      6, permutations=200, seed=k)[1] < 0.05
                     for k in range(20))
    assert rejections <= 4   # about 1 of 20 expected at level 0.05


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="two samples"):
        permutation_test([[1]], [[1], [2]], 1)
    with pytest.raises(ValueError, match="tokens"):
        permutation_test([[1], [2]], [[1], [2]], 3)
