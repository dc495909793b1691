"""Run every policy on the same pool and trace; collect the metrics of each and the oracle lower bound."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from sim.engine import MINUTES_PER_MONTH, JobsWorkload, SimSettings, Simulation, default_horizon
from sim.policies import Controller, GpuLoan, all_policies
from sim.pool import PoolSpec
from sim.traces import JobsTrace


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): hand-checkable, always one of the values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[k - 1]


def oracle_gpu_hours(trace, horizon: int) -> float:
    """Work an instant, infinite, never-interrupted cluster would serve by the horizon."""
    if isinstance(trace, JobsTrace):
        limit = horizon * 60
        return sum(j.gpus * max(0.0, min(j.duration_s, limit - j.submit_s)) for j in trace.jobs) / 3600
    return sum(trace.gpus_demanded[:horizon]) / 60


@dataclass
class PolicyResult:
    name: str
    metrics: dict
    samples: list


def metrics_of(sim: Simulation, controller: Controller, oracle_cost: float, seconds: float) -> dict:
    c = sim.c
    total = c.guaranteed_usd + c.spot_usd + c.on_demand_usd
    wl = sim.workload
    out = {
        "name": controller.name,
        "total_cost_usd": round(total, 2),
        "guaranteed_cost_usd": round(c.guaranteed_usd, 2),
        "elastic_spot_cost_usd": round(c.spot_usd, 2),
        "elastic_on_demand_cost_usd": round(c.on_demand_usd, 2),
        "cost_over_oracle": round(total / oracle_cost, 3) if oracle_cost > 0 else None,
        "demand_gpu_hours": round(wl.demand_gpu_minutes / 60, 3),
        "gpu_hours_served": round(c.served_gpu_minutes / 60, 3),
        "unmet_gpu_hours": round(wl.unmet_gpu_minutes / 60, 3),
        "interruptions": c.spot_interruptions,
        "jobs_interrupted": c.jobs_interrupted,
        "busy_node_terminations": c.busy_terminations,
        "lost_gpu_hours": round(c.lost_gpu_minutes / 60, 3),
        "spot_launch_failures": c.spot_launch_failures,
        "node_launches": c.node_launches,
        "budget_months_exceeded": budget_months_exceeded(sim),
        "sim_seconds": round(seconds, 3),
    }
    if isinstance(wl, JobsWorkload):
        waits, never = wl.waits_minutes(sim.horizon)
        out.update(p50_wait_minutes=round(percentile(waits, 50), 1), p95_wait_minutes=round(percentile(waits, 95), 1),
                   p99_wait_minutes=round(percentile(waits, 99), 1), jobs=len(waits), jobs_never_started=never,
                   jobs_larger_than_pool=wl.larger_than_pool)
    else:
        out.update(p50_wait_minutes=None, p95_wait_minutes=None, p99_wait_minutes=None)
    out["ticks_skipped"] = sim.ticks_skipped
    if isinstance(controller, GpuLoan):
        out["decide_calls"] = controller.calls
        out["decisions_by_reason"] = dict(sorted(controller.reasons.items()))
    return out


def budget_months_exceeded(sim: Simulation) -> int | None:
    """Simulated 730-hour months whose spend exceeded the pool budget (a partial last month: pro rata)."""
    budget = sim.spec.budget_monthly_usd
    if budget is None:
        return None
    exceeded = 0
    for month, usd in sim.c.monthly_usd.items():
        covered = min(MINUTES_PER_MONTH, sim.horizon - month * MINUTES_PER_MONTH) / MINUTES_PER_MONTH
        if usd > budget * covered + 1e-6:
            exceeded += 1
    return exceeded


def run_one(spec: PoolSpec, trace, controller: Controller, settings: SimSettings = SimSettings(),
            horizon: int | None = None, progress=None) -> tuple[Simulation, dict]:
    horizon = horizon if horizon is not None else default_horizon(trace)
    oracle_cost = oracle_gpu_hours(trace, horizon) * spec.oracle_usd_per_gpu_hour
    t0, c0 = time.perf_counter(), time.process_time()
    sim = Simulation(spec, trace, controller, settings, horizon).run(progress)
    m = metrics_of(sim, controller, oracle_cost, time.perf_counter() - t0)
    m["sim_cpu_seconds"] = round(time.process_time() - c0, 3)
    return sim, m


def compare(spec: PoolSpec, trace, settings: SimSettings = SimSettings(), policies: list[Controller] | None = None,
            horizon: int | None = None, progress=None) -> dict:
    """The JSON document of `gpuloan simulate`: every policy on the same pool and trace, plus the oracle."""
    horizon = horizon if horizon is not None else default_horizon(trace)
    oracle_hours = oracle_gpu_hours(trace, horizon)
    results, series = [], {}
    policies = policies if policies is not None else all_policies(spec)
    for k, controller in enumerate(policies):
        cb = None
        if progress is not None:
            cb = lambda now, total, k=k: progress(k * total + now, len(policies) * total, controller.name)  # noqa: E731
        sim, m = run_one(spec, trace, controller, settings, horizon, cb)
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
            if settings.spot_interruptions_per_month is not None else spec.spot_interruptions_per_month,
            "spot_unavailable_episodes_per_week": settings.spot_unavailable_episodes_per_week,
            "spot_unavailable_mean_hours": settings.spot_unavailable_mean_hours,
        },
        "oracle_gpu_hours": round(oracle_hours, 3),
        "oracle_cost_usd": round(oracle_hours * spec.oracle_usd_per_gpu_hour, 2),
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
