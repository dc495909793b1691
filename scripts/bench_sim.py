"""Simulator speed on month-long traces, every policy, one line each.

Traces (read from --traces, default ../shared/data/traces/itp, never copied into the repository):
- ITP cluster08 jobs, days 1-31, on the prod stack's `training` pool auto-sized (8-GPU nodes);
- the running-GPU series of the same month (`minute,gpus_demanded`: the GPUs cluster08's jobs would hold if
  each started on submission; mean ~71 GPUs), same pool;
- the running-GPU series of cluster09, days 1-31 (peak 118 GPUs), on the dev stack's pool auto-sized: 1-GPU
  nodes, so up to 118 nodes -- the most nodes per GPU, the hardest case for per-node work.
Target: < 5 s per policy and trace (pools up to 100 GPUs). Prints wall and CPU seconds (a shared 2-core machine's
wall time varies by 20 % and more from run to run; CPU time is the steadier figure).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DAYS = (1, 31)


def cases(traces_dir: Path):
    import yaml

    from sim import pool, traces
    from pricing import checks
    from pricing.sources import catalog

    prices = catalog.Prices.resolve()  # read once for every case

    def spec(stack: str, pool_name: str | None):
        cfg = checks.from_stack_yaml(
            yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text()), f"Pulumi.{stack}.yaml", prices=prices
        )
        return pool.spec_from_config(prices, cfg, pool_name)

    horizon = (DAYS[1] - DAYS[0] + 1) * 1440
    c08 = traces.read_trace(traces_dir / "cluster08.csv").window(*DAYS)
    c09 = traces.read_trace(traces_dir / "cluster09.csv").window(*DAYS)
    s08 = traces.SeriesTrace("cluster08-running-gpus", tuple(pool.demand_profile(c08, horizon)))
    s09 = traces.SeriesTrace("cluster09-running-gpus", tuple(pool.demand_profile(c09, horizon)))
    prod, dev = spec("prod", "training"), spec("dev", None)
    for trace, base in ((c08, prod), (s08, prod), (s09, dev)):
        yield trace, pool.auto_size(base, trace, horizon_minutes=horizon), horizon


def main(argv: list[str] | None = None) -> int:
    from sim import runner
    from sim.engine import SimSettings
    from sim.controllers.lineup import all_policies

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "traces" / "itp")
    args = parser.parse_args(argv)
    worst = 0.0
    for trace, spec, horizon in cases(args.traces):
        peak = spec.peak_nodes * spec.gpus_per_node
        print(
            f"{trace.name} (31 days, {trace.fmt}): pool floor {spec.floor_nodes} + elastic {spec.elastic_max_nodes} "
            f"x {spec.gpus_per_node}-GPU nodes (peak {peak} GPUs)"
        )
        for controller in all_policies(spec):
            t0 = time.perf_counter()
            _, m = runner.run_one(spec, trace, controller, SimSettings(), horizon)
            wall = time.perf_counter() - t0
            worst = max(worst, m["sim_cpu_seconds"])
            print(
                f"  {controller.name:18s} {wall:6.2f} s wall {m['sim_cpu_seconds']:6.2f} s CPU  "
                f"{m['ticks_skipped']:6d} of {horizon} ticks skipped"
            )
    print(f"bench-sim: slowest run {worst:.2f} s CPU (target < 5 s per policy and trace)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
