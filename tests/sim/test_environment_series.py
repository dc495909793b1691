"""Issue 36: a demand series (`minute,gpus_demanded`, no jobs) runs as two classes in the environment simulator,
split each minute as the fluid bound splits it (sim/demand.py `split_gpus`), production routed as the team's
production queue routes it (its floor, then on-demand, never spot) and the rest as its interruptible queue does
(floor, spot, then on-demand)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from test_environment import CALM, CONTROLLERS, GUARANTEED, STORMY, env_config, pool, random_jobs

from conftest import resolved_prices
from sim import demand as simdemand
from sim.engine import ON_DEMAND, SPOT
from sim.environment import simulate_environment
from sim.traces import SeriesTrace

BIG = "g6.12xlarge"  # 4 GPUs per node
INSTANT = replace(CALM, provisioning_delay_minutes=0)  # a node launched is ready that minute: no backlog to derive


def _gpu_minutes_by_group(res, name: str, horizon: int) -> dict[str, int]:
    """Busy GPU-minutes of the pool's nodes by node group (every node of these runs lives to the end)."""
    out: dict[str, int] = {}
    for node in res.sims[name].nodes.values():
        t, busy = node.hist[-1]
        out[node.group] = out.get(node.group, 0) + node.busy_minutes + (horizon - t) * busy
    return out


@pytest.mark.parametrize(
    ("gpus", "share", "split"),
    [(10, 0.5, (5, 5)), (4, 0.3, (1, 3)), (5, 0.3, (2, 3)), (1, 0.3, (0, 1)), (7, 1.0, (7, 0)), (7, 0.0, (0, 7))],
)
def test_a_series_minute_splits_to_the_nearest_whole_gpu_halves_up(gpus, share, split):
    """5 x 0.3 is 1.4999999999999998 in binary floating point: a half, rounded up to 2 (docs/floor.md)."""
    assert simdemand.split_gpus(gpus, share) == split


def test_a_split_series_runs_production_on_its_floor_and_on_demand_and_the_rest_spot_first():
    """Two pools of 4-GPU nodes (g6.12xlarge), both experiment tier with spot-then-on-demand elastic capacity,
    Karpenter, nodes ready the minute they are launched, no spot interruption, 4 hours (240 minutes).

    alpha: floor 1 node (4 GPUs), production share 50 %, its series 0 GPUs for an hour, then 10. beta: no floor,
    share 30 %, 0 then 4. Split (sim/demand.py split_gpus): alpha 10 x 0.5 = 5 production, 5 interruptible; beta
    4 x 0.3 = 1.2, rounded to 1 production, 3 interruptible.

    Minute 60, alpha's fill (environment.fill_series_classes): production takes the floor's 4 GPUs, 1 waits (no
    elastic node yet); interruptible finds the floor full, 5 wait. Pending: 6 one-GPU pods, 1 of them
    production (may not run on spot). Karpenter (sim/controllers/karpenter.py): 6 pods need 2 nodes, 1 of them
    on-demand for the production pod, so 1 on-demand and 1 spot, ready at once; the re-fill: production 4 on the
    floor and 1 on the on-demand node, interruptible spot first (4), then the on-demand node's next GPU (1).
    beta: 4 pods, 1 production: 1 node is enough and it must be on-demand, so 1 on-demand node runs all 4 (the
    interruptible pods tolerate on-demand). Nothing changes until minute 240, so over minutes 60-239 (180):
    - alpha own floor: 4 GPUs x 180 = 720 GPU-minutes, all production; spot 4 x 180 = 720 (interruptible);
      on-demand 2 x 180 = 360 (1 production, 1 interruptible);
    - beta spot 0; on-demand 4 x 180 = 720 (1 production);
    - borrowed 0: a series borrows no floor in the simulator (sim/environment.py "Not modelled"), and here Kueue
      would lend none either: alpha's floor is all production from minute 60, and beta asks nothing before.
    Production runs 5 x 180 = 900 and 1 x 180 = 180 GPU-minutes, what the fluid profile of the same series
    counts as production (15 and 3 GPU-hours). Before issue 36 the series ran whole as interruptible: alpha on
    2 spot nodes (1,080 spot GPU-minutes, no on-demand), beta on 1 spot node, and the profile counted beta's
    production as 1.2 GPUs."""
    cfg = env_config(
        [
            pool("alpha", floor=1, instance_type=BIG, capacity="spot_then_on_demand", share=50),
            pool("beta", floor=0, instance_type=BIG, capacity="spot_then_on_demand", share=30),
        ]
    )
    demands = {
        "alpha": SeriesTrace("alpha", (0,) * 60 + (10,) * 180),
        "beta": SeriesTrace("beta", (0,) * 60 + (4,) * 180),
    }
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], INSTANT, 240)
    assert _gpu_minutes_by_group(res, "alpha", 240) == {GUARANTEED: 720, SPOT: 720, ON_DEMAND: 360}
    assert _gpu_minutes_by_group(res, "beta", 240) == {ON_DEMAND: 720}
    alpha, beta = res.pools["alpha"], res.pools["beta"]
    assert alpha["floor_owned_gpu_hours"] == 12.0 and alpha["floor_lent_gpu_hours"] == 0
    assert alpha["borrowed_gpu_hours"] == 0 and beta["borrowed_gpu_hours"] == 0
    assert alpha["unmet_gpu_hours"] == 0 and beta["unmet_gpu_hours"] == 0
    # production's place in the last minute's fill (every minute from 60 on is the same)
    for name, want in (("alpha", {GUARANTEED: 4, ON_DEMAND: 1}), ("beta", {ON_DEMAND: 1})):
        sim = res.sims[name]
        on = {sim.nodes[i].group: g for i, g in sim.workload._prod_on.items()}
        assert on == want
    # the fluid profile of the same series counts the same production
    for name, share, prod in (("alpha", 0.5, 5), ("beta", 0.3, 1)):
        profile = simdemand.hourly_profile(name, "experiment", demands[name], 4, share)
        assert profile.production_gpus == pytest.approx((0, prod, prod, prod))
        assert profile.interruptible_gpus == pytest.approx((0, *(demands[name].gpus_demanded[-1] - prod,) * 3))


@pytest.mark.parametrize("controller", sorted(CONTROLLERS))
def test_a_split_series_skipping_quiet_minutes_gives_the_minute_by_minute_result(controller):
    """Two split series (one lends its floor to a jobs pool) on a stormy spot market over two days, levels moving
    every few hours: fills, spot interruptions (lost work back to its class's backlog), reclaims and lending give
    the same result whether quiet minutes are skipped or not."""
    from test_environment_scale import _result_json

    draw = random.Random(7)
    levels = [draw.choice([0, 1, 3, 5, 8, 11]) for _ in range(0, 2 * 1440, 170)]
    other = [draw.choice([0, 2, 4, 6]) for _ in range(0, 2 * 1440, 130)]
    cfg = env_config(
        [
            pool("alpha", floor=1, instance_type=BIG, capacity="spot_then_on_demand", share=50),
            pool("beta", floor=0, instance_type=BIG, capacity="spot_then_on_demand", share=30),
            pool("exp", floor=0, instance_type=BIG),
        ]
    )
    demands = {
        "alpha": SeriesTrace("alpha", tuple(levels[m // 170] for m in range(2 * 1440))),
        "beta": SeriesTrace("beta", tuple(other[m // 130] for m in range(2 * 1440))),
        "exp": random_jobs("exp", 3, n=60, max_gpus=4),
    }
    fast = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS[controller], STORMY, 2 * 1440)
    every = simulate_environment(
        resolved_prices(), cfg, demands, CONTROLLERS[controller], replace(STORMY, skip_quiet_ticks=False), 2 * 1440
    )
    assert _result_json(fast) == _result_json(every)
    assert fast.environment["interruptions"] > 0
    assert fast.pools["alpha"]["floor_lent_gpu_hours"] > 0
