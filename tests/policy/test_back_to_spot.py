"""Back to spot after a fallback (policy/back_to_spot.py, docs/policy.md "Back to spot"): once spot is back, the
on-demand fallback nodes take no new pods and go once idle, and the spot group grows for the pods that wait."""

from __future__ import annotations

from policy.decide import decide
from policy.model import LIFECYCLE_PENDING
from policy.terms import Reason
from policy_cases import NOW, OD, SPOT, group, idle, node, observe, pool_settings, settings, spend


def _plan(obs, **kw):
    return decide(settings(pool_settings(**kw)), obs, NOW).decision("research")


def _changes(d):
    return sorted((a.kind, a.group, a.instance_id, a.desired_to) for a in d.changes)


# spot is back: one spot node up, the group not short; two on-demand fallback nodes, one busy, one booting
_BACK = dict(
    groups=[group(SPOT, 1), group(OD, 2)],
    nodes=[node("i-s"), node("i-o1", OD), node("i-o2", OD, age=1, lifecycle=LIFECYCLE_PENDING)],
)


def test_once_spot_is_back_every_on_demand_node_is_closed_to_new_pods():
    d = _plan(observe(**_BACK))
    assert d.closed_to_new_pods == ("i-o1", "i-o2")
    assert any(a.reason is Reason.SPOT_RECOVERED and "take no new pods" in a.detail for a in d.actions)


def test_nothing_is_closed_while_spot_is_short_the_rule_is_off_or_the_budget_drains():
    short = observe(groups=[group(SPOT, 2, changed=20), group(OD, 1)], nodes=[node("i-s"), node("i-o", OD)])
    assert _plan(short).closed_to_new_pods == ()  # spot still short of its desired size: the fallback serves
    failing = observe(groups=[group(SPOT, 1, shortage=True), group(OD, 1)], nodes=[node("i-s"), node("i-o", OD)])
    assert _plan(failing).closed_to_new_pods == ()  # its last activity failed for capacity
    # the spot nodes that came back were reclaimed idle: spot is no shorter than it was, the fallback stays closed
    empty = observe(groups=[group(SPOT, 0), group(OD, 1)], nodes=[node("i-o", OD)])
    assert _plan(empty).closed_to_new_pods == ("i-o",)
    assert _plan(observe(**_BACK), back_to_spot=False).closed_to_new_pods == ()  # off: the taints come off
    drained = decide(settings(pool_settings(budget_monthly_usd=100.0)), observe(**_BACK, spend=spend(150.0)), NOW)
    assert drained.decision("research").closed_to_new_pods == ()  # the budget drain adds nothing: keep what is paid


def test_a_pool_without_an_on_demand_fallback_has_no_such_rule():
    obs = observe(groups=[group(SPOT, 1)], nodes=[node("i-s")])
    assert _plan(obs, on_demand_group=None).closed_to_new_pods is None


def test_a_closed_booting_fallback_node_is_no_room_for_pending_pods():
    """The booting on-demand node would have taken the pending pod; closed, it cannot, so spot grows for it."""
    obs = observe(**{**_BACK, "pending": (1,)})
    assert ("set_desired", SPOT, None, 2) in _changes(_plan(obs))
    assert not any(a.group == SPOT for a in _plan(obs, back_to_spot=False).changes)


def test_an_idle_closed_fallback_node_goes_even_with_pods_pending():
    """Pending pods keep an idle node they may land on; a closed node they cannot land on goes, and spot grows."""
    obs = observe(groups=[group(SPOT, 1), group(OD, 1)], nodes=[node("i-s"), idle("i-o", OD)], pending=(1,))
    with_rule = _changes(_plan(obs))
    assert ("terminate", OD, "i-o", 0) in with_rule and ("set_desired", SPOT, None, 2) in with_rule
    without = _plan(obs, back_to_spot=False)
    assert not any(a.instance_id == "i-o" for a in without.changes)  # kept for the pending pod, at on-demand price


# --- end to end: the packaged function against the emulator and the fake Kubernetes API -------------------------

from conftest import requires_shared_prices  # noqa: E402
from test_policy_e2e import _env, kube, lambda_dir, run_lambda, world  # noqa: E402,F401 - fixtures

TAINT = "gpuloan.io/back-to-spot"


def _taints(kube, name):
    return [t["key"] for t in kube.nodes[name].get("spec", {}).get("taints") or []]


@requires_shared_prices
def test_the_tick_taints_the_fallback_node_once_spot_is_back(world, kube, lambda_dir, aws_env):
    spot = world.asg_of["dev-train-spot"]
    od = world.asg_of["dev-train-on-demand"]
    world.asg.update_auto_scaling_group(AutoScalingGroupName=spot, DesiredCapacity=1)
    world.eks.update_nodegroup_config(
        clusterName="gpuloan-dev", nodegroupName="dev-train-spot", scalingConfig={"desiredSize": 1}
    )
    world.asg.update_auto_scaling_group(AutoScalingGroupName=od, DesiredCapacity=1)
    world.eks.update_nodegroup_config(
        clusterName="gpuloan-dev", nodegroupName="dev-train-on-demand", scalingConfig={"desiredSize": 1}
    )
    (spot_node,), (od_node,) = world.instances("dev-train-spot"), world.instances("dev-train-on-demand")
    names = {i: world.dns(i) for i in (spot_node, od_node)}
    for name in names.values():
        kube.add_node(name)
    kube.nodes[names[od_node]]["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert result["errors"] == []
    assert _taints(kube, names[od_node]) == ["nvidia.com/gpu", TAINT]  # the node group's own taint stays
    assert _taints(kube, names[spot_node]) == []  # spot nodes are never closed
    assert any(x.get("message") == "back to spot: on-demand node closed to new pods" for x in logs)
    # a second tick changes nothing: the node is read, not patched again
    patches = len(kube.patches)
    run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert len([p for p in kube.patches[patches:] if p[0] == names[od_node]]) == 0


def test_the_taint_comes_off_when_the_engine_no_longer_closes_the_node(kube):
    """Spot short again (or the rule off): the decision closes no node, and the tick takes its taint off the pool's
    on-demand nodes, leaving every other taint; a node not registered yet is skipped, a spot node never touched."""
    from policy import closing
    from policy.io.kube import KubeClient
    from policy.model import Node, Observation, Plan, PoolDecision, PoolObservation

    for name in ("od-1", "spot-1"):
        kube.add_node(name)
    kube.nodes["od-1"]["spec"]["taints"] = [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
        {"key": TAINT, "value": "true", "effect": "NoSchedule"},
    ]
    kube.nodes["spot-1"]["spec"]["taints"] = [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]
    nodes = (Node("i-o1", OD, NOW), Node("i-o2", OD, NOW), Node("i-s1", SPOT, NOW))
    obs = Observation((PoolObservation("research", (), nodes),))
    names = {"i-o1": "od-1", "i-o2": "od-2-not-registered", "i-s1": "spot-1"}
    errors = []
    client = KubeClient(kube.endpoint, kube.ca_pem, _token)
    plan = Plan((PoolDecision("research", (), closed_to_new_pods=()),))
    assert closing.apply(settings(), plan, obs, client, names, errors.append) == [("od-1", False)]
    assert errors == [] and _taints(kube, "od-1") == ["nvidia.com/gpu"] and _taints(kube, "spot-1") == [TAINT]
    closed = Plan((PoolDecision("research", (), closed_to_new_pods=("i-o1",)),))
    assert closing.apply(settings(), closed, obs, client, names, errors.append) == [("od-1", True)]
    dry = Plan((PoolDecision("research", (), closed_to_new_pods=()),), dry_run=True)
    assert closing.apply(settings(), dry, obs, client, names, errors.append) == []  # a dry run changes nothing
    assert _taints(kube, "od-1") == ["nvidia.com/gpu", TAINT]


def test_a_node_changed_between_read_and_patch_is_left_for_the_next_tick(kube):
    """The taint patch carries the resourceVersion it read: a conflict is a tick error, not a lost taint."""
    from policy.io.kube import KubeClient

    kube.add_node("n1")
    client = KubeClient(kube.endpoint, kube.ca_pem, lambda: _token())
    assert client.set_taint("n1", TAINT, True) is True and _taints(kube, "n1") == [TAINT]
    assert client.set_taint("n1", TAINT, True) is False  # already so: read only
    real_get = client._get

    def stale_get(path):  # someone patches the node between our read and our write
        node = real_get(path)
        kube.nodes["n1"]["metadata"]["resourceVersion"] = "99"
        return node

    client._get = stale_get
    import pytest

    from policy.errors import PolicyError

    with pytest.raises(PolicyError):
        client.set_taint("n1", TAINT, False)
    assert _taints(kube, "n1") == [TAINT]


def _token() -> str:
    import base64

    url = (
        "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15"
        "&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id&X-Amz-Signature=abc"
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
