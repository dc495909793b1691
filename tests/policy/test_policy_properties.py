"""Invariants of policy.decide.decide over generated pools (hypothesis): the floor is never touched, bounds and
steps hold, no scale-up past the budget projection, missing data never shrinks, same input same plan, and
nodes that are launching are counted (no second scale-up for the same pending pods).

Issue 14's safety rules: no plan terminates a node with any sign of GPU work (a utilization figure at or above
the idle threshold, a GPU requested); no applied termination hits a node with a pending or running GPU pod or a
do-not-disrupt annotation (the tick's check over generated pods); a group never gets both set_desired and
terminate in one plan; a live tick ignores the event's time.

Example counts come from the hypothesis profile (tests/conftest.py): "ci" by default, "deep" (10,000 per
property) with `make test-deep`.
"""

from __future__ import annotations

import dataclasses
import random

import types
from collections import Counter
from unittest import mock

from hypothesis import given, strategies as st

from policy import handler
from policy.decide import decide, hours_left_in_month, node_idle_threshold_pct, pack_pods, warm_up_nodes
from policy.pods import DO_NOT_DISRUPT, blocking_reason
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_PENDING,
    Group,
    Node,
    Observation,
    PendingGang,
    PoolObservation,
    Spend,
)
from policy.terms import Reason
from policy.ports import Instance
from policy.memory_state import MemoryState
from policy.tick import Ports, TickResult, _apply
from policy_cases import FLOOR, NOW, OD, SPOT, ago, pool_settings, settings
from test_policy_adapters import FakeGroups, FakePods, FakePublisher, FakeUtil

util = st.one_of(st.none(), st.floats(0, 100))
util_near_idle = st.one_of(st.none(), st.floats(0, 100), st.floats(0, 6), st.just(0.0))


@st.composite
def worlds(draw, missing_data: bool = False):
    ps = pool_settings(
        gpus_per_node=draw(st.sampled_from([1, 4, 8])),
        spot_max_nodes=draw(st.integers(1, 8)),
        on_demand_max_nodes=draw(st.integers(1, 4)),
        max_step_nodes=draw(st.one_of(st.none(), st.integers(1, 4))),
        workload=draw(st.sampled_from(["batch", "service"])),
        launch_minutes=draw(st.integers(1, 15)),
        idle_timeout_minutes=draw(st.integers(5, 60)),
        empty_timeout_minutes=draw(st.integers(2, 60)),
        idle_utilization_pct=draw(st.sampled_from([1.0, 5.0, 20.0])),
        cooldown_minutes=draw(st.integers(0, 15)),
        fallback_after_minutes=draw(st.integers(1, 20)),
        budget_monthly_usd=draw(st.one_of(st.none(), st.floats(500, 20_000))),
        budget_enforcement=draw(st.sampled_from(["cap_elastic", "alert_only"])),
        warm_up=draw(st.booleans()),
        gang_wait_minutes=draw(st.integers(16, 40)),
    )
    groups, nodes = [], []
    for gname, gmax in ((SPOT, ps.spot_max_nodes), (OD, ps.on_demand_max_nodes), (FLOOR, 3)):
        n_up = draw(st.integers(0, gmax))
        n_boot = draw(st.integers(0, 2)) if gname != FLOOR else 0
        extra = draw(st.integers(0, 2)) if gname != FLOOR else 0  # desired but no instance yet
        for k in range(n_up + n_boot):
            lifecycle = LIFECYCLE_IN_SERVICE if k < n_up else LIFECYCLE_PENDING
            # utilization: often idle (near 0, around the per-GPU threshold) so reclaim and drain are exercised
            mu = None if missing_data else draw(util_near_idle)
            au = None if missing_data else draw(util_near_idle)
            ru = None if missing_data else draw(util_near_idle)
            # GPU reserved capacity: mostly 0 (empty) or one GPU's share, sometimes missing
            rv = None if missing_data else draw(st.one_of(st.none(), st.sampled_from([0.0, 0.0, 12.5, 100.0])))
            pods = None if missing_data else draw(st.one_of(st.none(), st.sampled_from([0, 0, 0, 1, 3])))
            nodes.append(Node(f"i-{gname}-{k}", gname, ago(draw(st.integers(0, 240))), lifecycle, mu, au, rv, ru, pods))
        if gname != FLOOR:
            groups.append(
                Group(
                    gname,
                    n_up + n_boot + extra,
                    0,
                    0,
                    draw(st.sampled_from(["ACTIVE", "ACTIVE", "UPDATING"])),
                    draw(st.one_of(st.none(), st.integers(0, 120).map(ago))),
                    draw(st.booleans()),
                )
            )
    if missing_data:
        pending = None
        spend = None
    else:
        pending = draw(st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=12).map(tuple)))
        spend = draw(
            st.one_of(st.none(), st.builds(Spend, st.one_of(st.none(), st.floats(0, 25_000)), st.floats(0, 500)))
        )
    # recent GPU pod arrivals (minutes ago, GPUs): sometimes unknown, often enough to keep idle nodes warm
    arrivals = (
        None
        if missing_data
        else draw(
            st.one_of(
                st.none(),
                st.lists(st.tuples(st.integers(0, 90).map(ago), st.integers(1, 8)), max_size=40).map(
                    lambda v: tuple(sorted(v))
                ),
            )
        )
    )
    # the daily rhythm's rate for warm-up (nodes' worth per minute): unknown, quiet, or enough to want spares
    rhythm = None if missing_data else draw(st.one_of(st.none(), st.floats(0, 3)))
    # pending pods that form a gang (policy/gangs.py): some of the pending ones, waiting within or past the bound
    gangs = ()
    fitting = sorted((p for p in pending or () if 0 < p <= ps.gpus_per_node), reverse=True)
    if pending and draw(st.booleans()):
        pool = fitting or sorted(pending, reverse=True)  # mostly pods that fit a node, as a gang's do
        members = tuple(pool[: draw(st.integers(1, len(pool)))])
        waited = draw(st.one_of(st.none(), st.integers(0, 60)))
        gangs = (PendingGang("ml/job", members, None if waited is None else ago(waited), draw(st.booleans())),)
    # pending pods that may not run on spot (policy/off_spot.py): unknown, or some of the pending ones (a gang kept
    # off spot with all its pods)
    off = None if missing_data else draw(st.one_of(st.none(), st.just(())))
    if pending and draw(st.booleans()):
        rest = list(pending)
        off = []
        for g in gangs:
            if g.on_demand_only:
                for p in g.pod_gpus:
                    rest.remove(p)
                    off.append(p)
        off += [rest[i] for i in sorted(draw(st.sets(st.integers(0, len(rest) - 1))))] if rest else []
        off = tuple(off)
    obs = Observation(
        (
            PoolObservation(
                "research",
                tuple(groups),
                tuple(nodes),
                pending,
                spend,
                arrivals,
                rhythm,
                pending_gangs=gangs,
                on_demand_only_pod_gpus=off,
            ),
        ),
        None,
    )
    return settings(ps), obs


@given(worlds())
def test_floor_is_never_touched(world):
    s, obs = world
    for a in decide(s, obs, NOW).actions:
        assert a.group != FLOOR
        assert a.instance_id is None or not a.instance_id.startswith(f"i-{FLOOR}")


@given(worlds())
def test_bounds_and_steps(world):
    s, obs = world
    ps = s.pools[0]
    po = obs.pools[0]
    plan = decide(s, obs, NOW)
    ups = [a for a in plan.changes if a.kind == ACTION_SET_DESIRED and a.desired_to > a.desired_from]
    terms = [a for a in plan.changes if a.kind == ACTION_TERMINATE]
    # a gang's nodes come in one step (policy/gangs.py): the step limit yields to the gang's nodes, no more
    gang_nodes = max((pack_pods(g.pod_gpus, ps.gpus_per_node)[0] for g in po.pending_gangs), default=0)
    for a in ups:
        assert a.desired_to <= ps.max_nodes(a.group)
        if ps.max_step_nodes is not None:
            assert a.desired_to - a.desired_from <= max(ps.max_step_nodes, gang_nodes)
    if ps.max_step_nodes is not None:
        assert len(terms) <= ps.max_step_nodes
    for gname, after in plan.decision("research").desired_after.items():
        assert after >= 0
        assert after <= max(ps.max_nodes(gname), po.group(gname).desired_nodes)
    # a group is either grown or shrunk in one tick, never both
    assert not ({a.group for a in ups} & {a.group for a in terms})
    for a in plan.changes:
        assert po.group(a.group).status == "ACTIVE", "a group under update is never changed"


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


@given(worlds(missing_data=True))
def test_missing_data_never_shrinks(world):
    s, obs = world
    plan = decide(s, obs, NOW)
    for a in plan.changes:
        assert a.kind == ACTION_SET_DESIRED and a.desired_to >= a.desired_from, a


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
        groups[i] = dataclasses.replace(
            groups[i], desired_nodes=a.desired_to, last_change_at=NOW, capacity_shortage=False
        )
        nodes += [
            Node(f"i-new-{a.group}-{k}", a.group, NOW, LIFECYCLE_PENDING) for k in range(a.desired_to - a.desired_from)
        ]
    after = Observation((dataclasses.replace(po, groups=tuple(groups), nodes=tuple(nodes)),), None)
    again = decide(s, after, NOW)
    # A step-limited first tick may add the rest now, but booting nodes are never asked for twice: both ticks
    # together add at most the nodes the pending pods need.
    added = sum(a.desired_to - a.desired_from for a in ups)
    added_again = sum(a.desired_to - a.desired_from for a in again.changes if a.reason == Reason.SCALE_UP_PENDING)
    needed, _ = pack_pods(po.pending_pod_gpus, s.pools[0].gpus_per_node)
    spares = warm_up_nodes(s.pools[0], po)  # warm-up (when on) rides on the same scale-up
    assert added + added_again <= needed + spares
    if added >= needed + spares:
        assert added_again == 0


def _nodes_for_pending(ps, po) -> int:
    """The nodes the pending pods need: those that may run on spot packed on spot nodes, those that may not
    (PoolObservation.on_demand_only_pod_gpus, when they are among the pending pods and the pool has an on-demand
    group) packed on on-demand nodes of their own (docs/policy.md, "Pods that may not run on spot")."""
    pending = Counter(p for p in po.pending_pod_gpus or () if p > 0)
    off = Counter(p for p in po.on_demand_only_pod_gpus or () if p > 0)
    if not off or not ps.on_demand_group or any(pending[g] < n for g, n in off.items()):
        return pack_pods(tuple(pending.elements()), ps.gpus_per_node)[0] if pending else 0
    rest = pending - off
    spot = pack_pods(tuple(rest.elements()), ps.gpus_per_node)[0] if rest else 0
    return spot + pack_pods(tuple(off.elements()), ps.gpus_per_node)[0]


@given(worlds())
def test_warm_up_adds_at_most_the_spares_it_wants_and_never_blind(world):
    """Warm-up launches only with warm_up on and a known rhythm, never more than warm_up_nodes beyond what
    pending pods need, and none while any elastic node's reserved-GPU figure is unknown."""
    s, obs = world
    ps, po = s.pools[0], obs.pools[0]
    plan = decide(s, obs, NOW)
    ups = [a for a in plan.changes if a.kind == ACTION_SET_DESIRED and a.desired_to > a.desired_from]
    added = sum(a.desired_to - a.desired_from for a in ups)
    needed = _nodes_for_pending(ps, po)
    util_node = 1 if ps.workload == "service" else 0
    if not ps.warm_up or po.rhythm_rate_nodes_per_minute is None:
        assert Reason.WARM_UP not in plan.decision("research").reasons
        return
    assert added <= max(needed, util_node) + warm_up_nodes(ps, po)
    blind = any(
        n.group in ps.elastic_groups and n.lifecycle == LIFECYCLE_IN_SERVICE and n.max_reserved_pct is None
        for n in po.nodes
    )
    if blind:
        assert all(a.reason != Reason.WARM_UP for a in ups)
        assert added <= max(needed, util_node)


# --- issue 14: safety rules ------------------------------------------------------------------------------------


def _shows_work(ps, n: Node) -> bool:
    """GPU work within the window the node is judged on: a GPU requested by a pod over the empty window; GPU
    utilization at or above the per-GPU idle threshold over the empty window, or, without a figure for it, over
    the idle window. (Work that ended before the window, a finished job, does not count.)"""
    threshold = node_idle_threshold_pct(ps)
    if (n.max_reserved_pct or 0) > 0 or (n.gpu_pods or 0) > 0:  # a GPU pod on it in this tick's pod list
        return True
    judged = ps.empty_timeout_minutes if n.recent_max_utilization_pct is not None else ps.idle_timeout_minutes
    figures = [n.recent_max_utilization_pct if n.recent_max_utilization_pct is not None else n.max_utilization_pct]
    if ps.scale_up_window_minutes <= judged:
        figures.append(n.avg_utilization_pct)
    return any(v is not None and v >= threshold for v in figures)


@given(worlds())
def test_no_plan_terminates_a_node_with_gpu_work(world):
    """Every signal must agree: a GPU pod on the node in this tick's pod list, a GPU requested by a pod, or a
    utilization figure at or above the per-GPU idle threshold over the window the node is judged on, keeps the node; an in-service node also needs the data to
    say so (missing data is busy)."""
    s, obs = world
    ps = s.pools[0]
    nodes = {n.instance_id: n for n in obs.pools[0].nodes}
    for a in decide(s, obs, NOW).changes:
        if a.kind != ACTION_TERMINATE:
            continue
        n = nodes[a.instance_id]
        assert not _shows_work(ps, n), (a, n)
        if n.lifecycle == LIFECYCLE_IN_SERVICE:
            assert n.max_reserved_pct == 0.0, (a, n)
            assert n.max_utilization_pct is not None or n.recent_max_utilization_pct is not None, (a, n)


@given(worlds())
def test_one_kind_of_change_per_group_per_plan(world):
    """UpdateNodegroupConfig is asynchronous: an absolute size sent with terminations on the same group could
    land after them and relaunch the nodes. A plan never mixes the two on a group."""
    s, obs = world
    kinds: dict[str, set[str]] = {}
    for a in decide(s, obs, NOW).changes:
        kinds.setdefault(a.group, set()).add(a.kind)
    assert all(len(k) == 1 for k in kinds.values()), kinds


pods_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
            "gpus": st.integers(0, 2),
            "annotation": st.sampled_from([None, *DO_NOT_DISRUPT]),
            "value": st.sampled_from(["true", "false", "True"]),
        }
    ),
    max_size=3,
)


def _pod(k: int, p: dict) -> dict:
    meta = {"name": f"p{k}", "namespace": "ml"}
    if p["annotation"]:
        meta["annotations"] = {p["annotation"]: p["value"]}
    return {
        "metadata": meta,
        "status": {"phase": p["phase"]},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(p["gpus"])}}}]},
    }


class PodsOnNodes:
    """NodeGuardPort over generated pods, using the product's own blocking rule (policy.pods.blocking_reason)."""

    def __init__(self, pods: dict[str, list[dict]]):
        self.pods = pods

    def cordon(self, name):
        return True

    def uncordon(self, name):
        pass

    def blockers(self, name):
        return [w for w in (blocking_reason(p) for p in self.pods.get(name, [])) if w]


@given(worlds(), st.data())
def test_no_applied_termination_hits_a_gpu_pod_or_do_not_disrupt(world, data):
    """The check the engine cannot make, at the tick: whatever the plan, a node with a non-terminal GPU pod
    (pending or running) or a pod annotated do-not-disrupt=true is never terminated."""
    s, obs = world
    plan = decide(s, obs, NOW)
    pods = {
        f"node-{n.instance_id}": [_pod(k, p) for k, p in enumerate(data.draw(pods_strategy))]
        for n in obs.pools[0].nodes
    }
    # The groups as the tick's re-read before a change finds them (tick._recheck): the observed instances, so a
    # planned termination reaches the pod check instead of being refused as "no longer in the group".
    groups = FakeGroups(
        list(obs.pools[0].groups),
        [
            Instance(n.instance_id, n.group, n.lifecycle, n.launched_at, f"node-{n.instance_id}")
            for n in obs.pools[0].nodes
        ],
    )
    ports = Ports(groups, FakeUtil({}), FakePods({}), None, MemoryState(), FakePublisher(), PodsOnNodes(pods))
    result = TickResult(plan)
    _apply(s, plan, obs, ports, result, None, {n.instance_id: f"node-{n.instance_id}" for n in obs.pools[0].nodes})
    for kind, *args in groups.writes:
        if kind != "terminate":
            continue
        for pod in pods[f"node-{args[0]}"]:
            live = pod["status"]["phase"] not in ("Succeeded", "Failed")
            gpu = int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) > 0
            dnd = any(v.lower() == "true" for v in (pod["metadata"].get("annotations") or {}).values())
            assert not (live and (gpu or dnd)), (args[0], pod)


@given(
    st.datetimes(timezones=st.just(__import__("datetime").timezone.utc)).map(lambda t: t.isoformat())
    | st.text(max_size=30),
    st.booleans(),
)
def test_a_live_tick_ignores_the_event_time(event_now, with_dry_run_false):
    """Whatever time an event carries, a live tick decides at the clock's time and writes state as usual."""
    seen = {}
    event = {"now": event_now}
    if with_dry_run_false:
        event["dry_run"] = False
    with (
        mock.patch.object(handler, "load_settings", lambda: settings(pool_settings())),
        mock.patch.object(handler, "build_ports", lambda *a, **k: None),
        mock.patch.object(handler, "clock", lambda: NOW),
        mock.patch.object(handler, "run_tick", lambda st_, p, now, **kw: seen.update(now=now, **kw)),
    ):
        handler.handle(event, types.SimpleNamespace(), session=object())
    assert seen["now"] == NOW and seen["persist"] is True


@given(worlds())
def test_desired_never_drops_below_the_instances_that_exist(world):
    """Issue 24 item 11: lowering a group's desired size below its live instances (in service or booting) lets the
    Auto Scaling group choose which instance dies, possibly one with a GPU pod. A cut only cancels launches that
    have no instance yet; an instance leaves by id (terminate), chosen by the rules that check its work."""
    s, obs = world
    po = obs.pools[0]
    live = {
        g.name: sum(1 for n in po.nodes if n.group == g.name and (n.lifecycle == LIFECYCLE_IN_SERVICE or n.launching))
        for g in po.groups
    }
    for a in decide(s, obs, NOW).changes:
        if a.kind == ACTION_SET_DESIRED and a.desired_to < a.desired_from:
            assert a.desired_to >= live[a.group], (a, live)


@given(worlds())
def test_spot_is_never_grown_for_pods_that_may_not_run_on_spot(world):
    """policy/off_spot.py: when every pending pod may not run on spot, and no rule adds nodes without a pending
    pod (batch, no warm-up), no set_desired grows the spot group."""
    s, obs = world
    ps = dataclasses.replace(s.pools[0], workload="batch", warm_up=False)
    po = obs.pools[0]
    gangs = tuple(dataclasses.replace(g, on_demand_only=True) for g in po.pending_gangs)
    po = dataclasses.replace(po, on_demand_only_pod_gpus=po.pending_pod_gpus, pending_gangs=gangs)
    plan = decide(dataclasses.replace(s, pools=(ps,)), Observation((po,), None), NOW)
    assert not [
        a for a in plan.changes if a.kind == ACTION_SET_DESIRED and a.group == SPOT and a.desired_to > a.desired_from
    ], [a.to_dict() for a in plan.actions]


# --- issue 41: the same rules with the pools in shards ---------------------------------------------------------


def _renamed(world, name: str):
    """The world's pool as another pool `name`: its own groups and instances (policy_cases' naming)."""
    s, obs = world
    ps, po = s.pools[0], obs.pools[0]
    to = {SPOT: f"{name}-spot", OD: f"{name}-od", FLOOR: f"{name}-floor"}
    ps = dataclasses.replace(ps, name=name, spot_group=to[SPOT], on_demand_group=to[OD], guaranteed_group=to[FLOOR])
    po = dataclasses.replace(
        po,
        name=name,
        groups=tuple(dataclasses.replace(g, name=to[g.name]) for g in po.groups),
        nodes=tuple(dataclasses.replace(n, group=to[n.group], instance_id=f"{name}-{n.instance_id}") for n in po.nodes),
    )
    return ps, po


class _Actual:
    def __init__(self, usd):
        self.usd = usd

    def actual_usd(self, name):
        return self.usd


def _decide_in_shards(first, second, shards: int, env_budget, actual, seeded: bool):
    """Two pools decided as `shards` shards (1: one shard of both), one after the other, against one state table
    (policy/shard_budget.py). Returns the settings, the observation, the plans by shard and the table."""
    from policy import shard_budget
    from policy.model import Plan, Settings, ShardSettings

    (ps_a, po_a), (ps_b, po_b) = _renamed(first, "research"), _renamed(second, "teamb")
    groups = (("all", ("research", "teamb")),) if shards == 1 else (("one", ("research",)), ("two", ("teamb",)))
    full = Settings(
        "dev",
        "us-east-1",
        "c",
        (ps_a, ps_b),
        budget_monthly_usd=env_budget,
        budget_name="env",
        shards=tuple(ShardSettings(n, p) for n, p in groups),
    )
    obs = Observation((po_a, po_b))
    state = MemoryState()
    own = {
        sh.name: (full.shard(sh.name), Observation(tuple(p for p in obs.pools if p.name in sh.pools)))
        for sh in full.shards
    }
    if seeded:  # every shard ticked before: its reservation is what runs now
        state.save(
            shard_budget.ENV_BUDGET_KEY,
            {
                "shards": {
                    n: {"usd_per_hour": shard_budget.reserved_usd_per_hour(s, o, Plan((), dry_run=True))}
                    for n, (s, o) in own.items()
                }
            },
            0,
        )
    plans = {
        n: shard_budget.decide_and_reserve(full, n, s, o, state, _Actual(actual), NOW, lambda e: None)
        for n, (s, o) in own.items()
    }
    return full, obs, plans, state


@st.composite
def wanting(draw):
    """A pool with pending pods and busy nodes only, its groups ACTIVE: it wants to grow, so the budget decides."""
    ps = pool_settings(
        spot_max_nodes=draw(st.integers(1, 8)),
        on_demand_max_nodes=draw(st.integers(1, 4)),
        max_step_nodes=draw(st.one_of(st.none(), st.integers(1, 4))),
    )
    up = draw(st.integers(0, ps.spot_max_nodes))
    nodes = tuple(
        Node(f"i-{SPOT}-{k}", SPOT, ago(120), LIFECYCLE_IN_SERVICE, 90.0, 90.0, 100.0, 90.0, 1) for k in range(up)
    )
    groups = (Group(SPOT, up, 0, 0, "ACTIVE", ago(60), False), Group(OD, 0, 0, 0, "ACTIVE", ago(60), False))
    pending = tuple(draw(st.lists(st.integers(1, 1), min_size=1, max_size=10)))
    return settings(ps), Observation((PoolObservation("research", groups, nodes, pending, None),), None)


any_world = st.one_of(worlds(), wanting())
sharded_worlds = st.tuples(
    any_world,
    any_world,
    st.sampled_from([1, 2]),  # env budgets that bind: $1-12 an hour
    st.one_of(st.none(), st.floats(500, 6_000)),
    st.floats(0, 3_000),
    st.booleans(),
)
capped_worlds = st.tuples(
    wanting(), wanting(), st.sampled_from([1, 2]), st.floats(800, 6_000), st.floats(0, 1_000), st.booleans()
)


@given(sharded_worlds)
def test_in_shards_every_pool_keeps_the_safety_rules(case):
    """Floor untouched, bounds, one kind of change per group, and the pool's own budget projection: per pool,
    whatever the shard."""
    first, second, shards, env_budget, actual, seeded = case
    full, obs, plans, _ = _decide_in_shards(first, second, shards, env_budget, actual, seeded)
    for plan in plans.values():
        kinds: dict[str, set[str]] = {}
        for a in plan.changes:
            ps, po = full.pool(a.pool), obs.pool(a.pool)
            assert a.group != ps.guaranteed_group
            kinds.setdefault(a.group, set()).add(a.kind)
            if a.kind == ACTION_SET_DESIRED:
                assert a.desired_to <= max(ps.max_nodes(a.group), po.group(a.group).desired_nodes)
            assert po.group(a.group).status == "ACTIVE"
        assert all(len(k) == 1 for k in kinds.values()), kinds
        for d in plan.decisions:
            ps, po = full.pool(d.pool), obs.pool(d.pool)
            grew = any(a.kind == ACTION_SET_DESIRED and a.desired_to > a.desired_from for a in d.actions)
            if grew and ps.budget_monthly_usd is not None and ps.budget_enforcement == "cap_elastic":
                spend = po.spend
                mtd = (
                    (spend.month_to_date_usd if spend.actual_usd is not None else spend.estimated_since_usd)
                    if spend
                    else 0.0
                )
                projected = mtd + (d.elastic_usd_per_hour + ps.guaranteed_usd_per_hour) * hours_left_in_month(NOW)
                assert projected <= ps.budget_monthly_usd + 1e-6


@given(st.one_of(sharded_worlds, capped_worlds))
def test_in_shards_the_environment_budget_holds_across_them(case):
    """No shard spends headroom another already spent: once any pool grew, the month so far plus every shard's
    reservation (its floors and the larger of its elastic rate before and after) over the month's hours left
    fits the environment budget."""
    from policy import shard_budget

    first, second, shards, env_budget, actual, seeded = case
    full, obs, plans, state = _decide_in_shards(first, second, shards, env_budget, actual, seeded)
    grew = any(
        a.kind == ACTION_SET_DESIRED and a.desired_to > a.desired_from for p in plans.values() for a in p.changes
    )
    if env_budget is None or not grew:
        return
    shared, _ = state.load(shard_budget.ENV_BUDGET_KEY)
    reserved = sum(e["usd_per_hour"] for e in shared["shards"].values())
    assert actual + reserved * hours_left_in_month(NOW) <= env_budget + 1e-3


@given(
    worlds(missing_data=True),
    worlds(missing_data=True),
    st.sampled_from([1, 2]),
    st.one_of(st.none(), st.floats(1_000, 40_000)),
)
def test_in_shards_missing_data_never_shrinks(first, second, shards, env_budget):
    _, _, plans, _ = _decide_in_shards(first, second, shards, env_budget, 0.0, False)
    for plan in plans.values():
        for a in plan.changes:
            assert a.kind == ACTION_SET_DESIRED and a.desired_to >= a.desired_from, a
