"""CloudWatch Embedded Metric Format: metrics as JSON log lines (no PutMetricData call, no extra IAM).

Every metric named in policy/metric_names.py is published here, with the dimension sets listed there.
"""

from __future__ import annotations

import json
from datetime import datetime

from policy import metric_names as M
from policy.model import PoolDecision
from policy.terms import Capacity


def line(dimensions: dict[str, str], metrics: dict[str, tuple[float, str]], now: datetime) -> str:
    """One EMF document: `metrics` maps name -> (value, unit)."""
    doc = {
        "_aws": {
            "Timestamp": int(now.timestamp() * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": M.NAMESPACE,
                    "Dimensions": [sorted(dimensions)],
                    "Metrics": [{"Name": name, "Unit": unit} for name, (_, unit) in sorted(metrics.items())],
                }
            ],
        },
        **dimensions,
        **{name: value for name, (value, _) in metrics.items()},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def pool_lines(
    environment: str,
    decision: PoolDecision,
    capacity_of: dict[str, Capacity],
    elastic_max_nodes: int,
    estimated_elastic_usd: float | None,
    now: datetime,
) -> list[str]:
    """The per-pool metrics of one tick."""
    base = {M.DIM_ENVIRONMENT: environment, M.DIM_POOL: decision.pool}
    metrics: dict[str, tuple[float, str]] = {
        M.ELASTIC_MAX_NODES: (elastic_max_nodes, "Count"),
        M.FALLBACK_ACTIVE: (1 if decision.fallback_active else 0, "Count"),
    }
    if decision.pending_gpus is not None:
        metrics[M.PENDING_GPUS] = (decision.pending_gpus, "Count")
    if estimated_elastic_usd is not None:
        metrics[M.ESTIMATED_ELASTIC_SPEND_USD] = (round(estimated_elastic_usd, 4), "None")
    if decision.month_to_date_usd is not None:
        metrics[M.MONTH_TO_DATE_SPEND_USD] = (round(decision.month_to_date_usd, 4), "None")
    out = [line(base, metrics, now)]
    by_capacity: dict[Capacity, int] = {}
    for group, n in decision.desired_after.items():
        cap = capacity_of.get(group, Capacity.spot)
        by_capacity[cap] = by_capacity.get(cap, 0) + n
    for cap, n in sorted(by_capacity.items()):
        out.append(line({**base, M.DIM_CAPACITY: cap}, {M.ELASTIC_NODES: (n, "Count")}, now))
    counts: dict[str, int] = {}
    for a in decision.actions:
        counts[a.reason.value] = counts.get(a.reason.value, 0) + 1
    for reason, n in sorted(counts.items()):
        out.append(line({**base, M.DIM_REASON: reason}, {M.DECISIONS: (n, "Count")}, now))
    for tier, util in sorted(decision.utilization_pct.items()):
        out.append(line({**base, M.DIM_TIER: tier}, {M.POOL_GPU_UTILIZATION: (round(util, 2), "Percent")}, now))
    return out


def error_line(environment: str, errors: int, now: datetime) -> str:
    return line({M.DIM_ENVIRONMENT: environment}, {M.POLICY_ERRORS: (errors, "Count")}, now)
