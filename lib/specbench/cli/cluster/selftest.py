"""The cluster self-test notebook's work: a tiny run that proves a task wrote to the store."""
from __future__ import annotations

import os
import time
from pathlib import Path

try:
    import submitit
    _Checkpointable = submitit.helpers.Checkpointable
except ImportError:  # the `cluster` extra is not installed: submit() says so
    submitit = None
    _Checkpointable = object

from specbench.store.runs import DEFAULT_ROOT, create_run, now_iso, open_run

__all__ = ["SELFTEST_ENV", "run_selftest"]



# -- the self-test notebook's work -----------------------------------------------------------

SELFTEST_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                "SLURM_JOB_PARTITION", "SLURM_RESTART_COUNT", "CUDA_VISIBLE_DEVICES",
                "SLURM_JOB_GPUS")


def run_selftest(value: float, steps: int = 1, step_s: float = 0.0, root: str | Path | None = None,
                 resume: str | Path | None = None):
    """A cheap stand-in for a measurement, to test the cluster path without an engine.

    Writes ``steps`` parts — each records where it ran (the Slurm job and array task, the
    partition, ``CUDA_VISIBLE_DEVICES``) and ``value ** 2`` — then a ``selftest.csv`` table; the
    run is left open for the notebook runner to close. With ``resume`` it continues that run,
    skipping the steps already written, as a requeued sweep skips its finished cells."""
    import pandas as pd

    from specbench.engine.vllm_engine import hardware_info
    from specbench.store.runs import code_revision

    if not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"selftest: parameter value must be a number >= 0, got {value!r}")
    if resume:
        run = open_run(resume)
    else:
        none = "none: the self-test loads no model"
        run = create_run(Path(root or DEFAULT_ROOT), {
            "kind": "selftest", "sku": "selftest", "code": code_revision(),
            "model": {"name": "none", "weights_sha256": none, "tokenizer_sha256": none},
            "engine": {"name": "none", "version": "none", "settings": {}},
            "hardware": hardware_info(),
            "grid": {"value": value, "steps": steps, "step_s": step_s}})
    grid = run.manifest["grid"]
    done = run.parts()
    for step in range(grid["steps"]):
        key = f"step-{step:03d}"
        if key in done:
            continue
        time.sleep(grid["step_s"])
        run.write_part(key, {"step": step, "value": grid["value"],
                             "result": grid["value"] ** 2, "written_at": now_iso(),
                             "pid": os.getpid(), "host": os.uname().nodename,
                             **{k.lower(): os.environ.get(k) for k in SELFTEST_ENV}})
    table = pd.DataFrame(run.parts().values()).sort_values("step")
    run.write_table("selftest.csv", table)
    return run


