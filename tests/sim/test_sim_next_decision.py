"""The simulator wakes our policy at the plan's next_decision_at or when its observation changes (issue 34): on a
small month the costs are the same to the cent and the changes the policy makes are the same list, minute by
minute, as deciding every minute (SimSettings.skip_quiet_ticks=False, the switch issue 41 relies on)."""

from __future__ import annotations

from dataclasses import replace

import yaml

from config import config
from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces, resolved_prices
from policy import tick
from sim import pool as simpool
from sim import runner, traces
from sim.engine import SimSettings
from sim.controllers.gpuloan import GpuLoan


class Recording(GpuLoan):
    """Our controller, recording every change its plans make with the simulated minute (the Lambda's real tick)."""

    def start(self, sim):
        super().start(sim)
        self.events: list[tuple] = []

        def run_tick(settings, ports, now, **kwargs):
            result = tick.run_tick(settings, ports, now, **kwargs)
            self.events += [
                (sim.now, a.kind, a.reason.value, a.group, a.desired_to, a.instance_id) for a in result.plan.changes
            ]
            return result

        self.run_tick = run_tick


@requires_shared_prices
@requires_shared_traces
def test_a_small_month_costs_the_same_to_the_cent_with_the_same_events_both_ways():
    trace = traces.read_trace(SHARED_TRACES / "itp" / "cluster08.csv").window(1, 8)
    horizon = 8 * 1440
    cfg = config.from_stack_yaml(yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "prod")
    spec = simpool.auto_size(
        simpool.spec_from_config(resolved_prices(), cfg, "training"), trace, horizon_minutes=horizon
    )
    stormy = SimSettings(seed=3, spot_interruptions_per_month=8.0)
    every, skipping = Recording(), Recording()
    _, slow = runner.run_one(spec, trace, every, replace(stormy, skip_quiet_ticks=False), horizon)
    _, fast = runner.run_one(spec, trace, skipping, stormy, horizon)
    for cost in ("total_cost_usd", "guaranteed_cost_usd", "elastic_spot_cost_usd", "elastic_on_demand_cost_usd"):
        assert fast[cost] == slow[cost], cost  # rounded to the cent by the runner
    assert skipping.events == every.events and len(every.events) > 50
    assert fast["ticks_skipped"] > horizon // 3 and slow["ticks_skipped"] == 0
    assert skipping.calls < every.calls
