"""Fair sharing among borrowers on the organization's loan (`make bench-org` runs it after bench_org.py;
docs/benchmarks.md, "Fair sharing among borrowers"): the ITP example environment of bench_org.py (ten clusters as
ten pools, p90 floors sized on the first 30 days and lent), one tier rotation and one seed, simulated over the
whole run with Kueue's fair sharing off (classical order), on with equal weights, and on with one team weighing
3. Prints, per team: its weight, its interruptible demand, the GPU-hours it borrowed, borrowed per demanded
GPU-hour; and the spread among the teams that borrow: max - min of borrowed per demanded GPU-hour, and the
coefficient of variation of borrowed GPU-hours per unit of weight; reclaim preemptions, and of them those where a
borrower evicted another borrower's workload (fair sharing). `--days N` cuts the run (the test uses 3).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_org  # noqa: E402  (the environment as bench-org builds it)

HEAVY_WEIGHT = 3.0


def _with_sharing(cfg, fair: bool, weights: dict[str, float]):
    kueue = cfg.scheduling.kueue
    teams = {t: kueue.sharing(t).model_copy(update={"fair_share_weight": w}) for t, w in weights.items()}
    kueue = kueue.model_copy(update={"fair_sharing": fair, "teams": {**kueue.teams, **teams}})
    return cfg.model_copy(update={"scheduling": cfg.scheduling.model_copy(update={"kueue": kueue})})


def _spread(rows) -> tuple[float, float]:
    """(max - min of borrowed / interruptible demand in points, CV of borrowed per weight) over borrowing teams."""
    borrowing = [r for r in rows if r["demand"] > 0 and r["borrowed"] > 0]
    if len(borrowing) < 2:
        return 0.0, 0.0
    ratios = [100 * r["borrowed"] / r["demand"] for r in borrowing]
    per_weight = [r["borrowed"] / r["weight"] for r in borrowing]
    return max(ratios) - min(ratios), statistics.pstdev(per_weight) / statistics.mean(per_weight)


def _simulate(shared, run):
    """One run of the environment (a worker of sim/parallel.py): per pool, its row of the tables."""
    from advise import org_advisor as oa
    from sim.engine import SimSettings
    from sim.environment import simulate_environment

    price_book, base, cut, demands, tiers, seed, hours = shared
    name, fair, weights = run
    cfg = _with_sharing(base, fair, weights)
    t0 = time.perf_counter()
    res = simulate_environment(
        price_book, cfg, cut, oa._factory(oa.CONTROLLER_GPULOAN), SimSettings(seed=seed), hours * 60
    )
    rows = []
    for n in demands:
        rows.append(
            {
                "pool": n,
                "tier": tiers[n],
                "weight": cfg.scheduling.kueue.sharing(cfg.pool(n).team).fair_share_weight,
                "demand": sum(demands[n].interruptible_gpus[:hours]),
                "borrowed": res.pools[n]["borrowed_gpu_hours"],
                "reclaims": res.pools[n]["reclaim_preemptions"],
                # of them, evicted for another borrower (fair sharing's preemption among borrowers)
                "by_borrowers": getattr(res.sims[n].workload, "fair_share_preemptions", 0),
                "cost": res.pools[n]["total_cost_usd"],
            }
        )
    return name, rows, time.perf_counter() - t0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(bench_org.DEFAULT_TRACES), metavar="DIR")
    parser.add_argument("--rotation", type=int, default=1, help="tier rotation 1-3 (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=int, default=None, help="simulate only the first N days")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2: the three runs at once)")
    args = parser.parse_args(argv)

    from advise import org_advisor as oa
    from pricing.sources import catalog
    from sim import demand as simdemand

    days = simdemand.ITP_DAYS
    last = days[1] - days[0] + 1 if args.days is None else args.days
    sizing_hours = min(bench_org.SIZING_DAYS, max(1, last - 1)) * 24
    price_book = catalog.Prices.resolve()  # read once, passed down
    p = price_book.price(bench_org.INSTANCE_TYPE, bench_org.REGION)
    if p is None or p.spot_usd_per_hour is None:
        raise SystemExit(
            f"bench-fair-share: no on-demand and spot price of {bench_org.INSTANCE_TYPE} in "
            f"{bench_org.REGION} in the price file ({price_book.missing_price_reason(bench_org.INSTANCE_TYPE, bench_org.REGION)})"
        )
    traces = simdemand.itp_traces(args.traces, days)
    rotation = args.rotation - 1
    demands, runner = bench_org._sim_unit(
        price_book, rotation, args.seed, traces, days, sizing_hours, bench_org.DEFAULT_CHECKPOINT_MINUTES
    )
    hours = min(max(d.hours for d in demands.values()), last * 24)
    heads = {n: d.head(sizing_hours) for n, d in demands.items()}
    floors = oa.size_floors(heads, runner.prices, bench_org.GOAL_LEVEL)
    base = oa.setup_config(runner.cfg, floors, lend=True)
    cut = {n: oa._cut(t, hours) for n, t in runner.traces.items()}
    tiers = simdemand.rotation_tiers(rotation)
    borrowers = [n for n in demands if tiers[n] != simdemand.PRODUCTION]
    heavy = max(borrowers, key=lambda n: sum(demands[n].interruptible_gpus[:hours]))  # the largest borrower
    runs = {
        "off": (False, {}),
        "on, equal weights": (True, {}),
        f"on, {heavy} weighs {HEAVY_WEIGHT:g}": (True, {base.pool(heavy).team: HEAVY_WEIGHT}),
    }
    print(f"Fair sharing among borrowers: rotation {args.rotation}, seed {args.seed}, days 1-{hours // 24}")
    print("p90 floors (nodes): " + ", ".join(f"{n[-2:]}: {k}" for n, k in floors.items() if k) + "\n")
    from sim import parallel

    shared = (price_book, base, cut, demands, tiers, args.seed, hours)
    table = {}
    for name, rows, seconds in parallel.run_all(
        [(name, fair, weights) for name, (fair, weights) in runs.items()],
        _simulate,
        shared=shared,
        engine=parallel.engine_for(args.workers),
        label="bench-fair-share",
        describe=lambda run: f"fair sharing {run[0]}",
    ):
        table[name] = rows
        print(f"  {name}: {seconds:.0f} s", file=sys.stderr)
    labels = {"off": "off", "on, equal weights": "on, equal"}
    labels.update({n: f"on, {heavy} x{HEAVY_WEIGHT:g}" for n in runs if n not in labels})
    print("Borrowed GPU-hours (% of the pool's interruptible demand):\n")
    print("| pool | tier | demand GPU-h | " + " | ".join(labels[n] for n in runs) + " |")
    print("|---|---|---:|" + "---:|" * len(runs))
    for k, n in enumerate(demands):
        r0 = table["off"][k]
        cells = []
        for name in runs:
            r = table[name][k]
            pct = 100 * r["borrowed"] / r["demand"] if r["demand"] else 0.0
            cells.append(f"{r['borrowed']:,.0f} ({pct:.1f}%)")
        print(f"| {n} | {r0['tier'][:5]} | {r0['demand']:,.0f} | " + " | ".join(cells) + " |")
    print("\nSpread among the pools that borrow: max - min of % of demand borrowed,")
    print("and the coefficient of variation (CV) of borrowed GPU-h per unit of weight;")
    print("reclaim preemptions, and of them those a borrower made (fair sharing);")
    print("the organization's cost over the run:\n")
    print("| fair sharing | borrowed | max-min | CV/wt | reclaims | by borrower | cost |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in table.items():
        points, cv = _spread(rows)
        print(
            f"| {labels[name]} | {sum(r['borrowed'] for r in rows):,.0f} | {points:.1f} pts | {cv:.2f} | "
            f"{sum(r['reclaims'] for r in rows):,} | {sum(r['by_borrowers'] for r in rows):,} | "
            f"${sum(r['cost'] for r in rows):,.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
