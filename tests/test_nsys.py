"""The GPU host floor's nsys path, run here with a stand-in ``nsys`` on PATH.

The stand-in behaves as Nsight Systems is documented to: ``nsys profile -o NAME cmd`` runs the
command (printing its own lines on stdout too) and writes ``NAME.nsys-rep``; ``nsys stats``
exports the report to ``NAME.sqlite`` — reusing an existing export unless
``--force-export=true`` — and writes ``<prefix>_<report>.csv`` in the kernel-summary format of
tests/fixtures/nsys_*.csv. Each profile's kernels differ, so a profile that read another's
report would be caught. The profiled child is replaced by a small script (starting vLLM is the
engine test's job); ``python -m specbench.measure.hostfloor --child`` itself is checked for its
entry point here and run for real in tests/test_hostfloor_child.py.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbench.measure import hostfloor as hf
from specbench.measure import nsys

STAND_IN_NSYS = r'''#!{python}
import json, os, pathlib, subprocess, sys
args = sys.argv[1:]
state = pathlib.Path(os.environ["FAKE_NSYS_STATE"])
def record(**kw):
    with open(state / "calls.jsonl", "a") as f:
        f.write(json.dumps(kw) + "\n")
if args[0] == "profile":
    i = args.index("-o")
    out, cmd, opts = args[i + 1], args[i + 2:], args[1:i]
    report = pathlib.Path(out + ".nsys-rep")
    if report.exists() and "--force-overwrite=true" not in opts:
        print(f"ERROR: {{report}} already exists", file=sys.stderr); sys.exit(1)
    counter = state / "invocations"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    print("Collecting data...", flush=True)
    rc = subprocess.call(cmd)
    print("Generating '/tmp/nsys-report-1a2b.qdstrm'\n[1/1] [========100%] "
          f"{{report.name}}\nGenerated:\n    {{report}}", flush=True)
    report.write_text(json.dumps({{"invocation": n, "kernels_ns": [n * 1_000_000, 500_000]}}))
    record(kind="profile", out=out, invocation=n,
           mp=os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"))
    sys.exit(rc)
if args[0] == "stats":
    report = pathlib.Path(args[-1])
    prefix, name = args[args.index("--output") + 1], args[args.index("--report") + 1]
    if os.environ.get("FAKE_NSYS_LEGACY") == "1" and name == "cuda_gpu_kern_sum":
        print(f"ERROR: Report '{{name}}' could not be found.", file=sys.stderr); sys.exit(1)
    sqlite = report.with_suffix(".sqlite")
    force = "--force-export=true" in args
    if force or not sqlite.exists():
        sqlite.write_text(report.read_text())
    record(kind="stats", report=str(report), force=force, name=name)
    data = json.loads(sqlite.read_text())
    if name == "cuda_gpu_kern_sum":
        lines = ["Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
                 "StdDev (ns),Name"]
        lines += [f"50.0,{{t}},1,{{t}},{{t}},{{t}},{{t}},0.0,\"kernel_{{k}}\""
                  for k, t in enumerate(data["kernels_ns"])]
    else:
        lines = ["Time(%),Total Time (ns),Instances,Average,Minimum,Maximum,StdDev,Name"]
        lines += [f"50.0,{{t}},1,{{t}},{{t}},{{t}},0.0,kernel_{{k}}"
                  for k, t in enumerate(data["kernels_ns"])]
    pathlib.Path(f"{{prefix}}_{{name}}.csv").write_text("\n".join(lines) + "\n")
    print(f"Processing [{{sqlite}}] with [{{name}}.py]...")
    sys.exit(0)
sys.exit(f"stand-in nsys: unexpected arguments {{args}}")
'''

# The profiled child's stand-in: writes its result file, then prints more lines (as the
# engine's shutdown and nsys do), so the last stdout line is no JSON.
CHILD = r'''
import json, os, sys
tokens, result = int(sys.argv[1]), sys.argv[2]
json.dump({"wall_ms": 100.0 + 7.0 * tokens, "tokens": tokens,
           "mp": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")}, open(result, "w"))
print("INFO engine core shutting down")
'''


def _invocation_kernels_ms(n: int) -> float:
    return (n * 1_000_000 + 500_000) / 1e6


@pytest.fixture
def stand_in_nsys(tmp_path, monkeypatch):
    bin_dir, state = tmp_path / "bin", tmp_path / "nsys-state"
    bin_dir.mkdir()
    state.mkdir()
    script = bin_dir / "nsys"
    script.write_text(STAND_IN_NSYS.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_STATE", str(state))
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    monkeypatch.setattr(hf, "child_command", lambda model, fmt, tokens, result: [
        sys.executable, "-c", CHILD, str(tokens), str(result)])

    def calls():
        path = state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return calls


def test_stats_forces_a_fresh_export():
    cmd = nsys.nsys_stats_command("r.nsys-rep", "p")
    assert cmd[:2] == ["nsys", "stats"] and "--force-export=true" in cmd
    assert "--force-export=true" in nsys.nsys_stats_command("r.nsys-rep", "p", legacy=True)


def test_each_rep_and_model_reads_its_own_fresh_report(tmp_path, stand_in_nsys):
    traces = tmp_path / "traces"
    traces.mkdir()
    profiles = []
    for label in ("SmolLM2-135M (pretrained)", "SmolLM2-1.7B shape (random weights)"):
        profiles += [(label, *t[:3]) for t in hf._gpu_profiles("/m", "auto", 16, 2, traces, label)]
    assert len(profiles) == 8
    # Profile k (in order) is nsys invocation k: its compute is its own report's kernels.
    for k, (label, rep, n, prof) in enumerate(profiles, start=1):
        assert prof.compute_ms == pytest.approx(_invocation_kernels_ms(k)), (label, rep, n)
        assert prof.wall_ms == pytest.approx(100.0 + 7.0 * n)       # from the result file
    calls = stand_in_nsys()
    outs = [c["out"] for c in calls if c["kind"] == "profile"]
    assert len(set(outs)) == 8                                       # one report name each
    assert any("smollm2-1-7b" in o and "rep1" in o and o.endswith("decode16") for o in outs)
    assert all(c["force"] for c in calls if c["kind"] == "stats")
    assert {c["mp"] for c in calls if c["kind"] == "profile"} == {"spawn"}


def test_a_reused_report_name_still_reads_the_new_profile(tmp_path, stand_in_nsys):
    # Even under one name the second profile must not read the first one's export.
    first = hf.profile_gpu_decode("/m", "auto", 8, tmp_path, "same-name")
    second = hf.profile_gpu_decode("/m", "auto", 8, tmp_path, "same-name")
    assert first.compute_ms == pytest.approx(_invocation_kernels_ms(1))
    assert second.compute_ms == pytest.approx(_invocation_kernels_ms(2))


def test_older_nsys_falls_back_to_gpukernsum(tmp_path, stand_in_nsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_LEGACY", "1")
    prof = hf.profile_gpu_decode("/m", "auto", 4, tmp_path, "legacy")
    assert prof.compute_ms == pytest.approx(_invocation_kernels_ms(1))
    assert [c["name"] for c in stand_in_nsys() if c["kind"] == "stats"] == ["gpukernsum"]


def test_a_child_without_result_is_an_error_naming_the_file(tmp_path, stand_in_nsys,
                                                            monkeypatch):
    monkeypatch.setattr(hf, "child_command", lambda *a: [sys.executable, "-c",
                                                         "print('{\"wall_ms\": 1}')"])
    with pytest.raises(RuntimeError, match=r"quiet.result.json: the profiled child left no"):
        hf.profile_gpu_decode("/m", "auto", 4, tmp_path, "quiet")


def test_the_child_entry_point_exists():
    env = {**os.environ, "PYTHONPATH": str(Path(hf.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-m", "specbench.measure.hostfloor", "--help"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and "--result" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "specbench.measure.hostfloor", "--child", "--model",
                          "m", "--tokens", "4"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert bad.returncode == 2 and "--result" in bad.stderr


def test_gpu_host_floor_run_records_the_nsys_method(tmp_path, stand_in_nsys, monkeypatch):
    """The whole GPU measurement loop with a stand-in nvidia-smi and nsys: the run's tables
    come from each profile's own report, and the manifest describes nsys, not torch.profiler."""
    import types

    from specbench.engine import assets

    torch = pytest.importorskip("torch")

    class Boom(types.ModuleType):               # the host-floor path never touches torch.cuda
        def __getattr__(self, name):
            raise AssertionError(f"torch.cuda.{name} touched in the host-floor path")

    monkeypatch.setattr(torch, "cuda", Boom("torch.cuda"))
    monkeypatch.setitem(sys.modules, "torch.cuda", torch.cuda)
    bin_dir = Path(os.environ["PATH"].split(os.pathsep)[0])
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$1" in\n  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)";;\n'
                   '  *) echo "NVIDIA H200, 560.35.03, 143771 MiB";;\nesac\n')
    smi.chmod(0o755)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}))
    (model / "tokenizer.json").write_text("{}")
    monkeypatch.setattr(assets, "embedded_model_dir", lambda: model)
    monkeypatch.setattr(assets, "cache_dir", lambda: tmp_path / "cache")
    run = hf.run_host_floor(tokens=9, reps=2, root=tmp_path / "runs", progress=False)
    m = run.manifest
    assert "nsys" in m["grid"]["method"] and "torch profiler" not in m["grid"]["method"]
    assert m["profiler"]["tool"] == "nsys" and m["compute_families"] is None
    assert m["sku"] == "h200-bfloat16" and m["roofline_sku"]["status"] == "datasheet"
    steps = run.table("steps.csv")
    assert len(steps) == 8
    assert sorted(steps["compute_ms"]) == pytest.approx([_invocation_kernels_ms(k)
                                                         for k in range(1, 9)])
    per_step, _ = hf.decompose(steps, run.table("families.csv"))
    assert list(per_step["wall_ms"]) == pytest.approx([7.0, 7.0])
    assert set(per_step["model"]) == {"SmolLM2-135M (pretrained)",
                                      "SmolLM2-1.7B shape (random weights)"}
