"""Host sessions: which runs one machine measured in one boot.

Two hosts of one CPU kind have measured a γ=0 step twofold apart while their manifests' CPU
fields read the same, so a calibration (t_base, the verify cost, the step cost) holds for the
host session that measured it, not for the CPU kind. A run written since the manifest records
its host (``manifest["host"]``, :func:`specbench.engine.hardware.host_fingerprint`) belongs to
the session of its boot id. Older runs carry no fingerprint: they are grouped per SKU into
measuring periods, a new period starting where a run started more than
:data:`PERIOD_GAP_HOURS` after the previous one of that SKU finished (long enough that a
night of back-to-back runs on one machine, over seven hours, stays one session).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from specbench.store.runs import Run

__all__ = ["PERIOD_GAP_HOURS", "host_sessions", "host_session_of", "latest_per_session"]

PERIOD_GAP_HOURS = 12


def _when(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None


def _boot_session(run: Run) -> str | None:
    host = run.manifest.get("host") or {}
    return f"boot-{host['boot_id'][:8]}" if host.get("boot_id") else None


def host_sessions(runs: list[Run]) -> dict[str, str]:
    """Run id → host session id, for every run given (any kind, any SKU). A fingerprinted run's
    session is its boot; an older run's is its SKU's measuring period, named after the period's
    first day (``period-<sku>-<YYYYMMDD>``)."""
    sessions: dict[str, str] = {}
    period_end: dict[str, tuple[datetime, str]] = {}
    for run in sorted(runs, key=lambda r: r.manifest["started_at"]):
        boot = _boot_session(run)
        if boot:
            sessions[run.run_id] = boot
            continue
        start = _when(run.manifest["started_at"])
        end = _when(run.manifest.get("finished_at")) or start
        last = period_end.get(run.sku)
        if last is None or start - last[0] > timedelta(hours=PERIOD_GAP_HOURS):
            last = (end, f"period-{run.sku}-{start:%Y%m%d}")
        period_end[run.sku] = (max(end, last[0]), last[1])
        sessions[run.run_id] = last[1]
    return sessions


def host_session_of(run: Run, runs: list[Run]) -> str:
    """The host session of one run among the store's runs."""
    return host_sessions([*runs, run] if run not in runs else runs)[run.run_id]


def latest_per_session(runs: list[Run], sessions: dict[str, str],
                       kind: str = "microbench") -> dict[tuple[str, str], Run]:
    """(SKU, host session) → the latest run of ``kind`` there: the one rule for which kernel
    microbenchmark a host session's cells take (another host's kernels are not its own)."""
    ordered = sorted((r for r in runs if r.manifest["kind"] == kind
                      and sessions.get(r.run_id) is not None),
                     key=lambda r: r.manifest["started_at"])
    return {(r.sku, sessions[r.run_id]): r for r in ordered}
