"""Each chapter's numbers, words and guarded sentences, with the runs they came from.

One function per chapter (:func:`story`, :func:`regimes`, :func:`accuracy`,
:func:`host_floor`, :func:`measured`, :func:`model_limits`, :func:`overview`) returns a
:class:`Numbers`: named values for the chapter's prose — numbers, words chosen by
:mod:`specbench.report.wording` from the data, and sentences guarded by :func:`wording.claim` — and
the ids of the runs they were computed from. A chapter glues them all in one call,
:func:`glue_all`, and lists the run ids; so every number and qualitative word in the book has
one visible path back to a function here and to the runs it read.

Every function reads the run store at ``root`` (default: ``$SPECBENCH_RUNS``, else ``runs/``).
The prose quotes the first SKU of the store; figures and tables show every SKU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specbench.report import analysis

from specbench.report import curves

from specbench.measure import hostfloor

from specbench.theory import model

from specbench.report import transfer

from specbench.report import wording
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.report.wording import claim

__all__ = ["Numbers", "glue_all", "greedy", "story", "regimes", "accuracy", "host_floor", "measured",
           "model_limits", "overview", "regime_table"]


@dataclass
class Numbers:
    """A chapter's named values and the run ids they were computed from."""
    values: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)

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

def _cells(root) -> pd.DataFrame:
    """Greedy cells: temperature cells stay out while the engine fails the lossless test
    (the acceptance chapter reports them)."""
    return greedy(analysis.sweep_cells(root))


def greedy(cells: pd.DataFrame) -> pd.DataFrame:
    return cells[cells["temperature"] == 0] if "temperature" in cells else cells


QUOTED_GRID = {(w, b) for w in ("repeat", "open") for b in (1, 4)}


def _first(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells the prose quotes: the first SKU in the store whose greedy cells cover
    'repeat' and 'open' at batches 1 and 4 with speculation (else simply the first SKU)."""
    if "temperature" in cells:
        cells = cells[cells["temperature"].fillna(0) == 0]
    for sku in dict.fromkeys(cells["sku"]):
        c = cells[(cells["sku"] == sku) & (cells["gamma"] > 0)]
        if QUOTED_GRID <= set(zip(c["workload"], c["batch"])):
            return cells[cells["sku"] == sku]
    return cells[cells["sku"] == cells["sku"].iloc[0]]


def _run_ids(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["run_id"]))


def _sweep_run(root, run_id: str) -> Run:
    return next(r for r in load_runs(root, kind="sweep") if r.run_id == run_id)


def _latest_floor(root, sku: str) -> Run | None:
    floors = [r for r in load_runs(root, kind="hostfloor") if r.sku == sku]
    return floors[-1] if floors else None


def _floor_split(run: Run):
    """(per-step rows small then large, family shares, layers by model label)."""
    per_step, families = hostfloor.decompose(run.table("steps.csv"), run.table("families.csv"))
    layers = {m["label"]: m["shape"]["layers"] for m in run.manifest.get("models", [])}
    small_first = per_step.assign(size=per_step["wall_ms"]).sort_values("size")
    return small_first.drop(columns="size").reset_index(drop=True), families, layers


def _pct(x) -> float:
    return float(100 * x)


def _spread(row) -> float:
    return wording.spread_pct(row["pot_ms_min"], row["pot_ms_max"], row["pot_ms"])


def _against_base(spec: pd.DataFrame, cells: pd.DataFrame) -> pd.Series:
    """Per speculative cell: 'slower'/'faster'/'within noise' against its γ=0 cell."""
    words = []
    for _, row in spec.iterrows():
        base = cells[(cells["sku"] == row["sku"]) & (cells["workload"] == row["workload"])
                     & (cells["batch"] == row["batch"]) & (cells["gamma"] == 0)].iloc[0]
        words.append(wording.compare(row["pot_ms"], _spread(row), base["pot_ms"], _spread(base),
                                     faster=True))
    return pd.Series(words, index=spec.index)


def _count_phrase(words: pd.Series) -> str:
    """'slower in 2, within noise in 4 of the 6 cells'."""
    counts = words.value_counts()
    parts = [f"{w} in {counts[w]}" for w in ("slower", "within noise", "faster") if w in counts]
    return ", ".join(parts) + f" of the {len(words)} cells"


def _penalty(run: Run, workload: str) -> float:
    return float(run.manifest["workloads"]["sampling"][workload].get("repetition_penalty", 1.0))


def _step_counts(root, cells: pd.DataFrame) -> pd.DataFrame:
    frames = []
    for run_id in _run_ids(cells):
        counts = curves.step_counts(_sweep_run(root, run_id).table("reps.csv"))
        frames.append(counts.assign(run_id=run_id))
    return pd.concat(frames, ignore_index=True)


def regime_table(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per SKU: the measured compute and host-exposed shares of a decode step of the
    sweep's model (latest host-floor run) and the regime they put the SKU in."""
    cells = _cells(root) if cells is None else cells
    rows = []
    for sku, group in cells.groupby("sku", sort=False):
        floor = _latest_floor(root, sku)
        share = np.nan
        run = "—"
        if floor is not None:
            per_step, _, _ = _floor_split(floor)
            share, run = float(per_step["host_share"].iloc[0]), floor.run_id
        rows.append({"SKU": group["sku_label"].iloc[0], "host-floor run": run,
                     "compute share %": _pct(1 - share), "host-exposed share %": _pct(share),
                     "regime": wording.regime(share)})
    return pd.DataFrame(rows)


def _regime_sentence(table: pd.DataFrame) -> str:
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


# -- chapters ------------------------------------------------------------------------------

def overview(root=DEFAULT_ROOT) -> Numbers:
    """The front page: which regime each SKU is in, and what the data supports."""
    cells = _cells(root)
    table = regime_table(root, cells)
    n = Numbers()
    n.add(_run_ids(cells) + [r for r in table["host-floor run"] if r != "—"],
          regime_sentence=_regime_sentence(table), n_skus=len(table),
          thesis=_thesis(cells, table))
    return n


def _thesis(cells: pd.DataFrame, table: pd.DataFrame) -> str:
    """What these runs support, in one sentence chosen from the data."""
    spec = _first(cells)
    spec = spec[spec["gamma"] > 0]
    repeat_words = _against_base(spec[spec["workload"] == "repeat"], cells)
    open_words = _against_base(spec[spec["workload"] == "open"], cells)
    accepted_saves = (repeat_words == "faster").all()
    rejected_saves = (open_words == "faster").any()
    regimes = set(table["regime"])
    if accepted_saves and not rejected_saves:
        saving = ("the time per token falls only where drafts are accepted, so the saving is "
                  "set by the engine's acceptance counters")
    else:
        saving = ("the time per token does not follow acceptance alone here "
                  f"('repeat': {_count_phrase(repeat_words)} faster; "
                  f"'open': {_count_phrase(open_words)})")
    if regimes == {"host-dominated"}:
        cost = "the cost spread over the accepted tokens is a host-dominated step"
    elif "host-dominated" in regimes:
        cost = "the step is host-dominated on some SKUs and compute-dominated on others"
    else:
        cost = ("but the step whose cost speculation spreads is mostly compute here, so these "
                "runs show a per-step cost being amortized without telling host amortization "
                "from the amortization of weight streaming")
    return f"{saving[0].upper() + saving[1:]}; {cost}."


def story(root=DEFAULT_ROOT) -> Numbers:
    cells = _cells(root)
    first = _first(cells)
    spec = first[first["gamma"] > 0]
    run = _sweep_run(root, first["run_id"].iloc[0])
    table = regime_table(root, cells)
    n = Numbers()
    n.add(_run_ids(cells) + [r for r in table["host-floor run"] if r != "—"],
          sku=first["sku_label"].iloc[0], gamma_max=int(spec["gamma"].max()),
          open_penalty=_penalty(run, "open"), repeat_penalty=_penalty(run, "repeat"),
          regime_sentence=_regime_sentence(table), thesis=_thesis(cells, table))
    rep, opn = spec[spec["workload"] == "repeat"], spec[spec["workload"] == "open"]
    n.add(repeat_alpha_min=float(rep["alpha"].min()), open_alpha_max=float(opn["alpha"].max()))
    b1, b4 = spec[spec["batch"] == 1], spec[spec["batch"] == 4]
    rep1, opn1 = b1[b1["workload"] == "repeat"], b1[b1["workload"] == "open"]
    top = rep1.loc[rep1["gamma"].idxmax()]
    n.add(b1_repeat_speedup_max=float(top["speedup"]),
          b1_open_speedup_min=float(opn1["speedup"].min()),
          b1_open_speedup_max=float(opn1["speedup"].max()),
          b1_open_vs_base=_count_phrase(_against_base(opn1, cells)),
          b1_open_spread_max_pct=float(max(_spread(r) for _, r in
                                           first[(first["workload"] == "open")
                                                 & (first["batch"] == 1)].iterrows())))
    abl = curves.error_ablation(first)
    by_batch = abl.groupby("batch")[["eq1_abs_pct", "eq1_d0_abs_pct", "blind_abs_pct"]].mean()
    for b in by_batch.index:
        row = by_batch.loc[b]
        n.add(**{f"b{b}_mape_eq1": float(row["eq1_abs_pct"]),
                 f"b{b}_mape_blind": float(row["blind_abs_pct"]),
                 f"b{b}_mape_d0": float(row["eq1_d0_abs_pct"]),
                 f"b{b}_blind_vs_eq1": _error_word(row["blind_abs_pct"], row["eq1_abs_pct"]),
                 f"b{b}_d0_vs_best": _error_word(row["eq1_d0_abs_pct"],
                                                 min(row["eq1_abs_pct"], row["blind_abs_pct"]))})
    d1 = float(curves.roofline_d(b1).max())
    n.add(b1_d_max_pct=_pct(d1), b1_d_word=wording.size_word(d1),
          b4_d_max_pct=_pct(curves.roofline_d(b4).max()))
    cost = curves.cycle_costs(first)
    rep4 = cost[(cost["workload"] == "repeat") & (cost["batch"] == 4)].sort_values("gamma")
    n.add(b4_repeat_cost_lo=float(rep4["measured_cost"].min()),
          b4_repeat_cost_hi=float(rep4["measured_cost"].max()),
          b4_roofline_cost_lo=float(rep4["roofline_cost"].min()),
          b4_roofline_cost_hi=float(rep4["roofline_cost"].max()),
          b4_cost_word=wording.size_word(float(rep4["measured_cost"].min() - 1)),
          b4_roofline_direction=_direction_phrase(rep4))
    # Headings say which way the result goes, from the same numbers.
    b4_against = (n.values.get("b4_mape_eq1", 0) >= n.values.get("b4_mape_blind", np.inf)
                  or n.values.get("b4_mape_d0", np.inf) < n.values.get("b4_mape_eq1", 0))
    n.add(b4_heading="Against the thesis: batch 4." if b4_against else "For the thesis: batch 4.")
    floor = host_floor(root)
    if "host_ratio" in floor.values:
        n.add(floor.runs, host_ratio=floor["host_ratio"], host_invariance=floor["host_invariance"],
              floor_models=f"from {floor['small_label']} to {floor['large_label']}")
        n.add(floor_heading=("For the thesis: the host floor." if floor["host_invariance"]
                             == "model-size invariant" else "Against the thesis: the host floor."))
    else:
        n.add(host_ratio=float("nan"), host_invariance="not measured",
              floor_models="between model sizes", floor_heading="The host floor.")
    return n


def _error_word(a: float, b: float) -> str:
    """How a model with mean error ``a`` compares with one with mean error ``b``."""
    if a == b:
        return "exactly as well as"
    close = "slightly " if abs(a - b) < wording.CLOSE_ERRORS_PCT else ""
    return close + ("better than" if a < b else "worse than")


def _range(lo: float, hi: float, fmt: str = ".0f") -> str:
    """'5.3–7.1', or one number when both ends print the same."""
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}–{b}"


def _direction_phrase(cost: pd.DataFrame) -> str:
    """Does the roofline over- or under-charge the measured step, per γ?"""
    over = cost[cost["roofline_cost"] > cost["measured_cost"]]["gamma"].astype(int).tolist()
    under = cost[cost["roofline_cost"] <= cost["measured_cost"]]["gamma"].astype(int).tolist()
    if over and under:
        return (f"in both directions — under-charging at γ={', '.join(map(str, under))} and "
                f"over-charging at γ={', '.join(map(str, over))}")
    return "by over-charging at every γ" if over else "by under-charging at every γ"


def regimes(root=DEFAULT_ROOT) -> Numbers:
    cells = _cells(root)
    first = _first(cells)
    run = _sweep_run(root, first["run_id"].iloc[0])
    counts = _step_counts(root, first)
    n = Numbers()
    n.add(_run_ids(cells), sku0=first["sku_label"].iloc[0],
          open_penalty=_penalty(run, "open"), repeat_penalty=_penalty(run, "repeat"),
          n_sweeps=len(load_runs(root, kind="sweep")), n_shown=len(_run_ids(cells)))
    b1 = first[first["batch"] == 1]
    spec1 = b1[b1["gamma"] > 0]
    n.add(t_base_b1=float(b1[b1["gamma"] == 0]["pot_ms"].median()),
          b1_max_err_pct=float(spec1["err_eq1_pct"].abs().max()),
          b4_max_err_pct=float(first[(first["batch"] == 4) & (first["gamma"] > 0)]
                               ["err_eq1_pct"].abs().max()))
    for w in ("repeat", "open"):
        spec = first[(first["workload"] == w) & (first["gamma"] > 0)]
        c = counts[(counts["workload"] == w) & (counts["gamma"] > 0)]
        n.add(**{f"{w}_alpha_lo": float(spec["alpha"].min()),
                 f"{w}_alpha_hi": float(spec["alpha"].max()),
                 f"{w}_pot_lo": float(spec["pot_ms"].min()),
                 f"{w}_pot_hi": float(spec["pot_ms"].max()),
                 f"{w}_drafting_pct": _range(_pct(c["drafting_share"].min()),
                                             _pct(c["drafting_share"].max()), ".1f")})
    c1 = counts[(counts["workload"] == "open") & (counts["gamma"] > 0) & (counts["batch"] == 1)]
    row = c1.iloc[0]
    n.add(open_b1_drafting_steps=int(row["drafting_steps"] // first["n_reps"].iloc[0]),
          open_b1_steps=int(row["decode_steps"] // first["n_reps"].iloc[0]),
          open_b1_one_row_pct=_pct(1 - c1["drafting_share"].max()))
    spec = cells[cells["gamma"] > 0]
    n.add(emitted_bound=claim((spec["emitted_per_step"] <= spec["gamma"] + 1 + 1e-9).all(),
                              "a step emits at most γ+1 tokens",
                              "a cell's measured tokens per step exceeds γ+1"))
    spec_all = cells[cells["gamma"] > 0]
    per_sku = [f"{int((g['outputs_equal'] == False).sum())} of {len(g)} on {label}"  # noqa: E712
               for label, g in spec_all.groupby("sku_label", sort=False)]
    n.add(mismatch_sentence="; ".join(per_sku))
    return n


def accuracy(root=DEFAULT_ROOT) -> Numbers:
    cells = _cells(root)
    first = _first(cells)
    spec = first[first["gamma"] > 0]
    rep, opn = spec[spec["workload"] == "repeat"], spec[spec["workload"] == "open"]
    n = Numbers()
    n.add(_run_ids(cells), sku0=first["sku_label"].iloc[0], n_spec_cells=len(spec),
          mape_eq1_repeat=float(rep["err_eq1_pct"].abs().mean()),
          mape_eq1_open=float(opn["err_eq1_pct"].abs().mean()),
          mape_blind_repeat=float(rep["err_blind_pct"].abs().mean()),
          mape_blind_open=float(opn["err_blind_pct"].abs().mean()),
          signed_eq1_repeat=float(rep["err_eq1_pct"].mean()),
          under_share_repeat=_pct((rep["err_eq1_pct"] < 0).mean()),
          exact_mape=float(model.mape(spec["pred_exact_ms"], spec["pot_ms"])),
          mape_eq1_all=float(spec["err_eq1_pct"].abs().mean()))
    # The exact divisor: where the gap to αγ+1 comes from. Whether a proposer ever drafts
    # fewer than γ tokens is the engine's behaviour, not a law: computed, not guarded.
    short = spec["gamma"] * spec["drafts"] - spec["draft_tokens"]
    n.add(short_drafts_sentence=(
        "no step drafted fewer than γ tokens: draft tokens = γ × drafting steps in every cell"
        if (short == 0).all() else
        f"in {int((short != 0).sum())} of {len(spec)} cells some steps drafted fewer than γ "
        f"tokens ({int(short.clip(lower=0).sum())} draft tokens short in all), so short drafts "
        "explain part of the gap"))
    counts = _step_counts(root, first)
    rc = counts[(counts["workload"] == "repeat") & (counts["gamma"] > 0)]
    oc = counts[(counts["workload"] == "open") & (counts["gamma"] > 0)]
    n.add(repeat_nodraft_steps_max=int((rc["decode_steps"] - rc["drafting_steps"]).max()
                                       // first["n_reps"].iloc[0]),
          open_drafting_pct=_range(_pct(oc["drafting_share"].min()),
                                   _pct(oc["drafting_share"].max()), ".1f"),
          open_b4_drafting_pct=_range(_pct(oc[oc["batch"] == 4]["drafting_share"].min()),
                                      _pct(oc[oc["batch"] == 4]["drafting_share"].max()), ".1f"),
          max_tokens=int(_sweep_run(root, first["run_id"].iloc[0]).manifest["grid"]["max_tokens"]))
    # Per-cycle residual, with αγ+1 and with the exact divisor.
    cost = curves.cycle_costs(first)
    r1 = cost[(cost["workload"] == "repeat") & (cost["batch"] == 1)]
    n.add(residual_mean_ms=float(r1["residual_alpha_ms"].mean()),
          residual_min_ms=float(r1["residual_alpha_ms"].min()),
          residual_max_ms=float(r1["residual_alpha_ms"].max()),
          residual_exact_mean_ms=float(r1["residual_exact_ms"].mean()),
          residual_exact_drop_pct=_pct(1 - r1["residual_exact_ms"].mean()
                                       / r1["residual_alpha_ms"].mean()))
    floor = _latest_floor(root, first["sku"].iloc[0])
    if floor is not None:
        per_step, _, _ = _floor_split(floor)
        host_ms = float(per_step["host_ms"].iloc[0])
        n.add([floor.run_id], floor_host_ms=host_ms,
              residual_share_pct=_pct(r1["residual_exact_ms"].mean() / host_ms))
    else:
        n.add(floor_host_ms=float("nan"), residual_share_pct=float("nan"))
    # Batch 4: the verify cost, measured where every step drafts ('repeat').
    r4 = cost[(cost["workload"] == "repeat") & (cost["batch"] == 4)].sort_values("gamma")
    for _, row in r4.iterrows():
        g = int(row["gamma"])
        n.add(**{f"b4_cost_g{g}": float(row["measured_cost"]),
                 f"b4_roof_g{g}": float(row["roofline_cost"])})
    n.add(b4_gammas=", ".join(str(int(g)) for g in r4["gamma"]),
          b4_measured_costs=" / ".join(f"{v:.2f}" for v in r4["measured_cost"]),
          b4_roofline_costs=" / ".join(f"{v:.2f}" for v in r4["roofline_cost"]),
          b4_cost_word=wording.size_word(float(r4["measured_cost"].min() - 1)),
          b4_roofline_direction=_direction_phrase(r4),
          b1_d_word=wording.size_word(float(curves.roofline_d(spec[spec["batch"] == 1]).max())))
    # The ablation: eq. 1 with d = 0.
    abl = curves.mape_by(curves.error_ablation(first), by=["batch"]).set_index("batch")
    for b, row in abl.iterrows():
        n.add(**{f"b{b}_mape_eq1": float(row["eq1_abs_pct"]),
                 f"b{b}_mape_d0": float(row["eq1_d0_abs_pct"]),
                 f"b{b}_mape_blind": float(row["blind_abs_pct"]),
                 f"b{b}_blind_vs_eq1": _error_word(row["blind_abs_pct"], row["eq1_abs_pct"]),
                 f"b{b}_d0_vs_eq1": _error_word(row["eq1_d0_abs_pct"], row["eq1_abs_pct"])})
    # Shortfall split and timing-derived α: identities, guarded.
    parts = curves.shortfall_split(cells)
    total = parts.groupby(["sku", "batch", "gamma"])["value"].sum()
    ideal = parts.groupby(["sku", "batch", "gamma"])["ideal"].first()
    n.add(stack_identity=claim(np.allclose(total, ideal),
                               "each bar stacks to the ideal speedup αγ+1 given the counter α"))
    t = spec.dropna(subset=["alpha_timing"])
    back = t["t_base_ms"] * (1 + curves.roofline_d(t)) / (t["alpha_timing"] * t["gamma"] + 1)
    n.add(timing_identity=claim(np.allclose(back, t["pot_ms"]),
                                "it reproduces the latency by construction"))
    transfer_numbers = _transfer(cells)
    n.add(**transfer_numbers, transfer_pair=_pair_sentence(
        root, transfer_numbers.get("cal_run"), transfer_numbers.get("held_run")))
    return n


def _pair_sentence(root, cal_run=None, held_run=None) -> str:
    """What separates the two SKUs of the held-out test, from their manifests."""
    ids = [cal_run, held_run]
    if not (cal_run and held_run):
        return "Only one SKU is stored"
    a, b = (_sweep_run(root, i).manifest for i in ids)
    cpu = lambda m: (m["hardware"].get("gpus") or [{}])[0].get("name") or m["hardware"].get("cpu_model")  # noqa: E731
    if cpu(a) == cpu(b) and a["hardware"].get("threads") == b["hardware"].get("threads"):
        return (f"The two SKUs compared are the same hardware ({cpu(a)}, "
                f"{a['hardware'].get('threads')} thread(s)) in two dtypes, "
                f"{a.get('dtype')} and {b.get('dtype')}")
    return f"The two SKUs compared are different hardware: {cpu(a)} and {cpu(b)}"


def _transfer(cells: pd.DataFrame) -> dict:
    quoted = _first(cells)["sku"].iloc[0]
    skus = [quoted] + [s for s in dict.fromkeys(cells["sku"]) if s != quoted]
    if len(skus) < 2:
        nan = float("nan")
        return {"have_transfer": False, "cal_sku": cells["sku_label"].iloc[0], "held_sku": "—",
                "transfer_alpha_gap": nan, "transfer_eq1_mape": nan, "transfer_ratio_mape": nan,
                "transfer_winner": "—", "transfer_factor": nan,
                "transfer_meaning": "only one SKU is stored, so there is no held-out test yet"}
    try:
        t = transfer.held_out(cells, skus[0], skus[1])
    except ValueError:   # the next SKU shares no cell with the quoted one: try the others
        return _transfer(cells[cells["sku"] != skus[1]])
    gap = (t["alpha_transferred"] - t["alpha_own"]).abs().max()
    eq1 = float(t["model_err_pct"].abs().mean())
    ratio = float(t["ratio_err_pct"].abs().mean())
    label = dict(zip(cells["sku"], cells["sku_label"]))
    same = gap < 0.01
    run_of = dict(zip(cells["sku"], cells["run_id"]))
    return {"have_transfer": True, "cal_sku": label[skus[0]], "held_sku": label[skus[1]],
            "cal_run": run_of[skus[0]], "held_run": run_of[skus[1]],
            "transfer_alpha_gap": float(gap), "transfer_eq1_mape": eq1,
            "transfer_ratio_mape": ratio,
            "transfer_winner": "ratio transfer" if ratio < eq1 else "model",
            "transfer_factor": max(eq1, ratio) / min(eq1, ratio),
            "transfer_meaning": (
                "the counter α is the same in both runs, so the test does not exercise the "
                "transfer of α at all: it measures the roofline's error on the held-out SKU"
                if same else
                "α differs between the runs, so the test does exercise the transfer of α")}


def host_floor(root=DEFAULT_ROOT) -> Numbers:
    cells = _cells(root)
    floors = load_runs(root, kind="hostfloor")
    n = Numbers()
    if not floors:
        n.add(have_floor="no host-floor run yet")
        return n
    run = floors[-1]
    per_step, families, layers = _floor_split(run)
    small, large = per_step.iloc[0], per_step.iloc[1]
    n.add([run.run_id], have_floor="a stored host-floor run", floor_sku=run.sku,
          tokens_n=int(run.manifest["grid"]["tokens"][-1]),
          small_label=small["model"], large_label=large["model"])
    for name, row in (("small", small), ("large", large)):
        n.add(**{f"{name}_wall_ms": float(row["wall_ms"]),
                 f"{name}_compute_ms": float(row["compute_ms"]),
                 f"{name}_host_ms": float(row["host_ms"]),
                 f"{name}_host_pct": _pct(row["host_share"]),
                 f"{name}_compute_pct": _pct(1 - row["host_share"]),
                 f"{name}_unprofiled_ms": float(row["unprofiled_wall_ms"]),
                 f"{name}_regime": wording.regime(float(row["host_share"])),
                 f"{name}_layers": int(layers.get(row["model"], 0))})
    n.add(wall_identity=claim(np.allclose(per_step["compute_ms"] + per_step["host_ms"],
                                          per_step["wall_ms"]),
                              "compute plus host-exposed time is the step's wall time"))
    host_ratio = float(large["host_ms"] / small["host_ms"])
    n.add(compute_ratio=float(large["compute_ms"] / small["compute_ms"]), host_ratio=host_ratio,
          host_invariance=("model-size invariant" if abs(host_ratio - 1) * 100
                           < wording.MODEL_SIZE_INVARIANT_PCT else "not model-size invariant"),
          layers_sentence=_layers_sentence(int(layers.get(small["model"], 0)),
                                           int(layers.get(large["model"], 0))))
    fam = families.set_index(["model", "family"])["ms"]
    for name, row in (("small", small), ("large", large)):
        n.add(**{f"{name}_other_ops_ms": float(fam.get((row["model"], "host/other"), np.nan)),
                 f"{name}_outside_ms": float(fam.get((row["model"], hostfloor.OUTSIDE_OPERATORS),
                                                     np.nan))})
    base = cells[(cells["sku"] == run.sku) & (cells["gamma"] == 0) & (cells["batch"] == 1)
                 & (cells["workload"] == "repeat")]
    if len(base):
        sweep_step = float(base["pot_ms"].iloc[0])
        n.add(_run_ids(base), sweep_step_ms=sweep_step,
              sweep_agreement_pct=_pct(small["unprofiled_wall_ms"] / sweep_step - 1))
    else:
        n.add(sweep_step_ms=float("nan"), sweep_agreement_pct=float("nan"))
    return n


def _layers_sentence(small_layers: int, large_layers: int) -> str:
    if large_layers <= small_layers:
        return (f"The larger shape has fewer layers than the small model ({large_layers} "
                f"against {small_layers}), so dispatch paid per layer cannot be what grows")
    return (f"The larger shape also has more layers ({large_layers} against {small_layers}), "
            "so per-layer dispatch may contribute to the growth")


def measured(root=DEFAULT_ROOT) -> Numbers:
    runs = load_runs(root)
    cells = _cells(root)
    table = regime_table(root, cells)
    n = Numbers()
    sweeps = [r.run_id for r in runs if r.manifest["kind"] == "sweep"]
    n.add([r.run_id for r in runs], n_runs=len(runs), latest_sweep=sweeps[-1],
          regime_sentence=_regime_sentence(table))
    return n


def model_limits(d: float = 0.02, gammas=(2, 4, 6)) -> Numbers:
    """The model chapter's limits, evaluated by the library's own eq. 1 (no run needed)."""
    g = np.array(gammas, dtype=float)
    n = Numbers()
    n.add(illustrative_d_pct=_pct(d),
          zero_limit=claim(np.allclose(model.speedup(0.0, g, d), 1 / (1 + d))
                           and (model.speedup(0.0, g, d) <= 1).all(),
                           "Zero acceptance (α=0): S = 1/(1+d) ≤ 1"),
          full_limit=claim(np.allclose(model.speedup(1.0, g, d), (g + 1) / (1 + d)),
                           "Full acceptance (α→1): S → (γ+1)/(1+d)"),
          blind_constant=claim(np.allclose(1 / model.device_pass_latency(1.0, g), g + 1),
                               "it predicts γ+1 whatever α is"))
    return n


def published_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    """The published-reference comparison: one row per quantity, the published value and
    this project's value per SKU; the last row names the runs each column was computed from."""
    from specbench.theory import economics
    from specbench.report.reference import PUBLISHED
    cells = _cells(root)
    calibration = cells["sku"].iloc[0]
    ours, sources = {}, {}
    for sku, group in cells.groupby("sku", sort=False):
        label = group["sku_label"].iloc[0]
        h = analysis.headline(group)
        spec = group[group["gamma"] > 0]
        rep = spec[spec["workload"] == "repeat"]
        values = {**h,
                  "mape_eq1_repeat": rep["err_eq1_pct"].abs().mean(),
                  "mape_eq1_open": spec[spec["workload"] == "open"]["err_eq1_pct"].abs().mean(),
                  "residual_mean_ms": rep[rep["batch"] == 1]["residual_ms"].mean(),
                  **economics.worksheet_values()}
        used = _run_ids(group)
        if sku != calibration:   # held out: α from the first SKU
            held = transfer.held_out(cells, calibration, sku)
            values["transfer_mape"] = held["model_err_pct"].abs().mean()
            used = _run_ids(cells[cells["sku"] == calibration]) + used
        floor = _latest_floor(root, sku)
        if floor is not None:
            per_step, _, _ = _floor_split(floor)
            small, large = per_step.iloc[0], per_step.iloc[1]
            values.update(floor_host_ms=small["host_ms"], host_share_pct=100 * small["host_share"],
                          host_size_invariance_pct=100 * abs(large["host_ms"] / small["host_ms"] - 1))
            used.append(floor.run_id)
        ours[f"this project: {label}"] = values
        sources[f"this project: {label}"] = ", ".join(used)
    rows = []
    for key, quantity, value, unit, source in PUBLISHED:
        row = {"quantity": quantity, "published": f"{value:g}{unit}", "source": source}
        for column, values in ours.items():
            v = values.get(key)
            row[column] = "—" if v is None or pd.isna(v) else f"{v:.3g}{unit}"
        rows.append(row)
    rows.append({"quantity": "runs", "published": "—", "source": "A, B", **sources})
    return pd.DataFrame(rows)
