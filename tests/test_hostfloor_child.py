"""The GPU host floor's profiled child, run for real (on this machine's CPU engine, without
nsys): ``python -m specbench.measure.hostfloor --child`` starts vLLM, times one call and leaves its
result in the file it was given. About half a minute."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from specbench.measure import hostfloor as hf

pytestmark = pytest.mark.engine


def test_child_entry_point_writes_its_result_file(tmp_path):
    from specbench.engine.assets import embedded_model_dir

    model = embedded_model_dir()
    if not (model / "config.json").exists():
        pytest.skip(f"{model}: embedded model not built (scripts/setup.sh)")
    result = tmp_path / "child.result.json"
    env = {**os.environ, "PYTHONPATH": str(Path(hf.__file__).parents[1]),
           "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    done = subprocess.run(hf.child_command(str(model), "auto", 4, result), env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(result.read_text())
    assert out["tokens"] == 4 and out["output_tokens"] == 4 and out["wall_ms"] > 0
