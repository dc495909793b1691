"""Issue 42 item 3: a spot instance under EC2's interruption notice is not a spot shortage.

The instance is leaving (`Terminating`: neither capacity nor launching), so its group's desired size counted it as
an instance that does not exist, and once the group's last change was `fallback_after_minutes` old the pool
launched on-demand for the displaced pods as if spot could not be had. EC2 reclaiming one spot instance says
nothing about whether spot can be bought now: the replacement goes to spot, and the on-demand fallback stays for a
measured shortage (a failed launch, or desired instances that never came). docs/policy.md, "Spot fallback".
"""

from __future__ import annotations

from policy.decide import decide
from policy.model import ACTION_SET_DESIRED, LIFECYCLE_LEAVING
from policy.terms import Reason
from policy_cases import NOW, OD, SPOT, group, node, observe, settings


def _grows(plan) -> dict[str, tuple[int, int, Reason]]:
    return {
        a.group: (a.desired_from, a.desired_to, a.reason)
        for d in plan.decisions
        for a in d.actions
        if a.kind == ACTION_SET_DESIRED
    }


def test_the_pods_of_a_leaving_spot_node_wait_for_spot_not_on_demand():
    """Desired 2: one busy node, one leaving whose GPU pod is pending. The spot group's replacement for the
    leaving instance is the pod's place (it counts as coming, docs/policy.md "Spot interruption notice"): no
    on-demand node, no fallback. Before issue 42: SPOT_FALLBACK, research-od 0 -> 1."""
    obs = observe(
        groups=(group(SPOT, 2, changed=60, max_nodes=4), group(OD, 0, max_nodes=2)),
        nodes=(node("i-busy"), node("i-leaving", lifecycle=LIFECYCLE_LEAVING)),
        pending=(1,),
    )
    plan = decide(settings(), obs, NOW)
    assert OD not in _grows(plan)
    assert Reason.SPOT_FALLBACK not in {a.reason for d in plan.decisions for a in d.actions}


def test_a_second_displaced_pod_gets_a_spot_node():
    """Two pending pods for one leaving node's slot: the one beyond the replacement gets a spot node."""
    obs = observe(
        groups=(group(SPOT, 2, changed=60, max_nodes=4), group(OD, 0, max_nodes=2)),
        nodes=(node("i-busy"), node("i-leaving", lifecycle=LIFECYCLE_LEAVING)),
        pending=(1, 1),
    )
    assert _grows(decide(settings(), obs, NOW)) == {SPOT: (2, 3, Reason.SCALE_UP_PENDING)}


def test_a_failed_spot_launch_still_falls_back_with_a_node_leaving():
    obs = observe(
        groups=(group(SPOT, 2, changed=60, max_nodes=4, shortage=True), group(OD, 0, max_nodes=2)),
        nodes=(node("i-busy"), node("i-leaving", lifecycle=LIFECYCLE_LEAVING)),
        pending=(1,),
    )
    grows = _grows(decide(settings(), obs, NOW))
    assert set(grows) == {OD} and grows[OD][2] == Reason.SPOT_FALLBACK


def test_an_instance_that_never_came_still_falls_back_with_a_node_leaving():
    # desired 3: one in service, one leaving, one that spot has not filled for an hour
    obs = observe(
        groups=(group(SPOT, 3, changed=60, max_nodes=4), group(OD, 0, max_nodes=2)),
        nodes=(node("i-busy"), node("i-leaving", lifecycle=LIFECYCLE_LEAVING)),
        pending=(1,),
    )
    grows = _grows(decide(settings(), obs, NOW))
    assert set(grows) == {OD} and grows[OD][2] == Reason.SPOT_FALLBACK
