"""The docs/benchmarks.md benchmark: ITP clusters 01, 05, 08, 09, 10, days 1-57, every policy on the same pool,
several seeds, with and without spot shortages.

The pool is the prod stack's `training` pool (p4d.24xlarge floor, spot p4d/p5 with on-demand fallback) auto-sized
from each cluster's demand (floor at the 25th percentile of demand, 0 nodes included, elastic max covering the
peak). Each seed draws the spot interruptions per spot slot and time (common random numbers: every policy meets
the same events); per policy the table shows the mean and standard deviation over the seeds, and each verdict
compares gpuloan with a baseline on the per-seed differences (within the noise = within two standard errors).
The stack's cluster bin-packs (`cluster.bin_packing: true`: pods go to the fullest node they fit). Two scenarios
are reported separately, for the policies that use spot: spot shortages (one spot-unavailable episode a week, 3 h
mean: no public source gives that rate) and the cluster without bin packing (kube-scheduler's default scoring).
The default table adds `gpuloan-warm-up` (the stack's settings with warm-up on) and its verdict against gpuloan.
`--what-if` runs only the what-if table instead: gpuloan, karpenter and our policy with an instant idle signal
(a node reads idle from the minute its last pod ends), with and without the release-on-cost rule's kept nodes --
the most a faster release signal could buy (docs/benchmarks.md).

One command: `make benchmark` (or `.venv/bin/python scripts/benchmark.py [--traces DIR] [--seeds N] [--seed S]
[--json out.json] [--floor-nodes N] [--no-shortage] [--no-spread] [--what-if]`).
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
# The scenarios run our policy and karpenter only: gpuloan-defaults equals gpuloan on every cluster of the default
# table (spot never stays short for the 10 minutes where their fallback settings differ), and the scenarios'
# question is how the two compare there.
SCENARIO_POLICIES = ("gpuloan", "karpenter")
DEFAULT, SHORTAGE, SPREAD, WHAT_IF = "default", "spot_shortage", "without_bin_packing", "what_if"


def run_cluster(args: tuple[str, str, int, int | None, bool]) -> dict:
    import yaml

    from sim import pool, runner, traces
    from sim.engine import SPOT_SHORTAGE, SimSettings
    from sim.controllers.lineup import all_policies, what_if_policies
    from pricing import checks
    from pricing.sources import catalog

    traces_dir, cluster, seed, floor_nodes, scenario = args
    shortage = scenario == SHORTAGE
    prices = catalog.Prices.resolve()  # each worker process reads the prices in force once
    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text()), f"Pulumi.{STACK}.yaml", prices=prices
    )
    trace = traces.read_trace(Path(traces_dir) / f"{cluster}.csv").window(*DAYS)
    horizon = (DAYS[1] - DAYS[0] + 1) * 1440
    spec = pool.auto_size(
        pool.spec_from_config(prices, cfg, POOL), trace, horizon_minutes=horizon, floor_nodes=floor_nodes
    )
    policies = what_if_policies() if scenario == WHAT_IF else all_policies(spec, warm_up=scenario == DEFAULT)
    settings = SimSettings(seed=seed)
    if shortage:
        policies = [p for p in policies if p.name in SCENARIO_POLICIES]
        settings = SimSettings(seed=seed, **SPOT_SHORTAGE)
    if scenario == SPREAD:
        policies = [p for p in policies if p.name in SCENARIO_POLICIES]
        settings = SimSettings(seed=seed, placement="least_allocated")
    t0 = time.perf_counter()
    doc = runner.compare(spec, trace, settings, policies, horizon=horizon)
    doc.pop("_series")
    doc["wall_seconds"] = round(time.perf_counter() - t0, 2)
    return doc


def _pm(r: dict, key: str, fmt: str) -> str:
    if r.get(key) is None:
        return "-"
    return f"{format(r[key], fmt)} ± {format(r[key + '_sd'], fmt)}"


def print_tables(docs: list[dict], title: str) -> None:
    """One Markdown table of every cluster and policy (mean ± sd over the seeds), then the verdicts against
    karpenter, warm-up against gpuloan, and where the elastic GPU-hours go: docs/benchmarks.md is this output."""
    from sim.controllers.gpuloan import WARM_UP_NAME, WHAT_IF_NAMES

    print(f"\n### {title}\n")
    print(
        "| cluster | policy | cost USD | cost / oracle | elastic cost / oracle | mean wait min | p50 / p95 wait min | "
        "unmet GPU-h | interruptions | node launches |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for doc in docs:
        cluster = doc["trace"].split("[")[0].replace("cluster", "")
        lead = (
            f"{cluster} (oracle ${doc['oracle_cost_usd']:,.0f}; in whole nodes "
            f"${doc['whole_node_bound_cost_usd']:,.0f})"
        )
        for r in doc["summary"]:
            floor = doc["pool"]["floor_nodes"]
            name = r["name"] if r["floor_nodes"] == floor else f"{r['name']} (floor {r['floor_nodes']})"
            print(
                f"| {lead} | {name} | {_pm(r, 'total_cost_usd', ',.0f')} | {_pm(r, 'cost_over_oracle', '.2f')} | "
                f"{_pm(r, 'elastic_cost_over_oracle', '.2f')} | {_pm(r, 'mean_wait_minutes', '.2f')} | "
                f"{r['p50_wait_minutes']:.1f} / "
                f"{_pm(r, 'p95_wait_minutes', '.1f')} | {_pm(r, 'unmet_gpu_hours', ',.1f')} | "
                f"{_pm(r, 'interruptions', '.1f')} | {_pm(r, 'node_launches', '.0f')} |"
            )
            lead = ""
    ours_names = [
        n for n in ("gpuloan", "gpuloan-defaults", *WHAT_IF_NAMES) if any(v["ours"] == n for v in docs[0]["verdicts"])
    ]
    print("\n| cluster | " + " | ".join(f"{n} vs karpenter" for n in ours_names) + " |")
    print("|---|" + "---|" * len(ours_names))
    for doc in docs:
        cells = []
        for ours in ours_names:
            v = next(v for v in doc["verdicts"] if v["ours"] == ours and v["baseline"] == "karpenter")
            cells.append(
                f"**{v['verdict'].replace(ours + ' ', '')}**: cost {v['cost_diff_pct']:+.1f} % "
                f"(${v['cost_diff_usd']:+,.0f} ± {v['cost_noise_usd'] or 0:,.0f}), p95 "
                f"{v['service_diff']:+.2f} ± {v['service_noise'] or 0:.2f} min; mean wait "
                f"{v['mean_wait_diff']:+.2f} ± {v['mean_wait_noise'] or 0:.2f} min"
            )
        print(f"| {doc['trace'].split('[')[0].replace('cluster', '')} | " + " | ".join(cells) + " |")
    warm = [next((v for v in d["verdicts"] if v["ours"] == WARM_UP_NAME), None) for d in docs]
    if any(warm):
        print("\n| cluster | warm-up vs gpuloan (the same settings, `warm_up: true`) | WARM_UP decisions a run |")
        print("|---|---|---|")
        for doc, v in zip(docs, warm):
            if v is None:  # a run without the warm-up row
                continue
            i = [r["name"] for r in doc["summary"]].index(WARM_UP_NAME)
            decisions = [run[i].get("decisions_by_reason", {}).get("WARM_UP", 0) for run in doc["runs"]]
            print(
                f"| {doc['trace'].split('[')[0].replace('cluster', '')} | **{v['verdict']}**: cost "
                f"{v['cost_diff_pct']:+.1f} % (${v['cost_diff_usd']:+,.0f} ± {v['cost_noise_usd'] or 0:,.0f}), "
                f"p95 {v['service_diff']:+.2f} ± {v['service_noise'] or 0:.2f} min | "
                f"{sum(decisions) / len(decisions):.0f} |"
            )
    print(
        "\nWhere the elastic GPU-hours go (mean over the seeds, as a share of the oracle's GPU-hours; "
        "`elastic_gpu_hours_by_use` in --json):\n"
    )
    print("| cluster | policy | busy | free on a node with a pod | ready, no pod | booting | whole-node bound |")
    print("|---|---|---|---|---|---|---|")
    for doc in docs:
        names = [r["name"] for r in doc["summary"]]
        oracle_h = doc["oracle_gpu_hours"]
        bound = doc["whole_node_bound_cost_usd"] / doc["oracle_cost_usd"] if doc["oracle_cost_usd"] else 0.0
        lead = doc["trace"].split("[")[0].replace("cluster", "")
        for name in ("gpuloan", *WHAT_IF_NAMES, "karpenter"):
            if name not in names:
                continue
            i = names.index(name)
            use = {
                k: sum(run[i]["elastic_gpu_hours_by_use"][k] for run in doc["runs"]) / len(doc["runs"])
                for k in ("busy", "free_on_busy_nodes", "empty", "booting")
            }
            print(
                f"| {lead} | {name} | {use['busy'] / oracle_h:.3f} | {use['free_on_busy_nodes'] / oracle_h:.3f} | "
                f"{use['empty'] / oracle_h:.3f} | {use['booting'] / oracle_h:.3f} | {bound:.3f} |"
            )
            lead = ""


def main(argv: list[str] | None = None) -> int:
    from sim import runner

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--traces",
        default=str(REPO.parent / "shared" / "data" / "traces" / "itp"),
        help="folder of the ITP cluster CSVs (default ../shared/data/traces/itp)",
    )
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--seed", type=int, default=1, help="first seed (default 1, as `gpuloan simulate`)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per cluster (default 3)")
    parser.add_argument(
        "--floor-nodes",
        type=int,
        default=None,
        help="floor size instead of the auto-size quantile (e.g. 1: one always-on node per cluster)",
    )
    parser.add_argument("--no-shortage", action="store_true", help="skip the spot-shortage scenario")
    parser.add_argument(
        "--no-spread",
        action="store_true",
        help="skip the scenario without bin packing (kube-scheduler's default scoring)",
    )
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="only the what-if table: our policy with an instant idle signal, with and without the "
        "nodes release-on-cost keeps, beside gpuloan and karpenter",
    )
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = parser.parse_args(argv)
    missing = [c for c in CLUSTERS if not (Path(args.traces) / f"{c}.csv").is_file()]
    if missing:
        parser.error(f"--traces {args.traces}: no {', '.join(m + '.csv' for m in missing)} (see docs/simulator.md)")
    scenarios = [DEFAULT] + ([] if args.no_shortage else [SHORTAGE]) + ([] if args.no_spread else [SPREAD])
    if args.what_if:
        scenarios = [WHAT_IF]
    tasks = [
        (args.traces, c, args.seed + k, args.floor_nodes, scenario)
        for scenario in scenarios
        for c in CLUSTERS
        for k in range(args.seeds)
    ]
    t0 = time.perf_counter()
    done_at = {}
    print(f"simulating {len(tasks)} runs on {args.workers} worker(s) ...", file=sys.stderr)  # progress: stderr
    with ProcessPoolExecutor(args.workers) as pool:
        results = []
        for task, doc in zip(tasks, pool.map(run_cluster, tasks)):
            results.append(doc)
            done_at[task[4]] = time.perf_counter() - t0
    out = {}
    for scenario in scenarios:
        docs = []
        for c in CLUSTERS:
            runs = [d for t, d in zip(tasks, results) if t[1] == c and t[4] == scenario]
            docs.append(runner.summarize(runs))
        out[scenario] = docs
    titles = {
        DEFAULT: "Default: spot interruptions at the Spot Advisor rate, no spot shortage",
        SHORTAGE: "Scenario: spot shortages (one 3-hour spot-unavailable episode a week; the policies that use spot)",
        SPREAD: "Scenario: without bin packing (`cluster.bin_packing: false`: kube-scheduler's default scoring "
        "puts a pod on the emptiest node it fits; the policies that use spot)",
        WHAT_IF: "What-if: an instant idle signal (a node reads idle from the minute its last pod ends), with "
        "and without the nodes release-on-cost keeps",
    }
    for scenario in scenarios:
        print_tables(out[scenario], titles[scenario])
    slowest = max(r["sim_seconds"] for docs in out.values() for d in docs for run in d["runs"] for r in run)
    print(
        f"\nbenchmark: {len(CLUSTERS)} clusters x {args.seeds} seeds: "
        + ", ".join(f"{scenario.replace('_', ' ')} done at {done_at[scenario]:.1f} s" for scenario in scenarios)
        + f" wall on {args.workers} worker(s); slowest single run (57 days x 1 pool) {slowest:.2f} s"
    )
    from pricing.sources import catalog

    first = out[scenarios[0]]
    print(catalog.Prices.resolve().price_source(first[0]["pool"]["region"]) if first else "")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
