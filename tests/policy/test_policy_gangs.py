"""Gangs launched whole (issue 28, kubernetes-sigs/karpenter#3138): policy/gangs.py through policy.decide.decide,
the Lambda's reading of pod groups (policy/pods.py, policy/io/kube.py), the config bound, and the simulator's measure."""

from __future__ import annotations

import base64
from dataclasses import replace
from pricing import checks

import pytest

from conftest import requires_shared_prices, resolved_prices
from fake_kube import FakeKube, gpu_pod
from policy.decide import decide
from policy.io.kube import KubeClient
from policy.pods import gang_of
from policy.model import ACTION_SET_DESIRED, ACTION_TERMINATE, Node, PendingGang
from policy.terms import Reason
from policy_cases import NOW, OD, SPOT, ago, group, idle, node, observe, pool_settings, settings

R = Reason
GPN = 8


def _ps(**kw):
    base = dict(
        gpus_per_node=GPN,
        spot_max_nodes=8,
        on_demand_max_nodes=4,
        max_step_nodes=None,
        idle_timeout_minutes=10,
        empty_timeout_minutes=2,
        gang_wait_minutes=15,
    )
    base.update(kw)
    return pool_settings(**base)


def _obs(groups, nodes=(), pending=(), gangs=()):
    obs = observe(groups=groups, nodes=nodes, pending=pending)
    po = replace(obs.pools[0], pending_gangs=tuple(gangs))
    return replace(obs, pools=(po,))


def _gang(k: int, waited_minutes: float | None, name: str = "research/train") -> PendingGang:
    return PendingGang(name, (GPN,) * k, None if waited_minutes is None else ago(waited_minutes))


def _plan(ps, obs):
    return decide(settings(ps), obs, NOW).decisions[0]


def _sets(d):
    return {a.group: a.desired_to for a in d.actions if a.kind == ACTION_SET_DESIRED}


def _terminated(d):
    return {a.instance_id for a in d.actions if a.kind == ACTION_TERMINATE}


def _empty(iid: str, group_name: str = SPOT, age: float = 30) -> Node:
    """An in-service elastic node every signal calls idle and with no pod on it (the tick's pod list says 0)."""
    return replace(idle(iid, group_name, age=age), gpu_pods=0)


# --- launched whole ------------------------------------------------------------------------------------------


def test_a_gang_is_launched_in_one_step_whatever_max_step_nodes_says():
    ps = _ps(max_step_nodes=2)
    obs = _obs([group(SPOT, 0), group(OD, 0)], pending=(GPN,) * 4, gangs=[_gang(4, 0)])
    assert _sets(_plan(ps, obs)) == {SPOT: 4}
    # the same pods, not known to be one gang: the step limit spreads them over ticks, as before
    assert _sets(_plan(ps, _obs([group(SPOT, 0), group(OD, 0)], pending=(GPN,) * 4))) == {SPOT: 2}


def test_a_cut_by_the_group_max_buys_no_part_of_a_gang():
    ps = _ps(spot_max_nodes=6)
    busy = [node(f"i-busy-{k}", SPOT, max_util=90.0) for k in range(3)]
    obs = _obs([group(SPOT, 3), group(OD, 0)], busy, pending=(GPN,) * 4 + (2,), gangs=[_gang(4, 0)])
    d = _plan(ps, obs)
    # room for 3: the 4-node gang cannot be bought whole, so only the single pod's node is added
    assert _sets(d) == {SPOT: 4} and R.AT_MAX in d.reasons
    # without gangs the same room buys three nodes of which the gang can use none
    plain = _plan(ps, _obs([group(SPOT, 3), group(OD, 0)], busy, pending=(GPN,) * 4 + (2,)))
    assert _sets(plain) == {SPOT: 6}


def test_a_cut_by_the_budget_buys_no_part_of_a_gang():
    ps = _ps(budget_monthly_usd=1000.0, spot_usd_per_hour=1.0)
    from policy_cases import spend

    # headroom: (1000 - 0) / hours left (~500 h) - the floor's 0.80/h: about one node's worth
    obs = _obs([group(SPOT, 0), group(OD, 0)], pending=(GPN,) * 3, gangs=[_gang(3, 0)])
    obs = replace(obs, pools=(replace(obs.pools[0], spend=spend(0.0)),))
    d = _plan(ps, obs)
    assert _sets(d) == {} and R.BUDGET_CAP in d.reasons
    plain = replace(obs, pools=(replace(obs.pools[0], pending_gangs=()),))
    assert _sets(_plan(ps, plain)) == {SPOT: 1}  # one node of three, paid, useless until the other two come


def test_idle_nodes_a_gang_will_take_count_towards_it():
    ps = _ps()
    nodes = [_empty("i-a"), _empty("i-b")]
    obs = _obs([group(SPOT, 2), group(OD, 0)], nodes, pending=(GPN,) * 4, gangs=[_gang(4, 2)])
    d = _plan(ps, obs)
    assert _sets(d) == {SPOT: 4}  # two more, not four: the two empty nodes are the gang's
    assert not _terminated(d)  # and they are kept for it while it is within its wait
    assert _sets(_plan(ps, _obs([group(SPOT, 2), group(OD, 0)], nodes, pending=(GPN,) * 4))) == {SPOT: 6}


# --- bounded wait ---------------------------------------------------------------------------------------------


def test_a_gang_past_its_wait_gets_its_missing_nodes_from_on_demand():
    ps = _ps(fallback_after_minutes=60)
    nodes = [_empty("i-a"), _empty("i-b")]
    # spot was asked for 4 three minutes ago and gave 2: no shortage reported, far from fallback_after_minutes
    spot = group(SPOT, 4, changed=3)
    within = _plan(ps, _obs([spot, group(OD, 0)], nodes, pending=(GPN,) * 4, gangs=[_gang(4, 10)]))
    assert _sets(within) == {} and not _terminated(within)
    past = _plan(ps, _obs([spot, group(OD, 0)], nodes, pending=(GPN,) * 4, gangs=[_gang(4, 16)]))
    assert _sets(past) == {OD: 2} and R.SPOT_FALLBACK in past.reasons
    assert not _terminated(past)  # the two that came are kept: on-demand completes the gang


def test_a_gang_no_group_can_complete_is_released_past_its_wait():
    ps = _ps(on_demand_group=None, on_demand_max_nodes=0)
    nodes = [_empty("i-a"), _empty("i-b")]
    groups = [group(SPOT, 4, changed=3, shortage=True)]
    within = _plan(ps, _obs(groups, nodes, pending=(GPN,) * 4, gangs=[_gang(4, 10)]))
    assert not _terminated(within) and R.GANG_RELEASED not in within.reasons
    past = _plan(ps, _obs(groups, nodes, pending=(GPN,) * 4, gangs=[_gang(4, 20)]))
    assert _terminated(past) == {"i-a", "i-b"} and R.GANG_RELEASED in past.reasons
    assert not _sets(past)
    # without gangs the two idle nodes wait for the pending pods as long as spot stays short
    assert not _terminated(_plan(ps, _obs(groups, nodes, pending=(GPN,) * 4)))


def test_an_on_demand_fallback_without_room_for_the_rest_releases_the_gang():
    ps = _ps(on_demand_max_nodes=1)
    nodes = [_empty("i-a"), _empty("i-b")]
    groups = [group(SPOT, 4, changed=3, shortage=True), group(OD, 0)]
    d = _plan(ps, _obs(groups, nodes, pending=(GPN,) * 4, gangs=[_gang(4, 20)]))
    assert _terminated(d) == {"i-a", "i-b"} and R.GANG_RELEASED in d.reasons
    assert OD not in _sets(d)  # one on-demand node would complete nothing


def test_a_released_gang_is_not_retried_until_capacity_looks_available():
    ps = _ps(on_demand_group=None, on_demand_max_nodes=0)
    gang = [_gang(4, 40)]
    # its nodes are gone, spot still short (its earlier request still not filled): nothing is bought for it
    short = _plan(ps, _obs([group(SPOT, 2, changed=1, shortage=True)], (), pending=(GPN,) * 4, gangs=gang))
    assert not _sets(short) and R.GANG_RELEASED in short.reasons
    # spot filled what it was asked (2 new nodes up, no shortage): the rest of the gang is bought in one step
    up = [_empty("i-c", age=3), _empty("i-d", age=3)]
    back = _plan(ps, _obs([group(SPOT, 2, changed=8)], up, pending=(GPN,) * 4, gangs=gang))
    assert _sets(back) == {SPOT: 4} and R.GANG_RELEASED not in back.reasons


def test_an_unknown_wait_never_releases_a_gang():
    ps = _ps(on_demand_group=None, on_demand_max_nodes=0)
    nodes = [_empty("i-a"), _empty("i-b")]
    d = _plan(ps, _obs([group(SPOT, 4, shortage=True)], nodes, pending=(GPN,) * 4, gangs=[_gang(4, None)]))
    assert not _terminated(d) and R.GANG_RELEASED not in d.reasons


def test_a_released_gang_never_takes_a_node_with_a_gpu_pod():
    ps = _ps(on_demand_group=None, on_demand_max_nodes=0)
    # the metrics say idle, but the tick's pod list shows a GPU pod landed on i-b: it is not the gang's to lose
    nodes = [_empty("i-a"), replace(_empty("i-b"), gpu_pods=1)]
    d = _plan(ps, _obs([group(SPOT, 4, shortage=True)], nodes, pending=(GPN,) * 4, gangs=[_gang(4, 30)]))
    assert _terminated(d) == {"i-a"}


def test_gang_data_that_does_not_add_up_is_reported_and_ignored():
    ps = _ps(max_step_nodes=2)
    bad = _obs([group(SPOT, 0), group(OD, 0)], pending=(GPN,) * 2, gangs=[_gang(4, 0)])
    d = _plan(ps, bad)
    assert R.HOLD_MISSING_DATA in d.reasons
    plain = _plan(ps, _obs([group(SPOT, 0), group(OD, 0)], pending=(GPN,) * 2))
    assert _sets(d) == _sets(plain)


# --- the Lambda reads pod groups ---------------------------------------------------------------------------------


def _labelled(name, gpus, created, labels=None, annotations=None, group=None):
    pod = gpu_pod(name, gpus, pool="p", annotations=annotations)
    pod["metadata"]["namespace"] = "research"
    pod["metadata"]["creationTimestamp"] = created
    if labels:
        pod["metadata"]["labels"] = labels
    if group:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def test_gang_membership_comes_from_the_pod_group_labels_users_already_set():
    assert gang_of(_labelled("a", 8, "x", labels={"kueue.x-k8s.io/pod-group-name": "g"})) == "research/g"
    assert gang_of(_labelled("b", 8, "x", labels={"scheduling.x-k8s.io/pod-group": "h"})) == "research/h"
    assert gang_of(_labelled("c", 8, "x", annotations={"scheduling.k8s.io/group-name": "v"})) == "research/v"
    assert gang_of(_labelled("d", 8, "x", group="w")) == "research/w"  # v1.36 spec.schedulingGroup
    # v1.35 (the shipped version): spec.workloadRef; each replica key of a pod group is its own gang
    ref = _labelled("f", 8, "x")
    ref["spec"]["workloadRef"] = {"name": "train", "podGroup": "workers"}
    assert gang_of(ref) == "research/train/workers"
    ref["spec"]["workloadRef"]["podGroupReplicaKey"] = "1"
    assert gang_of(ref) == "research/train/workers/1"
    ref["spec"]["workloadRef"] = {"name": "train"}  # no pod group named: not a gang reference
    assert gang_of(ref) is None
    assert gang_of(_labelled("e", 8, "x", labels={"app": "sweep"})) is None


def test_the_lambda_groups_pending_pods_of_one_pod_group_with_their_oldest_creation():
    from datetime import datetime, timezone

    kube = FakeKube("c", page_size=2)
    try:
        lab = {"scheduling.x-k8s.io/pod-group": "train"}
        kube.pods = [
            _labelled("w0", 8, "2026-03-10T11:50:00Z", labels=lab),
            _labelled("w1", 8, "2026-03-10T11:45:00Z", labels=lab),
            _labelled("solo", 2, "2026-03-10T11:40:00Z"),
            gpu_pod("running", 8, pool="p", node_name="n1", phase="Running"),
        ]
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        client = KubeClient(kube.endpoint, kube.ca_pem, lambda: token)
        # no spot toleration on these pods: the gang may not run on spot (policy/off_spot.py)
        assert client.pending_gangs(["p"]) == {
            "p": (
                PendingGang(
                    "research/train", (8, 8), datetime(2026, 3, 10, 11, 45, tzinfo=timezone.utc), on_demand_only=True
                ),
            )
        }
        assert sorted(client.pending_gpus(["p"])["p"]) == [2, 8, 8]  # the gang's pods are pending pods too
    finally:
        kube.close()


# --- config ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("wait, ok", [(15, True), (7, True), (6, False), (1, False)])
def test_gang_wait_minutes_must_exceed_launch_minutes(wait, ok):
    from pydantic import ValidationError

    from config.config import Elastic

    def make():
        return Elastic(instance_types=["p4d.24xlarge"], max_nodes=4, launch_minutes=6, gang_wait_minutes=wait)

    if ok:
        assert make().gang_wait_minutes == wait
    else:
        with pytest.raises(ValidationError, match="gang_wait_minutes"):
            make()


# --- the simulator's measure -------------------------------------------------------------------------------------


def _prod_spec():
    import yaml

    from conftest import REPO
    from sim import pool as simpool

    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "prod", prices=resolved_prices()
    )
    return replace(simpool.spec_from_config(resolved_prices(), cfg, "training"), floor_nodes=0)  # 8-GPU nodes


def _jobs(tmp_path, rows):
    from sim import traces

    path = tmp_path / "t.csv"
    path.write_text("submit_s,duration_s,gpus\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    return traces.read_trace(path)


@requires_shared_prices
@pytest.mark.parametrize("skip", [True, False])
def test_the_simulator_meters_gpu_minutes_of_nodes_held_for_a_waiting_gang(tmp_path, skip):
    from sim import runner
    from sim.engine import SPOT, SimSettings
    from sim.controllers.base import Controller

    class TwoSpotNodes(Controller):
        node_groups = False

        def start(self, sim):
            sim.start_static(SPOT, 2)

    calm = SimSettings(spot_interruptions_per_month=0.0, skip_quiet_ticks=skip)
    sim, _ = runner.run_one(_prod_spec(), _jobs(tmp_path, [(0, 7200, 24)]), TwoSpotNodes(), calm, horizon=30)
    # a 3-node gang never starts on 2 nodes: both are held for it, 8 GPUs each, the 30 minutes
    assert sim.gang_hold.held_gpu_minutes == 2 * 8 * 30
    single, _ = runner.run_one(_prod_spec(), _jobs(tmp_path, [(0, 7200, 8)]), TwoSpotNodes(), calm, horizon=30)
    assert single.gang_hold.held_gpu_minutes == 0  # a one-node job is no gang: the free node waits for nothing


@requires_shared_prices
def test_scarce_spot_leaves_a_partial_gang_that_only_the_gang_rules_release(tmp_path):
    from sim import runner
    from sim.engine import SimSettings
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.karpenter import Karpenter

    spec = replace(_prod_spec(), capacity="spot", spot_max_nodes=8)
    # spot scarce from the first minute to past the horizon: each launch request gets half what it asks
    scarce = SimSettings(
        spot_interruptions_per_month=0.0,
        spot_unavailable_episodes_per_week=1e7,
        spot_unavailable_mean_hours=1000.0,
        spot_unavailable_fill_share=0.5,
    )
    trace = _jobs(tmp_path, [(60, 36000, 32)])  # a 4-node gang
    held = {}
    for controller in (GpuLoan("before", gangs=False), GpuLoan("after"), Karpenter()):
        sim, _ = runner.run_one(spec, trace, controller, scarce, horizon=240)
        held[controller.name] = sim.gang_hold.held_gpu_minutes
    # without the gang rules (and in Karpenter, which launches per node and keeps nominated nodes) the 3 nodes of
    # 4 that came are held for the whole scarce spell; with them, released after gang_wait_minutes
    assert held["before"] >= 3 * 8 * 200 and held["karpenter"] >= 3 * 8 * 200
    assert 0 < held["after"] <= 3 * 8 * 30


@requires_shared_prices
@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_spot_fill_share_outside_0_to_1_is_refused_by_name(tmp_path, share):
    from sim.engine import SimSettings, Simulation
    from sim.controllers.karpenter import Karpenter

    with pytest.raises(ValueError, match="spot_unavailable_fill_share"):
        Simulation(
            _prod_spec(), _jobs(tmp_path, [(0, 60, 8)]), Karpenter(), SimSettings(spot_unavailable_fill_share=share)
        )
