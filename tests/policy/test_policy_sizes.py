"""Right-sized nodes (policy/sizes.py): a pool of several node sizes grows the size with the lowest price per GPU its
pending pods use, every one-size rule working per size group."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from policy.decide import decide
from policy.errors import BadSettings
from policy.model import ACTION_SET_DESIRED, ACTION_TERMINATE, NodeSize, Settings
from policy.terms import Reason
from policy.sizes import SizeChoice, choose_new_nodes
from policy_cases import OD, SPOT, group, idle, node, observe, pool_settings, settings, spend
from test_policy_e2e import kube  # noqa: F401 - the fake Kubernetes API fixture

# g6e in us-east-1, the shared price book (../shared/data/prices/aws_gpu_prices.csv): spot / on-demand per node-hour
# of g6e.2xlarge (1 L40S), g6e.12xlarge (4) and g6e.48xlarge (8).
S1, O1, S4, O4 = "research-spot-1gpu", "research-od-1gpu", "research-spot-4gpu", "research-od-4gpu"


def _sized(**kw):
    base = dict(
        gpus_per_node=8,
        spot_usd_per_hour=8.2956,
        on_demand_usd_per_hour=30.13118,
        spot_max_nodes=10,
        on_demand_max_nodes=10,
        other_sizes=(NodeSize(1, S1, O1, 10, 10, 0.8337, 2.24208), NodeSize(4, S4, O4, 10, 10, 5.0844, 10.49264)),
    )
    base.update(kw)
    return pool_settings(**base)


def _groups(changed: float = 60, **desired):
    names = {"spot": SPOT, "od": OD, "s1": S1, "o1": O1, "s4": S4, "o4": O4}
    return [group(names[k], desired.get(k, 0), changed=changed) for k in names]


def _sets(plan):
    return {a.group: a.desired_to for a in plan.actions if a.kind == ACTION_SET_DESIRED}


def test_one_gpu_pods_get_one_gpu_nodes_and_an_eight_gpu_job_an_eight_gpu_node():
    plan = decide(settings(_sized()), observe(groups=_groups(), pending=(1, 1, 8)), _now())
    assert _sets(plan) == {S1: 2, SPOT: 1}
    assert all(a.reason is Reason.SCALE_UP_PENDING for a in plan.changes)


def test_price_per_fitted_gpu_picks_the_size_whose_pods_fill_it_cheapest():
    # Four 1-GPU pods: 4 x g6e.2xlarge spot ($0.83 a GPU) beat one g6e.12xlarge ($1.27 a GPU).
    plan = decide(settings(_sized()), observe(groups=_groups(), pending=(1, 1, 1, 1)), _now())
    assert _sets(plan) == {S1: 4}
    # A 3-GPU pod fits only the 4- and 8-GPU sizes: $5.08 / 3 used beats $8.30 / 3 used.
    plan = decide(settings(_sized()), observe(groups=_groups(), pending=(3,)), _now())
    assert _sets(plan) == {S4: 1}
    # Three 3-GPU pods and a 2-GPU pod: one 8-GPU node holds 2 x 3 + 2 = 8 used GPUs ($1.04 each), a 4-GPU node 3.
    plan = decide(settings(_sized()), observe(groups=_groups(), pending=(3, 3, 3, 2)), _now())
    assert _sets(plan) == {SPOT: 1, S4: 1}


def test_a_full_size_sends_its_pods_to_the_next_cheapest_size():
    ps = _sized(other_sizes=(NodeSize(1, S1, O1, 2, 2, 0.8337, 2.24208), NodeSize(4, S4, O4, 10, 10, 5.0844, 10.49264)))
    plan = decide(
        settings(ps),
        observe(groups=_groups(s1=2), nodes=[node(f"i-{k}", S1) for k in range(2)], pending=(1, 1, 1)),
        _now(),
    )
    assert _sets(plan) == {S4: 1}


def test_nodes_on_their_way_are_not_bought_twice():
    # A 1-GPU node launched last tick takes the pending 1-GPU pod: nothing more is bought, in no size.
    plan = decide(settings(_sized()), observe(groups=_groups(changed=1, s1=1), pending=(1,)), _now())
    assert _sets(plan) == {}
    # An 8-GPU node on its way takes two 1-GPU pods that came after it: no 1-GPU nodes are bought beside it.
    plan = decide(settings(_sized()), observe(groups=_groups(changed=1, spot=1), pending=(1, 1)), _now())
    assert _sets(plan) == {}


def test_spot_short_in_one_size_falls_back_to_that_sizes_on_demand_group():
    ps = _sized()
    groups = _groups(s1=1, spot=1)
    groups[2] = group(S1, 1, shortage=True)
    obs = observe(groups=groups, nodes=[node("i-8", SPOT)], pending=(1,))
    plan = decide(settings(ps), obs, _now())
    assert _sets(plan) == {O1: 1}
    assert Reason.SPOT_FALLBACK in plan.decision("research").reasons


def test_idle_nodes_are_reclaimed_in_every_size_and_unknown_pending_holds():
    ps = _sized(idle_timeout_minutes=10)
    nodes = [idle("i-one", S1), idle("i-four", S4), node("i-eight", SPOT)]
    obs = observe(groups=_groups(s1=1, s4=1, spot=1), nodes=nodes, pending=())
    plan = decide(settings(ps), obs, _now())
    assert {a.instance_id for a in plan.actions if a.kind == ACTION_TERMINATE} == {"i-one", "i-four"}
    unknown = observe(groups=_groups(s1=1, s4=1, spot=1), nodes=nodes, pending=None)
    plan = decide(settings(ps), unknown, _now())
    assert not plan.changes
    assert Reason.HOLD_MISSING_DATA in plan.decision("research").reasons


def test_a_missing_group_of_any_size_holds_the_whole_pool():
    groups = [g for g in _groups() if g.name != O4]
    plan = decide(settings(_sized()), observe(groups=groups, pending=(1, 8)), _now())
    assert not plan.changes
    assert plan.decision("research").reasons == (Reason.HOLD_MISSING_DATA,)


def test_the_budget_cap_is_shared_by_the_sizes():
    # $2,000 left of the pool's budget with 480 hours left affords ~$4.17 an hour: the 8-GPU node ($8.30) is not
    # affordable, a 1-GPU node is, once.
    ps = _sized(budget_monthly_usd=10_000.0, guaranteed_usd_per_hour=0.0)
    now = _now()
    obs = observe(groups=_groups(), pending=(8, 1), spend=spend(10_000.0 - 4.0 * 480))
    plan = decide(settings(ps), obs, now)
    sets = _sets(plan)
    assert SPOT not in sets and sets.get(S1) == 1
    assert Reason.BUDGET_CAP in plan.decision("research").reasons


def test_step_limit_and_max_nodes_hold_per_group():
    ps = _sized(max_step_nodes=2)
    plan = decide(settings(ps), observe(groups=_groups(), pending=(1,) * 5 + (8,) * 5), _now())
    assert _sets(plan) == {S1: 2, SPOT: 2}


def test_choose_new_nodes_batches_thousands_of_pods_as_one_by_one_would():
    sizes = [SizeChoice(1, 0.8337, 5000), SizeChoice(4, 5.0844, 5000), SizeChoice(8, 8.2956, 5000)]
    pods = Counter({1: 3000, 3: 700, 2: 50, 8: 40})
    given, nodes = choose_new_nodes(pods, sizes)
    assert sum(sum(c.values()) for c in given.values()) == sum(pods.values())
    # one by one: the same choice made a node at a time
    slow_given, slow_nodes = _one_by_one(pods, sizes)
    assert nodes == slow_nodes and given == slow_given


def _one_by_one(pods, sizes):
    from policy.sizes import fill_one_node

    left = Counter(pods)
    given = {s.gpus_per_node: Counter() for s in sizes}
    nodes = dict.fromkeys(given, 0)
    while left:
        fits = [s for s in sizes if s.gpus_per_node >= max(left)]
        fills = {s.gpus_per_node: fill_one_node(left, s.gpus_per_node) for s in fits}
        best = min(
            fits,
            key=lambda s: (s.usd_per_hour / sum(g * k for g, k in fills[s.gpus_per_node].items()), s.gpus_per_node),
        )
        for g, k in fills[best.gpus_per_node].items():
            given[best.gpus_per_node][g] += k
            left[g] -= k
        left = +left
        nodes[best.gpus_per_node] += 1
    return given, nodes


def test_settings_json_round_trips_the_sizes_and_names_a_clash():
    s = settings(_sized())
    back = Settings.from_json(s.to_json())
    assert back == s
    assert back.pools[0].elastic_groups == (SPOT, OD, S1, O1, S4, O4)
    bad = s.to_json().replace('"gpus_per_node":4', '"gpus_per_node":8')
    with pytest.raises(BadSettings, match="other_sizes"):
        Settings.from_json(bad)


def test_a_one_size_pool_decides_as_before_sizes_existed():
    # The same observation with and without an empty other_sizes: the very same plan.
    ps = pool_settings(gpus_per_node=8)
    obs = observe(pending=(4, 4, 2, 6))
    assert decide(settings(ps), obs, _now()) == decide(
        settings(pool_settings(gpus_per_node=8, other_sizes=())), obs, _now()
    )


def _now():
    from policy_cases import NOW

    return NOW


def test_back_to_spot_closes_each_sizes_fallback_nodes_once_that_sizes_spot_is_back():
    # the 1-GPU size's spot is back (desired 1, up 1) while its on-demand fallback node still runs a job
    obs = observe(groups=_groups(s1=1, o1=1), nodes=[node("i-s1", S1), node("i-o1", O1)], pending=())
    d = decide(settings(_sized()), obs, _now()).decision("research")
    assert d.closed_to_new_pods == ("i-o1",)
    assert Reason.SPOT_RECOVERED in d.reasons


def test_the_tick_taints_another_sizes_fallback_node(kube):
    """policy/closing.py puts the back-to-spot taint on every size's on-demand nodes the engine closes."""
    from policy import closing
    from policy.io.kube import KubeClient
    from policy.model import Node, Observation, Plan, PoolDecision, PoolObservation
    from test_back_to_spot import TAINT, _taints, _token

    kube.add_node("od-1gpu")
    obs = Observation((PoolObservation("research", (), (Node("i-o1", O1, _now()),)),))
    client = KubeClient(kube.endpoint, kube.ca_pem, _token)
    plan = Plan((PoolDecision("research", (), closed_to_new_pods=("i-o1",)),))
    errors = []
    assert closing.apply(settings(_sized()), plan, obs, client, {"i-o1": "od-1gpu"}, errors.append) == [
        ("od-1gpu", True)
    ]
    assert errors == [] and TAINT in _taints(kube, "od-1gpu")


def test_the_tick_reads_capacity_shortages_of_every_sizes_spot_group():
    """policy/tick.py asks the node group reader for the spot shortage (failed launches) of every size's spot group:
    a 1-GPU size short of spot falls back on its own on-demand group."""
    from policy.tick import Ports, observe

    class Groups:
        asked: set = set()

        def read(self, names, now, spot_groups, record):
            Groups.asked = set(spot_groups)
            return {}

    class Utilization:
        def read(self, refs, now, window):
            return {}

    observe(settings(_sized()), Ports(Groups(), Utilization()), {}, _now(), [])
    assert Groups.asked == {SPOT, S1, S4}


# --- the safety rules hold for pools of several sizes (as tests/policy/test_policy_properties.py for one size) ----------

from hypothesis import given, strategies as st  # noqa: E402

from policy.model import Group, LIFECYCLE_IN_SERVICE, LIFECYCLE_PENDING, Node, Observation, PoolObservation  # noqa: E402


@st.composite
def sized_worlds(draw):
    ps = _sized(
        spot_max_nodes=draw(st.integers(1, 4)),
        on_demand_max_nodes=draw(st.integers(1, 3)),
        max_step_nodes=draw(st.one_of(st.none(), st.integers(1, 3))),
        budget_monthly_usd=draw(st.one_of(st.none(), st.floats(500, 50_000))),
        idle_timeout_minutes=10,
        other_sizes=(
            NodeSize(1, S1, O1, draw(st.integers(1, 6)), draw(st.integers(1, 3)), 0.8337, 2.24208),
            NodeSize(4, S4, O4, draw(st.integers(1, 4)), draw(st.integers(1, 3)), 5.0844, 10.49264),
        ),
    )
    groups, nodes = [], []
    for gname in ps.elastic_groups:
        up, boot = draw(st.integers(0, 3)), draw(st.integers(0, 1))
        for k in range(up + boot):
            util = draw(st.one_of(st.none(), st.sampled_from([0.0, 0.0, 3.0, 50.0])))
            reserved = draw(st.one_of(st.none(), st.sampled_from([0.0, 0.0, 25.0])))
            pods = draw(st.one_of(st.none(), st.sampled_from([0, 0, 1])))
            nodes.append(
                Node(
                    f"i-{gname}-{k}",
                    gname,
                    ago_minutes(draw(st.integers(0, 120))),
                    LIFECYCLE_IN_SERVICE if k < up else LIFECYCLE_PENDING,
                    util,
                    util,
                    reserved,
                    util,
                    pods,
                )
            )
        groups.append(
            Group(
                gname,
                up + boot + draw(st.integers(0, 1)),
                0,
                0,
                "ACTIVE",
                ago_minutes(draw(st.integers(0, 30))),
                draw(st.booleans()),
            )
        )
    pending = draw(st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=10).map(tuple)))
    spend_ = draw(st.one_of(st.none(), st.just(spend(1000.0))))
    return settings(ps), Observation((PoolObservation("research", tuple(groups), tuple(nodes), pending, spend_, ()),))


def ago_minutes(m):
    from policy_cases import ago

    return ago(m)


@given(sized_worlds())
def test_sized_plans_keep_the_safety_rules(world):
    from policy.decide import node_idle_threshold_pct

    s, obs = world
    ps, po = s.pools[0], obs.pools[0]
    plan = decide(s, obs, _now())
    assert plan == decide(s, obs, _now())  # same input, same plan
    kinds: dict[str, set] = {}
    by_id = {n.instance_id: n for n in po.nodes}
    for a in plan.changes:
        assert a.group in ps.elastic_groups
        kinds.setdefault(a.group, set()).add(a.kind)
        g = po.group(a.group)
        if a.kind == ACTION_SET_DESIRED:
            assert a.desired_to >= 0
            if a.desired_to > g.desired_nodes:
                assert a.desired_to <= ps.max_nodes(a.group)  # a size's group grows to its own max at most
                assert po.pending_pod_gpus is not None  # unknown pending pods never scale up
                if ps.max_step_nodes is not None:
                    assert a.desired_to - g.desired_nodes <= ps.max_step_nodes
        if a.kind == ACTION_TERMINATE:
            n = by_id[a.instance_id]
            assert n.group == a.group and not n.gpu_pods
            size = replace(ps, gpus_per_node=ps.gpus_of(n.group), other_sizes=())
            for v in (n.max_utilization_pct, n.recent_max_utilization_pct):
                assert v is None or v < node_idle_threshold_pct(size)
            assert not (n.max_reserved_pct or 0)
    assert all(len(k) == 1 for k in kinds.values())  # one kind of change per group per tick


def test_pods_kept_off_spot_grow_their_sizes_on_demand_group_and_are_counted_once():
    # Two 1-GPU pods and one 8-GPU pod pending, one 1-GPU pod and the 8-GPU pod may not run on spot
    # (policy/off_spot.py): each size's on-demand group grows for its own pod kept off spot, its spot group for the
    # rest, and no size sees a pod another size was given (that would hold the pool as data that does not add up).
    obs = observe(groups=_groups(), pending=(1, 1, 8))
    obs = replace(obs, pools=(replace(obs.pools[0], on_demand_only_pod_gpus=(8, 1)),))
    plan = decide(settings(_sized()), obs, _now())
    assert _sets(plan) == {S1: 1, O1: 1, OD: 1}
    assert Reason.ON_DEMAND_ONLY in {a.reason for a in plan.changes}
    assert Reason.HOLD_MISSING_DATA not in {a.reason for a in plan.actions}
