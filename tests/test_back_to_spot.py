"""Back to spot after a fallback (policy/back_to_spot.py, docs/policy.md "Back to spot"): once spot is back, the
on-demand fallback nodes take no new pods and go once idle, and the spot group grows for the pods that wait."""

from __future__ import annotations

from policy.engine import decide
from policy.model import LIFECYCLE_PENDING, Reason
from policy_cases import NOW, OD, SPOT, group, idle, node, observe, pool_settings, settings, spend


def _plan(obs, **kw):
    return decide(settings(pool_settings(**kw)), obs, NOW).decision("research")


def _changes(d):
    return sorted((a.kind, a.group, a.instance_id, a.desired_to) for a in d.changes)


# spot is back: one spot node up, the group not short; two on-demand fallback nodes, one busy, one booting
_BACK = dict(groups=[group(SPOT, 1), group(OD, 2)],
             nodes=[node("i-s"), node("i-o1", OD), node("i-o2", OD, age=1, lifecycle=LIFECYCLE_PENDING)])


def test_once_spot_is_back_every_on_demand_node_is_closed_to_new_pods():
    d = _plan(observe(**_BACK))
    assert d.closed_to_new_pods == ("i-o1", "i-o2")
    assert any(a.reason is Reason.SPOT_RECOVERED and "take no new pods" in a.detail for a in d.actions)


def test_nothing_is_closed_without_evidence_that_spot_is_back():
    short = observe(groups=[group(SPOT, 2, changed=20), group(OD, 1)], nodes=[node("i-s"), node("i-o", OD)])
    assert _plan(short).closed_to_new_pods == ()  # spot still short of its desired size: the fallback serves
    failing = observe(groups=[group(SPOT, 1, shortage=True), group(OD, 1)], nodes=[node("i-s"), node("i-o", OD)])
    assert _plan(failing).closed_to_new_pods == ()  # its last activity failed for capacity
    empty = observe(groups=[group(SPOT, 0), group(OD, 1)], nodes=[node("i-o", OD)])
    assert _plan(empty).closed_to_new_pods == ()  # a spot group at 0 proves nothing
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
