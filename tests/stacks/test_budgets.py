"""Budgets, the alerts topic and its policies, from the offline (mocked) run of the real program, plus the
config rules that keep budgets inside AWS's limits."""

from __future__ import annotations

import json

import pytest

from conftest import run_stack, stack_config, resolved_prices
from offline.runner import ACCOUNT_ID
from pricing import checks
from config import budget_plan, config, tags
from stacks.spend import alerts, budgets

BUDGET = "aws:budgets/budget:Budget"
TOPIC = "aws:sns/topic:Topic"


def gpuloan_ns(stack: str) -> dict:
    return {k.split(":", 1)[1]: v for k, v in stack_config(stack).items() if k.startswith("gpuloan:")}


def alerts_child(rec, type_: str):
    (comp,) = rec.of_type("gpuloan:alerts:Alerts")
    (child,) = [r for r in rec.children_of(comp.urn) if r.type == type_]
    return child


def topic(rec):
    return alerts_child(rec, TOPIC)


def budgets_by_name(rec) -> dict:
    return {b.inputs["name"]: b.inputs for b in rec.of_type(BUDGET)}


# --- budgets ---------------------------------------------------------------------------------------------------


def test_prod_has_an_environment_budget_and_one_per_pool_budget(recorded):
    assert set(budgets_by_name(recorded("prod"))) == {
        "gpuloan-prod",
        "gpuloan-prod-training",
        "gpuloan-prod-inference",
        "gpuloan-prod-research",
    }


def test_dev_pool_without_budget_gets_none(recorded):
    assert set(budgets_by_name(recorded("dev"))) == {"gpuloan-dev"}


def _and_tags(*pairs):
    return {"ands": [{"tags": {"key": k, "values": [v], "matchOptions": ["EQUALS"]}} for k, v in pairs]}


@pytest.mark.parametrize(
    "name, spend_filter, limit, emails, actual, forecasted",
    [
        (
            "gpuloan-prod",
            {
                "costFilters": [{"name": "TagKeyValue", "values": ["user:gpuloan:environment$prod"]}],
                "costTypes": {"useAmortized": True},
            },
            "75000.00",
            ["ml-platform@example.com", "finance@example.com"],
            [50, 80, 100],
            [100],
        ),
        # Pool budgets AND the environment tag: dev and prod may both have a "training" pool in one account.
        (
            "gpuloan-prod-training",
            {
                "filterExpression": _and_tags(("gpuloan:environment", "prod"), ("gpuloan:pool", "training")),
                "metrics": "AmortizedCost",
            },
            "60000.00",
            ["research-leads@example.com", "finance@example.com"],
            [50, 80, 100],
            [100],
        ),
        # inference leaves thresholds at their defaults (50/80/100 actual, 100 forecasted)
        (
            "gpuloan-prod-inference",
            {
                "filterExpression": _and_tags(("gpuloan:environment", "prod"), ("gpuloan:pool", "inference")),
                "metrics": "AmortizedCost",
            },
            "8000.00",
            ["serving-oncall@example.com"],
            [50, 80, 100],
            [100],
        ),
    ],
)
def test_budget_filter_limit_thresholds_and_subscribers(
    recorded, name, spend_filter, limit, emails, actual, forecasted
):
    rec = recorded("prod")
    b = budgets_by_name(rec)[name]
    assert {k: b.get(k) for k in spend_filter} == spend_filter
    # classic filters and an expression are exclusive in the API
    assert not ("costFilters" in b and "filterExpression" in b)
    assert (b["budgetType"], b["timeUnit"], b["limitUnit"], b["limitAmount"]) == ("COST", "MONTHLY", "USD", limit)
    kinds = [(n["notificationType"], n["threshold"]) for n in b["notifications"]]
    assert kinds == [("ACTUAL", t) for t in actual] + [("FORECASTED", t) for t in forecasted]
    topic_arn = topic(rec).outputs["arn"]
    for n in b["notifications"]:
        assert n["comparisonOperator"] == "GREATER_THAN" and n["thresholdType"] == "PERCENTAGE"
        assert n["subscriberEmailAddresses"] == emails
        assert n["subscriberSnsTopicArns"] == [topic_arn]


def test_pool_budget_filter_uses_the_pool_tag_key_that_resources_carry():
    spec = next(
        s
        for s in budget_plan.budget_specs(checks.parse(gpuloan_ns("prod"), prices=resolved_prices()))
        if s.tag_value == "training"
    )
    assert spec.tag_key == tags.TAG_POOL
    assert spec.filter_value == f"user:{tags.TAG_POOL}$training"


def test_a_pool_budget_without_emails_still_notifies_the_topic():
    ns = gpuloan_ns("prod")
    ns["pools"][1]["budget"]["alert_emails"] = []
    spec = next(
        s for s in budget_plan.budget_specs(checks.parse(ns, prices=resolved_prices())) if s.tag_value == "inference"
    )
    (first, *_) = budgets.notifications(spec, "arn:aws:sns:us-east-1:123456789012:t")
    assert first.subscriber_email_addresses is None  # AWS rejects an empty list
    assert first.subscriber_sns_topic_arns == ["arn:aws:sns:us-east-1:123456789012:t"]


COST_ALLOCATION_TAG = "aws:costexplorer/costAllocationTag:CostAllocationTag"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_first_deploy_declares_no_tag_activation(recorded, stack):
    # AWS refuses to activate a key no billed resource carried yet ("empty result"), and the gpuloan keys only
    # reach a bill once the node groups ran: an activation in the first `pulumi up` would fail the deploy.
    assert recorded(stack).of_type(COST_ALLOCATION_TAG) == []
    assert checks.parse(gpuloan_ns(stack), prices=resolved_prices()).budget.activate_cost_allocation_tags is False


def test_opting_in_activates_every_cost_allocation_key_and_retains_it():
    cfg = stack_config("prod")
    cfg["gpuloan:budget"]["activate_cost_allocation_tags"] = True
    rec = run_stack("prod", cfg)
    acts = rec.of_type(COST_ALLOCATION_TAG)
    assert sorted(a.inputs["tagKey"] for a in acts) == sorted(tags.COST_ALLOCATION_KEYS)
    assert {a.inputs["status"] for a in acts} == {"Active"}
    # Nothing waits on the activations: a refused activation cannot hold back budgets or capacity.
    budgets_comp = rec.of_type("gpuloan:budgets:Budgets")[0]
    assert all(r.parent == budgets_comp.urn for r in acts)


def test_activation_flag_belongs_to_the_environment_budget_only():
    ns = gpuloan_ns("prod")
    ns["pools"][0]["budget"]["activate_cost_allocation_tags"] = True
    with pytest.raises(config.ConfigError) as err:
        checks.parse(ns, prices=resolved_prices())
    assert "pools[0].budget.activate_cost_allocation_tags" in [p for p, _ in err.value.problems]


# --- topic, key, policies ----------------------------------------------------------------------------------------


def test_topic_is_encrypted_with_the_stack_key(recorded):
    rec = recorded("prod")
    key = alerts_child(rec, "aws:kms/key:Key")
    assert topic(rec).inputs["kmsMasterKeyId"] == key.outputs["arn"]
    assert key.inputs["enableKeyRotation"] is True


def test_key_policy_lets_budgets_and_cloudwatch_encrypt_only_for_this_account(recorded):
    key = alerts_child(recorded("prod"), "aws:kms/key:Key")
    doc = json.loads(key.inputs["policy"])
    services = [s for s in doc["Statement"] if "Service" in s["Principal"]]
    assert len(services) == 1
    (svc,) = services
    assert sorted(svc["Principal"]["Service"]) == ["budgets.amazonaws.com", "cloudwatch.amazonaws.com"]
    assert sorted(svc["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert svc["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT_ID}}
    admin = [s for s in doc["Statement"] if "AWS" in s["Principal"]]
    assert [s["Principal"]["AWS"] for s in admin] == [f"arn:aws:iam::{ACCOUNT_ID}:root"]


def test_topic_policy_allows_publish_only_from_the_two_services_of_this_account(recorded):
    rec = recorded("prod")
    pol = alerts_child(rec, "aws:sns/topicPolicy:TopicPolicy")
    topic_arn = topic(rec).outputs["arn"]
    assert pol.inputs["arn"] == topic_arn
    doc = json.loads(pol.inputs["policy"])
    allows = [s for s in doc["Statement"] if s["Effect"] == "Allow"]
    assert sorted(s["Principal"]["Service"] for s in allows) == ["budgets.amazonaws.com", "cloudwatch.amazonaws.com"]
    for s in allows:
        assert s["Action"] == "SNS:Publish" and s["Resource"] == topic_arn
        assert s["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT_ID}
        assert ACCOUNT_ID in s["Condition"]["ArnLike"]["aws:SourceArn"]
    budgets_stmt = next(s for s in allows if s["Principal"]["Service"] == "budgets.amazonaws.com")
    assert budgets_stmt["Condition"]["ArnLike"]["aws:SourceArn"] == f"arn:aws:budgets::{ACCOUNT_ID}:*"
    (deny,) = [s for s in doc["Statement"] if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_environment_emails_subscribe_to_the_topic(recorded):
    rec = recorded("prod")
    subs = rec.of_type("aws:sns/topicSubscription:TopicSubscription")
    assert sorted(s.inputs["endpoint"] for s in subs) == ["finance@example.com", "ml-platform@example.com"]
    assert {s.inputs["protocol"] for s in subs} == {"email"}
    assert {s.inputs["topic"] for s in subs} == {topic(rec).outputs["arn"]}
    assert not any("@" in s.name for s in subs)  # addresses stay out of URNs


def test_subscription_names_do_not_change_when_the_list_is_reordered():
    assert alerts.email_key("Ops@Example.com ") == alerts.email_key("ops@example.com")
    assert alerts.email_key("a@example.com") != alerts.email_key("b@example.com")


def test_alerts_component_exports_its_topic(recorded):
    # Registration order under the engine is not deterministic (and does not matter: dependencies do), so
    # this checks the wiring, not the order.
    rec = recorded("prod")
    assert len(rec.of_type("gpuloan:alerts:Alerts")) == 1
    assert rec.outputs["alerts_topic_arn"] == topic(rec).outputs["arn"]


def test_budgets_and_alerts_resources_are_children_of_their_components(recorded):
    rec = recorded("prod")
    for comp_type in ("gpuloan:alerts:Alerts", "gpuloan:budgets:Budgets"):
        (comp,) = rec.of_type(comp_type)
        assert rec.children_of(comp.urn)


# --- config rules (AWS Budgets limits), each a named case with its path ------------------------------------------


def _set(path: str, value):
    def mutate(ns):
        target = ns
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value

    return mutate


BAD_BUDGETS = [
    ("invalid email", _set("budget.alert_emails", ["not-an-email"]), "budget.alert_emails[0]", "not a valid email"),
    (
        "invalid pool email",
        _set("pools.1.budget.alert_emails", ["oncall@"]),
        "pools[1].budget.alert_emails[0]",
        "not a valid email",
    ),
    (
        "11 emails",
        _set("budget.alert_emails", [f"p{i}@example.com" for i in range(11)]),
        "budget.alert_emails",
        "at most 10",
    ),
    (
        "threshold zero",
        _set("budget.actual_thresholds_pct", [0, 50, 100]),
        "budget.actual_thresholds_pct[0]",
        "greater than 0",
    ),
    (
        "threshold above 1000",
        _set("budget.forecasted_thresholds_pct", [1001]),
        "budget.forecasted_thresholds_pct[0]",
        "less than or equal to 1000",
    ),
    (
        "11 notifications",
        _set("pools.0.budget.actual_thresholds_pct", list(range(10, 101, 10))),
        "pools[0].budget.actual_thresholds_pct",
        "11 notifications; AWS Budgets allows 10",
    ),
    (
        "duplicate thresholds",
        _set("budget.actual_thresholds_pct", [50, 50, 100]),
        "budget.actual_thresholds_pct",
        "distinct",
    ),
    ("no environment email", _set("budget.alert_emails", []), "budget.alert_emails", "at least one address"),
    (
        "cap without 100 %",
        _set("budget.actual_thresholds_pct", [50, 80]),
        "budget.actual_thresholds_pct",
        "include 100",
    ),
]


@pytest.mark.parametrize("mutate, path, message", [c[1:] for c in BAD_BUDGETS], ids=[c[0] for c in BAD_BUDGETS])
def test_bad_budget_config_is_rejected_with_its_path(mutate, path, message):
    ns = gpuloan_ns("prod")
    mutate(ns)
    with pytest.raises(config.ConfigError) as err:
        checks.parse(ns, prices=resolved_prices())
    assert any(p == path and message in m for p, m in err.value.problems), err.value.problems


def test_exactly_ten_notifications_and_ten_emails_are_accepted():
    ns = gpuloan_ns("prod")
    ns["budget"]["actual_thresholds_pct"] = [10, 20, 30, 40, 50, 60, 70, 80, 100]
    ns["budget"]["alert_emails"] = [f"p{i}@example.com" for i in range(10)]
    cfg = checks.parse(ns, prices=resolved_prices())
    (env_spec, *_) = budget_plan.budget_specs(cfg)
    assert len(budgets.notifications(env_spec, "arn:aws:sns:us-east-1:1:t")) == 10


def test_bad_config_registers_no_budget():
    cfg = stack_config("prod")
    cfg["gpuloan:budget"]["alert_emails"] = ["nope"]
    with pytest.raises(Exception, match="alert_emails"):
        run_stack("prod", cfg)
