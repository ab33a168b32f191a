"""Stopping a sweep: deterministic kill points for tests, and Ctrl-C handled cleanly.

**Fault points.** The sweep calls :func:`point` at named moments (:data:`POINTS`). Normally
that does nothing. With ``SPECBENCH_FAULT=<name>[@<n>][=<action>]`` in the environment the
process stops itself the ``n``-th time (default first) it reaches ``<name>``:

* ``kill`` (default): ``SIGKILL`` to this process only — what ``kill -9 PID`` or the OOM
  killer does: no handler, no clean-up, a file may be half-written;
* ``sigint``: ``SIGINT`` to the whole process group, as a terminal's Ctrl-C does (the engine's
  child processes receive it too).

So a test lands a kill exactly where it means to, instead of racing a timer.

**Interrupts.** :class:`Interrupts` turns SIGINT into ``KeyboardInterrupt`` and remembers that
it happened, so an engine error caused by the interrupt (the engine's child process got the
same Ctrl-C and died) is not recorded as a failed cell but stops the sweep as an interrupt.
"""
from __future__ import annotations

import os
import signal

__all__ = ["POINTS", "ENV", "point", "Interrupts"]

ENV = "SPECBENCH_FAULT"
POINTS = ("after-engine-start", "mid-cell", "during-part-write", "during-finalize")
_reached: dict[str, int] = {}


def _parse(spec: str) -> tuple[str, int, str]:
    spec, _, action = spec.partition("=")
    name, _, nth = spec.partition("@")
    if name not in POINTS or action not in ("", "kill", "sigint"):
        raise ValueError(f"{ENV}={spec!r}: expected <point>[@<n>][=kill|sigint] with a point "
                         f"from {', '.join(POINTS)}")
    return name, int(nth or 1), action or "kill"


def point(name: str) -> None:
    """Stop here if ``$SPECBENCH_FAULT`` names this point (and this is the n-th visit)."""
    assert name in POINTS, name
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, nth, action = _parse(spec)
    if target != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] != nth:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        os.killpg(os.getpgrp(), signal.SIGINT)


class Interrupts:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and sets :attr:`seen`."""

    def __init__(self):
        self.seen = False
        self._previous = None

    def _handler(self, signum, frame):
        self.seen = True
        raise KeyboardInterrupt

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGINT, self._handler)
        except ValueError:  # not the main thread: leave signals alone
            self._previous = None
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        return False
