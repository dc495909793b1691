"""Right-sized nodes in the simulator: a pool of several node sizes (PoolSpec.sizes), gpuloan (the real engine,
policy/sizes.py) and the karpenter baseline (cheapest type per NodeClaim) both right-sizing; a one-size pool gives
exactly the results it gave before sizes existed."""

from __future__ import annotations

import sys
from dataclasses import replace
from pricing import checks

import pytest

from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces, resolved_prices
from sim import runner, traces
from sim.cloud import size_group
from sim.engine import SPOT, SPOT_SHORTAGE, SimSettings, Simulation
from sim.cluster import new_claims
from sim.controllers.gpuloan import GpuLoan, pool_settings
from sim.controllers.karpenter import Karpenter
from sim.traces import Job, JobsTrace

ITP = SHARED_TRACES / "itp"
sys.path.insert(0, str(REPO / "scripts"))


def _specs(days=(1, 57), cluster="cluster01"):
    import bench_sizes

    trace = traces.read_trace(ITP / f"{cluster}.csv").window(*days)
    horizon = (days[1] - days[0] + 1) * 1440
    return (
        trace,
        horizon,
        bench_sizes.spec_for(bench_sizes.SIZED, trace, horizon),
        bench_sizes.spec_for(bench_sizes.EIGHT_ONLY, trace, horizon),
    )


def test_karpenter_claims_fill_to_the_largest_type_then_launch_the_cheapest_that_fits():
    # FFD onto claims that may grow to 8 GPUs: 1+1+1 on one claim, 3 GPUs used -> the 4-GPU type if cheaper than
    # the 8 and no 1-GPU type holds three pods
    assert new_claims({1: 3}, 8) == {3: 1}
    assert new_claims({4: 1, 2: 3, 1: 1}, 8) == {8: 1, 3: 1}
    assert new_claims({16: 1, 1: 2}, 8) == {8: 2, 2: 1}  # a gang of two whole 8-GPU nodes
    assert new_claims({1: 2}, 8, free_gpus=[1]) == {1: 1}  # one pod on the free GPU of an existing node

    class Spec:
        has_spot, gpus_per_node, spot_usd_per_hour, on_demand_usd_per_hour = True, 8, 8.0, 30.0
        sizes = (
            type("Z", (), dict(gpus_per_node=1, spot_usd_per_hour=0.8, on_demand_usd_per_hour=2.2)),
            type("Z", (), dict(gpus_per_node=4, spot_usd_per_hour=5.0, on_demand_usd_per_hour=10.5)),
        )

    assert [Karpenter.cheapest_fit(Spec, used) for used in (1, 2, 3, 4, 5, 8)] == [1, 4, 4, 4, 8, 8]


@requires_shared_prices
@requires_shared_traces
def test_gpuloan_gives_one_gpu_jobs_one_gpu_nodes():
    _, _, sized, _ = _specs()
    trace = JobsTrace("three jobs", "generic", (Job("a", 60, 3600, 1), Job("b", 60, 3600, 1), Job("c", 60, 3600, 8)))
    sim = Simulation(sized, trace, GpuLoan("gpuloan"), SimSettings(), horizon_minutes=180)
    seen: dict[str, int] = {}
    original = sim._new_node

    def record(group, ready_at):
        node = original(group, ready_at)
        seen[group] = seen.get(group, 0) + 1
        return node

    sim._new_node = record
    sim.run()
    assert seen == {size_group(SPOT, 1): 2, SPOT: 1}
    assert sim.workload.unmet_gpu_minutes == 0


@requires_shared_prices
@requires_shared_traces
def test_skipping_quiet_ticks_gives_the_tick_by_tick_result_with_several_sizes():
    trace, horizon, sized, _ = _specs(days=(50, 53), cluster="cluster09")
    settings = SimSettings(seed=3, spot_interruptions_per_month=8.0, **SPOT_SHORTAGE)
    for make in (lambda: GpuLoan("gpuloan"), Karpenter):
        fast_sim, fast = runner.run_one(sized, trace, make(), settings, horizon)
        slow_sim, slow = runner.run_one(sized, trace, make(), replace(settings, skip_quiet_ticks=False), horizon)

        def strip(m):
            return {
                k: v
                for k, v in m.items()
                if not k.startswith("sim_")
                and k
                not in (
                    "decide_calls",
                    "ticks_skipped",
                )
            }

        assert strip(fast) == strip(slow)
        assert fast_sim.samples == slow_sim.samples


@requires_shared_prices
@requires_shared_traces
def test_right_sizing_cuts_the_bill_and_gpuloan_is_not_dominated_by_karpenter():
    trace, horizon, sized, eight = _specs(days=(1, 57), cluster="cluster05")
    bill = {}
    for name, spec in (("sized", sized), ("eight", eight)):
        for c in (GpuLoan("gpuloan"), Karpenter()):
            _, m = runner.run_one(spec, trace, c, SimSettings(seed=1), horizon)
            bill[name, c.name] = (
                m["elastic_spot_cost_usd"] + m["elastic_on_demand_cost_usd"],
                m["unmet_gpu_hours"],
                m["p95_wait_minutes"],
            )
    assert bill["sized", "gpuloan"][0] < 0.9 * bill["eight", "gpuloan"][0]
    ours, theirs = bill["sized", "gpuloan"], bill["sized", "karpenter"]
    assert not (theirs[0] <= ours[0] and theirs[1] <= ours[1] and theirs[2] <= ours[2]), bill


@requires_shared_prices
@requires_shared_traces
def test_the_sized_pool_gets_the_policy_settings_of_every_size():
    _, _, sized, eight = _specs()
    ps = pool_settings(sized)
    assert ps.gpus_per_node == 8 and [s.gpus_per_node for s in ps.other_sizes] == [1, 4]
    assert ps.other_sizes[0].spot_group == size_group(SPOT, 1)
    assert pool_settings(eight).other_sizes == ()


# A one-size run as the simulator gave it before sizes existed (commit ca7d76b, `sim.runner.run_one` on the prod
# stack's training pool auto-sized, seed 1, days 1-57; cluster03 under SPOT_SHORTAGE): the figures
# docs/benchmarks.md's `make benchmark` tables come from must not move.
BEFORE_SIZES = {
    ("cluster01", "gpuloan"): 14108.98,
    ("cluster01", "karpenter"): 14000.53,
    ("cluster03", "gpuloan"): 97421.35,
    ("cluster03", "karpenter"): 96869.33,
    ("cluster08", "gpuloan"): 45796.54,
    ("cluster08", "karpenter"): 45633.34,
}


@requires_shared_prices
@requires_shared_traces
@pytest.mark.parametrize("cluster", ["cluster01", "cluster03"])
def test_a_one_size_pool_gives_the_results_it_gave_before_sizes(cluster):
    import yaml

    from sim import pool

    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "Pulumi.prod.yaml", prices=resolved_prices()
    )
    trace = traces.read_trace(ITP / f"{cluster}.csv").window(1, 57)
    horizon = 57 * 1440
    spec = pool.auto_size(pool.spec_from_config(resolved_prices(), cfg, "training"), trace, horizon_minutes=horizon)
    assert spec.sizes == ()
    extra = SPOT_SHORTAGE if cluster == "cluster03" else {}
    for c in (GpuLoan("gpuloan"), Karpenter()):
        _, m = runner.run_one(spec, trace, c, SimSettings(seed=1, **extra), horizon)
        assert m["total_cost_usd"] == BEFORE_SIZES[cluster, c.name]
