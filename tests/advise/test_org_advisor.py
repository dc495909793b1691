"""The organization's advisor (issue 27, items 5-7): the environment's demand directory, the Cost-Explorer-style
commitment, the fluid model and its bound, no look-ahead, the JSON document and the CLI on a tiny environment.

Rates in the unit tests are round illustrative numbers (on-demand 10, spot 3, RI 6 per instance-hour); every
expected figure is worked out by hand in the test.
"""

from __future__ import annotations

import itertools
import json
import re
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import requires_shared_prices, resolved_prices

from gpuloan import cli
from pricing import checks
from pricing.cost_model import billing
from advise import commitment_choice, org_advisor
from sim import demand as simdemand
from sim import fluid
from sim.fluid import PoolPrices
from sim.demand import EXPERIMENT, LEARNING, PRODUCTION, PoolDemand

T, R = "p4d.24xlarge", "us-east-1"
OD, SPOT, RI = 10.0, 3.0, 6.0


def _prices(names, spot=SPOT):
    return {n: PoolPrices(T, R, 8, OD, spot) for n in names}


# --- the demand directory -----------------------------------------------------------------------------------------


def _series(path, values):
    path.write_text("minute,gpus_demanded\n" + "".join(f"{m},{v}\n" for m, v in enumerate(values)))


def test_demand_dir_names_the_missing_pool_the_extra_file_and_the_bad_line(tmp_path):
    _series(tmp_path / "training.csv", [8, 8])
    (tmp_path / "training.csv").write_text("minute,gpus_demanded\n0,8\n1,eight\n")
    _series(tmp_path / "typo.csv", [1])
    (tmp_path / "README.md").write_text("left alone")
    with pytest.raises(simdemand.OrgDemandError) as err:
        simdemand.read_demand_dir(tmp_path, ["training", "inference"])
    text = str(err.value)
    assert f"{tmp_path / 'inference.csv'}: missing: pool 'inference'" in text
    assert f"{tmp_path / 'typo.csv'}: no pool named 'typo'" in text
    assert f"{tmp_path / 'training.csv'}:3: gpus_demanded is 'eight'" in text
    assert "README" not in text
    assert len(err.value.problems) == 3


def test_demand_dir_reads_one_trace_per_pool(tmp_path):
    _series(tmp_path / "a.csv", [8, 16])
    (tmp_path / "b.csv").write_text("submit_s,duration_s,gpus\n0,3600,4\n")
    out = simdemand.read_demand_dir(tmp_path, ["a", "b"])
    assert out["a"].gpus_demanded == (8, 16) and out["b"].jobs[0].gpus == 4


def test_demand_dir_that_is_not_a_directory(tmp_path):
    with pytest.raises(simdemand.OrgDemandError, match="no such directory"):
        simdemand.read_demand_dir(tmp_path / "nope", ["a"])


def test_hourly_profile_splits_jobs_by_a_seeded_choice_and_spreads_them_over_hours():
    from sim.traces import Job, JobsTrace

    jobs = tuple(Job(f"j{i}", 1800, 3600, 8) for i in range(400))  # each: half of hour 0, half of hour 1
    trace = JobsTrace("t", "generic", jobs)
    p = simdemand.hourly_profile("t", PRODUCTION, trace, 3, 0.3, seed=1)
    total = [a + b for a, b in zip(p.production_gpus, p.interruptible_gpus)]
    assert total == pytest.approx([1600, 1600, 0])
    share = p.production_gpus[0] / total[0]
    assert 0.22 < share < 0.38  # 30 % of 400 jobs, by a hash
    assert simdemand.hourly_profile("t", PRODUCTION, trace, 3, 0.3, seed=1) == p  # deterministic
    assert simdemand.hourly_profile("t", PRODUCTION, trace, 3, 0.3, seed=2) != p  # seeded


def test_itp_rotations_name_each_cluster_once_with_three_production_four_experiment_three_learning():
    for r in range(len(simdemand.ROTATIONS)):
        tiers = simdemand.rotation_tiers(r)
        assert sorted(tiers) == list(simdemand.ITP_CLUSTERS)
        counts = {t: list(tiers.values()).count(t) for t in (PRODUCTION, EXPERIMENT, LEARNING)}
        assert counts == {PRODUCTION: 3, EXPERIMENT: 4, LEARNING: 3}
    productions = [set(r[PRODUCTION]) for r in simdemand.ROTATIONS]
    assert all(a != b for a, b in itertools.combinations(productions, 2))  # rotated


# --- the commitment choice ----------------------------------------------------------------------------------------


def _od_usage(series):
    return [billing.Usage(h, "p", T, R, billing.ON_DEMAND, x, OD) for h, x in enumerate(series) if x]


def _brute_force(usage, first, end):
    best = (0, 0.0)
    for n in range(0, 12):
        c = [commitment_choice.ri("x", T, R, n, RI)] if n else []
        lines = [
            billing.Usage(
                u.hour - first, u.pool, u.instance_type, u.region, u.purchase, u.instance_hours, u.usd_per_hour
            )
            for u in usage
            if first <= u.hour < end
        ]
        s = billing.bill(lines, c, hours=end - first).savings_usd
        if s > best[1] + 1e-9:
            best = (n, s)
    return best


@pytest.mark.parametrize(
    "series",
    [
        [4, 4, 4, 4, 0, 0],  # RI at 6 of 10 pays when used > 60 % of hours: 4 hours of 6 (67 %) -> 4 RIs
        [5, 3, 3, 1, 1, 0, 0, 2, 6, 3],
        [0.5, 2.5, 2.5, 2.5, 7, 0, 1, 3, 3, 3, 3, 2],
        [0, 0, 0],
    ],
)
def test_cost_explorer_choice_maximizes_savings_over_the_lookback(series):
    usage = _od_usage(series)
    purchase = len(series)
    choice = commitment_choice.cost_explorer(usage, {(T, R): RI}, purchase, lookback_days=7)
    n, saved = _brute_force(usage, 0, purchase)
    assert choice.counts.get(f"{T}@{R}", 0) == n
    assert choice.estimated_savings_usd == pytest.approx(saved)
    assert all(c.start_hour == purchase for c in choice.commitments)  # bought at the end of the window


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=9, allow_nan=False).map(lambda x: round(x, 2)), min_size=1, max_size=24)
)
def test_cost_explorer_choice_matches_brute_force_on_any_series(series):
    usage = _od_usage(series)
    choice = commitment_choice.cost_explorer(usage, {(T, R): RI}, len(series), lookback_days=7)
    n, saved = _brute_force(usage, 0, len(series))
    assert choice.estimated_savings_usd == pytest.approx(saved, abs=1e-6)
    assert choice.counts.get(f"{T}@{R}", 0) == n


def test_cost_explorer_reads_only_the_lookback_before_the_purchase_hour():
    # days 0-7 busy with 10 instances, day 8 idle, then 30 instances after the purchase hour
    hours = 24
    usage = _od_usage([10] * (7 * hours) + [0] * hours + [30] * hours)
    purchase = 8 * hours
    week = commitment_choice.cost_explorer(usage, {(T, R): RI}, purchase, lookback_days=7)
    # the 7 days before the purchase: hours 24-191 (10 instances for 6 days, 0 for the last): 6/7 = 86 % > 60 %
    assert week.window == (purchase - 7 * hours, purchase)
    assert week.counts[f"{T}@{R}"] == 10
    assert commitment_choice.cost_explorer(usage, {(T, R): RI}, hours, lookback_days=7).window == (0, hours)
    with pytest.raises(ValueError, match="7, 30, 60"):
        commitment_choice.cost_explorer(usage, {(T, R): RI}, purchase, lookback_days=14)


def test_spot_usage_is_never_counted_for_a_commitment():
    usage = [billing.Usage(h, "p", T, R, billing.SPOT, 5, SPOT) for h in range(10)]
    assert commitment_choice.hindsight(usage, {(T, R): RI}, 0, 10).commitments == ()


# --- the fluid model ----------------------------------------------------------------------------------------------


def _pd(name, tier, prod, other):
    return PoolDemand(name, tier, tuple(float(x) for x in prod), tuple(float(x) for x in other))


def test_fluid_floor_serves_production_first_and_lends_its_idle_gpus_to_other_pools():
    # hour 0: pool a (floor 2 nodes = 16 GPUs) needs 8 production GPUs; pool b needs 16 interruptible GPUs.
    demands = {"a": _pd("a", PRODUCTION, [8], [0]), "b": _pd("b", EXPERIMENT, [0], [16])}
    lent = fluid.run(demands, _prices(demands), {"a": 2}, lend=True)
    alone = fluid.run(demands, _prices(demands), {"a": 2}, lend=False)
    assert lent.pools["a"].floor_lent_gpu_hours == 8 and lent.pools["b"].borrowed_gpu_hours == 8
    # billed: a's floor 2 instance-hours reserved at 10; b: 8 GPUs on spot = 1 instance-hour at 3 when lent, 2 alone
    assert billing.bill(lent.hourly_usage).total_usd == pytest.approx(2 * 10 + 1 * 3)
    assert billing.bill(alone.hourly_usage).total_usd == pytest.approx(2 * 10 + 2 * 3)
    assert alone.pools["a"].floor_lent_gpu_hours == 0


def test_fluid_production_never_goes_to_spot_or_borrowed_floor():
    demands = {"a": _pd("a", PRODUCTION, [0], [0]), "b": _pd("b", EXPERIMENT, [16], [0])}
    run = fluid.run(demands, _prices(demands), {"a": 2}, lend=True)
    purchases = {(u.pool, u.purchase): u.instance_hours for u in run.hourly_usage}
    assert purchases == {("a", billing.RESERVED): 2, ("b", billing.ON_DEMAND): 2}


def test_fluid_on_demand_shortage_leaves_only_reserved_capacity_and_what_was_held():
    # hour 0 normal: a's production 24 GPUs (floor 16 + 8 on-demand), b 0 production. hour 1 short: a needs 32
    # (floor 16 + the 8 held), b needs 8 production with nothing held: all unmet.
    demands = {"a": _pd("a", PRODUCTION, [24, 32], [0, 0]), "b": _pd("b", EXPERIMENT, [0, 8], [0, 0])}
    sc = fluid.Scenario("od", on_demand_short_hours=frozenset({1}))
    run = fluid.run(demands, _prices(demands), {"a": 2}, lend=True, scenario=sc)
    assert run.pools["a"].unmet_production_gpu_hours == 8
    assert run.pools["b"].unmet_production_gpu_hours == 8
    assert run.pools["a"].unmet_guaranteed_production_gpu_hours == 0


def test_episode_hours_are_seeded():
    a = fluid.episode_hours(24 * 7 * 10, 1.0, 3.0, 1)
    assert a == fluid.episode_hours(24 * 7 * 10, 1.0, 3.0, 1) and a != fluid.episode_hours(24 * 7 * 10, 1.0, 3.0, 2)
    assert 5 < len(a) < 100
    assert fluid.episode_hours(100, 0, 3.0, 1) == frozenset()


# --- the advisor --------------------------------------------------------------------------------------------------


def _environment(hours=96, tail=None):
    """Pool a (production) with a daily cycle, pool b (experiment) busy by day; `tail` replaces everything after
    hour 48 of pool a (the report window) to test that it does not move the advice."""
    prod_a = [16 + 8 * ((h // 6) % 2) for h in range(hours)]
    other_a = [4 * ((h // 12) % 2) for h in range(hours)]
    other_b = [24 * ((h // 8) % 3 == 0) for h in range(hours)]
    prod_b = [8 * ((h // 4) % 2) for h in range(hours)]
    if tail is not None:
        prod_a = prod_a[:48] + [tail] * (hours - 48)
        other_b = other_b[:48] + [tail] * (hours - 48)
    return {"a": _pd("a", PRODUCTION, prod_a, other_a), "b": _pd("b", EXPERIMENT, prod_b, other_b)}


def _inputs(demands, pct=90.0):
    return org_advisor.OrgInputs(demands, _prices(demands), {(T, R): RI}, "test-term", 48, 7, pct)


def test_floors_are_the_percentile_of_production_demand_in_whole_nodes_for_production_pools_only():
    d = _environment()
    floors = org_advisor.size_floors({n: p.head(48) for n, p in d.items()}, _prices(d), 90)
    # pool a's production alternates 16 and 24 GPUs: p90 = 24 = 3 nodes; b is experiment: no floor
    assert floors == {"a": 3, "b": 0}
    assert org_advisor.size_floors({n: p.head(48) for n, p in d.items()}, _prices(d), 50) == {"a": 2, "b": 0}


def test_the_advice_does_not_look_past_the_sizing_window():
    runner = org_advisor.fluid_runner(_prices(_environment()))
    base = org_advisor.recommend(_inputs(_environment()), runner)
    for tail in (0, 200):
        changed = org_advisor.recommend(_inputs(_environment(tail=tail)), runner)
        assert changed[0] == base[0]
        assert changed[1].commitments == base[1].commitments
    # ... while the report does change with it (it is measured after the window)
    a = org_advisor.evaluate(_inputs(_environment()), runner, scenarios=("default",), per_pool_prices=False)
    b = org_advisor.evaluate(_inputs(_environment(tail=200)), runner, scenarios=("default",), per_pool_prices=False)
    assert a["recommendation"]["floors"] == b["recommendation"]["floors"]
    assert a["recommendation"]["report"]["total_cost_usd"] != b["recommendation"]["report"]["total_cost_usd"]


def test_fluid_bound_is_at_most_every_setups_fluid_cost_with_the_same_floors():
    runner = org_advisor.fluid_runner(_prices(_environment()))
    for pct in (50.0, 90.0):
        doc = org_advisor.evaluate(_inputs(_environment(), pct), runner, per_pool_prices=False)
        for sc in ["default", *doc["scenarios"]]:
            rows = (
                [doc["recommendation"]["report"], *doc["baselines"]]
                if sc == "default"
                else [doc["scenarios"][sc]["recommendation_report"], *doc["scenarios"][sc]["baselines"]]
            )
            by = {r["name"]: r for r in rows}
            bound = by["fluid-bound"]["total_cost_usd"]
            for name in ("gpuloan", "team-floors", "floors-not-lent"):
                assert bound <= by[name]["total_cost_usd"] + 1e-6, (pct, sc, name)
            assert by["fluid-bound"]["no_floor_total_cost_usd"] <= by["karpenter+savings-plan"]["total_cost_usd"] + 1e-6
            assert by["fluid-bound"]["no_floor_total_cost_usd"] <= by["karpenter"]["total_cost_usd"] + 1e-6


def test_team_floors_pay_per_team_and_lend_nothing():
    runner = org_advisor.fluid_runner(_prices(_environment()))
    doc = org_advisor.evaluate(_inputs(_environment()), runner, scenarios=("default",), per_pool_prices=False)
    by = {r["name"]: r for r in doc["baselines"]}
    assert by["team-floors"]["floor_utilization"]["lent"] == 0
    assert by["floors-not-lent"]["floor_utilization"]["lent"] == 0
    assert doc["recommendation"]["report"]["floor_utilization"]["lent"] > 0
    # each team's RIs are at least its floor (a floor is billed every hour, so each of its RIs pays)
    assert by["team-floors"]["commitment_ri_count"] >= doc["recommendation"]["floors"]["a"]["nodes"]


def test_json_document_has_the_issues_keys():
    runner = org_advisor.fluid_runner(_prices(_environment()))
    doc = org_advisor.evaluate(_inputs(_environment()), runner)
    assert doc["model"] == "fluid" and "not a simulation" in doc["model_note"].lower()
    assert set(doc["recommendation"]) >= {
        "floors",
        "commitment",
        "report",
        "price_of_guarantee_pct",
        "price_of_each_guarantee",
    }
    names = [b["name"] for b in doc["baselines"]]
    assert {"karpenter", "karpenter+savings-plan", "team-floors", "fluid-bound"} <= set(names)
    for b in [doc["recommendation"]["report"], *doc["baselines"]]:
        for key in (
            "total_cost_usd",
            "production_interruptions",
            "unmet_gpu_hours",
            "pending_by_tier",
            "floor_utilization",
            "commitment_utilization",
        ):
            assert key in b, (b["name"], key)
        assert set(b["pending_by_tier"]) == {PRODUCTION, EXPERIMENT}
        for tier in b["pending_by_tier"].values():
            assert set(tier) == {"p95_pending_minutes", "p99_pending_minutes", "max_pending_minutes"}
    assert doc["baselines"][1]["price_of_guarantee_pct"] == 0  # karpenter+savings-plan is the reference
    assert set(doc["scenarios"]) == {"spot-shortage", "on-demand-shortage"}
    json.dumps(doc)


def test_report_is_billed_on_the_report_window_only():
    d = _environment()
    runner = org_advisor.fluid_runner(_prices(d))
    doc = org_advisor.evaluate(_inputs(d), runner, scenarios=("default",), per_pool_prices=False)
    # karpenter, no commitment: hours 48-95 billed at their own rates
    usage = fluid.run(d, _prices(d), {"a": 0, "b": 0}, lend=False).hourly_usage
    expected = sum(u.instance_hours * u.usd_per_hour for u in usage if u.hour >= 48)
    assert doc["baselines"][0]["name"] == "karpenter"
    assert doc["baselines"][0]["total_cost_usd"] == pytest.approx(expected, abs=0.01)


# --- the CLI ------------------------------------------------------------------------------------------------------


@requires_shared_prices
def test_cli_advises_the_prod_stack_on_a_tiny_demand_dir(tmp_path, capsys):
    _series(tmp_path / "training.csv", [16 + 16 * ((m // 60) % 6 < 3) for m in range(4 * 1440)])
    _series(tmp_path / "inference.csv", [2 if (m // 60) % 24 < 12 else 1 for m in range(4 * 1440)])
    _series(tmp_path / "research.csv", [0] * (4 * 1440))  # prod's experiment pool
    rc = cli.main(
        ["advise", "-s", "prod", "--demand", str(tmp_path), "--sizing-days", "2", "--lookback-days", "7", "--json"]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert doc["model"] == "fluid" and doc["sizing_window_hours"] == 48 and doc["report_window_hours"] == 48
    floors = doc["recommendation"]["floors"]
    # training (production, 100 % production by tier): p90 of 16/32 GPUs = 32 GPUs = 4 p4d nodes
    assert floors["training"]["nodes"] == 4
    assert [c["count"] for c in doc["recommendation"]["commitment"]["reserved_instances"]] == [4]
    assert doc["recommendation"]["commitment"]["unpriced"] == ["g6e.xlarge@us-east-1"]  # no public g6e RI rate
    assert {b["name"] for b in doc["baselines"]} >= {
        "karpenter",
        "karpenter+savings-plan",
        "team-floors",
        "fluid-bound",
    }


@requires_shared_prices
def test_cli_reports_a_bad_demand_dir_with_exit_2(tmp_path, capsys):
    _series(tmp_path / "training.csv", [8, 8])
    rc = cli.main(["advise", "-s", "prod", "--demand", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{tmp_path / 'inference.csv'}: missing: pool 'inference' needs a demand file" in err


@requires_shared_prices
def test_cli_prints_the_tables_with_the_model_named(tmp_path, capsys):
    _series(tmp_path / "training.csv", [16 + 16 * ((m // 60) % 6 < 3) for m in range(4 * 1440)])
    _series(tmp_path / "inference.csv", [1] * (4 * 1440))
    _series(tmp_path / "research.csv", [0] * (4 * 1440))  # prod's experiment pool
    rc = cli.main(
        [
            "advise",
            "-s",
            "prod",
            "--demand",
            str(tmp_path),
            "--sizing-days",
            "2",
            "--lookback-days",
            "7",
            "--term",
            "reserved_3yr",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "fluid model" in out and "karpenter+savings-plan" in out and "recommended: floors training 4" in out


@requires_shared_prices
def test_cli_runs_every_setup_through_the_environment_simulator(capsys):
    """`--model simulated`: the shipped example demand (docs/examples/org-demand: jobs of three pools) through
    sim/environment.py, whole nodes and boots; production work is never interrupted, the research pool borrows
    the training floor's idle GPUs only where lending is on."""
    rc = cli.main(
        [
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
            "--model",
            "simulated",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert doc["model"] == "simulated"
    rows = {r["name"]: r for r in [doc["recommendation"]["report"], *doc["baselines"]]}
    for name in ("gpuloan", "karpenter", "karpenter+savings-plan", "team-floors", "floors-not-lent"):
        assert rows[name]["production_interruptions"] == 0, name
    assert rows["gpuloan"]["floor_utilization"]["lent"] > 0
    assert rows["floors-not-lent"]["floor_utilization"]["lent"] == 0
    # lending lets the research pool's work run on the training floor instead of spot nodes it would buy
    assert rows["gpuloan"]["total_cost_usd"] <= rows["floors-not-lent"]["total_cost_usd"]
    # the shortage scenarios run through the simulator too, and setups differing only in billing share a run
    assert set(doc["scenarios"]) == {"spot-shortage", "on-demand-shortage"}
    assert all(
        r["model"] == "simulated"
        for sc in doc["scenarios"].values()
        for r in [sc["recommendation_report"], *sc["baselines"]]
        if r["name"] != "fluid-bound"
    )
    assert doc["simulations"]["cache_hits"] > 0
    # issue 36: the baselines by the issue's names, each with pending time per tier; the checkpoint interval
    # that the lost work and pending times depend on is in the document, and progress went to stderr
    assert {b["name"] for b in doc["baselines"]} == set(org_advisor.BASELINES)
    assert doc["checkpoint_interval_minutes"] == 30
    assert re.search(r"simulations: (\d+)/\1 done", out.err)
    for row in rows.values():
        for tier in row["pending_by_tier"].values():
            assert {"p95_pending_minutes", "p99_pending_minutes", "max_pending_minutes"} == set(tier)


def test_checkpoint_interval_of_zero_is_refused_naming_the_flag(capsys):
    rc = cli.main(
        [
            "advise",
            "-s",
            "prod",
            "--demand",
            "docs/examples/org-demand",
            "--sizing-days",
            "3",
            "--model",
            "simulated",
            "--checkpoint-interval",
            "0",
            "--json",
        ]
    )
    err = capsys.readouterr().err
    assert rc != 0 and "--checkpoint-interval" in err and "environment simulation" not in err


def test_percentile_is_nearest_rank():
    assert org_advisor.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == 9
    assert org_advisor.percentile([5], 90) == 5 and org_advisor.percentile([], 90) == 0
    assert math.isclose(org_advisor.percentile([1, 2], 50), 1)


def test_worked_example_of_docs_floor_md():
    """The table of docs/floor.md, "Worked example": the fluid model and the billing model give its figures."""
    d = {
        "A": _pd("A", PRODUCTION, [16, 16, 8, 8], [0, 0, 0, 0]),
        "B": _pd("B", EXPERIMENT, [0, 0, 0, 0], [0, 8, 16, 0]),
    }
    prices = _prices(d)
    assert org_advisor.size_floors(d, prices, 90) == {"A": 2, "B": 0}
    rates = {(T, R): RI}

    def cost(floors, lend, commit):
        usage = fluid.run(d, prices, floors, lend=lend).hourly_usage
        # sized on the same four hours (the purchase hour is 4), then billed on them from hour 0
        c = commitment_choice.cost_explorer(usage, rates, 4, 7).commitments if commit else ()
        return billing.bill(usage, [org_advisor._shift(x, 4) for x in c], hours=4).total_usd, sum(x.count for x in c)

    assert cost({"A": 0}, False, False) == (pytest.approx(69), 0)
    assert cost({"A": 0}, False, True) == (pytest.approx(53), 1)
    assert cost({"A": 2}, False, True) == (pytest.approx(57), 2)
    assert cost({"A": 2}, True, True) == (pytest.approx(54), 2)


@requires_shared_prices
@pytest.mark.parametrize(
    "extra,message",
    [
        (["--pool", "training"], "--pool does not apply with --demand/--org"),
        (["--sizing-days", "4"], "--sizing-days 4: must be at least 1 and shorter than the history"),
        (["--guarantee-percentile", "120"], "--guarantee-percentile must be between 0 and 100"),
    ],
)
def test_cli_refuses_what_the_organization_mode_cannot_do(tmp_path, capsys, extra, message):
    _series(tmp_path / "training.csv", [16] * (4 * 1440))
    _series(tmp_path / "inference.csv", [1] * (4 * 1440))
    _series(tmp_path / "research.csv", [0] * (4 * 1440))  # prod's experiment pool
    assert cli.main(["advise", "-s", "prod", "--demand", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


# --- the simulated run's seam -------------------------------------------------------------------------------------


@requires_shared_prices
def test_setup_config_sets_each_floor_and_turns_lending_off():
    from conftest import stack_config

    cfg = checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=resolved_prices())
    lent = org_advisor.setup_config(cfg, {"training": 5, "inference": 0}, lend=True)
    assert lent.pool("training").guaranteed.nodes == 5
    assert lent.pool("training").guaranteed.payment == cfg.pool("training").guaranteed.payment
    assert lent.pool("inference").guaranteed is None
    assert lent.scheduling.kueue.sharing(cfg.pool("training").team).lending_limit_pct == 100
    kept = org_advisor.setup_config(cfg, {"training": 2, "inference": 2}, lend=False)
    assert all(kept.scheduling.kueue.sharing(p.team).lending_limit_pct == 0 for p in kept.pools)
    before = {t: cfg.scheduling.kueue.sharing(t).lending_limit_pct for t in cfg.teams}
    assert before["research"] == 100 and before["serving"] == 100  # the stack itself is untouched
    # the stack's own validation (config.parse), not a copy of its limits: the field and the pool named
    with pytest.raises(
        org_advisor.OrgAdviceError,
        match=r"guaranteed\.nodes \(pool 'training'\): Input should be less than or equal to 64",
    ):
        org_advisor.setup_config(cfg, {"training": 65}, lend=True)
    given = org_advisor.setup_config(cfg, {"training": 2, "research": 1}, lend=True)  # a new reservation: one AZ
    assert given.pool("research").guaranteed.availability_zone == cfg.cluster.availability_zones[0]


@requires_shared_prices
def test_the_simulated_run_plugs_in_through_simulate_environment(tmp_path):
    """A stand-in for sim.environment.simulate_environment (the fluid model on the traces it is given) shows what
    the advisor passes it and that its result is read for the report: the seam the environment simulator uses."""
    from conftest import stack_config

    from sim import traces as tr

    cfg = checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=resolved_prices())
    series = {
        "training": tr.SeriesTrace("training", tuple(16 + 16 * ((m // 60) % 6 < 3) for m in range(4 * 1440))),
        "inference": tr.SeriesTrace("inference", tuple([2] * (4 * 1440))),
    }
    prices = {"training": PoolPrices(T, R, 8, OD, SPOT), "inference": PoolPrices("g6e.xlarge", R, 1, 2.0, 1.0)}
    tiers = {"training": PRODUCTION, "inference": PRODUCTION}
    calls = []

    def simulate(price_book, cfg_variant, demands, controller, settings, horizon_minutes, *, window_from_minute):
        # the pools this environment's demand covers (the shipped prod stack has a third, research, not used here)
        floors = {p.name: p.guaranteed.nodes if p.guaranteed else 0 for p in cfg_variant.pools if p.name in demands}
        lend = all(cfg_variant.scheduling.kueue.sharing(p.team).lending_limit_pct > 0 for p in cfg_variant.pools)
        hours = horizon_minutes // 60
        calls.append(
            (floors, lend, controller, hours, max(len(t.gpus_demanded) for t in demands.values()), window_from_minute)
        )
        # karpenter-shared runs the organization's pools (org_advisor.shared_layout): here one per instance type,
        # each the sum of the production series of that type
        shared = {"org-production-series": "training", "org-production-2-series": "inference"}
        d = simdemand.profiles(demands, {n: PRODUCTION for n in demands}, hours, 1.0)
        p = {n: prices[shared.get(n, n)] for n in demands}
        return fluid.run(d, p, floors, lend=lend, report_from_hour=window_from_minute // 60)

    runner = org_advisor.environment_runner(resolved_prices(), cfg, series, None, prices, simulate=simulate)
    inputs = org_advisor.OrgInputs(simdemand.profiles(series, tiers, 96, 1.0), prices, {(T, R): RI}, "t", 48, 7)
    doc = org_advisor.evaluate(inputs, runner, scenarios=("default",), per_pool_prices=False)
    assert doc["model"] == "simulated" and doc["recommendation"]["report"]["model"] == "simulated"
    assert doc["baselines"][-1]["model"] == "fluid"  # the bound stays fluid
    # ONE run per distinct setup over the whole history, the report window measured inside it (from hour 48);
    # the commitments come from the same runs' hours before it: karpenter runs without floors (karpenter and
    # karpenter+savings-plan share it), team-floors and not-lent without lending (one run for both)
    assert sorted(calls, key=str) == sorted(
        [
            ({"training": 4, "inference": 2}, True, "gpuloan", 96, 96 * 60, 48 * 60),
            # gpuloan-shared: both pools hold a floor and run only production series here, so the shared layout is
            # the same pools (the simulator is called with the same setup; the cache key differs by layout)
            ({"training": 4, "inference": 2}, True, "gpuloan", 96, 96 * 60, 48 * 60),
            ({"training": 0, "inference": 0}, False, "karpenter", 96, 96 * 60, 48 * 60),
            ({"training": 4, "inference": 2}, False, "gpuloan", 96, 96 * 60, 48 * 60),
            # (the shared pools' team keeps Kueue's default lending: there is no floor to lend)
            ({"org-production-series": 0, "org-production-2-series": 0}, True, "karpenter", 96, 96 * 60, 48 * 60),
        ],
        key=str,
    )
    assert runner.runs == 5 and runner.hits > 0
    # the same setup through the fluid runner gives the same figures (the stand-in is the fluid model)
    fl = org_advisor.evaluate(inputs, org_advisor.fluid_runner(prices), scenarios=("default",), per_pool_prices=False)
    assert doc["recommendation"]["report"]["total_cost_usd"] == fl["recommendation"]["report"]["total_cost_usd"]
    assert doc["recommendation"]["report"]["floor_utilization"] == fl["recommendation"]["report"]["floor_utilization"]


def test_a_plan_that_saves_nothing_is_not_bought_and_the_row_says_what_it_would_have_cost():
    # Busy in the sizing window (hours 0-47), idle in the report window: the commitment Cost Explorer sizes on the
    # window would bill its hours unused, so `+savings-plan` is the baseline without it, saying so (issue 36).
    busy = _environment()
    idle_after = {
        n: _pd(n, d.tier, list(d.production_gpus[:48]) + [0] * 48, list(d.interruptible_gpus[:48]) + [0] * 48)
        for n, d in busy.items()
    }
    runner = org_advisor.fluid_runner(_prices(idle_after))
    doc = org_advisor.evaluate(_inputs(idle_after), runner, scenarios=("default",), per_pool_prices=False)
    rows = {b["name"]: b for b in doc["baselines"]}
    for plain, with_plan in (
        ("karpenter", "karpenter+savings-plan"),
        ("karpenter-shared", "karpenter-shared+savings-plan"),
    ):
        assert rows[with_plan]["commitment_ri_count"] == 0
        assert rows[with_plan]["plan_not_bought"]["reserved_instances"] > 0
        assert rows[with_plan]["plan_not_bought"]["would_cost_usd_more"] > 0
        assert rows[with_plan]["total_cost_usd"] == rows[plain]["total_cost_usd"]
