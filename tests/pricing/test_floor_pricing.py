"""Floors priced the way they are paid (issue 18): guaranteed.payment and guaranteed.rate, the rates read from the
price book (../shared/data/prices through the offline price file), the invalid configs, and every consumer of the
floor's rate (preview cost, budget rule, policy settings, simulator)."""

from __future__ import annotations

import pytest
import yaml
from conftest import requires_prices, stack_config, resolved_prices

from gpuloan import cli
from pricing import checks
from pricing.cost_model import costs, floor_bill
from sim import pool as simpool
from config import config
from pricing import policy_settings
from pricing.sources import catalog, floor_pricing

pytestmark = requires_prices

# The public commitment table's p4d.24xlarge us-east-1 rows (COMMITMENTS.md): 2022 RIs beside that day's on-demand.
P4D_RI_1YR, P4D_RI_3YR, P4D_OD_2022 = 20.175, 12.499, 32.773
P4D_BLOCK_2026_07 = 11.8  # capacity_block, 2026-07-22


def _shorthand(stack: str) -> dict:
    """The stack as it was before gpuloan:commitments: prod's training floor paid with the deprecated per-pool
    shorthand `payment: reserved_1yr` instead of the environment's RI commitment (the same two RIs)."""
    data = stack_config(stack)
    if stack == "prod":
        data.pop("gpuloan:commitments")
        data["gpuloan:pools"][0]["guaranteed"]["payment"] = "reserved_1yr"
    return data


def _cfg(stack: str = "prod", **guaranteed) -> config.GpuLoanConfig:
    data = _shorthand(stack)
    g = data["gpuloan:pools"][0]["guaranteed"]
    for k, v in guaranteed.items():
        if v is None:
            g.pop(k, None)
        else:
            g[k] = v
    return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


def _problems(stack: str = "prod", pool: int = 0, **guaranteed) -> list[tuple[str, str]]:
    data = _shorthand(stack)
    g = data["gpuloan:pools"][pool]["guaranteed"]
    for k, v in guaranteed.items():
        if v is None:
            g.pop(k, None)
        else:
            g[k] = v
    with pytest.raises(config.ConfigError) as err:
        checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    return err.value.problems


def _ondemand(t: str = "p4d.24xlarge") -> float:
    return resolved_prices().price(t, "us-east-1").ondemand_usd_per_hour


# --- where the rate comes from --------------------------------------------------------------------------------


def test_old_reserved_instance_rates_are_used_as_a_ratio_to_todays_on_demand():
    r1 = floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "reserved_1yr")
    r3 = floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "reserved_3yr")
    assert r1.basis == r3.basis == "ratio"
    assert r1.usd_per_hour == pytest.approx(P4D_RI_1YR / P4D_OD_2022 * _ondemand(), abs=1e-3)
    assert r3.usd_per_hour == pytest.approx(P4D_RI_3YR / P4D_OD_2022 * _ondemand(), abs=1e-3)
    # never the 2022 absolute figure (today's on-demand is lower than 2022's after the 2025 GPU price cut)
    assert _ondemand() < P4D_OD_2022 and r1.usd_per_hour < P4D_RI_1YR
    assert "0.616" in r1.source and "2022-07-07" in r1.source and "vantage-sh/ec2instances.info" in r1.source


def test_capacity_block_rate_is_the_newest_published_one():
    r = floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "capacity_block")
    assert r.basis == "published" and r.usd_per_hour == P4D_BLOCK_2026_07 and r.as_of == "2026-07-22"


def test_on_demand_payment_is_the_on_demand_price():
    r = floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "on_demand")
    assert r.usd_per_hour == _ondemand() and r.basis == "on-demand"


def test_no_savings_plans_data_means_no_rate_never_a_guess():
    assert floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "savings_plan") is None
    assert (
        floor_pricing.floor_rate(resolved_prices(), "g6e.xlarge", "us-east-1", "reserved_1yr") is None
    )  # no RI row for g6e


def test_a_user_rate_always_wins():
    r = floor_pricing.floor_rate(
        resolved_prices(), "p4d.24xlarge", "us-east-1", "reserved_1yr", 9.99, "our 2026 RI invoice"
    )
    assert (r.usd_per_hour, r.basis) == (9.99, "user") and "our 2026 RI invoice" in r.source


def test_savings_plan_prefers_the_ec2_instance_plan(monkeypatch, prices):
    book = prices.book
    region = book.regions["us-east-1"]
    extra = [
        catalog.CommitmentRate("p4d.24xlarge", "us-east-1", o, usd, "AWS Savings Plans (test rows)", "2026-12-01")
        for o, usd in (
            ("savings_plan_compute_1yr_no_upfront", 15.0),
            ("savings_plan_ec2_instance_1yr_no_upfront", 13.0),
        )
    ]
    monkeypatch.setitem(region.commitments, "p4d.24xlarge", region.commitments["p4d.24xlarge"] + extra)
    r = floor_pricing.floor_rate(prices, "p4d.24xlarge", "us-east-1", "savings_plan")
    assert r.usd_per_hour == 13.0 and "ec2_instance" in r.source


def test_a_live_reserved_rate_without_reference_is_used_as_read(monkeypatch, prices):
    region = prices.book.regions["us-east-1"]
    live = catalog.CommitmentRate(
        "p4d.24xlarge",
        "us-east-1",
        "reserved_1yr_no_upfront",
        12.34,
        "AWS Price List Query API (pricing:GetProducts)",
        "2026-12-01",
    )
    monkeypatch.setitem(region.commitments, "p4d.24xlarge", region.commitments["p4d.24xlarge"] + [live])
    r = floor_pricing.floor_rate(prices, "p4d.24xlarge", "us-east-1", "reserved_1yr")
    assert (r.usd_per_hour, r.basis) == (12.34, "published")  # the newest reading wins over the 2022 row


# --- config: default, invalid cases -----------------------------------------------------------------------------


def test_payment_defaults_follow_the_reservation():
    cfg = _cfg(payment=None)
    assert cfg.pools[0].guaranteed.price_model == "on_demand"
    cfg = _cfg(
        payment=None,
        reservation="capacity_block",
        reservation_id="cr-0123456789abcdef0",
        capacity_block_start="2098-12-25T11:30:00Z",
        capacity_block_end="2099-01-01T11:30:00Z",
    )
    assert cfg.pools[0].guaranteed.price_model == "capacity_block"


INVALID = [
    # (name, guaranteed changes, pool index, expected path, expected message fragment)
    (
        "savings plan without any rate asks for a user rate",
        {"payment": "savings_plan"},
        0,
        "pools[0].guaranteed.rate",
        "no savings_plan_ec2_instance_1yr_no_upfront or savings_plan_compute",
    ),
    (
        "reserved rate missing for the type asks for a user rate",
        {"payment": "reserved_1yr"},
        1,
        "pools[1].guaranteed.rate",
        "give your own rate: guaranteed.rate",
    ),
    (
        "capacity block payment without a capacity block",
        {"payment": "capacity_block"},
        0,
        "pools[0].guaranteed.payment",
        "needs reservation: capacity_block",
    ),
    (
        "capacity block paid as an RI",
        {"reservation": "capacity_block", "reservation_id": "cr-0123456789abcdef0"},
        0,
        "pools[0].guaranteed.payment",
        "does not apply to it",
    ),
    ("unknown payment", {"payment": "reserved_5yr"}, 0, "pools[0].guaranteed.payment", "Input should be"),
    (
        "user rate of zero",
        {"rate": {"usd_per_hour": 0, "source": "a quote"}},
        0,
        "pools[0].guaranteed.rate.usd_per_hour",
        "greater than 0",
    ),
    (
        "user rate without its source",
        {"rate": {"usd_per_hour": 5.0}},
        0,
        "pools[0].guaranteed.rate.source",
        "Field required",
    ),
    (
        "user rate with an unknown key",
        {"rate": {"usd_per_hour": 5.0, "source": "a quote", "currency": "EUR"}},
        0,
        "pools[0].guaranteed.rate.currency",
        "unknown key",
    ),
]


@pytest.mark.parametrize("name,changes,pool,path,message", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_floor_payment_is_rejected_with_path(name, changes, pool, path, message):
    problems = _problems("prod", pool, **changes)
    assert any(p == path and message in m for p, m in problems), problems


def test_a_user_rate_makes_a_missing_commitment_rate_valid():
    cfg = _cfg(payment="savings_plan", rate={"usd_per_hour": 14.2, "source": "Cost Explorer SP recommendation 2026-11"})
    r = floor_bill.floor_rate(resolved_prices(), cfg, cfg.pools[0])
    assert r.usd_per_hour == 14.2 and r.payment == "savings_plan"


def test_validate_command_names_the_path_of_the_missing_rate(tmp_path, capsys):
    data = _shorthand("prod")
    data["gpuloan:pools"][0]["guaranteed"]["payment"] = "savings_plan"
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": data}))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "pools[0].guaranteed.rate" in err and "never guesses" in err


# --- every consumer uses the floor's rate -----------------------------------------------------------------------


def test_reserved_1yr_shorthand_training_floor_costs_less():
    cfg = _cfg()
    training = costs.pool_cost(resolved_prices(), cfg, cfg.pool("training"))
    rate = floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "reserved_1yr").usd_per_hour
    assert training.guaranteed_price_model == "reserved_1yr"
    assert training.guaranteed_usd_per_hour == rate
    assert training.guaranteed_monthly_usd == pytest.approx(2 * rate * 730, abs=0.01)
    assert training.guaranteed_monthly_usd < 2 * _ondemand() * 730 * 0.65
    assert "0.616 x today's on-demand" in training.guaranteed_rate_source
    inference = costs.pool_cost(resolved_prices(), cfg, cfg.pool("inference"))
    assert inference.guaranteed_price_model == "on_demand"


def test_preview_table_shows_the_price_model_and_its_source(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that no cell folds
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": _shorthand("prod")}))
    assert cli.main(["preview", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # notes fold to the terminal's width
    assert "2× p4d.24xlarge $19,735 (reserved_1yr)" in out
    assert "training floor rate (reserved_1yr): 0.616 x today's on-demand" in out
    assert "covers the floor's instance-hours (those in a capacity reservation too)" in out  # how AWS bills it


def test_pool_budget_rule_uses_the_floors_real_rate():
    # 2 p4d floor nodes: ~$19.7k/month reserved_1yr, ~$32.1k on demand; a $25k pool budget fits only the former.
    data = _shorthand("prod")
    data["gpuloan:pools"][0]["budget"]["monthly_usd"] = 25000
    checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())  # valid: the RI-paid floor fits
    data["gpuloan:pools"][0]["guaranteed"]["payment"] = "on_demand"
    with pytest.raises(config.ConfigError) as err:
        checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    assert any(p == "pools[0].budget.monthly_usd" and "(on_demand)" in m for p, m in err.value.problems)


def test_policy_budget_cap_gets_the_floors_rate():
    cfg = _cfg()
    s = policy_settings.settings_for(resolved_prices(), cfg, "c", {}, budget_names={})
    training = next(p for p in s.pools if p.name == "training")
    rate = floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "reserved_1yr").usd_per_hour
    assert training.guaranteed_usd_per_hour == pytest.approx(2 * rate)
    user = _cfg(rate={"usd_per_hour": 10.0, "source": "invoice"})
    s = policy_settings.settings_for(resolved_prices(), user, "c", {}, budget_names={})
    assert next(p for p in s.pools if p.name == "training").guaranteed_usd_per_hour == pytest.approx(20.0)


def test_simulator_bills_the_floor_at_its_rate():
    cfg = _cfg()
    spec = simpool.spec_from_config(resolved_prices(), cfg, "training")
    assert (
        spec.floor_usd_per_hour
        == floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "reserved_1yr").usd_per_hour
    )


def test_without_any_price_source_a_committed_floor_is_unknown_and_a_user_rate_still_counts(tmp_path, monkeypatch):
    from pricing.sources import pricebook

    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv(pricebook.ENV_SNAPSHOT, "0")  # nor the snapshot shipped in the package
    try:
        cfg = _cfg()  # valid: with no prices at all every cost is unknown, nothing is guessed
        assert costs.pool_cost(resolved_prices(), cfg, cfg.pool("training")).guaranteed_monthly_usd is None
        cfg = _cfg(rate={"usd_per_hour": 10.0, "source": "our RI invoice, 2026-11"})
        training = costs.pool_cost(resolved_prices(), cfg, cfg.pool("training"))
        assert training.guaranteed_monthly_usd == pytest.approx(2 * 10.0 * 730)
        assert training.guaranteed_rate_source == "your rate: our RI invoice, 2026-11"
    finally:
        monkeypatch.undo()
