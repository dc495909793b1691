"""The figures of a run: what a simulated pool cost and served against the oracle's lower bound, its waits, its
months over budget, and the summaries of several seeds and of pending time.

One definition of each (issue 34): sim/runner.py's comparisons, sim/environment.py's organization runs and the
advisors (advise/) all take their figures from here. `EnvironmentRun` and its `PoolMetrics` are what one run of an
organization returns to the advisor and bench-org, the fluid bound's (sim/fluid.py) and the simulator's
(sim/environment.py, read by advise/org_advisor.py) alike: one frozen shape, read the same way for both models.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from pricing.cost_model import billing

from sim.engine import MINUTES_PER_MONTH, JobsWorkload, Simulation
from sim.pool import demand_profile
from sim.traces import JobsTrace


class ReportingController(Protocol):
    """What the figures read of a pool's controller (sim/controllers/base.py Controller has both): its name and its
    own account of its decisions. A protocol, not the class, so that the figures (and sim/environment.py, which
    reports them) never import the controllers (the import-linter contract `sim-world-not-controllers`)."""

    name: str

    def decision_figures(self) -> dict: ...


@dataclass(frozen=True)
class PoolMetrics:
    """One pool's figures over a run's report window (GPU-hours, counts). Both models fill every field; the one
    the fluid model cannot know is None there, and the events it rules out by construction are 0 (sim/fluid.py:
    work is fluid, a lent GPU comes back at once with nothing lost, nothing waits in a queue)."""

    floor_gpu_hours: float = 0.0
    floor_owned_gpu_hours: float = 0.0  # the owner's work on its floor
    floor_lent_gpu_hours: float = 0.0  # other pools' interruptible work on it
    borrowed_gpu_hours: float = 0.0  # this pool's interruptible work on other pools' floors
    borrowed_gpu_hours_from: dict[str, float] = field(default_factory=dict)  # lender -> the part on its floor
    unmet_gpu_hours: float = 0.0
    unmet_production_gpu_hours: float = 0.0
    # production GPU-hours up to the floor's size that went unserved or waited: what the floor guarantees (0 in
    # the fluid model: a floor serves its owner's production first, and a lent GPU comes back at once)
    unmet_guaranteed_production_gpu_hours: float = 0.0
    # production GPU-hours spent waiting in a queue; None: not measured (the fluid model has no queue)
    production_waiting_gpu_hours: float | None = None
    production_interruptions: int = 0
    # lent floor taken back from a borrower's job (Kueue reclaimWithinCohort), and the work it lost
    reclaim_preemptions: int = 0
    reclaim_lost_gpu_hours: float = 0.0
    # a production pool's interruptible jobs preempted by its own production (withinClusterQueue)
    priority_preemptions: int = 0
    priority_lost_gpu_hours: float = 0.0
    # pods preempted by kube-scheduler for a higher-priority pod pinned to a fragmented floor (issue 36)
    scheduler_preemptions: int = 0
    scheduler_lost_gpu_hours: float = 0.0


@dataclass(frozen=True)
class EnvironmentRun:
    """What a run of an organization's pools returns to the advisor (advise/org_advisor.py) and bench-org: its
    hourly usage (billed with whatever commitments the caller prices: the cost), each pool's figures and the
    pending time per tier."""

    model: str  # "fluid" (sim/fluid.py) or "simulated" (sim/environment.py)
    hours: int
    hourly_usage: list[billing.Usage]
    pools: dict[str, PoolMetrics] = field(default_factory=dict)
    tiers: dict[str, str] = field(default_factory=dict)  # pool -> its tier
    # tier -> pending_summary of the total pending minutes per job; None: not measured (the fluid model)
    pending_by_tier: dict[str, dict] | None = None


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (0 < q <= 100): hand-checkable, always one of the values; 0 for no values and for
    q = 0 (no rank: the floor advisor's "guarantee nothing"). The one percentile of the simulator and the advisors."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be between 0 and 100, got {q}")
    ordered = sorted(values)
    if not ordered or q == 0:
        return 0.0
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


def oracle_gpu_hours(trace, horizon: int) -> float:
    """Work an instant, infinite, never-interrupted cluster would serve by the horizon."""
    if isinstance(trace, JobsTrace):
        limit = horizon * 60
        return sum(j.gpus * max(0.0, min(j.duration_s, limit - j.submit_s)) for j in trace.jobs) / 3600
    return sum(trace.gpus_demanded[:horizon]) / 60


def whole_node_gpu_hours(trace, horizon: int, gpus_per_node: int) -> float:
    """GPU-hours of the demand rounded up to whole nodes every minute (the oracle's schedule)."""
    return sum(-(-d // gpus_per_node) for d in demand_profile(trace, horizon)) * gpus_per_node / 60


def elastic_oracle_gpu_hours(profile: list[int], floor_gpus: int) -> float:
    """The part of the oracle's demand above the floor: what the elastic capacity has to serve at best."""
    return sum(d - floor_gpus for d in profile if d > floor_gpus) / 60


def metrics_of(
    sim: Simulation,
    controller: ReportingController,
    oracle_cost: float,
    seconds: float,
    elastic_oracle_cost: float | None = None,
) -> dict:
    c = sim.c
    total = c.guaranteed_usd + c.spot_usd + c.on_demand_usd
    elastic = c.spot_usd + c.on_demand_usd
    wl = sim.workload
    out = {
        "name": controller.name,
        "floor_nodes": sim.spec.floor_nodes,
        "total_cost_usd": round(total, 2),
        "guaranteed_cost_usd": round(c.guaranteed_usd, 2),
        "elastic_spot_cost_usd": round(c.spot_usd, 2),
        "elastic_on_demand_cost_usd": round(c.on_demand_usd, 2),
        "cost_over_oracle": round(total / oracle_cost, 3) if oracle_cost > 0 else None,
        # the floor is a reliability premium every policy pays alike; this is what the policies differ on
        "elastic_cost_over_oracle": round(elastic / elastic_oracle_cost, 3) if elastic_oracle_cost else None,
        "demand_gpu_hours": round(wl.demand_gpu_minutes / 60, 3),
        "gpu_hours_served": round(c.served_gpu_minutes / 60, 3),
        "unmet_gpu_hours": round(wl.unmet_gpu_minutes / 60, 3),
        "interruptions": c.spot_interruptions,
        "jobs_interrupted": c.jobs_interrupted,
        "busy_node_terminations": c.busy_terminations,
        "lost_gpu_hours": round(c.lost_gpu_minutes / 60, 3),
        "spot_launch_failures": c.spot_launch_failures,
        # on-demand fallback kept while spot could be launched (issue 28, "Back to spot")
        "on_demand_node_hours": round(c.on_demand_node_minutes / 60, 2),
        "on_demand_node_hours_spot_available": round(c.on_demand_node_minutes_spot_available / 60, 2),
        "node_launches": c.node_launches,
        # where the elastic cost goes: GPU-hours booting, ready with no pod, free on a node with a pod, busy
        "elastic_gpu_hours_by_use": {k: round(v / 60, 1) for k, v in sim.elastic_gpu_minutes().items()},
        # empty elastic nodes held while a multi-node job waits for the rest of its nodes (sim/cluster.py)
        "gang_held_gpu_hours": round(sim.gang_hold.held_gpu_minutes / 60, 2),
        "budget_months_exceeded": budget_months_exceeded(sim),
        "sim_seconds": round(seconds, 3),
    }
    if isinstance(wl, JobsWorkload):
        waits, never = wl.waits_minutes(sim.horizon)
        out.update(
            mean_wait_minutes=round(sum(waits) / len(waits), 3) if waits else 0.0,
            p50_wait_minutes=round(percentile(waits, 50), 1),
            p95_wait_minutes=round(percentile(waits, 95), 1),
            p99_wait_minutes=round(percentile(waits, 99), 1),
            jobs=len(waits),
            jobs_never_started=never,
            jobs_larger_than_pool=wl.larger_than_pool,
        )
    else:
        out.update(mean_wait_minutes=None, p50_wait_minutes=None, p95_wait_minutes=None, p99_wait_minutes=None)
    out["ticks_skipped"] = sim.ticks_skipped
    out.update(controller.decision_figures())  # the controller's own (sim/controllers/base.py), none for most
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


def mean_sd(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def pending_summary(minutes: list[float]) -> dict[str, float | None]:
    """p95, p99 and max of total pending minutes per job (None for no job): what the advisor reports per tier."""
    if not minutes:
        return {"p95_pending_minutes": None, "p99_pending_minutes": None, "max_pending_minutes": None}
    return {
        "p95_pending_minutes": round(percentile(minutes, 95), 1),
        "p99_pending_minutes": round(percentile(minutes, 99), 1),
        "max_pending_minutes": round(max(minutes), 1),
    }
