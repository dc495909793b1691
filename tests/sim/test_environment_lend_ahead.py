"""Lending ahead of the owner in the simulator (issue 38 item 2): the lendingLimit a floor lends under at each
minute is the one the policy's plan set (policy/decide/lend_ahead.py, through sim/controllers/gpuloan.py GpuLoan), and
Kueue's admission honours it as v0.19.2 does (a lowered limit evicts nothing, new borrowing stops at it; the
owner's reclaim is unchanged)."""

from __future__ import annotations

from dataclasses import replace

from conftest import resolved_prices
from sim.environment import simulate_environment
from test_environment import CALM, CONTROLLERS, STORMY, env_config, jobs, pool, random_jobs

DAYS = 6


def daily(minute_of_day: int, duration: int, gpus: int, per_day: int = 1) -> list[tuple[float, float, int]]:
    return [(d * 1440 + minute_of_day, duration, gpus) for d in range(DAYS) for _ in range(per_day)]


def run(lend_ahead: bool, controller: str = "gpuloan"):
    cfg = env_config([pool("lender"), pool("borrower")], lend_ahead=lend_ahead, reclaim_lookahead_minutes=60)
    # The owner's job arrives at 09:00 every day; at 08:20 the borrower's two jobs come: one runs on its own floor,
    # the other borrows the lender's idle floor (then is reclaimed at 09:00) or, lent nothing, takes spot.
    demands = {
        "lender": jobs("lender", daily(9 * 60, 60, 1)),
        "borrower": jobs("borrower", daily(8 * 60 + 20, 120, 1, per_day=2)),
    }
    return simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS[controller], CALM, DAYS * 1440)


def test_lending_ahead_of_the_owners_daily_return_spares_the_reclaims_once_the_rhythm_is_known():
    before, after = run(False), run(True)
    # every day the borrower took the idle floor at 08:20 and lost it at 09:00 (10 minutes since its checkpoint)
    assert before.pools["borrower"]["reclaim_preemptions"] == DAYS
    # the rhythm is known from the 4th day (policy/rhythm.py MIN_DAYS = 3 earlier days): no reclaim from then on
    assert after.pools["borrower"]["reclaim_preemptions"] == 3
    assert after.pools["borrower"]["reclaim_lost_gpu_hours"] < before.pools["borrower"]["reclaim_lost_gpu_hours"]
    # the guarantee: the owner's job starts on its floor the minute it arrives, every day, in both runs
    for res in (before, after):
        assert res.sims["lender"].workload.first_start == [d * 1440 + 9 * 60 for d in range(DAYS)]
        assert res.environment["production_interruptions"] == 0
    # and the rule raised the limit again after: the floor lent on the later days too, outside the owner's hour
    reasons = after.sims["lender"].controller.reasons
    assert reasons.get("LEND_AHEAD", 0) >= 3 and reasons.get("LEND_RESTORED", 0) >= 3
    assert after.sims["lender"].lending_limit_gpus in (0, 1)


def test_off_the_plan_static_limits_are_as_before():
    a, b = run(False), run(False, "karpenter")
    assert a.sims["lender"].controller.reasons.get("LEND_AHEAD") is None
    assert b.pools["borrower"]["reclaim_preemptions"] == DAYS  # the baseline has no such rule


def test_skipping_quiet_minutes_gives_the_tick_by_tick_result_with_lend_ahead():
    pools = [pool("alpha", floor=2), pool("beta", floor=1), pool("gamma", tier="learning", floor=0)]
    cfg = env_config(pools, lend_ahead=True, reclaim_lookahead_minutes=30)
    demands = {p["name"]: random_jobs(p["name"], seed=k, n=90, days=5, max_gpus=1) for k, p in enumerate(pools)}
    fast = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["gpuloan"], STORMY, 5 * 1440)
    slow = simulate_environment(
        resolved_prices(), cfg, demands, CONTROLLERS["gpuloan"], replace(STORMY, skip_quiet_ticks=False), 5 * 1440
    )
    assert sum(fast.sims[n].controller.reasons.get("LEND_AHEAD", 0) for n in demands) > 0
    for name in demands:
        assert fast.sims[name].c == slow.sims[name].c, name
        for key in ("reclaim_preemptions", "reclaim_lost_gpu_hours", "floor_lent_gpu_hours", "borrowed_gpu_hours"):
            assert fast.pools[name].get(key) == slow.pools[name].get(key), (name, key)


def test_a_return_the_owner_makes_only_on_some_days_is_kept_unlent_all_the_same():
    """Hand-derived (policy/decide/lend_ahead.py owner_forecast_gpus). The lender's floor is 4 GPUs; its owner
    brings three 1-GPU jobs at 09:00 on days 0 and 3 only; at 08:20 every day the borrower (no floor of its own)
    brings three 1-GPU jobs of two hours. Days 0-2: no rhythm yet, the floor lends all 4; the borrower takes 3,
    and on day 0 the owner's three jobs find 1 GPU free: 2 reclaims. Day 3: the three earlier days brought 3, 0
    and 0 GPUs in 08:20-09:20. Their mean (1 GPU) would keep 1 GPU and lend 3: 2 reclaims again at 09:00. The
    rule keeps the FORECAST_QUANTILE of the days (here the 3): it lends 1, the borrower's other two jobs take
    spot, and the owner's three fit the 3 free GPUs: no reclaim."""
    cfg = env_config(
        [pool("lender", floor=4), pool("borrower", tier="learning", floor=0)],
        lend_ahead=True,
        reclaim_lookahead_minutes=60,
    )
    owner_days = (0, 3)
    demands = {
        "lender": jobs("lender", [(d * 1440 + 9 * 60, 60, 1) for d in owner_days for _ in range(3)]),
        "borrower": jobs("borrower", [(d * 1440 + 8 * 60 + 20, 120, 1) for d in range(4) for _ in range(3)]),
    }
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["gpuloan"], CALM, 4 * 1440)
    assert res.pools["borrower"]["reclaim_preemptions"] == 2  # day 0's two; none on day 3
    # the guarantee: every one of the owner's jobs starts on its floor the minute it arrives
    assert res.sims["lender"].workload.first_start == [d * 1440 + 9 * 60 for d in owner_days for _ in range(3)]
