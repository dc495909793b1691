"""The advisor's speed case (issue 36 item 7): a 16-pool, 3-week environment as a demand folder and its stack file.

`make bench-environment`'s 16 pools (scripts/bench_environment.py: one per ITP trace month, p4d.24xlarge, each
sized from its own trace, tiers rotating), cut to the first 21 days of each month, written as what a user gives
`gpuloan advise --demand DIR`: one `<pool>.csv` per pool in the minute-series format (`minute,gpus_demanded`: the
GPUs the pool's jobs would hold if each started on submission, sim/pool.py demand_profile) and the stack file
`Pulumi.advise16.yaml` naming the same pools. Then, as docs/simulator.md shows:

    .venv/bin/python scripts/advise_environment.py /tmp/advise16 --traces ../shared/data/traces/itp
    .venv/bin/gpuloan advise -s /tmp/advise16/Pulumi.advise16.yaml --demand /tmp/advise16 \\
        --model simulated --sizing-days 14 --lookback-days 7 --json > /tmp/advise16.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

DAYS = 21
STACK_FILE = "Pulumi.advise16.yaml"


def main(argv: list[str] | None = None) -> int:
    import yaml

    import bench_environment as be
    from pricing.sources import catalog
    from sim import pool

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the demand folder to write (created)")
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "traces" / "itp")
    parser.add_argument("--days", type=int, default=DAYS, help=f"days of each pool's month (default {DAYS})")
    args = parser.parse_args(argv)
    prices = catalog.Prices.resolve()  # read once, passed down
    _, demands, horizon = be.environment(prices, args.traces, days=args.days)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, trace in demands.items():
        series = pool.demand_profile(trace, horizon)[:horizon]
        (args.out / f"{name}.csv").write_text(
            "minute,gpus_demanded\n" + "".join(f"{m},{g}\n" for m, g in enumerate(series))
        )
    (args.out / STACK_FILE).write_text(yaml.safe_dump(be.pools_doc(prices, demands, horizon), sort_keys=False))
    print(f"{len(demands)} pools, {args.days} days of minute series in {args.out}; stack file {args.out / STACK_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
