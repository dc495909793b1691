"""Run every policy on the same pool and trace; collect the metrics of each and the oracle lower bound."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from sim.engine import SimSettings, Simulation, default_horizon
from sim.controllers.gpuloan import WARM_UP_NAME, WHAT_IF_NAMES
from sim.controllers.base import Controller
from sim.controllers.lineup import all_policies
from sim.metrics import elastic_oracle_gpu_hours, mean_sd, metrics_of, oracle_gpu_hours, whole_node_gpu_hours
from sim.pool import PoolSpec, demand_profile, with_floor


@dataclass
class PolicyResult:
    name: str
    metrics: dict
    samples: list


def run_one(
    spec: PoolSpec,
    trace,
    controller: Controller,
    settings: SimSettings = SimSettings(),
    horizon: int | None = None,
    progress=None,
) -> tuple[Simulation, dict]:
    horizon = horizon if horizon is not None else default_horizon(trace)
    oracle_cost = oracle_gpu_hours(trace, horizon) * spec.oracle_usd_per_gpu_hour
    elastic_oracle = elastic_oracle_gpu_hours(demand_profile(trace, horizon), spec.floor_gpus)
    t0, c0 = time.perf_counter(), time.process_time()
    sim = Simulation(spec, trace, controller, settings, horizon).run(progress)
    m = metrics_of(
        sim, controller, oracle_cost, time.perf_counter() - t0, elastic_oracle * spec.oracle_usd_per_gpu_hour
    )
    m["sim_cpu_seconds"] = round(time.process_time() - c0, 3)
    return sim, m


def compare(
    spec: PoolSpec,
    trace,
    settings: SimSettings = SimSettings(),
    policies: list[Controller] | None = None,
    horizon: int | None = None,
    progress=None,
) -> dict:
    """The JSON document of `gpuloan simulate`: every policy on the same pool and trace, plus the oracle."""
    horizon = horizon if horizon is not None else default_horizon(trace)
    oracle_hours = oracle_gpu_hours(trace, horizon)
    results, series = [], {}
    policies = policies if policies is not None else all_policies(spec)
    for k, controller in enumerate(policies):
        cb = None
        if progress is not None:
            cb = lambda now, total, k=k: progress(k * total + now, len(policies) * total, controller.name)  # noqa: E731
        # The design notes' threshold script measures utilization on the 1-2 reserved cards it assumes: on a
        # pool without them it runs with its own floor (the row says so in floor_nodes).
        own = spec
        needed = getattr(controller, "floor_nodes_needed", 0)
        if spec.floor_nodes < needed:
            own = with_floor(spec, needed)
        sim, m = run_one(own, trace, controller, settings, horizon, cb)
        results.append(m)
        series[controller.name] = sim.samples
    return {
        "trace": trace.name,
        "trace_format": trace.fmt,
        "pool": spec.describe(),
        "horizon_minutes": horizon,
        "seed": settings.seed,
        "sim_settings": {
            "provisioning_delay_minutes": settings.provisioning_delay_minutes,
            "checkpoint_interval_minutes": settings.checkpoint_interval_minutes,
            "spot_warning_minutes": settings.spot_warning_minutes,
            "spot_interruptions_per_month": settings.spot_interruptions_per_month
            if settings.spot_interruptions_per_month is not None
            else spec.spot_interruptions_per_month,
            "spot_unavailable_episodes_per_week": settings.spot_unavailable_episodes_per_week,
            "spot_unavailable_mean_hours": settings.spot_unavailable_mean_hours,
            "metric_delay_minutes": settings.metric_delay_minutes,
            "spot_interruptions": "common random numbers per spot slot (the same events for every policy)",
        },
        "oracle_gpu_hours": round(oracle_hours, 3),
        "oracle_cost_usd": round(oracle_hours * spec.oracle_usd_per_gpu_hour, 2),
        # The oracle in whole nodes: every minute ceil(demand / GPUs per node) nodes, as if running jobs could
        # be repacked for free at every minute. No placement of whole jobs on whole nodes pays less.
        "whole_node_bound_cost_usd": round(
            whole_node_gpu_hours(trace, horizon, spec.gpus_per_node) * spec.oracle_usd_per_gpu_hour, 2
        ),
        "policies": results,
        "_series": series,  # for the plot; dropped from the JSON output
    }


def dominated_by(doc: dict, name: str = "gpuloan") -> list[str]:
    """Baselines both cheaper and with a lower p95 wait (or less unmet work in series mode) than `name`."""
    ours = next(p for p in doc["policies"] if p["name"] == name)
    key = "p95_wait_minutes" if ours.get("p95_wait_minutes") is not None else "unmet_gpu_hours"
    out = []
    for p in doc["policies"]:
        if p["name"].startswith("gpuloan"):
            continue
        if p["total_cost_usd"] < ours["total_cost_usd"] and p[key] < ours[key]:
            out.append(p["name"])
    return out


def jobs_larger_than(trace, peak_gpus: int) -> dict:
    """Jobs that need more GPUs than a pool can ever hold (they never run): their count, of how many jobs, and
    their sizes (GPUs -> jobs, keys as text for JSON). A series has no jobs."""
    jobs = getattr(trace, "jobs", ())
    sizes: dict[int, int] = {}
    for j in jobs:
        if j.gpus > peak_gpus:
            sizes[j.gpus] = sizes.get(j.gpus, 0) + 1
    return {
        "count": sum(sizes.values()),
        "of_jobs": len(jobs),
        "pool_peak_gpus": peak_gpus,
        "sizes": {str(g): k for g, k in sorted(sizes.items())},
    }


def larger_jobs_words(big: dict) -> str:
    """'all 3 jobs' / '3 of 120 jobs' need more GPUs than the pool's peak of 8 (2 x 16 GPUs, 1 x 32 GPUs)."""
    sizes = ", ".join(f"{k} x {g} GPUs" for g, k in big["sizes"].items())
    who = f"all {big['count']} jobs" if big["count"] == big["of_jobs"] else f"{big['count']} of {big['of_jobs']} jobs"
    return f"{who} need more GPUs than the pool's peak of {big['pool_peak_gpus']} ({sizes})"


def single_verdict(doc: dict, name: str = "gpuloan") -> str:
    """The one-line verdict of `gpuloan simulate` (one seed): dominated when a baseline is both cheaper and
    serves better; otherwise which baselines wait less and what that costs, so a longer wait never reads as
    clean; and the minutes the budget cap held a wanted scale-up, whatever else is said."""
    ours = next(p for p in doc["policies"] if p["name"] == name)
    key = "p95_wait_minutes" if ours.get("p95_wait_minutes") is not None else "unmet_gpu_hours"
    what = "p95 wait" if key == "p95_wait_minutes" else "unmet GPU-h"
    unit = " min" if key == "p95_wait_minutes" else ""
    dom = dominated_by(doc, name)
    parts = []
    if dom:
        parts.append(f"{name} is dominated (cheaper and better {what}) by: {', '.join(dom)}")
    else:
        better = [p for p in doc["policies"] if not p["name"].startswith("gpuloan") and p[key] < ours[key]]
        if better:
            parts.append(
                f"no baseline is both cheaper and better than {name}, but "
                + "; ".join(
                    f"{p['name']} has a lower {what} ({p[key]:g} vs {ours[key]:g}{unit}) for "
                    f"${p['total_cost_usd'] - ours['total_cost_usd']:+,.0f}"
                    for p in better
                )
            )
        else:
            parts.append(f"no baseline is both cheaper and better ({what}) than {name}")
    held = ours.get("budget_cap_held_minutes") or 0
    if held:
        parts.append(f"the budget cap held {name}'s scale-ups for {held:,} minutes")
    return "; ".join(parts)


# --- several seeds -------------------------------------------------------------------------------------------

SUMMARY_METRICS = (
    "total_cost_usd",
    "cost_over_oracle",
    "elastic_cost_over_oracle",
    "mean_wait_minutes",
    "p50_wait_minutes",
    "p95_wait_minutes",
    "unmet_gpu_hours",
    "interruptions",
    "node_launches",
)


def compare_seeds(
    spec: PoolSpec,
    trace,
    settings: SimSettings = SimSettings(),
    seeds: int = 3,
    horizon: int | None = None,
    policies=None,
    progress=None,
) -> dict:
    """`compare` for seeds settings.seed .. settings.seed + seeds - 1 (common random numbers: in each seed every
    policy meets the same interruption and shortage events), then per policy the mean and standard deviation of
    each metric across seeds, and a verdict of `gpuloan` against every baseline. `policies`: a function
    returning fresh controllers, called once per seed (None: all_policies)."""
    from dataclasses import replace

    policies = policies or (lambda: None)
    runs = []
    for k in range(seeds):
        cb = None
        if progress is not None:
            cb = lambda done, total, name, k=k: progress(k * total + done, seeds * total, name)  # noqa: E731
        doc = compare(spec, trace, replace(settings, seed=settings.seed + k), policies(), horizon, cb)
        doc.pop("_series")
        runs.append(doc)
    return summarize(runs)


def summarize(runs: list[dict]) -> dict:
    """One document from `compare` documents of the same pool and trace under several seeds."""
    summary = []
    for i, first in enumerate(runs[0]["policies"]):
        row = {"name": first["name"], "floor_nodes": first["floor_nodes"]}
        for key in SUMMARY_METRICS:
            values = [r["policies"][i][key] for r in runs]
            if any(v is None for v in values):
                row[key] = row[key + "_sd"] = None
                continue
            row[key], row[key + "_sd"] = (round(x, 3) for x in mean_sd([float(v) for v in values]))
        summary.append(row)
    doc = {k: v for k, v in runs[0].items() if k not in ("policies", "seed")}
    doc.update(seeds=[r["seed"] for r in runs], summary=summary, runs=[r["policies"] for r in runs])
    doc["verdicts"] = verdicts(doc, "gpuloan") + verdicts(doc, "gpuloan-defaults")
    for name in WHAT_IF_NAMES:
        doc["verdicts"] += verdicts(doc, name)
    if WARM_UP_NAME in [p["name"] for p in doc["summary"]] and "gpuloan" in [p["name"] for p in doc["summary"]]:
        doc["verdicts"].append(verdict_between(doc, WARM_UP_NAME, "gpuloan"))
    return doc


def _paired(runs: list[list[dict]], ours: int, theirs: int, key: str) -> tuple[float, float] | None:
    """Mean of the per-seed differences ours - theirs, and the noise band around it: two standard errors of
    those differences (about a 95 % interval). With common random numbers the differences vary far less from
    seed to seed than either policy does, which is what lets a few seeds rank policies a few percent apart."""
    diffs = [r[ours][key] - r[theirs][key] for r in runs]
    if any(d is None for d in diffs):
        return None
    mean, sd = mean_sd(diffs)
    return mean, 2 * sd / math.sqrt(len(diffs)) if len(diffs) > 1 else math.inf


def _outcome(paired: tuple[float, float] | None, rel_floor: float) -> str:
    """'better' / 'worse' for ours (lower is better), or 'tie' when the difference is within the noise band (or
    below rel_floor, the smallest difference worth reporting)."""
    if paired is None:
        return "tie"
    mean, noise = paired
    if abs(mean) <= max(noise, rel_floor):
        return "tie"
    return "better" if mean < 0 else "worse"


def verdicts(doc: dict, ours_name: str) -> list[dict]:
    """For `ours_name` against each baseline that serves anything: cost and service (p95 wait on job traces,
    unmet GPU-hours on series), each better / worse / within the noise, and one sentence."""
    names = [p["name"] for p in doc["summary"]]
    if ours_name not in names:
        return []
    out = []
    for i, name in enumerate(names):
        if name.startswith("gpuloan") or name == ours_name:
            continue
        if doc["summary"][i]["floor_nodes"] != doc["summary"][names.index(ours_name)]["floor_nodes"]:
            continue  # another pool (the threshold script's own floor): not a like-for-like comparison
        out.append(verdict_between(doc, ours_name, name))
    return out


def verdict_between(doc: dict, ours_name: str, name: str) -> dict:
    """One verdict of `ours_name` against `name` over the seeds of a summarized document (see verdicts)."""
    names = [p["name"] for p in doc["summary"]]
    ours, i = names.index(ours_name), names.index(name)
    runs = doc["runs"]
    jobs = doc["summary"][ours]["p95_wait_minutes"] is not None
    service = "p95_wait_minutes" if jobs else "unmet_gpu_hours"
    cost = _paired(runs, ours, i, "total_cost_usd")
    wait = _paired(runs, ours, i, service)
    base_cost = doc["summary"][i]["total_cost_usd"] or 0.0
    c = _outcome(cost, 0.0)
    w = _outcome(wait, 0.05 if jobs else 0.0)  # p95 waits are rounded to 0.1 min
    if len(runs) < 2:
        text = "one seed: no noise estimate"
    elif c == "tie" and w == "tie":
        text = "within the noise"
    elif c != "worse" and w != "worse":
        text = f"{ours_name} better"
    elif c != "better" and w != "better":
        text = f"{ours_name} dominated"
    else:
        text = "trade-off"
    return {
        "ours": ours_name,
        "baseline": name,
        "verdict": text,
        "cost": c,
        "service": w,
        "service_metric": service,
        "cost_diff_usd": round(cost[0], 2) if cost else None,
        "cost_noise_usd": round(cost[1], 2) if cost and math.isfinite(cost[1]) else None,
        "cost_diff_pct": round(100 * cost[0] / base_cost, 2) if cost and base_cost else None,
        "service_diff": round(wait[0], 3) if wait else None,
        "service_noise": round(wait[1], 3) if wait and math.isfinite(wait[1]) else None,
    } | _mean_wait(runs, ours, i, jobs)


def _mean_wait(runs: list[list[dict]], ours: int, theirs: int, jobs: bool) -> dict:
    """The mean job wait's paired difference: reported beside the verdict, which stays on cost and p95."""
    if not jobs or any(r[k].get("mean_wait_minutes") is None for r in runs for k in (ours, theirs)):
        return {}
    diff = _paired(runs, ours, theirs, "mean_wait_minutes")
    return {
        "mean_wait_diff": round(diff[0], 3) if diff else None,
        "mean_wait_noise": round(diff[1], 3) if diff and math.isfinite(diff[1]) else None,
    }
