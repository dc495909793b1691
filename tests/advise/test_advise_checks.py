"""Advice that passes a sanity check before it is printed (issue 37, item 1): production interruptions only
where Kueue lets production work run on spot (one rule, config/scheduling.py spot_allowed), no floor node the
demand never needs unless the target forces it, the monthly cost against the pool and environment budgets (over
either flagged), jobs larger than the pool counted with their sizes, a dominated recommendation called so, and
the organization advice never showing karpenter+savings-plan dearer than karpenter. The `vision` stack of the
issue is tests/advise/Pulumi.vision.yaml."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import yaml
from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces, stack_config, resolved_prices

from gpuloan import cli
from advise import advisor, org_advisor
from sim import environment
from sim.engine import SimSettings
from sim.traces import Job, JobsTrace, SeriesTrace, read_trace
from pricing import checks
from config import config, scheduling

VISION = Path(__file__).parent / "Pulumi.vision.yaml"
STORMY = replace(SimSettings(), spot_interruptions_per_month=60, spot_unavailable_episodes_per_week=0)


def _vision(**changes) -> config.GpuLoanConfig:
    data = yaml.safe_load(VISION.read_text())["config"]
    data.update(changes)
    return checks.from_stack_yaml({"config": data}, "vision", prices=resolved_prices())


def _point(n, usd, p95=5.0, unmet=0.0, misses=()):
    return {
        "floor_nodes": n,
        "monthly_usd": {"on_demand": usd},
        "p95_wait_minutes": p95,
        "unmet_gpu_hours": unmet,
        "misses": list(misses),
        "meets_target": not misses,
    }


def test_one_rule_says_where_production_work_may_run_on_spot():
    assert advisor.production_work_on_spot is scheduling.production_work_on_spot
    assert environment.production_work_on_spot is scheduling.production_work_on_spot


@requires_shared_prices
def test_production_work_kept_off_spot_is_never_counted_as_interrupted():
    demand = SeriesTrace("steady 2 GPUs", tuple([2] * (3 * 1440)))
    off = advisor.advise(
        resolved_prices(), _vision(), "vision", demand, settings=STORMY, sizes=[0, 1], production_share_pct=30
    )
    assert off["production_on_spot"] is False
    assert all(p["production_interruptions_per_month"] == 0 for p in off["points"])
    listed = _vision(**{"gpuloan:scheduling": {"kueue": {"production_spot_pools": ["vision"]}}})
    on = advisor.advise(
        resolved_prices(), listed, "vision", demand, settings=STORMY, sizes=[0, 1], production_share_pct=30
    )
    assert on["production_on_spot"] is True
    zero = on["points"][0]
    assert zero["jobs_interrupted"] > 0 and zero["production_interruptions_per_month"] > 0


@requires_shared_prices
def test_all_production_work_off_spot_is_simulated_on_the_floor_and_on_demand():
    demand = SeriesTrace("steady 2 GPUs", tuple([2] * (2 * 1440)))
    doc = advisor.advise(
        resolved_prices(), _vision(), "vision", demand, settings=STORMY, sizes=[0]
    )  # tier production: share 100 %
    assert doc["elastic"]["capacity"] == "on_demand"
    assert doc["points"][0]["elastic_spot_monthly_usd"] == 0 and doc["points"][0]["jobs_interrupted"] == 0


def test_no_floor_node_the_demand_never_needs_unless_the_target_forces_it():
    busy = [1.0, 0.5, 0.001]  # the third node is needed 0.1 % of the time
    # the third node's point is cheapest (say its rate undercuts the elastic hours it saves), a smaller one meets
    points = [_point(0, 900, misses=["p95 wait 90 min > 30"]), _point(2, 800), _point(3, 700)]
    assert advisor.choose(points, busy) == (2, "on_demand", 800)
    # only the third node's point meets the target: it is forced
    points = [_point(0, 900, misses=["x"]), _point(2, 800, misses=["unmet 2.00 % > 1 %"]), _point(3, 700)]
    assert advisor.choose(points, busy) == (3, "on_demand", 700)


def test_a_dearer_recommendation_no_better_than_another_point_is_dominated():
    rec = _point(2, 800, p95=5.0, unmet=1.0)
    cheap_but_worse = _point(1, 500, p95=9.0, unmet=1.0, misses=["p95"])
    cheap_no_worse = _point(0, 600, p95=5.0, unmet=0.5, misses=["3.0 production interruptions/month > 0"])
    out = advisor.dominated_by(rec, 800, [cheap_no_worse, cheap_but_worse, rec], [1.0, 1.0])
    assert out == [{"floor_nodes": 0, "monthly_usd": 600, "misses": cheap_no_worse["misses"]}]


def test_budget_lines_flag_a_recommendation_over_either_budget():
    lines = advisor.budget_lines(63_564, 60_000, 75_000)
    assert [x["over"] for x in lines] == [True, False]
    assert lines[0]["text"] == "OVER the pool budget: $63,564/month is $3,564 above $60,000"
    assert lines[1]["text"] == "$63,564/month against the environment budget $75,000: 85 %"
    assert advisor.budget_lines(100, None, None)[0]["text"] == "$100/month against the pool budget: none set"


@requires_shared_prices
def test_jobs_larger_than_the_pool_are_counted_with_their_sizes():
    jobs = JobsTrace(
        "big jobs",
        "generic",
        (Job("a", 0, 3600, 1), Job("b", 60, 3600, 16), Job("c", 120, 600, 16), Job("d", 180, 600, 32)),
    )
    doc = advisor.advise(resolved_prices(), _vision(), "vision", jobs, sizes=[0])
    assert doc["peak_nodes"] == 8  # floor 2 + elastic 6 one-GPU nodes
    assert doc["jobs_larger_than_pool"] == {"count": 3, "of_jobs": 4, "pool_peak_gpus": 8, "sizes": {"16": 2, "32": 1}}


def _vision_project(tmp_path: Path) -> Path:
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(VISION, tmp_path / "Pulumi.vision.yaml")
    return tmp_path


@requires_shared_prices
@requires_shared_traces
def test_the_vision_case_of_the_issue(tmp_path, monkeypatch, capsys):
    """`advise -s vision --trace cluster09.csv --days 0:13 --production-share 30 --peak-from-demand` recommended
    115 x g6e.xlarge on-demand for $156,233/month, driven by spot interruptions Kueue prevents for this pool, with no
    word of the $6,000 environment budget and nothing printed for minutes. The floor sizes are a few of the sweep's
    (the whole sweep takes minutes on a shared machine): none, today's 2, and the peak."""
    cfg = _vision()
    trace = read_trace(str(SHARED_TRACES / "itp" / "cluster09.csv")).window(0, 13)
    doc = advisor.advise(
        resolved_prices(), cfg, "vision", trace, production_share_pct=30, peak_from_demand=True, sizes=[0, 2, 115]
    )
    assert doc["peak_nodes"] >= 115
    assert all(p["production_interruptions_per_month"] == 0 for p in doc["points"])
    rec = doc["recommendation"]
    assert rec["floor_nodes"] < 115 and rec["monthly_usd"] < 60_000
    # what the issue's floor-0 point costs is still far over the environment's $6,000: said on its own line
    assert rec["over_environment_budget"] and rec["over_budget"] and not rec["over_pool_budget"]
    assert any(x["over"] and x["scope"] == "environment" for x in doc["budget_lines"])
    assert "over the environment budget" in doc["verdict"]
    # the text output: the budget line, and progress on stderr while it runs (one short day of the trace)
    monkeypatch.chdir(_vision_project(tmp_path))
    assert (
        cli.main(
            [
                "advise",
                "-s",
                "vision",
                "--trace",
                str(SHARED_TRACES / "itp" / "cluster09.csv"),
                "--days",
                "0:0",
                "--production-share",
                "30",
                "--peak-from-demand",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    out = " ".join(captured.out.split())
    assert "against the pool budget: none set" in out and "OVER the environment budget: $" in out
    assert "production work stays off spot" in out and "verdict: " in out
    assert "advise: pool vision: floor size 1/" in captured.err


@requires_shared_prices
def test_text_output_states_the_prod_budgets_and_json_flags_them(monkeypatch, capsys):
    series = SeriesTrace("steady", tuple([16] * 1440))
    cfg = checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=resolved_prices())
    doc = advisor.advise(resolved_prices(), cfg, "training", series, sizes=[2])
    rec = doc["recommendation"]
    assert rec["pool_budget_monthly_usd"] == 60_000 and rec["environment_budget_monthly_usd"] == 75_000
    assert [x["scope"] for x in doc["budget_lines"]] == ["pool", "environment"]
    assert rec["over_pool_budget"] == (rec["monthly_usd"] > 60_000)


@requires_shared_prices
def test_org_advice_never_shows_a_plan_dearer_than_none_nor_an_empty_scenario(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    args = [
        "advise",
        "-s",
        "prod",
        "--demand",
        "docs/examples/org-demand",
        "--sizing-days",
        "3",
        "--lookback-days",
        "7",
        "--production-share",
        "30",
    ]
    assert cli.main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for sc in [{"baselines": doc["baselines"], "shortage_hours": 1}, *doc["scenarios"].values()]:
        cost = {b["name"]: b["total_cost_usd"] for b in sc["baselines"]}
        assert cost["karpenter+savings-plan"] <= cost["karpenter"]
    for b in doc["baselines"]:
        if b["name"].endswith("+savings-plan") and "plan_not_bought" in b:  # a plan that saves nothing: none bought
            assert b["commitment_ri_count"] == 0 and b["plan_not_bought"]["would_cost_usd_more"] > 0
    empty = [n for n, sc in doc["scenarios"].items() if sc["shortage_hours"] == 0]
    assert empty == ["spot-shortage"]  # the report window of this example has no spot shortage hour
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "scenario spot-shortage (" not in out  # no table for it
    assert "scenario spot-shortage: no shortage hours in the report window" in " ".join(out.split())
    assert "verdict: " in out


def test_org_verdict_calls_a_guarantee_dominated_only_where_it_is_in_every_scenario():
    assert org_advisor.verdict({"default": ["karpenter"], "on-demand-shortage": ["karpenter"]}).startswith(
        "dominated by karpenter: cheaper"
    )
    some = org_advisor.verdict({"default": ["karpenter"], "on-demand-shortage": []})
    assert some.startswith("dominated where capacity is not short") and "does better in: on-demand-shortage" in some
    assert org_advisor.verdict({"default": []}).startswith("not dominated")
    ours = {
        "name": "gpuloan",
        "total_cost_usd": 100,
        "unmet_gpu_hours": 5,
        "unmet_production_gpu_hours": 1,
        "production_interruptions": 0,
        "pending_by_tier": {"production": {"p95_pending_minutes": 5.0}},
    }
    k = dict(ours, name="karpenter", total_cost_usd=50, unmet_gpu_hours=9)  # cheaper, more unmet: not dominating
    assert org_advisor.dominated_by(ours, [k]) == []
    k2 = dict(ours, name="karpenter", total_cost_usd=50, pending_by_tier={"production": {"p95_pending_minutes": 4.0}})
    assert org_advisor.dominated_by(ours, [k2]) == ["karpenter"]


def test_the_simulated_org_example_of_the_issue_is_dominated_by_karpenter():
    """`--model simulated` on docs/examples/org-demand: +108 % and 1,307 unmet GPU-h against Karpenter's 534 (its
    production p95 wait 1,744 min against 507), though 13 production GPU-h fewer go unmet."""
    ours = {
        "name": "gpuloan",
        "total_cost_usd": 5702.0,
        "unmet_gpu_hours": 1306.844,
        "unmet_production_gpu_hours": 250.724,
        "production_interruptions": 0,
        "pending_by_tier": {
            "experiment": {"p95_pending_minutes": 3520.8},
            "production": {"p95_pending_minutes": 1743.9},
        },
    }
    karpenter = {
        "name": "karpenter",
        "total_cost_usd": 2737.34,
        "unmet_gpu_hours": 534.003,
        "unmet_production_gpu_hours": 263.548,
        "production_interruptions": 0,
        "pending_by_tier": {
            "experiment": {"p95_pending_minutes": 3520.8},
            "production": {"p95_pending_minutes": 507.1},
        },
    }
    assert org_advisor.dominated_by(ours, [karpenter]) == ["karpenter"]
    assert org_advisor.verdict({"default": ["karpenter"], "on-demand-shortage": ["karpenter"]}).startswith(
        "dominated by karpenter: cheaper and no worse on unmet work, production interruptions and p95 waits"
    )


@requires_shared_prices
def test_simulate_names_the_sizes_of_jobs_larger_than_the_pool(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit_s,duration_s,gpus\n0,3600,8\n60,600,128\n120,600,128\n180,600,256\n")
    monkeypatch.chdir(REPO)
    args = ["simulate", "-s", "prod", "--pool", "training", "--trace", str(trace)]
    assert cli.main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["jobs_larger_than_pool"] == 3 and doc["jobs_larger_than_pool_sizes"] == {"128": 2, "256": 1}
    assert cli.main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "3 of 4 jobs need more GPUs than the pool's peak of 64 (2 x 128 GPUs, 1 x 256 GPUs)" in out
