"""Skipping to the policy's next decision vs deciding every minute, measured in one run (`make bench-speed`).

Two workloads, each simulated twice on the same commit (SimSettings.skip_quiet_ticks on and off) with the gpuloan
controller; the results must be equal (costs to the cent, the same samples, the same figures), and the script
prints both CPU times and their ratio (issue 34's goal: at least 2x):
- one pool for a month: ITP cluster08, days 1-31, on the prod stack's `training` pool auto-sized (bench-sim's
  first case);
- a reduced `bench-org --model simulated`: the ten ITP clusters as ten pools, ONE tier rotation (the first), ONE
  seed (1), days 1-15 of the traces (sized on the first 7), the p90 floors lent, the default scenario only --
  the full benchmark runs three rotations, three seeds and 57 days.
Traces are read from --traces (default ../shared/data/traces/itp, never copied into the repository). CPU seconds
are the steadier figure on a shared machine; wall seconds are printed too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

DEFAULT_TRACES = REPO.parent / "shared" / "data" / "traces" / "itp"
DEFAULT_PRICES = REPO.parent / "shared" / "data" / "prices"
ORG_DAYS, ORG_SIZING_DAYS, ORG_ROTATION, ORG_SEED = (1, 15), 7, 0, 1


def _timed(run):
    c0, w0 = time.process_time(), time.perf_counter()
    out = run()
    return out, time.process_time() - c0, time.perf_counter() - w0


def _figures(metrics: dict) -> dict:
    """A run's results without its own bookkeeping (timings, calls, minutes skipped)."""
    return {k: v for k, v in metrics.items() if not k.startswith("sim_") and k not in ("decide_calls", "ticks_skipped")}


def one_pool(traces_dir: Path):
    """(every-minute run, skipping run) of the one-pool month, each (result, CPU s, wall s)."""
    import yaml

    from config import config
    from pricing.sources import catalog
    from sim import pool, runner, traces
    from sim.engine import SimSettings
    from sim.controllers.gpuloan import GpuLoan

    horizon = 31 * 1440
    cfg = config.from_stack_yaml(yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "Pulumi.prod.yaml")
    trace = traces.read_trace(traces_dir / "cluster08.csv").window(1, 31)
    spec = pool.auto_size(
        pool.spec_from_config(catalog.Prices.resolve(), cfg, "training"), trace, horizon_minutes=horizon
    )
    out = []
    for skip in (False, True):
        settings = replace(SimSettings(), skip_quiet_ticks=skip)
        (sim, metrics), cpu, wall = _timed(lambda: runner.run_one(spec, trace, GpuLoan(), settings, horizon))
        out.append(((_figures(metrics), sim.samples), cpu, wall))
    return out


def org(traces_dir: Path):
    """(every-minute run, skipping run) of the reduced organization, each (result, CPU s, wall s)."""
    import bench_org

    from pricing.sources import catalog
    from sim import demand as simdemand
    from advise import org_advisor

    price_book = catalog.Prices.resolve()  # read once, passed down
    p = price_book.price(bench_org.INSTANCE_TYPE, bench_org.REGION)
    if p is None:
        sys.exit(f"no price for {bench_org.INSTANCE_TYPE} in {bench_org.REGION}: set GPULOAN_PRICE_FILE")
    traces = simdemand.itp_traces(traces_dir, ORG_DAYS)
    sizing_hours = ORG_SIZING_DAYS * 24
    demands, runner = bench_org._sim_unit(
        price_book, ORG_ROTATION, ORG_SEED, traces, ORG_DAYS, sizing_hours, bench_org.DEFAULT_CHECKPOINT_MINUTES
    )
    floors, lend, controller = bench_org._sim_setups(demands, runner.prices, sizing_hours)[0]  # the p90 floors lent
    runner.use_cache = False
    default = org_advisor.scenario_for("default", max(d.hours for d in demands.values()), sizing_hours, ORG_SEED)
    base = runner.settings
    out = []
    for skip in (False, True):
        runner.settings = replace(base, skip_quiet_ticks=skip)
        run, cpu, wall = _timed(
            lambda: runner(
                demands, floors, lend=lend, controller=controller, scenario=default, report_from_hour=sizing_hours
            )
        )
        out.append((run, cpu, wall))
    return out


def report(name: str, runs) -> bool:
    (every, every_cpu, every_wall), (skip, skip_cpu, skip_wall) = runs
    equal = every == skip
    print(f"{name}:")
    print(f"  every minute  {every_cpu:7.1f} s CPU {every_wall:7.1f} s wall")
    print(f"  skipping      {skip_cpu:7.1f} s CPU {skip_wall:7.1f} s wall")
    print(f"  ratio {every_cpu / max(skip_cpu, 1e-9):.2f}x CPU; results equal: {'yes' if equal else 'NO'}")
    return equal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    args = parser.parse_args(argv)
    os.environ.setdefault("GPULOAN_PRICE_FILE", str(DEFAULT_PRICES))
    ok = report("one pool, cluster08 days 1-31 (prod training)", one_pool(args.traces))
    first, last = ORG_DAYS
    ok = (
        report(
            f"organization, 10 pools, rotation {ORG_ROTATION + 1}, seed {ORG_SEED}, days {first}-{last}",
            org(args.traces),
        )
        and ok
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
