"""A vLLM general plugin that makes every process vLLM starts die with the process that started it.

**Why.** ``vllm.LLM`` runs its engine core in a child process (``VLLM::EngineCore``), which runs
the model in a child of its own (``VLLM::Worker``). When the harness that created the engine (a
``specbench sweep``, a test) is SIGKILLed, nothing runs in it to stop them: the worker notices its
parent through vLLM's death pipe only once the engine core is gone, and the engine core has no
such check — both were seen alive hours later, holding cores another measurement needed.

**How.** Linux's ``prctl(PR_SET_PDEATHSIG, sig)`` asks the kernel to send ``sig`` to a process
when its parent dies. vLLM calls every ``vllm.general_plugins`` entry point at the start of every
process it starts (the engine core in ``EngineCore.__init__``, the worker in
``WorkerWrapperBase.init_worker``, and the harness or API server while it builds the config), so
:func:`register` runs in each of them. The chain harness → engine core → worker then unwinds
link by link: each process's own signal fires when the one above it dies.

**Which processes.** The harness names itself: :func:`arm` puts its pid in :data:`ENV` (the
engine adapter does so before ``vllm.LLM`` starts, the server adapter in the environment of
``vllm serve``), and children inherit the environment. A process whose pid *is* that pid is the
harness: it never gets the signal (it must outlive nothing). Every other process sets it — unless
something already set one (the server adapter starts ``vllm serve`` with SIGTERM, so the API
server can stop its engine politely; that choice is kept).

**SIGKILL, not SIGTERM.** vLLM handles SIGTERM in the engine core and the worker by starting a
graceful shutdown: the handler runs only in the main thread between bytecodes, and the shutdown
then waits on workers and on a front end that no longer exists — the state in which processes
lingered. Once the harness is gone nothing in these processes is worth saving (its results went
with it; step records are flushed every step), and SIGKILL cannot be caught, blocked or delayed.
What SIGKILL skips is vLLM's clean-up; its shared-memory queues are reclaimed by Python's
resource tracker, which exits when the last process using it has died.

**A parent that died first.** The signal is only sent for deaths *after* the ``prctl``; a parent
that died in between (the harness SIGKILLed while the engine core was importing vLLM) leaves the
child reparented to init, where it would live on. So after setting the signal, a child checks
that the harness is still among its ancestors — which covers the whole chain: if the engine core
lost the harness before its own ``prctl``, it kills itself, and a worker that lost the engine core
no longer has the harness above it either. (A harness that is a child subreaper would adopt its
orphans and pass this check; none here is.)

**Forked children.** A child started by ``fork`` without ``exec`` (vLLM's default start method
off the CPU) inherits vLLM's "plugins already loaded" flag and never calls :func:`register`, and
Linux clears the signal across ``fork``. An ``os.register_at_fork`` hook sets it in every such
child of a process where the lifeline is on, for forks made by the main thread only: Linux sends
the signal when the parent *thread* exits, and a child forked by a short-lived thread would die
with that thread. (Processes started with ``spawn``, as vLLM does on the CPU, are started from
their parent's main thread here: ``vllm.LLM`` and vLLM's executor.)

Off (:data:`ENV` unset, empty or ``off``) :func:`register` does nothing. Linux only; elsewhere
it does nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

__all__ = ["ENV", "SIGNAL", "ENTRY_POINT", "LifelineError", "arm", "harness_pid", "register",
           "parent_death_signal"]

ENV = "SPECBENCH_LIFELINE"
SIGNAL = signal.SIGKILL
ENTRY_POINT = f"{__name__}:register"
_PR_SET_PDEATHSIG = 1
_PR_GET_PDEATHSIG = 2
# Resolved once, before any fork: loading a library in a forked child can deadlock.
_prctl = None
_fork_hook_installed = False
_forking: dict[str, object] = {"pid": None, "main_thread": False}


class LifelineError(ValueError):
    """The environment names no usable harness pid."""


def arm(environ=None) -> dict:
    """Name the calling process as the harness in ``environ`` (default ``os.environ``): the
    processes started with that environment die when it dies. Returns ``environ``."""
    environ = os.environ if environ is None else environ
    environ[ENV] = str(os.getpid())
    return environ


def harness_pid(environ=None) -> int | None:
    """The harness pid :data:`ENV` names, or ``None`` when the lifeline is off."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if value in ("", "off"):
        return None
    if not value.isdigit() or int(value) <= 1:
        raise LifelineError(f"{ENV}={value!r}: expected the pid of the process the engine's "
                            "processes die with (specbench.engine.lifeline.arm sets it), or 'off'")
    return int(value)


def _libc_prctl():
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _prctl


def parent_death_signal() -> int:
    """The signal this process gets when its parent dies (0: none; always 0 off Linux)."""
    prctl = _libc_prctl()
    if prctl is None:
        return 0
    value = ctypes.c_int(0)
    prctl(_PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0)
    return value.value


def _set_parent_death_signal() -> None:
    """Set :data:`SIGNAL` unless a signal is already set (a deliberate choice of whoever
    started this process)."""
    prctl = _libc_prctl()
    if prctl is not None and parent_death_signal() == 0:
        if prctl(_PR_SET_PDEATHSIG, int(SIGNAL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _ancestors(pid: int) -> list[int]:
    """Parent, grandparent, … of ``pid`` up to init, read from ``/proc``."""
    chain = []
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                # pid (comm) state ppid …; comm may hold spaces and parentheses
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        chain.append(pid)
    return chain


def _die(reason: str) -> None:
    print(f"specbench lifeline: pid {os.getpid()} exits: {reason}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), SIGNAL)


def _before_fork() -> None:
    _forking["pid"] = os.getpid()
    _forking["main_thread"] = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    """In a forked child (no exec): the signal, then the same check as :func:`register` —
    here the parent is known exactly, so a changed ``getppid`` means it already died."""
    if not _forking["main_thread"] or harness_pid() is None:
        return
    _set_parent_death_signal()
    if os.getppid() != _forking["pid"]:
        _die(f"its parent {_forking['pid']} died before the lifeline was set")


def _install_fork_hook() -> None:
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _fork_hook_installed = True


def register() -> None:
    """vLLM's ``vllm.general_plugins`` entry point (and safe to call anywhere, any number of
    times): in a process started under an armed harness, die when the parent dies."""
    harness = harness_pid()
    if harness is None or _libc_prctl() is None:
        return
    _install_fork_hook()
    if os.getpid() == harness:
        return  # the harness itself: it dies with nothing
    _set_parent_death_signal()
    if harness not in _ancestors(os.getpid()):
        _die(f"its harness (pid {harness}) is no longer among its ancestors: a process between "
             "them died before the lifeline was set")
