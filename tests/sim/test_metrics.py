"""sim/metrics.py's EnvironmentRun and PoolMetrics: one frozen shape for the fluid bound and the simulator (issue 34).

The advisor and bench-org read a run's figures the same way whichever model made it; before, the fluid model
returned its own mutable PoolMetrics and the simulated runs added the fields it lacked one by one (setattr), so a
reader had to guess them with getattr defaults.
"""

from __future__ import annotations

import dataclasses

import pytest

from advise import org_advisor
from sim import fluid
from sim.demand import EXPERIMENT, PRODUCTION, PoolDemand
from sim.fluid import PoolPrices
from sim.metrics import EnvironmentRun, PoolMetrics


def _fluid_run() -> EnvironmentRun:
    demands = {
        "a": PoolDemand("a", PRODUCTION, (8.0, 8.0, 0.0), (0.0, 0.0, 0.0)),
        "b": PoolDemand("b", EXPERIMENT, (0.0, 0.0, 0.0), (0.0, 0.0, 8.0)),
    }
    prices = {n: PoolPrices("p4d.24xlarge", "us-east-1", 8, 32.0, 12.0) for n in demands}
    return fluid.run(demands, prices, {"a": 1}, lend=True)


def test_the_fluid_model_returns_the_shared_frozen_shape_with_what_it_cannot_know_as_none():
    run = _fluid_run()
    assert type(run) is EnvironmentRun and all(type(m) is PoolMetrics for m in run.pools.values())
    a, b = run.pools["a"], run.pools["b"]
    assert a.floor_gpu_hours == 24 and a.floor_lent_gpu_hours == 8 and b.borrowed_gpu_hours_from == {"a": 8}
    # nothing is interrupted or reclaimed in the fluid model (0 by construction); no queue: no waiting measured
    assert a.reclaim_preemptions == a.priority_preemptions == a.scheduler_preemptions == 0
    assert a.production_interruptions == 0 and a.reclaim_lost_gpu_hours == 0.0
    assert a.production_waiting_gpu_hours is None and run.pending_by_tier is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.unmet_gpu_hours = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.pending_by_tier = {}  # type: ignore[misc]


def test_a_simulated_runs_window_figures_become_the_same_shape_field_by_field():
    # sim/environment.py's window figures of one pool: every PoolMetrics field, and some the advisor does not read
    window = {f.name: i + 1 for i, f in enumerate(dataclasses.fields(PoolMetrics))}
    window.update(borrowed_gpu_hours_from={"lender": 2.5}, jobs_submitted=7, from_minute=0, to_minute=60)
    result = type(
        "EnvironmentResult",
        (),
        {
            "pools": {"a": {"window": window}},
            "usage": [],
            "environment": {"window": {"pending_minutes_by_tier": {}}},
        },
    )()
    reduced = org_advisor._reduce(result)
    m = reduced.pools["a"]
    assert type(m) is PoolMetrics
    assert dataclasses.asdict(m) == {f.name: window[f.name] for f in dataclasses.fields(PoolMetrics)}
    runner = org_advisor.EnvironmentRunner(None, None, {}, None, {}, None)  # type: ignore[arg-type]
    run = runner._run_of(reduced, {"a": PoolDemand("a", PRODUCTION, (0.0,), (0.0,))}, 1)
    assert type(run) is EnvironmentRun and run.pools["a"] is m and run.model == "simulated"
    assert run.tiers == {"a": PRODUCTION} and run.pending_by_tier == {}


def test_the_advisors_figures_read_the_fields_both_models_fill():
    run = _fluid_run()
    doc = org_advisor.measure("x", run, org_advisor.report_bill(run, [], 0), [], {"a": 1}, "fluid")
    assert doc["reclaim_preemptions"] == 0 and doc["production_waiting_gpu_hours"] is None
    assert doc["floor_utilization"] == {"owned": round(16 / 24, 4), "lent": round(8 / 24, 4)}
