"""Pods that may not run on spot (docs/policy.md, "Pods that may not run on spot"): three ITP clusters as one
environment over days 1-14, each pool on p4d.24xlarge. cluster04 is a production pool (floor of 4, on-demand
elastic); cluster07 (experiment) and cluster08 (learning) run 30 % production work kept off spot on
`spot_then_on_demand` elastic capacity. Prints, per policy and interruptible pool, the p95 wait per job class, the
unmet GPU-hours and the elastic spend. Needs the shared price table and traces:

    GPULOAN_PRICE_FILE=../shared/data/prices .venv/bin/python scripts/bench_off_spot.py --traces ../shared/data/traces/itp
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim.engine import SimSettings  # noqa: E402
from sim.environment import simulate_environment  # noqa: E402
from sim.controllers.gpuloan import GpuLoan  # noqa: E402
from sim.controllers.karpenter import Karpenter  # noqa: E402
from sim.traces import read_trace  # noqa: E402
from pricing import checks  # noqa: E402
from pricing.sources import catalog  # noqa: E402

DAYS = (1, 14)
INSTANCE_TYPE = "p4d.24xlarge"
SHARED_POOLS = ("cluster07", "cluster08")


def _pool(name: str, tier: str, capacity: str, floor: int, share: float | None = None) -> dict:
    p = {
        "name": name,
        "team": f"team-{name}",
        "tier": tier,
        "elastic": {"instance_types": [INSTANCE_TYPE], "capacity": capacity, "max_nodes": 40},
    }
    if floor:
        p["guaranteed"] = {"instance_type": INSTANCE_TYPE, "nodes": floor}
    if share is not None:
        p["service_target"] = {"production_share_pct": share}
    return p


def environment_config(prices):
    """The dev stack with the three pools (its budget raised: the dev budget is for its one pool)."""
    data = copy.deepcopy(yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())["config"])
    data["gpuloan:pools"] = [
        _pool("cluster04", "production", "on_demand", 4),
        _pool("cluster07", "experiment", "spot_then_on_demand", 0, 30),
        _pool("cluster08", "learning", "spot_then_on_demand", 0, 30),
    ]
    data["gpuloan:scheduling"] = {"kueue": {}}
    data["gpuloan:budget"]["monthly_usd"] = 10_000_000
    return checks.from_stack_yaml({"config": data}, "bench-off-spot", prices=prices)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=str(REPO.parent / "shared" / "data" / "traces" / "itp"), metavar="DIR")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    prices = catalog.Prices.resolve()  # read once, passed down
    cfg = environment_config(prices)
    traces = {p.name: read_trace(Path(args.traces) / f"{p.name}.csv").window(*DAYS) for p in cfg.pools}
    horizon = (DAYS[1] - DAYS[0] + 1) * 1440
    print(
        "| policy | pool | p95 wait production (min) | p95 wait interruptible (min) | unmet GPU-h | "
        "elastic spot $ | elastic on-demand $ | production interruptions |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, factory in (("gpuloan", lambda spec: GpuLoan()), ("karpenter", lambda spec: Karpenter())):
        t0 = time.perf_counter()
        res = simulate_environment(prices, cfg, traces, factory, SimSettings(seed=args.seed), horizon)
        for pool in SHARED_POOLS:
            m = res.pools[pool]
            wait = m["p95_wait_minutes_by_class"]
            print(
                f"| {name} | {pool} | {wait['production']} | {wait['interruptible']} | {m['unmet_gpu_hours']:,.1f} | "
                f"{m['elastic_spot_cost_usd']:,.0f} | {m['elastic_on_demand_cost_usd']:,.0f} | "
                f"{m['production_interruptions']} |"
            )
        print(f"<!-- {name}: {time.perf_counter() - t0:.1f} s -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
