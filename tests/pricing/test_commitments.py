"""Capacity and commitment apart (issue 27): the environment's `commitments`, validated naming the field, and one
billing model (pricing/cost_model/billing.py) for preview, cost-diff, the budget rule and the policy's budget cap.

Prices are the shared price table's (../shared/data/prices through the offline price file); every expected figure
is computed by hand from the rates read here.
"""

from __future__ import annotations

import pytest
import yaml
from conftest import requires_shared_prices, stack_config, resolved_prices
from policy_cases import NOW, group, pool_settings, settings, spend

from gpuloan import cli
from offline import diff as cost_diff
from policy.decide import decide, hours_left_in_month
from policy.model import Observation, PoolObservation
from policy.terms import Reason
from pricing import checks
from pricing.cost_model import billing, costs
from pricing.sources import floor_pricing
from config import config
from pricing import policy_settings

pytestmark = requires_shared_prices

HOURS = billing.HOURS_PER_MONTH


def _od(t: str) -> float:
    return resolved_prices().price(t, "us-east-1").ondemand_usd_per_hour


def _ri_rate() -> float:
    return floor_pricing.commitment_rate(
        resolved_prices(), "reserved_instances", 1, "no_upfront", "p4d.24xlarge", "us-east-1"
    ).usd_per_hour


def _prod(**changes) -> dict:
    data = stack_config("prod")
    for key, value in changes.items():
        data[f"gpuloan:{key}"] = value
    return data


def _cfg(data: dict) -> config.GpuLoanConfig:
    return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


def _problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(config.ConfigError) as err:
        _cfg(data)
    return err.value.problems


RI = {
    "name": "p4d-ri-1yr",
    "kind": "reserved_instances",
    "term_years": 1,
    "status": "held",
    "source": "RI purchase 2026-11-02",
    "instance_type": "p4d.24xlarge",
    "count": 2,
}
SP = {
    "name": "org-compute",
    "kind": "compute_savings_plan",
    "term_years": 1,
    "status": "planned",
    "source": "Cost Explorer recommendation, 30-day lookback, 2026-12-01",
    "hourly_commitment_usd": 10.0,
}


# --- config ---------------------------------------------------------------------------------------------------


def test_shipped_prod_holds_its_commitment_at_the_environment_and_no_shorthand():
    cfg = _cfg(stack_config("prod"))
    assert [c.name for c in cfg.commitments] == ["p4d-ri-1yr"]
    assert all(p.guaranteed is None or p.guaranteed.payment is None for p in cfg.pools)
    assert config.deprecations(cfg) == []


INVALID = [
    ("an RI needs its count", [{**RI, "count": None}], "commitments[0].count", "required for kind reserved_instances"),
    ("an RI needs its type", [{**RI, "instance_type": None}], "commitments[0].instance_type", "required"),
    (
        "a plan needs its hourly commitment",
        [{**SP, "hourly_commitment_usd": None}],
        "commitments[0].hourly_commitment_usd",
        "required for kind compute_savings_plan",
    ),
    (
        "a plan takes no count",
        [
            {
                **SP,
                "count": 2,
                "rates": {
                    "p4d.24xlarge": {"usd_per_hour": 14, "source": "x 2026"},
                    "g6e.xlarge": {"usd_per_hour": 1, "source": "x 2026"},
                },
            }
        ],
        "commitments[0].count",
        "does not apply",
    ),
    (
        "an EC2 Instance plan needs its family",
        [{**SP, "kind": "ec2_instance_savings_plan"}],
        "commitments[0].instance_family",
        "required",
    ),
    ("a Compute plan takes no region", [{**SP, "region": "us-east-1"}], "commitments[0].region", "every region"),
    (
        "a Savings Plan has no rate in the shared data",
        [SP],
        "commitments[0].rates",
        "no savings_plan_compute_1yr_no_upfront rate for p4d.24xlarge",
    ),
    (
        "a partial-upfront RI has no rate in the shared data",
        [{**RI, "payment_option": "partial_upfront"}],
        "commitments[0].rates",
        "no reserved_1yr_partial_upfront rate",
    ),
    (
        "an RI of a type the data has no RI row for",
        [{**RI, "instance_type": "p5.48xlarge"}],
        "commitments[0].rates",
        "no reserved_1yr_no_upfront rate for p5.48xlarge",
    ),
    (
        "an EC2 Instance plan rate for another family",
        [
            {
                **SP,
                "kind": "ec2_instance_savings_plan",
                "instance_family": "p4d",
                "rates": {
                    "p4d.24xlarge": {"usd_per_hour": 14, "source": "x 2026"},
                    "g6e.xlarge": {"usd_per_hour": 1, "source": "x 2026"},
                },
            }
        ],
        "commitments[0].rates.g6e.xlarge",
        "does not cover",
    ),
    ("names are unique", [RI, {**RI, "count": 1}], "commitments[1].name", "used 2 times"),
    ("a 2-year term", [{**RI, "term_years": 2}], "commitments[0].term_years", "Input should be 1 or 3"),
    ("an unknown kind", [{**RI, "kind": "convertible_ri"}], "commitments[0].kind", "Input should be"),
    ("no source", [{k: v for k, v in RI.items() if k != "source"}], "commitments[0].source", "Field required"),
]


@pytest.mark.parametrize("name,commitments,path,message", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_commitments_are_refused_naming_the_field(name, commitments, path, message):
    commitments = [{k: v for k, v in c.items() if v is not None} for c in commitments]
    problems = _problems(_prod(commitments=commitments))
    assert any(p == path and message in m for p, m in problems), problems


def test_a_user_rate_with_its_source_prices_a_plan_the_data_lacks():
    rates = {
        "p4d.24xlarge": {"usd_per_hour": 15.0, "source": "Savings Plans purchase page, 2026-12-01"},
        "g6e.xlarge": {"usd_per_hour": 1.5, "source": "Savings Plans purchase page, 2026-12-01"},
    }
    cfg = _cfg(_prod(commitments=[RI, {**SP, "rates": rates}]))
    assert [c.name for c in cfg.commitments] == ["p4d-ri-1yr", "org-compute"]


def test_without_any_price_source_commitments_are_valid_and_their_costs_unknown(tmp_path, monkeypatch):
    from pricing.sources import pricebook

    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv(pricebook.ENV_SNAPSHOT, "0")  # nor the snapshot shipped in the package
    try:
        cfg = _cfg(_prod(commitments=[RI, SP]))
        cost = costs.stack_cost(resolved_prices(), cfg).to_json()
        assert cost["guaranteed_monthly_usd"] is None and cost["unused_commitment_monthly_usd"] is None
        assert all(p["guaranteed_monthly_usd"] is None for p in cost["pools"] if p["guaranteed_nodes"])
        # unknown spend is not zero: the policy function refuses to deploy without the figures
        with pytest.raises(policy_settings.PriceUnknown):
            policy_settings.settings_for(resolved_prices(), cfg, "c", {}, budget_names={})
    finally:
        monkeypatch.undo()


def test_a_commitment_without_a_rate_stops_the_policy_deploy_even_when_every_floor_is_priced(tmp_path, monkeypatch):
    from pricing.sources import pricebook

    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv(pricebook.ENV_SNAPSHOT, "0")  # nor the snapshot shipped in the package
    try:
        # no price source: the floors carry the user's own rates, the elastic types the config's prices; only the
        # Savings Plan's rates are unknown (valid offline: nothing can tell the rate is missing)
        data = _prod(commitments=[SP])
        for pool in data["gpuloan:pools"]:
            if "guaranteed" in pool:
                pool["guaranteed"]["rate"] = {"usd_per_hour": 10.0, "source": "our invoice, 2026-11"}
        data["gpuloan:instance_prices"] = {
            t: {"ondemand_usd_per_hour": 20.0, "source": "a quote, 2026-11"}
            for t in ("p4d.24xlarge", "p5.48xlarge", "g6e.xlarge", "g6e.2xlarge")
        }
        cfg = _cfg(data)
        assert (
            costs.stack_cost(resolved_prices(), cfg).guaranteed_monthly_usd is None
        )  # unknown, not priced without the plan
        with pytest.raises(policy_settings.PriceUnknown, match=r"commitments\[0\] \(org-compute\): no rate"):
            policy_settings.settings_for(resolved_prices(), cfg, "c", {}, budget_names={})
        # an offline preview may run with it unknown (nothing is deployed): null, never zero
        s = policy_settings.settings_for(resolved_prices(), cfg, "c", {}, budget_names={}, allow_unknown_prices=True)
        assert s.commitment_unused_usd_per_hour is None and s.pool("training").guaranteed_usd_per_hour is None
    finally:
        monkeypatch.undo()


def test_the_deprecated_shorthand_warns_in_validate_and_preview_naming_field_and_replacement(tmp_path, capsys):
    data = stack_config("prod")
    data.pop("gpuloan:commitments")
    data["gpuloan:pools"][0]["guaranteed"]["payment"] = "reserved_1yr"
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": data}))
    assert cli.main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: pools[0].guaranteed.payment: 'reserved_1yr' is deprecated" in err
    assert "kind: reserved_instances, term_years: 1" in err and "commitments" in err
    assert cli.main(["preview", "--summary", str(path)]) == 0
    assert "warning: pools[0].guaranteed.payment" in capsys.readouterr().err
    # the shipped stack uses commitments: no warning
    assert cli.main(["validate", "prod"]) == 0
    assert "deprecated" not in capsys.readouterr().err


# --- one billing model: preview --------------------------------------------------------------------------------


def test_prod_preview_priced_with_an_org_ri_equals_the_billing_models_figure():
    # Three RIs for a floor of two: one RI-hour unused every hour, billed all the same.
    cfg = _cfg(_prod(commitments=[{**RI, "count": 3}]))
    cost = costs.stack_cost(resolved_prices(), cfg).to_json()
    ri, p4d, g6e = _ri_rate(), _od("p4d.24xlarge"), _od("g6e.xlarge")
    by_pool = {p["pool"]: p for p in cost["pools"]}
    # by hand: the floor's 2 nodes at the RI rate; 1 RI unused; inference at on-demand; no floor for research
    assert by_pool["training"]["guaranteed_monthly_usd"] == pytest.approx(2 * ri * HOURS, abs=0.01)
    assert by_pool["inference"]["guaranteed_monthly_usd"] == pytest.approx(2 * g6e * HOURS, abs=0.01)
    assert by_pool["research"]["guaranteed_monthly_usd"] == 0
    assert cost["unused_commitment_monthly_usd"] == pytest.approx(ri * HOURS, abs=0.01)
    assert cost["guaranteed_monthly_usd"] == pytest.approx((3 * ri + 2 * g6e) * HOURS, abs=0.02)
    # ... and exactly what pricing/cost_model/billing.py bills for the same month
    usage = [
        u
        for h in range(HOURS)
        for u in (
            billing.Usage(h, "training", "p4d.24xlarge", "us-east-1", billing.RESERVED, 2, p4d),
            billing.Usage(h, "inference", "g6e.xlarge", "us-east-1", billing.ON_DEMAND, 2, g6e),
        )
    ]
    b = billing.bill(
        usage,
        [
            billing.Commitment(
                "p4d-ri-1yr",
                billing.RESERVED_INSTANCES,
                {"p4d.24xlarge": ri},
                region="us-east-1",
                instance_type="p4d.24xlarge",
                count=3,
            )
        ],
        HOURS,
    )
    assert cost["guaranteed_monthly_usd"] == pytest.approx(b.total_usd, abs=0.02)
    assert cost["unused_commitment_monthly_usd"] == pytest.approx(b.unused_commitment_usd, abs=0.01)
    [row] = cost["commitments"]
    assert row["fee_monthly_usd"] == pytest.approx(3 * ri * HOURS, abs=0.01)
    assert row["used_monthly_usd"] == pytest.approx(2 * ri * HOURS, abs=0.01)
    assert row["status"] == "held" and row["source"] == "RI purchase 2026-11-02"


def test_a_savings_plan_covers_the_highest_discount_first_across_pools():
    # Plan rates: p4d 60 % of on-demand (40 % off), g6e 90 % (10 % off). A commitment of two p4d node-hours at the
    # plan rate plus $1: it covers training's two p4d nodes first, then $1 of inference's g6e hours.
    p4d, g6e = _od("p4d.24xlarge"), _od("g6e.xlarge")
    rates = {
        "p4d.24xlarge": {"usd_per_hour": round(0.6 * p4d, 4), "source": "illustrative, 2026-12"},
        "g6e.xlarge": {"usd_per_hour": round(0.9 * g6e, 4), "source": "illustrative, 2026-12"},
    }
    sp_p4d, sp_g6e = rates["p4d.24xlarge"]["usd_per_hour"], rates["g6e.xlarge"]["usd_per_hour"]
    cfg = _cfg(_prod(commitments=[{**SP, "hourly_commitment_usd": 2 * sp_p4d + 1.0, "rates": rates}]))
    by_pool = {p["pool"]: p for p in costs.stack_cost(resolved_prices(), cfg).to_json()["pools"]}
    assert by_pool["training"]["guaranteed_monthly_usd"] == pytest.approx(2 * sp_p4d * HOURS, abs=0.02)
    covered_g6e_hours = 1.0 / sp_g6e
    assert by_pool["inference"]["guaranteed_monthly_usd"] == pytest.approx(
        (1.0 + (2 - covered_g6e_hours) * g6e) * HOURS, abs=0.02
    )
    assert by_pool["training"]["guaranteed_commitments"] == ["org-compute"]


def test_preview_table_shows_the_commitment_and_its_unused_row(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "220")
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(yaml.safe_dump({"config": _prod(commitments=[{**RI, "count": 3}])}))
    assert cli.main(["preview", "--summary", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    unused = _ri_rate() * HOURS
    assert f"commitments (unused) ${unused:,.0f}" in out
    assert "(on_demand + p4d-ri-1yr)" in out
    assert "commitment p4d-ri-1yr (reserved_instances, held; RI purchase 2026-11-02)" in out


# --- cost-diff -------------------------------------------------------------------------------------------------


def _side(data: dict) -> cost_diff.Side:
    cfg = _cfg(data)
    return cost_diff.Side(doc={"resources": [], "cost": costs.stack_cost(resolved_prices(), cfg).to_json()})


def test_cost_diff_shows_a_commitment_change():
    # One more RI than the floor uses: +1 RI-hour per hour, in no pool, on the commitments row and the total.
    base, head = _side(_prod()), _side(_prod(commitments=[{**RI, "count": 3}]))
    d = cost_diff.diff_stack("prod", base, head)
    rows = {r[0]: r for r in cost_diff.cost_rows(d)}
    one_ri = _ri_rate() * HOURS
    assert rows["commitments (unused)"][1] == f"$0 → ${one_ri:,.0f} (+${one_ri:,.0f})"
    assert rows["training"][1] == f"${2 * _ri_rate() * HOURS:,.0f}"  # the floor itself costs the same
    assert f"(+${one_ri:,.0f})" in rows["total"][1]
    [line] = cost_diff.commitment_lines(d)
    assert line.startswith("prod: commitment p4d-ri-1yr (reserved_instances, held) changed: fee ")
    assert f"unused $0 → ${one_ri:,.0f}" in line
    md = cost_diff.render_markdown([d], "main")
    assert "| commitments (unused) |" in md and line in md


def test_cost_diff_raising_a_floor_past_its_ris_costs_on_demand():
    data = _prod()
    data["gpuloan:pools"][0]["guaranteed"]["nodes"] = 3
    d = cost_diff.diff_stack("prod", _side(_prod()), _side(data))
    training = next(r for r in cost_diff.cost_rows(d) if r[0] == "training")
    assert f"(+${_od('p4d.24xlarge') * HOURS:,.0f})" in training[1]


# --- the budget rule -------------------------------------------------------------------------------------------


def test_the_budget_rule_counts_commitment_fees_used_or_not():
    # Prod's floors cost ~$22.5k of its $75k budget; 8 more RIs no floor uses add 8 x RI rate x 730 (~$79k).
    _cfg(_prod(commitments=[RI]))  # valid
    problems = _problems(_prod(commitments=[{**RI, "count": 10}]))
    [(path, msg)] = [(p, m) for p, m in problems if p == "budget.monthly_usd"]
    assert "commitment fees no floor uses" in msg
    unused = 8 * _ri_rate() * HOURS
    assert f"${unused:,.0f} of it" in msg


def test_the_pool_budget_rule_prices_the_floor_with_the_environments_commitments():
    # 2 p4d floor nodes: ~$19.7k/month under the org's RIs, ~$32.1k on demand; a $25k pool budget fits the former.
    data = _prod()
    data["gpuloan:pools"][0]["budget"]["monthly_usd"] = 25000
    _cfg(data)
    data.pop("gpuloan:commitments")
    problems = _problems(data)
    assert any(p == "pools[0].budget.monthly_usd" and "alone costs $32," in m for p, m in problems), problems


# --- the policy's budget cap -----------------------------------------------------------------------------------


def test_policy_settings_bill_floors_with_commitments_and_count_unused_fees_as_fixed_spend():
    cfg = _cfg(_prod(commitments=[{**RI, "count": 3}]))
    s = policy_settings.settings_for(resolved_prices(), cfg, "c", {}, budget_names={})
    ri = _ri_rate()
    assert s.pool("training").guaranteed_usd_per_hour == pytest.approx(2 * ri, abs=1e-6)
    assert s.commitment_unused_usd_per_hour == pytest.approx(ri, abs=1e-6)
    assert type(s).from_json(s.to_json()) == s  # the Lambda reads it back


def test_the_environment_cap_counts_the_unused_commitment_fee():
    # Headroom over the floor (0.80 $/h) is 1.5 spot nodes (0.41 $/h each) without commitments: one node fits.
    # An unused commitment of 0.50 $/h takes that headroom: nothing fits.
    hours = hours_left_in_month(NOW)
    budget = 500.0 + hours * (0.80 + 0.41 * 1.5)
    obs = Observation(
        (PoolObservation("research", (group("research-spot"), group("research-od")), (), (1, 1)),), spend(500.0)
    )
    plain = settings(pool_settings(), env_budget=budget)
    assert [(c.pool, c.desired_to) for c in decide(plain, obs, NOW).changes] == [("research", 1)]
    from dataclasses import replace

    committed = replace(plain, commitment_unused_usd_per_hour=0.50)
    plan = decide(committed, obs, NOW)
    assert plan.changes == () and Reason.BUDGET_CAP in plan.decision("research").reasons


def test_the_tick_accrues_the_unused_commitment_fee_to_the_environment():
    from dataclasses import replace
    from datetime import timedelta

    from test_policy_adapters import _ports

    from policy.tick import run_tick

    def env_estimate(commitment_usd_per_hour: float) -> float:
        ports = _ports()
        s = replace(settings(pool_settings(), env_budget=1e6), commitment_unused_usd_per_hour=commitment_usd_per_hour)
        run_tick(s, ports, NOW, lambda line: None)
        run_tick(s, ports, NOW + timedelta(minutes=30), lambda line: None)
        return ports.state.items["tick"][0]["spend"]["environment"]["estimated_since_usd"]

    # half an hour of a 0.50 $/h unused commitment: $0.25 more environment spend
    assert env_estimate(0.50) - env_estimate(0.0) == pytest.approx(0.25)
