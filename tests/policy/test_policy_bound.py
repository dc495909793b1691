"""The one bound of every scale-up (issue 34, policy/decide/bound.py): the group's effective max, the step and the
budget cap in one function, which both scale-ups (spot-first and pods kept off spot) call."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import REPO
from policy import gangs as gang_rules
from policy.decide import budget, decide, on_demand_only, scale
from policy.decide.bound import bound, group_max
from policy.model import Observation, Spend, Timers
from policy.terms import Reason
from policy_cases import NOW, OD, SPOT, group, observe, pool_settings, settings

R = Reason
HOURS = 100.0


def scope(budget_usd: float, spent: float | None, rate: float = 0.0, enforcement: str = "cap_elastic"):
    """A budget scope with `spent` month-to-date (None: no actual figure read) and HOURS left in the month."""
    return budget.Scope(
        "pool research", budget_usd, None if spent is None else Spend(spent, 0.0, NOW), rate, HOURS, enforcement
    )


def reasons(holds) -> list[Reason]:
    return [a.reason for a in holds]


def test_group_max_is_the_configured_max_unless_the_group_reports_a_lower_one():
    ps = pool_settings(spot_max_nodes=4)
    assert group_max(ps, SPOT, None) == 4  # the group could not be read: the configured max
    assert group_max(ps, SPOT, group(SPOT, max_nodes=0)) == 4  # 0: the group reports no max
    assert group_max(ps, SPOT, group(SPOT, max_nodes=3)) == 3
    assert group_max(ps, SPOT, group(SPOT, max_nodes=9)) == 4


def test_the_group_max_cuts_and_says_so():
    ps = pool_settings(spot_max_nodes=4, max_step_nodes=None)
    add, holds = bound(ps, group(SPOT, 1), 1, 5, 0, [], Timers(NOW), "5 pending")
    assert add == 3 and reasons(holds) == [R.AT_MAX] and "research-spot is at 1/4" in holds[0].detail


def test_nodes_added_earlier_in_the_tick_count_against_the_step():
    ps = pool_settings(spot_max_nodes=10, max_step_nodes=4)
    assert bound(ps, group(SPOT), 0, 5, 0, [], Timers(NOW), "")[0] == 4
    add, holds = bound(ps, group(SPOT), 0, 5, 3, [], Timers(NOW), "")
    assert add == 1 and holds == []  # the step is no max: nothing to report


def test_the_step_never_splits_a_gang_and_a_cut_drops_whole_gangs():
    ps = pool_settings(spot_max_nodes=10, max_step_nodes=2)
    gangs = gang_rules.GangView(False, 4, 0, 0, 3, [3, 1])
    add, _ = bound(ps, group(SPOT), 0, 4, 0, [], Timers(NOW), "", gangs.whole, gangs.largest_missing)
    assert add == 3  # the 3-node gang in one step, past max_step_nodes; the 1-node gang next tick
    ps = replace(ps, spot_max_nodes=2)
    assert bound(ps, group(SPOT), 0, 4, 0, [], Timers(NOW), "", gangs.whole, gangs.largest_missing)[0] == 1


def test_the_budget_cap_cuts_to_what_the_headroom_affords_and_consumes_it():
    ps = pool_settings(spot_max_nodes=10, max_step_nodes=None, spot_usd_per_hour=1.0)
    capped = scope(1000.0, 750.0)  # $2.50/h of headroom: 2 nodes at $1/h
    timers = Timers(NOW)
    add, holds = bound(ps, group(SPOT), 0, 5, 0, [capped], timers, "5 pending")
    assert add == 2 and reasons(holds) == [R.BUDGET_CAP] and "affords 2 more node(s)" in holds[0].detail
    assert capped.headroom_usd_per_hour == pytest.approx(0.5)  # the next scale-up of the tick sees what is left
    assert timers.earliest is not None  # a cut scale-up may fit as the month's hours run out


def test_unknown_spend_buys_nothing_under_a_cap_and_alert_only_does_not_cap():
    ps = pool_settings(spot_max_nodes=10, max_step_nodes=None)
    add, holds = bound(ps, group(SPOT), 0, 3, 0, [scope(1000.0, None)], Timers(NOW), "")
    assert add == 0 and reasons(holds) == [R.BUDGET_UNKNOWN]
    add, holds = bound(ps, group(SPOT), 0, 3, 0, [scope(10.0, 1000.0, enforcement="alert_only")], Timers(NOW), "")
    assert add == 3 and holds == []


def test_both_scale_ups_are_bounded_by_the_one_bound(monkeypatch):
    calls = []

    def spy(ps, target, *args, **kwargs):
        calls.append(target.name)
        return bound(ps, target, *args, **kwargs)

    monkeypatch.setattr(scale, "bound", spy)
    monkeypatch.setattr(on_demand_only, "bound", spy)
    obs = observe(groups=[group(SPOT), group(OD)], pending=(1, 1, 1))
    obs = Observation((replace(obs.pools[0], on_demand_only_pod_gpus=(1,)),), None)
    plan = decide(settings(), obs, NOW)
    assert sorted(calls) == sorted([OD, SPOT]) and len(plan.changes) == 2


@pytest.mark.parametrize("first", ["policy.gangs", "policy.sizes", "policy.decide.bound", "policy.handler"])
def test_the_policy_imports_in_any_order(first):
    """gangs.py and sizes.py read the group max from policy/decide/bound.py, and decide/ imports them: each order of
    first import must load."""
    code = f"import {first}, policy.decide, policy.gangs, policy.sizes; print(policy.decide.decide.__module__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "policy.decide"
