"""specbench: speculative decoding as the amortization of a per-step host cost.

One concept per module — ``model`` (eq. 1), ``roofline`` (d(γ)), ``economics`` (the cost
worksheet), ``counters`` (vLLM spec-decode counters), ``engine`` (the vLLM adapter),
``workloads``, ``sweep``, ``runs`` (the run store), ``hostfloor``, ``charts``.
"""
__version__ = "0.1.0"
