"""The `--prices` option (also spelt `--price-file`) every command that shows money takes (same meaning as
$GPULOAN_PRICE_FILE; without either, the project's gpuloan-prices.json beside Pulumi.yaml, else the cache, else the
price snapshot shipped in the package)."""

from __future__ import annotations

from pricing.sources import catalog, pricebook


def add(parser) -> None:
    parser.add_argument(
        "--prices",
        "--price-file",
        dest="price_file",
        metavar="PATH",
        default=None,
        help=f"read prices from this file (gpuloan price JSON, the public aws_gpu_prices.csv, or a folder holding "
        f"it) instead of ${pricebook.ENV_PRICE_FILE}, the project's {pricebook.PROJECT_PRICE_FILE}, the "
        "cache or the snapshot shipped in the package; see docs/prices.md",
    )


def apply(args) -> catalog.Prices:
    """The prices the command passes down, read once here (so a bad file is reported as such and not halfway through
    a command). Raises PriceSourceError for a bad file."""
    return catalog.Prices.resolve(getattr(args, "price_file", None))
