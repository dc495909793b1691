"""The `--price-file` option every command that shows money takes (same meaning as $GPULOAN_PRICE_FILE)."""

from __future__ import annotations

from stacks import catalog, pricebook


def add(parser) -> None:
    parser.add_argument(
        "--price-file", metavar="PATH", default=None,
        help=f"read prices from this file (gpuloan price JSON, the public aws_gpu_prices.csv, or a folder holding "
             f"it) instead of ${pricebook.ENV_PRICE_FILE} or the cache; see docs/prices.md")


def apply(args) -> None:
    """Make the option take effect before anything reads a price. Raises PriceSourceError for a bad file."""
    catalog.use_price_file(getattr(args, "price_file", None))
    catalog.book()  # read now, so a bad file is reported as such and not halfway through a command
