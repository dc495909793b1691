"""A pool's own demand history, from the metrics its policy function publishes (policy/metric_names.py), read
back with CloudWatch GetMetricData: the demand `gpuloan advise` sizes the floor from when no trace is given.

GPUs demanded in a minute are estimated as

    PendingGpus + sum over capacities of ElasticNodes x GPUs per node + floor GPUs x PoolGpuUtilization[guaranteed] / 100

- pending GPUs are demand that found no GPU;
- elastic nodes exist only while they are wanted (the policy reclaims idle and empty nodes after their timeouts),
  so the elastic GPUs count as demanded; this over-states demand by the timeouts' tail;
- the floor is always up, so only its busy share counts: this under-states demand when pods hold GPUs without
  using them (the utilization metric measures activity, not allocation).
docs/floor.md says so next to the advice. Minutes without any datapoint (the policy did not run) are counted and
treated as no demand.

CloudWatch keeps 1-minute datapoints for 15 days, 5-minute ones for 63 days, then hourly: a window reaching past
15 days is read at 5 minutes (each value held for its 5 minutes), past 63 at one hour.
"""

from __future__ import annotations

import datetime as dt
import math

from policy import metric_names as M
from pricing.sources.catalog import Prices
from sim.traces import SeriesTrace


class HistoryError(Exception):
    """The history could not be read (no credentials, an API error) or holds no data."""


def period_seconds(days: int) -> int:
    """The finest period CloudWatch still holds for the oldest point of a window of `days` days."""
    if days <= 15:
        return 60
    if days <= 63:
        return 300
    return 3600


def queries(environment: str, pool: str, period: int) -> list[dict]:
    def q(qid: str, name: str, extra: dict[str, str]) -> dict:
        dims = [{"Name": M.DIM_ENVIRONMENT, "Value": environment}, {"Name": M.DIM_POOL, "Value": pool}]
        dims += [{"Name": k, "Value": v} for k, v in extra.items()]
        return {
            "Id": qid,
            "ReturnData": True,
            "MetricStat": {
                "Metric": {"Namespace": M.NAMESPACE, "MetricName": name, "Dimensions": dims},
                "Period": period,
                "Stat": "Average",
            },
        }

    return [
        q("pending", M.PENDING_GPUS, {}),
        q("spot", M.ELASTIC_NODES, {M.DIM_CAPACITY: "spot"}),
        q("ondemand", M.ELASTIC_NODES, {M.DIM_CAPACITY: "on_demand"}),
        q("floorutil", M.POOL_GPU_UTILIZATION, {M.DIM_TIER: "guaranteed"}),
    ]


def fetch(cloudwatch, qs: list[dict], start: dt.datetime, end: dt.datetime) -> dict[str, dict[dt.datetime, float]]:
    """Query id -> {timestamp: value}, following NextToken."""
    out: dict[str, dict[dt.datetime, float]] = {q["Id"]: {} for q in qs}
    token = None
    while True:
        kwargs = {"MetricDataQueries": qs, "StartTime": start, "EndTime": end, "ScanBy": "TimestampAscending"}
        if token:
            kwargs["NextToken"] = token
        page = cloudwatch.get_metric_data(**kwargs)
        for r in page.get("MetricDataResults", []):
            for t, v in zip(r.get("Timestamps", []), r.get("Values", [])):
                out[r["Id"]][t.astimezone(dt.timezone.utc)] = float(v)
        token = page.get("NextToken")
        if not token:
            return out


def demand_series(
    data: dict[str, dict[dt.datetime, float]],
    start: dt.datetime,
    minutes: int,
    period: int,
    gpus_per_node: int,
    floor_gpus: int,
) -> tuple[list[int], int]:
    """GPUs demanded per minute from `start`, and the minutes without any datapoint."""
    step = period // 60
    slots = math.ceil(minutes / step)
    per_slot: list[float | None] = [None] * slots
    for qid, points in data.items():
        for t, v in points.items():
            k = int((t - start).total_seconds() // period)
            if not 0 <= k < slots:
                continue
            if qid == "pending":
                add = v
            elif qid in ("spot", "ondemand"):
                add = v * gpus_per_node
            else:
                add = floor_gpus * max(0.0, min(100.0, v)) / 100
            per_slot[k] = (per_slot[k] or 0.0) + add
    series, gaps = [], 0
    for k in range(slots):
        value = per_slot[k]
        if value is None:
            gaps += step
        series += [int(round(value or 0.0))] * step
    return series[:minutes], min(gaps, minutes)


def read(
    prices: Prices, cfg, pool_name: str, days: int, cloudwatch=None, now: dt.datetime | None = None
) -> SeriesTrace:
    """The last `days` days of the pool's demand as a minute series. `cloudwatch`: an injected boto3 client
    (default: one built for the stack's region from the usual credentials)."""

    pool = cfg.pool(pool_name)
    gpn = prices.lookup((pool.elastic.instance_types[0] if pool.elastic else pool.guaranteed.instance_type)).gpus
    floor_gpus = pool.guaranteed.nodes * prices.lookup(pool.guaranteed.instance_type).gpus if pool.guaranteed else 0
    period = period_seconds(days)
    end = (now or dt.datetime.now(dt.timezone.utc)).replace(second=0, microsecond=0)
    end -= dt.timedelta(seconds=end.timestamp() % period)  # whole periods only
    start = end - dt.timedelta(days=days)
    if cloudwatch is None:
        cloudwatch = _client(cfg.region)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        data = fetch(cloudwatch, queries(cfg.environment, pool_name, period), start, end)
    except (BotoCoreError, ClientError) as err:  # credentials, throttling, access denied
        raise HistoryError(
            f"cannot read the pool's history from CloudWatch (GetMetricData in {cfg.region}): "
            f"{err}; or give the demand with --trace/--series"
        ) from None
    if not any(data.values()):
        raise HistoryError(
            f"CloudWatch has no {M.NAMESPACE} metrics for environment {cfg.environment}, pool "
            f"{pool_name} in the last {days} days (is the policy function deployed and running?); "
            "give the demand with --trace/--series"
        )
    minutes = days * 1440
    series, gaps = demand_series(data, start, minutes, period, gpn, floor_gpus)
    note = f", {gaps} minutes without data" if gaps else ""
    return SeriesTrace(
        f"history of {cfg.environment}/{pool_name}, {days} days to {end:%Y-%m-%d %H:%M} UTC at "
        f"{period // 60}-minute resolution{note}",
        tuple(series),
    )


def _client(region: str):
    import boto3

    return boto3.client("cloudwatch", region_name=region)
