"""The interface the sweep calls on an engine, as one :class:`typing.Protocol`.

Extracted from what :mod:`specbench.measure.sweep` actually uses of
:class:`specbench.engine.vllm_engine.Engine` (the vLLM adapter);
:class:`specbench.engine.transformers_engine.TransformersEngine` implements the same contract.
An engine is one live model with a fixed speculation length γ; one call of
:meth:`SpecEngine.generate` is one timed measurement with its own counter delta.

The vLLM-only extras (``engine.llm`` for the torch profiler of the host-floor chapter) are not
part of the interface.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from specbench.theory.counters import SpecCounters

__all__ = ["SpecEngine", "EngineSettingsLike", "MEMBERS", "SWEEP_MEMBERS"]


@runtime_checkable
class EngineSettingsLike(Protocol):
    """What the sweep reads of an engine's settings (a frozen dataclass in both engines)."""
    model: str           # checkpoint folder (or hub id) the engine loaded
    gamma: int           # speculation length γ, fixed per engine; 0 = no speculation
    dtype: str           # "bfloat16" | "float16" | "float32"
    max_model_len: int   # prompt + output tokens must fit; the sweep selects prompts by it
    seed: int            # the engine's sampling seed (temperature > 0 cells)

    def manifest_fields(self) -> dict: ...  # execution mode the run's manifest records


@runtime_checkable
class SpecEngine(Protocol):
    """One live engine for one γ. Members, each as the sweep uses it:"""

    settings: Any        # an :class:`EngineSettingsLike`: γ, dtype, context length, seed
    startup_s: float     # seconds the engine took to start (recorded per cell)

    def __enter__(self) -> "SpecEngine": ...  # the engine, closed on exit
    def __exit__(self, *exc) -> Any: ...      # close(); never swallows the exception

    def close(self) -> None: ...  # release the model (idempotent)

    def encode_chat(self, messages: list[dict], continue_final: bool = True) -> list[int]:
        """Prompt token ids through the tokenizer's chat template (the last assistant message
        continued, or the generation prompt added)."""
        ...

    @property
    def prompt_format(self) -> str:
        """How prompts were formed (chat template, or plain text for a base checkpoint)."""
        ...

    def counters(self) -> SpecCounters | None:
        """Cumulative spec-decode counters read from the engine; None when γ = 0."""
        ...

    def generate(self, prompts: list[list[int]], max_tokens: int | list[int],
                 sampling: dict | list[dict] | None = None, read_counters: bool = True):
        """One timed call of exactly ``max_tokens`` new tokens per prompt (EOS ignored),
        greedy unless ``sampling`` says otherwise, returning a
        :class:`specbench.engine.Generation`: wall time; per request TTFT, decode window
        (first to last token), output tokens, token ids, texts; the counter delta around the
        call and the cumulative reading after it (None at γ = 0); and ``iterations``, the
        engine's forward steps in the call, prefill included."""
        ...

    def describe(self) -> dict:
        """Settings, start-up time and prompt format, for the run's records."""
        ...


# Every member, for checks of an implementation that is not instantiated (tests).
MEMBERS = ("settings", "startup_s", "__enter__", "__exit__", "close", "encode_chat",
           "prompt_format", "counters", "generate", "describe")
# The members the sweep itself calls (sweep.py reads ``prompt_format`` through getattr with a
# default; ``counters()`` is used by overhead.py, ``describe()`` by notebooks and tests).
SWEEP_MEMBERS = ("settings", "startup_s", "__enter__", "__exit__", "close", "encode_chat",
                 "generate")
