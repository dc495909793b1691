"""One place that answers "how many GPUs does this instance type have" and "what does it cost per hour here".

Instance facts come from the hand-written table in config/instance_types.py (offline, from AWS's specification
page), then from facts cached by `gpuloan prices refresh` (EC2 DescribeInstanceTypes) for newer families.
Prices come from the price book in force (pricing/sources/pricebook.py: --price-file, $GPULOAN_PRICE_FILE, or the cache
filled from AWS); with none, `price()` is None and callers show the cost as unknown with `missing_price_reason()`.

Stdlib only: the policy pack (guardrails/) imports it.
"""

from __future__ import annotations

from pathlib import Path

from config import instance_types as facts_table
from config.instance_types import GPU_ARCHITECTURE, KNOWN, InstanceType  # noqa: F401  (re-exported)
from pricing.sources import pricebook
from pricing.sources.pricebook import CommitmentRate, Price, PriceSourceError  # noqa: F401  (re-exported)

_explicit_file: Path | None = None
_book: pricebook.PriceBook | None = None
# (instance type, region) -> Price from the config's `instance_prices` (the user's own, with a source)
_config_prices: dict[tuple[str, str], Price] = {}


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
