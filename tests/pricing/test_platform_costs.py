"""The platform rows of the cost (EKS, NAT, system nodes, volumes, KMS, CloudWatch, Lambda): counted from the plan,
priced from the price book's `platform` section, unknown (never $0) without it, and counted in the headroom.

The rates below are test inputs, labelled `source: "test fixture"`: the shipped data has no platform rates and
gpuloan ships none.
"""

from __future__ import annotations

import json

import pytest
from conftest import SHARED_PRICES, requires_shared_prices, stack_config, resolved_prices

from gpuloan import preview
from pricing.cost_model import platform_costs
from stacks.capacity import launch_templates
from pricing.sources import pricebook

# key -> (test rate, unit): round numbers, clearly not prices anyone read anywhere
FIXTURE_RATES = {
    "eks_cluster": (1.0, "hour"),
    "nat_gateway": (2.0, "hour"),
    "nat_gateway_data": (0.5, "GB"),
    "ebs_gp3_storage": (0.25, "GB-month"),
    "kms_key": (3.0, "month"),
    "cloudwatch_alarm": (0.5, "month"),
    "cloudwatch_dashboard": (5.0, "month"),
    "cloudwatch_metric": (0.25, "month"),
    "cloudwatch_logs_ingest": (1.0, "GB"),
    "lambda_request": (0.000001, "request"),
    "lambda_gb_second_arm64": (0.00001, "GB-second"),
    "lambda_gb_second_x86_64": (0.00002, "GB-second"),
    "ec2:m7i.large": (0.5, "hour"),
    "ec2:m7i.xlarge": (1.0, "hour"),
}


def _price_file(tmp_path, rates=FIXTURE_RATES):
    book = pricebook.load(SHARED_PRICES)
    region = book.regions["us-east-1"]
    for key, (usd, unit) in rates.items():
        region.platform[key] = pricebook.PlatformRate(usd, unit, "test fixture", "2026-12-01")
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(book.to_json()))
    return path


@pytest.fixture
def fixture_prices(tmp_path, monkeypatch):
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(_price_file(tmp_path)))
    yield


def _doc(stack: str) -> dict:
    return preview.preview_document(resolved_prices(), stack, stack_config(stack))


def _rows(doc: dict) -> dict[str, dict]:
    return {r["item"]: r for r in doc["cost"]["platform"]}


@requires_shared_prices
def test_without_platform_rates_every_platform_row_is_unknown_and_headroom_an_upper_bound():
    doc = _doc("dev")
    cost = doc["cost"]
    assert cost["platform"] and all(r["monthly_usd"] is None for r in cost["platform"])
    assert set(cost["platform_unknown"]) == set(_rows(doc))
    assert cost["budget_headroom_is_upper_bound"] is True
    assert cost["budget_headroom_monthly_usd"] == pytest.approx(
        cost["budget_monthly_usd"] - cost["guaranteed_monthly_usd"]
    )


@requires_shared_prices
def test_platform_rows_are_quantity_times_the_price_file_rate(fixture_prices):
    doc = _doc("dev")
    rows = _rows(doc)
    resources = doc["resources"]
    count = lambda t: sum(1 for r in resources if r["type"] == t)  # noqa: E731
    cfg = stack_config("dev")
    floor_nodes = sum(p["guaranteed"]["nodes"] for p in cfg["gpuloan:pools"] if p.get("guaranteed"))
    system = cfg["gpuloan:cluster"]["system_nodes"]
    assert rows["EKS control plane"]["monthly_usd"] == pytest.approx(1.0 * 730)
    assert rows["NAT gateways"]["monthly_usd"] == pytest.approx(2.0 * 730 * count("aws:ec2/natGateway:NatGateway"))
    assert rows["NAT data processed"]["monthly_usd"] == pytest.approx(0.5 * 100)  # the default assumption
    assert rows["NAT data processed"]["price_model"] == "usage_assumption"
    assert rows["system nodes"]["monthly_usd"] == pytest.approx(0.5 * 730 * system["nodes"])
    assert rows["GPU floor root volumes (EBS gp3)"]["monthly_usd"] == pytest.approx(
        0.25 * floor_nodes * launch_templates.GPU_ROOT_VOLUME_GIB
    )
    assert rows["KMS keys"]["monthly_usd"] == pytest.approx(3.0 * count("aws:kms/key:Key"))
    assert rows["CloudWatch alarms"]["monthly_usd"] == pytest.approx(
        0.5 * count("aws:cloudwatch/metricAlarm:MetricAlarm")
    )
    assert rows["CloudWatch dashboard"]["monthly_usd"] == pytest.approx(5.0)
    runs = 730 * 60  # one a minute
    assert rows["Lambda requests"]["monthly_usd"] == pytest.approx(runs * 0.000001, abs=0.01)
    assert rows["Lambda duration (arm64)"]["monthly_usd"] == pytest.approx(runs * 0.25 * 2.0 * 0.00001, abs=0.01)
    assert all(r["source"] == "test fixture" for r in rows.values())
    cost = doc["cost"]
    platform = sum(r["monthly_usd"] for r in rows.values())
    assert cost["platform_unknown"] == [] and cost["budget_headroom_is_upper_bound"] is False
    assert cost["platform_known_monthly_usd"] == pytest.approx(platform, abs=0.02)
    assert cost["fixed_monthly_usd"] == pytest.approx(cost["guaranteed_monthly_usd"] + platform, abs=0.02)
    # The environment budget pays for the platform: the headroom counts it.
    assert cost["budget_headroom_monthly_usd"] == pytest.approx(
        cost["budget_monthly_usd"] - cost["guaranteed_monthly_usd"] - platform, abs=0.02
    )


@requires_shared_prices
def test_usage_assumptions_come_from_the_config(fixture_prices):
    cfg = stack_config("dev")
    cfg["gpuloan:cost_assumptions"] = {"nat_data_gb_per_month": 1000, "log_ingest_gb_per_month": 42}
    rows = _rows(preview.preview_document(resolved_prices(), "dev", cfg))
    assert rows["NAT data processed"]["monthly_usd"] == pytest.approx(0.5 * 1000)
    assert rows["CloudWatch Logs ingestion"]["monthly_usd"] == pytest.approx(1.0 * 42)


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            {"usd_per_unit": 0.1, "unit": "month", "source": "x", "as_of": "2026-01-01"},
            "eks_cluster is priced per hour",
        ),
        ({"usd_per_unit": 0.1, "unit": "hour", "source": "", "as_of": "2026-01-01"}, "say where the rate was read"),
        ({"usd_per_unit": 0, "unit": "hour", "source": "x", "as_of": "2026-01-01"}, "usd_per_unit"),
    ],
)
def test_a_bad_platform_rate_is_an_error_naming_the_key(tmp_path, entry, message):
    doc = {
        "format": pricebook.FORMAT,
        "regions": {"us-east-1": {"source": "s", "read_at": "2026-12-01", "platform": {"eks_cluster": entry}}},
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(pricebook.PriceSourceError, match="regions.us-east-1.platform.eks_cluster") as err:
        pricebook.load(path)
    assert message in str(err.value)


def test_an_unknown_platform_key_is_refused(tmp_path):
    doc = {
        "format": pricebook.FORMAT,
        "regions": {
            "us-east-1": {
                "source": "s",
                "read_at": "2026-12-01",
                "platform": {"eks_clustr": {"usd_per_hour": 1, "source": "x"}},
            }
        },
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(pricebook.PriceSourceError, match="unknown platform rate"):
        pricebook.load(path)


@requires_shared_prices
def test_platform_rates_round_trip_through_the_cache_format(tmp_path):
    path = _price_file(tmp_path, {"eks_cluster": (1.0, "hour"), "ec2:m7i.large": (0.5, "hour")})
    book = pricebook.load(path)
    assert book.platform_rate("eks_cluster", "us-east-1") == pricebook.PlatformRate(
        1.0, "hour", "test fixture", "2026-12-01"
    )
    assert book.platform_rate("ec2:m7i.large", "us-east-1").usd_per_unit == 0.5


def test_total_separates_known_from_unknown():
    rows = [
        platform_costs.PlatformCost("a", 1, "hour", "eks_cluster", 1.0, 730.0, "on_demand", "", "x"),
        platform_costs.PlatformCost("b", 1, "month", "kms_key", None, None, "on_demand", "", ""),
    ]
    assert platform_costs.total(rows) == (730.0, ["b"])


def test_tiny_per_unit_rates_survive_the_rounding():
    doc = preview.round_money(
        {"cost": {"usd_per_unit": 0.0000002, "monthly_usd": 12.345678, "elastic_spot_usd_per_hour": 1.23456789}}
    )
    assert doc["cost"] == {"usd_per_unit": 0.0000002, "monthly_usd": 12.35, "elastic_spot_usd_per_hour": 1.23457}


# --- issue 24 item 4: the control plane priced by the version's EKS support status ------------------------------

TODAY = __import__("datetime").date(2026, 12, 4)


def test_the_offline_calendar_says_which_versions_are_past_standard_support():
    assert platform_costs.version_support("1.33", TODAY).status == platform_costs.EXTENDED_SUPPORT
    assert platform_costs.version_support("1.34", TODAY).status == platform_costs.EXTENDED_SUPPORT  # ended 12-02
    s = platform_costs.version_support("1.35", TODAY)
    assert (s.status, s.end_of_standard_support) == (platform_costs.STANDARD_SUPPORT, "2027-03-27")
    assert "as of" in s.source and "offline" in s.source
    # Billed from the start of the day standard support ends (UTC).
    assert (
        platform_costs.version_support("1.35", __import__("datetime").date(2027, 3, 27)).status
        == platform_costs.EXTENDED_SUPPORT
    )
    assert platform_costs.version_support("1.39", TODAY).status == platform_costs.UNKNOWN_SUPPORT


def test_the_shipped_stacks_run_a_version_in_standard_support():
    for stack in ("dev", "prod"):
        cfg = preview.validated_config(resolved_prices(), stack_config(stack), stack)
        assert (
            platform_costs.version_support(platform_costs.cluster_version(cfg), TODAY).status
            == platform_costs.STANDARD_SUPPORT
        ), stack


@requires_shared_prices
def test_a_version_in_extended_support_adds_the_surcharge_row(tmp_path, monkeypatch):
    rates = {**FIXTURE_RATES, "eks_extended_support": (5.0, "hour")}
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(_price_file(tmp_path, rates)))
    try:
        config = stack_config("dev")
        config["gpuloan:cluster"]["kubernetes_version"] = "1.33"
        cfg = preview.validated_config(resolved_prices(), config, "dev")
        rows = {
            r.item: r
            for r in platform_costs.platform_costs(resolved_prices(), cfg, [{"type": "aws:eks/cluster:Cluster"}], TODAY)
        }
        assert rows["EKS control plane"].monthly_usd == 730.0
        assert rows["EKS extended support"].monthly_usd == 5.0 * 730
        assert "extended support since 2026-07-29" in rows["EKS extended support"].basis
        config["gpuloan:cluster"]["kubernetes_version"] = "1.35"
        cfg = preview.validated_config(resolved_prices(), config, "dev")
        rows = {
            r.item: r
            for r in platform_costs.platform_costs(resolved_prices(), cfg, [{"type": "aws:eks/cluster:Cluster"}], TODAY)
        }
        assert "EKS extended support" not in rows
        assert "standard support until 2027-03-27" in rows["EKS control plane"].basis
    finally:
        monkeypatch.undo()


class _EksVersions:
    """Answers DescribeClusterVersions like EKS (two pages), for the refresh's online read."""

    def __init__(self, versions):
        self.versions = versions

    def get_paginator(self, name):
        assert name == "describe_cluster_versions"
        outer = self

        class P:
            def paginate(self, clusterVersions):
                yield {"clusterVersions": [], "nextToken": "t"}
                yield {"clusterVersions": [v for v in outer.versions if v["clusterVersion"] in clusterVersions]}

        return P()


def test_the_online_read_takes_the_status_eks_reports_and_flags_a_stale_calendar():
    import datetime as dt

    from gpuloan.commands import prices as cmd_prices

    # Shaped like botocore's model of the answer: the deprecated `status` in its own lower-case enum beside
    # `versionStatus` (botocore data/eks service-2.json, ClusterVersionInformation).
    eks = _EksVersions(
        [
            {
                "clusterVersion": "1.35",
                "status": "standard-support",
                "versionStatus": "STANDARD_SUPPORT",
                "endOfStandardSupportDate": dt.datetime(2027, 3, 27, tzinfo=dt.timezone.utc),
            }
        ]
    )
    live = platform_costs.read_version_support(eks, "1.35")
    assert (live.status, live.end_of_standard_support) == ("STANDARD_SUPPORT", "2027-03-27")
    assert cmd_prices.version_support_lines(eks, "1.35") == [
        "Kubernetes 1.35: STANDARD_SUPPORT (end of standard support 2027-03-27; EKS DescribeClusterVersions)"
    ]
    moved = _EksVersions(
        [
            {
                "clusterVersion": "1.35",
                "versionStatus": "STANDARD_SUPPORT",
                "endOfStandardSupportDate": "2027-04-30T00:00:00Z",
            }
        ]
    )
    assert "update config/versions.py:EKS_VERSION_CALENDAR" in cmd_prices.version_support_lines(moved, "1.35")[-1]
    assert platform_costs.read_version_support(_EksVersions([]), "1.35").status == platform_costs.UNKNOWN_SUPPORT
    extended = _EksVersions(
        [
            {
                "clusterVersion": "1.32",
                "status": "extended-support",
                "versionStatus": "EXTENDED_SUPPORT",
                "endOfStandardSupportDate": "2026-03-23T00:00:00Z",
            }
        ]
    )
    assert platform_costs.read_version_support(extended, "1.32").status == platform_costs.EXTENDED_SUPPORT
