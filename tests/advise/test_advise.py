"""`gpuloan advise`: cost vs floor size per payment, simulated by the real policy; the recommendation meets the
service target; production work's interruptions are violations; JSON, plot, and the CLI on a series and an ITP
trace."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import SHARED_TRACES, requires_shared_prices, requires_shared_traces, stack_config, resolved_prices

from gpuloan import cli
from advise import advisor
from sim.engine import SimSettings
from sim.traces import SeriesTrace
from pricing import checks
from config import config
from pricing.sources import floor_pricing

pytestmark = requires_shared_prices

DAYS = 3
# Spot reclaimed often enough that a 3-day run interrupts work on spot (the Advisor rate of p4d would rarely
# interrupt anything in 3 days).
STORMY = replace(SimSettings(), spot_interruptions_per_month=60, spot_unavailable_episodes_per_week=0)


def _prod(**training) -> config.GpuLoanConfig:
    data = stack_config("prod")
    data["gpuloan:pools"][0].update(training)
    return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


def _steady(gpus: int, days: int = DAYS) -> SeriesTrace:
    return SeriesTrace(f"steady {gpus} GPUs", tuple([gpus] * (days * 1440)))


def _rate(payment: str) -> float:
    return floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", payment).usd_per_hour


def test_each_point_is_the_floor_at_each_rate_plus_the_simulated_elastic_part():
    doc = advisor.advise(resolved_prices(), _prod(), "training", _steady(16), settings=STORMY, sizes=[0, 1, 2, 3])
    assert [p["floor_nodes"] for p in doc["points"]] == [0, 1, 2, 3]
    assert set(doc["rates"]) == {"on_demand", "reserved_1yr", "reserved_3yr", "capacity_block"}
    assert "savings_plan" in doc["no_rate"]  # no public Savings Plans data: not priced, not guessed
    for p in doc["points"]:
        for payment, usd in p["monthly_usd"].items():
            assert usd == pytest.approx(p["floor_nodes"] * _rate(payment) * 730 + p["elastic_monthly_usd"], abs=0.02)
    # a floor that covers the steady demand leaves the elastic part little to do (the first minutes, while the
    # floor's nodes boot, the policy borrows)
    assert doc["points"][2]["elastic_monthly_usd"] < doc["points"][0]["elastic_monthly_usd"] / 4


def test_production_work_on_spot_is_a_violation_so_the_floor_covers_it():
    doc = advisor.advise(resolved_prices(), _prod(), "training", _steady(16), settings=STORMY, sizes=[0, 1, 2, 3])
    assert doc["production_share"] == 1.0  # tier production
    zero = doc["points"][0]
    assert zero["jobs_interrupted"] > 0 and zero["production_interruptions_per_month"] > 0 and not zero["meets_target"]
    rec = doc["recommendation"]
    # the cheapest way to run 16 GPUs around the clock without interruptions: 2 nodes at the lowest committed rate
    assert (rec["floor_nodes"], rec["payment"]) == (2, "reserved_3yr")
    assert rec["monthly_usd"] == pytest.approx(
        2 * _rate("reserved_3yr") * 730 + doc["points"][2]["elastic_monthly_usd"], abs=0.02
    )


def test_work_that_may_be_interrupted_stays_on_spot():
    doc = advisor.advise(
        resolved_prices(), _prod(), "training", _steady(16), settings=STORMY, sizes=[0, 1, 2, 3], production_share_pct=0
    )
    assert doc["points"][0]["production_interruptions_per_month"] == 0
    # spot p4d costs less per hour than any commitment: no floor
    assert doc["recommendation"]["floor_nodes"] == 0


def test_service_target_from_config_and_no_recommendation_when_nothing_meets_it():
    cfg = _prod(service_target={"production_interruptions_per_month": 0, "production_share_pct": 50})
    # only the floor-less point, whose production work runs on a stormy spot market
    doc = advisor.advise(resolved_prices(), cfg, "training", _steady(16), settings=STORMY, sizes=[0])
    assert doc["production_share"] == 0.5 and doc["recommendation"] is None
    assert doc["points"][0]["production_interruptions_per_month"] == pytest.approx(
        doc["points"][0]["jobs_interrupted"] * 0.5 * 43800 / (DAYS * 1440), abs=0.01
    )
    assert "no floor from 0 to 8 nodes meets the target" in doc["summary"]


def test_break_even_in_words():
    words = advisor.break_even_words("p4d.24xlarge", "reserved_1yr", 13.5171, 21.957642, 4.55)
    assert words.startswith(
        "a reserved_1yr p4d.24xlarge at $13.52/h pays for itself when it is busy more than 62 % "
        "of the hours (against on-demand at $21.96/h)"
    )
    assert "against spot at $4.55/h it never does" in words


def test_busy_share_of_each_floor_node():
    # 8 GPUs per node; demand of 0, 8, 16, 20 GPUs for a quarter of the time each
    assert advisor.busy_share_by_node([0, 8, 16, 20], 8, 4) == [0.75, 0.5, 0.25, 0.0]


def test_floor_sizes_are_capped_and_include_the_peak():
    assert advisor.floor_sizes(8) == list(range(9))
    big = advisor.floor_sizes(100)
    assert big[0] == 0 and big[-1] == 100 and len(big) <= advisor.MAX_POINTS + 1


def test_cli_on_a_series_file_prints_json_and_writes_the_plot(tmp_path, monkeypatch, capsys):
    from conftest import REPO

    series = tmp_path / "demand.csv"
    series.write_text("minute,gpus_demanded\n" + "".join(f"{m},{16 if m % 1440 < 720 else 8}\n" for m in range(1440)))
    png = tmp_path / "advice.png"
    monkeypatch.chdir(REPO)
    assert (
        cli.main(
            [
                "advise",
                "-s",
                "prod",
                "--pool",
                "training",
                "--series",
                str(series),
                "--json",
                "--plot",
                str(png),
                "--target-p95-wait",
                "60",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    [pool] = doc["pools"]
    assert [p["floor_nodes"] for p in pool["points"]] == list(range(9))
    assert pool["target"]["p95_wait_minutes"] == 60 and pool["recommendation"] is not None
    assert pool["current"] == {"floor_nodes": 2, "payment": "reserved_1yr"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_rejects_a_job_trace_given_as_series(tmp_path, monkeypatch, capsys):
    from conftest import REPO

    jobs = tmp_path / "jobs.csv"
    jobs.write_text("submit_s,duration_s,gpus\n0,600,8\n")
    monkeypatch.chdir(REPO)
    assert cli.main(["advise", "-s", "prod", "--series", str(jobs)]) == 2
    assert "not a minute,gpus_demanded file" in capsys.readouterr().err


@requires_shared_traces
def test_cli_on_an_itp_cluster_prints_a_recommendation_and_a_plot(tmp_path, monkeypatch, capsys):
    from conftest import REPO

    png = tmp_path / "itp.png"
    monkeypatch.chdir(REPO)
    assert (
        cli.main(
            [
                "advise",
                "-s",
                "prod",
                "--pool",
                "training",
                "--trace",
                str(SHARED_TRACES / "itp" / "cluster02.csv"),
                "--days",
                "0:1",
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())  # the prose wraps at the terminal's width
    assert "cheapest meeting the target" in out or "no floor from 0" in out
    assert "pays for itself when it is busy more than 62 % of the hours" in out
    assert png.is_file()


def test_parallel_sweep_gives_the_same_points():
    one = advisor.advise(resolved_prices(), _prod(), "training", _steady(16, days=1), settings=STORMY, sizes=[0, 1, 2])
    two = advisor.advise(
        resolved_prices(), _prod(), "training", _steady(16, days=1), settings=STORMY, sizes=[0, 1, 2], jobs=2
    )
    assert one["points"] == two["points"] and one["recommendation"] == two["recommendation"]
