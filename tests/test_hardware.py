"""The GPU probe and hardware identity: NVML / nvidia-smi only, never torch.cuda.

A CPU build of torch always says ``torch.cuda.is_initialized() is False``, which proves
nothing; so these tests make every ``torch.cuda`` attribute raise and check the probe still
answers, and put stand-in ``nvidia-smi`` scripts (real output formats) on PATH.
"""
import os
import sys
import types

import pytest

from specbench.engine import vllm_engine as engine

from specbench.engine import hardware

H100_L = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e9a1c7e-0b1e-4c2b-9d0a-1f2e3d4c5b6a)\n"
          "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-6f0b2d8f-1c2f-5d3c-0e1b-2a3f4e5d6c7b)\n")
H100_QUERY = ("NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\n"
              "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\n")
MIG_L = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e9a1c7e-0b1e-4c2b-9d0a-1f2e3d4c5b6a)\n"
         "  MIG 1g.10gb     Device  0: (UUID: MIG-1d2c3b4a-5e6f-7a8b-9c0d-1e2f3a4b5c6d)\n")
NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


class _Exploding(types.ModuleType):
    def __getattr__(self, name):
        raise AssertionError(f"torch.cuda.{name} touched: that initialises CUDA before vLLM "
                             "forks its EngineCore")


@pytest.fixture
def no_torch_cuda(monkeypatch):
    """Every torch.cuda attribute raises (is_available, device_count, is_initialized...)."""
    torch = pytest.importorskip("torch")
    boom = _Exploding("torch.cuda")
    monkeypatch.setattr(torch, "cuda", boom)
    monkeypatch.setitem(sys.modules, "torch.cuda", boom)
    with pytest.raises(AssertionError):
        torch.cuda.is_available()
    return torch


@pytest.fixture
def no_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)   # import pynvml -> ImportError
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def fake_smi(folder, list_output="", query_output="", rc=0):
    """A stand-in nvidia-smi answering ``-L`` and ``--query-gpu=...`` like the real one."""
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    (folder / "L.txt").write_text(list_output)
    (folder / "Q.txt").write_text(query_output)
    script.write_text(f"""#!/bin/sh
if [ {rc} -ne 0 ]; then echo "{NO_DRIVER}"; exit {rc}; fi
case "$1" in
  -L) /bin/cat "{folder}/L.txt" ;;
  --query-gpu=*) /bin/cat "{folder}/Q.txt" ;;
  *) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
""")
    script.chmod(0o755)
    return folder


def test_probe_sees_a_gpu_through_nvidia_smi_without_torch_cuda(tmp_path, monkeypatch,
                                                               no_torch_cuda, no_pynvml):
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path / "bin", H100_L, H100_QUERY)))
    assert engine.on_gpu() is True and hardware.on_gpu() is True
    info = engine.hardware_info()
    assert [g["name"] for g in info["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert info["gpus"][0]["driver"] == "550.54.15"
    assert engine.sku_id(info, "bfloat16") == "h100-80gb-hbm3-bfloat16"
    ceilings = hardware.roofline_sku(info, None, "bfloat16")
    assert ceilings["status"] == "datasheet" and ceilings["bandwidth"] == 3.35e12


def test_probe_says_no_without_a_working_driver(tmp_path, monkeypatch, no_torch_cuda, no_pynvml):
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path / "bin", rc=9)))
    assert engine.on_gpu() is False
    assert hardware.hardware_info()["gpus"] == []
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))          # no nvidia-smi at all
    assert engine.on_gpu() is False


def test_device_nodes_are_not_proof_of_a_gpu(tmp_path, monkeypatch, no_torch_cuda, no_pynvml):
    # Test clusters fake /dev/nvidia* (mknod c 195 N) for scheduling: the probe must not care.
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists",
                        lambda p: True if str(p).startswith("/dev/nvidia") else real_exists(p))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert engine.on_gpu() is False


def test_hidden_devices_mean_no_gpu(tmp_path, monkeypatch, no_torch_cuda, no_pynvml):
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path / "bin", H100_L, H100_QUERY)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert engine.on_gpu() is False


def test_probe_uses_pynvml_where_installed(tmp_path, monkeypatch, no_torch_cuda):
    calls = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert hardware.gpu_names() == ["NVIDIA H200"] and engine.on_gpu()
    assert calls[0] == "init" and calls[-1] == "shutdown"
    # No nvidia-smi binary: the manifest's GPU list still comes from NVML.
    assert [g["name"] for g in hardware.hardware_info()["gpus"]] == ["NVIDIA H200"]
    assert engine.sku_id(hardware.hardware_info(), "bfloat16") == "h200-bfloat16"


def test_mig_slice_is_named_and_has_no_roofline(tmp_path, monkeypatch, no_torch_cuda, no_pynvml):
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path / "bin", MIG_L,
                                            "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\n")))
    assert hardware.gpu_names() == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"]
    info = hardware.hardware_info()
    assert info["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    ceilings = hardware.roofline_sku(info, None)
    assert ceilings["status"] == "unknown" and "MIG slice 1g.10gb" in ceilings["reason"]


def test_gpu_only_engine_options_fail_clearly_on_cpu(tmp_path, monkeypatch, no_pynvml):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="ngram_gpu.: NVIDIA GPU only"):
        engine.EngineSettings(model="org/name", gamma=2, speculative_method="ngram_gpu").validate()
    with pytest.raises(ValueError, match="async_scheduling=True: NVIDIA GPU only"):
        engine.EngineSettings(model="org/name", gamma=0, async_scheduling=True).validate()
    # vLLM rejects 'ngram' with async scheduling: said before any engine starts, GPU or not.
    monkeypatch.setenv("PATH", str(fake_smi(tmp_path / "bin", H100_L, H100_QUERY)))
    with pytest.raises(ValueError, match="needs speculative_method 'ngram_gpu'"):
        engine.EngineSettings(model="org/name", gamma=2, async_scheduling=True).validate()
    engine.EngineSettings(model="org/name", gamma=2, async_scheduling=True,
                          speculative_method="ngram_gpu").validate()
    with pytest.raises(ValueError, match="speculative_method must be one of"):
        engine.EngineSettings(model="org/name", speculative_method="eagle").validate()


def test_unreadable_model_shape_is_recorded_not_raised(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, '
        '"vocab_size": 100}')
    shape = hardware.model_shape(str(tmp_path), "bfloat16")
    assert shape["status"] == "unknown" and "hidden_size" in shape["reason"]
    assert hardware.model_shape("org/name", "bfloat16") is None        # hub id: no config


def test_engine_cores_follow_the_thread_bind():
    """A 2-thread SKU's kernel microbenchmark runs on the engine's two cores, not core 0 only."""
    from specbench.engine.hardware import bound_cores, cpu_threads, engine_cores
    two = {"vllm_cpu_omp_threads_bind": "0-1", "cpu_affinity": 2}
    assert engine_cores(two) == [0, 1] and cpu_threads(two) == 2
    assert bound_cores("0,2-3|4-5") == [0, 2, 3]
    auto = {"vllm_cpu_omp_threads_bind": "auto", "vllm_cpu_num_of_reserved_cpu": "default",
            "cpu_affinity": 2}
    assert len(engine_cores(auto)) == cpu_threads(auto)


@pytest.mark.parametrize("flags, native", [
    ("fpu sse2 avx2 fma avx512f avx512_bf16", True),    # Zen 4, Zen 5: AVX-512 BF16
    ("fpu sse2 avx2 amx_tile amx_bf16", True),           # Sapphire Rapids: AMX
    ("fp asimd sve bf16", True),                         # Arm's BF16 extension
    ("fpu sse2 avx2 fma vaes vpclmulqdq", False),        # Zen 3: AVX2 only
    ("", False),
])
def test_native_bf16_reads_the_cpu_flags(flags, native):
    assert hardware.native_bf16(flags) is native


@pytest.mark.parametrize("flags, gpu, expected", [
    ("fpu sse2 avx2 fma avx512f avx512_bf16", False, "bfloat16"),   # Zen 4
    ("fpu sse2 avx2 fma vaes vpclmulqdq", False, "float32"),         # Zen 3: bf16's slow fallback
    ("fpu sse2 avx2 fma vaes vpclmulqdq", True, "bfloat16"),         # any CPU beside a GPU
])
def test_every_command_defaults_to_the_machines_fast_dtype(monkeypatch, flags, gpu, expected):
    """One resolver decides every command's default dtype (as `make book` decides its own), from
    the CPU's flags; an asked dtype is kept, and a configuration holds the dtype itself, so the
    manifest records it and never 'default'."""
    from specbench.measure.lossless import LosslessConfig
    from specbench.measure.microbench import MicrobenchConfig
    from specbench.measure.serving import ServingConfig
    from specbench.measure.sweep_config import SweepConfig
    monkeypatch.setattr(hardware, "_cpu_field", lambda name: flags if name == "flags" else None)
    monkeypatch.setattr(hardware, "on_gpu", lambda: gpu)
    assert hardware.default_dtype() == hardware.resolve_dtype(None) == expected
    assert hardware.resolve_dtype("float32") == "float32"
    for config in (SweepConfig, MicrobenchConfig, LosslessConfig, ServingConfig):
        assert config().dtype == expected, config.__name__
        assert config(dtype="float16").dtype == "float16", config.__name__


@pytest.mark.parametrize("command", ["sweep", "microbench", "lossless", "serve-bench"])
def test_help_says_what_the_default_dtype_means(command, capsys):
    from specbench.cli.main import main
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "machine's fast dtype" in text and "float32" in text
