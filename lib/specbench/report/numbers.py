"""What every chapter's numbers are made of: :class:`Numbers` (named values for a chapter's
prose — numbers, words chosen by :mod:`specbench.report.wording` from the data, sentences
guarded by :func:`wording.claim` — and the ids of the runs they came from), :func:`glue_all`,
and the shared pieces the chapters' functions use (greedy cells, the first SKU, regimes,
phrases). Each chapter's own ``numbers()`` lives in :mod:`specbench.report.chapters`; values two
chapters share live beside this module (:mod:`specbench.report.findings`,
:mod:`specbench.report.headline`, :mod:`specbench.report.floor`).

Every function reads the run store at ``root`` (default: ``$SPECBENCH_RUNS``, else ``runs/``).
The prose quotes the first SKU of the store; figures and tables show every SKU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specbench.derive.decompose import decompose
from specbench.derive import analysis
from specbench.report import curves, wording
from specbench.store.cache import memoised
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs

__all__ = ["Numbers", "glue_all", "greedy_cells", "greedy", "QUOTED_GRID", "first_sku", "run_ids",
           "sweep_run", "latest_floor", "floor_split", "pct", "spread", "against_base",
           "count_phrase", "penalty", "step_counts", "regime_table", "regime_sentence",
           "regime_summary", "count_of", "error_word", "range_phrase", "direction_phrase",
           "batch1_verify_cost"]


@dataclass
class Numbers:
    """A chapter's named values and the run ids they were computed from."""
    values: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)
    tables: dict = field(default_factory=dict)   # shown by the chapter, never glued

    def __getitem__(self, name):
        return self.values[name]

    def add(self, runs=(), **values) -> None:
        self.values.update(values)
        self.runs += [r for r in runs if r not in self.runs]

    def merge(self, other: "Numbers") -> "Numbers":
        """This chapter's numbers with another function's (keys must not collide)."""
        clash = set(self.values) & set(other.values)
        if clash:
            raise ValueError(f"number names defined twice: {sorted(clash)}")
        self.add(runs=other.runs, **other.values)
        return self

    @property
    def run_list(self) -> str:
        return ", ".join(f"`{r}`" for r in self.runs) if self.runs else "none"


def glue_all(numbers: Numbers) -> Numbers:
    """Glue every value (and ``runs``, the run ids as text) for the chapter's prose."""
    from myst_nb import glue
    for name, value in numbers.values.items():
        glue(name, value, display=False)
    glue("runs", ", ".join(numbers.runs) or "none", display=False)
    for kind in ("sweep", "hostfloor"):
        glue(f"{kind}_runs", ", ".join(r for r in numbers.runs if r.startswith(kind + "-"))
             or "none", display=False)
    return numbers


# -- shared pieces -------------------------------------------------------------------------

def greedy_cells(root, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Greedy cells: temperature cells stay out while the engine fails the lossless test
    (the acceptance chapter reports them). Of ``cells`` where the caller has them (the
    chapter's own :func:`analysis.sweep_cells`, greedy or not), else of the store's."""
    return greedy(analysis.sweep_cells(root) if cells is None else cells)


def greedy(cells: pd.DataFrame) -> pd.DataFrame:
    return cells[cells["temperature"] == 0] if "temperature" in cells else cells


QUOTED_GRID = {(w, b) for w in ("repeat", "open") for b in (1, 4)}


def first_sku(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells the prose quotes: the first SKU in the store whose greedy cells cover
    'repeat' and 'open' at batches 1 and 4 with speculation (else simply the first SKU)."""
    if "temperature" in cells:
        cells = cells[cells["temperature"].fillna(0) == 0]
    for sku in dict.fromkeys(cells["sku"]):
        c = cells[(cells["sku"] == sku) & (cells["gamma"] > 0)]
        if QUOTED_GRID <= set(zip(c["workload"], c["batch"], strict=True)):
            return cells[cells["sku"] == sku]
    return cells[cells["sku"] == cells["sku"].iloc[0]]


def run_ids(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["run_id"]))


def sweep_run(root, run_id: str) -> Run:
    return next(r for r in load_runs(root, kind="sweep") if r.run_id == run_id)


def latest_floor(root, sku: str) -> Run | None:
    floors = [r for r in load_runs(root, kind="hostfloor") if r.sku == sku]
    return floors[-1] if floors else None


def floor_split(run: Run):
    """(per-step rows small then large, family shares, layers by model label)."""
    per_step, families = decompose(run.table("steps.csv"), run.table("families.csv"))
    layers = {m["label"]: m["shape"]["layers"] for m in run.manifest.get("models", [])}
    small_first = per_step.assign(size=per_step["wall_ms"]).sort_values("size")
    return small_first.drop(columns="size").reset_index(drop=True), families, layers


def pct(x) -> float:
    return float(100 * x)


def spread(row) -> float:
    return wording.spread_pct(row["pot_ms_min"], row["pot_ms_max"], row["pot_ms"])


def against_base(spec: pd.DataFrame, cells: pd.DataFrame) -> pd.Series:
    """Per speculative cell: 'slower'/'faster'/'within noise' against its γ=0 cell."""
    words = []
    for _, row in spec.iterrows():
        base = cells[(cells["sku"] == row["sku"]) & (cells["workload"] == row["workload"])
                     & (cells["batch"] == row["batch"]) & (cells["gamma"] == 0)].iloc[0]
        words.append(wording.compare(row["pot_ms"], spread(row), base["pot_ms"], spread(base),
                                     faster=True))
    return pd.Series(words, index=spec.index)


def count_phrase(words: pd.Series) -> str:
    """'slower in 2, within noise in 4 of the 6 cells'."""
    counts = words.value_counts()
    parts = [f"{w} in {counts[w]}" for w in ("slower", "within noise", "faster") if w in counts]
    return ", ".join(parts) + f" of the {len(words)} cells"


def penalty(run: Run, workload: str) -> float:
    return float(run.manifest["workloads"]["sampling"][workload].get("repetition_penalty", 1.0))


def step_counts(root, cells: pd.DataFrame) -> pd.DataFrame:
    frames = []
    for run_id in run_ids(cells):
        counts = curves.step_counts(sweep_run(root, run_id).table("reps.csv"))
        frames.append(counts.assign(run_id=run_id))
    return pd.concat(frames, ignore_index=True)


@memoised
def regime_table(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per SKU: the measured compute and host-exposed shares of a decode step of the
    sweep's model (latest host-floor run) and the regime they put the SKU in."""
    cells = greedy_cells(root) if cells is None else cells
    rows = []
    for sku, group in cells.groupby("sku", sort=False):
        floor = latest_floor(root, sku)
        share = np.nan
        run = "—"
        if floor is not None:
            per_step, _, _ = floor_split(floor)
            share, run = float(per_step["host_share"].iloc[0]), floor.run_id
        rows.append({"SKU": group["sku_label"].iloc[0], "host-floor run": run,
                     "compute share %": pct(1 - share), "host-exposed share %": pct(share),
                     "regime": wording.regime(share)})
    return pd.DataFrame(rows)


def regime_sentence(table: pd.DataFrame) -> str:
    parts = []
    for _, r in table.iterrows():
        if r["host-floor run"] == "—":
            parts.append(f"{r['SKU']} has no host-floor run, so its regime is not measured")
        else:
            parts.append(f"on {r['SKU']} a decode step of the sweep's model is "
                         f"{r['compute share %']:.0f} % compute and "
                         f"{r['host-exposed share %']:.0f} % host-exposed — {r['regime']}")
    text = "; ".join(parts)
    return text[0].upper() + text[1:]


def regime_summary(table: pd.DataFrame) -> str:
    """What the host-floor runs found, over every SKU, in one sentence that does not grow with
    the store: the SKUs with a run counted (one named when it is the only one), the shares as
    a range, and how many SKUs have none."""
    measured = table[table["host-floor run"] != "—"]
    missing = len(table) - len(measured)
    if measured.empty:
        return f"none of the {len(table)} SKUs has a host-floor run, so no regime is measured"
    regimes = sorted(set(measured["regime"]))
    compute = range_phrase(measured["compute share %"].min(), measured["compute share %"].max())
    host = range_phrase(measured["host-exposed share %"].min(),
                        measured["host-exposed share %"].max())
    where = (f"on the one SKU with a host-floor run ({measured['SKU'].iloc[0]}),"
             if len(measured) == 1 else f"on the {len(measured)} SKUs with a host-floor run,")
    verdict = (regimes[0] if len(regimes) == 1 else
               f"{(measured['regime'] == 'host-dominated').sum()} of them host-dominated")
    rest = (f"; {missing} SKUs have none"
            if missing > 1 else "; the other SKU has none" if missing == 1 else "")
    return (f"{where} a decode step is {compute} % compute and {host} % host-exposed — "
            f"{verdict}{rest}")


def count_of(holds: dict[str, bool]) -> str:
    """'4 of 8 SKUs' ('every one of the 8 SKUs', 'none of the 8 SKUs'): where a claim holds,
    by count; the per-SKU detail is a table's."""
    k, total = sum(holds.values()), len(holds)
    if total == 1:
        return "the one SKU" if k else "not the one SKU"
    return (f"every one of the {total} SKUs" if k == total else
            f"none of the {total} SKUs" if k == 0 else f"{k} of {total} SKUs")


def error_word(a: float, b: float) -> str:
    """How a model with mean error ``a`` compares with one with mean error ``b``."""
    if a == b:
        return "exactly as well as"
    close = "slightly " if abs(a - b) < wording.CLOSE_ERRORS_PCT else ""
    return close + ("better than" if a < b else "worse than")


def range_phrase(lo: float, hi: float, fmt: str = ".0f") -> str:
    """'5.3–7.1', or one number when both ends print the same."""
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}–{b}"


def direction_phrase(cost: pd.DataFrame) -> str:
    """Does the roofline over- or under-charge the measured step, per γ?"""
    over = cost[cost["roofline_cost"] > cost["measured_cost"]]["gamma"].astype(int).tolist()
    under = cost[cost["roofline_cost"] <= cost["measured_cost"]]["gamma"].astype(int).tolist()
    if over and under:
        return (f"in both directions — under-charging at γ={', '.join(map(str, under))} and "
                f"over-charging at γ={', '.join(map(str, over))}")
    return "by over-charging at every γ" if over else "by under-charging at every γ"


# -- claims over every SKU ------------------------------------------------------------------

#: Eq. 1 "fits" a batch-1 cell when it is within this many percent of the measurement.
EQ1_FIT_PCT = 15.0


def batch_ablation(cells: pd.DataFrame, batch: int) -> pd.DataFrame:
    """Per SKU (label): MAPE of eq. 1 with the roofline's d, with d = 0 and of the
    acceptance-blind model over the SKU's greedy speculative cells at this batch."""
    abl = curves.error_ablation(cells)
    abl = abl[abl["batch"] == batch]
    return curves.mape_by(abl, by=["sku_label"]).set_index("sku_label")


def batch1_verify_cost(cells: pd.DataFrame) -> pd.DataFrame:
    """Per SKU (label) whose kernels were microbenchmarked: the largest batch-1 verify cost d
    over its greedy speculative cells, and the γ of that cell (``d_max``, ``gamma``)."""
    c = cells[(cells["gamma"] > 0) & (cells["batch"] == 1)]
    c = c[c["d_source"] == "microbenchmark"] if "d_source" in c else c.iloc[0:0]
    top = c.loc[c.groupby("sku_label", sort=False)["d"].idxmax()]
    return top.set_index("sku_label")[["d", "gamma"]].rename(columns={"d": "d_max"})


def batch4_against(cells: pd.DataFrame) -> dict[str, bool]:
    """Per SKU: does batch 4 go against the thesis — eq. 1 no better than the acceptance-blind
    model, or beaten by eq. 1 with the verify cost ignored (d = 0)?"""
    m = batch_ablation(cells, 4)
    return {s: bool(r["eq1_abs_pct"] >= r["blind_abs_pct"]
                    or r["eq1_d0_abs_pct"] < r["eq1_abs_pct"])
            for s, r in m.iterrows()}


def roofline_worse_than_zero(cells: pd.DataFrame) -> dict[str, bool]:
    """Per SKU: is the batch-4 verify cost predicted worse by the frozen roofline than by
    ignoring it (eq. 1 with d = 0)?"""
    m = batch_ablation(cells, 4)
    return {s: bool(r["eq1_abs_pct"] > r["eq1_d0_abs_pct"]) for s, r in m.iterrows()}


def roofline_both_directions(cells: pd.DataFrame) -> dict[str, bool]:
    """Per SKU: on 'repeat' at batch 4 (every step drafts), does the roofline under-charge the
    measured step at some γ and over-charge it at another?"""
    cost = curves.cycle_costs(cells)
    r4 = cost[(cost["workload"] == "repeat") & (cost["batch"] == 4)]
    return {s: direction_phrase(g).startswith("in both directions")
            for s, g in r4.groupby("sku_label", sort=False)}


def eq1_fits_batch1(cells: pd.DataFrame) -> dict[str, bool]:
    """Per SKU: is eq. 1 within :data:`EQ1_FIT_PCT` of every greedy speculative batch-1 cell?"""
    abl = curves.error_ablation(cells)
    b1 = abl[abl["batch"] == 1]
    return {s: bool(g["eq1_abs_pct"].max() <= EQ1_FIT_PCT)
            for s, g in b1.groupby("sku_label", sort=False)}
