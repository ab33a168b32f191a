"""``specbench plan --calibration RUN --workload-file FILE.jsonl``: the operator's answer for
their own prompts on this host — γ or speculation off per batch size, and the flags to paste.

Every user error (a malformed prompt file, a calibration that is not this host's `make book`
sweep, a γ the calibration cannot carry) is one line naming the file or value, exit 2, before
the engine starts. The plan writes nothing: it prints (``--json`` for a machine).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from specbench.cli.predict import open_calibration
from specbench.report.plan import own_prompts
from specbench.store.runs import Run, load_runs, open_run

__all__ = ["run"]


def _fail(p: argparse.ArgumentParser, message: str):
    p.exit(2, f"{p.prog}: error: {message}\n")


def _check_calibration(path: Path) -> Run:
    """A finished `make book` sweep of this host's current boot."""
    from specbench.engine.hardware import host_fingerprint
    run = open_calibration(path)
    where = path / "manifest.json"
    if run.manifest["grid"]["gammas"] == [0]:
        raise ValueError(f"{where}: field grid/gammas is [0]: a γ=0 calibration has no step "
                         "cost; give this host's `make book` sweep (repeat, open, edit at γ "
                         "0/2/6)")
    mine, theirs = host_fingerprint(), run.manifest.get("host") or {}
    if not theirs.get("host_id") or theirs.get("host_id") != mine.get("host_id"):
        raise ValueError(f"{where}: field host/host_id is {theirs.get('host_id')!r}, this "
                         f"host's is {mine.get('host_id')!r}: a step cost holds for the machine "
                         "and boot that measured it; run `make book` here first")
    model = Path(run.manifest["model"]["path"])
    if not (model / "config.json").is_file():
        raise ValueError(f"{where}: field model/path is {str(model)!r}, which holds no "
                         "checkpoint here")
    return run


def _microbench(path: Path | None, calibration: Run) -> Run | None:
    """The microbenchmark named (same SKU), else the latest of the calibration's SKU and boot
    in the calibration's store; None where there is none (c then interpolates as a whole)."""
    if path is not None:
        run = open_run(path)
        if run.sku != calibration.sku:
            raise ValueError(f"{path / 'manifest.json'}: field sku is {run.sku!r}, the "
                             f"calibration's is {calibration.sku!r}")
        return run
    from specbench.store.hosts import host_sessions, latest_per_session
    micro = load_runs(calibration.path.parent.parent, kind="microbench")
    sessions = host_sessions([*micro, calibration])
    return latest_per_session(micro, sessions).get((calibration.sku,
                                                    sessions[calibration.run_id]))


def _inputs(args):
    """Everything the plan reads, checked before the engine starts (ValueError: one line)."""
    from specbench.measure.workloads.operator_file import FileSource
    from specbench.derive.analysis import run_cells
    calibration = _check_calibration(Path(args.calibration))
    source = FileSource(args.workload_file)
    micro = _microbench(Path(args.microbench) if args.microbench else None, calibration)
    cells = run_cells(calibration)
    verify = micro.table("verify.csv") if micro is not None else None
    if own_prompts.measured_costs(cells, verify).empty:
        raise ValueError(f"{calibration.path / 'cells.csv'}: no 'repeat' or 'edit' cell with "
                         "speculation to measure this host's step cost from")
    requests = source.candidates()[:args.prompts] if args.prompts else source.candidates()
    cost = _step_cost(args, calibration)
    return calibration, source, micro, cells, verify, requests, cost


def _step_cost(args, calibration):
    """The step-time model the load prediction charges, or None where no load is predicted.
    Asked for levels (--load-levels) on a calibration without step records is an error; the
    default levels are skipped with a note, so an older calibration still plans its batches."""
    from specbench.measure.load_prediction import DEFAULT_LOAD_LEVELS, step_cost
    if args.load_levels == ():
        if getattr(args, "step_probe", None) is not None:
            raise ValueError("argument --step-probe: it prices the load prediction, which "
                             "--load-levels '' skips")
        return None
    if getattr(args, "step_probe", None) is not None:
        cost = _probe_cost(args.step_probe, calibration)
        args.load_levels = args.load_levels or DEFAULT_LOAD_LEVELS
        return cost
    try:
        cost = step_cost(calibration)
    except ValueError as exc:
        if args.load_levels is not None:
            raise
        print(f"note: {exc}; the plan below is for the batch sizes only "
              "(--load-levels '' says so without this note)", file=sys.stderr)
        args.load_levels = ()
        return None
    if args.load_levels is None:
        args.load_levels = DEFAULT_LOAD_LEVELS
    return cost


def _probe_cost(path: Path, calibration: Run):
    """The step cost of a serving probe of the calibration's host session (ValueError: one
    line naming the file and field)."""
    from specbench.measure.load_prediction import server_step_cost
    from specbench.store.hosts import host_sessions
    probe = open_run(path)
    sessions = host_sessions([calibration, probe])
    if sessions[probe.run_id] != sessions[calibration.run_id]:
        raise ValueError(f"{path / 'manifest.json'}: field host is host session "
                         f"{sessions[probe.run_id]!r}, the calibration's is "
                         f"{sessions[calibration.run_id]!r}: a step cost holds for the machine "
                         "and boot that measured it")
    return server_step_cost(probe)


def run(args, p: argparse.ArgumentParser) -> int:
    import os

    from tqdm import tqdm

    # The answer is this command's stdout (JSON with --json): vLLM's in-process log lines, which
    # it writes to stdout by default, go to stderr with the progress bar.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

    from specbench.measure.acceptance_pass import acceptance_pass, engine_settings
    try:
        calibration, source, micro, cells, verify, requests, cost = _inputs(args)
    except (ValueError, FileNotFoundError) as exc:
        _fail(p, str(exc))
    gamma = max(args.gammas)
    settings = engine_settings(calibration.manifest, calibration.manifest["model"]["path"],
                               gamma)
    try:
        settings.validate()
    except (ValueError, FileNotFoundError) as exc:
        _fail(p, f"argument --gammas: {exc}")
    started = time.perf_counter()
    with tqdm(total=len(requests), desc=f"acceptance pass γ={gamma}", unit="prompt",
              file=sys.stderr, disable=args.json) as bar:
        result = acceptance_pass(settings, requests, args.max_tokens, source.sampling(), bar,
                                 probe_dynamic=args.dynamic_probe,
                                 count_only=source.candidates() if cost else ())
    if result.rows.empty:
        _fail(p, f"{args.workload_file}: no prompt fits the context of "
                 f"{settings.max_model_len} tokens with its output")
    table = own_prompts.predict_plan(result.rows, cells, verify, sorted(args.gammas),
                                     args.batches)
    recs = own_prompts.recommend_per_batch(table)
    load = _load(args, calibration, settings, result, cost) if cost else None
    answer = _answer(calibration, micro, settings, table, recs, result,
                     time.perf_counter() - started, load)
    print(json.dumps(answer, default=_jsonable) if args.json else _text(answer, table, recs))
    return 0


def _load(args, calibration, settings, result, cost) -> dict:
    """Every arm at every load level, predicted through vLLM's scheduler for the server
    `make plan-under-load` starts (the serving harness's engine settings)."""
    from tqdm import tqdm

    from specbench.engine.vllm_engine import EngineSettings
    from specbench.measure import load_prediction
    model = calibration.manifest["model"]["path"]
    server = EngineSettings(model=model, gamma=0, dtype=settings.dtype)
    engine = {k: getattr(server, k) for k in ("max_num_seqs", "max_model_len",
                                              "cpu_kvcache_gib", "enable_prefix_caching",
                                              "prompt_lookup_min", "prompt_lookup_max")}
    arms = (len(args.gammas) + 2) * len(args.load_levels)
    with tqdm(total=arms, desc="load through vLLM's scheduler", unit="arm-level",
              file=sys.stderr, disable=args.json) as bar:
        load = load_prediction.predict_load(model, settings.dtype, engine, result.rows,
                                            result.lengths, cost, sorted(args.gammas),
                                            args.load_levels, args.max_tokens, progress=bar)
    load["engine"] = engine
    return load


def _jsonable(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else str(value)


def _answer(calibration, micro, settings, table, recs, result, wall_s, load=None) -> dict:
    from specbench.engine.vllm_engine import engine_version, speculative_config_has
    from specbench.measure.load_prediction import static_gamma
    if load is None:                 # without a load prediction: the batch table's answer
        static = own_prompts.static_gamma(table)
        schedule = own_prompts.batch_schedule(recs, settings.max_num_seqs)
    else:                            # the running batch the scheduler predicts at each level
        static, schedule = static_gamma(load), load["batch_schedule"]
    model, dtype = calibration.manifest["model"]["path"], settings.dtype
    recorded = calibration.manifest["engine"]["settings"]
    has_schedule = speculative_config_has("num_speculative_tokens_per_batch_size")
    probe = result.dynamic
    answer = {
        "calibration": {"sweep": calibration.run_id, "sku": calibration.sku,
                        "microbench": micro.run_id if micro is not None else None},
        "pass": {"gamma": settings.gamma, "prompts": len(result.rows),
                 "skipped": result.skipped, "engine_start_s": round(result.startup_s, 1),
                 "pass_s": round(result.wall_s, 1), "command_s": round(wall_s, 1)},
        "predictions": table.to_dict(orient="records"),
        "recommendation": recs.to_dict(orient="records"),
        "static_gamma": static,
        "serve_static": own_prompts.serve_command(model, dtype, static, recorded,
                                                  max_num_seqs=settings.max_num_seqs),
        "batch_schedule": schedule,
        "serve_dynamic": (own_prompts.serve_command(model, dtype, max(g for *_, g in schedule),
                                                    recorded, schedule, settings.max_num_seqs)
                          if schedule and has_schedule else None),
        "engine": {**engine_version(), "has_batch_schedule": has_schedule,
                   "schedule_probe": None if probe is None else {
                       "schedule": [list(e) for e in probe.schedule], "batch": probe.batch,
                       "tokens_per_draft_batch_1": probe.per_draft_batch1,
                       "tokens_per_draft_batched": probe.per_draft_batched,
                       "error": probe.error, "honoured": probe.honoured}},
    }
    if load is not None:
        answer["load"] = _served_load(answer, load)
    answer["drafts"] = _drafts(calibration)
    return answer


def _drafts(calibration: Run) -> list[dict]:
    """The draft models this host's draft sweeps measured, as candidates beside n-gram
    (:mod:`specbench.report.plan.drafts`), each with the speculative config to paste."""
    from specbench.report.plan.drafts import draft_candidates, speculative_config
    from specbench.store.hosts import host_session_of
    root = calibration.path.parent.parent
    session = host_session_of(calibration, load_runs(root, kind="draft-sweep"))
    rows = draft_candidates(calibration.sku, session, root).to_dict(orient="records")
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            | {"speculative_config": (speculative_config(row["draft_path"], row["gamma"])
                                      if row["draft_path"] else None)} for row in rows]


def _served_load(answer: dict, load: dict) -> dict:
    """The load prediction with its 'plan' arm as the serving run will serve it: the schedule
    where the engine honours it, else the static γ's arm."""
    from specbench.measure.load_prediction import arm_name
    from specbench.measure.serving.config import plan_arm
    arm = plan_arm(answer)
    if arm.schedule:
        return load
    served = arm_name(arm.gamma)
    fixed = [a for a in load["arms"] if a["arm"] != "plan"]
    return load | {"arms": fixed + [a | {"arm": "plan"} for a in fixed if a["arm"] == served],
                   "plan_served_as": served}


def _interval(point, low, high) -> str:
    r = own_prompts.rounded
    return f"{r(point)} [{r(low)}, {r(high)}]"


def _text(answer: dict, table, recs) -> str:
    p = answer["pass"]
    r = own_prompts.rounded
    lines = [f"plan for {p['prompts']} prompts on {answer['calibration']['sku']}, calibration "
             f"{answer['calibration']['sweep']} (step cost), microbenchmark "
             f"{answer['calibration']['microbench'] or 'none (c linear in γ)'}",
             f"acceptance: one untimed pass at γ={p['gamma']} ({p['pass_s']:.0f} s, engine start "
             f"{p['engine_start_s']:.0f} s; {len(p['skipped'])} prompts too long skipped); "
             f"smaller γ from its per-position counters; command {p['command_s']:.0f} s",
             "", "predicted speedup over no speculation [90 % interval: prompts resampled, "
             "step cost over the calibration's cells]"]
    gammas = sorted(table["gamma"].unique())
    lines.append("batch " + "".join(f"{'γ=' + str(g):>20}" for g in gammas) + "   step cost")
    for b, mine in table.groupby("batch"):
        mine = mine.set_index("gamma")
        cells = "".join(
            f"{_interval(mine.loc[g, 'speedup'], mine.loc[g, 'low'], mine.loc[g, 'high']):>20}"
            for g in gammas)
        lines.append(f"{b:>5} {cells}   {mine['batch_basis'].iloc[0]}")
    for g, mine in table.groupby("gamma"):
        if mine["gamma_basis"].iloc[0] != "measured":
            lines.append(f"  step cost at γ={g}: {mine['gamma_basis'].iloc[0]} (the "
                         "calibration measured γ=" + ", ".join(
                             str(x) for x in sorted(table.loc[table['gamma_basis'] == 'measured',
                                                              'gamma'].unique())) + ")")
    lines += ["", "recommendation per batch size:"]
    for rec in recs.itertuples():
        sure = "" if rec.certain else " (the interval crosses 1)"
        lines.append(f"  batch {rec.batch}: " + (
            f"γ={rec.gamma}, {r(rec.speedup)}× [{r(rec.low)}, {r(rec.high)}]{sure}"
            if rec.gamma else f"speculation off (best γ={rec.best_gamma}: "
                              f"{r(rec.best_speedup)}× [{r(rec.best_low)}, {r(rec.best_high)}])"
                              f"{sure}"))
    lines += ["", "paste (one γ for every load, the best geometric mean over the batches):",
              "  " + (answer["serve_static"]
                      or "speculation off: vllm serve without --speculative-config")]
    return "\n".join(lines + _dynamic_text(answer) + _load_text(answer.get("load"))
                     + _drafts_text(answer["drafts"]))


def _dynamic_text(answer: dict) -> list[str]:
    """The batch-size schedule to paste, and whether this engine honours it."""
    e, r, lines = answer["engine"], own_prompts.rounded, []
    probe = e["schedule_probe"]
    if not e["has_batch_schedule"]:
        lines.append(f"dynamic speculation: this build ({e['name']} {e['version']}) has no "
                     "SpeculativeConfig.num_speculative_tokens_per_batch_size")
    elif answer["batch_schedule"] is None:
        lines.append("dynamic speculation: off at every batch size, no schedule")
    else:
        lines += ["paste (γ per batch size, vLLM's dynamic speculation; "
                  + ("ranges from the running batch predicted at each load level):"
                     if answer.get("load") else "each planned batch's γ up to the next):"),
                  f"  {answer['serve_dynamic']}"]
        if probe is None:
            lines.append(f"  whether {e['name']} {e['version']} honours it for n-gram here: not "
                         "measured (--no-dynamic-probe)")
        elif probe["error"]:
            lines.append(f"  {e['name']} {e['version']} refused a schedule at engine start: "
                         f"{probe['error']}")
        else:
            verdict = {True: "honoured", False: "NOT honoured", None: "not decided"}[
                probe["honoured"]]
            lines.append(f"  {verdict} by {e['name']} {e['version']} for n-gram here, measured: "
                         f"under the schedule {probe['schedule']} the counters read "
                         f"{r(probe['tokens_per_draft_batch_1'])} tokens per draft at batch 1, "
                         f"{r(probe['tokens_per_draft_batched'])} at batch {probe['batch']} "
                         "(its requests finish apart: the last steps run at batch 1)")
    return lines


def _level(x: float) -> str:
    """A crossover concurrency: 'never' above the levels, 'below' under the lowest."""
    return "never" if x == math.inf else "below" if x == -math.inf else own_prompts.rounded(x)


def _load_text(load: dict | None) -> list[str]:
    """Per load level: each arm's predicted time per output token, and the crossover."""
    if not load:
        return []
    r = own_prompts.rounded
    arms = list(dict.fromkeys(a["arm"] for a in load["arms"]))
    lines = ["", f"under load ({load['requests']} requests a level, closed loop; "
                 f"{load['basis']}): predicted median ms per output token [90 %]",
             "concurrency" + "".join(f"{name:>24}" for name in arms) + "   running batch"]
    for level in load["levels"]:
        here = {a["arm"]: a for a in load["arms"] if a["concurrency"] == level}
        cells = "".join(f"{_interval(here[n]['tpot_ms'], here[n]['tpot_lo'], here[n]['tpot_hi']) if here[n]['held'] else 'not held':>24}"  # noqa: E501
                        for n in arms)
        best = next((b for b in load["schedule_from"] if b["concurrency"] == level), None)
        lines.append(f"{level:>11}{cells}   " + (f"{r(best['running_batch'])} ({best['best_arm']})"
                                                   if best else "—"))
    lines += [f"  level {a['concurrency']}, {a['arm']}: {a['why']}" for a in load["arms"]
              if not a["held"]]
    cross = load["crossover"]
    lines.append(f"speculation stops paying at concurrency {_level(cross['point'])} "
                 f"[{_level(cross['low'])}, {_level(cross['high'])}] (levels "
                 f"{load['levels'][0]}–{load['levels'][-1]})")
    if load.get("plan_served_as"):
        lines.append(f"the plan is served as {load['plan_served_as']} (its schedule is not "
                     "honoured by this engine)")
    return lines


def _drafts_text(drafts: list[dict]) -> list[str]:
    """Each measured draft depth and batch: its best measured speedup and whether it is a
    candidate, with the break-even acceptance it would need where it is not."""
    if not drafts:
        return ["", "draft models: none measured on this CPU (`make measure-drafts` measures "
                    "two layer-truncated drafts)"]
    r = own_prompts.rounded
    lines = ["", f"draft models ({drafts[0]['session_basis']}'s `make measure-drafts`; their "
                 "acceptance was read on its Spec-Bench prompts, not on yours):"]
    for d in drafts:
        even = (f"it breaks even at {r(d['break_even'])}" if d["break_even"] is not None
                else "no acceptance breaks even at its cost")
        verdict = ("a candidate: it ran faster than no speculation" if d["candidate"] else
                   f"not a candidate: per-position α {r(d['alpha'])} where {even}")
        lines.append(f"  depth {d['depth']}, batch {d['batch']}: best γ={d['gamma']}, "
                     f"{r(d['speedup'])}× (any workload at most {r(d['best_any'])}×); {verdict}")
    best = max(drafts, key=lambda d: d["speedup"])
    if best["speculative_config"]:
        lines.append(f"  to serve the best of them (depth {best['depth']}): --speculative-config "
                     f"'{best['speculative_config']}'")
    return lines
