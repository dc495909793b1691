"""The organization advisor's baselines as their authors run them (issue 36): `karpenter` with production pods on
on-demand and every other pod spot-first in one NodePool per team; `karpenter-shared` with two NodePools for the
whole organization, packing across teams; each with and without the Savings Plan Cost Explorer's method
recommends (never one that costs more); total pending time per job reported per tier."""

from __future__ import annotations

import pytest
from conftest import requires_shared_prices, stack_config, resolved_prices

from advise import org_advisor
from sim import demand as simdemand
from sim.engine import SimSettings
from sim.demand import production_flags
from sim.fluid import PoolPrices, Scenario
from sim.traces import Job, JobsTrace
from config import config

pytestmark = requires_shared_prices

ITYPE, REGION = "g6.12xlarge", "us-east-1"  # 4 GPUs per node
CALM = SimSettings(spot_interruptions_per_month=0.0)
HOURS, SIZING = 48, 24
NAMES = {
    "karpenter",
    "karpenter+savings-plan",
    "karpenter-shared",
    "karpenter-shared+savings-plan",
    "floors-not-lent",
    "team-floors",
    "fluid-bound",
}


def _cfg(share_pct: float = 30.0, capacity: str = "on_demand") -> config.GpuLoanConfig:
    data = stack_config("dev")
    data["gpuloan:pools"] = [
        {
            "name": "prod",
            "team": "team-prod",
            "tier": "production",
            "elastic": {"instance_types": [ITYPE], "capacity": capacity, "max_nodes": 8},
            "service_target": {"production_share_pct": share_pct},
        },
        {
            "name": "exp",
            "team": "team-exp",
            "tier": "experiment",
            "elastic": {"instance_types": [ITYPE], "capacity": "spot_then_on_demand", "max_nodes": 8},
            "service_target": {"production_share_pct": share_pct},
        },
    ]
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": []}}
    data["gpuloan:budget"]["monthly_usd"] = 1_000_000
    return config.from_stack_yaml({"config": data}, "test")


def _jobs(name: str, rows) -> JobsTrace:
    """rows: (submit hour, duration hours, GPUs)."""
    return JobsTrace(
        name, "generic", tuple(Job(f"{name}-{k}", a * 3600, d * 3600, g) for k, (a, d, g) in enumerate(rows))
    )


def _prices():

    p = resolved_prices().price(ITYPE, REGION)
    return {n: PoolPrices(ITYPE, REGION, 4, p.ondemand_usd_per_hour, p.spot_usd_per_hour) for n in ("prod", "exp")}


def test_karpenter_runs_every_pool_spot_first_with_production_pods_on_on_demand():
    cfg = org_advisor.karpenter_config(_cfg(capacity="on_demand"))
    assert {str(p.elastic.capacity) for p in cfg.pools} == {"spot_then_on_demand"}
    # production stays off spot: the stack's rule, which the simulator's Karpenter reads per pod
    assert cfg.scheduling.kueue.production_spot_pools == []


def test_shared_layout_runs_every_job_once_in_the_nodepool_its_class_picks():
    cfg = _cfg(share_pct=30.0)
    traces = {
        "prod": _jobs("prod", [(k / 4, 1, 2) for k in range(40)]),
        "exp": _jobs("exp", [(k / 4, 1, 1) for k in range(40)]),
    }
    layout = org_advisor.shared_layout(resolved_prices(), cfg, traces, seed=3)
    assert set(layout.traces) == {org_advisor.SHARED_PRODUCTION, org_advisor.SHARED_REST}
    # the class of each job is the one the per-team simulation gives it (same function, pool name, share, seed)
    want = {n: {j.job_id for j, p in zip(t.jobs, production_flags(t, 0.30, 3, n)) if p} for n, t in traces.items()}
    got_prod = {j.job_id for j in layout.traces[org_advisor.SHARED_PRODUCTION].jobs}
    assert got_prod == {f"{n}/{i}" for n, ids in want.items() for i in ids}
    every = [j.job_id for t in layout.traces.values() for j in t.jobs]
    assert sorted(every) == sorted(f"{n}/{j.job_id}" for n, t in traces.items() for j in t.jobs)
    pools = {p.name: p for p in layout.cfg.pools}
    assert str(pools[org_advisor.SHARED_PRODUCTION].elastic.capacity) == "on_demand"
    assert str(pools[org_advisor.SHARED_REST].elastic.capacity) == "spot_then_on_demand"
    assert pools[org_advisor.SHARED_REST].elastic.max_nodes == 16  # both teams' NodePool limits
    for name, t in layout.traces.items():
        assert [j.submit_s for j in t.jobs] == sorted(j.submit_s for j in t.jobs)
        assert [src for src in layout.source[name]] == [j.job_id.split("/")[0] for j in t.jobs]


def test_shared_nodepools_pack_across_teams():
    """Each team runs a 2-GPU interruptible job for the whole history on 4-GPU nodes: one node per team in its
    own NodePool, one node for both in the shared one, so karpenter-shared pays about half of karpenter."""
    traces = {"prod": _jobs("prod", [(0, HOURS, 2)]), "exp": _jobs("exp", [(0, HOURS, 2)])}
    runner = org_advisor.environment_runner(resolved_prices(), _cfg(share_pct=0.0), traces, CALM, _prices())
    demands = simdemand.profiles(traces, {"prod": "production", "exp": "experiment"}, HOURS, 0.0)
    none = {"prod": 0, "exp": 0}
    per_team = runner(demands, none, lend=False, controller="karpenter", scenario=Scenario(), report_from_hour=0)
    shared = runner(demands, none, lend=False, controller="karpenter-shared", scenario=Scenario(), report_from_hour=0)

    def node_hours(run):
        return sum(u.instance_hours for u in run.hourly_usage)

    assert node_hours(per_team) == pytest.approx(2 * HOURS, rel=0.1)
    assert node_hours(shared) == pytest.approx(HOURS, rel=0.1)
    # the pending time is reported per team tier, not per the shared pools' own
    assert set(shared.pending_by_tier) == {"production", "experiment"}


def test_advice_reports_the_issue_baselines_with_cost_interruptions_and_pending_per_tier():
    traces = {
        "prod": _jobs("prod", [(h, 2, 4) for h in range(0, HOURS, 2)] + [(h + 1, 1, 2) for h in range(30)]),
        "exp": _jobs("exp", [(h + 0.5, 3, 2) for h in range(0, HOURS, 3)]),
    }
    prices = _prices()
    runner = org_advisor.environment_runner(resolved_prices(), _cfg(), traces, CALM, prices, production_share=0.3)
    demands = simdemand.profiles(traces, {"prod": "production", "exp": "experiment"}, HOURS, 0.3)

    rate = resolved_prices().price(ITYPE, REGION).ondemand_usd_per_hour * 0.6  # a test rate, not a price claim
    inputs = org_advisor.OrgInputs(demands, prices, {(ITYPE, REGION): rate}, "t", SIZING, 7, 90.0)
    doc = org_advisor.evaluate(inputs, runner, scenarios=("default",), per_pool_prices=False)
    by = {b["name"]: b for b in doc["baselines"]}
    assert set(by) == NAMES
    for row in [doc["recommendation"]["report"], *doc["baselines"]]:
        assert isinstance(row["total_cost_usd"], float) and isinstance(row["production_interruptions"], int)
        assert set(row["pending_by_tier"]) == {"production", "experiment"}
        for tier in row["pending_by_tier"].values():
            assert {"p95_pending_minutes", "p99_pending_minutes"} <= set(tier)
    # a plan that saves nothing is not bought
    assert by["karpenter+savings-plan"]["total_cost_usd"] <= by["karpenter"]["total_cost_usd"]
    assert by["karpenter-shared+savings-plan"]["total_cost_usd"] <= by["karpenter-shared"]["total_cost_usd"]
    assert by["team-floors"]["commitment_sharing"].startswith("off")
    assert by["floors-not-lent"]["commitment_sharing"].startswith("on")
    assert by["karpenter-shared"]["pending_by_tier"]["production"]["p95_pending_minutes"] is not None
    assert by["fluid-bound"]["pending_by_tier"]["production"]["p95_pending_minutes"] is None  # no queue


class _AskEveryMinute:
    """A controller that asks the spot group for `sizes[t]` nodes at minute t (UpdateNodegroupConfig each time)."""

    name = "asker"
    node_groups = True
    uses_spot = True

    def __init__(self, sizes: dict[int, int]):
        self.sizes = sizes

    def start(self, sim) -> None:
        pass

    def tick(self, sim) -> None:
        if sim.now in self.sizes:
            sim.set_desired(sim.spot_groups[0], self.sizes[sim.now])

    def wake(self, sim) -> int:
        return sim.now + 1

    def repeat(self, sim, minutes: int) -> None:
        pass


@pytest.mark.parametrize("update_minutes", [0, 1, 3])
def test_a_node_group_update_is_asynchronous_and_a_second_one_while_updating_fails(update_minutes):
    """UpdateNodegroupConfig returns an update to track (EKS API Reference): the Auto Scaling group acts on the new
    size once it is done, and an update asked for while the group is UPDATING fails (docs/aws-rules.md)."""
    from sim.engine import Simulation
    from sim.pool import spec_from_config
    from sim.traces import SeriesTrace

    cfg = _cfg(share_pct=0.0, capacity="spot_then_on_demand")
    spec = spec_from_config(resolved_prices(), cfg, "exp")
    settings = replace_settings(update_minutes)
    sim = Simulation(spec, SeriesTrace("exp", (0,) * 30), _AskEveryMinute({2: 1, 3: 2}), settings, 30)
    sim.run()
    launched = sorted(n.launched for n in sim.nodes.values())
    if update_minutes == 0:  # the old model: each size acted on the minute it is set
        assert launched == [2, 3] and sim.c.nodegroup_update_conflicts == 0
    elif update_minutes == 1:  # the first update is done when the second is asked: each acted on a minute late
        assert launched == [3, 4] and sim.c.nodegroup_update_conflicts == 0
    else:  # the second size came while the first update ran: refused, one node launched when the update is done
        assert launched == [2 + update_minutes] and sim.c.nodegroup_update_conflicts == 1


def replace_settings(update_minutes: int) -> SimSettings:
    from dataclasses import replace

    return replace(CALM, nodegroup_update_minutes=update_minutes)


def test_gpuloan_shared_layout_keeps_the_floors_with_their_production_and_shares_the_rest():
    cfg = org_advisor.setup_config(
        _cfg(share_pct=30.0, capacity="spot_then_on_demand"), {"prod": 2, "exp": 0}, lend=True
    )
    traces = {
        "prod": _jobs("prod", [(k / 4, 1, 2) for k in range(40)]),
        "exp": _jobs("exp", [(k / 4, 1, 1) for k in range(40)]),
    }
    layout = org_advisor.shared_layout(resolved_prices(), cfg, traces, seed=3, keep_floors=True)
    pools = {p.name: p for p in layout.cfg.pools}
    assert set(pools) == {"prod", org_advisor.SHARED_PRODUCTION, org_advisor.SHARED_REST}
    assert pools["prod"].guaranteed.nodes == 2  # the floor stays with its team
    flags = production_flags(traces["prod"], 0.30, 3, "prod")
    assert [j.job_id for j in layout.traces["prod"].jobs] == [
        f"prod/{j.job_id}" for j, p in zip(traces["prod"].jobs, flags) if p
    ]
    # the shared interruptible queue borrows the idle floor (an experiment-tier queue in the cohort)
    from sim.kueue import sharing_of

    assert "prod" in sharing_of(layout.cfg)[org_advisor.SHARED_REST].lenders


def test_the_advice_says_which_gpuloan_layout_is_cheaper():
    traces = {
        "prod": _jobs("prod", [(h, 2, 4) for h in range(0, HOURS, 2)] + [(h + 1, 1, 2) for h in range(30)]),
        "exp": _jobs("exp", [(h + 0.5, 3, 2) for h in range(0, HOURS, 3)]),
    }
    prices = _prices()
    runner = org_advisor.environment_runner(
        resolved_prices(), _cfg(capacity="spot_then_on_demand"), traces, CALM, prices, production_share=0.3
    )
    demands = simdemand.profiles(traces, {"prod": "production", "exp": "experiment"}, HOURS, 0.3)

    rate = resolved_prices().price(ITYPE, REGION).ondemand_usd_per_hour * 0.6  # a test rate, not a price claim
    inputs = org_advisor.OrgInputs(demands, prices, {(ITYPE, REGION): rate}, "t", SIZING, 7, 90.0)
    doc = org_advisor.evaluate(inputs, runner, scenarios=("default",), per_pool_prices=False)
    rec = doc["recommendation"]
    shared = rec["layouts"]["gpuloan-shared"]
    assert shared["model"] == "simulated" and shared["floors_nodes"] == rec["report"]["floors_nodes"]
    cheaper = min(
        ("gpuloan", rec["report"]["total_cost_usd"]), ("gpuloan-shared", shared["total_cost_usd"]), key=lambda kv: kv[1]
    )[0]
    assert rec["cheaper_layout"].startswith(cheaper + ":")
