"""Pending pods that may not run on spot are their own scale-up signal (policy/off_spot.py, docs/policy.md "Pods that
may not run on spot"): the on-demand group grows for them, spot never does, idle spot nodes are not kept for them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policy.decide import decide
from policy.model import LIFECYCLE_PENDING, Observation, PendingGang
from policy.terms import Reason
from policy_cases import NOW, OD, SPOT, ago, group, idle, node, observe, pool_settings, settings, spend

R = Reason


def off_spot(obs: Observation, pods, gangs=()) -> Observation:
    po = obs.pools[0]
    return Observation((replace(po, on_demand_only_pod_gpus=pods, pending_gangs=tuple(gangs)),), obs.environment_spend)


def changes(plan) -> list[tuple]:
    out = []
    for a in plan.changes:
        out.append(
            ("set", a.group, a.desired_from, a.desired_to, a.reason)
            if a.kind == "set_desired"
            else ("term", a.instance_id, a.reason)
        )
    return out


def reasons(plan) -> set[Reason]:
    return set(plan.decisions[0].reasons)


def details(plan, reason: Reason) -> str:
    return " | ".join(a.detail for a in plan.actions if a.reason is reason)


def test_pods_that_may_not_run_on_spot_grow_the_on_demand_group_and_not_spot():
    plan = decide(settings(), off_spot(observe(pending=(1, 1)), (1, 1)), NOW)
    assert changes(plan) == [("set", OD, 0, 2, R.ON_DEMAND_ONLY)]
    assert "2 pending pod(s) that may not run on spot (2 x 1 GPU)" in details(plan, R.ON_DEMAND_ONLY)


def test_mixed_pending_pods_go_spot_first_and_on_demand_for_the_ones_kept_off_spot():
    plan = decide(settings(), off_spot(observe(pending=(1, 1, 1)), (1,)), NOW)
    assert sorted(changes(plan)) == [("set", OD, 0, 1, R.ON_DEMAND_ONLY), ("set", SPOT, 0, 2, R.SCALE_UP_PENDING)]


def test_packing_counts_only_the_pods_that_may_use_each_group():
    # 8-GPU nodes: 4 + 4 may use spot (one node), 4 may not (one on-demand node); packed together they would have
    # been 2 spot nodes, one of which the kept-off pod could never use
    plan = decide(settings(pool_settings(gpus_per_node=8)), off_spot(observe(pending=(4, 4, 4)), (4,)), NOW)
    assert sorted(changes(plan)) == [("set", OD, 0, 1, R.ON_DEMAND_ONLY), ("set", SPOT, 0, 1, R.SCALE_UP_PENDING)]


def test_without_an_on_demand_group_they_are_reported_and_no_spot_is_bought_for_them():
    ps = pool_settings(on_demand_group=None, on_demand_max_nodes=0)
    plan = decide(settings(ps), off_spot(observe(groups=[group(SPOT, 0)], pending=(1, 1)), (1, 1)), NOW)
    assert changes(plan) == []
    why = details(plan, R.ON_DEMAND_ONLY)
    assert "2 pending pod(s) that may not run on spot" in why and "no on-demand group" in why
    # the others still get spot
    mixed = decide(settings(ps), off_spot(observe(groups=[group(SPOT, 0)], pending=(1, 1)), (1,)), NOW)
    assert changes(mixed) == [("set", SPOT, 0, 1, R.SCALE_UP_PENDING)] and R.ON_DEMAND_ONLY in reasons(mixed)


def test_the_budget_cap_applies_to_their_on_demand_nodes():
    # pool budget $2,000, $813 spent, 516 h left, floor $0.80/h: $1.50/h of headroom = one $1/h on-demand node
    ps = pool_settings(budget_monthly_usd=2000.0, on_demand_max_nodes=4)
    plan = decide(settings(ps), off_spot(observe(pending=(1, 1, 1), spend=spend(813.0)), (1, 1, 1)), NOW)
    assert changes(plan) == [("set", OD, 0, 1, R.ON_DEMAND_ONLY)] and R.BUDGET_CAP in reasons(plan)
    unknown = decide(settings(ps), off_spot(observe(pending=(1,), spend=spend(None)), (1,)), NOW)
    assert changes(unknown) == [] and R.BUDGET_UNKNOWN in reasons(unknown)


def test_group_max_step_and_update_in_progress_bound_them():
    at_max = decide(settings(), off_spot(observe(pending=(1, 1, 1)), (1, 1, 1)), NOW)  # on_demand_max_nodes=2
    assert changes(at_max) == [("set", OD, 0, 2, R.ON_DEMAND_ONLY)] and R.AT_MAX in reasons(at_max)
    stepped = decide(settings(pool_settings(max_step_nodes=1)), off_spot(observe(pending=(1, 1)), (1, 1)), NOW)
    assert changes(stepped) == [("set", OD, 0, 1, R.ON_DEMAND_ONLY)]
    # the step bounds the tick, both groups together
    both = decide(settings(pool_settings(max_step_nodes=2)), off_spot(observe(pending=(1, 1, 1, 1)), (1,)), NOW)
    assert sorted(changes(both)) == [("set", OD, 0, 1, R.ON_DEMAND_ONLY), ("set", SPOT, 0, 1, R.SCALE_UP_PENDING)]
    updating = decide(
        settings(), off_spot(observe(groups=[group(SPOT, 0), group(OD, 0, status="UPDATING")], pending=(1,)), (1,)), NOW
    )
    assert changes(updating) == [] and R.UPDATE_IN_PROGRESS in reasons(updating)


def test_a_gang_kept_off_spot_comes_in_one_step_on_on_demand():
    gang = PendingGang("research/train", (1, 1), ago(5), on_demand_only=True)
    plan = decide(settings(pool_settings(max_step_nodes=1)), off_spot(observe(pending=(1, 1)), (1, 1), [gang]), NOW)
    assert changes(plan) == [("set", OD, 0, 2, R.ON_DEMAND_ONLY)]


def test_on_demand_nodes_on_their_way_count_for_them():
    plan = decide(
        settings(),
        off_spot(
            observe(
                groups=[group(SPOT, 0), group(OD, 1, changed=1)],
                nodes=[node("i-boot", OD, lifecycle=LIFECYCLE_PENDING)],
                pending=(1,),
            ),
            (1,),
        ),
        NOW,
    )
    assert changes(plan) == []


def test_idle_spot_nodes_are_not_kept_for_them_and_idle_on_demand_nodes_may_be():
    # on-demand at its max (2/2, one busy, one idle), one spot node idle, one kept-off pod pending: it may land on
    # the idle on-demand node only. Before: counted spot-first, it bought a spot node and kept the idle spot one.
    obs = observe(
        groups=[group(SPOT, 1), group(OD, 2)],
        nodes=[idle("i-spot", SPOT), idle("i-od", OD), node("i-od-busy", OD)],
        pending=(1,),
    )
    plan = decide(settings(), off_spot(obs, (1,)), NOW)
    assert changes(plan) == [("term", "i-spot", R.RECLAIM_IDLE)]
    assert R.AT_MAX in reasons(plan)


def test_a_spot_only_pool_keeps_no_idle_spot_node_for_them():
    ps = pool_settings(on_demand_group=None, on_demand_max_nodes=0)
    obs = observe(groups=[group(SPOT, 1)], nodes=[idle("i-spot", SPOT)], pending=(1,))
    plan = decide(settings(ps), off_spot(obs, (1,)), NOW)
    assert changes(plan) == [("term", "i-spot", R.RECLAIM_IDLE)] and R.ON_DEMAND_ONLY in reasons(plan)


def test_back_to_spot_does_not_close_the_on_demand_nodes_they_wait_for():
    # spot filled, one on-demand node busy: back to spot would close it; with a kept-off pod waiting it stays open
    obs = observe(groups=[group(SPOT, 1), group(OD, 1)], nodes=[node("i-spot"), node("i-od", OD)])
    assert decide(settings(), obs, NOW).decisions[0].closed_to_new_pods == ("i-od",)
    waiting = decide(
        settings(), off_spot(replace(obs, pools=(replace(obs.pools[0], pending_pod_gpus=(1,)),)), (1,)), NOW
    )
    assert waiting.decisions[0].closed_to_new_pods == ()
    assert changes(waiting) == [("set", OD, 1, 2, R.ON_DEMAND_ONLY)]


def test_spot_short_sends_both_to_on_demand_in_one_change():
    obs = observe(groups=[group(SPOT, 1, changed=30, shortage=True), group(OD, 0)], pending=(1, 1))
    plan = decide(settings(pool_settings(on_demand_max_nodes=4)), off_spot(obs, (1,)), NOW)
    assert changes(plan) == [("set", OD, 0, 2, R.SPOT_FALLBACK)]  # the fallback, as notified
    assert "may not run on spot" in plan.changes[0].detail and "short" in plan.changes[0].detail


@pytest.mark.parametrize("off", [None, ()], ids=["unknown", "none"])
def test_unknown_or_none_changes_nothing(off):
    obs = observe(nodes=[idle("i-spot")], pending=(1, 1))
    assert (
        changes(decide(settings(), off_spot(obs, off), NOW))
        == changes(decide(settings(), obs, NOW))
        == [("set", SPOT, 1, 3, R.SCALE_UP_PENDING)]
    )


def test_pods_that_are_not_among_the_pending_ones_are_reported_and_ignored():
    plan = decide(settings(), off_spot(observe(pending=(1,)), (1, 1)), NOW)
    assert changes(plan) == [("set", SPOT, 0, 1, R.SCALE_UP_PENDING)]
    assert "not among the pending pods" in details(plan, R.HOLD_MISSING_DATA)
