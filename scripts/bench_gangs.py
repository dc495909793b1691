"""Gangs launched whole (issue 28, kubernetes-sigs/karpenter#3138): GPU-hours paid for nodes held for multi-node
jobs that cannot start yet, before and after the policy reads gangs, beside Karpenter.

The ITP clusters with multi-node jobs (01, 02, 03, 04, 06: jobs of 16-64 GPUs, gangs of 2-8 nodes), days 1-57,
the prod stack's `training` pool auto-sized as in scripts/benchmark.py (8-GPU nodes, floor 0 on these clusters).
Three policies on the same pool, trace and seed (common random numbers):
- `gpuloan-before`: the policy with no gang data (GpuLoan(gangs=False): every pending pod counted on its own, as
  the Lambda did before it read pod groups);
- `gpuloan`: the policy reading gangs (policy/gangs.py, `gang_wait_minutes` 15);
- `karpenter`: the baseline as Karpenter behaves, with no gang awareness (it launches a node per NodeClaim and
  keeps nodes pending pods are nominated to; sim/controllers/karpenter.py Karpenter).
Three scenarios: SPOT_SHORTAGE (a 3-hour spot-unavailable episode a week: launches fail) on the pool as it is
(spot, on-demand fallback); SPOT_PARTIAL (the same episodes, but a spot launch gets half the nodes it asks for:
the "3 of 4 nodes" of karpenter#3138) on the same pool, and on the pool with spot only (no fallback to complete a
gang). "held" is sim/cluster.py's meter: empty ready elastic nodes while a gang waits, up to the nodes it needs.

One command: `make bench-gangs` (= `.venv/bin/python scripts/bench_gangs.py [--traces DIR] [--seed S] [--json F]`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CLUSTERS = ("cluster01", "cluster02", "cluster03", "cluster04", "cluster06")
DAYS = (1, 57)
STACK, POOL = "prod", "training"
SCENARIOS = ("shortage", "partial", "partial_spot_only")
TITLES = {
    "shortage": "SPOT_SHORTAGE, spot then on-demand",
    "partial": "SPOT_PARTIAL, spot then on-demand",
    "partial_spot_only": "SPOT_PARTIAL, spot only",
}


def run(args: tuple[str, str, int, str]) -> list[dict]:
    import yaml

    from sim import pool, runner, traces
    from sim.engine import SPOT_PARTIAL, SPOT_SHORTAGE, SimSettings
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.karpenter import Karpenter
    from pricing import checks
    from pricing.sources import catalog

    traces_dir, cluster, seed, scenario = args
    prices = catalog.Prices.resolve()  # each worker process reads the prices in force once
    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text()), f"Pulumi.{STACK}.yaml", prices=prices
    )
    trace = traces.read_trace(Path(traces_dir) / f"{cluster}.csv").window(*DAYS)
    horizon = (DAYS[1] - DAYS[0] + 1) * 1440
    spec = pool.auto_size(pool.spec_from_config(prices, cfg, POOL), trace, horizon_minutes=horizon)
    if scenario == "partial_spot_only":
        spec = replace(spec, capacity="spot")
    settings = SimSettings(seed=seed, **(SPOT_SHORTAGE if scenario == "shortage" else SPOT_PARTIAL))
    out = []
    for controller in (GpuLoan("gpuloan-before", gangs=False), GpuLoan("gpuloan"), Karpenter()):
        _, m = runner.run_one(spec, trace, controller, settings, horizon)
        out.append(
            {
                "cluster": cluster,
                "scenario": scenario,
                "policy": controller.name,
                "held_gpu_hours": m["gang_held_gpu_hours"],
                "cost_usd": m["total_cost_usd"],
                "p95_wait_minutes": m["p95_wait_minutes"],
                "mean_wait_minutes": m["mean_wait_minutes"],
                "unmet_gpu_hours": m["unmet_gpu_hours"],
                "released": (m.get("decisions_by_reason") or {}).get("GANG_RELEASED", 0)
                if controller.name == "gpuloan"
                else None,
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
    parser.add_argument("--seed", type=int, default=1, help="seed (default 1, as `gpuloan simulate`)")
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    missing = [c for c in CLUSTERS if not (Path(args.traces) / f"{c}.csv").is_file()]
    if missing:
        parser.error(f"--traces {args.traces}: no {', '.join(m + '.csv' for m in missing)} (see docs/simulator.md)")
    tasks = [(args.traces, c, args.seed, s) for s in SCENARIOS for c in CLUSTERS]
    t0 = time.perf_counter()
    print(f"simulating {len(tasks) * 3} runs on {args.workers} worker(s) ...", file=sys.stderr)
    with ProcessPoolExecutor(args.workers) as pool:
        rows = [r for rows in pool.map(run, tasks) for r in rows]
    print(
        "| scenario | cluster | policy | GPU-h held for waiting gangs | cost USD | p95 / mean wait min | "
        "unmet GPU-h | gangs released (decisions) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {TITLES[r['scenario']]} | {r['cluster'][-2:]} | {r['policy']} | {r['held_gpu_hours']:,.1f} | "
            f"{r['cost_usd']:,.0f} | {r['p95_wait_minutes']:.1f} / {r['mean_wait_minutes']:.2f} | "
            f"{r['unmet_gpu_hours']:,.1f} | {'-' if r['released'] is None else r['released']} |"
        )
    print()
    print("| scenario | gpuloan-before | gpuloan | karpenter | (GPU-h held, all five clusters) |")
    print("|---|---|---|---|---|")
    for s in SCENARIOS:
        tot = {
            p: sum(r["held_gpu_hours"] for r in rows if r["scenario"] == s and r["policy"] == p)
            for p in ("gpuloan-before", "gpuloan", "karpenter")
        }
        print(f"| {TITLES[s]} | {tot['gpuloan-before']:,.1f} | {tot['gpuloan']:,.1f} | {tot['karpenter']:,.1f} | |")
    print(
        f"\nbench-gangs: {len(CLUSTERS)} clusters x {len(SCENARIOS)} scenarios x 3 policies, seed {args.seed}, "
        f"{time.perf_counter() - t0:.1f} s wall on {args.workers} worker(s)"
    )
    from pricing.sources import catalog

    print(catalog.Prices.resolve().price_source("us-east-1"))  # the prod stack's region
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
