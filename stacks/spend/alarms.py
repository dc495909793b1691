"""CloudWatch alarms of one environment, all sending to the alerts topic.

Every alarm reads a metric that is actually published: the policy function's EMF metrics (namespace and names
from policy/metric_names.py, the single source the Lambda publishes from) or Container Insights' GPU metrics
(namespace/metric from the `policy` config, the same ones the policy function reads). The Lambda's own
Errors/Throttles alarms live with the function (stacks/policy_function/function.py).

| alarm            | per             | fires when                                                             |
|------------------|-----------------|------------------------------------------------------------------------|
| idle-waste       | elastic pool    | elastic nodes up while the elastic GPUs stay under `alarms.idle_utilization_pct` for `alarms.idle_hours` |
| saturation       | pool            | at the elastic max with GPUs still pending (guaranteed-only: floor >= 95 % busy) for `alarms.saturation_minutes` |
| fallback-too-long| spot+on-demand pool | on-demand fallback in use for `alarms.fallback_minutes`             |
| gpu-metrics-missing | environment  | no GPU utilization samples from the cluster for 15 minutes (missing data = breaching) |
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from policy import metric_names as m
from config.config import ElasticCapacity, GpuLoanConfig, Pool

SATURATED_FLOOR_UTILIZATION_PCT = 95.0
MISSING_METRICS_MINUTES = 15
MAX_ALARM_WINDOW_MINUTES = 24 * 60  # CloudWatch: evaluation periods x period <= one day

# The Capacity dimension values the policy publishes ElasticNodes with, per elastic capacity mode.
CAPACITY_DIMENSIONS = {
    ElasticCapacity.spot: ("spot",),
    ElasticCapacity.on_demand: ("on_demand",),
    ElasticCapacity.spot_then_on_demand: ("spot", "on_demand"),
}


def alarm_window(window_minutes: int, schedule_minutes: int) -> tuple[int, int]:
    """(period_s, evaluation_periods) covering `window_minutes`; a period never shorter than the policy's
    schedule, or ticks that publish less often than the period would read as gaps."""
    period_minutes = max(5, schedule_minutes)
    periods = max(1, math.ceil(window_minutes / period_minutes))
    periods = min(periods, MAX_ALARM_WINDOW_MINUTES // period_minutes)
    return period_minutes * 60, periods


@dataclass(frozen=True)
class Query:
    """One metric or expression of a metric-math alarm (plain data; the component turns it into args)."""

    id: str
    namespace: str = ""
    metric_name: str = ""
    dimensions: dict[str, Any] = field(default_factory=dict)
    stat: str = ""
    expression: str = ""
    label: str = ""

    @property
    def is_expression(self) -> bool:
        return bool(self.expression)


@dataclass(frozen=True)
class AlarmSpec:
    key: str  # resource-name suffix, e.g. "training-idle-waste"
    alarm_name: str
    description: str
    comparison: str
    threshold: float
    period_s: int
    evaluation_periods: int
    treat_missing_data: str
    queries: tuple[Query, ...]  # one plain metric, or metrics + one expression that returns data

    @property
    def metrics(self) -> list[Query]:
        return [q for q in self.queries if not q.is_expression]


def _pool_dims(env: str, pool: str, **extra: str) -> dict[str, str]:
    return {m.DIM_ENVIRONMENT: env, m.DIM_POOL: pool, **extra}


def _node_queries(env: str, pool: Pool, stat: str) -> tuple[list[Query], str]:
    """ElasticNodes per capacity dimension and the expression summing them (FILL: a capacity with no
    datapoint in a period counts as 0 nodes, not as a gap)."""
    assert pool.elastic is not None, "only pools with elastic capacity have node alarms"
    queries = [
        Query(f"nodes_{cap}", m.NAMESPACE, m.ELASTIC_NODES, _pool_dims(env, pool.name, **{m.DIM_CAPACITY: cap}), stat)
        for cap in CAPACITY_DIMENSIONS[pool.elastic.capacity]
    ]
    return queries, " + ".join(f"FILL({q.id}, 0)" for q in queries)


def pool_alarm_specs(cfg: GpuLoanConfig, pool: Pool) -> list[AlarmSpec]:
    env, a, schedule = cfg.environment, cfg.alarms, cfg.policy.schedule_minutes
    prefix = f"gpuloan-{env}-{pool.name}"
    specs: list[AlarmSpec] = []
    if pool.elastic is not None:
        period, periods = alarm_window(a.idle_hours * 60, schedule)
        nodes, nodes_sum = _node_queries(env, pool, "Minimum")
        util = Query(
            "util",
            m.NAMESPACE,
            m.POOL_GPU_UTILIZATION,
            _pool_dims(env, pool.name, **{m.DIM_TIER: "elastic"}),
            "Average",
        )
        specs.append(
            AlarmSpec(
                key=f"{pool.name}-idle-waste",
                alarm_name=f"{prefix}-idle-waste",
                description=(
                    f"Pool {pool.name} ({env}): elastic GPU nodes stayed up for {a.idle_hours} h while their "
                    f"utilization was under {a.idle_utilization_pct:g} %. Money is spent on idle GPUs: check "
                    "the policy function's idle reclaim (dry_run?) and idle_timeout_minutes."
                ),
                comparison="GreaterThanOrEqualToThreshold",
                threshold=1,
                period_s=period,
                evaluation_periods=periods,
                # No data means no elastic nodes or no policy ticks; the missing-metrics alarm covers the latter.
                treat_missing_data="notBreaching",
                queries=(
                    *nodes,
                    util,
                    Query(
                        "idle",
                        expression=f"IF(({nodes_sum}) > 0 AND util < {a.idle_utilization_pct:g}, 1, 0)",
                        label="elastic nodes up and idle",
                    ),
                ),
            )
        )
        period, periods = alarm_window(a.saturation_minutes, schedule)
        nodes, nodes_sum = _node_queries(env, pool, "Maximum")
        # ElasticMaxNodes is spot max + on-demand max, but on-demand only stands in for missing spot: a pool whose
        # spot group is full (elastic.max_nodes) is at its max too, with the fallback group empty.
        at_max = f"({nodes_sum}) >= max_nodes"
        if "spot" in CAPACITY_DIMENSIONS[pool.elastic.capacity]:
            at_max = f"({at_max} OR FILL(nodes_spot, 0) >= {pool.elastic.max_nodes})"
        specs.append(
            AlarmSpec(
                key=f"{pool.name}-saturation",
                alarm_name=f"{prefix}-saturation",
                description=(
                    f"Pool {pool.name} ({env}): at its elastic max with GPU pods still pending for "
                    f"{a.saturation_minutes} min; demand is going unmet. Raise elastic.max_nodes (and the "
                    "budget), or check for a budget cap or missing spot capacity."
                ),
                comparison="GreaterThanOrEqualToThreshold",
                threshold=1,
                period_s=period,
                evaluation_periods=periods,
                treat_missing_data="notBreaching",
                queries=(
                    *nodes,
                    Query("max_nodes", m.NAMESPACE, m.ELASTIC_MAX_NODES, _pool_dims(env, pool.name), "Maximum"),
                    Query("pending", m.NAMESPACE, m.PENDING_GPUS, _pool_dims(env, pool.name), "Minimum"),
                    Query(
                        "saturated",
                        expression=f"IF({at_max} AND FILL(pending, 0) > 0, 1, 0)",
                        label="at elastic max with GPUs pending",
                    ),
                ),
            )
        )
        if pool.elastic.capacity == ElasticCapacity.spot_then_on_demand:
            period, periods = alarm_window(a.fallback_minutes, schedule)
            specs.append(
                AlarmSpec(
                    key=f"{pool.name}-fallback-too-long",
                    alarm_name=f"{prefix}-fallback-too-long",
                    description=(
                        f"Pool {pool.name} ({env}): on-demand fallback has been in use for "
                        f"{a.fallback_minutes} min (spot capacity unavailable). On-demand costs several times "
                        "spot: add instance types or AZs to elastic.instance_types, or accept the cost."
                    ),
                    comparison="GreaterThanOrEqualToThreshold",
                    threshold=1,
                    period_s=period,
                    evaluation_periods=periods,
                    treat_missing_data="notBreaching",
                    queries=(Query("fallback", m.NAMESPACE, m.FALLBACK_ACTIVE, _pool_dims(env, pool.name), "Minimum"),),
                )
            )
    elif pool.guaranteed is not None:
        period, periods = alarm_window(a.saturation_minutes, schedule)
        specs.append(
            AlarmSpec(
                key=f"{pool.name}-saturation",
                alarm_name=f"{prefix}-saturation",
                description=(
                    f"Pool {pool.name} ({env}) has no elastic capacity and its guaranteed GPUs were over "
                    f"{SATURATED_FLOOR_UTILIZATION_PCT:g} % busy for {a.saturation_minutes} min; demand may be "
                    "going unmet. Add elastic capacity or more guaranteed nodes."
                ),
                comparison="GreaterThanOrEqualToThreshold",
                threshold=SATURATED_FLOOR_UTILIZATION_PCT,
                period_s=period,
                evaluation_periods=periods,
                treat_missing_data="notBreaching",
                queries=(
                    Query(
                        "util",
                        m.NAMESPACE,
                        m.POOL_GPU_UTILIZATION,
                        _pool_dims(env, pool.name, **{m.DIM_TIER: "guaranteed"}),
                        "Average",
                    ),
                ),
            )
        )
    return specs


def missing_metrics_spec(cfg: GpuLoanConfig, cluster_name: pulumi.Input[str]) -> AlarmSpec | None:
    """Without GPU metrics the policy treats every node as busy (never shrinks): safe, but it stops reclaiming
    idle GPUs and the budget burns. Only where a guaranteed floor exists: with no floor, zero GPU nodes (and so
    no samples) is a normal state, not a fault."""
    if not any(p.guaranteed for p in cfg.pools):
        return None
    period, periods = 300, MISSING_METRICS_MINUTES // 5
    return AlarmSpec(
        key="gpu-metrics-missing",
        alarm_name=f"gpuloan-{cfg.environment}-gpu-metrics-missing",
        description=(
            f"No {cfg.policy.utilization_metric} samples from the cluster ({cfg.policy.metric_namespace}) "
            f"for {MISSING_METRICS_MINUTES} min, although guaranteed GPU nodes should be up. The policy "
            "treats missing data as busy and stops idle reclaim. Check the amazon-cloudwatch-observability "
            "add-on pods and the GPU nodes."
        ),
        comparison="LessThanThreshold",
        threshold=1,
        period_s=period,
        evaluation_periods=periods,
        treat_missing_data="breaching",
        queries=(
            Query(
                "samples",
                cfg.policy.metric_namespace,
                cfg.policy.utilization_metric,
                {"ClusterName": cluster_name},
                "SampleCount",
            ),
        ),
    )


def alarm_specs(cfg: GpuLoanConfig, cluster_name: pulumi.Input[str]) -> list[AlarmSpec]:
    specs = [s for pool in cfg.pools for s in pool_alarm_specs(cfg, pool)]
    missing = missing_metrics_spec(cfg, cluster_name)
    return specs + ([missing] if missing else [])


def _metric_query_args(q: Query, period_s: int, returns: bool) -> aws.cloudwatch.MetricAlarmMetricQueryArgs:
    if q.is_expression:
        return aws.cloudwatch.MetricAlarmMetricQueryArgs(
            id=q.id, expression=q.expression, label=q.label or None, return_data=True
        )
    return aws.cloudwatch.MetricAlarmMetricQueryArgs(
        id=q.id,
        return_data=returns,
        metric=aws.cloudwatch.MetricAlarmMetricQueryMetricArgs(
            namespace=q.namespace, metric_name=q.metric_name, dimensions=q.dimensions, stat=q.stat, period=period_s
        ),
    )


@dataclass(frozen=True)
class AlarmsArgs:
    specs: tuple[AlarmSpec, ...]
    topic_arn: pulumi.Input[str]

    @staticmethod
    def from_config(cfg: GpuLoanConfig, cluster_name: pulumi.Input[str], topic_arn: pulumi.Input[str]) -> AlarmsArgs:
        """The pools' alarms on the cluster `cluster_name`, notifying the alerts topic `topic_arn`."""
        return AlarmsArgs(tuple(alarm_specs(cfg, cluster_name)), topic_arn)


class Alarms(pulumi.ComponentResource):
    alarm_arns: pulumi.Output[list[str]]

    def __init__(self, name: str, args: AlarmsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:alarms:Alarms", name, None, opts)
        self.alarms: dict[str, aws.cloudwatch.MetricAlarm] = {}
        for spec in args.specs:
            common = dict(
                name=spec.alarm_name,
                alarm_description=spec.description,
                comparison_operator=spec.comparison,
                threshold=spec.threshold,
                evaluation_periods=spec.evaluation_periods,
                datapoints_to_alarm=spec.evaluation_periods,
                treat_missing_data=spec.treat_missing_data,
                alarm_actions=[args.topic_arn],
                ok_actions=[args.topic_arn],  # "resolved" mails close the loop for whoever is on call
                opts=pulumi.ResourceOptions(parent=self),
            )
            if len(spec.queries) == 1:
                q = spec.queries[0]
                alarm = aws.cloudwatch.MetricAlarm(
                    f"{name}-{spec.key}",
                    namespace=q.namespace,
                    metric_name=q.metric_name,
                    dimensions=q.dimensions,
                    statistic=q.stat,
                    period=spec.period_s,
                    **common,
                )
            else:
                alarm = aws.cloudwatch.MetricAlarm(
                    f"{name}-{spec.key}",
                    metric_queries=[_metric_query_args(q, spec.period_s, returns=False) for q in spec.queries],
                    **common,
                )
            self.alarms[spec.alarm_name] = alarm
        self.alarm_arns = pulumi.Output.all(*[a.arn for a in self.alarms.values()]).apply(list)
        self.register_outputs({"alarm_arns": self.alarm_arns})
