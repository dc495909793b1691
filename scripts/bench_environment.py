"""Environment simulator speed: 16 pools on one clock for a month, once per policy (gpuloan, karpenter).

The environment (built here from the prod stack, nothing deployed; traces read from --traces, default
../shared/data/traces/itp, never copied into the repository):
- 16 pools of p4d.24xlarge (8 GPUs per node), one per ITP trace month: clusters 01-09 over days 1-31 and
  clusters 02, 03, 04, 06, 07, 09, 10 over days 32-62, all replayed on the same 31-day clock;
- each pool sized from its own trace as `gpuloan simulate --auto-size` does (sim/pool.py auto_size: floor = the
  demand exceeded 75 % of the time in whole nodes, elastic max = the rest of the peak);
- tiers rotate production, experiment, learning; production pools have on-demand elastic capacity (the
  config rule), the others spot with on-demand fallback; every team lends its whole floor (the default), so all
  16 pools are one lending group -- the slowest case, since they skip quiet minutes only together.
Target: < 60 s per policy on the 2-core development machine. Prints wall and CPU seconds per policy and the
environment's headline figures (cost, lending, reclaims) so a run can be compared with the next.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DAYS = 31
MONTHS = [(k, 1, 31) for k in range(1, 10)] + [(k, 32, 62) for k in (2, 3, 4, 6, 7, 9, 10)]
TIERS = ("production", "experiment", "learning")
INSTANCE_TYPE = "p4d.24xlarge"


def environment(prices, traces_dir: Path, lending: bool = True, days: int = DAYS):
    """(config, demands, horizon minutes) of the benchmark environment; `lending=False`: Kueue off (nothing is
    lent or borrowed, every pool on its own capacity); `days`: each pool's first `days` days of its month
    (scripts/advise_environment.py builds the advisor's 3-week environment from them)."""
    from sim import traces

    horizon = days * 1440
    demands, read = {}, {}
    for cluster, first, last in MONTHS:
        if cluster not in read:
            read[cluster] = traces.read_trace(traces_dir / f"cluster{cluster:02d}.csv")
        demands[f"c{cluster:02d}-d{first}"] = read[cluster].window(first, min(last, first + days - 1))
    return pools_config(prices, demands, horizon, lending=lending), demands, horizon


def pools_config(
    prices,
    demands: dict,
    horizon: int,
    name: str = "bench-environment",
    lending: bool = True,
    floor_payment: str | None = None,
    max_lenders: int | None = None,
):
    """The benchmark's stack for these pools (name -> trace, in order): the prod stack's settings, each pool sized
    from its own trace, tiers rotating; also scripts/bench_scale.py's organizations. `max_lenders`: only the first
    that many pools with a floor lend it (the others' teams get lending_limit_pct 0), as a user of more pools than
    a Kueue queue can list floors for configures it (config/scheduling.py MAX_FLAVORS_PER_GROUP)."""
    from pricing import checks

    return checks.from_stack_yaml(
        pools_doc(prices, demands, horizon, lending, floor_payment, max_lenders), name, prices=prices
    )


def pools_doc(
    prices,
    demands: dict,
    horizon: int,
    lending: bool = True,
    floor_payment: str | None = None,
    max_lenders: int | None = None,
) -> dict:
    """pools_config's stack file, as the YAML document (`config:` ...)."""
    import yaml

    from pricing import checks
    from sim import pool

    doc = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())
    data = doc["config"]
    template = pool.spec_from_config(prices, checks.from_stack_yaml(doc, "Pulumi.prod.yaml", prices=prices), "training")
    pools = []
    for n, (pool_name, trace) in enumerate(demands.items()):
        # a quiet month cut short (bench-scale's few-day runs) has no demand to size from: one elastic node
        sized = pool.auto_size(template, trace, horizon_minutes=horizon) if trace.jobs else None
        tier = TIERS[n % len(TIERS)]
        entry = {
            "name": pool_name,
            "team": f"team-{pool_name}",
            "tier": tier,
            "elastic": {
                "instance_types": [INSTANCE_TYPE],
                "capacity": "on_demand" if tier == "production" else "spot_then_on_demand",
                "max_nodes": sized.elastic_max_nodes if sized else 1,
                "workload": "batch",
            },
        }
        if sized and sized.floor_nodes:
            entry["guaranteed"] = {
                "instance_type": INSTANCE_TYPE,
                "nodes": sized.floor_nodes,
                **({"payment": floor_payment} if floor_payment else {}),
            }
        pools.append(entry)
    data["gpuloan:pools"] = pools
    kueue: dict = {} if lending else {"enabled": False}
    if lending and max_lenders is not None:
        floors = [p for p in pools if "guaranteed" in p]
        kueue["teams"] = {p["team"]: {"lending_limit_pct": 0} for p in floors[max_lenders:]}
    data["gpuloan:scheduling"] = {"kueue": kueue}
    # the prod budget was set for its two pools, not for these: no cap binds in the benchmark
    data["gpuloan:budget"] = {**data["gpuloan:budget"], "monthly_usd": 10_000_000, "enforcement": "alert_only"}
    return doc


def main(argv: list[str] | None = None) -> int:
    from pricing.sources import catalog
    from sim.engine import SimSettings
    from sim.environment import simulate_environment
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.karpenter import Karpenter

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "traces" / "itp")
    parser.add_argument("--seed", type=int, default=SimSettings().seed)
    parser.add_argument("--no-lending", action="store_true", help="Kueue off: the same pools, nothing lent")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    prices = catalog.Prices.resolve()  # read once, passed down
    cfg, demands, horizon = environment(prices, args.traces, lending=not args.no_lending)
    jobs = sum(len(t.jobs) for t in demands.values())
    floors = sum(p.guaranteed.nodes for p in cfg.pools if p.guaranteed)
    print(
        f"{len(cfg.pools)} pools, {jobs} jobs, {DAYS} days, {floors} floor nodes of {INSTANCE_TYPE} "
        f"(built in {time.perf_counter() - t0:.1f} s)"
    )
    worst = 0.0
    for name, factory in (("gpuloan", lambda spec: GpuLoan()), ("karpenter", lambda spec: Karpenter())):
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate_environment(prices, cfg, demands, factory, SimSettings(seed=args.seed), horizon)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        worst = max(worst, cpu)
        e = res.environment
        print(
            f"  {name:10s} {wall:6.1f} s wall {cpu:6.1f} s CPU  cost ${e['total_cost_usd']:,.0f}  "
            f"served {e['gpu_hours_served']:,.0f} of {e['demand_gpu_hours']:,.0f} GPU-h  "
            f"floor used {e['floor_utilization']['owned']:.1%} owned + {e['floor_utilization']['lent']:.1%} lent  "
            f"reclaims {e['reclaim_preemptions']} ({e['reclaim_lost_gpu_hours']:.0f} GPU-h lost)  "
            f"production interruptions {e['production_interruptions']}  "
            f"p95 wait by tier {e['p95_wait_minutes_by_tier']}"
        )
    print(f"bench-environment: slowest policy {worst:.1f} s CPU (target < 60 s per policy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
