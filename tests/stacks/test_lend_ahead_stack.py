"""Lending ahead of the owner (issue 38 item 2) in the stack: the setting is validated, it reaches the policy
function's settings, and the policy's RBAC grants `patch` of exactly the lending floors' ClusterQueues, only when
it is on and the policy acts."""

from __future__ import annotations

import pytest
from conftest import resolved_prices, stack_config
from pricing import checks

from config import scheduling
from config import tenancy


def prod(**kueue) -> object:
    raw = stack_config("prod")
    raw["gpuloan:scheduling"]["kueue"].update(kueue)
    return checks.from_stack_yaml({"config": raw}, "test", prices=resolved_prices())


def test_off_by_default_the_rbac_is_unchanged():
    cfg = prod()
    assert cfg.scheduling.kueue.lend_ahead is False and cfg.scheduling.kueue.reclaim_lookahead_minutes == 60
    assert tenancy.policy_rbac_rules(cfg) == [*tenancy.POLICY_RBAC_RULES, tenancy.loan_rbac_rule(cfg)]


def test_on_the_policy_may_patch_exactly_the_lending_floors_queues():
    cfg = prod(lend_ahead=True)
    lenders = [p for p in cfg.pools if scheduling.lends_ahead(cfg, p)]
    assert lenders and all(p.guaranteed is not None for p in lenders)
    assert [p for p in cfg.pools if p.guaranteed is None and scheduling.lends_ahead(cfg, p)] == []
    rules = tenancy.policy_rbac_rules(cfg)
    assert rules[:-1] == [*tenancy.POLICY_RBAC_RULES, tenancy.loan_rbac_rule(cfg)]  # no pod patch: no block
    assert rules[-1] == {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["clusterqueues"],
        "verbs": ["get", "patch"],
        "resourceNames": sorted(scheduling.floor_queue_name(cfg, p) for p in lenders),
    }
    # a dry run patches nothing: nothing to patch is granted
    dry = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"dry_run": True})})
    assert tenancy.policy_rbac_rules(dry) == [*tenancy.POLICY_RBAC_RULES, tenancy.loan_rbac_rule(dry)]


def test_a_team_that_lends_nothing_is_not_patched():
    raw = stack_config("prod")
    kueue = raw["gpuloan:scheduling"]["kueue"]
    kueue["lend_ahead"] = True
    cfg = checks.from_stack_yaml({"config": raw}, "test", prices=resolved_prices())
    teams = {p.team for p in cfg.pools if scheduling.lends_ahead(cfg, p)}
    team = sorted(teams)[0]
    kueue.setdefault("teams", {}).setdefault(team, {})["lending_limit_pct"] = 0
    cfg = checks.from_stack_yaml({"config": raw}, "test", prices=resolved_prices())
    assert not [p for p in cfg.pools if p.team == team and scheduling.lends_ahead(cfg, p)]


def test_the_policy_settings_carry_the_queue_the_flavor_and_the_configured_limit():
    from pricing.policy_settings import loan_settings

    cfg = prod(lend_ahead=True, reclaim_lookahead_minutes=90)
    for pool in cfg.pools:
        got = loan_settings(cfg, pool)
        if not scheduling.lends_ahead(cfg, pool):
            assert "lend_ahead_queue" not in got
            continue
        assert got["lend_ahead_queue"] == scheduling.floor_queue_name(cfg, pool)
        assert got["lend_ahead_flavor"] == scheduling.flavor_name(cfg, pool, scheduling.FLOOR)
        assert got["lend_ahead_limit_gpus"] == scheduling.lendable_gpus(cfg, pool)
        assert got["reclaim_lookahead_minutes"] == 90


@pytest.mark.parametrize("value", [0, 9, 721, "soon"])
def test_a_bad_lookahead_is_refused_naming_the_field(value):
    with pytest.raises(Exception, match="reclaim_lookahead_minutes"):
        prod(lend_ahead=True, reclaim_lookahead_minutes=value)
