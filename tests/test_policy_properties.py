"""Invariants of policy.engine.decide over generated pools (hypothesis): the floor is never touched, bounds and
steps hold, no scale-up past the budget projection, missing data never shrinks, same input same plan, and
nodes that are launching are counted (no second scale-up for the same pending pods)."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from policy.engine import pack_pods, decide, hours_left_in_month
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_PENDING,
    Group,
    Node,
    Observation,
    PoolObservation,
    Reason,
    Spend,
)
from policy_cases import FLOOR, NOW, OD, SPOT, ago, pool_settings, settings

util = st.one_of(st.none(), st.floats(0, 100))


@st.composite
def worlds(draw, missing_data: bool = False):
    ps = pool_settings(
        gpus_per_node=draw(st.sampled_from([1, 4, 8])),
        spot_max_nodes=draw(st.integers(1, 8)),
        on_demand_max_nodes=draw(st.integers(1, 4)),
        max_step_nodes=draw(st.integers(1, 4)),
        idle_timeout_minutes=draw(st.integers(5, 60)),
        cooldown_minutes=draw(st.integers(0, 15)),
        fallback_after_minutes=draw(st.integers(1, 20)),
        budget_monthly_usd=draw(st.one_of(st.none(), st.floats(500, 20_000))),
        budget_enforcement=draw(st.sampled_from(["cap_elastic", "alert_only"])),
    )
    groups, nodes = [], []
    for gname, gmax in ((SPOT, ps.spot_max_nodes), (OD, ps.on_demand_max_nodes), (FLOOR, 3)):
        n_up = draw(st.integers(0, gmax))
        n_boot = draw(st.integers(0, 2)) if gname != FLOOR else 0
        extra = draw(st.integers(0, 2)) if gname != FLOOR else 0  # desired but no instance yet
        for k in range(n_up + n_boot):
            lifecycle = LIFECYCLE_IN_SERVICE if k < n_up else LIFECYCLE_PENDING
            mu = None if missing_data else draw(util)
            au = None if missing_data else draw(util)
            # GPU reserved capacity: mostly 0 (empty) or one GPU's share, sometimes missing
            rv = None if missing_data else draw(st.one_of(st.none(), st.sampled_from([0.0, 12.5, 100.0])))
            nodes.append(Node(f"i-{gname}-{k}", gname, ago(draw(st.integers(0, 240))), lifecycle, mu, au, rv))
        if gname != FLOOR:
            groups.append(Group(gname, n_up + n_boot + extra, 0, 0, draw(st.sampled_from(["ACTIVE", "ACTIVE", "UPDATING"])),
                                draw(st.one_of(st.none(), st.integers(0, 120).map(ago))), draw(st.booleans())))
    if missing_data:
        pending = None
        spend = None
    else:
        pending = draw(st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=12).map(tuple)))
        spend = draw(st.one_of(st.none(), st.builds(Spend, st.one_of(st.none(), st.floats(0, 25_000)),
                                                    st.floats(0, 500))))
    obs = Observation((PoolObservation("research", tuple(groups), tuple(nodes), pending, spend),), None)
    return settings(ps), obs


PROPS = hsettings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(worlds())
def test_floor_is_never_touched(world):
    s, obs = world
    for a in decide(s, obs, NOW).actions:
        assert a.group != FLOOR
        assert a.instance_id is None or not a.instance_id.startswith(f"i-{FLOOR}")


@PROPS
@given(worlds())
def test_bounds_and_steps(world):
    s, obs = world
    ps = s.pools[0]
    po = obs.pools[0]
    plan = decide(s, obs, NOW)
    ups = [a for a in plan.changes if a.kind == ACTION_SET_DESIRED and a.desired_to > a.desired_from]
    terms = [a for a in plan.changes if a.kind == ACTION_TERMINATE]
    for a in ups:
        assert a.desired_to <= ps.max_nodes(a.group)
        assert a.desired_to - a.desired_from <= ps.max_step_nodes
    assert len(terms) <= ps.max_step_nodes
    for gname, after in plan.decision("research").desired_after.items():
        assert after >= 0
        assert after <= max(ps.max_nodes(gname), po.group(gname).desired_nodes)
    # a group is either grown or shrunk in one tick, never both
    assert not (ups and terms)
    for a in plan.changes:
        assert po.group(a.group).status == "ACTIVE", "a group under update is never changed"


@PROPS
@given(worlds())
def test_no_scale_up_past_the_budget_projection(world):
    s, obs = world
    ps = s.pools[0]
    plan = decide(s, obs, NOW)
    d = plan.decision("research")
    grew = any(a.kind == ACTION_SET_DESIRED and a.desired_to > a.desired_from for a in plan.changes)
    if grew and ps.budget_monthly_usd is not None and ps.budget_enforcement == "cap_elastic":
        spend = obs.pools[0].spend
        mtd = (spend.month_to_date_usd if spend.actual_usd is not None else spend.estimated_since_usd) if spend else 0.0
        projected = mtd + (d.elastic_usd_per_hour + ps.guaranteed_usd_per_hour) * hours_left_in_month(NOW)
        assert projected <= ps.budget_monthly_usd + 1e-6


@PROPS
@given(worlds(missing_data=True))
def test_missing_data_never_shrinks(world):
    s, obs = world
    plan = decide(s, obs, NOW)
    for a in plan.changes:
        assert a.kind == ACTION_SET_DESIRED and a.desired_to >= a.desired_from, a


@PROPS
@given(worlds(), st.randoms(use_true_random=False))
def test_same_observation_same_plan_whatever_the_order(world, rnd: random.Random):
    s, obs = world
    first = decide(s, obs, NOW)
    assert decide(s, obs, NOW) == first
    po = obs.pools[0]
    nodes = list(po.nodes)
    rnd.shuffle(nodes)
    pending = None if po.pending_pod_gpus is None else tuple(rnd.sample(po.pending_pod_gpus, len(po.pending_pod_gpus)))
    shuffled = Observation((dataclasses.replace(po, nodes=tuple(nodes), pending_pod_gpus=pending),), None)
    assert decide(s, shuffled, NOW).changes == first.changes


@PROPS
@given(worlds())
def test_launching_nodes_are_counted(world):
    """Apply a pending-driven scale-up: the next tick, with those nodes booting, does not add again."""
    s, obs = world
    plan = decide(s, obs, NOW)
    ups = [a for a in plan.changes if a.kind == ACTION_SET_DESIRED and a.reason == Reason.SCALE_UP_PENDING]
    if not ups:
        return
    po = obs.pools[0]
    groups, nodes = list(po.groups), list(po.nodes)
    for a in ups:
        i = next(k for k, g in enumerate(groups) if g.name == a.group)
        groups[i] = dataclasses.replace(groups[i], desired_nodes=a.desired_to, last_change_at=NOW, capacity_shortage=False)
        nodes += [Node(f"i-new-{a.group}-{k}", a.group, NOW, LIFECYCLE_PENDING) for k in range(a.desired_to - a.desired_from)]
    after = Observation((dataclasses.replace(po, groups=tuple(groups), nodes=tuple(nodes)),), None)
    again = decide(s, after, NOW)
    # A step-limited first tick may add the rest now, but booting nodes are never asked for twice: both ticks
    # together add at most the nodes the pending pods need.
    added = sum(a.desired_to - a.desired_from for a in ups)
    added_again = sum(a.desired_to - a.desired_from for a in again.changes if a.reason == Reason.SCALE_UP_PENDING)
    needed, _ = pack_pods(po.pending_pod_gpus, s.pools[0].gpus_per_node)
    assert added + added_again <= needed
    if added >= needed:
        assert added_again == 0
