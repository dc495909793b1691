"""The fluid model of an environment: every pool's demand hour by hour, served with free repacking and no boots.

What it assumes (and why it is a bound, not a simulation):
- work is fluid: GPU-hours, not jobs on nodes; any idle GPU of a pool's floor can take any interruptible GPU-hour
  of any pool with the same instance type, at once, and gives it back at once (free repacking, no boot, no
  checkpoint lost on reclaim);
- each hour, in each pool: production work fills the pool's own floor first, then on-demand (production never
  runs on spot or on another pool's floor: Kueue keeps it off borrowed quota, docs/scheduling.md); interruptible
  work fills what production left of its own floor, then (when floors are lent) the idle floor of other pools of
  the same instance type, then spot, then on-demand when spot is short (the elastic capacity type
  `spot_then_on_demand`, and Karpenter's NodePool with both capacity types, fall back the same way);
- a floor is a capacity reservation billed every hour at the on-demand rate (`reserved` usage), used or not;
- the deployment is the simulated rows': a pool's elastic GPUs (spot and on-demand together) never exceed its
  node groups' limit (`PoolPrices.elastic_max_gpus`: sim/pool.py `PoolSpec.elastic_max_nodes`, the most elastic
  nodes the pool may run at once, the simulator's own cap). Past it, interruptible work gives way first and the
  rest is unmet, as in the simulator. Before issue 36 the fluid model had no cap: the "bound" served work the
  deployment cannot launch (29,610 GPU-hours a week in the 16-pool advise case) and so cost more than setups
  that could not serve it.

So nothing is ever interrupted or kept waiting here: production interruptions, reclaims and preemptions are 0 by
construction and there is no wait to measure (`pending_by_tier` and `production_waiting_gpu_hours` are None).
Only the scenarios' shortages leave work unmet: in an on-demand shortage hour no new elastic capacity of any kind
can be launched for the instance type, and each pool keeps at most the elastic GPUs it held the hour before the
episode (running instances keep running); production takes them first.

Output: an EnvironmentRun (sim/metrics.py; the simulator's runs have the same shape): the hourly usage records of
pricing/cost_model/billing.py (one per pool, purchase and hour with usage) and per-pool metrics; the caller bills
them with whatever commitments it is pricing. Plain arithmetic at hourly resolution: 10 pools over 57 days take a
few tens of milliseconds.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field

from pricing.cost_model import billing
from sim.demand import PoolDemand
from sim.metrics import EnvironmentRun, PoolMetrics

HOURS_PER_WEEK = 168
MODEL = "fluid"


@dataclass(frozen=True)
class PoolPrices:
    """What one pool runs on and what an instance-hour of it costs, bought each way."""

    instance_type: str
    region: str
    gpus_per_node: int
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None  # None: the pool uses no spot (its interruptible work runs on on-demand)
    elastic_max_gpus: float | None = None  # the most elastic GPUs at once (None: no limit, e.g. a bare model)


@dataclass(frozen=True)
class Scenario:
    """Hours in which capacity cannot be launched. Empty: the default (spot and on-demand always there)."""

    name: str = "default"
    spot_short_hours: frozenset[int] = frozenset()
    on_demand_short_hours: frozenset[int] = frozenset()  # no new elastic capacity at all (on-demand nor spot)


def episode_hours(hours: int, episodes_per_week: float, mean_hours: float, seed: int) -> frozenset[int]:
    """Hours covered by shortage episodes: starts a Poisson process at `episodes_per_week`, lengths exponential
    with mean `mean_hours`, rounded up to whole hours (seeded: the same hours for every setup of a seed)."""
    if episodes_per_week <= 0:
        return frozenset()
    rng = random.Random(f"shortage:{seed}:{episodes_per_week}:{mean_hours}")
    out: set[int] = set()
    t = rng.expovariate(episodes_per_week / HOURS_PER_WEEK)
    while t < hours:
        length = max(1, math.ceil(rng.expovariate(1 / mean_hours)))
        out.update(range(int(t), min(hours, int(t) + length)))
        t += rng.expovariate(episodes_per_week / HOURS_PER_WEEK)
    return frozenset(out)


@dataclass
class _Tally:
    """The figures the fluid model counts for one pool, hour by hour; returned frozen as PoolMetrics (its other
    fields keep their defaults: 0 by construction, or None where there is nothing to measure)."""

    floor_gpu_hours: float = 0.0
    floor_owned_gpu_hours: float = 0.0
    floor_lent_gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    borrowed_gpu_hours_from: dict[str, float] = field(default_factory=dict)
    unmet_gpu_hours: float = 0.0
    unmet_production_gpu_hours: float = 0.0


def run(
    demands: dict[str, PoolDemand],
    prices: dict[str, PoolPrices],
    floors_nodes: dict[str, int],
    *,
    lend: bool,
    scenario: Scenario = Scenario(),
    hours: int | None = None,
    report_from_hour: int = 0,
) -> EnvironmentRun:
    """Serve every pool's demand hour by hour (module docstring). Usage covers every hour (billing picks its
    window); metrics count the hours from `report_from_hour` on (the advisor's report window)."""
    names = list(demands)
    for n in names:
        if n not in prices:
            raise ValueError(f"pool '{n}': no prices")
        if floors_nodes.get(n, 0) < 0:
            raise ValueError(f"pool '{n}': floor must be >= 0 nodes, got {floors_nodes[n]}")
    horizon = hours if hours is not None else max((d.hours for d in demands.values()), default=0)
    metrics = {n: _Tally() for n in names}
    usage: list[billing.Usage] = []
    floor_gpus = {n: floors_nodes.get(n, 0) * prices[n].gpus_per_node for n in names}
    groups: dict[str, list[str]] = {}
    for n in names:  # a floor lends only to pools of its own instance type (Kueue flavors, docs/scheduling.md)
        groups.setdefault(prices[n].instance_type, []).append(n)
    held_od = {n: 0.0 for n in names}  # elastic GPUs held in the previous hour (kept through an od shortage)
    held_spot = {n: 0.0 for n in names}
    scratch = {n: _Tally() for n in names}  # metrics of hours before the report window, dropped
    for h in range(horizon):
        mx = metrics if h >= report_from_hour else scratch
        od_short = h in scenario.on_demand_short_hours
        spot_short = h in scenario.spot_short_hours or od_short
        od_gpus, spot_gpus = {}, {}
        for members in groups.values():
            idle, want = {}, {}
            for n in members:
                d, m, f = demands[n], mx[n], floor_gpus[n]
                p = d.production_gpus[h] if h < d.hours else 0.0
                o = d.interruptible_gpus[h] if h < d.hours else 0.0
                own_p = min(p, f)
                own_o = min(o, f - own_p)
                idle[n] = f - own_p - own_o
                want[n] = o - own_o
                m.floor_gpu_hours += f
                m.floor_owned_gpu_hours += own_p + own_o
                od_gpus[n] = p - own_p  # production past the floor: on-demand
            if lend:
                lendable, wanted = sum(idle.values()), sum(want.values())
                moved = min(lendable, wanted)
                if moved > 0:
                    for n in members:  # shares in proportion: fluid, so any split serves the same total
                        mx[n].floor_lent_gpu_hours += moved * idle[n] / lendable
                        got = moved * want[n] / wanted
                        mx[n].borrowed_gpu_hours += got
                        for lender in members:  # from each lender in proportion to its idle floor
                            part = got * idle[lender] / lendable
                            if part > 0 and lender != n:
                                mx[n].borrowed_gpu_hours_from[lender] = (
                                    mx[n].borrowed_gpu_hours_from.get(lender, 0.0) + part
                                )
                        want[n] -= got
            for n in members:
                pr = prices[n]
                rest = want[n]
                if od_short:
                    # no launches: production keeps the on-demand GPUs held, interruptible work the spot ones,
                    # then whatever on-demand production does not need
                    cap_od, cap_spot = held_od[n], held_spot[n]
                    prod_need = od_gpus[n]
                    prod_od = min(prod_need, cap_od)
                    unmet_p = prod_need - prod_od
                    int_spot = min(rest, cap_spot) if pr.spot_usd_per_hour is not None else 0.0
                    int_od = min(rest - int_spot, cap_od - prod_od)
                    unmet_o = rest - int_spot - int_od
                    od_gpus[n] = prod_od + int_od
                    spot_gpus[n] = int_spot
                    mx[n].unmet_production_gpu_hours += unmet_p
                    mx[n].unmet_gpu_hours += unmet_p + unmet_o
                    prod_elastic = prod_od
                elif pr.spot_usd_per_hour is None or spot_short:
                    prod_elastic = od_gpus[n]
                    od_gpus[n] += rest
                    spot_gpus[n] = 0.0
                else:
                    prod_elastic = od_gpus[n]
                    spot_gpus[n] = rest
                cap = pr.elastic_max_gpus
                if cap is not None and od_gpus[n] + spot_gpus[n] > cap + 1e-12:
                    # the node groups' limit: production keeps what it can, interruptible work gives way first
                    prod_kept = min(prod_elastic, cap)
                    other_kept = cap - prod_kept
                    other_spot = min(spot_gpus[n], other_kept)
                    other_od = min(od_gpus[n] - prod_elastic, other_kept - other_spot)
                    cut = od_gpus[n] + spot_gpus[n] - prod_kept - other_spot - other_od
                    mx[n].unmet_production_gpu_hours += prod_elastic - prod_kept
                    mx[n].unmet_gpu_hours += cut
                    od_gpus[n], spot_gpus[n] = prod_kept + other_od, other_spot
        for n in names:
            pr = prices[n]
            if not od_short:
                held_od[n], held_spot[n] = od_gpus[n], spot_gpus[n]
            else:  # a released instance cannot come back until the shortage ends
                held_od[n], held_spot[n] = min(held_od[n], od_gpus[n]), min(held_spot[n], spot_gpus[n])
            gpn = pr.gpus_per_node
            if floors_nodes.get(n, 0):
                usage.append(
                    billing.Usage(
                        h,
                        n,
                        pr.instance_type,
                        pr.region,
                        billing.RESERVED,
                        float(floors_nodes[n]),
                        pr.on_demand_usd_per_hour,
                    )
                )
            if od_gpus[n] > 1e-12:
                usage.append(
                    billing.Usage(
                        h,
                        n,
                        pr.instance_type,
                        pr.region,
                        billing.ON_DEMAND,
                        od_gpus[n] / gpn,
                        pr.on_demand_usd_per_hour,
                    )
                )
            if spot_gpus[n] > 1e-12:
                usage.append(
                    billing.Usage(
                        h, n, pr.instance_type, pr.region, billing.SPOT, spot_gpus[n] / gpn, pr.spot_usd_per_hour
                    )
                )
    pools = {n: PoolMetrics(**asdict(t)) for n, t in metrics.items()}
    return EnvironmentRun(MODEL, horizon, usage, pools, {n: d.tier for n, d in demands.items()})
