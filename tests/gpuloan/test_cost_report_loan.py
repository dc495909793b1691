"""`gpuloan cost-report` with the loan: floor hours another pool used (LoanGpus, published by the policy function)
move from the owner's bill to the borrower's, against moto's CloudWatch and Cost Explorer over HTTP.

Every dollar of Cost Explorer is TEST-SUPPLIED (moto tracks no cost); the LoanGpus samples are put as the policy
function's EMF lines would land (one value per tick, given here as each day's statistic set)."""

from __future__ import annotations

import csv
import datetime as dt
import json

import boto3
import pytest

from gpuloan import cost_report, loan_bill
from policy import metric_names as M
from test_cost_report import group, page, run_cli, supply
from conftest import resolved_prices

TODAY = dt.date(2026, 8, 15)
TICKS_PER_DAY = 1440  # Pulumi.prod.yaml: policy.schedule_minutes 1
TRAINING_FLOOR = "gpuloan-prod-training-floor"


@pytest.fixture
def in_repo(monkeypatch):
    from conftest import REPO

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(cost_report, "_today", lambda: TODAY)


def put_day(
    cw, pool: str, use: str, day: int, mean_gpus: float, samples: int = TICKS_PER_DAY, flavor: str = TRAINING_FLOOR
) -> None:
    dims = {M.DIM_ENVIRONMENT: "prod", M.DIM_POOL: pool, M.DIM_USE: use, M.DIM_FLAVOR: flavor}
    cw.put_metric_data(
        Namespace=M.NAMESPACE,
        MetricData=[
            {
                "MetricName": M.LOAN_GPUS,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()],
                "Timestamp": dt.datetime(2026, 7, day, 12, tzinfo=dt.timezone.utc),
                "Unit": "Count",
                "StatisticValues": {"SampleCount": samples, "Sum": mean_gpus * samples, "Minimum": 0, "Maximum": 16},
            }
        ],
    )


CE_PAGE = [
    group("training", "guaranteed", 20_000.0),
    group("training", "elastic", 1_500.0),
    group("research", "elastic", 3_000.0),
    group("inference", "guaranteed", 2_700.0),
    group("", "platform", 1_234.56),
]


def test_the_borrower_pays_the_owner_is_credited_and_the_totals_reconcile_to_the_cent(
    aws_env, in_repo, capsys, tmp_path
):
    ce, cw = boto3.client("ce", region_name="us-east-1"), boto3.client("cloudwatch", region_name="us-east-1")
    for day in range(1, 32):
        if day == 20:
            continue  # the policy function published nothing that day
        put_day(cw, "training", "own_floor", day, 10.0)
        put_day(cw, "inference", "own_floor", day, 1.0, flavor="gpuloan-prod-inference-floor")
        # research borrows 4 GPUs on average; on the 9th only 720 of 1440 ticks reached CloudWatch
        put_day(cw, "research", "borrowed", day, 4.0, samples=720 if day == 9 else TICKS_PER_DAY)
    supply(aws_env, page(CE_PAGE))
    daily_csv, plot = tmp_path / "daily.csv", tmp_path / "loan.png"
    code, out, err = run_cli(
        [
            "cost-report",
            "--month",
            "2026-07",
            "-s",
            "prod",
            "--json",
            "--daily-csv",
            str(daily_csv),
            "--plot",
            str(plot),
        ],
        ce,
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    loan = doc["loan"]
    pools = {p["pool"]: p for p in loan["pools"]}
    rate = loan_bill.floor_rates(resolved_prices(), cost_report_cfg())["training"]
    assert loan["rates_usd_per_gpu_hour"]["training"] == round(rate, 6)
    # 30 days with samples, 4 GPUs x 24 h each (the 9th's half of the ticks still average 4)
    assert pools["research"]["borrowed_gpu_hours"] == 30 * 96
    assert pools["training"]["lent_gpu_hours"] == 30 * 96
    assert pools["training"]["own_floor_gpu_hours"] == 30 * 240
    day_usd = round(96 * rate, 2)  # each day's transfer, rounded once
    assert pools["research"]["borrowed_cost_usd"] == round(30 * day_usd, 2)
    assert pools["training"]["lent_credit_usd"] == pools["research"]["borrowed_cost_usd"]
    # the owner keeps the idle floor: 16 GPUs x 31 days x 24 h less its own use and what it lent
    assert pools["training"]["idle_floor_gpu_hours"] == 16 * 31 * 24 - 30 * 240 - 30 * 96
    assert pools["research"]["total_after_loan_usd"] == round(3_000.0 + 30 * day_usd, 2)
    assert pools["training"]["total_after_loan_usd"] == round(21_500.0 - 30 * day_usd, 2)
    # reconciles with Cost Explorer's bill to the cent
    named = [p for p in loan["pools"] if p["pool"] != "total"]
    total_cents = sum(round(p["total_after_loan_usd"] * 100) for p in named)
    assert total_cents == round(sum(p["total_usd"] for p in named) * 100) == round(28_434.56 * 100)
    assert pools["total"]["total_after_loan_usd"] == 28_434.56
    # which days are estimated and from what; which have no figures
    assert loan["missing_days"] == ["2026-07-20"]
    assert [d["day"] for d in loan["estimated_days"]] == ["2026-07-09"]
    assert "720 of 1440 ticks" in loan["estimated_days"][0]["from"]
    assert any("no LoanGpus samples on 2026-07-20" in m for m in doc["messages"])
    # per team and day
    rows = list(csv.DictReader(daily_csv.open()))
    research = [r for r in rows if r["pool"] == "research"]
    assert len(research) == 30 and {r["borrowed_cost_usd"] for r in research} == {f"{day_usd}"}
    assert next(r for r in research if r["day"] == "2026-07-09")["estimated"].startswith("720 of 1440")
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"


def cost_report_cfg():
    import yaml

    from conftest import REPO
    from config import config

    return config.from_stack_yaml(yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "Pulumi.prod.yaml")


def test_the_table_shows_the_loan_within_80_columns(aws_env, in_repo, capsys, monkeypatch):
    from table_checks import split_figures, too_wide_at

    monkeypatch.setenv("COLUMNS", "80")
    ce, cw = boto3.client("ce", region_name="us-east-1"), boto3.client("cloudwatch", region_name="us-east-1")
    for day in range(1, 32):
        put_day(cw, "training", "own_floor", day, 10.0)
        put_day(cw, "inference", "own_floor", day, 1.0, flavor="gpuloan-prod-inference-floor")
        put_day(cw, "research", "borrowed", day, 4.0)
    supply(aws_env, page(CE_PAGE))
    code, out, err = run_cli(["cost-report", "--month", "2026-07", "-s", "prod"], ce, capsys)
    assert code == 0, err
    assert "the loan: floors used by other pools" in out
    rate = loan_bill.floor_rates(resolved_prices(), cost_report_cfg())["training"]
    assert f"{31 * round(96 * rate, 2):,.2f}" in out  # research's charge and training's credit
    assert too_wide_at(out, 80) == [] and split_figures(out) == []
    assert "estimated" not in out and "no LoanGpus" not in out


def test_no_metrics_at_all_charges_nothing_and_says_so(aws_env, in_repo, capsys):
    ce = boto3.client("ce", region_name="us-east-1")
    supply(aws_env, page(CE_PAGE))
    code, out, err = run_cli(["cost-report", "--month", "2026-07", "-s", "prod", "--json"], ce, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert all(p["borrowed_cost_usd"] == 0 and p["lent_credit_usd"] == 0 for p in doc["loan"]["pools"])
    assert any("no LoanGpus samples on 2026-07-01 to 2026-07-31" in m for m in doc["messages"])
    assert {p["pool"]: p["total_after_loan_usd"] for p in doc["loan"]["pools"]}["total"] == 28_434.56


def test_cloudwatch_refusing_leaves_the_loan_out_and_the_bill_stands(aws_env, in_repo, capsys):
    from botocore.exceptions import ClientError

    class Refusing:
        def get_metric_data(self, **kwargs):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetMetricData")

    ce = boto3.client("ce", region_name="us-east-1")
    supply(aws_env, page(CE_PAGE))
    args = (
        __import__("gpuloan.cli", fromlist=["build_parser"])
        .build_parser()
        .parse_args(["cost-report", "--month", "2026-07", "-s", "prod", "--json"])
    )
    assert args.func(args, ce=ce, cloudwatch=Refusing()) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["loan"] is None
    assert "the loan is left out: CloudWatch refused GetMetricData: AccessDenied" in captured.err
