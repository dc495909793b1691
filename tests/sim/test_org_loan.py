"""The loan per pool in `advise --demand` (sim/org_loan.py): own, lent and borrowed GPU-hours and dollars, reclaim
preemptions; lent equals borrowed over the organization, in GPU-hours and to the cent.

Rates are the round illustrative numbers of docs/floor.md's worked example (p4d, 8 GPUs a node: on-demand 10,
spot 3, RI 6 per instance-hour); every expected figure is worked out by hand."""

from __future__ import annotations

import json

import pytest

from conftest import requires_shared_prices
from gpuloan import cli
from advise import commitment_choice, org_advisor
from sim import fluid, org_loan
from sim.fluid import PoolPrices
from sim.demand import EXPERIMENT, PRODUCTION, PoolDemand

T, R = "p4d.24xlarge", "us-east-1"
OD, SPOT, RI = 10.0, 3.0, 6.0
LOAN_KEYS = {
    "own_floor_gpu_hours",
    "lent_gpu_hours",
    "borrowed_gpu_hours",
    "borrowed_cost_usd",
    "lent_credit_usd",
    "reclaim_preemptions",
    "reclaim_lost_gpu_hours",
}


def _pd(name, tier, prod, other):
    return PoolDemand(name, tier, tuple(float(x) for x in prod), tuple(float(x) for x in other))


def _prices(names):
    return {n: PoolPrices(T, R, 8, OD, SPOT) for n in names}


def _unshifted(c, by):
    return c


def test_worked_example_of_docs_scheduling_md():
    """docs/scheduling.md, "The loan's bill": A's 2-node floor (16 GPUs) over four hours, A's production
    16, 16, 8, 8 GPUs, B's experiment 0, 8, 16, 0; the floor's two hours a node on the 2 RIs at $6."""
    d = {
        "A": _pd("A", PRODUCTION, [16, 16, 8, 8], [0, 0, 0, 0]),
        "B": _pd("B", EXPERIMENT, [0, 0, 0, 0], [0, 8, 16, 0]),
    }
    run = fluid.run(d, _prices(d), {"A": 2}, lend=True)
    ris = commitment_choice.cost_explorer(run.hourly_usage, {(T, R): RI}, 4, 7).commitments
    ris = [org_advisor._shift(c, 4) for c in ris]  # bought for these four hours, as docs/floor.md's example
    assert sum(c.count for c in ris) == 2
    # the floor's rate: 2 nodes x 4 h at the RI's $6 = $48 for 16 GPUs x 4 h = 64 GPU-hours: $0.75 a GPU-hour
    assert org_loan.floor_rates(run, ris, 0, _unshifted) == {"A": pytest.approx(0.75)}
    loan = org_loan.per_pool(run, ris, 0, _unshifted)
    # A ran 48 GPU-hours on its floor, lent 8 (hour 2) and kept 8 idle (hour 3); B borrowed those 8
    assert loan["A"]["own_floor_gpu_hours"] == 48 and loan["A"]["lent_gpu_hours"] == 8
    assert loan["B"]["borrowed_gpu_hours"] == 8
    # B pays 8 x $0.75 = $6.00, A is credited $6.00
    assert loan["B"]["borrowed_cost_usd"] == 6.00 and loan["A"]["lent_credit_usd"] == 6.00
    assert loan["A"]["borrowed_cost_usd"] == 0 and loan["B"]["lent_credit_usd"] == 0
    # the bill per team: A's floor $48 less $6 = $42; B's spot (hours 1 and 2, one node each, $3) + $6 = $12;
    # together the environment's $54 (docs/floor.md's lent floor with two RIs)
    from pricing.cost_model import billing

    bill = billing.bill(run.hourly_usage, ris, hours=4)
    assert bill.total_usd == pytest.approx(54)
    assert bill.by_pool_usd["A"] - loan["A"]["lent_credit_usd"] == pytest.approx(42)
    assert bill.by_pool_usd["B"] + loan["B"]["borrowed_cost_usd"] == pytest.approx(12)


def _environment(hours=96):
    prod_a = [16 + 8 * ((h // 6) % 2) for h in range(hours)]
    other_a = [4 * ((h // 12) % 2) for h in range(hours)]
    other_b = [24 * ((h // 8) % 3 == 0) for h in range(hours)]
    prod_b = [8 * ((h // 4) % 2) for h in range(hours)]
    return {
        "a": _pd("a", PRODUCTION, prod_a, other_a),
        "b": _pd("b", EXPERIMENT, prod_b, other_b),
        "c": _pd("c", PRODUCTION, [8] * hours, [0] * hours),
    }


def test_each_pool_of_the_recommendation_carries_its_loan_and_lent_equals_borrowed():
    d = _environment()
    inputs = org_advisor.OrgInputs(d, _prices(d), {(T, R): RI}, "test-term", 48, 7, 90.0)
    doc = org_advisor.evaluate(
        inputs, org_advisor.fluid_runner(_prices(d)), scenarios=("default",), per_pool_prices=False
    )
    pools = doc["recommendation"]["pools"]
    assert set(pools) == {"a", "b", "c"}
    for name, p in pools.items():
        assert LOAN_KEYS <= set(p), name
    assert sum(p["lent_gpu_hours"] for p in pools.values()) == pytest.approx(
        sum(p["borrowed_gpu_hours"] for p in pools.values()), abs=0.01
    )
    assert sum(p["borrowed_gpu_hours"] for p in pools.values()) > 0  # b borrows a's and c's idle floors
    # to the cent: every pair is counted once on each side
    assert round(sum(p["lent_credit_usd"] for p in pools.values()) * 100) == round(
        sum(p["borrowed_cost_usd"] for p in pools.values()) * 100
    )
    assert pools["b"]["borrowed_cost_usd"] > 0 and pools["b"]["lent_credit_usd"] == 0
    json.dumps(doc)


@requires_shared_prices
def test_the_simulated_environment_bills_the_loan_per_pool(capsys):
    """`advise --demand --model simulated`: the environment simulator's borrowing per lender, from Kueue's
    admission as the plan configures it (prod: research borrows training's floor)."""
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
    pools = json.loads(out.out)["recommendation"]["pools"]
    for name, p in pools.items():
        assert LOAN_KEYS <= set(p), name
    assert pools["research"]["borrowed_gpu_hours"] > 0 and pools["training"]["lent_gpu_hours"] > 0
    assert sum(p["lent_gpu_hours"] for p in pools.values()) == pytest.approx(
        sum(p["borrowed_gpu_hours"] for p in pools.values()), abs=0.01
    )
    assert round(sum(p["lent_credit_usd"] for p in pools.values()) * 100) == round(
        sum(p["borrowed_cost_usd"] for p in pools.values()) * 100
    )
    assert pools["research"]["borrowed_cost_usd"] == pools["training"]["lent_credit_usd"] > 0
