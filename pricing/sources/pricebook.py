"""Prices as gpuloan holds them: a price book per region, its file format, the cache, and where it comes from.

A price book is read from one of (first that applies):
1. a price file named on the command line (`--prices PATH`, also spelt `--price-file`),
2. the `GPULOAN_PRICE_FILE` environment variable,
3. the project's price file, `gpuloan-prices.json` beside `Pulumi.yaml` (found by walking up from the current
   folder, as the Pulumi CLI finds its project): what `gpuloan prices refresh -s STACK` writes, committed like a
   lockfile so that everyone and CI price a change with the same, versioned prices,
4. the per-user cache an older `gpuloan prices refresh --cache` filled (one file per region,
   `$XDG_CACHE_HOME/gpuloan/prices-<region>.json`, default `~/.cache/gpuloan`).
With none of them there is no price at all: callers show costs as unknown and say how to get prices. Nothing here
ever invents a price.

A price file is either the cache's JSON format (FORMAT below; the cache files are price files) or the public
table's CSV (`aws_gpu_prices.csv`, columns in its SOURCE.md), or a folder holding that CSV and optionally
`aws_gpu_commitment_prices.csv` (COMMITMENTS.md). Which CSV rows are used:
- on-demand: the *current* rows (sources other than the SkyPilot snapshot); where a region has none, the snapshot's;
- spot: the snapshot's observed spot/on-demand *ratio* applied to the current on-demand price (the snapshot
  predates AWS's 2025 price cut, so its absolute spot prices are stale, its ratios are not); without a snapshot
  row, the Spot Instance Advisor estimate (on-demand x (1 - savings)), labelled as an estimate; else no spot price;
- interruption frequency: the Spot Instance Advisor bucket (the simulator's interruption rate).

`commitments` hold Reserved Instance, Savings Plans and Capacity Block rates; `platform` holds per-region rates of
the non-GPU parts of a stack (EKS, NAT, EBS, KMS, CloudWatch, Lambda, system node types), each per its billing unit
(PLATFORM_UNITS) with its `source`. The public CSV has no platform rates: offline they come only from a user's
price file.

Stdlib only: the policy pack (guardrails/) imports it through pricing/sources/catalog.py.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pricing.sources.instance_types import InstanceType

FORMAT = "gpuloan-prices/1"
ENV_PRICE_FILE = "GPULOAN_PRICE_FILE"
PROJECT_PRICE_FILE = "gpuloan-prices.json"  # beside Pulumi.yaml, committed
PULUMI_PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")
# Set (to "0") by cost-diff for the base side: it must be priced by the head's file, never by its own.
ENV_PROJECT_PRICES = "GPULOAN_PROJECT_PRICES"
PUBLIC_PRICES_CSV = "aws_gpu_prices.csv"
PUBLIC_COMMITMENTS_CSV = "aws_gpu_commitment_prices.csv"
STALE_AFTER_DAYS = 30  # AWS changes GPU prices a few times a year; spot moves daily
FIX = ("run `gpuloan prices refresh -s STACK` (reads AWS prices with your credentials into "
       f"{PROJECT_PRICE_FILE} beside Pulumi.yaml; commit it) or point --prices / {ENV_PRICE_FILE} at a price "
       "file; see docs/prices.md")

_SKYPILOT = "skypilot-org/"


class PriceSourceError(ValueError):
    """A price file or cache entry that cannot be read (missing path, wrong format, bad value)."""


@dataclass(frozen=True)
class Rate:
    """One hourly rate and where it was read. Platform rates use PlatformRate (any unit); a price file's platform
    entry in this hourly shape (`usd_per_hour`) is still read, as unit "hour"."""

    usd_per_hour: float
    source: str
    as_of: str  # ISO date the rate was read or published


# The platform (non-GPU) rates a stack's cost needs, per region: key -> (unit, what it prices). The unit is the
# Price List's billing unit; a file giving another unit for a key is refused (an hourly rate read as per-month
# would be off 730 times). System node instance types are keyed `ec2:<instance type>` (unit hour).
PLATFORM_UNITS: dict[str, tuple[str, str]] = {
    "eks_cluster": ("hour", "EKS cluster (control plane), standard support"),
    "eks_extended_support": ("hour", "EKS extended support surcharge, added to eks_cluster past standard support"),
    "nat_gateway": ("hour", "NAT gateway"),
    "nat_gateway_data": ("GB", "NAT gateway data processed"),
    "ebs_gp3_storage": ("GB-month", "EBS gp3 volume storage"),
    "kms_key": ("month", "KMS customer managed key"),
    "cloudwatch_alarm": ("month", "CloudWatch standard-resolution metric alarm"),
    "cloudwatch_dashboard": ("month", "CloudWatch dashboard"),
    "cloudwatch_metric": ("month", "CloudWatch custom metric (Container Insights metrics are billed as these)"),
    "cloudwatch_logs_ingest": ("GB", "CloudWatch Logs ingestion (standard class)"),
    "lambda_request": ("request", "Lambda request"),
    "lambda_gb_second_arm64": ("GB-second", "Lambda duration, arm64"),
    "lambda_gb_second_x86_64": ("GB-second", "Lambda duration, x86_64"),
}
EC2_PLATFORM_PREFIX = "ec2:"


def platform_unit(key: str) -> str | None:
    """The unit a platform rate key must carry, or None for a key gpuloan does not know."""
    if key.startswith(EC2_PLATFORM_PREFIX) and len(key) > len(EC2_PLATFORM_PREFIX):
        return "hour"
    spec = PLATFORM_UNITS.get(key)
    return spec[0] if spec else None


@dataclass(frozen=True)
class PlatformRate:
    """One platform rate per unit (an hour, a GB, a request ...) and where it was read."""

    usd_per_unit: float
    unit: str
    source: str
    as_of: str


@dataclass(frozen=True)
class Price:
    instance_type: str
    region: str
    ondemand_usd_per_hour: float
    spot_usd_per_hour: float | None
    spot_basis: str  # "observed-median" (live), "observed-ratio", "advisor-estimate" or "none"
    interruption_bucket: str | None  # Spot Instance Advisor bucket, e.g. "<5%", ">20%"
    source: str = ""
    as_of: str = ""

    @property
    def spot_or_ondemand_usd_per_hour(self) -> float:
        return self.spot_usd_per_hour if self.spot_usd_per_hour is not None else self.ondemand_usd_per_hour


@dataclass(frozen=True)
class CommitmentRate:
    """A committed price of one instance-hour: a Reserved Instance term, a Savings Plan rate, a Capacity Block."""

    instance_type: str
    region: str
    offer: str  # reserved_1yr_no_upfront, reserved_3yr_no_upfront, savings_plan_..., capacity_block, ...
    usd_per_hour: float
    source: str
    as_of: str
    # the on-demand rate read at the same time (old figures are only usable as a ratio to it)
    reference_ondemand_usd_per_hour: float | None = None
    notes: str = ""


@dataclass
class RegionPrices:
    region: str
    source: str
    read_at: str  # ISO date or timestamp the prices were read
    prices: dict[str, Price] = field(default_factory=dict)
    not_offered: dict[str, str] = field(default_factory=dict)  # type -> why it has no price here
    commitments: dict[str, list[CommitmentRate]] = field(default_factory=dict)
    platform: dict[str, PlatformRate] = field(default_factory=dict)

    def to_json(self) -> dict:
        types: dict[str, dict] = {}
        for t, p in sorted(self.prices.items()):
            d = {k: v for k, v in asdict(p).items() if k not in ("instance_type", "region")}
            types[t] = d
        for t, reason in sorted(self.not_offered.items()):
            types[t] = {"offered": False, "reason": reason}
        for t, rates in sorted(self.commitments.items()):
            types.setdefault(t, {})["commitments"] = [
                {k: v for k, v in asdict(c).items() if k not in ("instance_type", "region")} for c in rates]
        return {"source": self.source, "read_at": self.read_at, "instance_types": types,
                "platform": {k: asdict(v) for k, v in sorted(self.platform.items())}}

    @classmethod
    def from_json(cls, region: str, d: dict, where: str) -> "RegionPrices":
        try:
            out = cls(region=region, source=str(d["source"]), read_at=str(d["read_at"]))
            for t, entry in (d.get("instance_types") or {}).items():
                at = f"{where}: regions.{region}.instance_types.{t}"
                if entry.get("offered") is False:
                    out.not_offered[t] = str(entry.get("reason") or "not offered in this region")
                elif "ondemand_usd_per_hour" in entry:
                    out.prices[t] = Price(
                        instance_type=t, region=region,
                        ondemand_usd_per_hour=_positive(entry["ondemand_usd_per_hour"], f"{at}.ondemand_usd_per_hour"),
                        spot_usd_per_hour=(None if entry.get("spot_usd_per_hour") is None else
                                           _positive(entry["spot_usd_per_hour"], f"{at}.spot_usd_per_hour")),
                        spot_basis=str(entry.get("spot_basis") or "none"),
                        interruption_bucket=entry.get("interruption_bucket"),
                        source=str(entry.get("source") or d["source"]), as_of=str(entry.get("as_of") or d["read_at"]))
                for j, c in enumerate(entry.get("commitments") or []):
                    out.commitments.setdefault(t, []).append(CommitmentRate(
                        instance_type=t, region=region, offer=str(c["offer"]),
                        usd_per_hour=_positive(c["usd_per_hour"], f"{at}.commitments[{j}].usd_per_hour"),
                        source=str(c["source"]), as_of=str(c["as_of"]),
                        reference_ondemand_usd_per_hour=c.get("reference_ondemand_usd_per_hour"),
                        notes=str(c.get("notes") or "")))
            for k, r in (d.get("platform") or {}).items():
                out.platform[k] = _platform_rate(k, r, f"{where}: regions.{region}.platform.{k}")
        except KeyError as err:
            raise PriceSourceError(f"{where}: regions.{region}: missing key {err}") from None
        return out


def _platform_rate(key: str, r: dict, at: str) -> PlatformRate:
    """`{usd_per_unit, unit, source, as_of}`; `{usd_per_hour, ...}` is the same with unit "hour"."""
    unit = platform_unit(key)
    if unit is None:
        known = ", ".join([*PLATFORM_UNITS, EC2_PLATFORM_PREFIX + "<instance type>"])
        raise PriceSourceError(f"{at}: unknown platform rate (known: {known})")
    if not isinstance(r, dict):
        raise PriceSourceError(f"{at}: expected {{usd_per_unit, unit, source, as_of}}")
    given_unit = str(r.get("unit") or ("hour" if "usd_per_hour" in r else ""))
    if given_unit != unit:
        raise PriceSourceError(f"{at}.unit: {key} is priced per {unit}, not {given_unit or '(missing)'}")
    value = r.get("usd_per_unit", r.get("usd_per_hour"))
    if value is None:
        raise PriceSourceError(f"{at}: missing key 'usd_per_unit'")
    if not str(r.get("source") or "").strip():
        raise PriceSourceError(f"{at}.source: say where the rate was read (an AWS page, an API, a contract)")
    return PlatformRate(_positive(value, f"{at}.usd_per_unit"), unit, str(r["source"]), str(r.get("as_of") or ""))


@dataclass
class PriceBook:
    origin: str | None  # the file or cache the book was read from; None: no price source at all
    regions: dict[str, RegionPrices] = field(default_factory=dict)
    instance_facts: dict[str, InstanceType] = field(default_factory=dict)  # types read with DescribeInstanceTypes

    def price(self, instance_type: str, region: str) -> Price | None:
        r = self.regions.get(region)
        return r.prices.get(instance_type) if r else None

    def commitments(self, instance_type: str, region: str) -> list[CommitmentRate]:
        r = self.regions.get(region)
        return list(r.commitments.get(instance_type, [])) if r else []

    def platform_rate(self, key: str, region: str) -> PlatformRate | None:
        r = self.regions.get(region)
        return r.platform.get(key) if r else None

    def covers(self, region: str) -> bool:
        return region in self.regions

    def regions_for(self, instance_type: str) -> list[str]:
        return sorted(n for n, r in self.regions.items() if instance_type in r.prices)

    def why_missing(self, instance_type: str, region: str) -> str:
        """One line: why `price()` is None for this pair, with the fix."""
        if self.origin is None:
            return f"no price source; {FIX}"
        r = self.regions.get(region)
        if r is None:
            return f"{self.origin} has no prices for {region}; {FIX}"
        if instance_type in r.not_offered:
            return f"{instance_type} is not offered in {region} ({r.not_offered[instance_type]}, read {r.read_at})"
        elsewhere = self.regions_for(instance_type)
        hint = f"; it is priced in {', '.join(elsewhere[:6])}" if elsewhere else ""
        return f"no price for {instance_type} in {region} in {self.origin}{hint}"

    def describe(self, region: str, today: dt.date | None = None) -> str:
        """The one line every cost table prints: where its prices come from and how old they are."""
        r = self.regions.get(region)
        if self.origin is None or r is None:
            why = "no price source" if self.origin is None else f"no {region} prices in {self.origin}"
            return f"prices: unknown ({why}); {FIX}"
        line = f"prices: {r.source}, as of {r.read_at[:10]} ({self.origin})"
        age = _age_days(r.read_at, today or dt.date.today())
        if age is not None and age > STALE_AFTER_DAYS and (self.origin.startswith("cache")
                                                           or self.origin.endswith(PROJECT_PRICE_FILE)):
            line += f"; {age} days old: run `gpuloan prices refresh -s STACK`"
        return line

    def merge(self, other: "PriceBook") -> None:
        self.regions.update(other.regions)
        self.instance_facts.update(other.instance_facts)

    def to_json(self) -> dict:
        return {"format": FORMAT,
                "regions": {n: r.to_json() for n, r in sorted(self.regions.items())},
                "instance_facts": {n: t.to_json() for n, t in sorted(self.instance_facts.items())}}

    @classmethod
    def from_json(cls, d: dict, where: str) -> "PriceBook":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise PriceSourceError(f"{where}: not a gpuloan price file (expected \"format\": \"{FORMAT}\")")
        book = cls(origin=where)
        for region, body in (d.get("regions") or {}).items():
            book.regions[region] = RegionPrices.from_json(region, body, where)
        for name, f in (d.get("instance_facts") or {}).items():
            try:
                book.instance_facts[name] = InstanceType(name, int(f["gpus"]), str(f["gpu_model"]),
                                                         float(f["gpu_memory_gib"]), str(f["cpu_architecture"]))
            except (KeyError, TypeError, ValueError) as err:
                raise PriceSourceError(f"{where}: instance_facts.{name}: {err}") from None
        return book


def _positive(value, where: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise PriceSourceError(f"{where}: {value!r} is not a number") from None
    if not v > 0:
        raise PriceSourceError(f"{where}: a price must be above zero, got {v}")
    return v


def _age_days(read_at: str, today: dt.date) -> int | None:
    try:
        return (today - dt.date.fromisoformat(read_at[:10])).days
    except ValueError:
        return None


# --- the public table (CSV) --------------------------------------------------------------------------------


def _float(value: str | None) -> float | None:
    return float(value) if value not in ("", None) else None


def read_public_csv(path: Path) -> PriceBook:
    """The public AWS GPU price table (see the module docstring for which rows are used)."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise PriceSourceError(f"cannot read {path}: {err.strerror}") from None
    need = {"instance_type", "region", "ondemand_usd_per_hour", "spot_usd_per_hour", "source", "price_snapshot",
            "advisor_savings_pct", "advisor_interruption_freq"}
    if rows and not need <= set(rows[0]):
        raise PriceSourceError(f"{path}: missing columns {', '.join(sorted(need - set(rows[0])))}")
    pairs: dict[tuple[str, str], dict[str, dict]] = {}
    for row in rows:
        kind = "snapshot" if row["source"].startswith(_SKYPILOT) else "current"
        pairs.setdefault((row["instance_type"], row["region"]), {})[kind] = row
    book = PriceBook(origin=str(path))
    for (t, region), found in sorted(pairs.items()):
        snapshot, current = found.get("snapshot"), found.get("current")
        base = current or snapshot
        ondemand = _float(base["ondemand_usd_per_hour"])
        if ondemand is None:
            continue
        spot, basis = None, "none"
        if snapshot is not None:
            snap_od, snap_spot = _float(snapshot["ondemand_usd_per_hour"]), _float(snapshot["spot_usd_per_hour"])
            if snap_od and snap_spot:
                spot, basis = ondemand * snap_spot / snap_od, "observed-ratio"
        if spot is None:
            savings = _float(base["advisor_savings_pct"])
            if savings is not None and 0 < savings < 100:
                spot, basis = ondemand * (1 - savings / 100), "advisor-estimate"
        bucket = base["advisor_interruption_freq"] or (snapshot or {}).get("advisor_interruption_freq") or None
        r = book.regions.setdefault(region, RegionPrices(
            region, f"public table {path.name} (on-demand from each row's source; spot = on-demand x the observed "
            "spot/on-demand ratio of the SkyPilot 2025 snapshot)", ""))
        r.read_at = max(r.read_at, _latest_date(base["price_snapshot"]))
        r.prices[t] = Price(t, region, ondemand, spot, basis, bucket, source=base["source"],
                            as_of=base["price_snapshot"])
    return book


def _latest_date(text: str) -> str:
    """The latest ISO date in a free-text snapshot column ("" when none): the region line's "read" date."""
    return max(re.findall(r"\d{4}-\d{2}-\d{2}", text or ""), default="")


def read_commitments_csv(path: Path, book: PriceBook) -> None:
    """Add the public commitment table's rates (COMMITMENTS.md) to `book`, as published: old Reserved Instance
    rates keep their own on-demand reference so a caller can use them as a ratio, never as today's price."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise PriceSourceError(f"cannot read {path}: {err.strerror}") from None
    for row in rows:
        usd = _float(row.get("usd_per_hour"))
        if usd is None:
            continue
        region = book.regions.setdefault(row["region"], RegionPrices(row["region"], f"public table {path.name}",
                                                                     row["snapshot_date"]))
        region.commitments.setdefault(row["instance_type"], []).append(CommitmentRate(
            instance_type=row["instance_type"], region=row["region"], offer=row["offer"], usd_per_hour=usd,
            source=row["source"], as_of=row["snapshot_date"],
            reference_ondemand_usd_per_hour=_float(row.get("ondemand_usd_per_hour")), notes=row.get("notes") or ""))


# --- files, cache and resolution ---------------------------------------------------------------------------


def load(path: Path) -> PriceBook:
    """A price file: the JSON format, the public CSV, or a folder holding the public CSV(s)."""
    if path.is_dir():
        csv_path = path / PUBLIC_PRICES_CSV
        if not csv_path.is_file():
            raise PriceSourceError(f"{path} is a folder without {PUBLIC_PRICES_CSV}")
        book = read_public_csv(csv_path)
        if (path / PUBLIC_COMMITMENTS_CSV).is_file():
            read_commitments_csv(path / PUBLIC_COMMITMENTS_CSV, book)
        book.origin = str(path)
        return book
    if not path.is_file():
        raise PriceSourceError(f"price file {path} does not exist")
    if path.suffix.lower() == ".csv":
        return read_public_csv(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise PriceSourceError(f"{path}: not readable as JSON ({err})") from None
    return PriceBook.from_json(doc, str(path))


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "gpuloan"


def cache_path(region: str, environ: dict[str, str] | None = None) -> Path:
    return cache_dir(environ) / f"prices-{region}.json"


def write_cache(book: PriceBook, environ: dict[str, str] | None = None) -> list[Path]:
    """One file per region of `book` (a region read again replaces its file); returns the files written."""
    written = []
    for region, body in book.regions.items():
        path = cache_path(region, environ)
        path.parent.mkdir(parents=True, exist_ok=True)
        one = PriceBook(origin=None, regions={region: body}, instance_facts=book.instance_facts)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(one.to_json(), indent=1, sort_keys=True) + "\n")
        tmp.replace(path)  # atomic: a reader never sees half a file
        written.append(path)
    return written


def load_cache(environ: dict[str, str] | None = None) -> PriceBook | None:
    folder = cache_dir(environ)
    files = sorted(folder.glob("prices-*.json")) if folder.is_dir() else []
    if not files:
        return None
    book = PriceBook(origin=f"cache {folder}")
    for f in files:
        book.merge(load(f))
    return book


def project_root(start: Path | None = None) -> Path | None:
    """The folder holding Pulumi.yaml at or above `start` (default: the current folder), as the Pulumi CLI finds
    its project; None outside a project."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / name).is_file() for name in PULUMI_PROJECT_FILES):
            return folder
    return None


def project_price_file(start: Path | None = None) -> Path | None:
    """The project's committed price file (PROJECT_PRICE_FILE beside Pulumi.yaml), if there is one."""
    root = project_root(start)
    path = root / PROJECT_PRICE_FILE if root else None
    return path if path and path.is_file() else None


def write_project_file(book: PriceBook, path: Path, today: dt.datetime | None = None) -> Path:
    """Write `book` into the project price file at `path`, keeping the regions of the file that `book` does not
    read again (one file prices every stack of the project). The file records when and how it was written; each
    region also keeps its own source and read date (what "prices as of ..." shows)."""
    merged = PriceBook(origin=None)
    if path.is_file():
        merged.merge(load(path))
    merged.merge(book)
    doc = merged.to_json()
    doc["written_at"] = (today or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc["written_by"] = "gpuloan prices refresh (AWS Price List, EC2 and Savings Plans APIs)"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file
    return path


def resolve(explicit: Path | None = None, environ: dict[str, str] | None = None,
            cwd: Path | None = None) -> PriceBook:
    """The price book in force: --prices, else $GPULOAN_PRICE_FILE, else the project's price file, else the
    cache, else an empty book (no price source)."""
    env = os.environ if environ is None else environ
    if explicit is not None:
        return load(Path(explicit))
    if env.get(ENV_PRICE_FILE):
        try:
            return load(Path(env[ENV_PRICE_FILE]))
        except PriceSourceError as err:
            raise PriceSourceError(f"{ENV_PRICE_FILE}: {err}") from None
    if env.get(ENV_PROJECT_PRICES) != "0":
        committed = project_price_file(cwd)
        if committed is not None:
            return load(committed)
    return load_cache(env) or PriceBook(origin=None)
