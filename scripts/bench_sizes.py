"""Right-sized nodes (issue 28, "Match Karpenter"): the ITP clusters on a g6e pool with three node sizes
(g6e.2xlarge, g6e.12xlarge, g6e.48xlarge: 1, 4 and 8 L40S GPUs), gpuloan and karpenter both right-sizing, beside the
same pool with the 8-GPU size only.

The pool: the prod stack's region (us-east-1), spot then on-demand, no floor (floor 0: the bill is the elastic bill,
and both pools compare on the same nothing), elastic maxima auto-sized from the trace as in scripts/benchmark.py
(each size alone covers the peak). Prices: the price book in force (GPULOAN_PRICE_FILE: the shared data's price table
under `make`), never a figure of ours. Policies on the same pool, trace and seed (common random numbers):
- `gpuloan`: the real policy engine (policy/sizes.py: pending pods packed first fit decreasing, each new node the size
  with the lowest hourly price per GPU its pods use);
- `karpenter`: the baseline with Karpenter's own instance type choice (sim/cluster.py new_claims: pods packed first
  fit decreasing onto NodeClaims that may grow to the largest type, each claim launching the cheapest type that fits),
  a minute's pending pods as one batch;
- `karpenter-claim-per-pod`: the same with a claim per pod that fits no existing node. Karpenter batches pods 1 s
  idle / 10 s at most, so the truth lies between the two rows (pods of one job come together, jobs seconds apart
  get claims of their own).

What predicts the gain (the packing figure, from the trace alone): the oracle packing (oracle_packing) of each pool,
every job started at its submission on nodes that come at once and go the minute they are empty, pods on the
fullest node they fit, else on a new node of the cheapest size that holds them (spot prices). Its $ ratio, right-sized
over 8-only, is the bill ratio right-sizing predicts; the policies add launch delays, spot interruptions and the
minutes an empty node is kept.

One command: `make bench-sizes` (= `.venv/bin/python scripts/bench_sizes.py [--traces DIR] [--clusters ...]
[--days A B] [--seed S] [--json F]`). Default: five ITP clusters (those of `make benchmark`), days 1-57.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CLUSTERS = ("cluster01", "cluster05", "cluster08", "cluster09", "cluster10")
DAYS = (1, 57)
STACK, POOL = "prod", "training"
SIZED = ("g6e.48xlarge", "g6e.12xlarge", "g6e.2xlarge")  # the largest first: the config's first-listed size
EIGHT_ONLY = ("g6e.48xlarge",)
POOLS = {"right-sized (1/4/8)": SIZED, "8-GPU only": EIGHT_ONLY}
PER_POD = "karpenter-claim-per-pod"


def _config(prices, types: tuple[str, ...]):
    import yaml

    from pricing import checks

    raw = yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text())
    pools = raw["config"]["gpuloan:pools"]
    pool = next(p for p in pools if p["name"] == POOL)
    pool.pop("guaranteed", None)
    pool.pop("budget", None)
    pool["tier"] = "experiment"  # work that may run on spot
    pool["elastic"]["instance_types"] = list(types)
    pool["elastic"].pop("on_demand_max_nodes", None)
    raw["config"]["gpuloan:pools"] = [pool]
    raw["config"].pop("gpuloan:commitments", None)
    raw["config"].pop("gpuloan:scheduling", None)
    return checks.from_stack_yaml(raw, f"Pulumi.{STACK}.yaml (pool {POOL}: {', '.join(types)})", prices=prices)


def spec_for(types: tuple[str, ...], trace, horizon: int):
    from pricing.sources import catalog
    from sim import pool

    prices = catalog.Prices.resolve()  # each worker process reads the prices in force
    return pool.auto_size(
        pool.spec_from_config(prices, _config(prices, types), POOL), trace, horizon_minutes=horizon, floor_nodes=0
    )


def oracle_packing(spec, trace, horizon: int) -> dict:
    """The packing figure (module docstring): every job starts at its submission on nodes that come at once and go
    the minute they are empty. A job of at most the largest node's GPUs is one pod, placed on the fullest node it
    fits (bin packing), else on a new node of the size the pool's rule picks for it alone (the cheapest that holds
    it at spot prices: the lowest price per fitted GPU, and Karpenter's cheapest type that fits); a larger job gets
    whole nodes of the largest size to itself. Returns the $ and GPU-hours paid, and the GPU-hours used."""
    import heapq

    price = {spec.gpus_per_node: spec.spot_usd_per_hour}
    price.update({z.gpus_per_node: z.spot_usd_per_hour for z in spec.sizes})
    largest = spec.gpus_per_node
    limit = horizon * 60
    nodes: dict[int, list] = {}  # id -> [gpus, free, opened_s]
    ends: list = []  # (end_s, serial, [(node id, gpus)])
    usd = paid_s = used_s = 0.0
    serial = 0

    def close(nid: int, at: float) -> None:
        nonlocal usd, paid_s
        g, _, opened = nodes.pop(nid)
        usd += (at - opened) / 3600 * price[g]
        paid_s += (at - opened) * g

    def release(upto: float) -> None:
        while ends and ends[0][0] <= upto:
            end, _, held = heapq.heappop(ends)
            for nid, g in held:
                n = nodes[nid]
                n[1] += g
                if n[1] == n[0]:
                    close(nid, end)

    for j in sorted(trace.jobs, key=lambda j: j.submit_s):
        if j.submit_s >= limit:
            break
        release(j.submit_s)
        end = min(j.submit_s + j.duration_s, limit)
        used_s += (end - j.submit_s) * j.gpus
        held = []
        if j.gpus > largest:
            left = j.gpus
            while left > 0:
                serial += 1
                take = min(left, largest)
                nodes[serial] = [largest, largest - take, j.submit_s]
                held.append((serial, take))
                left -= take
        else:
            fits = [(n[1], nid) for nid, n in nodes.items() if n[1] >= j.gpus]
            if fits:
                nid = min(fits)[1]
            else:
                serial += 1
                nid = serial
                size = min((p, g) for g, p in price.items() if g >= j.gpus)[1]
                nodes[nid] = [size, size, j.submit_s]
            nodes[nid][1] -= j.gpus
            held.append((nid, j.gpus))
        heapq.heappush(ends, (end, serial, held))
    release(float("inf"))
    for nid in list(nodes):
        close(nid, limit)
    return {"oracle_usd": usd, "oracle_paid_gpu_hours": paid_s / 3600, "oracle_used_gpu_hours": used_s / 3600}


def run(args: tuple[str, str, int, int, int]) -> list[dict]:
    from sim import runner, traces
    from sim.engine import SimSettings
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.karpenter import Karpenter

    traces_dir, cluster, seed, a, b = args
    trace = traces.read_trace(Path(traces_dir) / f"{cluster}.csv").window(a, b)
    horizon = (b - a + 1) * 1440
    out = []
    for pool_name, types in POOLS.items():
        spec = spec_for(types, trace, horizon)
        packing = oracle_packing(spec, trace, horizon)
        for controller in (GpuLoan("gpuloan"), Karpenter(), Karpenter(name=PER_POD, claim_per_pod=True)):
            _, m = runner.run_one(spec, trace, controller, SimSettings(seed=seed), horizon)
            use = m["elastic_gpu_hours_by_use"]
            out.append(
                {
                    "cluster": cluster,
                    "pool": pool_name,
                    "policy": controller.name,
                    "elastic_usd": m["elastic_spot_cost_usd"] + m["elastic_on_demand_cost_usd"],
                    "paid_gpu_hours": use["paid"],
                    "busy_gpu_hours": use["busy"],
                    "unmet_gpu_hours": m["unmet_gpu_hours"],
                    "p95_wait_minutes": m["p95_wait_minutes"],
                    "mean_wait_minutes": m["mean_wait_minutes"],
                    **packing,
                    "sim_seconds": m["sim_seconds"],
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--traces",
        default=str(REPO.parent / "shared" / "data" / "traces" / "itp"),
        help="folder of the ITP cluster CSVs (default ../shared/data/traces/itp)",
    )
    parser.add_argument("--clusters", nargs="+", default=list(CLUSTERS), help=f"default {' '.join(CLUSTERS)}")
    parser.add_argument(
        "--days",
        nargs=2,
        type=int,
        default=list(DAYS),
        metavar=("FIRST", "LAST"),
        help=f"trace days (default {DAYS[0]} {DAYS[1]})",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed (default 1, as `gpuloan simulate`)")
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    missing = [c for c in args.clusters if not (Path(args.traces) / f"{c}.csv").is_file()]
    if missing:
        parser.error(f"--traces {args.traces}: no {', '.join(m + '.csv' for m in missing)} (see docs/simulator.md)")
    a, b = args.days
    tasks = [(args.traces, c, args.seed, a, b) for c in args.clusters]
    t0 = time.perf_counter()
    print(f"simulating {len(tasks) * 6} runs on {args.workers} worker(s) ...", file=sys.stderr)
    with ProcessPoolExecutor(args.workers) as pool:
        rows = [r for rows in pool.map(run, tasks) for r in rows]
    print("| cluster | pool | policy | elastic $ | GPU-h paid / used | unmet GPU-h | p95 / mean wait min |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['cluster'][-2:]} | {r['pool']} | {r['policy']} | {r['elastic_usd']:,.0f} | "
            f"{r['paid_gpu_hours']:,.0f} / {r['busy_gpu_hours']:,.0f} | {r['unmet_gpu_hours']:,.1f} | "
            f"{r['p95_wait_minutes']:.1f} / {r['mean_wait_minutes']:.2f} |"
        )
    print()
    sized, eight = POOLS
    print(
        "| cluster | oracle packing $ 8-only -> right-sized | oracle GPU-h paid 8-only -> right-sized (used) | "
        "predicted bill ratio | gpuloan bill ratio | karpenter / claim-per-pod bill ratio | "
        "gpuloan vs karpenter / claim-per-pod, right-sized |"
    )
    print("|---|---|---|---|---|---|---|")
    tot: dict = {}
    for c in args.clusters + ["all"]:
        if c == "all":
            cell = tot
        else:
            cell = {(r["pool"], r["policy"]): r for r in rows if r["cluster"] == c}
            for key, r in cell.items():
                acc = tot.setdefault(key, {})
                for k, v in r.items():
                    if isinstance(v, float):
                        acc[k] = acc.get(k, 0.0) + v
        e, s = cell[(eight, "gpuloan")], cell[(sized, "gpuloan")]
        policies = ("gpuloan", "karpenter", PER_POD)
        ratio = {p: cell[(sized, p)]["elastic_usd"] / cell[(eight, p)]["elastic_usd"] for p in policies}
        vs = {p: cell[(sized, "gpuloan")]["elastic_usd"] / cell[(sized, p)]["elastic_usd"] - 1 for p in policies}
        print(
            f"| {c[-2:] if c != 'all' else 'all'} | {e['oracle_usd']:,.0f} -> {s['oracle_usd']:,.0f} | "
            f"{e['oracle_paid_gpu_hours']:,.0f} -> {s['oracle_paid_gpu_hours']:,.0f} "
            f"({s['oracle_used_gpu_hours']:,.0f}) | {s['oracle_usd'] / e['oracle_usd']:.3f} | "
            f"{ratio['gpuloan']:.3f} | {ratio['karpenter']:.3f} / {ratio[PER_POD]:.3f} | "
            f"{vs['karpenter']:+.1%} / {vs[PER_POD]:+.1%} |"
        )
    print(
        f"\nbench-sizes: {len(args.clusters)} clusters, days {a}-{b}, 2 pools x 3 policies, seed {args.seed}, "
        f"{time.perf_counter() - t0:.1f} s wall on {args.workers} worker(s)"
    )
    from pricing.sources import catalog

    print(catalog.Prices.resolve().price_source("us-east-1"))  # the prod stack's region
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
