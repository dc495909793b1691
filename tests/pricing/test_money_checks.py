"""The config knows no prices; the money rules are pricing's (issue 34).

- no module of config/ imports pricing/ (the layers contract names no exception for it any more);
- parsing a config writes no price state: its `instance_prices` price things only where a caller passes them on;
- the floor-under-budget rule is one function (pricing/checks.py) that the config validation and the CrossGuard pack
  both apply, so they refuse and flag the same floors.
"""

from __future__ import annotations

import copy

import grimp
import pytest
from conftest import requires_shared_prices, stack_config, resolved_prices

from config import config
from pricing import checks


def _gpuloan_keys(stack: str) -> dict:
    return {k.split(":", 1)[1]: v for k, v in stack_config(stack).items() if k.startswith("gpuloan:")}


def test_no_module_of_config_imports_pricing():
    graph = grimp.build_graph("config", "pricing", exclude_type_checking_imports=True)
    edges = sorted(
        f"{m} -> {i}"
        for m in graph.modules
        if m.split(".")[0] == "config"
        for i in graph.find_modules_directly_imported_by(m)
        if i.split(".")[0] == "pricing"
    )
    assert edges == []


@requires_shared_prices
def test_the_config_alone_accepts_a_floor_over_budget_the_money_rules_refuse():
    data = _gpuloan_keys("prod")
    data["pools"][0]["budget"]["monthly_usd"] = 10000
    config.parse(copy.deepcopy(data))  # no prices below pricing: the config has nothing to compare
    with pytest.raises(config.ConfigError) as err:
        checks.parse(data, prices=resolved_prices())
    [(path, message)] = [(p, m) for p, m in err.value.problems if p == "pools[0].budget.monthly_usd"]
    assert message.startswith("the guaranteed floor alone costs $") and "more than the pool budget ($10,000)" in message


def test_the_pack_and_the_config_draw_the_line_at_the_same_place():
    from guardrails import policies

    assert policies.floor_over_budget is checks.floor_over_budget
    # A floor costing exactly its budget is a valid config, so the pack does not flag it either (it said
    # "at or above" before: the two copies had drifted).
    assert not checks.floor_over_budget(1000.0, 1000.0)
    assert checks.floor_over_budget(1000.01, 1000.0)
    assert not checks.floor_over_budget(None, 0.0)  # an unknown floor is shown as unknown, never refused
