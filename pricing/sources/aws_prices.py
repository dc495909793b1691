"""Read GPU prices from AWS itself: one small adapter per API, boto3 clients injected (never built here).

- on-demand and Reserved Instance terms: the Price List Query API (`pricing` GetProducts; its endpoints are
  us-east-1 / eu-central-1 / ap-south-1 only, whatever region is priced);
- spot: EC2 DescribeSpotPriceHistory in the priced region (the latest price of each zone over the last days,
  median across the pool's zones);
- Savings Plans: `savingsplans` DescribeSavingsPlansOfferingRates;
- Capacity Blocks: EC2 DescribeCapacityBlockOfferings (the offers open now, as an effective hourly rate);
- whether a type exists in the region (DescribeInstanceTypeOfferings) and its GPU facts (DescribeInstanceTypes),
  for families newer than config/instance_types.py.

`refresh()` turns their answers into a pricing.sources.pricebook.PriceBook that `gpuloan prices refresh` caches. Each
failure has its own message: a throttled call, an empty Price List answer, a SKU without a price, a region
without the type. Spot, Savings Plans and Capacity Block gaps are not errors (many types have none); the
on-demand price is required.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from dataclasses import dataclass, field

from config.instance_types import InstanceType
from pricing.sources.pricebook import EC2_PLATFORM_PREFIX, CommitmentRate, PlatformRate, Price, PriceBook, RegionPrices

PRICE_LIST_SOURCE = "AWS Price List Query API (pricing:GetProducts)"
SPOT_SOURCE = "EC2 DescribeSpotPriceHistory"
SAVINGS_PLANS_SOURCE = "AWS Savings Plans DescribeSavingsPlansOfferingRates"
CAPACITY_BLOCK_SOURCE = "EC2 DescribeCapacityBlockOfferings"
SPOT_LOOKBACK_DAYS = 7
HOURS_PER_YEAR = 8760  # AWS amortises upfront fees over 365-day years
THROTTLE_CODES = {"ThrottlingException", "Throttling", "RequestLimitExceeded", "TooManyRequestsException"}


class PriceFetchError(Exception):
    """A price could not be read from AWS; the message says which and what to do."""


class Throttled(PriceFetchError):
    pass


class NotOffered(PriceFetchError):
    """The instance type does not exist in the region."""


class NoPrice(PriceFetchError):
    """AWS answered, but without a usable on-demand price."""


def _call(what: str, fn, **kwargs):
    """Call one AWS API; throttling becomes Throttled, other API errors a PriceFetchError naming the call."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    from botocore.parsers import ResponseParserError

    try:
        return fn(**kwargs)
    except NoCredentialsError:
        raise  # the caller says how to configure credentials or go offline
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code in THROTTLE_CODES:
            raise Throttled(
                f"{what}: AWS throttled the call ({code}); wait a minute and run "
                "`gpuloan prices refresh` again (the cache keeps the prices already read)"
            ) from None
        raise PriceFetchError(
            f"{what}: {code or 'error'}: {err.response.get('Error', {}).get('Message', err)}"
        ) from None
    except (BotoCoreError, ResponseParserError) as err:  # the latter: a non-AWS answer (proxy, emulator)
        raise PriceFetchError(f"{what}: {err}") from None


# --- Price List: on-demand and Reserved Instances ---------------------------------------------------------


def price_list_filters(instance_type: str, region: str) -> list[dict]:
    """The filters that leave one SKU: Linux, shared tenancy, no pre-installed software, used capacity
    ("Used" is the normal instance-hour; "UnusedCapacityReservation"/"AllocatedCapacityReservation" are
    reservation line items)."""
    return [
        {"Type": "TERM_MATCH", "Field": field, "Value": value}
        for field, value in (
            ("instanceType", instance_type),
            ("regionCode", region),
            ("operatingSystem", "Linux"),
            ("tenancy", "Shared"),
            ("preInstalledSw", "NA"),
            ("capacitystatus", "Used"),
        )
    ]


def price_list_products(client, service: str, filters: list[dict], what: str) -> list[dict]:
    """Every product of a Price List GetProducts query, all pages (NextToken), as parsed JSON."""
    out, token = [], None
    while True:
        kwargs = {"ServiceCode": service, "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100}
        if token:
            kwargs["NextToken"] = token
        page = _call(f"Price List for {what}", client.get_products, **kwargs)
        out += [json.loads(p) if isinstance(p, str) else p for p in page.get("PriceList", [])]
        token = page.get("NextToken")
        if not token:
            return out


@dataclass(frozen=True)
class ListedPrice:
    ondemand_usd_per_hour: float
    as_of: str  # the on-demand term's effective date
    reserved: list[CommitmentRate] = field(default_factory=list)


class PriceListReader:
    def __init__(self, pricing_client):
        self._client = pricing_client

    def products(self, instance_type: str, region: str) -> list[dict]:
        return price_list_products(
            self._client, "AmazonEC2", price_list_filters(instance_type, region), f"{instance_type} in {region}"
        )

    def price(self, instance_type: str, region: str) -> ListedPrice:
        products = self.products(instance_type, region)
        # Capacity Block SKUs share the attributes above and carry marketoption=CapacityBlock.
        products = [
            p
            for p in products
            if p.get("product", {}).get("attributes", {}).get("marketoption", "OnDemand") == "OnDemand"
        ]
        if not products:
            raise NoPrice(
                f"the Price List has no Linux/shared-tenancy SKU for {instance_type} in {region} "
                "(empty answer); check the type and region names"
            )
        if len(products) > 1:
            skus = ", ".join(sorted(p.get("product", {}).get("sku", "?") for p in products))
            raise NoPrice(
                f"the Price List has {len(products)} SKUs for {instance_type} in {region} ({skus}); "
                "refusing to guess which one is billed"
            )
        product = products[0]
        sku = product.get("product", {}).get("sku", "?")
        terms = product.get("terms", {})
        ondemand = [
            (t.get("effectiveDate", ""), d)
            for t in terms.get("OnDemand", {}).values()
            for d in t.get("priceDimensions", {}).values()
            if d.get("unit") == "Hrs"
        ]
        usd = [(date, float(d.get("pricePerUnit", {}).get("USD", "0"))) for date, d in ondemand]
        usd = [(date, v) for date, v in usd if v > 0]
        if not usd:
            raise NoPrice(
                f"the Price List SKU {sku} for {instance_type} in {region} has no on-demand USD hourly "
                "price (missing price)"
            )
        as_of, rate = usd[0]
        reserved = [
            r for t in terms.get("Reserved", {}).values() if (r := _reserved_rate(instance_type, region, t)) is not None
        ]
        return ListedPrice(rate, as_of[:10], reserved)


def _reserved_rate(instance_type: str, region: str, term: dict) -> CommitmentRate | None:
    attrs = term.get("termAttributes", {})
    years = {"1yr": 1, "3yr": 3}.get(attrs.get("LeaseContractLength", ""))
    option = attrs.get("PurchaseOption", "").lower().replace(" ", "_")  # no_upfront, partial_upfront, all_upfront
    if years is None or not option:
        return None
    hourly = upfront = 0.0
    for d in term.get("priceDimensions", {}).values():
        usd = float(d.get("pricePerUnit", {}).get("USD", "0"))
        if d.get("unit") == "Hrs":
            hourly += usd
        elif d.get("unit") == "Quantity":
            upfront += usd
    effective = hourly + upfront / (years * HOURS_PER_YEAR)
    if effective <= 0:
        return None
    klass = "" if attrs.get("OfferingClass", "standard") == "standard" else f"_{attrs['OfferingClass']}"
    return CommitmentRate(
        instance_type,
        region,
        f"reserved_{years}yr_{option}{klass}",
        round(effective, 6),
        PRICE_LIST_SOURCE,
        term.get("effectiveDate", "")[:10],
        notes=f"hourly {hourly} + upfront {upfront} over {years} year(s)",
    )


# --- Price List: platform rates (EKS, NAT, EBS, KMS, CloudWatch, Lambda) -----------------------------------

# key -> (service code, filters besides regionCode, usage type suffix, Price List unit). Usage types carry a
# region prefix ("USE1-NatGateway-Hours"; none in some regions), so the query narrows with CONTAINS and the answer
# is kept only where the usage type is the suffix itself or ends with "-" + suffix ("RegionalNatGateway-Hours"
# and "Lambda-GB-Second-ARM" are other products). Exactly one SKU must remain, as for instances.
PLATFORM_QUERIES: dict[str, tuple[str, tuple[tuple[str, str, str], ...], str, str]] = {
    "eks_cluster": ("AmazonEKS", (), "AmazonEKS-Hours:perCluster", "Hrs"),
    "eks_extended_support": ("AmazonEKS", (), "AmazonEKS-Hours:extendedSupport", "Hrs"),
    "nat_gateway": ("AmazonEC2", (("TERM_MATCH", "productFamily", "NAT Gateway"),), "NatGateway-Hours", "Hrs"),
    "nat_gateway_data": ("AmazonEC2", (("TERM_MATCH", "productFamily", "NAT Gateway"),), "NatGateway-Bytes", "GB"),
    "ebs_gp3_storage": (
        "AmazonEC2",
        (("TERM_MATCH", "productFamily", "Storage"), ("TERM_MATCH", "volumeApiName", "gp3")),
        "EBS:VolumeUsage.gp3",
        "GB-Mo",
    ),
    "kms_key": ("awskms", (), "KMS-Keys", "Keys"),
    "cloudwatch_alarm": ("AmazonCloudWatch", (), "CW:AlarmMonitorUsage", "Alarms"),
    "cloudwatch_dashboard": ("AmazonCloudWatch", (), "DashboardsUsageHour", "Dashboards"),
    "cloudwatch_metric": ("AmazonCloudWatch", (), "CW:MetricMonitorUsage", "Metrics"),
    "cloudwatch_logs_ingest": ("AmazonCloudWatch", (), "DataProcessing-Bytes", "GB"),
    "lambda_request": ("AWSLambda", (), "Request", "Requests"),
    "lambda_gb_second_x86_64": ("AWSLambda", (), "Lambda-GB-Second", "Lambda-GB-Second"),
    "lambda_gb_second_arm64": ("AWSLambda", (), "Lambda-GB-Second-ARM", "Lambda-GB-Second"),
}


def _usage_type_matches(usage_type: str, suffix: str) -> bool:
    return usage_type == suffix or usage_type.endswith("-" + suffix)


def platform_filters(key: str, region: str) -> list[dict]:
    _, extra, suffix, _ = PLATFORM_QUERIES[key]
    return (
        [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
        + [{"Type": t, "Field": f, "Value": v} for t, f, v in extra]
        + [{"Type": "CONTAINS", "Field": "usagetype", "Value": suffix}]
    )


def _first_paid_tier(dimensions: list[dict]) -> float | None:
    """The list price of the first tier that costs money (tiered items: CloudWatch, Lambda): free tiers are not
    subtracted and volume discounts not applied, so the estimate is an upper bound for small stacks."""
    paid = sorted(
        ((float(d.get("beginRange") or 0), float(d.get("pricePerUnit", {}).get("USD", "0"))) for d in dimensions),
        key=lambda x: x[0],
    )
    return next((usd for _, usd in paid if usd > 0), None)


class PlatformPriceReader:
    def __init__(self, pricing_client):
        self._client = pricing_client

    def rate(self, key: str, region: str) -> PlatformRate:
        from pricing.sources.pricebook import platform_unit

        service, _, suffix, unit = PLATFORM_QUERIES[key]
        what = f"{key} ({service} {suffix}) in {region}"
        products = [
            p
            for p in price_list_products(self._client, service, platform_filters(key, region), what)
            if _usage_type_matches(p.get("product", {}).get("attributes", {}).get("usagetype", ""), suffix)
        ]
        if not products:
            raise NoPrice(
                f"the Price List has no {service} product with usage type {suffix} in {region} (empty answer)"
            )
        if len(products) > 1:
            skus = ", ".join(sorted(p.get("product", {}).get("sku", "?") for p in products))
            raise NoPrice(f"the Price List has {len(products)} SKUs for {what} ({skus}); refusing to guess")
        product = products[0]
        sku = product.get("product", {}).get("sku", "?")
        terms = list(product.get("terms", {}).get("OnDemand", {}).values())
        dims = [d for t in terms for d in t.get("priceDimensions", {}).values()]
        # The unit names are the Price List's ("Hrs", "GB-Mo" ...); where a product spells it otherwise, its
        # dimensions are still one item's tiers (the usage type fixes what is billed).
        dims = [d for d in dims if d.get("unit") == unit] or dims
        usd = _first_paid_tier(dims)
        if usd is None:
            raise NoPrice(f"the Price List SKU {sku} for {what} has no on-demand USD price per {unit} (missing price)")
        as_of = (terms[0].get("effectiveDate", "") if terms else "")[:10]
        unit_of_key = platform_unit(key)
        if unit_of_key is None:  # never: PLATFORM_QUERIES lists platform rates gpuloan knows
            raise NoPrice(f"{key} is no platform rate gpuloan knows")
        return PlatformRate(usd, unit_of_key, f"{PRICE_LIST_SOURCE}: {service} {sku} ({suffix})", as_of)

    def instance_rate(self, instance_type: str, region: str) -> PlatformRate:
        """A non-GPU instance's on-demand hourly rate (the system nodes), keyed ec2:<type> in the price book."""
        listed = PriceListReader(self._client).price(instance_type, region)
        return PlatformRate(
            listed.ondemand_usd_per_hour, "hour", f"{PRICE_LIST_SOURCE}: AmazonEC2 {instance_type}", listed.as_of
        )


def refresh_platform(
    region: str, system_instance_types: list[str], *, pricing_client, keys: list[str] | None = None
) -> tuple[dict[str, PlatformRate], list[str]]:
    """The platform rates of `region` ({key: rate}) and one problem line per rate that could not be read."""
    reader = PlatformPriceReader(pricing_client)
    rates: dict[str, PlatformRate] = {}
    problems: list[str] = []
    for key in keys or list(PLATFORM_QUERIES):
        try:
            rates[key] = reader.rate(key, region)
        except PriceFetchError as err:
            problems.append(f"platform {key}: {err}")
    for t in system_instance_types:
        try:
            rates[EC2_PLATFORM_PREFIX + t] = reader.instance_rate(t, region)
        except PriceFetchError as err:
            problems.append(f"platform {EC2_PLATFORM_PREFIX}{t}: {err}")
    return rates, problems


# --- spot --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpotQuote:
    median_usd_per_hour: float
    min_usd_per_hour: float
    max_usd_per_hour: float
    zones: tuple[str, ...]
    as_of: str


class SpotHistoryReader:
    def __init__(self, ec2_client):
        self._client = ec2_client

    def quote(
        self,
        instance_type: str,
        zones: list[str] | None = None,
        now: dt.datetime | None = None,
        days: int = SPOT_LOOKBACK_DAYS,
    ) -> SpotQuote | None:
        """The latest Linux spot price of each zone (only `zones` when given) over the last `days`, and their
        median; None when no zone has one (no spot market for the type there)."""
        now = now or dt.datetime.now(dt.timezone.utc)
        latest: dict[str, tuple[dt.datetime, float]] = {}
        token = None
        while True:
            kwargs = {
                "InstanceTypes": [instance_type],
                "ProductDescriptions": ["Linux/UNIX"],
                "StartTime": now - dt.timedelta(days=days),
                "EndTime": now,
                "MaxResults": 1000,
            }
            if token:
                kwargs["NextToken"] = token
            page = _call(f"spot price history of {instance_type}", self._client.describe_spot_price_history, **kwargs)
            for item in page.get("SpotPriceHistory", []):
                az, ts, usd = item.get("AvailabilityZone"), item.get("Timestamp"), float(item.get("SpotPrice", 0))
                if zones and az not in zones or usd <= 0 or ts is None:
                    continue
                if az not in latest or ts > latest[az][0]:
                    latest[az] = (ts, usd)
            token = page.get("NextToken")
            if not token:
                break
        if not latest:
            return None
        prices = [usd for _, usd in latest.values()]
        newest = max(ts for ts, _ in latest.values())
        return SpotQuote(
            statistics.median(prices), min(prices), max(prices), tuple(sorted(latest)), newest.date().isoformat()
        )


# --- Savings Plans and Capacity Blocks ---------------------------------------------------------------------


class SavingsPlansReader:
    def __init__(self, savingsplans_client):
        self._client = savingsplans_client

    def rates(self, instance_type: str, region: str, today: str) -> list[CommitmentRate]:
        """Compute and EC2 Instance Savings Plans rates for Linux, shared tenancy (BoxUsage), one per plan
        type, term and payment option."""
        out: dict[str, CommitmentRate] = {}
        token = None
        while True:
            kwargs = {
                "savingsPlanTypes": ["Compute", "EC2Instance"],
                "products": ["EC2"],
                "serviceCodes": ["AmazonEC2"],
                "operations": ["RunInstances"],
                "filters": [
                    {"name": "instanceType", "values": [instance_type]},
                    {"name": "region", "values": [region]},
                    {"name": "tenancy", "values": ["shared"]},
                    {"name": "productDescription", "values": ["Linux/UNIX"]},
                ],
            }
            if token:
                kwargs["nextToken"] = token
            page = _call(
                f"Savings Plans rates of {instance_type} in {region}",
                self._client.describe_savings_plans_offering_rates,
                **kwargs,
            )
            for r in page.get("searchResults", []):
                if ":" not in r.get("usageType", "") or "BoxUsage" not in r.get("usageType", ""):
                    continue  # dedicated / host usage: not what a shared-tenancy node group runs on
                o = r.get("savingsPlanOffering", {})
                years = round(o.get("durationSeconds", 0) / (365 * 86400))
                plan = {"Compute": "compute", "EC2Instance": "ec2_instance"}.get(o.get("planType", ""), "other")
                payment = o.get("paymentOption", "").lower().replace(" ", "_")
                offer = f"savings_plan_{plan}_{years}yr_{payment}"
                usd = float(r.get("rate") or 0)
                if usd > 0 and offer not in out:
                    out[offer] = CommitmentRate(
                        instance_type,
                        region,
                        offer,
                        usd,
                        SAVINGS_PLANS_SOURCE,
                        today,
                        notes=f"offering {o.get('offeringId', '?')}",
                    )
            token = page.get("nextToken")
            if not token:
                return list(out.values())


def _paged(what: str, client, operation: str, **kwargs):
    """Every page of a paged EC2 call: botocore's paginator follows NextToken; each page's errors are reported as
    `_call` reports them (DescribeCapacityBlockOfferings and DescribeInstanceTypeOfferings are paged)."""
    pages = iter(client.get_paginator(operation).paginate(**kwargs))
    while True:
        page = _call(what, lambda: next(pages, None))
        if page is None:
            return
        yield page


class CapacityBlockReader:
    def __init__(self, ec2_client):
        self._client = ec2_client

    def cheapest(
        self, instance_type: str, region: str, today: str, hours: int = 24, count: int = 1
    ) -> CommitmentRate | None:
        """The lowest effective hourly rate per instance among the Capacity Block offers open now, or None."""
        offers = [
            o
            for page in _paged(
                f"Capacity Block offerings of {instance_type} in {region}",
                self._client,
                "describe_capacity_block_offerings",
                InstanceType=instance_type,
                InstanceCount=count,
                CapacityDurationHours=hours,
            )
            for o in page.get("CapacityBlockOfferings", [])
        ]
        best = None
        for o in offers:
            if o.get("CurrencyCode", "USD") != "USD":
                continue
            duration = o.get("CapacityBlockDurationHours") or hours
            usd = float(o.get("UpfrontFee") or 0) / (duration * (o.get("InstanceCount") or count))
            if usd > 0 and (best is None or usd < best[0]):
                best = (usd, o)
        if best is None:
            return None
        usd, o = best
        return CommitmentRate(
            instance_type,
            region,
            "capacity_block",
            round(usd, 6),
            CAPACITY_BLOCK_SOURCE,
            today,
            notes=f"upfront fee / (hours x instances) of offer {o.get('CapacityBlockOfferingId')} "
            f"in {o.get('AvailabilityZone')}; the OS fee while running is extra",
        )


# --- instance types ----------------------------------------------------------------------------------------


class InstanceTypeReader:
    def __init__(self, ec2_client):
        self._client = ec2_client

    def offered(self, instance_types: list[str], region: str) -> set[str]:
        return {
            o["InstanceType"]
            for page in _paged(
                f"instance type offerings in {region}",
                self._client,
                "describe_instance_type_offerings",
                LocationType="region",
                Filters=[{"Name": "instance-type", "Values": list(instance_types)}],
            )
            for o in page.get("InstanceTypeOfferings", [])
        }

    def facts(self, instance_types: list[str]) -> dict[str, InstanceType]:
        if not instance_types:
            return {}
        page = _call("DescribeInstanceTypes", self._client.describe_instance_types, InstanceTypes=list(instance_types))
        out = {}
        for it in page.get("InstanceTypes", []):
            gpus = (it.get("GpuInfo") or {}).get("Gpus") or []
            if not gpus:
                continue
            g = gpus[0]
            arch = "arm64" if "arm64" in (it.get("ProcessorInfo") or {}).get("SupportedArchitectures", []) else "x86_64"
            out[it["InstanceType"]] = InstanceType(
                it["InstanceType"],
                sum(x.get("Count", 0) for x in gpus),
                str(g.get("Name", "unknown")).upper(),
                round((g.get("MemoryInfo") or {}).get("SizeInMiB", 0) / 1024, 2),
                arch,
            )
        return out


# --- refresh -----------------------------------------------------------------------------------------------


@dataclass
class RefreshResult:
    book: PriceBook
    problems: list[str] = field(default_factory=list)  # prices that could not be read (the type is left out)
    notes: list[str] = field(default_factory=list)  # optional data that was not available


def refresh(
    region: str,
    instance_types: list[str],
    *,
    pricing_client,
    ec2_client,
    savingsplans_client=None,
    zones: list[str] | None = None,
    known_facts: dict[str, InstanceType] | None = None,
    now: dt.datetime | None = None,
) -> RefreshResult:
    """Read the prices of `instance_types` in `region` from AWS into a one-region PriceBook."""
    now = now or dt.datetime.now(dt.timezone.utc)
    today = now.date().isoformat()
    types = list(dict.fromkeys(instance_types))
    body = RegionPrices(region, f"AWS APIs ({PRICE_LIST_SOURCE}; {SPOT_SOURCE})", now.isoformat(timespec="seconds"))
    result = RefreshResult(PriceBook(origin="AWS", regions={region: body}))
    ec2_types = InstanceTypeReader(ec2_client)
    offered = ec2_types.offered(types, region)
    unknown = [t for t in types if t in offered and t not in (known_facts or {})]
    result.book.instance_facts.update(ec2_types.facts(unknown))
    price_list, spot = PriceListReader(pricing_client), SpotHistoryReader(ec2_client)
    plans = SavingsPlansReader(savingsplans_client) if savingsplans_client is not None else None
    blocks = CapacityBlockReader(ec2_client)
    for t in types:
        if t not in offered:
            body.not_offered[t] = "EC2 DescribeInstanceTypeOfferings does not list it in this region"
            result.problems.append(f"{t}: not offered in {region} (EC2 lists no such type there)")
            continue
        try:
            listed = price_list.price(t, region)
        except PriceFetchError as err:
            result.problems.append(f"{t}: {err}")
            continue
        quote = None
        try:
            quote = spot.quote(t, zones, now)
        except PriceFetchError as err:
            result.notes.append(f"{t}: no spot price ({err})")
        if quote is None:
            result.notes.append(
                f"{t}: no spot price history in {', '.join(zones) if zones else region}; "
                "spot is shown at the on-demand price"
            )
        body.prices[t] = Price(
            t,
            region,
            listed.ondemand_usd_per_hour,
            quote.median_usd_per_hour if quote else None,
            "observed-median" if quote else "none",
            None,
            source=PRICE_LIST_SOURCE
            + (f"; spot: {SPOT_SOURCE}, median of the latest price in {', '.join(quote.zones)}" if quote else ""),
            as_of=listed.as_of,
        )
        rates = list(listed.reserved)
        if plans is not None:
            try:
                rates += plans.rates(t, region, today)
            except PriceFetchError as err:
                result.notes.append(f"{t}: no Savings Plans rates ({err})")
        try:
            block = blocks.cheapest(t, region, today)
        except PriceFetchError as err:
            block = None
            result.notes.append(f"{t}: no Capacity Block offers read ({err})")
        if block is not None:
            rates.append(block)
        if rates:
            body.commitments[t] = rates
    return result
