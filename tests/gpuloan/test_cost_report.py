"""`gpuloan cost-report` end to end against moto's Cost Explorer, served over HTTP.

moto tracks no cost: every dollar figure below is TEST-SUPPLIED. The tests post canned GetCostAndUsage answers
to moto's `/moto-api/static/ce/cost-and-usage-results` queue (moto serves them in order, one per distinct request
body, so a second page, whose request carries NextPageToken, gets the next canned answer). What is tested is
our request, pagination, grouping, arithmetic, messages and exit codes, not AWS's numbers.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pricing import checks

import boto3
import pytest
import requests

from gpuloan import cli, cost_report
from stacks.spend import budgets
from table_checks import split_figures, too_wide_at
from conftest import resolved_prices

TODAY = dt.date(2026, 8, 15)


def group(pool: str, tier: str, usd: float) -> dict:
    return {
        "Keys": [f"gpuloan:pool${pool}", f"gpuloan:tier${tier}"],
        "Metrics": {"AmortizedCost": {"Amount": f"{usd:.10f}", "Unit": "USD"}},
    }


def page(groups: list[dict], token: str | None = None, start="2026-07-01", end="2026-08-01", estimated=False) -> dict:
    result = {
        "ResultsByTime": [
            {"TimePeriod": {"Start": start, "End": end}, "Total": {}, "Groups": groups, "Estimated": estimated}
        ],
        "DimensionValueAttributes": [],
    }
    if token:
        result["NextPageToken"] = token
    return result


def supply(endpoint: str, *pages: dict) -> None:
    """Queue test-supplied Cost Explorer answers in the emulator."""
    resp = requests.post(
        f"{endpoint}/moto-api/static/ce/cost-and-usage-results", json={"results": list(pages)}, timeout=10
    )
    assert resp.status_code == 201


@pytest.fixture
def ce(aws_env):
    return boto3.client("ce", region_name="us-east-1")


@pytest.fixture
def in_repo(monkeypatch):
    from conftest import REPO

    monkeypatch.chdir(REPO)


def run_cli(argv, ce_client, capsys):
    args = cli.build_parser().parse_args(argv)
    code = args.func(args, ce=ce_client) if args.func.__module__ == "gpuloan.commands.cost_report" else args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


# --- pure parts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, start, end, partial",
    [
        ("2026-07", dt.date(2026, 7, 1), dt.date(2026, 8, 1), False),
        ("2025-12", dt.date(2025, 12, 1), dt.date(2026, 1, 1), False),  # year rollover
        ("2026-08", dt.date(2026, 8, 1), dt.date(2026, 8, 16), True),  # running month: up to today inclusive
    ],
)
def test_month_periods(text, start, end, partial):
    p = cost_report.parse_month(text, today=TODAY)
    assert (p.start, p.end, p.partial) == (start, end, partial)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("2026-13", "YYYY-MM"),
        ("July", "YYYY-MM"),
        ("2026-7", "YYYY-MM"),
        ("2026-09", "has not started yet"),
    ],
)
def test_bad_months_are_rejected(text, fragment):
    with pytest.raises(cost_report.CostReportError, match=fragment):
        cost_report.parse_month(text, today=TODAY)


def test_request_groups_by_pool_and_tier_and_filters_the_environment():
    req = cost_report.request("prod", cost_report.parse_month("2026-07", TODAY), "tok")
    assert req["GroupBy"] == [{"Type": "TAG", "Key": "gpuloan:pool"}, {"Type": "TAG", "Key": "gpuloan:tier"}]
    assert req["Filter"]["Tags"] == {"Key": "gpuloan:environment", "Values": ["prod"], "MatchOptions": ["EQUALS"]}
    assert req["TimePeriod"] == {"Start": "2026-07-01", "End": "2026-08-01"}
    assert req["NextPageToken"] == "tok" and req["Metrics"] == [budgets.COST_METRIC] == ["AmortizedCost"]


# --- against the emulator ----------------------------------------------------------------------------------


def test_report_per_pool_with_pagination(ce, aws_env, in_repo, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(cost_report, "_today", lambda: TODAY)
    # Test-supplied figures, two pages: the second page repeats training/elastic (must be summed).
    supply(
        aws_env,
        page(
            [
                group("training", "guaranteed", 23_500.0),
                group("training", "elastic", 9_000.25),
                group("inference", "guaranteed", 2_700.0),
            ],
            token="page-2",
        ),
        page(
            [
                group("training", "elastic", 1_000.0),
                group("inference", "elastic", 400.5),
                group("", "platform", 1_234.0),
                group("", "", 66.0),
            ]
        ),
    )
    out_csv = tmp_path / "report.csv"
    code, out, err = run_cli(
        ["cost-report", "--month", "2026-07", "--stack", "prod", "--csv", str(out_csv)], ce, capsys
    )
    assert code == 0, err
    assert "environment prod, 2026-07" in out
    rows = {r["pool"]: r for r in csv.DictReader(out_csv.open())}
    assert list(rows) == ["training", "inference", "research", "(no pool tag)", "total"]
    assert rows["training"]["guaranteed_usd"] == "23500.00"
    assert rows["training"]["elastic_usd"] == "10000.25"  # 9000.25 (page 1) + 1000 (page 2)
    assert rows["training"]["total_usd"] == "33500.25"
    assert rows["training"]["budget_usd"] == "60000.00"  # Pulumi.prod.yaml
    assert rows["training"]["pct_of_budget"] == "55.8"
    assert rows["inference"]["total_usd"] == "3100.50" and rows["inference"]["pct_of_budget"] == "38.8"
    assert rows["(no pool tag)"]["total_usd"] == "1300.00" and rows["(no pool tag)"]["budget_usd"] == ""
    assert rows["total"]["total_usd"] == "37900.75" and rows["total"]["budget_usd"] == "75000.00"
    assert "33,500.25" in out and "55.8%" in out


def test_empty_month_says_so(ce, aws_env, in_repo, capsys, monkeypatch):
    monkeypatch.setattr(cost_report, "_today", lambda: TODAY)
    # Nothing queued: moto answers with no results, as Cost Explorer does for a month without tagged spend.
    code, out, err = run_cli(["cost-report", "--month", "2026-06", "--stack", "dev"], ce, capsys)
    assert code == 0, err
    assert "No spend tagged gpuloan:environment=dev in 2026-06" in out
    assert "not active yet" in out


def test_pool_tag_not_yet_active(ce, aws_env, in_repo, capsys, monkeypatch):
    monkeypatch.setattr(cost_report, "_today", lambda: TODAY)
    # Test-supplied: all spend arrives without a pool value, as when gpuloan:pool is not an active cost tag.
    supply(aws_env, page([group("", "", 812.40)]))
    code, out, _ = run_cli(["cost-report", "--month", "2026-07", "--stack", "dev"], ce, capsys)
    assert code == 0
    assert "None of the 2026-07 spend carries a gpuloan:pool value" in out
    assert "(no pool tag)" in out and "812.40" in out


def test_running_month_is_marked_month_to_date_and_estimated(ce, aws_env, in_repo, capsys, monkeypatch):
    monkeypatch.setattr(cost_report, "_today", lambda: TODAY)
    supply(
        aws_env, page([group("research", "guaranteed", 100.0)], start="2026-08-01", end="2026-08-16", estimated=True)
    )
    code, out, _ = run_cli(["cost-report", "--month", "2026-08", "--stack", "dev"], ce, capsys)
    assert code == 0
    assert "month to date (up to 2026-08-15)" in out and "estimated" in out


def test_request_reaches_the_emulator_with_our_filter(ce, aws_env, monkeypatch):
    """moto keys canned answers by request body: the same request gets the same answer, another one does not."""
    period = cost_report.parse_month("2026-07", TODAY)
    supply(aws_env, page([group("research", "elastic", 5.0)]))
    first = cost_report.fetch(ce, "dev", period)
    again = cost_report.fetch(ce, "dev", period)
    other_env = cost_report.fetch(ce, "prod", period)
    assert first.amounts == again.amounts == {("research", "elastic"): 5.0}
    assert other_env.amounts == {}


def test_bad_month_and_missing_stack_exit_2(ce, aws_env, in_repo, capsys):
    code, _, err = run_cli(["cost-report", "--month", "07/2026", "--stack", "dev"], ce, capsys)
    assert code == 2 and "YYYY-MM" in err
    code, _, err = run_cli(["cost-report", "--month", "2026-07", "--stack", "staging"], ce, capsys)
    assert code == 2 and "no stack file" in err and "dev" in err


def test_cost_explorer_refusal_exits_3(in_repo, capsys):
    from botocore.stub import Stubber

    client = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        stub.add_client_error(
            "get_cost_and_usage", service_error_code="AccessDeniedException", service_message="User is not authorized"
        )
        code, _, err = run_cli(["cost-report", "--month", "2025-01", "--stack", "dev"], client, capsys)
    assert code == 3
    assert "AccessDeniedException" in err and "ce:GetCostAndUsage" in err


def test_inactive_tags_reported_when_the_api_says_so():
    cfg_period = cost_report.parse_month("2026-07", TODAY)
    from conftest import stack_config

    cfg = checks.from_stack_yaml({"config": stack_config("dev")}, "dev", prices=resolved_prices())
    fetched = cost_report.Fetched({("research", "elastic"): 10.0}, pages=1, estimated=False)
    report = cost_report.build_report(
        cfg,
        cfg_period,
        fetched,
        {
            "gpuloan:environment": "Active",
            "gpuloan:pool": "Inactive",
            "gpuloan:team": "Active",
            "gpuloan:tier": "missing",
        },
    )
    assert any("not active: gpuloan:pool, gpuloan:tier" in m for m in report.messages)


def test_unknown_pool_gets_its_own_row_without_budget():
    from conftest import stack_config

    cfg = checks.from_stack_yaml({"config": stack_config("dev")}, "dev", prices=resolved_prices())
    fetched = cost_report.Fetched({("research", "elastic"): 10.0, ("old-pool", "elastic"): 7.0}, 1, False)
    report = cost_report.build_report(cfg, cost_report.parse_month("2026-07", TODAY), fetched)
    old = next(r for r in report.rows if r.pool == "old-pool")
    assert old.budget_usd is None and "not in the stack config" in old.note
    assert report.total.total_usd == pytest.approx(17.0)
    json.dumps([r.__dict__ for r in report.all_rows])  # plain data, serialisable


def test_first_day_of_a_month_still_has_start_before_end():
    # Cost Explorer rejects Start == End ("Start date should be before end date"), a classic 1st-of-month bug.
    p = cost_report.parse_month("2026-08", today=dt.date(2026, 8, 1))
    assert p.start < p.end == dt.date(2026, 8, 2)


def test_the_installed_command_end_to_end(aws_env, tmp_path):
    """The real entry point (`gpuloan cost-report`, its own boto3 client) in a subprocess against the emulator."""
    import subprocess

    from aws_emulator import emulator_env
    from conftest import GPULOAN, REPO

    supply(aws_env, page([group("research", "guaranteed", 580.0), group("research", "elastic", 120.5)]))
    out_csv = tmp_path / "dev.csv"
    result = subprocess.run(
        [*GPULOAN, "cost-report", "--month", "2026-07", "--stack", "dev", "--csv", str(out_csv)],
        cwd=REPO,
        env=emulator_env(aws_env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = {r["pool"]: r for r in csv.DictReader(out_csv.open())}
    assert rows["research"]["total_usd"] == "700.50"  # test-supplied 580 + 120.50
    assert rows["total"]["budget_usd"] == "2500.00" and rows["total"]["pct_of_budget"] == "28.0"


def test_json_output_and_an_80_column_table(ce, aws_env, in_repo, capsys, monkeypatch):
    monkeypatch.setattr(cost_report, "_today", lambda: TODAY)
    monkeypatch.setenv("COLUMNS", "80")
    groups = [
        group("training", "guaranteed", 23_500.0),
        group("training", "elastic", 10_000.25),
        group("inference", "guaranteed", 2_700.0),
        group("", "platform", 1_234.0),
    ]
    supply(aws_env, page(groups))
    code, out, err = run_cli(["cost-report", "--month", "2026-07", "-s", "prod", "--json"], ce, capsys)
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["pool"]: r for r in doc["rows"]}
    assert doc["month"] == "2026-07" and doc["environment"] == "prod"
    assert rows["training"]["total_usd"] == 33500.25 and rows["training"]["pct_of_budget"] == 55.8
    supply(aws_env, page(groups))
    code, out, err = run_cli(["cost-report", "--month", "2026-07", "-s", "prod"], ce, capsys)
    assert code == 0, err
    assert "33,500.25" in out  # a figure is never split across lines
    assert [line for line in out.splitlines() if len(line) > 80] == []  # the notes wrap too


@pytest.mark.parametrize("width", [80, 200])
def test_table_fits_the_terminal_and_never_splits_a_figure(width, ce, aws_env, in_repo, capsys, monkeypatch):
    # the table test every command's table passes (tests/gpuloan/test_cli.py), with a partial month's notes under it
    monkeypatch.setattr(cost_report, "_today", lambda: TODAY)
    monkeypatch.setenv("COLUMNS", str(width))
    groups = [
        group("training", "guaranteed", 123_500.0),
        group("training", "elastic", 1_010_000.25),
        group("inference", "guaranteed", 2_700.0),
        group("", "platform", 1_234.0),
        group("ghost", "elastic", 9.5),
    ]
    supply(aws_env, page(groups, start="2026-08-01", end="2026-08-16", estimated=True))
    code, out, err = run_cli(["cost-report", "--month", "2026-08", "-s", "prod"], ce, capsys)
    assert code == 0, err
    assert "1,133,500.25" in out  # the widest figure, whole
    assert too_wide_at(out, width) == [] and split_figures(out) == []
