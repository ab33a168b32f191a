"""specbench: speculative decoding and the per-step cost it amortizes, measured.

One concept per module — ``model`` (eq. 1), ``roofline`` (d(γ)), ``economics`` (the cost
worksheet), ``counters`` (vLLM spec-decode counters and the rates derived from them),
``engine`` (the vLLM adapter), ``workloads``, ``sweep``, ``runs`` (the run store), ``hostfloor``,
``analysis`` (cells and predictions), ``curves`` (derived series the figures show), ``charts``
(figures; drawing only), ``tables`` (readable tables), ``wording`` (words chosen from data,
guards), ``numbers`` (each chapter's numbers with the runs they came from).
"""
__version__ = "0.1.0"
