"""One place that answers "how many GPUs does this instance type have" and "what does it cost per hour here".

Instance facts come from the hand-written table in config/instance_types.py (offline, from AWS's specification
page), then from facts cached by `gpuloan prices refresh` (EC2 DescribeInstanceTypes) for newer families.
Prices come from the price book in force (pricing/sources/pricebook.py: --price-file, $GPULOAN_PRICE_FILE, or the cache
filled from AWS), held by a `Prices` that each entry point (a command, the Pulumi program, a script) builds once and
passes down; nothing here is module state. With no price, `price()` is None and callers show the cost as unknown
with `missing_price_reason()`.

Stdlib only: the policy pack (guardrails/) imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from config import instance_types as facts_table
from config.instance_types import GPU_ARCHITECTURE, KNOWN, InstanceType  # noqa: F401  (re-exported)
from pricing.sources import pricebook
from pricing.sources.pricebook import CommitmentRate, Price, PriceSourceError  # noqa: F401  (re-exported)

if TYPE_CHECKING:  # annotations only: the policy pack imports this module without pydantic
    from config.config import GpuLoanConfig


@dataclass(frozen=True)
class Prices:
    """The prices in force: one price book (pricebook.resolve: --prices, $GPULOAN_PRICE_FILE, the project's file,
    the cache, the shipped snapshot) plus a config's own `instance_prices` for the types the book lacks. Built once
    at the edge (a command, the Pulumi program, a benchmark script: `Prices.resolve(...)`, then
    `.with_config(cfg)`) and passed down as an argument: nothing here is global, so two stacks or two price files in
    one process never see each other's prices."""

    book: pricebook.PriceBook
    # (instance type, region) -> Price from a config's `instance_prices` (the user's own, with a source)
    config_prices: Mapping[tuple[str, str], Price] = field(default_factory=dict)

    @classmethod
    def resolve(cls, price_file: Path | str | None = None, environ: dict[str, str] | None = None) -> Prices:
        """The book in force for a price file named on the command line (None: env var, project file, cache,
        snapshot). Raises PriceSourceError for a price file that cannot be read."""
        return cls(pricebook.resolve(Path(price_file) if price_file else None, environ))

    def with_config(self, cfg: GpuLoanConfig) -> Prices:
        """These prices plus the config's `instance_prices` (replacing those of another config)."""
        return self.with_instance_prices(
            cfg.region,
            {t: (p.ondemand_usd_per_hour, p.spot_usd_per_hour, p.source) for t, p in cfg.instance_prices.items()},
        )

    def with_instance_prices(self, region: str, given: Mapping[str, tuple[float, float | None, str]]) -> Prices:
        own = {
            (t, region): Price(
                t,
                region,
                ondemand,
                spot,
                "user-config" if spot else "none",
                None,
                source=f"config gpuloan:instance_prices ({source})",
                as_of="",
            )
            for t, (ondemand, spot, source) in given.items()
        }
        return replace(self, config_prices=own)

    @property
    def origin(self) -> str | None:
        """Where the book was read; None: no price source at all."""
        return self.book.origin

    def instance_types(self) -> dict[str, InstanceType]:
        return facts_table.known(self.book.instance_facts)

    def lookup(self, name: str) -> InstanceType | None:
        return facts_table.lookup(name, self.book.instance_facts)

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """Close matches for a mistyped instance type (for error messages)."""
        return facts_table.suggest(name, self.book.instance_facts, n)

    def price(self, instance_type: str, region: str) -> Price | None:
        """The hourly price of one instance in a region (the book's, else the config's own), or None."""
        return self.book.price(instance_type, region) or self.config_prices.get((instance_type, region))

    def commitments(self, instance_type: str, region: str) -> list[CommitmentRate]:
        """Committed rates (Reserved Instance terms, Savings Plans, Capacity Blocks) the book holds."""
        return self.book.commitments(instance_type, region)

    def platform_rate(self, key: str, region: str) -> pricebook.PlatformRate | None:
        return self.book.platform_rate(key, region)

    def prices_cover(self, region: str) -> bool:
        """True when the book has prices for this region (so a missing type there is a real gap)."""
        return self.book.covers(region)

    def regions_for(self, instance_type: str) -> list[str]:
        return self.book.regions_for(instance_type)

    def missing_price_reason(self, instance_type: str, region: str) -> str:
        return self.book.why_missing(instance_type, region)

    def price_source(self, region: str) -> str:
        """The line a cost table prints under itself: source and date of its prices, or how to get prices."""
        return self.book.describe(region)
