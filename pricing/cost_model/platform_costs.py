"""Monthly cost of the non-GPU parts of a stack: EKS control plane, NAT gateways, system nodes, GPU root volumes,
KMS keys, CloudWatch (alarms, dashboard, Container Insights metrics, logs) and the policy Lambda.

Quantities come from the plan itself (the resources the offline preview recorded: how many clusters, NAT
gateways, keys, alarms ...) and from the config (node counts, volume sizes, the policy's schedule); usage the
plan cannot know (NAT data, log GB, the policy's run time, metrics per node) comes from `cost_assumptions` in the
config and is labelled an assumption. Rates come from the price book's `platform` section (pricing/sources/pricebook.py):
`gpuloan prices refresh` reads them from the Price List; offline they exist only where the user's price file
gives them. A row without a rate is unknown (None), never $0. Free tiers are not subtracted (an upper bound).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass

from config import names, versions
from pricing.sources.catalog import Prices
from config.config import ExistingCluster, GpuLoanConfig, NewCluster
from pricing.cost_model.billing import HOURS_PER_MONTH
from pricing.sources.pricebook import EC2_PLATFORM_PREFIX

SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600


@dataclass(frozen=True)
class PlatformCost:
    item: str
    quantity: float  # in `unit`s per month
    unit: str
    rate_key: str  # the price book's platform key (docs/prices.md)
    usd_per_unit: float | None
    monthly_usd: float | None  # None: no rate for rate_key in the price source
    price_model: str  # "on_demand" (list price of what the plan declares) or "usage_assumption"
    basis: str  # how the quantity was counted, or which assumption it uses
    source: str  # where the rate was read ("" when unknown)

    def to_json(self) -> dict:
        return asdict(self)


def _count(resources: list[dict], type_: str) -> int:
    return sum(1 for r in resources if r["type"] == type_)


def _row(
    prices: Prices, cfg: GpuLoanConfig, item: str, quantity: float, unit: str, key: str, price_model: str, basis: str
) -> PlatformCost:
    rate = prices.platform_rate(key, cfg.region)
    usd = rate.usd_per_unit if rate else None
    monthly = None if usd is None else round(usd * quantity, 2)
    return PlatformCost(
        item, round(quantity, 4), unit, key, usd, monthly, price_model, basis, rate.source if rate else ""
    )


STANDARD_SUPPORT = "STANDARD_SUPPORT"
EXTENDED_SUPPORT = "EXTENDED_SUPPORT"
UNKNOWN_SUPPORT = "UNKNOWN"


@dataclass(frozen=True)
class VersionSupport:
    """A Kubernetes minor's EKS support status on a day, and where it was read."""

    version: str
    status: str  # STANDARD_SUPPORT | EXTENDED_SUPPORT | UNKNOWN (EKS DescribeClusterVersions' values)
    end_of_standard_support: str  # ISO date, "" when unknown
    source: str


def version_support(version: str, today: dt.date | None = None) -> VersionSupport:
    """Offline: the status from the dated release calendar in config/versions.py (extended support is billed from
    the start of the day standard support ends, UTC)."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    source = f"EKS release calendar in config/versions.py (as of {versions.EKS_VERSION_CALENDAR_AS_OF}), offline"
    dates = versions.EKS_VERSION_CALENDAR.get(version)
    if dates is None:
        return VersionSupport(version, UNKNOWN_SUPPORT, "", source)
    end_standard = dt.date.fromisoformat(dates[0])
    return VersionSupport(version, STANDARD_SUPPORT if today < end_standard else EXTENDED_SUPPORT, dates[0], source)


def read_version_support(eks_client, version: str) -> VersionSupport:
    """Online: the status EKS reports (DescribeClusterVersions, all pages)."""
    found = []
    for page in eks_client.get_paginator("describe_cluster_versions").paginate(clusterVersions=[version]):
        found += [v for v in page.get("clusterVersions", []) if v.get("clusterVersion") == version]
    if not found:
        return VersionSupport(version, UNKNOWN_SUPPORT, "", "EKS DescribeClusterVersions (version not listed)")
    v = found[0]
    end = v.get("endOfStandardSupportDate")
    end_iso = end.date().isoformat() if hasattr(end, "date") else str(end or "")[:10]
    # `versionStatus` (STANDARD_SUPPORT | EXTENDED_SUPPORT | UNSUPPORTED); `status` is deprecated in EKS's service
    # model and spells the same values in another enum (standard-support ...): read it only when the new one is absent.
    status = v.get("versionStatus") or str(v.get("status") or "").upper().replace("-", "_")
    return VersionSupport(version, str(status or UNKNOWN_SUPPORT), end_iso, "EKS DescribeClusterVersions")


def control_plane_rows(
    prices: Prices, cfg: GpuLoanConfig, clusters: int, support: VersionSupport
) -> list[PlatformCost]:
    """The cluster-hour at the standard rate, plus the extended-support surcharge when the version is past standard
    support (the Price List bills it as its own line item, AmazonEKS-Hours:extendedSupport, on top)."""
    hours = HOURS_PER_MONTH
    where = f"Kubernetes {support.version}: {support.source}"
    if support.status == STANDARD_SUPPORT:
        basis = f"{clusters} cluster × {hours} h, standard support until {support.end_of_standard_support} ({where})"
    elif support.status == EXTENDED_SUPPORT:
        basis = f"{clusters} cluster × {hours} h; extended support since {support.end_of_standard_support} ({where})"
    else:
        basis = f"{clusters} cluster × {hours} h; support status unknown ({where}): the surcharge may apply"
    rows = [_row(prices, cfg, "EKS control plane", clusters * hours, "hour", "eks_cluster", "on_demand", basis)]
    if support.status != STANDARD_SUPPORT:
        surcharge = _row(
            prices, cfg, "EKS extended support", clusters * hours, "hour", "eks_extended_support", "on_demand", basis
        )
        if support.status == UNKNOWN_SUPPORT:
            # Not known to be billed, not known to be free: no figure rather than $0 or a guess.
            surcharge = PlatformCost(**{**asdict(surcharge), "usd_per_unit": None, "monthly_usd": None, "source": ""})
        rows.append(surcharge)
    return rows


def cluster_version(cfg: GpuLoanConfig) -> str:
    return cfg.cluster.kubernetes_version if isinstance(cfg.cluster, (NewCluster, ExistingCluster)) else ""


def platform_costs(
    prices: Prices, cfg: GpuLoanConfig, resources: list[dict], today: dt.date | None = None
) -> list[PlatformCost]:
    """One row per platform item the plan declares (rows with nothing to price are left out)."""
    a = cfg.cost_assumptions
    rows: list[PlatformCost] = []
    hours = HOURS_PER_MONTH

    clusters = _count(resources, "aws:eks/cluster:Cluster")
    if clusters:
        rows += control_plane_rows(prices, cfg, clusters, version_support(cluster_version(cfg), today))
    nats = _count(resources, "aws:ec2/natGateway:NatGateway")
    if nats:
        rows.append(
            _row(
                prices,
                cfg,
                "NAT gateways",
                nats * hours,
                "hour",
                "nat_gateway",
                "on_demand",
                f"{nats} gateway(s) × {hours} h",
            )
        )
        rows.append(
            _row(
                prices,
                cfg,
                "NAT data processed",
                a.nat_data_gb_per_month,
                "GB",
                "nat_gateway_data",
                "usage_assumption",
                "cost_assumptions.nat_data_gb_per_month",
            )
        )
    system_gib = system_nodes = 0
    if isinstance(cfg.cluster, NewCluster):
        sn = cfg.cluster.system_nodes
        system_nodes = sn.nodes
        rows.append(
            _row(
                prices,
                cfg,
                "system nodes",
                sn.nodes * hours,
                "hour",
                EC2_PLATFORM_PREFIX + sn.instance_type,
                "on_demand",
                f"{sn.nodes}× {sn.instance_type} × {hours} h",
            )
        )
        system_gib = sn.nodes * names.SYSTEM_ROOT_VOLUME_GIB
    floor_nodes = sum(p.guaranteed.nodes for p in cfg.pools if p.guaranteed)
    gpu_gib = floor_nodes * names.GPU_ROOT_VOLUME_GIB
    if gpu_gib:
        rows.append(
            _row(
                prices,
                cfg,
                "GPU floor root volumes (EBS gp3)",
                gpu_gib,
                "GB-month",
                "ebs_gp3_storage",
                "on_demand",
                f"{floor_nodes} floor node(s) × {names.GPU_ROOT_VOLUME_GIB} GiB; elastic nodes' "
                "volumes live only while the nodes do",
            )
        )
    if system_gib:
        rows.append(
            _row(
                prices,
                cfg,
                "system node root volumes (EBS gp3)",
                system_gib,
                "GB-month",
                "ebs_gp3_storage",
                "on_demand",
                f"{system_nodes} node(s) × {names.SYSTEM_ROOT_VOLUME_GIB} GiB",
            )
        )
    keys = _count(resources, "aws:kms/key:Key")
    if keys:
        rows.append(
            _row(prices, cfg, "KMS keys", keys, "month", "kms_key", "on_demand", f"{keys} customer managed key(s)")
        )
    alarms = _count(resources, "aws:cloudwatch/metricAlarm:MetricAlarm")
    if alarms:
        rows.append(
            _row(
                prices,
                cfg,
                "CloudWatch alarms",
                alarms,
                "month",
                "cloudwatch_alarm",
                "on_demand",
                f"{alarms} alarm(s); metric-math alarms bill per metric they read, counted as one",
            )
        )
    boards = _count(resources, "aws:cloudwatch/dashboard:Dashboard")
    if boards:
        rows.append(
            _row(
                prices,
                cfg,
                "CloudWatch dashboard",
                boards,
                "month",
                "cloudwatch_dashboard",
                "on_demand",
                f"{boards} dashboard(s)",
            )
        )
    if _count(resources, "aws:eks/addon:Addon") and any(
        r["type"] == "aws:eks/addon:Addon" and r["inputs"].get("addonName") == "amazon-cloudwatch-observability"
        for r in resources
    ):
        nodes = floor_nodes + (cfg.cluster.system_nodes.nodes if isinstance(cfg.cluster, NewCluster) else 0)
        metrics = nodes * a.container_insights_metrics_per_node
        rows.append(
            _row(
                prices,
                cfg,
                "Container Insights metrics",
                metrics,
                "month",
                "cloudwatch_metric",
                "usage_assumption",
                f"{nodes} always-up node(s) × cost_assumptions.container_insights_metrics_per_node",
            )
        )
    if _count(resources, "aws:cloudwatch/logGroup:LogGroup"):
        rows.append(
            _row(
                prices,
                cfg,
                "CloudWatch Logs ingestion",
                a.log_ingest_gb_per_month,
                "GB",
                "cloudwatch_logs_ingest",
                "usage_assumption",
                "cost_assumptions.log_ingest_gb_per_month",
            )
        )
    for fn in (r for r in resources if r["type"] == "aws:lambda/function:Function"):
        runs = SECONDS_PER_MONTH / (60 * cfg.policy.schedule_minutes)
        arch = (fn["inputs"].get("architectures") or ["x86_64"])[0]
        memory_gb = float(fn["inputs"].get("memorySize") or 128) / 1024
        rows.append(
            _row(
                prices,
                cfg,
                "Lambda requests",
                runs,
                "request",
                "lambda_request",
                "on_demand",
                f"one run every {cfg.policy.schedule_minutes} min",
            )
        )
        rows.append(
            _row(
                prices,
                cfg,
                f"Lambda duration ({arch})",
                runs * memory_gb * a.policy_duration_ms / 1000,
                "GB-second",
                f"lambda_gb_second_{arch}",
                "usage_assumption",
                f"{runs:,.0f} runs × {memory_gb:g} GB × cost_assumptions.policy_duration_ms",
            )
        )
    return rows


def total(rows: list[PlatformCost]) -> tuple[float, list[str]]:
    """The known part of the platform cost and the items whose rate is unknown."""
    known = round(sum(r.monthly_usd for r in rows if r.monthly_usd is not None), 2)
    return known, [r.item for r in rows if r.monthly_usd is None]
