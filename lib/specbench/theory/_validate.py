"""Argument checks shared by the closed-form modules.

Every public function in :mod:`specbench.theory.model` and :mod:`specbench.theory.economics` accepts
scalars, numpy arrays and pandas Series. These helpers check an argument as an array and raise
a ``ValueError`` that names the argument and the offending value, so a bad cell in a sweep
table is reported where it is, not as a NaN three plots later.
"""
from __future__ import annotations

import numpy as np


def _first_bad(values: np.ndarray, bad: np.ndarray):
    return values[bad].flat[0]


def check(name: str, value, *, low=None, high=None, low_open=False, high_open=False):
    """Raise ``ValueError`` unless every element of ``value`` is a finite number in range.

    ``low``/``high`` are inclusive unless ``low_open``/``high_open``.
    Returns ``value`` untouched so the caller keeps its type (float, ndarray or Series);
    a list or tuple comes back as a float ndarray, so arithmetic on it works.
    """
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {value!r}") from exc
    nan = ~np.isfinite(arr)
    if nan.any():
        raise ValueError(f"{name} must be a finite number, got {_first_bad(arr, nan)!r}")
    if low is not None:
        bad = arr <= low if low_open else arr < low
        if bad.any():
            op = ">" if low_open else ">="
            raise ValueError(f"{name} must be {op} {low}, got {_first_bad(arr, bad)!r}")
    if high is not None:
        bad = arr >= high if high_open else arr > high
        if bad.any():
            op = "<" if high_open else "<="
            raise ValueError(f"{name} must be {op} {high}, got {_first_bad(arr, bad)!r}")
    return arr if isinstance(value, (list, tuple)) else value


def scalar_or_array(result):
    """Return a Python float for 0-d results; arrays and Series pass through."""
    if isinstance(result, np.ndarray) and result.ndim == 0:
        return float(result)
    if isinstance(result, (np.floating, np.integer)):
        return float(result)
    return result
