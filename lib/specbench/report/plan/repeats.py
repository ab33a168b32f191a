"""How far a serving measurement repeats on one host: the same fixed servers, on the same
prompts, at the same closed-loop levels, measured by two or more plan-under-load runs of one
host session.

A load prediction and a plan's regret are judged against one serving run. When the same
measurement is taken again, it moves; two numbers say by how much:

* **spread** — for each fixed server (speculation off and each fixed γ; the plan's own server
  may run another schedule in each run) and level, the percent difference of its median time
  per output token in a later run against an earlier one, over every pair of runs;
* **repeat regret** — at each level, the fastest fixed server of one run, served again in
  another run of the same measurement: its median over that run's fastest, minus one. That is
  what a plan that had been exactly right about one run would be charged by the next.

A goal finer than these is finer than the host repeats: a miss of that size is the host's, not
the model's.
"""
from __future__ import annotations

from itertools import combinations, permutations

import numpy as np
import pandas as pd

from specbench.report.plan.under_load import has_plan
from specbench.store.hosts import host_sessions
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.theory.errors import percent_error

__all__ = ["repeat_groups", "fixed_medians", "spread", "repeat_regrets", "repeat_summary",
           "repeat_values"]


def _signature(run: Run, session: str) -> tuple:
    """What makes two serving runs the same measurement: host session, prompts, levels."""
    grid, dataset = run.manifest["grid"], run.manifest.get("dataset", {})
    files = dataset.get("workload_files") or {}
    prompts = tuple(sorted((name, entry.get("sha256")) for name, entry in files.items()))
    return (run.sku, session, prompts or tuple(grid.get("workloads", ())),
            tuple(grid.get("concurrencies", ())))


def repeat_groups(root=DEFAULT_ROOT) -> list[list[Run]]:
    """Serving runs with a plan that repeat one measurement, in groups of two or more (oldest
    first)."""
    planned = [r for r in load_runs(root, kind="serving") if has_plan(r)]
    sessions = host_sessions(planned)
    groups: dict[tuple, list[Run]] = {}
    for run in planned:
        groups.setdefault(_signature(run, sessions[run.run_id]), []).append(run)
    return [runs for runs in groups.values() if len(runs) > 1]


def fixed_medians(run: Run) -> pd.Series:
    """Median time per output token (ms) of each fixed server at each closed-loop level,
    indexed by (arm, concurrency)."""
    requests = run.table("requests.csv")
    closed = requests[(requests["mode"] == "concurrency") & (requests["arm"] != "plan")]
    medians = closed.groupby(["arm", "level"])["tpot_ms"].median()
    medians.index = medians.index.set_names(["arm", "concurrency"])
    return medians


def spread(groups: list[list[Run]]) -> pd.DataFrame:
    """One row per pair of runs × fixed server × level: the later run's median against the
    earlier's, in percent."""
    rows = []
    for runs in groups:
        medians = {r.run_id: fixed_medians(r) for r in runs}
        for earlier, later in combinations(runs, 2):
            both = pd.concat([medians[earlier.run_id], medians[later.run_id]], axis=1,
                             keys=["earlier", "later"]).dropna()
            rows.append(both.assign(
                earlier_run=earlier.run_id, later_run=later.run_id,
                moved_pct=percent_error(both["later"], both["earlier"])).reset_index())
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def repeat_regrets(groups: list[list[Run]]) -> pd.DataFrame:
    """One row per ordered pair of runs × level: the first run's fastest fixed server and the
    regret it pays in the second (percent)."""
    rows = []
    for runs in groups:
        medians = {r.run_id: fixed_medians(r).unstack("arm") for r in runs}
        for chosen_in, served_in in permutations(runs, 2):
            picked, served = medians[chosen_in.run_id], medians[served_in.run_id]
            for level in picked.index.intersection(served.index):
                arm = picked.loc[level].idxmin()
                rows.append({"chosen_in": chosen_in.run_id, "served_in": served_in.run_id,
                             "concurrency": int(level), "arm": arm,
                             "regret_pct": float(percent_error(served.loc[level, arm],
                                                               served.loc[level].min()))})
    return pd.DataFrame(rows)


def repeat_summary(groups: list[list[Run]]) -> dict:
    """How far the repeats moved: runs, groups, the spread's median and worst absolute
    percent, and the repeat regret's median and worst (NaN without a repeat)."""
    moved, regret = spread(groups), repeat_regrets(groups)
    absolute = moved["moved_pct"].abs() if len(moved) else pd.Series(dtype=float)
    regrets = regret["regret_pct"] if len(regret) else pd.Series(dtype=float)
    return {"runs": sum(len(g) for g in groups), "groups": len(groups),
            "skus": len({g[0].sku for g in groups}),
            "pairs": len(moved), "spread_median_pct": float(np.median(absolute))
            if len(absolute) else np.nan,
            "spread_worst_pct": float(absolute.max()) if len(absolute) else np.nan,
            "regret_median_pct": float(regrets.median()) if len(regrets) else np.nan,
            "regret_worst_pct": float(regrets.max()) if len(regrets) else np.nan}


def repeat_values(plan_regret_median_pct: float, load_worst_goal_pct: float,
                  root=DEFAULT_ROOT) -> dict:
    """The planning chapter's sentences on the repeats: ``ld_repeat`` (the spread against the
    load goal's worst, and the repeat regret against the plan's) and ``pl_repeat_reading``
    (the findings' clause); both empty without a repeat in the store."""
    groups = repeat_groups(root)
    s = repeat_summary(groups)
    if not groups:
        return {"ld_repeat": "", "repeat_runs": [],
                "pl_repeat_reading": "no repeat of this measurement is stored to say how much "
                                     "of that is the host's noise"}
    spread_word = ("finer than" if s["spread_worst_pct"] > load_worst_goal_pct
                   else "within")
    if plan_regret_median_pct > s["regret_worst_pct"]:
        reading = "the plan's regret is its own choice, not the host's noise"
    elif plan_regret_median_pct <= s["regret_median_pct"]:
        reading = "the plan's regret is within what the host repeats"
    else:
        reading = "part of the plan's regret may be the host's noise"
    return {
        "repeat_spread_median_pct": s["spread_median_pct"],
        "repeat_spread_worst_pct": s["spread_worst_pct"],
        "repeat_regret_median_pct": s["regret_median_pct"],
        "repeat_regret_worst_pct": s["regret_worst_pct"],
        "ld_repeat": (
            f"The same measurement repeated ({s['runs']} serving runs, {s['groups']} groups of "
            f"one host session and one prompt file) moved a fixed server's median at a level "
            f"by a median {s['spread_median_pct']:.1f} % and at worst "
            f"{s['spread_worst_pct']:.1f} %: a worst of {load_worst_goal_pct:g} % is "
            f"{spread_word} what these hosts repeat. Each level's fastest fixed server of one "
            f"run, served in another, paid a median regret of {s['regret_median_pct']:.1f} % "
            f"(worst {s['regret_worst_pct']:.1f} %): {reading}."),
        "pl_repeat_reading": (
            f"a repeated measurement's own fastest server paid {s['regret_median_pct']:.1f} % "
            f"(median), so {reading}"),
        "repeat_runs": [r.run_id for g in groups for r in g],
    }
