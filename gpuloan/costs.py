"""Monthly cost estimate of a stack config: the guaranteed floor (fixed) and the elastic ceiling (variable).

Used by `gpuloan preview` and `gpuloan cost-diff`. Prices come from stacks/catalog.py (the price data copied
into data/prices/); nothing here invents a price. A month is 730 hours, AWS's own convention.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from stacks import catalog
from stacks.config import HOURS_PER_MONTH, ElasticCapacity, GpuLoanConfig, Pool, Reservation, guaranteed_monthly_usd


@dataclass(frozen=True)
class PoolCost:
    pool: str
    team: str
    tier: str
    guaranteed_instance_type: str | None
    guaranteed_nodes: int
    guaranteed_gpus: int
    guaranteed_usd_per_hour: float
    guaranteed_monthly_usd: float
    guaranteed_note: str
    elastic_instance_types: list[str]
    elastic_max_nodes: int
    elastic_max_gpus: int
    elastic_spot_usd_per_hour: float  # per node, the priciest of the pool's types (an upper bound)
    elastic_max_monthly_usd: float  # all elastic nodes up for the whole month at that price
    fallback_max_nodes: int
    fallback_usd_per_hour: float
    fallback_max_monthly_usd: float  # the on-demand fallback group at its max for the whole month
    elastic_note: str
    budget_monthly_usd: float | None

    @property
    def worst_case_monthly_usd(self) -> float:
        return self.guaranteed_monthly_usd + max(self.elastic_max_monthly_usd, self.fallback_max_monthly_usd)

    def to_json(self) -> dict:
        d = asdict(self)
        d["worst_case_monthly_usd"] = round(self.worst_case_monthly_usd, 2)
        return d


@dataclass(frozen=True)
class StackCost:
    region: str
    pools: list[PoolCost]
    budget_monthly_usd: float
    price_source: str

    @property
    def guaranteed_monthly_usd(self) -> float:
        return sum(p.guaranteed_monthly_usd for p in self.pools)

    @property
    def elastic_max_monthly_usd(self) -> float:
        return sum(p.elastic_max_monthly_usd for p in self.pools)

    @property
    def fallback_max_monthly_usd(self) -> float:
        return sum(p.fallback_max_monthly_usd for p in self.pools)

    def to_json(self) -> dict:
        return {
            "region": self.region,
            "pools": [p.to_json() for p in self.pools],
            "guaranteed_monthly_usd": round(self.guaranteed_monthly_usd, 2),
            "elastic_max_monthly_usd": round(self.elastic_max_monthly_usd, 2),
            "fallback_max_monthly_usd": round(self.fallback_max_monthly_usd, 2),
            "budget_monthly_usd": self.budget_monthly_usd,
            "budget_headroom_monthly_usd": round(self.budget_monthly_usd - self.guaranteed_monthly_usd, 2),
            "price_source": self.price_source,
        }


def _monthly(usd_per_hour: float, nodes: int) -> float:
    return round(usd_per_hour * nodes * HOURS_PER_MONTH, 2)


def pool_cost(cfg: GpuLoanConfig, pool: Pool) -> PoolCost:
    g, e = pool.guaranteed, pool.elastic
    g_rate, g_note = 0.0, ""
    if g is not None:
        g_rate = catalog.price(g.instance_type, cfg.region).ondemand_usd_per_hour
        g_note = {
            Reservation.none: "on-demand price; no reservation, so the floor is not guaranteed to launch",
            Reservation.odcr: "on-demand price (a capacity reservation bills at the on-demand rate, used or not)",
            Reservation.capacity_block: "shown at the on-demand rate; a Capacity Block is billed up front at the "
            "price quoted when you bought it",
        }[g.reservation]
    spot_rate = fallback_rate = 0.0
    e_note = ""
    spot_nodes = fallback_nodes = 0
    if e is not None:
        prices = [catalog.price(t, cfg.region) for t in e.instance_types]
        if e.capacity == ElasticCapacity.on_demand:
            spot_rate = max(p.ondemand_usd_per_hour for p in prices)
            e_note = "on-demand elastic group; priciest type"
        else:
            spot_rate = max(p.spot_or_ondemand_usd_per_hour for p in prices)
            bases = {p.spot_basis for p in prices}
            e_note = "spot, priciest type" + (
                "; some types have no spot price in the data, shown at on-demand" if "none" in bases else ""
            ) + ("; spot partly from the Spot Advisor estimate" if "advisor-estimate" in bases else "")
        spot_nodes = e.max_nodes
        if e.capacity == ElasticCapacity.spot_then_on_demand:
            fallback_nodes = e.on_demand_max_nodes or e.max_nodes
            fallback_rate = max(p.ondemand_usd_per_hour for p in prices)
    gpus_per_node = catalog.lookup(g.instance_type).gpus if g else 0
    e_gpus_per_node = catalog.lookup(e.instance_types[0]).gpus if e else 0
    return PoolCost(
        pool=pool.name,
        team=pool.team,
        tier=pool.tier.value,
        guaranteed_instance_type=g.instance_type if g else None,
        guaranteed_nodes=g.nodes if g else 0,
        guaranteed_gpus=(g.nodes * gpus_per_node) if g else 0,
        guaranteed_usd_per_hour=g_rate,
        # the same figure the config rules check against the budgets
        guaranteed_monthly_usd=round(guaranteed_monthly_usd(cfg, pool) or 0.0, 2),
        guaranteed_note=g_note,
        elastic_instance_types=list(e.instance_types) if e else [],
        elastic_max_nodes=spot_nodes,
        elastic_max_gpus=spot_nodes * e_gpus_per_node,
        elastic_spot_usd_per_hour=spot_rate,
        elastic_max_monthly_usd=_monthly(spot_rate, spot_nodes),
        fallback_max_nodes=fallback_nodes,
        fallback_usd_per_hour=fallback_rate,
        fallback_max_monthly_usd=_monthly(fallback_rate, fallback_nodes),
        elastic_note=e_note,
        budget_monthly_usd=pool.budget.monthly_usd if pool.budget else None,
    )


def stack_cost(cfg: GpuLoanConfig) -> StackCost:
    return StackCost(
        region=cfg.region,
        pools=[pool_cost(cfg, p) for p in cfg.pools],
        budget_monthly_usd=cfg.budget.monthly_usd,
        price_source=catalog.PRICE_SOURCE,
    )
