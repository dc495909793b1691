"""The simulated pool: one pool of a stack config turned into node types, prices and limits.

Prices come from pricing/sources/catalog.py (the price book in force: --price-file, $GPULOAN_PRICE_FILE or the cache filled
from AWS; docs/prices.md). The interruption rate comes from the price book's Spot Instance Advisor bucket:
- the guaranteed floor is billed around the clock at the rate it is paid (guaranteed.payment: on-demand, an RI or
  Savings Plan rate, a Capacity Block price or the user's own rate; pricing/sources/floor_pricing.py);
- the spot group is billed at the cheapest spot price among the pool's elastic types (EC2's price-capacity-optimized
  allocation launches the cheapest pool that has capacity), and is interrupted at that type's Spot Advisor rate;
- the on-demand group is billed at the first elastic type's on-demand price (EKS managed node groups launch
  on-demand types in the listed order, the "prioritized" allocation strategy).
Every policy in a comparison uses the same PoolSpec: same floor, same types, same prices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pricing.sources import catalog
from config.config import ElasticCapacity, GpuLoanConfig, Pool

# Spot Instance Advisor "frequency of interruption" buckets (share of instances interrupted over a month) ->
# the rate used here: the bucket's midpoint (">20%" taken as 25%).
ADVISOR_BUCKET_PER_MONTH = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}
DEFAULT_INTERRUPTIONS_PER_MONTH = 0.125  # no bucket in the data: the middle bucket


class PoolError(ValueError):
    """The pool cannot be simulated (unknown name, no prices, nothing elastic ...)."""


@dataclass(frozen=True)
class SizeSpec:
    """One more node size of a pool of several sizes (policy/sizes.py): its own spot and on-demand group, priced as
    the one-size pool's groups are (spot: the cheapest spot type of the size; on-demand: its first listed type)."""

    gpus_per_node: int
    spot_type: str | None
    spot_usd_per_hour: float
    on_demand_type: str | None
    on_demand_usd_per_hour: float
    spot_max_nodes: int
    on_demand_max_nodes: int


@dataclass(frozen=True)
class PoolSpec:
    name: str
    region: str
    tier: str
    team: str
    gpus_per_node: int
    floor_nodes: int
    floor_type: str | None
    floor_usd_per_hour: float  # per node, on-demand
    capacity: str  # spot | on_demand | spot_then_on_demand | none (no elastic group)
    spot_type: str | None
    spot_usd_per_hour: float
    spot_interruptions_per_month: float
    spot_interruption_bucket: str | None
    on_demand_type: str | None
    on_demand_usd_per_hour: float
    spot_max_nodes: int
    on_demand_max_nodes: int
    budget_monthly_usd: float | None
    oracle_usd_per_gpu_hour: float  # cheapest spot (or on-demand where no spot) price per GPU-hour of the types
    pool: Pool  # the config pool this spec was made from (knobs for our policy)
    # The prices this spec was priced with (spec_from_config's): the policy's settings and the bill read the same.
    prices: catalog.Prices = field(compare=False, repr=False)
    # the cluster's kube-scheduler scoring: most_allocated with cluster.bin_packing, else least_allocated (the
    # default profile; an existing cluster is taken to run it)
    placement: str = "least_allocated"
    # The pool's other node sizes, each its own pair of groups (sim/cloud.py size_group); the fields above are the
    # largest size's (gpus_per_node is the largest node: a job larger than it is a gang of such nodes). () = one size.
    sizes: tuple[SizeSpec, ...] = ()
    # GPUs per floor node where the floor is of another (smaller) size of the pool than gpus_per_node, as validate
    # allows (the floor's type of any size an elastic type has); 0: the floor is of the largest size.
    floor_gpus_per_node: int = 0

    @property
    def floor_node_gpus(self) -> int:
        """GPUs per floor node (the floor's own instance type)."""
        return self.floor_gpus_per_node or self.gpus_per_node

    @property
    def floor_gpus(self) -> int:
        return self.floor_nodes * self.floor_node_gpus

    @property
    def peak_gpus(self) -> int:
        """The GPUs of the pool at its peak: the floor's and the largest size's elastic max (the peak it is sized for)."""
        return self.floor_gpus + self.elastic_max_nodes * self.gpus_per_node

    @property
    def floor_peak_nodes(self) -> int:
        """The most floor nodes a floor sweep goes to: the floor's nodes that hold the pool's peak GPUs (peak_nodes
        where the floor is of the largest size)."""
        return -(-self.peak_gpus // self.floor_node_gpus)

    @property
    def has_spot(self) -> bool:
        return self.capacity in (ElasticCapacity.spot, ElasticCapacity.spot_then_on_demand)

    @property
    def has_on_demand(self) -> bool:
        return self.capacity in (ElasticCapacity.on_demand, ElasticCapacity.spot_then_on_demand)

    @property
    def elastic_max_nodes(self) -> int:
        """The most elastic nodes the pool may run at once: the peak the pool is sized for."""
        return max(self.spot_max_nodes if self.has_spot else 0, self.on_demand_max_nodes if self.has_on_demand else 0)

    @property
    def peak_nodes(self) -> int:
        return self.floor_nodes + self.elastic_max_nodes

    def size_gpus(self) -> tuple[int, ...]:
        """GPUs per node of every size, smallest first."""
        return tuple(sorted([self.gpus_per_node] + [z.gpus_per_node for z in self.sizes]))

    def describe(self) -> dict:
        sizes = (
            {
                "sizes": [
                    {
                        "gpus_per_node": z.gpus_per_node,
                        "spot_type": z.spot_type,
                        "on_demand_type": z.on_demand_type,
                        "spot_usd_per_hour": z.spot_usd_per_hour,
                        "on_demand_usd_per_hour": z.on_demand_usd_per_hour,
                        "spot_max_nodes": z.spot_max_nodes,
                        "on_demand_max_nodes": z.on_demand_max_nodes,
                    }
                    for z in self.sizes
                ]
            }
            if self.sizes
            else {}
        )
        return {
            **sizes,
            "name": self.name,
            "region": self.region,
            "gpus_per_node": self.gpus_per_node,
            "floor_nodes": self.floor_nodes,
            "floor_type": self.floor_type,
            "floor_gpus_per_node": self.floor_node_gpus,
            "capacity": str(self.capacity),
            "spot_type": self.spot_type,
            "on_demand_type": self.on_demand_type,
            "spot_max_nodes": self.spot_max_nodes if self.has_spot else 0,
            "on_demand_max_nodes": self.on_demand_max_nodes if self.has_on_demand else 0,
            "floor_usd_per_hour": self.floor_usd_per_hour,
            "spot_usd_per_hour": self.spot_usd_per_hour,
            "on_demand_usd_per_hour": self.on_demand_usd_per_hour,
            "spot_interruptions_per_month": self.spot_interruptions_per_month,
            "spot_interruption_bucket": self.spot_interruption_bucket,
            "oracle_usd_per_gpu_hour": self.oracle_usd_per_gpu_hour,
            "budget_monthly_usd": self.budget_monthly_usd,
            "placement": self.placement,
        }


def _price(prices: catalog.Prices, t: str, region: str) -> catalog.Price:
    p = prices.price(t, region)
    if p is None:
        raise PoolError(f"cannot simulate without prices: {prices.missing_price_reason(t, region)}")
    return p


def _floor_price(prices: catalog.Prices, region: str, pool: Pool) -> float:
    """One floor node at the rate it is paid (guaranteed.payment; pricing/sources/floor_pricing.py)."""
    from types import SimpleNamespace

    from pricing.cost_model.floor_bill import floor_rate
    from pricing.sources.floor_pricing import missing_rate_reason

    rate = floor_rate(prices, SimpleNamespace(region=region), pool)
    if rate is None:
        g = pool.guaranteed
        _price(prices, g.instance_type, region)  # no on-demand price at all: that message first
        raise PoolError(
            f"cannot simulate without the floor's rate: "
            f"{missing_rate_reason(prices, g.instance_type, region, g.price_model)}"
        )
    return rate.usd_per_hour


def spec_from_config(prices: catalog.Prices, cfg: GpuLoanConfig, pool_name: str | None = None) -> PoolSpec:
    """The pool `pool_name` (default: the stack's first pool) of a validated config, priced by `prices` plus the
    config's own `instance_prices`."""
    prices = prices.with_config(cfg)
    if pool_name is None:
        pool = cfg.pools[0]
    else:
        names = [p.name for p in cfg.pools]
        if pool_name not in names:
            raise PoolError(f"no pool '{pool_name}' in this stack; pools: {', '.join(names)}")
        pool = cfg.pool(pool_name)
    return replace(_spec(prices, cfg.region, _paid_as_covered(prices, cfg, pool)), placement=placement_of(cfg))


def _paid_as_covered(prices: catalog.Prices, cfg: GpuLoanConfig, pool: Pool) -> Pool:
    """The pool with its floor priced the way the environment pays it when this pool runs alone: a floor the
    organization's commitments cover in full (an RI count of its type at least its nodes, a plan that covers them:
    pricing/cost_model/floor_bill.py floor_payment_equivalent) at that commitment's rate, else as its own payment says."""
    from config.config import FloorPayment
    from pricing.cost_model.floor_bill import floor_payment_equivalent

    g = pool.guaranteed
    if g is None:
        return pool
    paid_as = floor_payment_equivalent(prices, cfg, pool)
    if paid_as == g.price_model:
        return pool
    return pool.model_copy(update={"guaranteed": g.model_copy(update={"payment": FloorPayment(paid_as)})})


def placement_of(cfg: GpuLoanConfig) -> str:
    """How the stack's cluster places a pod among the nodes it fits (sim/engine.py, docs/simulator.md)."""
    from config.config import NewCluster

    return "most_allocated" if isinstance(cfg.cluster, NewCluster) and cfg.cluster.bin_packing else "least_allocated"


def _spec(book: catalog.Prices, region: str, pool: Pool) -> PoolSpec:
    g, e = pool.guaranteed, pool.elastic
    types = ([g.instance_type] if g else []) + (list(e.instance_types) if e else [])
    gpus = book.lookup(types[0]).gpus
    floor_price = _floor_price(book, region, pool) if g else 0.0
    spot_type = od_type = None
    spot_price = od_price = 0.0
    rate, bucket = DEFAULT_INTERRUPTIONS_PER_MONTH, None
    capacity = "none"
    sizes: tuple[SizeSpec, ...] = ()
    if e:
        capacity = e.capacity
        by_size: dict[int, list[str]] = {}
        for t in e.instance_types:
            by_size.setdefault(book.lookup(t).gpus, []).append(t)
        # Several sizes: the largest is the spec's own (a job larger than a node is a gang of the largest nodes),
        # the others its sizes, each priced as a one-size pool's groups. The floor keeps its own type's size
        # (floor_gpus_per_node): its nodes are simulated with their own GPUs, as the product deploys them.
        gpus = max(by_size)
        for size, names in sorted(by_size.items()):
            if size == gpus:
                continue
            p = {t: _price(book, t, region) for t in names}
            cheapest = min(names, key=lambda t: p[t].spot_or_ondemand_usd_per_hour)
            sizes += (
                SizeSpec(
                    size,
                    cheapest,
                    p[cheapest].spot_or_ondemand_usd_per_hour,
                    names[0],
                    p[names[0]].ondemand_usd_per_hour,
                    e.max_nodes,
                    e.on_demand_group_max_nodes,
                ),
            )
        prices = {t: _price(book, t, region) for t in by_size[gpus]}
        od_type = by_size[gpus][0]
        od_price = prices[od_type].ondemand_usd_per_hour
        spot_type = min(by_size[gpus], key=lambda t: prices[t].spot_or_ondemand_usd_per_hour)
        spot_price = prices[spot_type].spot_or_ondemand_usd_per_hour
        bucket = prices[spot_type].interruption_bucket
        rate = ADVISOR_BUCKET_PER_MONTH.get(bucket or "", DEFAULT_INTERRUPTIONS_PER_MONTH)
    oracle = min(_price(book, t, region).spot_or_ondemand_usd_per_hour / book.lookup(t).gpus for t in types)
    budget = pool.budget.monthly_usd if pool.budget else None
    floor_gpus = book.lookup(g.instance_type).gpus if g else 0
    return PoolSpec(
        name=pool.name,
        region=region,
        tier=str(pool.tier),
        team=pool.team,
        gpus_per_node=gpus,
        floor_nodes=g.nodes if g else 0,
        floor_type=g.instance_type if g else None,
        floor_usd_per_hour=floor_price,
        capacity=capacity,
        spot_type=spot_type,
        spot_usd_per_hour=spot_price,
        spot_interruptions_per_month=rate,
        spot_interruption_bucket=bucket,
        on_demand_type=od_type,
        on_demand_usd_per_hour=od_price,
        spot_max_nodes=e.max_nodes if e else 0,
        on_demand_max_nodes=e.on_demand_group_max_nodes if e else 0,
        budget_monthly_usd=budget,
        oracle_usd_per_gpu_hour=oracle,
        pool=pool,
        prices=book,
        sizes=sizes,
        floor_gpus_per_node=floor_gpus if floor_gpus != gpus else 0,
    )


# --- auto-size ---------------------------------------------------------------------------------------------

# The floor covers the demand level exceeded 75% of the time, in whole nodes rounded down, and may be 0: a trace
# whose demand is below one node a quarter of the time gets no floor. Forcing one node there would add the same
# always-on on-demand node to every policy: it raises every cost / oracle ratio by a constant that is not a policy
# difference, hides how close the elastic policies are to the oracle, and makes floor-only look like it serves
# something. What a floor is worth on a trace is what --sweep-floor shows.
FLOOR_QUANTILE = 0.25


def demand_profile(trace, horizon_minutes: int | None = None) -> list[int]:
    """GPUs demanded per minute if every job started on submission (the oracle's schedule)."""
    from sim.traces import JobsTrace

    if not isinstance(trace, JobsTrace):
        return list(trace.gpus_demanded)
    if horizon_minutes is None:
        horizon_minutes = max((int((j.submit_s + j.duration_s) // 60) + 1 for j in trace.jobs), default=1)
    delta = [0] * (horizon_minutes + 1)
    for j in trace.jobs:
        a = int(j.submit_s // 60)
        b = min(horizon_minutes, int(math.ceil((j.submit_s + j.duration_s) / 60)))
        if a < horizon_minutes:
            delta[a] += j.gpus
            delta[b] -= j.gpus
    out, level = [], 0
    for m in range(horizon_minutes):
        level += delta[m]
        out.append(level)
    return out


def auto_size(
    spec: PoolSpec,
    trace,
    quantile: float = FLOOR_QUANTILE,
    horizon_minutes: int | None = None,
    floor_nodes: int | None = None,
) -> PoolSpec:
    """Size the pool from the trace: floor = the demand `quantile` in whole nodes (rounded down, 0 included; see
    FLOOR_QUANTILE), elastic max = the nodes that cover the peak on top of the floor. Types, prices and knobs stay the stack's.

    The budget is dropped: a stack's budget was set for its own pool size, not for this trace (a simulated
    budget cap would then measure the mismatch, not the policy)."""
    profile = sorted(demand_profile(trace, horizon_minutes))
    if not profile or profile[-1] == 0:
        raise PoolError(f"trace {trace.name} has no GPU demand to size a pool from")
    gpn, floor_gpn = spec.gpus_per_node, spec.floor_node_gpus  # a floor may be of a smaller size (floor_gpus_per_node)
    if floor_nodes is None:
        floor_nodes = profile[min(len(profile) - 1, int(quantile * len(profile)))] // floor_gpn
    floor_nodes = min(floor_nodes, math.ceil(profile[-1] / floor_gpn))
    elastic = max(1, math.ceil((profile[-1] - floor_nodes * floor_gpn) / gpn))
    floor_type = spec.floor_type or spec.on_demand_type or spec.spot_type
    floor_price = spec.floor_usd_per_hour or _price(spec.prices, floor_type, spec.region).ondemand_usd_per_hour
    capacity = spec.capacity if spec.capacity != "none" else ElasticCapacity.spot_then_on_demand
    spot_type, od_type = spec.spot_type or floor_type, spec.on_demand_type or floor_type
    spot_price = spec.spot_usd_per_hour or _price(spec.prices, spot_type, spec.region).spot_or_ondemand_usd_per_hour
    od_price = spec.on_demand_usd_per_hour or _price(spec.prices, od_type, spec.region).ondemand_usd_per_hour
    # Other node sizes: each size alone covers the same peak (the policy chooses among them, none is short).
    sizes = tuple(
        replace(
            z,
            spot_max_nodes=-(-elastic * gpn // z.gpus_per_node),
            on_demand_max_nodes=-(-elastic * gpn // z.gpus_per_node),
        )
        for z in spec.sizes
    )
    return replace(
        spec,
        floor_nodes=floor_nodes,
        floor_type=floor_type,
        floor_usd_per_hour=floor_price,
        capacity=capacity,
        spot_type=spot_type,
        on_demand_type=od_type,
        spot_usd_per_hour=spot_price,
        on_demand_usd_per_hour=od_price,
        spot_max_nodes=elastic,
        on_demand_max_nodes=elastic,
        budget_monthly_usd=None,
        sizes=sizes,
    )


def with_floor(spec: PoolSpec, floor_nodes: int) -> PoolSpec:
    """Same pool, another floor; elastic max keeps covering the same peak (in GPUs: the floor's nodes may be of a
    smaller size than the elastic max's)."""
    floor_type = spec.floor_type or spec.on_demand_type
    price = spec.floor_usd_per_hour or _price(spec.prices, floor_type, spec.region).ondemand_usd_per_hour
    elastic = max(1, -(-(spec.peak_gpus - floor_nodes * spec.floor_node_gpus) // spec.gpus_per_node))
    return replace(
        spec,
        floor_nodes=floor_nodes,
        floor_type=floor_type,
        floor_usd_per_hour=price,
        spot_max_nodes=elastic,
        on_demand_max_nodes=elastic,
    )
