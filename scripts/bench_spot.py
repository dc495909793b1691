"""The two spot figures of docs/benchmarks.md ("Back to spot", "Early spot warnings"; issue 28), on the ITP
clusters of `make benchmark` (01, 05, 08, 09, 10, days 1-57, the prod stack's `training` pool auto-sized, three
seeds), mean ± standard deviation over the seeds.

1. Back to spot: the spot-shortage scenario of `make benchmark` (sim/engine.py SPOT_SHORTAGE: one 3-hour
   spot-unavailable episode a week). `gpuloan` (elastic.back_to_spot on, the default), `gpuloan-no-back-to-spot`
   (the same settings with it off: the policy before issue 28), `karpenter` (a NodePool with consolidationPolicy
   WhenEmpty, as in `make benchmark`: it does not replace a node that runs pods) and `karpenter-underutilized`
   (WhenEmptyOrUnderutilized as far as on-demand nodes go: each busy on-demand node is replaced by a spot node
   once spot can be launched, its pods evicted; sim/controllers/karpenter.py). The figure: on-demand node-hours while spot
   could be launched (outside every episode), and the work the evictions lose.
2. Early spot warnings: an interruption-heavy market (2 interruptions per spot node-month, 16x the Spot Advisor
   bucket of the pool's type: a stress scenario, not a measured rate, so that 57 days meet enough interruptions
   to compare) with EC2's rebalance recommendation coming 10-20 minutes before the interruption for a share of
   them (0: always with the notice, which AWS allows; 0.5; 1), jobs checkpointing every 30 minutes and writing an
   asked-for checkpoint in 2. `gpuloan` (rebalance_checkpoint off, the default), `gpuloan-rebalance` (on) and
   `karpenter` (it does not act on rebalance recommendations). The figure: GPU-hours of work lost per interrupted
   job.

One command: `make bench-spot` (= `.venv/bin/python scripts/bench_spot.py [--traces DIR] [--seeds N]`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.benchmark import CLUSTERS, DAYS, POOL, STACK  # noqa: E402

STORM_PER_MONTH = 2.0
EARLY_SHARES = (0.0, 0.5, 1.0)
BACK, EARLY = "back_to_spot", "early_warnings"


def run(args: tuple) -> dict:
    import yaml

    from sim import pool, runner, traces
    from sim.engine import SPOT_SHORTAGE, SimSettings
    from sim.controllers.gpuloan import GpuLoan, pool_settings
    from sim.controllers.karpenter import Karpenter
    from pricing import checks
    from pricing.sources import catalog

    traces_dir, cluster, seed, figure, share = args
    prices = catalog.Prices.resolve()  # each worker process reads the prices in force once
    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text()), f"Pulumi.{STACK}.yaml", prices=prices
    )
    trace = traces.read_trace(Path(traces_dir) / f"{cluster}.csv").window(*DAYS)
    horizon = (DAYS[1] - DAYS[0] + 1) * 1440
    spec = pool.auto_size(pool.spec_from_config(prices, cfg, POOL), trace, horizon_minutes=horizon)
    ps = pool_settings(spec)
    if figure == BACK:
        settings = SimSettings(seed=seed, **SPOT_SHORTAGE)
        policies = [
            GpuLoan("gpuloan"),
            GpuLoan("gpuloan-no-back-to-spot", settings=dataclasses.replace(ps, back_to_spot=False)),
            Karpenter(),
            Karpenter(name="karpenter-underutilized", replace_on_demand=True),
        ]
    else:
        settings = SimSettings(seed=seed, spot_interruptions_per_month=STORM_PER_MONTH, rebalance_early_share=share)
        policies = [
            GpuLoan("gpuloan"),
            GpuLoan("gpuloan-rebalance", settings=dataclasses.replace(ps, rebalance_checkpoint=True)),
            Karpenter(),
        ]
    out = []
    for c in policies:
        _, m = runner.run_one(spec, trace, c, settings, horizon)
        out.append(m)
    return {
        "cluster": cluster,
        "seed": seed,
        "figure": figure,
        "share": share,
        "metrics": out,
        "spot_per_month": spec.spot_interruptions_per_month,
    }


def _ms(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return mean, sd


def _cell(runs: list[dict], i: int, key, fmt: str) -> str:
    vals = [key(r["metrics"][i]) if callable(key) else r["metrics"][i][key] for r in runs]
    mean, sd = _ms([float(v) for v in vals])
    return f"{format(mean, fmt)} ± {format(sd, fmt)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(REPO.parent / "shared" / "data" / "traces" / "itp"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    missing = [c for c in CLUSTERS if not (Path(args.traces) / f"{c}.csv").is_file()]
    if missing:
        parser.error(f"--traces {args.traces}: no {', '.join(m + '.csv' for m in missing)} (see docs/simulator.md)")
    # (traces folder, cluster, seed, experiment, production share: early warnings only)
    tasks: list[tuple[str, str, int, str, float | None]] = [
        (args.traces, c, args.seed + k, BACK, None) for c in CLUSTERS for k in range(args.seeds)
    ]
    tasks += [
        (args.traces, c, args.seed + k, EARLY, share)
        for share in EARLY_SHARES
        for c in CLUSTERS
        for k in range(args.seeds)
    ]
    t0 = time.perf_counter()
    print(f"simulating {len(tasks)} runs on {args.workers} worker(s) ...", file=sys.stderr)
    with ProcessPoolExecutor(args.workers) as ex:
        results = list(ex.map(run, tasks))

    print("\n### Back to spot after a fallback (spot-shortage scenario: one 3-hour spot-unavailable episode a week)\n")
    print(
        "| cluster | policy | on-demand node-hours while spot available | on-demand node-hours | cost USD | "
        "mean wait min | p95 wait min | lost GPU-h | busy nodes disrupted |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for c in CLUSTERS:
        runs = [r for r in results if r["figure"] == BACK and r["cluster"] == c]
        lead = c.replace("cluster", "")
        for i, m in enumerate(runs[0]["metrics"]):
            print(
                f"| {lead} | {m['name']} | {_cell(runs, i, 'on_demand_node_hours_spot_available', '.1f')} | "
                f"{_cell(runs, i, 'on_demand_node_hours', '.1f')} | {_cell(runs, i, 'total_cost_usd', ',.0f')} | "
                f"{_cell(runs, i, 'mean_wait_minutes', '.2f')} | {_cell(runs, i, 'p95_wait_minutes', '.1f')} | "
                f"{_cell(runs, i, 'lost_gpu_hours', '.1f')} | {_cell(runs, i, 'busy_node_terminations', '.1f')} |"
            )
            lead = ""

    def per_job(x):  # lost GPU-hours per interrupted job of one run's metrics
        return x["lost_gpu_hours"] / x["jobs_interrupted"] if x["jobs_interrupted"] else 0.0

    print(
        f"\n### Early spot warnings (interruption-heavy market: {STORM_PER_MONTH:g} interruptions per spot "
        "node-month; the recommendation 10-20 min before the interruption for the share shown, else with the "
        "notice)\n"
    )
    print(
        "| cluster | early share | policy | interruptions | jobs interrupted | lost GPU-h | lost GPU-h per "
        "interrupted job | cost USD | p95 wait min |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for c in CLUSTERS:
        lead = c.replace("cluster", "")
        for share in EARLY_SHARES:
            runs = [r for r in results if r["figure"] == EARLY and r["cluster"] == c and r["share"] == share]
            for i, m in enumerate(runs[0]["metrics"]):
                print(
                    f"| {lead} | {share:g} | {m['name']} | {_cell(runs, i, 'interruptions', '.1f')} | "
                    f"{_cell(runs, i, 'jobs_interrupted', '.0f')} | {_cell(runs, i, 'lost_gpu_hours', '.1f')} | "
                    f"{_cell(runs, i, per_job, '.3f')} | {_cell(runs, i, 'total_cost_usd', ',.0f')} | "
                    f"{_cell(runs, i, 'p95_wait_minutes', '.1f')} |"
                )
                lead = ""
    print("\nAll clusters, per interrupted job (the mean over clusters and seeds of lost GPU-h / jobs interrupted):\n")
    print("| early share | " + " | ".join(m["name"] for m in results[-1]["metrics"]) + " |")
    print("|---|" + "---|" * len(results[-1]["metrics"]))
    for share in EARLY_SHARES:
        runs = [r for r in results if r["figure"] == EARLY and r["share"] == share]
        cells = []
        for i in range(len(runs[0]["metrics"])):
            lost = sum(r["metrics"][i]["lost_gpu_hours"] for r in runs)
            jobs = sum(r["metrics"][i]["jobs_interrupted"] for r in runs)
            cells.append(f"{lost / jobs:.3f} ({lost:,.0f} GPU-h / {jobs} jobs)" if jobs else "-")
        print(f"| {share:g} | " + " | ".join(cells) + " |")
    print(
        f"\nbench-spot: {len(tasks)} runs of 57 days in {time.perf_counter() - t0:.0f} s on {args.workers} "
        f"worker(s); Spot Advisor rate of the pool's type {results[0]['spot_per_month']:g} a month"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
