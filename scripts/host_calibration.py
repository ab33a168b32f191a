"""This host session's `make book` calibration: prints "<sweep run> <microbench run or -> <dtype>".

The latest sweep of 'repeat', 'open' and 'edit' written in this boot, and the latest kernel
microbenchmark of its SKU in this boot; a run of another boot is another host session and is
never used. Exits with a message where `make book` has not run in this boot.
"""
import sys
from datetime import datetime, timezone

from specbench.engine.hardware import host_fingerprint
from specbench.store.runs import load_runs

boot = host_fingerprint()["boot_id"]
STALE_HOURS = 2


def here(run) -> bool:
    return (run.manifest.get("host") or {}).get("boot_id") == boot


book = [r for r in load_runs(kind="sweep") if here(r)
        and sorted(r.manifest["grid"]["workloads"]) == ["edit", "open", "repeat"]]
if not book:
    raise SystemExit("no `make book` sweep of this host session (this boot) in runs/: run "
                     "`make book` first")
calibration = book[-1]
# A step's time drifts on a shared machine within one boot (on the Intel host of 2026-12-05 the
# batch-1 decode step took 57.5 ms in the 07:50 `make book` and 46.3 ms in the 13:01 one): an
# old calibration still gives speedups, but the load prediction's absolute times are its steps'.
age_h = (datetime.now(timezone.utc)
         - datetime.fromisoformat(calibration.manifest["started_at"])).total_seconds() / 3600
if age_h > STALE_HOURS:
    print(f"note: the calibration {calibration.run_id} is {age_h:.1f} h old; run `make book` "
          "again for predictions of absolute latency under load", file=sys.stderr)
micro = [r for r in load_runs(kind="microbench") if here(r) and r.sku == calibration.sku]
print(calibration.path, micro[-1].path if micro else "-", calibration.manifest["dtype"])
