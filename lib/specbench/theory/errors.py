"""Prediction error, defined once for the whole package.

Every error the book quotes is a signed percent error of a prediction against its measurement,

    percent error = 100·(predicted − measured)/measured

(negative: the model predicts a lower latency, or a smaller speedup, than was measured), and
every MAPE is the mean of its absolute value over cells, with a bootstrap interval over cells
where a claim needs one. A measurement compared with a reference measurement (a drift, an
overhead, a gap between two harnesses) is the same arithmetic under another name,
:func:`percent_change`. Nothing else in the package computes an error or a MAPE:
tests/test_one_rule.py parses the package and fails on a rival.

Functions accept scalars, numpy arrays and pandas Series, like :mod:`specbench.theory.model`.
"""
from __future__ import annotations

import numpy as np

from specbench.theory._validate import check, scalar_or_array

__all__ = ["percent_error", "percent_change", "mape", "mape_of", "mape_interval",
           "mape_difference"]


def _relative_pct(value, reference):
    """The one formula: 100·(value − reference)/reference."""
    return scalar_or_array(100 * (value - reference) / reference)


def percent_error(predicted, measured):
    """Signed per-cell error of a prediction, in percent.

    ``measured`` must be finite and positive: an error is relative to it. A missing prediction
    (NaN: a model that cannot predict the cell, e.g. without a roofline) leaves the cell's error
    missing rather than inventing one; a present prediction must be positive.
    """
    measured = check("measured", measured, low=0, low_open=True)
    present = np.asarray(predicted, dtype=float)
    if (present[~np.isnan(present)] <= 0).any():
        raise ValueError(f"predicted must be > 0, got {present[present <= 0].flat[0]!r}")
    if isinstance(predicted, (list, tuple)):
        predicted = present
    return _relative_pct(predicted, measured)


def percent_change(value, reference):
    """How far a measurement moved from a reference measurement, in percent (a drift, an
    overhead): :func:`percent_error`'s arithmetic for two measurements, neither a prediction.
    NaN passes through (a missing measurement has no change)."""
    return _relative_pct(value, reference)


def mape_of(errors) -> float:
    """MAPE of signed percent errors already computed: the mean of their absolute values over
    the cells that have one (NaN: no prediction, no cell), NaN when none has.

    Summed as pandas' ``Series.abs().mean()`` sums (missing cells as zeros, over the count of
    present ones), so a table's MAPE and the same cells' :func:`mape_interval` agree."""
    e = np.abs(np.asarray(errors, dtype=float))
    present = ~np.isnan(e)
    if not present.any():
        return float("nan")
    return float(np.where(present, e, 0.0).sum() / present.sum())


def mape(predicted, measured) -> float:
    """Mean absolute percentage error of predictions against measurements, in percent."""
    errors = np.asarray(percent_error(predicted, measured), dtype=float)
    if errors.size == 0:
        raise ValueError("mape needs at least one cell, got none")
    return mape_of(errors)


def mape_interval(errors, resamples: int = 2000, seed: int = 0,
                  level: float = 0.95) -> tuple[float, float, float]:
    """MAPE of signed percent errors and its bootstrap interval over cells (scipy's BCa bootstrap
    of the mean absolute error, a fixed seed so a verdict is the same every time it is
    computed; fewer than two cells, or cells that all err alike, have no interval)."""
    from scipy import stats
    e = np.abs(np.asarray(errors, dtype=float))
    e = e[~np.isnan(e)]
    if e.size == 0:
        return (np.nan, np.nan, np.nan)
    point = mape_of(e)
    if e.size < 2 or np.ptp(e) == 0:
        return (point, np.nan, np.nan)
    res = stats.bootstrap((e,), np.mean, n_resamples=resamples, confidence_level=level,
                          method="BCa", rng=np.random.default_rng(seed))
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)


def mape_difference(errors_a, errors_b, resamples: int = 2000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float, float]:
    """The mean difference of absolute errors |a| − |b| over paired cells (how much lower one
    model's MAPE is than another's on the same cells) and its bootstrap interval (scipy's BCa,
    resampling cells so each keeps both its errors; a fixed seed). Fewer than two cells, or
    cells whose differences are all equal: no interval."""
    from scipy import stats
    a = np.abs(np.asarray(errors_a, dtype=float))
    b = np.abs(np.asarray(errors_b, dtype=float))
    keep = ~(np.isnan(a) | np.isnan(b))
    diff = a[keep] - b[keep]
    if diff.size == 0:
        return (np.nan, np.nan, np.nan)
    if diff.size < 2 or np.ptp(diff) == 0:
        return (float(diff.mean()), np.nan, np.nan)
    res = stats.bootstrap((diff,), np.mean, n_resamples=resamples, confidence_level=level,
                          method="BCa", rng=np.random.default_rng(seed))
    return (float(diff.mean()), float(res.confidence_interval.low),
            float(res.confidence_interval.high))
