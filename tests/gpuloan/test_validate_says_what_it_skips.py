"""`validate` never skips a rule silently (issue 37, items 3 and 5): without prices it names the rules it could
not check; a production pool outside `production_spot_pools` is said to keep its work off spot, and the preview's
elastic ceiling prices it at on-demand, not spot."""

from __future__ import annotations

import pytest
from conftest import stack_config, resolved_prices

from gpuloan import cli
from gpuloan.commands import validate as cmd_validate
from pricing.cost_model import costs
from pricing.sources import pricebook
from pricing import checks


@pytest.fixture
def snapshot_only(monkeypatch, tmp_path):
    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.delenv(pricebook.ENV_SNAPSHOT, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(pricebook.ENV_PROJECT_PRICES, "0")
    yield


def test_without_prices_validate_names_the_rules_it_could_not_check(no_prices, capsys):
    assert cli.main(["validate", "-s", "prod"]) == 0  # valid as far as it can tell ...
    out = capsys.readouterr().out
    # ... and says what it could not tell
    assert "not checked: every instance type has a price in us-east-1 (no price source)" in out
    assert (
        "not checked: the floors' cost against the pool and environment budgets, for pools[0] (training), "
        "pools[1] (inference) (no price source)"
    ) in out


def test_with_prices_nothing_is_left_unchecked(snapshot_only, capsys):
    assert cli.main(["validate", "-s", "prod"]) == 0
    assert "not checked" not in capsys.readouterr().out


def _prod_with_training_off_spot() -> dict:
    data = stack_config("prod")
    data["gpuloan:scheduling"]["kueue"]["production_spot_pools"] = ["inference"]
    return data


def test_a_production_pool_kept_off_spot_is_said_so_and_priced_at_on_demand(snapshot_only):
    shipped = costs.stack_cost(
        resolved_prices(), checks.from_stack_yaml({"config": stack_config("prod")}, "prod", prices=resolved_prices())
    )
    cfg = checks.from_stack_yaml({"config": _prod_with_training_off_spot()}, "prod", prices=resolved_prices())
    off = costs.stack_cost(resolved_prices(), cfg)
    before, after = shipped.pools[0], off.pools[0]
    assert (before.pool, before.elastic_price_model, after.elastic_price_model) == ("training", "spot", "on_demand")
    # the ceiling at on-demand: the same figure as the on-demand fallback's ceiling per node
    assert after.elastic_spot_usd_per_hour == after.fallback_usd_per_hour > before.elastic_spot_usd_per_hour
    assert "production work stays off spot" in after.elastic_note
    assert off.pools[1].elastic_price_model == "spot"  # inference is still listed
    notes = cmd_validate.off_spot_notes(cfg)
    assert notes == [
        "pools[0] (training): production work stays off spot (not in "
        "scheduling.kueue.production_spot_pools): it runs on the on-demand group, priced at on-demand"
    ]
    assert (
        cmd_validate.off_spot_notes(
            checks.from_stack_yaml({"config": stack_config("prod")}, "prod", prices=resolved_prices())
        )
        == []
    )
