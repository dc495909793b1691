"""The docs/benchmarks.md benchmark: ITP clusters 01, 05, 08, 09, 10, days 1-57, every policy on the same pool.

The pool is the prod stack's `training` pool (p4d.24xlarge floor, spot p4d/p5 with on-demand fallback) auto-sized
from each cluster's demand (floor at the 25th percentile of demand, 0 nodes included, elastic max covering the
peak). One command: `make benchmark` (or `.venv/bin/python scripts/benchmark.py [--json out.json] [--seed N]
[--floor-nodes N]`).
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
# The public ITP traces live beside the project, never in it (docs/simulator.md says where to get them).
DEFAULT_TRACES = REPO.parent / "shared" / "data" / "traces" / "itp"


def run_cluster(args: tuple[str, int, int | None, str]) -> dict:
    import yaml

    from sim import pool, runner, traces
    from sim.engine import SimSettings
    from stacks import config

    cluster, seed, floor_nodes, traces_dir = args
    cfg = config.from_stack_yaml(yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text()), f"Pulumi.{STACK}.yaml")
    trace = traces.read_trace(Path(traces_dir) / f"{cluster}.csv").window(*DAYS)
    horizon = (DAYS[1] - DAYS[0] + 1) * 1440
    spec = pool.auto_size(pool.spec_from_config(cfg, POOL), trace, horizon_minutes=horizon, floor_nodes=floor_nodes)
    t0 = time.perf_counter()
    doc = runner.compare(spec, trace, SimSettings(seed=seed), horizon=horizon)
    doc.pop("_series")
    doc["wall_seconds"] = round(time.perf_counter() - t0, 2)
    doc["dominated_by"] = runner.dominated_by(doc, "gpuloan")
    doc["defaults_dominated_by"] = runner.dominated_by(doc, "gpuloan-defaults")
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--floor-nodes", type=int, default=None,
                        help="floor size instead of the auto-size quantile (e.g. 1: one always-on node per cluster)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), metavar="DIR",
                        help=f"folder of the ITP cluster CSVs (default {DEFAULT_TRACES})")
    args = parser.parse_args(argv)
    missing = [c for c in CLUSTERS if not (Path(args.traces) / f"{c}.csv").is_file()]
    if missing:
        parser.error(f"--traces {args.traces}: no {', '.join(m + '.csv' for m in missing)} (see docs/simulator.md)")
    t0 = time.perf_counter()
    print(f"simulating {len(CLUSTERS)} clusters on {args.workers} worker(s) ...", file=sys.stderr)  # progress: stderr
    with ProcessPoolExecutor(args.workers) as pool:
        docs = list(pool.map(run_cluster, [(c, args.seed, args.floor_nodes, args.traces) for c in CLUSTERS]))
    wall = time.perf_counter() - t0
    from gpuloan import tables  # the one table style of the gpuloan commands

    cols = ("name", "total_cost_usd", "cost_over_oracle", "p95_wait_minutes", "interruptions", "unmet_gpu_hours")
    console = tables.console()
    for doc in docs:
        p = doc["pool"]
        table = tables.table(f"{doc['trace']}: floor {p['floor_nodes']} x {p['floor_type']}, elastic max "
                             f"{p['spot_max_nodes']} nodes; oracle ${doc['oracle_cost_usd']:,.0f}; "
                             f"{doc['wall_seconds']} s", ("policy", "total $", "cost/oracle", "p95 wait min",
                                                         "interruptions", "unmet GPU-h"))
        for r in doc["policies"]:
            table.add_row(*(f"{r[c]:,.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
        console.print(table)
        print(f"  gpuloan dominated by: {doc['dominated_by'] or 'none'}; "
              f"gpuloan-defaults dominated by: {doc['defaults_dominated_by'] or 'none'}")
    slowest = max(r["sim_seconds"] for d in docs for r in d["policies"] if r["name"] == "gpuloan")
    print(f"\nbenchmark wall time {wall:.1f} s on {args.workers} worker(s); slowest gpuloan run (57 days x 1 pool) "
          f"{slowest:.2f} s")
    from stacks import catalog

    print(catalog.price_source(docs[0]["pool"]["region"]) if docs else "")
    if args.json:
        Path(args.json).write_text(json.dumps(docs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
