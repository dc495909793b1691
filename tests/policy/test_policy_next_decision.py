"""Plan.next_decision_at (issue 34): the earliest moment at which one of the engine's rules, by its own clock, could
change the plan with the observation unchanged. Skipping to it misses nothing (a property over the generated
worlds of tests/policy/test_policy_properties.py), and each rule's timer is there (one case per timer: a timer dropped
makes its case fail)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import given

from policy.decide import decide
from policy.model import ACTION_HOLD, JUST_AFTER, Group, Observation, PendingGang, PoolObservation, Spend
from policy.terms import Reason
from policy_cases import FLOOR, NOW, OD, SPOT, ago, group, idle, node, observe, pool_settings, settings
from test_policy_properties import worlds

LOOK_AHEAD_MINUTES = 180  # a plan with no timer is checked this far


def _changes(plan):
    return [a for a in plan.actions]


@given(worlds())
def test_deciding_before_next_decision_at_gives_the_same_actions(world):
    s, obs = world
    first = decide(s, obs, NOW)
    nxt = first.next_decision_at
    assert nxt is None or nxt > NOW
    minute = 1
    while minute <= LOOK_AHEAD_MINUTES:
        at = NOW + timedelta(minutes=minute)
        if nxt is not None and at >= nxt:
            break
        assert decide(s, obs, at).actions == first.actions, f"the plan changed at +{minute} min, before {nxt}"
        minute += 1


def _kept_warm_arrivals(minutes_ago: float, gpus: int = 12):
    # 12 GPUs over a 60-minute window on 1-GPU nodes: 0.2 nodes a minute, 2 x 6 x 0.2 = 2.4 -> 2 nodes kept warm
    return ((ago(minutes_ago), gpus),)


def _with(po: PoolObservation, **kw) -> Observation:
    return Observation((dataclasses.replace(po, **kw),))


def _case_idle_window():
    ps = pool_settings(empty_timeout_minutes=10)
    return settings(ps), observe(nodes=(idle("i-a", age=4),)), ago(4) + timedelta(minutes=10)


def _case_spot_fallback_wait():
    obs = observe(groups=(group(SPOT, 2, changed=4), group(OD, 0, changed=None)), pending=(1, 1))
    return settings(pool_settings()), obs, ago(4) + timedelta(minutes=10)


def _case_cooldown():
    ps = pool_settings(workload="service")
    obs = observe(
        groups=(group(SPOT, 1, changed=2), group(OD, 0, changed=None)),
        nodes=(node("i-a", SPOT, age=60, max_util=95.0, avg_util=95.0, reserved=100.0),),
    )
    return settings(ps), obs, ago(2) + timedelta(minutes=5)


def _case_arrival_leaves_window():
    po = observe(nodes=(idle("i-a", age=120),)).pools[0]
    return settings(pool_settings()), _with(po, arrivals=_kept_warm_arrivals(50)), ago(50) + timedelta(minutes=60)


def _case_never_got_a_pod():
    po = observe(nodes=(idle("i-a", age=5),)).pools[0]
    # empty window 2 + launch 6 minutes: the node counts as never used up to and including 8 minutes after launch
    return (
        settings(pool_settings(empty_timeout_minutes=2, launch_minutes=6)),
        _with(po, arrivals=_kept_warm_arrivals(10)),
        ago(5) + timedelta(minutes=8) + JUST_AFTER,
    )


def _case_gang_wait():
    po = observe(groups=(group(SPOT, 2, changed=None), group(OD, 0, changed=None)), pending=(1, 1)).pools[0]
    gang = PendingGang("ml/job", (1, 1), ago(10))
    return (
        settings(pool_settings(gang_wait_minutes=15)),
        _with(po, pending_gangs=(gang,)),
        ago(10) + timedelta(minutes=15),
    )


def _case_capacity_block_start():
    start = NOW + timedelta(minutes=20)
    ps = pool_settings(
        capacity_block_start=start.isoformat(),
        capacity_block_end=(start + timedelta(days=2)).isoformat(),
        guaranteed_nodes=2,
    )
    obs = observe(groups=(group(SPOT, 0), group(OD, 0), Group(FLOOR, 0, 0, 2)))
    return settings(ps), obs, start


def _case_budget_cap():
    ps = pool_settings(budget_monthly_usd=1000.0, spot_usd_per_hour=10.0)
    obs = observe(pending=(1, 1, 1, 1), spend=Spend(990.0, 0.0, ago(30)))
    return settings(ps), obs, NOW + timedelta(minutes=1)


TIMERS = {
    "idle_and_empty_windows": _case_idle_window,
    "spot_fallback_wait": _case_spot_fallback_wait,
    "cooldown": _case_cooldown,
    "arrival_leaves_the_keep_warm_window": _case_arrival_leaves_window,
    "never_got_a_pod": _case_never_got_a_pod,
    "gang_wait": _case_gang_wait,
    "capacity_block_dates": _case_capacity_block_start,
    "budget_projection": _case_budget_cap,
}


@pytest.mark.parametrize("name", sorted(TIMERS))
def test_each_rule_reports_its_timer(name):
    """The plan's next_decision_at is the moment its rule's clock changes the verdict; dropping the rule's timer
    leaves a later moment (or None) and this fails."""
    s, obs, when = TIMERS[name]()
    plan = decide(s, obs, NOW)
    assert plan.next_decision_at == when
    if name != "budget_projection":  # a cut scale-up is re-sized every minute; the others change at the timer
        later = decide(s, obs, when + timedelta(seconds=59) if when.second == 0 and not when.microsecond else when)
        assert later.actions != plan.actions


def test_only_an_observation_change_moves_a_quiet_plan():
    """A pool with busy nodes and nothing pending: no rule has a timer (the simulator then waits for its world)."""
    obs = observe(
        groups=(group(SPOT, 1, changed=600), group(OD, 0, changed=None)),
        nodes=(node("i-a", SPOT, age=600, max_util=90.0, reserved=100.0),),
    )
    plan = decide(settings(pool_settings()), obs, NOW)
    assert plan.next_decision_at is None
    assert all(a.kind == ACTION_HOLD for a in plan.actions) and Reason.STEADY in plan.decisions[0].reasons
