"""Advisor speed: the whole floor sweep of one pool over a month of demand (ITP cluster02, days 0-29, the prod
training pool sized to the demand's peak), every floor size simulated by our policy. Prints one line: the sweep's
wall and CPU seconds, the floor sizes simulated, and the time per simulated pool-month."""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_TRACES = REPO.parent / "shared" / "data" / "traces" / "itp"  # public traces, beside the project
DEFAULT_PRICES = REPO.parent / "shared" / "data" / "prices"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os

    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), metavar="DIR", help="folder holding cluster02.csv")
    parser.add_argument("--jobs", type=int, default=1, help="floor sizes simulated at once (processes); default 1")
    parser.add_argument("--cluster", default="cluster02", help="ITP cluster file name without .csv")
    args = parser.parse_args(argv)
    # Prices: the caller's price file, else the public table beside the project (the advisor needs rates).
    os.environ.setdefault("GPULOAN_PRICE_FILE", str(DEFAULT_PRICES))

    from advise import advisor
    from sim import traces
    from pricing import checks
    from pricing.sources import catalog

    prices = catalog.Prices.resolve()  # read once, passed down
    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "Pulumi.prod.yaml", prices=prices
    )
    trace = traces.read_trace(Path(args.traces) / f"{args.cluster}.csv").window(0, 29)
    if not isinstance(trace, traces.JobsTrace):
        sys.exit(f"{args.cluster}.csv: a job trace is needed (submit time, duration, GPUs), not a series")
    t0, c0 = time.perf_counter(), time.process_time()
    doc = advisor.advise(prices, cfg, "training", trace, peak_from_demand=True, jobs=args.jobs)
    wall = time.perf_counter() - t0
    n = len(doc["points"])
    # With several jobs the simulations' CPU time is the workers', not this process's: report wall time only.
    cpu = (
        (f", {time.process_time() - c0:.1f} s CPU, {(time.process_time() - c0) / n:.2f} s CPU per simulated pool-month")
        if args.jobs == 1
        else ""
    )
    print(
        f"bench-advise: 30 days x 1 pool ({args.cluster}, {len(trace.jobs)} jobs), {n} floor sizes 0..{doc['peak_nodes']} "
        f"x {len(doc['rates'])} payments, {args.jobs} job(s): {wall:.1f} s wall{cpu}; {doc['summary']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
