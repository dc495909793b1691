"""Alarms and the dashboard reference only metrics that are published, with the exact dimension sets they are
published with (CloudWatch matches dimensions exactly: one extra or missing dimension and the alarm watches an
empty series forever). The published sets are read from the comments of policy/metric_names.py, the one place
the Lambda, the alarms and the dashboard share; Container Insights metrics from DESIGN.md's facts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO, run_stack, stack_config, resolved_prices
from policy import metric_names as m
from stacks.spend import alarms
from pricing import checks

ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
CONTAINER_INSIGHTS_GPU = {
    "node_gpu_utilization",
    "node_gpu_memory_utilization",
    "node_gpu_limit",
    "node_gpu_usage_total",
    "node_gpu_reserved_capacity",
}


def published_policy_metrics() -> dict[str, frozenset[str]]:
    """metric name -> dimension names, from `NAME = "Metric"  # Dim, Dim (values): meaning` lines."""
    out = {}
    for line in (Path(m.__file__)).read_text().splitlines():
        match = re.match(r'^[A-Z_]+ = "(\w+)"\s+# ([^:]+)', line)
        if match and not line.startswith("DIM_"):
            dims = re.sub(r"\([^)]*\)", "", match.group(2))
            out[match.group(1)] = frozenset(d.strip() for d in dims.split(",") if d.strip())
    return out


PUBLISHED = published_policy_metrics()


def test_the_published_metric_table_is_read():
    assert PUBLISHED[m.ELASTIC_NODES] == {"Environment", "Pool", "Capacity"}
    assert PUBLISHED[m.POOL_GPU_UTILIZATION] == {"Environment", "Pool", "Tier"}
    assert PUBLISHED[m.FALLBACK_ACTIVE] == {"Environment", "Pool"}


def check_metric(namespace: str, name: str, dims: dict, cluster_name: str, env: str) -> None:
    if namespace == m.NAMESPACE:
        assert name in PUBLISHED, f"{name} is not published by the policy function"
        assert set(dims) == PUBLISHED[name], f"{name} dims {sorted(dims)} != published {sorted(PUBLISHED[name])}"
        assert dims[m.DIM_ENVIRONMENT] == env
    elif namespace == "ContainerInsights":
        assert name in CONTAINER_INSIGHTS_GPU
        assert dims == {"ClusterName": cluster_name}
    else:
        pytest.fail(f"unexpected namespace {namespace}")


def alarm_metrics(alarm) -> list[tuple[str, str, dict, str]]:
    i = alarm.inputs
    if "metricQueries" not in i:
        return [(i["namespace"], i["metricName"], i["dimensions"], i["statistic"])]
    return [
        (q["metric"]["namespace"], q["metric"]["metricName"], q["metric"]["dimensions"], q["metric"]["stat"])
        for q in i["metricQueries"]
        if "metric" in q
    ]


def alarms_by_name(rec) -> dict:
    return {a.inputs["name"]: a for a in rec.of_type(ALARM) if a.inputs["name"].startswith("gpuloan-")}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_alarm_metric_is_published_with_its_exact_dimensions(recorded, stack):
    rec = recorded(stack)
    cluster = rec.outputs["cluster_name"]
    mine = [a for a in rec.of_type(ALARM) if a.parent == rec.of_type("gpuloan:alarms:Alarms")[0].urn]
    assert mine
    for alarm in mine:
        for ns, name, dims, _ in alarm_metrics(alarm):
            check_metric(ns, name, dims, cluster, stack)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_alarm_notifies_the_alerts_topic(recorded, stack):
    rec = recorded(stack)
    topic_arn = rec.outputs["alerts_topic_arn"]
    for alarm in alarms_by_name(rec).values():
        assert alarm.inputs["alarmActions"] == [topic_arn], alarm.name
        assert alarm.inputs["okActions"] == [topic_arn], alarm.name


def test_metric_math_expressions_only_use_defined_ids_and_return_one_series(recorded):
    for alarm in alarms_by_name(recorded("prod")).values():
        queries = alarm.inputs.get("metricQueries")
        if not queries:
            continue
        ids = {q["id"] for q in queries}
        (expr,) = [q for q in queries if "expression" in q]
        assert [q["id"] for q in queries if q.get("returnData")] == [expr["id"]]
        used = set(re.findall(r"\b([a-z][a-z0-9_]*)\b", expr["expression"])) - {"if", "and", "or", "fill"}
        assert used <= ids, f"{alarm.name}: {used - ids} undefined"
        assert all(
            q["metric"]["period"] == alarm.inputs.get("period", q["metric"]["period"]) for q in queries if "metric" in q
        )


def test_prod_alarm_set(recorded):
    # Both prod pools are spot_then_on_demand, so each gets a fallback alarm; both have a floor, so the
    # environment gets the missing-metrics alarm.
    assert set(alarms_by_name(recorded("prod"))) >= {
        "gpuloan-prod-training-idle-waste",
        "gpuloan-prod-training-saturation",
        "gpuloan-prod-training-fallback-too-long",
        "gpuloan-prod-inference-idle-waste",
        "gpuloan-prod-inference-saturation",
        "gpuloan-prod-inference-fallback-too-long",
        "gpuloan-prod-gpu-metrics-missing",
    }


def test_spot_only_pool_has_no_fallback_alarm(recorded):
    names = set(alarms_by_name(recorded("dev")))
    assert "gpuloan-dev-research-idle-waste" in names
    assert not any("fallback" in n for n in names)


def test_idle_waste_alarm_follows_the_configured_threshold_and_hours(recorded):
    cfg = checks.parse(
        {k.split(":", 1)[1]: v for k, v in stack_config("prod").items() if k.startswith("gpuloan:")},
        prices=resolved_prices(),
    )
    a = alarms_by_name(recorded("prod"))["gpuloan-prod-training-idle-waste"].inputs
    (expr,) = [q["expression"] for q in a["metricQueries"] if "expression" in q]
    assert f"util < {cfg.alarms.idle_utilization_pct:g}" in expr
    assert "FILL(nodes_spot, 0) + FILL(nodes_on_demand, 0)" in expr
    period = a["metricQueries"][0]["metric"]["period"]
    assert period * a["evaluationPeriods"] == cfg.alarms.idle_hours * 3600
    assert a["datapointsToAlarm"] == a["evaluationPeriods"]
    assert a["treatMissingData"] == "notBreaching"


def test_missing_gpu_metrics_count_as_breaching(recorded):
    rec = recorded("prod")
    a = alarms_by_name(rec)["gpuloan-prod-gpu-metrics-missing"].inputs
    assert a["treatMissingData"] == "breaching"
    assert (a["namespace"], a["metricName"], a["statistic"]) == (
        "ContainerInsights",
        "node_gpu_utilization",
        "SampleCount",
    )
    assert a["dimensions"] == {"ClusterName": rec.outputs["cluster_name"]}
    assert a["comparisonOperator"] == "LessThanThreshold" and a["threshold"] == 1


def test_fallback_alarm_uses_configured_minutes(recorded):
    a = alarms_by_name(recorded("prod"))["gpuloan-prod-training-fallback-too-long"].inputs
    assert (a["metricName"], a["statistic"]) == (m.FALLBACK_ACTIVE, "Minimum")
    assert a["period"] * a["evaluationPeriods"] == 120 * 60  # alarms.fallback_minutes default


@pytest.mark.parametrize(
    "window, schedule, expected",
    [
        (180, 1, (300, 36)),
        (5, 1, (300, 1)),
        (60, 7, (420, 9)),  # period never shorter than the policy's schedule; window rounded up
        (24 * 60, 60, (3600, 24)),
        (24 * 60, 7, (420, 205)),  # capped: periods x period must stay within one day
    ],
)
def test_alarm_window(window, schedule, expected):
    period, periods = alarms.alarm_window(window, schedule)
    assert (period, periods) == expected
    assert period * periods <= 86400


def _variant_config():
    """prod with a guaranteed-only pool and an elastic-only pool: the other alarm shapes."""
    cfg = stack_config("prod")
    training = cfg["gpuloan:pools"][0]
    del training["elastic"]
    inference = cfg["gpuloan:pools"][1]
    del inference["guaranteed"]
    return cfg


def test_guaranteed_only_pool_saturates_above_95_percent_and_elastic_only_still_gets_its_alarms():
    ns = {k.split(":", 1)[1]: v for k, v in _variant_config().items() if k.startswith("gpuloan:")}
    specs = {s.alarm_name: s for s in alarms.alarm_specs(checks.parse(ns, prices=resolved_prices()), "c")}
    sat = specs["gpuloan-prod-training-saturation"]
    (q,) = sat.queries
    assert (q.metric_name, q.dimensions[m.DIM_TIER], sat.threshold) == (m.POOL_GPU_UTILIZATION, "guaranteed", 95.0)
    assert "gpuloan-prod-training-idle-waste" not in specs
    assert "gpuloan-prod-inference-idle-waste" in specs


def test_no_floor_anywhere_means_no_missing_metrics_alarm():
    ns = {k.split(":", 1)[1]: v for k, v in stack_config("dev").items() if k.startswith("gpuloan:")}
    del ns["pools"][0]["guaranteed"]
    assert alarms.missing_metrics_spec(checks.parse(ns, prices=resolved_prices()), "c") is None


# --- dashboard -------------------------------------------------------------------------------------------------


def dashboard(rec) -> dict:
    (d,) = rec.of_type("aws:cloudwatch/dashboard:Dashboard")
    return d.inputs


def _metric_rows(widget):
    for row in widget["properties"].get("metrics", []):
        strings = [x for x in row if not isinstance(x, dict)]
        yield strings


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_dashboard_json_is_valid_and_on_the_grid(recorded, stack):
    body = json.loads(dashboard(recorded(stack))["dashboardBody"])
    assert body["widgets"]
    for w in body["widgets"]:
        assert w["type"] in ("metric", "text", "alarm")
        assert 0 <= w["x"] and w["x"] + w["width"] <= 24 and w["height"] > 0
        if w["type"] == "metric":
            assert w["properties"]["region"] == "us-east-1"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_dashboard_references_only_published_metrics(recorded, stack):
    rec = recorded(stack)
    body = json.loads(dashboard(rec)["dashboardBody"])
    seen = set()
    for w in body["widgets"]:
        for strings in _metric_rows(w):
            if not strings:
                continue  # an expression row (checked below)
            ns, name, *pairs = strings
            dims = dict(zip(pairs[::2], pairs[1::2]))
            check_metric(ns, name, dims, rec.outputs["cluster_name"], stack)
            seen.add(name)
    assert {m.POOL_GPU_UTILIZATION, m.ELASTIC_NODES, m.MONTH_TO_DATE_SPEND_USD, "node_gpu_utilization"} <= seen


def test_dashboard_decisions_by_reason_search_the_published_metric(recorded):
    body = json.loads(dashboard(recorded("prod"))["dashboardBody"])
    exprs = [
        x["expression"]
        for w in body["widgets"]
        for row in w["properties"].get("metrics", [])
        for x in row
        if isinstance(x, dict) and "expression" in x
    ]
    (search,) = exprs
    assert f"{{{m.NAMESPACE},{m.DIM_ENVIRONMENT},{m.DIM_POOL},{m.DIM_REASON}}}" in search
    assert f'MetricName="{m.DECISIONS}"' in search and 'Environment="prod"' in search
    assert set(PUBLISHED[m.DECISIONS]) == {m.DIM_ENVIRONMENT, m.DIM_POOL, m.DIM_REASON}


def test_dashboard_shows_budgets_and_every_alarm(recorded):
    rec = recorded("prod")
    body = json.loads(dashboard(rec)["dashboardBody"])
    lines = {
        a["label"]: a["value"]
        for w in body["widgets"]
        for a in w["properties"].get("annotations", {}).get("horizontal", [])
    }
    assert lines == {"training budget": 60000, "inference budget": 8000, "research budget": 7000, "prod budget": 75000}
    (alarm_widget,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    arns = {a.outputs["arn"] for a in alarms_by_name(rec).values()}
    assert set(alarm_widget["properties"]["alarms"]) == arns


def test_dashboard_uses_the_configured_gpu_metric_names():
    cfg = stack_config("dev")
    cfg["gpuloan:policy"]["utilization_metric"] = "node_gpu_usage_total"
    body = json.loads(dashboard(run_stack("dev", cfg))["dashboardBody"])
    names = {s[1] for w in body["widgets"] for s in _metric_rows(w) if s and s[0] == "ContainerInsights"}
    assert "node_gpu_usage_total" in names


def test_docs_name_every_alarm_kind():
    text = (REPO / "docs" / "budgets.md").read_text()
    for kind in ("idle-waste", "saturation", "fallback-too-long", "gpu-metrics-missing"):
        assert kind in text


def test_saturation_counts_a_full_spot_group_as_at_max(recorded):
    # ElasticMaxNodes = spot max + on-demand max (6 + 2 for training); on-demand only replaces missing spot, so a
    # full spot group (elastic.max_nodes = 6) with GPUs pending is saturation even though 6 < 8.
    a = alarms_by_name(recorded("prod"))["gpuloan-prod-training-saturation"].inputs
    (expr,) = [q["expression"] for q in a["metricQueries"] if "expression" in q]
    assert "FILL(nodes_spot, 0) >= 6" in expr and ">= max_nodes" in expr and "FILL(pending, 0) > 0" in expr
    ids = {q["id"]: q["metric"]["metricName"] for q in a["metricQueries"] if "metric" in q}
    assert ids["max_nodes"] == m.ELASTIC_MAX_NODES and ids["pending"] == m.PENDING_GPUS
    assert a["metricQueries"][0]["metric"]["period"] * a["evaluationPeriods"] == 60 * 60  # saturation_minutes


def test_dashboard_splits_alarms_into_widgets_of_at_most_100():
    # CloudWatch's alarm widget takes 1-100 alarm ARNs; PutDashboard rejects a bigger one, which a stack with
    # ~35 spot+on-demand pools (3 alarms each, plus the environment's and the policy function's) reaches.
    from stacks.spend.dashboard import dashboard_body

    arns = [f"arn:aws:cloudwatch:us-east-1:123456789012:alarm:a{i:03d}" for i in range(250)]
    ns = {k.split(":", 1)[1]: v for k, v in stack_config("dev").items() if k.startswith("gpuloan:")}
    body = dashboard_body(checks.parse(ns, prices=resolved_prices()), "gpuloan-dev", arns)
    widgets = [w for w in body["widgets"] if w["type"] == "alarm"]
    assert [len(w["properties"]["alarms"]) for w in widgets] == [100, 100, 50]
    assert sorted(a for w in widgets for a in w["properties"]["alarms"]) == sorted(arns)
    assert all(0 <= w["x"] and w["x"] + w["width"] <= 24 for w in widgets)
