"""Workload sources: the project's own texts ('repeat', 'open', 'edit'; ``builtin``), Spec-Bench
categories read from a path (``spec_bench``) and an operator's JSONL prompts (``operator_file``);
:func:`source` picks one by name."""
from specbench.measure.workloads.builtin import WORKLOADS, BuiltinSource
from specbench.measure.workloads.operator_file import FileSource
from specbench.measure.workloads.spec_bench import SpecBenchSource

__all__ = ["WORKLOADS", "source"]


def source(name: str, spec_bench_path=None):
    """The prompt source behind a workload name.

    * ``repeat``, ``open``, ``edit`` — the project's texts;
    * ``specbench:<category>`` — Spec-Bench prompts of one category
      (:mod:`specbench.measure.workloads.spec_bench`);
    * ``file:<path>`` — an operator's JSONL in vLLM's custom-dataset format
      (:mod:`specbench.measure.workloads.operator_file`).
    """
    if name.startswith("specbench:"):
        return SpecBenchSource(name.split(":", 1)[1], spec_bench_path)
    if name.startswith("file:"):
        return FileSource(name.split(":", 1)[1])
    return BuiltinSource(name)
