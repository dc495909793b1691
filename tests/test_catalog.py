"""The price catalog: which rows it reads, and that every GPU model in the data is classified."""

from __future__ import annotations

import csv

import pytest
from conftest import REPO

from stacks import catalog


def _rows():
    with (REPO / "data" / "prices" / "aws_gpu_prices.csv").open() as f:
        return list(csv.DictReader(f))


def test_every_gpu_model_in_the_data_has_an_architecture():
    models = {r["gpu_model"] for r in _rows()}
    unknown = sorted(m for m in models if m not in catalog.GPU_ARCHITECTURE)
    assert unknown == []


def test_graviton_gpu_types_are_arm64_and_others_x86():
    assert catalog.lookup("g5g.xlarge").cpu_architecture == "arm64"
    assert catalog.lookup("g5g.xlarge").is_nvidia
    assert catalog.lookup("g5.xlarge").cpu_architecture == "x86_64"
    assert not catalog.lookup("g4ad.xlarge").is_nvidia


def test_on_demand_uses_the_current_row_and_spot_the_snapshot_ratio():
    rows = [r for r in _rows() if r["instance_type"] == "p4d.24xlarge" and r["region"] == "us-east-1"]
    current = next(r for r in rows if not r["source"].startswith("skypilot"))
    snap = next(r for r in rows if r["source"].startswith("skypilot"))
    p = catalog.price("p4d.24xlarge", "us-east-1")
    assert p.ondemand_usd_per_hour == float(current["ondemand_usd_per_hour"])  # 2026 price, after the 2025 cut
    ratio = float(snap["spot_usd_per_hour"]) / float(snap["ondemand_usd_per_hour"])
    assert p.spot_usd_per_hour == pytest.approx(p.ondemand_usd_per_hour * ratio)
    assert p.spot_basis == "observed-ratio"


def test_region_without_snapshot_falls_back_to_the_advisor_estimate():
    p = catalog.price("p4d.24xlarge", "eu-central-1")
    row = next(r for r in _rows() if r["instance_type"] == "p4d.24xlarge" and r["region"] == "eu-central-1")
    assert p.spot_basis == "advisor-estimate"
    assert p.spot_usd_per_hour == pytest.approx(float(row["ondemand_usd_per_hour"]) * (1 - float(row["advisor_savings_pct"]) / 100))


def test_negative_advisor_savings_is_not_used_as_a_spot_price():
    p = catalog.price("p5.48xlarge", "ca-central-1")  # the data says -62 % savings there
    assert p.spot_basis == "none" and p.spot_usd_per_hour is None
    assert p.spot_or_ondemand_usd_per_hour == p.ondemand_usd_per_hour


def test_unknown_pair_has_no_price_and_typos_get_suggestions():
    assert catalog.price("p4d.24xlarge", "xx-nowhere-1") is None
    assert "p4d.24xlarge" in catalog.suggest("p4d.24xlrge")
