"""GPU instance catalog and prices, read from the copy of the price data in data/prices/.

One place answers "how many GPUs does this instance type have" and "what does it cost per hour here".
Which rows are used (see data/prices/SOURCE.md):

- on-demand: the *current* rows (Karpenter's 2026 table for us-east-1, instances.vantage.sh elsewhere);
  where a region has no current row, the SkyPilot snapshot's on-demand price.
- spot: the SkyPilot snapshot's observed spot/on-demand *ratio* applied to the current on-demand price
  (the snapshot predates AWS's 2025 price cut, so its absolute spot prices are stale, its ratios are not);
  where the snapshot has no row, the Spot Instance Advisor estimate (on-demand x (1 - savings)), labelled
  as an estimate; where neither exists, no spot price (callers fall back to on-demand and say so).
"""

from __future__ import annotations

import csv
import difflib
import functools
from dataclasses import dataclass
from pathlib import Path

PRICES_CSV = Path(__file__).resolve().parent.parent / "data" / "prices" / "aws_gpu_prices.csv"
PRICE_SOURCE = (
    "data/prices/aws_gpu_prices.csv: on-demand from Karpenter's 2026-07-20 table (us-east-1) or "
    "instances.vantage.sh 2026-01-21; spot = on-demand x observed spot/on-demand ratio (SkyPilot catalog, 2025)"
)

_SKYPILOT = "skypilot-org/"

# GPU architecture per GPU model as the price data names it; CUDA support rules key on the architecture.
GPU_ARCHITECTURE = {
    "K80": "kepler",
    "M60": "maxwell",
    "V100": "volta",
    "T4": "turing",
    "T4G": "turing",
    "A10G": "ampere",
    "A100": "ampere",
    "L4": "ada",
    "L40S": "ada",
    "H100": "hopper",
    "H200": "hopper",
    "B200": "blackwell",
    "B300": "blackwell",
    "RTX-PRO-SERVER-6000": "blackwell",
    "RTX-PRO-4500": "blackwell",
    "RADEON-PRO-V520": "amd",
    "GAUDI-HL-205": "gaudi",
}


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: float

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def architecture(self) -> str:
        return GPU_ARCHITECTURE.get(self.gpu_model, "unknown")

    @property
    def cpu_architecture(self) -> str:
        """arm64 for Graviton GPU instances (g5g), x86_64 otherwise."""
        return "arm64" if self.family.endswith("g") and self.family.startswith("g5") else "x86_64"

    @property
    def is_nvidia(self) -> bool:
        return self.architecture not in ("amd", "gaudi", "unknown")


@dataclass(frozen=True)
class Price:
    instance_type: str
    region: str
    ondemand_usd_per_hour: float
    spot_usd_per_hour: float | None
    spot_basis: str  # "observed-ratio", "advisor-estimate" or "none"
    interruption_bucket: str | None  # Spot Instance Advisor bucket, e.g. "<5%", ">20%"

    @property
    def spot_or_ondemand_usd_per_hour(self) -> float:
        return self.spot_usd_per_hour if self.spot_usd_per_hour is not None else self.ondemand_usd_per_hour


def _float(value: str) -> float | None:
    return float(value) if value not in ("", None) else None


@functools.lru_cache(maxsize=1)
def _rows() -> tuple[dict[str, str], ...]:
    with PRICES_CSV.open(newline="") as f:
        return tuple(csv.DictReader(f))


@functools.lru_cache(maxsize=1)
def instance_types() -> dict[str, InstanceType]:
    out: dict[str, InstanceType] = {}
    for row in _rows():
        out.setdefault(
            row["instance_type"],
            InstanceType(row["instance_type"], int(row["gpus"]), row["gpu_model"], float(row["gpu_memory_gib"] or 0)),
        )
    return out


def lookup(name: str) -> InstanceType | None:
    return instance_types().get(name)


def suggest(name: str, n: int = 3) -> list[str]:
    """Close matches for a mistyped instance type (for error messages)."""
    return difflib.get_close_matches(name, sorted(instance_types()), n=n, cutoff=0.6)


@functools.lru_cache(maxsize=None)
def price(instance_type: str, region: str) -> Price | None:
    """The hourly price of one instance in a region, or None when the data has no row for the pair."""
    snapshot = current = None
    for row in _rows():
        if row["instance_type"] != instance_type or row["region"] != region:
            continue
        if row["source"].startswith(_SKYPILOT):
            snapshot = row
        else:
            current = row
    if snapshot is None and current is None:
        return None
    base = current or snapshot
    ondemand = _float(base["ondemand_usd_per_hour"])
    if ondemand is None:
        return None
    spot: float | None = None
    basis = "none"
    if snapshot is not None:
        snap_od, snap_spot = _float(snapshot["ondemand_usd_per_hour"]), _float(snapshot["spot_usd_per_hour"])
        if snap_od and snap_spot:
            spot, basis = ondemand * snap_spot / snap_od, "observed-ratio"
    if spot is None:
        savings = _float(base["advisor_savings_pct"])
        if savings is not None and 0 < savings < 100:
            spot, basis = ondemand * (1 - savings / 100), "advisor-estimate"
    bucket = base["advisor_interruption_freq"] or (snapshot or {}).get("advisor_interruption_freq") or None
    return Price(instance_type, region, ondemand, spot, basis, bucket)


def regions_for(instance_type: str) -> list[str]:
    return sorted({r["region"] for r in _rows() if r["instance_type"] == instance_type})
