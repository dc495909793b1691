"""A pool's own demand history read back from CloudWatch (GetMetricData on the moto server): the metrics the
policy publishes (policy/metric_names.py) become a minute series the advisor sizes the floor from."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from conftest import requires_shared_prices, stack_config, resolved_prices

from gpuloan import cli
from advise import demand_history
from policy import metric_names as M
from pricing import checks

NOW = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0)


def _cfg():
    return checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=resolved_prices())


def _put(cw, name: str, value: float, minute: dt.datetime, **dims) -> None:
    dimensions = [{"Name": M.DIM_ENVIRONMENT, "Value": "prod"}, {"Name": M.DIM_POOL, "Value": "training"}]
    dimensions += [{"Name": k, "Value": v} for k, v in dims.items()]
    cw.put_metric_data(
        Namespace=M.NAMESPACE,
        MetricData=[
            {"MetricName": name, "Dimensions": dimensions, "Timestamp": minute, "Value": value, "Unit": "Count"}
        ],
    )


def test_period_follows_cloudwatch_retention():
    assert demand_history.period_seconds(15) == 60
    assert demand_history.period_seconds(30) == 300
    assert demand_history.period_seconds(90) == 3600


def test_demand_is_pending_plus_elastic_plus_the_floors_busy_share():
    start = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    at = lambda m: start + dt.timedelta(minutes=m)  # noqa: E731
    data = {
        "pending": {at(0): 4.0},
        "spot": {at(0): 2.0, at(1): 1.0},
        "ondemand": {at(1): 1.0},
        "floorutil": {at(0): 50.0, at(1): 100.0},
    }
    series, gaps = demand_history.demand_series(data, start, 3, 60, gpus_per_node=8, floor_gpus=16)
    # minute 0: 4 pending + 2 spot nodes x 8 + 16 floor GPUs x 50 %; minute 1: 2 elastic nodes x 8 + 16; minute 2: none
    assert series == [4 + 16 + 8, 16 + 16, 0] and gaps == 1


def test_five_minute_points_hold_for_their_five_minutes():
    start = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    series, gaps = demand_history.demand_series({"pending": {start: 3.0}}, start, 10, 300, 8, 0)
    assert series == [3] * 5 + [0] * 5 and gaps == 5


def test_history_read_from_cloudwatch_on_the_emulator(aws_env):
    cw = boto3.client("cloudwatch", region_name="us-east-1")
    first = NOW - dt.timedelta(minutes=30)
    for m in range(10):
        minute = first + dt.timedelta(minutes=m)
        _put(cw, M.PENDING_GPUS, 8 if m < 5 else 0, minute)
        _put(cw, M.ELASTIC_NODES, 1 if m >= 5 else 0, minute, **{M.DIM_CAPACITY: "spot"})
        _put(cw, M.POOL_GPU_UTILIZATION, 50, minute, **{M.DIM_TIER: "guaranteed"})
    # another pool's metrics must not leak in
    cw.put_metric_data(
        Namespace=M.NAMESPACE,
        MetricData=[
            {
                "MetricName": M.PENDING_GPUS,
                "Timestamp": first,
                "Value": 999,
                "Dimensions": [
                    {"Name": M.DIM_ENVIRONMENT, "Value": "prod"},
                    {"Name": M.DIM_POOL, "Value": "inference"},
                ],
            }
        ],
    )
    trace = demand_history.read(resolved_prices(), _cfg(), "training", 1, cloudwatch=cw, now=NOW)
    assert len(trace.gpus_demanded) == 1440
    window = trace.gpus_demanded[-30:-20]
    # floor: 2 p4d x 8 GPUs at 50 % = 8; first 5 minutes 8 pending, then one 8-GPU spot node
    assert list(window) == [16] * 10
    assert max(trace.gpus_demanded) == 16
    assert "history of prod/training, 1 days" in trace.name and "minutes without data" in trace.name


def test_no_history_is_a_clear_error(aws_env):
    cw = boto3.client("cloudwatch", region_name="us-east-1")
    with pytest.raises(demand_history.HistoryError, match="has no gpuloan metrics for environment prod, pool training"):
        demand_history.read(resolved_prices(), _cfg(), "training", 1, cloudwatch=cw, now=NOW)


@requires_shared_prices
def test_advise_without_a_trace_reads_the_history(aws_env, capsys, monkeypatch):
    from conftest import REPO

    cw = boto3.client("cloudwatch", region_name="us-east-1")
    for m in range(60):
        _put(cw, M.PENDING_GPUS, 16, NOW - dt.timedelta(minutes=60 - m))
    monkeypatch.chdir(REPO)
    assert cli.main(["advise", "-s", "prod", "--pool", "training", "--history-days", "1", "--json"]) == 0
    out = capsys.readouterr().out
    assert "history of prod/training" in out and '"recommendation"' in out


@requires_shared_prices
def test_advise_org_without_demand_reads_every_pools_history(aws_env, capsys, monkeypatch):
    from conftest import REPO

    cw = boto3.client("cloudwatch", region_name="us-east-1")
    for pool in ("training", "inference", "research"):
        data = [
            {
                "MetricName": M.PENDING_GPUS,
                "Timestamp": NOW - dt.timedelta(hours=h, minutes=5),
                "Value": 8.0,
                "Unit": "Count",
                "Dimensions": [{"Name": M.DIM_ENVIRONMENT, "Value": "prod"}, {"Name": M.DIM_POOL, "Value": pool}],
            }
            for h in range(47)
        ]
        cw.put_metric_data(Namespace=M.NAMESPACE, MetricData=data)
    monkeypatch.chdir(REPO)
    assert (
        cli.main(
            [
                "advise",
                "-s",
                "prod",
                "--org",
                "--history-days",
                "2",
                "--sizing-days",
                "1",
                "--lookback-days",
                "7",
                "--json",
            ]
        )
        == 0
    )
    doc = __import__("json").loads(capsys.readouterr().out)
    assert doc["demand"]["training"].startswith("history of prod/training, 2 days")
    assert doc["demand"]["inference"].startswith("history of prod/inference, 2 days")
    assert doc["demand"]["research"].startswith("history of prod/research, 2 days")
    assert doc["sizing_window_hours"] == 24 and doc["report_window_hours"] == 24


@requires_shared_prices
def test_advise_org_without_history_exits_3(aws_env, capsys, monkeypatch):
    from conftest import REPO

    monkeypatch.chdir(REPO)
    assert cli.main(["advise", "-s", "prod", "--org", "--history-days", "2"]) == 3
    assert "has no gpuloan metrics for environment prod" in capsys.readouterr().err
