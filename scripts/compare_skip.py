"""Skipping quiet minutes vs deciding every pool every minute: where do two runs of one environment split?

Runs one environment simulation twice on the same commit (`SimSettings(skip_quiet_ticks=False)` and the default,
both sampling every minute so that a split is seen at its minute), then prints per pool its cost, launches and
reclaims both ways and the first minute and pool where the samples (demand, guaranteed / spot / on-demand GPUs,
cost) or the counters differ. Issue 41 item 3: they must not differ at all.

    .venv/bin/python scripts/compare_skip.py --pools 4 --days 3 --policy gpuloan

`--minutes M` stops both runs at minute M of the same organization (a split found at minute 5030 of the 16-pool
month is seen with `--pools 16 --days 31 --minutes 5031` in a tenth of the month's CPU).

builds scripts/bench_scale.py's organization (the ITP traces, ../shared/data/traces/itp). Exit status 0 when the
two runs are equal, 1 when they split.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WORK_KEYS = {"ticks_skipped", "sim_seconds", "decide_calls"}  # what differs by construction: the work done


def first_split(every, skipping) -> tuple[int, str, tuple, tuple] | None:
    """(minute, pool, every-minute sample, skipping sample) of the earliest differing per-minute sample, or None."""
    best = None
    for name, sim in every.sims.items():
        other = skipping.sims[name].samples
        for a, b in zip(sim.samples, other):
            if a != b:
                if best is None or a[0] < best[0]:
                    best = (a[0], name, a, b)
                break
    return best


def compare(prices, cfg, demands, factory, horizon: int, seed: int = 1, out=print) -> bool:
    """Run both ways; print the per-pool table and the first split; True when the results are equal."""
    from sim.engine import SimSettings
    from sim.environment import simulate_environment

    runs = {}
    for skip in (False, True):
        settings = SimSettings(seed=seed, skip_quiet_ticks=skip, sample_every_minutes=1)
        t0 = time.process_time()
        runs[skip] = simulate_environment(prices, cfg, demands, factory, settings, horizon)
        out(
            f"{'skipping' if skip else 'every minute'}: {time.process_time() - t0:.1f} s CPU, "
            f"${runs[skip].environment['total_cost_usd']:,.2f}"
        )
    every, skipping = runs[False], runs[True]
    equal = True
    out(f"{'pool':12} {'cost every':>13} {'cost skip':>13} {'launches':>11} {'reclaims':>9}")
    for name in every.pools:
        a, b = every.sims[name].c, skipping.sims[name].c
        ca, cb = every.pools[name]["total_cost_usd"], skipping.pools[name]["total_cost_usd"]
        same = {k: v for k, v in asdict(a).items() if k not in WORK_KEYS} == {
            k: v for k, v in asdict(b).items() if k not in WORK_KEYS
        } and {k: v for k, v in every.pools[name].items() if k not in WORK_KEYS} == {
            k: v for k, v in skipping.pools[name].items() if k not in WORK_KEYS
        }
        equal &= same
        mark = "" if same else "  <-"
        ra = every.pools[name].get("reclaim_preemptions", 0)
        rb = skipping.pools[name].get("reclaim_preemptions", 0)
        out(f"{name:12} {ca:13,.2f} {cb:13,.2f} {a.node_launches:5d}/{b.node_launches:<5d} {ra:4d}/{rb:<4d}{mark}")
    split = first_split(every, skipping)
    if split:
        minute, name, sample_every, sample_skipping = split
        out(f"first split: minute {minute}, pool {name}")
        out(f"  every minute {sample_every}")
        out(f"  skipping     {sample_skipping}")
        equal = False
    out("results equal" if equal else "results DIFFER")
    return equal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "traces" / "itp")
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--policy", choices=("gpuloan", "karpenter"), default="gpuloan")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--minutes",
        type=int,
        help="stop both runs at this minute (the organization is still the one of --days): a split found late in "
        "a long run is reproduced in a fraction of its time",
    )
    args = parser.parse_args(argv)
    from pricing.sources import catalog
    from scripts import bench_scale
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.karpenter import Karpenter

    prices = catalog.Prices.resolve()
    cfg, demands, horizon = bench_scale.organization(prices, args.traces, args.pools, args.days)
    if args.minutes is not None:
        if not 0 < args.minutes <= horizon:
            parser.error(f"--minutes must be between 1 and {horizon} (--days {args.days}), got {args.minutes}")
        horizon = args.minutes
    factory = (lambda spec: GpuLoan()) if args.policy == "gpuloan" else (lambda spec: Karpenter())
    return 0 if compare(prices, cfg, demands, factory, horizon, args.seed) else 1


if __name__ == "__main__":
    sys.exit(main())
