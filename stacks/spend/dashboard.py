"""One CloudWatch dashboard per environment: what people look at instead of reading logs.

GPU utilization per pool (guaranteed vs elastic), elastic nodes against their max, month-to-date spend against
the budgets, the policy's decisions by reason, the cluster's GPU metrics and the alarms. Every metric is one the
policy function publishes (policy/metric_names.py) or Container Insights provides (the `policy` config names it).
The body is built by a pure function (`dashboard_body`) so the tests can read it without the Pulumi engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from policy import metric_names as m
from stacks.spend.alarms import CAPACITY_DIMENSIONS
from config.config import GpuLoanConfig

PERIOD_S = 300
WIDTH = 24  # the dashboard grid is 24 units wide
# An alarm widget takes 1-100 alarm ARNs (CloudWatch dashboard body structure, "alarm" widget); PutDashboard
# rejects more, so a stack with many pools gets several alarm widgets.
MAX_ALARMS_PER_WIDGET = 100


def _grid(widgets: list[dict[str, Any]], height: int = 6) -> list[dict[str, Any]]:
    """Lay widgets out two per row (text widgets take the whole row)."""
    x = y = 0
    for w in widgets:
        width = WIDTH if w["type"] in ("text", "alarm") else WIDTH // 2
        if x + width > WIDTH:
            x, y = 0, y + height
        w.update(x=x, y=y, width=width, height=w.pop("_height", height))
        x += width
        if x >= WIDTH:
            x, y = 0, y + w["height"]
    return widgets


def _metric_widget(
    title: str,
    region: str,
    metrics: list[list[Any]],
    stat: str,
    *,
    unit_label: str = "",
    annotations: list[dict[str, Any]] | None = None,
    y_min: float | None = 0,
    y_max: float | None = None,
    stacked: bool = False,
) -> dict[str, Any]:
    left: dict[str, Any] = {"showUnits": False}
    if unit_label:
        left["label"] = unit_label
    if y_min is not None:
        left["min"] = y_min
    if y_max is not None:
        left["max"] = y_max
    props: dict[str, Any] = {
        "title": title,
        "region": region,
        "view": "timeSeries",
        "stacked": stacked,
        "period": PERIOD_S,
        "stat": stat,
        "metrics": metrics,
        "yAxis": {"left": left},
    }
    if annotations:
        props["annotations"] = {"horizontal": annotations}
    return {"type": "metric", "properties": props}


def dashboard_body(cfg: GpuLoanConfig, cluster_name: str, alarm_arns: list[str]) -> dict[str, Any]:
    env, region = cfg.environment, cfg.region
    pools = cfg.pools
    widgets: list[dict[str, Any]] = [
        {
            "type": "text",
            "_height": 2,
            "properties": {
                "markdown": (
                    f"## gpuloan · {env}\nGuaranteed floor + elastic GPUs per pool. Spend lines are the policy function's "
                    "own estimate (AWS Budgets lags hours); `gpuloan cost-report --month YYYY-MM --stack "
                    f"{env}` gives the billed figures. See docs/budgets.md."
                )
            },
        }
    ]

    util = []
    for p in pools:
        for tier, present in (("guaranteed", p.guaranteed), ("elastic", p.elastic)):
            if present is not None:
                util.append(
                    [
                        m.NAMESPACE,
                        m.POOL_GPU_UTILIZATION,
                        m.DIM_ENVIRONMENT,
                        env,
                        m.DIM_POOL,
                        p.name,
                        m.DIM_TIER,
                        tier,
                        {"label": f"{p.name} {tier}"},
                    ]
                )
    widgets.append(_metric_widget("GPU utilization per pool (%)", region, util, "Average", unit_label="%", y_max=100))

    nodes = []
    for p in pools:
        if p.elastic is None:
            continue
        for cap in CAPACITY_DIMENSIONS[p.elastic.capacity]:
            nodes.append(
                [
                    m.NAMESPACE,
                    m.ELASTIC_NODES,
                    m.DIM_ENVIRONMENT,
                    env,
                    m.DIM_POOL,
                    p.name,
                    m.DIM_CAPACITY,
                    cap,
                    {"label": f"{p.name} {cap}"},
                ]
            )
        nodes.append(
            [
                m.NAMESPACE,
                m.ELASTIC_MAX_NODES,
                m.DIM_ENVIRONMENT,
                env,
                m.DIM_POOL,
                p.name,
                {"label": f"{p.name} max", "color": "#7f7f7f"},
            ]
        )
    if nodes:
        widgets.append(_metric_widget("Elastic nodes (desired) vs max", region, nodes, "Maximum", unit_label="nodes"))
        pending = [
            [m.NAMESPACE, m.PENDING_GPUS, m.DIM_ENVIRONMENT, env, m.DIM_POOL, p.name, {"label": p.name}] for p in pools
        ]
        widgets.append(_metric_widget("GPUs requested by pending pods", region, pending, "Maximum", unit_label="GPUs"))

    spend = [
        [
            m.NAMESPACE,
            m.MONTH_TO_DATE_SPEND_USD,
            m.DIM_ENVIRONMENT,
            env,
            m.DIM_POOL,
            p.name,
            {"label": f"{p.name} month to date"},
        ]
        for p in pools
    ]
    budget_lines = [{"label": f"{p.name} budget", "value": p.budget.monthly_usd} for p in pools if p.budget]
    budget_lines.append({"label": f"{env} budget", "value": cfg.budget.monthly_usd, "color": "#d62728"})
    widgets.append(
        _metric_widget(
            "Month-to-date spend vs budget (USD, estimate)",
            region,
            spend,
            "Maximum",
            unit_label="USD",
            annotations=budget_lines,
        )
    )

    decisions = [
        [
            {
                "id": "decisions",
                "expression": (
                    f"SEARCH('{{{m.NAMESPACE},{m.DIM_ENVIRONMENT},{m.DIM_POOL},{m.DIM_REASON}}} "
                    f'MetricName="{m.DECISIONS}" {m.DIM_ENVIRONMENT}="{env}"\', \'Sum\', {PERIOD_S})'
                ),
                "label": "",
            }
        ]
    ]
    widgets.append(
        _metric_widget("Policy decisions by reason", region, decisions, "Sum", unit_label="decisions", stacked=True)
    )

    fallback = [
        [m.NAMESPACE, m.FALLBACK_ACTIVE, m.DIM_ENVIRONMENT, env, m.DIM_POOL, p.name, {"label": p.name}]
        for p in pools
        if p.elastic is not None and len(CAPACITY_DIMENSIONS[p.elastic.capacity]) > 1
    ]
    errors = [[m.NAMESPACE, m.POLICY_ERRORS, m.DIM_ENVIRONMENT, env, {"label": "policy errors", "stat": "Sum"}]]
    widgets.append(
        _metric_widget("On-demand fallback active (1 = yes) and policy errors", region, fallback + errors, "Maximum")
    )

    ns, util_metric = cfg.policy.metric_namespace, cfg.policy.utilization_metric
    cluster = [
        [ns, util_metric, "ClusterName", cluster_name, {"label": "GPU utilization (avg)"}],
        [ns, util_metric, "ClusterName", cluster_name, {"label": "GPU utilization (max)", "stat": "Maximum"}],
    ]
    if ns == "ContainerInsights":
        cluster.append(
            [ns, "node_gpu_memory_utilization", "ClusterName", cluster_name, {"label": "GPU memory utilization (avg)"}]
        )
    widgets.append(_metric_widget(f"Cluster GPUs ({ns})", region, cluster, "Average", unit_label="%", y_max=100))

    arns = sorted(alarm_arns)
    chunks = [arns[i : i + MAX_ALARMS_PER_WIDGET] for i in range(0, len(arns), MAX_ALARMS_PER_WIDGET)]
    for n, chunk in enumerate(chunks, 1):
        title = "Alarms" if len(chunks) == 1 else f"Alarms ({n}/{len(chunks)})"
        widgets.append(
            {
                "type": "alarm",
                "_height": 3,
                "properties": {"title": title, "alarms": chunk, "sortBy": "stateUpdatedTimestamp"},
            }
        )
    return {"widgets": _grid(widgets)}


@dataclass(frozen=True)
class DashboardArgs:
    cfg: GpuLoanConfig
    cluster_name: pulumi.Input[str]
    alarm_arns: pulumi.Input[list[str]]

    @staticmethod
    def from_config(
        cfg: GpuLoanConfig, cluster_name: pulumi.Input[str], alarm_arns: pulumi.Input[list[str]]
    ) -> DashboardArgs:
        """The environment's dashboard; `alarm_arns` fill its alarm widget (the pools' and the policy function's)."""
        return DashboardArgs(cfg, cluster_name, alarm_arns)


class Dashboard(pulumi.ComponentResource):
    dashboard_name: pulumi.Output[str]

    def __init__(self, name: str, args: DashboardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:dashboard:Dashboard", name, None, opts)
        body = pulumi.Output.all(args.cluster_name, args.alarm_arns).apply(
            lambda v: json.dumps(dashboard_body(args.cfg, v[0], list(v[1] or [])), sort_keys=True)
        )
        self.dashboard = aws.cloudwatch.Dashboard(
            f"{name}-dashboard",
            dashboard_name=f"gpuloan-{args.cfg.environment}",
            dashboard_body=body,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.dashboard_name = self.dashboard.dashboard_name
        self.register_outputs({"dashboard_name": self.dashboard_name})
