"""The catalog: hand-written instance facts, and which rows of the public price table it reads (through the offline
price file, ../shared/data/prices, as conftest sets GPULOAN_PRICE_FILE)."""

from __future__ import annotations

import csv

import pytest
from conftest import SHARED_PRICES, requires_shared_prices, resolved_prices

from config import instance_types
from pricing.sources import catalog


def _rows():
    with (SHARED_PRICES / "aws_gpu_prices.csv").open() as f:
        return list(csv.DictReader(f))


def test_every_gpu_model_in_the_facts_table_has_an_architecture():
    unknown = sorted({t.gpu_model for t in instance_types.KNOWN.values()} - set(catalog.GPU_ARCHITECTURE))
    assert unknown == []


@requires_shared_prices
def test_facts_table_agrees_with_the_public_table_on_gpu_count_and_model():
    """The hand-written table (from AWS's spec page) and the public price table are independent sources: every
    type the public table prices is in ours, with the same GPUs per instance and GPU model."""
    public = {r["instance_type"]: (int(r["gpus"]), r["gpu_model"]) for r in _rows()}
    missing = sorted(set(public) - set(instance_types.KNOWN))
    assert missing == []
    differ = {
        t: (public[t], (instance_types.KNOWN[t].gpus, instance_types.KNOWN[t].gpu_model))
        for t in public
        if public[t] != (instance_types.KNOWN[t].gpus, instance_types.KNOWN[t].gpu_model)
    }
    assert differ == {}


def test_graviton_gpu_types_are_arm64_and_others_x86():
    assert resolved_prices().lookup("g5g.xlarge").cpu_architecture == "arm64"
    assert resolved_prices().lookup("g5g.xlarge").is_nvidia
    assert resolved_prices().lookup("g5.xlarge").cpu_architecture == "x86_64"
    assert not resolved_prices().lookup("g4ad.xlarge").is_nvidia


@requires_shared_prices
def test_on_demand_uses_the_current_row_and_spot_the_snapshot_ratio():
    rows = [r for r in _rows() if r["instance_type"] == "p4d.24xlarge" and r["region"] == "us-east-1"]
    current = next(r for r in rows if not r["source"].startswith("skypilot"))
    snap = next(r for r in rows if r["source"].startswith("skypilot"))
    p = resolved_prices().price("p4d.24xlarge", "us-east-1")
    assert p.ondemand_usd_per_hour == float(current["ondemand_usd_per_hour"])  # 2026 price, after the 2025 cut
    ratio = float(snap["spot_usd_per_hour"]) / float(snap["ondemand_usd_per_hour"])
    assert p.spot_usd_per_hour == pytest.approx(p.ondemand_usd_per_hour * ratio)
    assert p.spot_basis == "observed-ratio"
    assert p.source == current["source"] and p.as_of == current["price_snapshot"]


@requires_shared_prices
def test_region_without_snapshot_falls_back_to_the_advisor_estimate():
    p = resolved_prices().price("p4d.24xlarge", "eu-central-1")
    row = next(r for r in _rows() if r["instance_type"] == "p4d.24xlarge" and r["region"] == "eu-central-1")
    assert p.spot_basis == "advisor-estimate"
    assert p.spot_usd_per_hour == pytest.approx(
        float(row["ondemand_usd_per_hour"]) * (1 - float(row["advisor_savings_pct"]) / 100)
    )


@requires_shared_prices
def test_negative_advisor_savings_is_not_used_as_a_spot_price():
    p = resolved_prices().price("p5.48xlarge", "ca-central-1")  # the data says -62 % savings there
    assert p.spot_basis == "none" and p.spot_usd_per_hour is None
    assert p.spot_or_ondemand_usd_per_hour == p.ondemand_usd_per_hour


@requires_shared_prices
def test_commitment_rates_keep_their_own_on_demand_reference():
    """2022 RI rates are only usable as a ratio (COMMITMENTS.md): they carry the on-demand rate of their date."""
    ri = {c.offer: c for c in resolved_prices().commitments("p4d.24xlarge", "us-east-1")}
    one_year = ri["reserved_1yr_no_upfront"]
    assert one_year.as_of == "2022-07-07" and one_year.reference_ondemand_usd_per_hour == pytest.approx(32.773)
    assert one_year.usd_per_hour / one_year.reference_ondemand_usd_per_hour == pytest.approx(0.62, abs=0.01)


@requires_shared_prices
def test_unknown_pair_has_no_price_and_typos_get_suggestions():
    assert resolved_prices().price("p4d.24xlarge", "xx-nowhere-1") is None
    assert "no prices for xx-nowhere-1" in resolved_prices().missing_price_reason("p4d.24xlarge", "xx-nowhere-1")
    assert "p4d.24xlarge" in resolved_prices().suggest("p4d.24xlrge")
