"""One place that answers "how many GPUs does this instance type have" and "what does it cost per hour here".

Instance facts come from the hand-written table in config/instance_types.py (offline, from AWS's specification
page), then from facts cached by `gpuloan prices refresh` (EC2 DescribeInstanceTypes) for newer families.
Prices come from the price book in force (pricing/sources/pricebook.py: --price-file, $GPULOAN_PRICE_FILE, or the cache
filled from AWS); with none, `price()` is None and callers show the cost as unknown with `missing_price_reason()`.

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
    one process never see each other's prices. Method names are the old module functions' (`catalog.price(t, r)`
    is `prices.price(t, r)`)."""

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
        return self.with_instance_prices(cfg.region, {t: (p.ondemand_usd_per_hour, p.spot_usd_per_hour, p.source)
                                                      for t, p in cfg.instance_prices.items()})

    def with_instance_prices(self, region: str, given: Mapping[str, tuple[float, float | None, str]]) -> Prices:
        own = {(t, region): Price(t, region, ondemand, spot, "user-config" if spot else "none", None,
                                  source=f"config gpuloan:instance_prices ({source})", as_of="")
               for t, (ondemand, spot, source) in given.items()}
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


_explicit_file: Path | None = None
_book: pricebook.PriceBook | None = None
# (instance type, region) -> Price from the config's `instance_prices` (the user's own, with a source)
_config_prices: dict[tuple[str, str], Price] = {}


def current() -> Prices:
    """The module-level state below as a Prices (transitional, issue 34: for the callers not yet handed a Prices)."""
    return Prices(book(), dict(_config_prices))


def use_config_prices(region: str, prices: dict[str, tuple[float, float | None, str]]) -> None:
    """Prices a stack config gives for types the price source lacks (replacing those of a config read before)."""
    _config_prices.clear()
    for t, (ondemand, spot, source) in prices.items():
        _config_prices[(t, region)] = Price(t, region, ondemand, spot, "user-config" if spot else "none", None,
                                            source=f"config gpuloan:instance_prices ({source})", as_of="")


def use_price_file(path: Path | str | None) -> None:
    """Read prices from this file from now on (the commands' --price-file); None: back to env var / cache."""
    global _explicit_file, _book
    _explicit_file = Path(path) if path else None
    _book = None


def reset() -> None:
    """Forget the loaded price book (the environment or the cache changed)."""
    global _book
    _book = None


def book() -> pricebook.PriceBook:
    """The price book in force, read once. Raises PriceSourceError for a price file that cannot be read."""
    global _book
    if _book is None:
        _book = pricebook.resolve(_explicit_file)
    return _book


def instance_types() -> dict[str, InstanceType]:
    return facts_table.known(book().instance_facts)


def lookup(name: str) -> InstanceType | None:
    return KNOWN.get(name) or facts_table.lookup(name, book().instance_facts)


def suggest(name: str, n: int = 3) -> list[str]:
    """Close matches for a mistyped instance type (for error messages)."""
    return facts_table.suggest(name, book().instance_facts, n)


def price(instance_type: str, region: str) -> Price | None:
    """The hourly price of one instance in a region (the price source's, else the config's own), or None."""
    return book().price(instance_type, region) or _config_prices.get((instance_type, region))


def commitments(instance_type: str, region: str) -> list[CommitmentRate]:
    """Committed rates (Reserved Instance terms, Savings Plans, Capacity Blocks) the price source holds."""
    return book().commitments(instance_type, region)


def prices_cover(region: str) -> bool:
    """True when the price source has prices for this region (so a missing type there is a real gap)."""
    return book().covers(region)


def regions_for(instance_type: str) -> list[str]:
    return book().regions_for(instance_type)


def missing_price_reason(instance_type: str, region: str) -> str:
    return book().why_missing(instance_type, region)


def price_source(region: str) -> str:
    """The line a cost table prints under itself: source and date of its prices, or how to get prices."""
    return book().describe(region)
