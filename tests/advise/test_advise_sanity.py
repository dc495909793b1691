"""The sanity check of the organization's advice (issue 36, advise/sanity.py) and the cause of the contradiction
it was written for: a fluid "bound" above a real layout, because the fluid model served work the deployment's
node groups cannot launch (sim/fluid.py `PoolPrices.elastic_max_gpus`)."""

from __future__ import annotations

import json

import pytest
from conftest import requires_shared_prices, requires_shared_traces

from advise import org_advisor, sanity
from gpuloan import cli
from pricing.cost_model import billing
from sim import fluid
from sim.fluid import PoolPrices
from sim.demand import EXPERIMENT, PRODUCTION, PoolDemand

T, R = "p4d.24xlarge", "us-east-1"
OD, SPOT, RI = 10.0, 3.0, 6.0


def _pd(name, tier, prod, other):
    return PoolDemand(name, tier, tuple(float(x) for x in prod), tuple(float(x) for x in other))


# --- the cause: the fluid model on the same deployment ------------------------------------------------------------


@pytest.mark.parametrize(
    "case,prod,other,spot,cap,od_gpus,spot_gpus,unmet,unmet_prod",
    [
        # 2 nodes of 8 GPUs at most: production (10 GPUs past no floor) keeps its on-demand, interruptible gives way
        ("production first", 10, 20, SPOT, 16, 10, 6, 14, 0),
        ("production alone over the limit", 20, 5, SPOT, 16, 16, 0, 9, 4),
        ("no spot: interruptible on on-demand, capped", 4, 20, None, 16, 16, 0, 8, 0),
        ("under the limit: all served", 4, 4, SPOT, 16, 4, 4, 0, 0),
        ("no limit (None): all served, as before", 10, 20, SPOT, None, 10, 20, 0, 0),
    ],
)
def test_fluid_elastic_gpus_never_exceed_the_pools_node_limit(
    case, prod, other, spot, cap, od_gpus, spot_gpus, unmet, unmet_prod
):
    demands = {"a": _pd("a", EXPERIMENT, [prod], [other])}
    run = fluid.run(demands, {"a": PoolPrices(T, R, 8, OD, spot, cap)}, {}, lend=False)
    got = {u.purchase: u.instance_hours * 8 for u in run.hourly_usage}
    assert got.get(billing.ON_DEMAND, 0) == pytest.approx(od_gpus), case
    assert got.get(billing.SPOT, 0) == pytest.approx(spot_gpus), case
    assert run.pools["a"].unmet_gpu_hours == pytest.approx(unmet), case
    assert run.pools["a"].unmet_production_gpu_hours == pytest.approx(unmet_prod), case


@requires_shared_prices
def test_the_advisors_fluid_bound_runs_the_stacks_node_limits(tmp_path, capsys):
    """prod's research pool may run 2 p4d nodes (16 GPUs) of elastic capacity; its 40 GPUs of demand leave 24
    unmet every hour in every row, the fluid bound's included (before issue 36's fix the bound served all 40, and
    so cost more than setups that could not)."""
    for pool, gpus in (("training", 16), ("inference", 1), ("research", 40)):
        (tmp_path / f"{pool}.csv").write_text(
            "minute,gpus_demanded\n" + "".join(f"{m},{gpus}\n" for m in range(4 * 1440))
        )
    rc = cli.main(
        ["advise", "-s", "prod", "--demand", str(tmp_path), "--sizing-days", "2", "--lookback-days", "7", "--json"]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    rows = {r["name"]: r for r in [doc["recommendation"]["report"], *doc["baselines"]]}
    assert rows["fluid-bound"]["unmet_gpu_hours"] == pytest.approx(24 * 48)
    assert rows["fluid-bound"]["total_cost_usd"] <= rows["floors-not-lent"]["total_cost_usd"] + 1e-6
    assert doc["sanity_check"] == {"passed": True, "failures": [], "notes": []}


def test_the_bounds_inputs_carry_each_pools_capacity_types_and_node_limit(prices):
    """advise/org_advisor.py pool_prices, the one construction of the bound's inputs: the prod stack's pools each
    with their own node limit (elastic max nodes x GPUs per node) and no spot rate where the pool runs none."""
    from conftest import stack_config

    from pricing import checks
    from sim import pool as simpool

    cfg = checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=prices)
    got = org_advisor.pool_prices(prices, cfg)
    assert set(got) == {p.name for p in cfg.pools}
    for p in cfg.pools:
        spec = simpool.spec_from_config(prices, cfg, p.name)
        assert got[p.name].elastic_max_gpus == spec.elastic_max_nodes * spec.gpus_per_node, p.name
        assert (got[p.name].spot_usd_per_hour is None) == (not spec.has_spot), p.name
        assert got[p.name].gpus_per_node == spec.gpus_per_node, p.name


@requires_shared_traces
@requires_shared_prices
def test_bench_org_builds_the_bound_on_the_simulated_rows_node_limits(prices, monkeypatch):
    """scripts/bench_org.py: the fluid bound's prices are those of the stack the simulated rows run (each pool's
    node limit), built by the advisor's own function; before, the benchmark built them without any limit."""
    import importlib.util
    import sys

    from conftest import REPO, SHARED_TRACES
    from sim import demand as simdemand

    spec = importlib.util.spec_from_file_location("bench_org", REPO / "scripts" / "bench_org.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_org", bench)
    spec.loader.exec_module(bench)
    traces = simdemand.itp_traces(SHARED_TRACES / "itp", (1, 3))
    demands, runner = bench._sim_unit(prices, 0, 1, traces, (1, 3), 24, bench.DEFAULT_CHECKPOINT_MINUTES)
    assert runner.prices == org_advisor.pool_prices(prices, runner.cfg)
    for pool in runner.cfg.pools:
        assert runner.prices[pool.name].elastic_max_gpus == pool.elastic.max_nodes * 8, pool.name


# --- the check ----------------------------------------------------------------------------------------------------


def _doc():
    """A consistent advice document from the fluid model (the same runner for every row)."""
    hours = 96
    demands = {
        "a": _pd("a", PRODUCTION, [16 + 8 * ((h // 6) % 2) for h in range(hours)], [4] * hours),
        "b": _pd("b", EXPERIMENT, [0] * hours, [24 * ((h // 8) % 3 == 0) for h in range(hours)]),
    }
    prices = {n: PoolPrices(T, R, 8, OD, SPOT) for n in demands}
    inputs = org_advisor.OrgInputs(demands, prices, {(T, R): RI}, "test-term", 48, 7, 90.0)
    return org_advisor.evaluate(inputs, org_advisor.fluid_runner(prices), scenarios=("default",), per_pool_prices=False)


def _row(doc, name):
    return next(r for r in [doc["recommendation"]["report"], *doc["baselines"]] if r["name"] == name)


def test_a_consistent_document_passes_and_is_advice():
    doc = _doc()
    assert doc["sanity_check"]["passed"] and not doc["sanity_check"]["failures"]
    assert "withheld" not in doc["recommendation"]


def _bound_above(doc, more_unmet=0.0):
    """The bound $100 above floors-not-lent; every setup of the same floors `more_unmet` GPU-hours short of it."""
    bound = _row(doc, "fluid-bound")
    for row in (
        *(_row(doc, n) for n in ("gpuloan", "team-floors", "floors-not-lent")),
        doc["recommendation"]["layouts"]["gpuloan-shared"],
    ):
        row["unmet_gpu_hours"] = bound["unmet_gpu_hours"] + more_unmet
    bound["total_cost_usd"] = _row(doc, "floors-not-lent")["total_cost_usd"] + 100


def _plan_dearer(doc):
    _row(doc, "karpenter+savings-plan")["total_cost_usd"] = _row(doc, "karpenter")["total_cost_usd"] + 50


def _negative(doc):
    _row(doc, "team-floors")["total_cost_usd"] = -1.0


def _negative_part(doc):
    _row(doc, "gpuloan")["by_purchase_usd"]["spot"] = -3.0


def _floor_over_limit(doc):
    doc["recommendation"]["floors"]["a"]["nodes"] = 65


@pytest.mark.parametrize(
    "case,break_it,failure",
    [
        ("a bound above a layout of the same work", _bound_above, "the fluid bound costs $"),
        ("a +savings-plan row dearer than without", _plan_dearer, "karpenter+savings-plan costs $"),
        ("a negative cost", _negative, "team-floors costs $-1.00, below zero"),
        ("a negative part of a bill", _negative_part, "gpuloan's spot bill is $-3.00, below zero"),
        (
            "a floor over the node limit",
            _floor_over_limit,
            "pool 'a': a floor of 65 nodes is over the stack's limit of 64",
        ),
    ],
)
def test_each_contradiction_fails_the_check_and_says_what(case, break_it, failure):
    doc = _doc()
    break_it(doc)
    checked = sanity.check(doc)
    assert not checked.passed, case
    assert any(failure in f for f in checked.failures), (case, checked.failures)


def test_a_bound_above_a_layout_that_left_more_work_unmet_is_a_note_not_a_failure():
    doc = _doc()
    _bound_above(doc, more_unmet=500.0)
    checked = sanity.check(doc)
    assert checked.passed
    assert any("left 500 GPU-hours more unmet: not the same work" in n for n in checked.notes)


def test_the_floor_limit_is_the_config_models_own():
    from config.config import Guaranteed

    assert sanity.floor_node_limit() == 64
    with pytest.raises(ValueError):
        Guaranteed(instance_type=T, nodes=sanity.floor_node_limit() + 1)


@requires_shared_prices
def test_the_cli_withholds_contradictory_advice_and_exits_1(tmp_path, capsys, monkeypatch):
    """The table is printed, the recommendation is not: the output says what failed, and the exit code is 1
    (done in part). The contradiction is made by a bound that costs more than every setup (a fluid runner that
    bills the bound's run at ten times the rate)."""
    real = org_advisor._bound

    def dear_bound(inputs, frun, floors, sc):
        out = real(inputs, frun, floors, sc)
        out.doc["total_cost_usd"] = 10 * out.doc["total_cost_usd"] + 1e6
        return out

    monkeypatch.setattr(org_advisor, "_bound", dear_bound)
    for pool, gpus in (("training", 16), ("inference", 1), ("research", 8)):
        (tmp_path / f"{pool}.csv").write_text(
            "minute,gpus_demanded\n" + "".join(f"{m},{gpus}\n" for m in range(4 * 1440))
        )
    rc = cli.main(["advise", "-s", "prod", "--demand", str(tmp_path), "--sizing-days", "2", "--lookback-days", "7"])
    out = capsys.readouterr()
    assert rc == 1, out.err
    assert "no recommendation: the figures above contradict each other" in out.out
    assert "recommended: floors" not in out.out
    assert "a bound a real layout beats is not a bound" in out.err


def test_a_bound_above_the_shared_layout_is_no_contradiction():
    """The bound runs the per-team deployment (each pool's own capacity types); gpuloan's shared layout puts every
    team's interruptible work spot-first in shared pools, which can be cheaper than any per-team setup."""
    doc = _doc()
    shared = doc["recommendation"]["layouts"]["gpuloan-shared"]
    shared["total_cost_usd"] = _row(doc, "fluid-bound")["total_cost_usd"] - 500
    shared["unmet_gpu_hours"] = 0.0
    assert sanity.check(doc).passed


def _series_layout(share: float):
    from conftest import resolved_prices, stack_config
    from pricing import checks
    from sim.traces import SeriesTrace

    prices = resolved_prices()
    cfg = checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=prices)
    cfg = org_advisor.with_production_share(cfg, share)
    traces = {n: SeriesTrace(n, (8,) * 600) for n in ("training", "inference", "research")}
    return org_advisor.shared_layout(
        prices,
        org_advisor.setup_config(cfg, {"training": 2, "inference": 1}, lend=True, check=False),
        traces,
        1,
        keep_floors=True,
    )


@requires_shared_prices
def test_the_shared_layout_keeps_a_floor_whose_team_has_only_a_demand_series():
    """A demand series at a share of 0 % is all interruptible: it goes to the shared interruptible pool; the floor
    of its team must stay (bought, billed, lent). It vanished: gpuloan-shared was billed with no floor at all,
    below the bound of the same floors (the 16-pool advise case, issue 36)."""
    layout = _series_layout(0.0)
    floors = {p.name: p.guaranteed.nodes for p in layout.cfg.pools if p.guaranteed is not None}
    assert floors == {"training": 2, "inference": 1}
    assert not layout.traces["training"].jobs and layout.source["training"] == []
    rest = [t.gpus_demanded for n, t in layout.traces.items() if n.startswith(org_advisor.SHARED_REST)]
    assert sum(s[0] for s in rest) == 24 and all(len(set(s)) == 1 for s in rest)


@requires_shared_prices
def test_the_shared_layout_splits_a_demand_series_as_the_per_team_run_does():
    """At 30 % each minute of 8 GPUs is 2 production GPUs (2.4 rounded, sim/demand.py split_gpus) and 6
    interruptible, as the per-team simulation and the fluid bound split it (issue 36): the production part stays on
    the team's kept floor (training, inference) or goes to the shared production pool (research has no floor),
    the interruptible parts of all three go to the shared interruptible pool. It went whole to the interruptible
    pool, so the floors ran nothing of their teams."""
    layout = _series_layout(0.3)
    floors = {p.name: p.guaranteed.nodes for p in layout.cfg.pools if p.guaranteed is not None}
    assert floors == {"training": 2, "inference": 1}
    demanded = {name: trace.gpus_demanded for name, trace in layout.traces.items()}
    assert demanded.pop("training") == (2,) * 600 and demanded.pop("inference") == (2,) * 600
    prod = [s for n, s in demanded.items() if n.startswith(org_advisor.SHARED_PRODUCTION)]
    rest = [s for n, s in demanded.items() if n.startswith(org_advisor.SHARED_REST)]
    assert prod == [(2,) * 600]  # research's production part: research has no floor
    assert sorted(rest) == [(6,) * 600] * 3 and len(prod) + len(rest) == len(demanded)
