"""The billing model (pricing/cost_model/billing.py): commitments applied hour by hour as AWS documents.

Rates here are round illustrative numbers, as in AWS's own worked example ("the prices in this example are
illustrative only"); every expected figure is computed by hand in the test.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.cost_model import billing
from pricing.cost_model.billing import (
    CAPACITY_BLOCK,
    COMPUTE_SAVINGS_PLAN,
    EC2_INSTANCE_SAVINGS_PLAN,
    ON_DEMAND,
    RESERVED,
    RESERVED_INSTANCES,
    SPOT,
    BillingError,
    Commitment,
    Usage,
    bill,
)


def use(hour, pool, itype, purchase, hours, rate, region="us-east-1"):
    return Usage(hour, pool, itype, region, purchase, hours, rate)


def test_without_commitments_every_hour_bills_at_its_own_rate():
    b = bill(
        [
            use(0, "a", "p4d.24xlarge", RESERVED, 2, 10.0),
            use(0, "b", "p4d.24xlarge", SPOT, 1.5, 4.0),
            use(1, "b", "p4d.24xlarge", ON_DEMAND, 0.5, 10.0),
        ]
    )
    assert b.total_usd == pytest.approx(20 + 6 + 5)
    assert b.by_pool_usd == {"a": 20.0, "b": 11.0}
    assert b.savings_usd == pytest.approx(0)
    assert b.hours == 2


def test_a_reserved_instance_covers_its_count_and_bills_every_hour_of_its_term():
    ri = Commitment(
        "ri", RESERVED_INSTANCES, {"p4d.24xlarge": 6.0}, region="us-east-1", instance_type="p4d.24xlarge", count=2
    )
    # hour 0: 3 instance-hours, 2 covered; hour 1: none used, the RI still bills
    b = bill([use(0, "a", "p4d.24xlarge", ON_DEMAND, 3, 10.0)], [ri], hours=2)
    assert b.by_pool_usd["a"] == pytest.approx(2 * 6 + 1 * 10)
    assert b.unused_commitment_usd == pytest.approx(2 * 6)
    assert b.total_usd == pytest.approx(12 + 10 + 12)
    assert b.commitment_utilization("ri") == pytest.approx(0.5)


def test_a_reserved_instance_covers_only_its_type_and_region():
    ri = Commitment(
        "ri", RESERVED_INSTANCES, {"p4d.24xlarge": 6.0}, region="us-east-1", instance_type="p4d.24xlarge", count=1
    )
    b = bill(
        [
            use(0, "a", "p4d.24xlarge", ON_DEMAND, 1, 10.0, region="us-west-2"),
            use(0, "a", "p5.48xlarge", ON_DEMAND, 1, 20.0),
        ],
        [ri],
    )
    assert b.by_pool_usd["a"] == pytest.approx(30)
    assert b.unused_commitment_usd == pytest.approx(6)


def test_spot_and_capacity_blocks_are_never_covered():
    sp = Commitment("sp", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 5.0}, hourly_commitment_usd=5.0)
    b = bill([use(0, "a", "p4d.24xlarge", SPOT, 1, 4.0), use(0, "a", "p4d.24xlarge", CAPACITY_BLOCK, 1, 9.0)], [sp])
    assert b.by_pool_usd["a"] == pytest.approx(13)
    assert b.unused_commitment_usd == pytest.approx(5)
    assert b.commitment_utilization("sp") == pytest.approx(0)


def test_a_savings_plan_covers_the_highest_savings_percentage_first():
    # p4d: plan rate 5 vs on-demand 10 = 50 % off; g6e: 0.9 vs 1 = 10 % off. $6/h of commitment covers one p4d
    # hour ($5) first, then $1 of g6e (1/0.9 instance-hours); the rest of g6e bills on-demand.
    sp = Commitment("sp", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 5.0, "g6e.xlarge": 0.9}, hourly_commitment_usd=6.0)
    b = bill(
        [use(0, "inference", "g6e.xlarge", ON_DEMAND, 4, 1.0), use(0, "training", "p4d.24xlarge", RESERVED, 1, 10.0)],
        [sp],
    )
    assert b.by_pool_usd["training"] == pytest.approx(5.0)
    assert b.by_pool_usd["inference"] == pytest.approx(1.0 + (4 - 1 / 0.9) * 1.0)
    assert b.unused_commitment_usd == pytest.approx(0)
    assert b.commitment_utilization("sp") == pytest.approx(1.0)


def test_equal_savings_percentages_cover_the_lower_rate_first():
    sp = Commitment("sp", COMPUTE_SAVINGS_PLAN, {"a.x": 5.0, "b.x": 1.0}, hourly_commitment_usd=1.0)
    b = bill([use(0, "big", "a.x", ON_DEMAND, 1, 10.0), use(0, "small", "b.x", ON_DEMAND, 1, 2.0)], [sp])
    assert b.by_pool_usd["small"] == pytest.approx(1.0)  # covered
    assert b.by_pool_usd["big"] == pytest.approx(10.0)  # not


def test_reserved_instances_apply_before_savings_plans_and_ec2_instance_plans_before_compute_plans():
    ri = Commitment(
        "ri", RESERVED_INSTANCES, {"p4d.24xlarge": 6.0}, region="us-east-1", instance_type="p4d.24xlarge", count=1
    )
    ec2 = Commitment(
        "ec2",
        EC2_INSTANCE_SAVINGS_PLAN,
        {"p4d.24xlarge": 4.0},
        region="us-east-1",
        instance_family="p4d",
        hourly_commitment_usd=4.0,
    )
    compute = Commitment("compute", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 5.0}, hourly_commitment_usd=5.0)
    # given in the "wrong" order on purpose: the model orders them as AWS does
    b = bill([use(0, "a", "p4d.24xlarge", ON_DEMAND, 3, 10.0)], [compute, ec2, ri])
    assert b.commitment_used_usd == {"ri": 6.0, "ec2": 4.0, "compute": 5.0}
    assert b.total_usd == pytest.approx(15)


def test_an_ec2_instance_plan_covers_its_family_in_its_region_and_a_compute_plan_any_region():
    ec2 = Commitment(
        "ec2",
        EC2_INSTANCE_SAVINGS_PLAN,
        {"p4d.24xlarge": 5.0, "p5.48xlarge": 10.0},
        region="us-east-1",
        instance_family="p4d",
        hourly_commitment_usd=5.0,
    )
    b = bill(
        [
            use(0, "a", "p5.48xlarge", ON_DEMAND, 1, 20.0),
            use(0, "a", "p4d.24xlarge", ON_DEMAND, 1, 10.0, region="us-west-2"),
        ],
        [ec2],
    )
    assert b.unused_commitment_usd == pytest.approx(5.0)
    compute = Commitment("compute", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 5.0}, hourly_commitment_usd=5.0)
    b = bill([use(0, "a", "p4d.24xlarge", ON_DEMAND, 1, 10.0, region="us-west-2")], [compute])
    assert b.unused_commitment_usd == pytest.approx(0)
    assert b.total_usd == pytest.approx(5.0)


def test_one_commitment_for_the_organization_beats_one_per_pool_when_pools_take_turns():
    # Two teams take turns: team a runs 2 nodes in hour 0, team b 2 nodes in hour 1. One org-wide RI of 2 covers
    # both hours; RIs of 2 bought per team each idle half the time.
    usage = [use(0, "a", "p4d.24xlarge", ON_DEMAND, 2, 10.0), use(1, "b", "p4d.24xlarge", ON_DEMAND, 2, 10.0)]
    org = Commitment(
        "org", RESERVED_INSTANCES, {"p4d.24xlarge": 6.0}, region="us-east-1", instance_type="p4d.24xlarge", count=2
    )
    per_pool = [
        Commitment(
            f"{p}-ri",
            RESERVED_INSTANCES,
            {"p4d.24xlarge": 6.0},
            region="us-east-1",
            instance_type="p4d.24xlarge",
            count=2,
        )
        for p in "ab"
    ]
    shared, split = bill(usage, [org]), bill(usage, per_pool)
    assert shared.total_usd == pytest.approx(24)
    assert split.total_usd == pytest.approx(48)
    assert shared.commitment_utilization("org") == pytest.approx(1.0)


def test_a_commitment_bills_only_inside_its_term():
    sp = Commitment(
        "sp", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 5.0}, hourly_commitment_usd=5.0, start_hour=1, end_hour=2
    )
    b = bill([use(h, "a", "p4d.24xlarge", ON_DEMAND, 1, 10.0) for h in range(3)], [sp])
    assert b.commitment_fee_usd["sp"] == pytest.approx(5.0)
    assert b.total_usd == pytest.approx(10 + 5 + 10)


@pytest.mark.parametrize(
    "commitment, field",
    [
        (Commitment("x", "convertible_ri", {"p4d.24xlarge": 1.0}), "kind"),
        (
            Commitment(
                "x", RESERVED_INSTANCES, {"p4d.24xlarge": 1.0}, region="us-east-1", instance_type="p4d.24xlarge"
            ),
            "count",
        ),
        (
            Commitment(
                "x", RESERVED_INSTANCES, {"p5.48xlarge": 1.0}, region="us-east-1", instance_type="p4d.24xlarge", count=1
            ),
            "rate",
        ),
        (Commitment("x", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 1.0}), "hourly_commitment_usd"),
        (
            Commitment("x", EC2_INSTANCE_SAVINGS_PLAN, {"p4d.24xlarge": 1.0}, hourly_commitment_usd=1.0),
            "instance_family",
        ),
        (Commitment("x", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 0.0}, hourly_commitment_usd=1.0), "rates_usd_per_hour"),
        (
            Commitment(
                "x", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 1.0}, hourly_commitment_usd=1.0, start_hour=3, end_hour=3
            ),
            "end_hour",
        ),
    ],
)
def test_a_commitment_it_cannot_price_is_refused_by_name_and_field(commitment, field):
    with pytest.raises(BillingError) as err:
        bill([], [commitment])
    assert "'x'" in str(err.value) and field in str(err.value)


def test_bad_usage_and_periods_are_refused_naming_the_record():
    with pytest.raises(BillingError, match="pool 'a' at hour 0: purchase 'reserved_instance'"):
        bill([use(0, "a", "p4d.24xlarge", "reserved_instance", 1, 1.0)])
    with pytest.raises(BillingError, match="instance_hours"):
        bill([use(0, "a", "p4d.24xlarge", ON_DEMAND, -1, 1.0)])
    with pytest.raises(BillingError, match="past the billed period"):
        bill([use(5, "a", "p4d.24xlarge", ON_DEMAND, 1, 1.0)], hours=3)
    sp = Commitment("x", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 1.0}, hourly_commitment_usd=1.0)
    with pytest.raises(BillingError, match="unique: x"):
        bill([], [sp, sp])


usage_lines = st.lists(
    st.builds(
        Usage,
        hour=st.integers(0, 5),
        pool=st.sampled_from(["a", "b", "c"]),
        instance_type=st.sampled_from(["p4d.24xlarge", "p5.48xlarge", "g6e.xlarge"]),
        region=st.sampled_from(["us-east-1", "us-west-2"]),
        purchase=st.sampled_from(billing.PURCHASES),
        instance_hours=st.floats(0, 8),
        usd_per_hour=st.floats(0.5, 60),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(usage_lines, st.floats(0.1, 80), st.integers(0, 4))
def test_every_dollar_is_in_one_pool_or_unused_and_no_line_bills_above_its_own_rate(lines, commitment_usd, count):
    commitments = [
        Commitment(
            "sp", COMPUTE_SAVINGS_PLAN, {"p4d.24xlarge": 7.0, "g6e.xlarge": 0.6}, hourly_commitment_usd=commitment_usd
        )
    ]
    if count:
        commitments.append(
            Commitment(
                "ri",
                RESERVED_INSTANCES,
                {"p5.48xlarge": 12.0},
                region="us-east-1",
                instance_type="p5.48xlarge",
                count=count,
            )
        )
    b = bill(lines, commitments, hours=6)
    fees = sum(c.hourly_fee_usd() for c in commitments) * 6
    uncovered_at_most = sum(u.instance_hours * u.usd_per_hour for u in lines)
    assert b.total_usd == pytest.approx(sum(b.by_pool_usd.values()) + b.unused_commitment_usd)
    assert sum(b.commitment_fee_usd.values()) == pytest.approx(fees)
    # what is billed never exceeds the commitments' fees plus the usage at its own rates
    assert b.total_usd <= fees + uncovered_at_most + 1e-6
    for name, fee in b.commitment_fee_usd.items():
        assert 0 <= b.commitment_used_usd[name] <= fee + 1e-6
