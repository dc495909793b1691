"""Generate the offline price snapshot shipped inside the package (pricing/sources/snapshot/), as Karpenter ships a
generated price table: the one copy of prices the repository carries, so that `gpuloan` prints dollars on a machine
that has neither a price file nor AWS credentials (docs/prices.md, "The snapshot shipped with gpuloan").

The snapshot is the public price tables (../shared/data/prices: aws_gpu_prices.csv and
aws_gpu_commitment_prices.csv, provenance in their SOURCE.md and COMMITMENTS.md) read by the same reader as
`--prices ../shared/data/prices` (pricing/sources/pricebook.py), so it prices every type exactly as that folder
does; it adds the provenance, the inputs' checksums and the date. Nothing is typed in by hand.

    .venv/bin/python scripts/make_price_snapshot.py            # rewrites pricing/sources/snapshot/...
    .venv/bin/python scripts/make_price_snapshot.py --check    # exit 1 if the shipped snapshot is not current
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import hashlib  # noqa: E402
import json  # noqa: E402

from pricing.sources import pricebook  # noqa: E402

DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "prices"
# The tables and the notes that say where every figure in them was read (their provenance and licences).
INPUTS = (pricebook.PUBLIC_PRICES_CSV, pricebook.PUBLIC_COMMITMENTS_CSV, "SOURCE.md", "COMMITMENTS.md")


def render(source: Path) -> str:
    """The snapshot's text: the price book `--prices SOURCE` reads, plus where it came from and its date (the
    latest date a region's rows were read; each region and row keeps its own). Deterministic: the same inputs
    give the same bytes, so --check and the test can compare."""
    missing = [name for name in INPUTS if not (source / name).is_file()]
    if missing:
        raise pricebook.PriceSourceError(f"{source}: missing {', '.join(missing)}")
    book = pricebook.load(source)
    doc = book.to_json()
    dates = sorted(r.read_at[:10] for r in book.regions.values() if r.read_at)
    doc["snapshot"] = {
        "as_of": dates[-1],
        "oldest_region_as_of": dates[0],
        "generated_by": "scripts/make_price_snapshot.py (the reader of `--prices DIR`, pricing/sources/pricebook.py)",
        "what": "public price tables, not prices read from AWS for your account: `gpuloan prices refresh -s STACK` "
        "replaces them (docs/prices.md)",
        "inputs": {name: {"sha256": hashlib.sha256((source / name).read_bytes()).hexdigest()} for name in INPUTS},
        # SOURCE.md and COMMITMENTS.md verbatim: every source, commit, snapshot date and licence the rows carry
        "provenance": {name: (source / name).read_text() for name in ("SOURCE.md", "COMMITMENTS.md")},
    }
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        default=DEFAULT_SOURCE,
        help="folder with aws_gpu_prices.csv, aws_gpu_commitment_prices.csv, SOURCE.md and "
        "COMMITMENTS.md (default: ../shared/data/prices)",
    )
    parser.add_argument("--output", type=Path, default=pricebook.SNAPSHOT_FILE, help="the snapshot to write")
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 if the output is not current")
    args = parser.parse_args(argv)
    try:
        text = render(args.source)
    except pricebook.PriceSourceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text() if args.output.is_file() else ""
        if current != text:
            print(
                f"{args.output.relative_to(REPO)} is not what {args.source} gives: run scripts/make_price_snapshot.py",
                file=sys.stderr,
            )
            return 1
        print(f"{args.output.relative_to(REPO)} is current")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output.relative_to(REPO)} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
