"""The model chapter's numbers: eq. 1's limits at a stated d."""
from __future__ import annotations

import numpy as np

from specbench.report.numbers import Numbers, pct
from specbench.report.wording import claim
from specbench.theory import model

__all__ = ["numbers"]



def numbers(d: float = 0.02, gammas=(2, 4, 6)) -> Numbers:
    """The model chapter's limits, evaluated by the library's own eq. 1 (no run needed)."""
    g = np.array(gammas, dtype=float)
    n = Numbers()
    n.add(illustrative_d_pct=pct(d),
          zero_limit=claim(np.allclose(model.speedup(0.0, g, d), 1 / (1 + d))
                           and (model.speedup(0.0, g, d) <= 1).all(),
                           "Zero acceptance (α=0): S = 1/(1+d) ≤ 1"),
          full_limit=claim(np.allclose(model.speedup(1.0, g, d), (g + 1) / (1 + d)),
                           "Full acceptance (α→1): S → (γ+1)/(1+d)"),
          blind_constant=claim(np.allclose(1 / model.device_pass_latency(1.0, g), g + 1),
                               "it predicts γ+1 whatever α is"))
    return n


