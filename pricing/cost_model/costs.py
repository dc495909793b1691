"""Monthly cost estimate of a stack config: the guaranteed floor (fixed) and the elastic ceiling (variable).

Used by `gpuloan preview` and `gpuloan cost-diff`. Prices come from pricing/sources/catalog.py (the price book in force:
a price file or the cache filled from AWS, see docs/prices.md). Nothing here invents a price: a figure whose
price is unknown is None, and so is every total it would enter. A month is 730 hours, AWS's own convention.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pricing.sources import floor_pricing
from pricing.sources.catalog import Prices
from config.node_sizes import node_sizes
from config.scheduling import spot_allowed
from config.config import ElasticCapacity, GpuLoanConfig, Pool, Reservation
from pricing.cost_model.billing import HOURS_PER_MONTH
from pricing.cost_model.floor_bill import FloorBill, billing_key, floor_bill, floor_rate


@dataclass(frozen=True)
class PoolCost:
    pool: str
    team: str
    tier: str
    guaranteed_instance_type: str | None
    guaranteed_nodes: int
    guaranteed_gpus: int
    guaranteed_usd_per_hour: float | None  # None: no price for the type in the price source
    guaranteed_monthly_usd: float | None
    guaranteed_note: str
    guaranteed_price_model: (
        str | None
    )  # how the floor is paid (pricing/sources/floor_pricing.py PAYMENTS); None: no floor
    guaranteed_rate_source: str  # where the floor's rate was read ("" when unknown or no floor)
    guaranteed_commitments: list[str]  # the environment's commitments whose scope covers the floor's hours
    elastic_instance_types: list[str]
    elastic_max_nodes: int
    elastic_max_gpus: int
    elastic_spot_usd_per_hour: float | None  # per node, the priciest of the pool's types (an upper bound)
    elastic_max_monthly_usd: float | None  # all elastic nodes up for the whole month at that price
    fallback_max_nodes: int
    fallback_usd_per_hour: float | None
    fallback_max_monthly_usd: float | None  # the on-demand fallback group at its max for the whole month
    elastic_price_model: str
    fallback_price_model: str
    elastic_note: str
    budget_monthly_usd: float | None

    @property
    def worst_case_monthly_usd(self) -> float | None:
        floor, elastic, fallback = (
            self.guaranteed_monthly_usd,
            self.elastic_max_monthly_usd,
            self.fallback_max_monthly_usd,
        )
        if floor is None or elastic is None or fallback is None:
            return None
        return floor + max(elastic, fallback)

    def to_json(self) -> dict:
        d = asdict(self)
        worst = self.worst_case_monthly_usd
        d["worst_case_monthly_usd"] = None if worst is None else round(worst, 2)
        return d


@dataclass(frozen=True)
class StackCost:
    region: str
    pools: list[PoolCost]
    budget_monthly_usd: float
    price_source: str  # one line: where the prices come from and their date, or how to get prices
    unknown_prices: list[str]  # one line per instance type without a price (empty when every cost is known)
    has_price_source: bool  # False: no price file, no cache: every cost is unknown for the same one reason
    # The commitments the floors were billed with (pricing/cost_model/floor_bill.py): per commitment its monthly fee, the part
    # that covered floor hours and the part no floor used (billed all the same); None when a rate is unknown.
    commitments: tuple[dict, ...] = ()
    unused_commitment_monthly_usd: float | None = 0.0

    def _total(self, name: str) -> float | None:
        values = [getattr(p, name) for p in self.pools]
        return None if any(v is None for v in values) else round(sum(values), 2)

    @property
    def guaranteed_monthly_usd(self) -> float | None:
        """Fixed instance spend: the floors as billed plus the commitments' fees no floor used."""
        floors = self._total("guaranteed_monthly_usd")
        if floors is None or self.unused_commitment_monthly_usd is None:
            return None
        return round(floors + self.unused_commitment_monthly_usd, 2)

    @property
    def elastic_max_monthly_usd(self) -> float | None:
        return self._total("elastic_max_monthly_usd")

    @property
    def fallback_max_monthly_usd(self) -> float | None:
        return self._total("fallback_max_monthly_usd")

    def to_json(self) -> dict:
        fixed = self.guaranteed_monthly_usd
        return {
            "region": self.region,
            "pools": [p.to_json() for p in self.pools],
            "guaranteed_monthly_usd": fixed,
            "commitments": list(self.commitments),
            "unused_commitment_monthly_usd": self.unused_commitment_monthly_usd,
            "elastic_max_monthly_usd": self.elastic_max_monthly_usd,
            "fallback_max_monthly_usd": self.fallback_max_monthly_usd,
            "budget_monthly_usd": self.budget_monthly_usd,
            "budget_headroom_monthly_usd": None if fixed is None else round(self.budget_monthly_usd - fixed, 2),
            "price_source": self.price_source,
            "unknown_prices": self.unknown_prices,
            "has_price_source": self.has_price_source,
        }


def _monthly(usd_per_hour: float | None, nodes: int) -> float | None:
    if nodes == 0:
        return 0.0  # no node costs nothing, priced or not
    return None if usd_per_hour is None else round(usd_per_hour * nodes * HOURS_PER_MONTH, 2)


def pool_cost(prices: Prices, cfg: GpuLoanConfig, pool: Pool, fixed_bill: FloorBill | None = None) -> PoolCost:
    """The pool's figures; its floor as billed with the environment's commitments (`fixed_bill`, computed here
    when not given: stack_cost bills the environment once for all pools)."""
    g, e = pool.guaranteed, pool.elastic
    g_rate: float | None = 0.0
    g_note, g_model, g_source = "", None, ""
    fixed_bill = fixed_bill if fixed_bill is not None else floor_bill(prices, cfg)
    i = next(i for i, p in enumerate(cfg.pools) if p is pool)
    fixed = 0.0 if g is None else fixed_bill.pool_usd(billing_key(cfg, i))
    if g is not None:
        rate = floor_rate(prices, cfg, pool)
        g_model, g_source = g.price_model, (rate.source if rate else "")
        # Per node and hour as billed: the floor's own rate, or less where a commitment covers its hours.
        g_rate = None if fixed is None else round(fixed / (g.nodes * HOURS_PER_MONTH), 6)
        g_note = floor_pricing.BILLING[g_model] + (
            "; no reservation, so the floor is not guaranteed to launch" if g.reservation == Reservation.none else ""
        )
        covering = [n for n in fixed_bill.covering.get(billing_key(cfg, i), ()) if not n.startswith("pools[")]
        if covering:
            g_note += (
                "; the organization's commitments " + ", ".join(covering) + " discount its instance-hours, "
                "those in a capacity reservation too (covered hours at their rates; a commitment's unused part "
                "is on its own row)"
            )
    spot_rate: float | None = 0.0
    fallback_rate: float | None = 0.0
    e_note = ""
    spot_nodes = fallback_nodes = 0
    if e is not None:
        type_prices = [prices.price(t, cfg.region) for t in e.instance_types]
    if e is not None and None in type_prices:
        # The pool's ceiling is its priciest type: one unknown type makes the whole ceiling unknown.
        spot_rate = fallback_rate = None
        spot_nodes = e.max_nodes
        if e.capacity == ElasticCapacity.spot_then_on_demand:
            fallback_nodes = e.on_demand_group_max_nodes
        e_note = "price unknown for " + ", ".join(t for t, p in zip(e.instance_types, type_prices) if p is None)
    elif e is not None:
        priced = [p for p in type_prices if p is not None]  # all of them: none is unknown here
        # Several node sizes (config/node_sizes.py): each size's groups reach max_nodes, so the ceiling is per node
        # of every size together, the priciest type of each size. One size: its priciest type, as before.
        sizes = [
            [priced[e.instance_types.index(t)] for t in z.instance_types]
            for z in node_sizes(e.instance_types, facts=cfg.instance_facts)
        ]
        if e.capacity == ElasticCapacity.on_demand:
            spot_rate = sum(max(p.ondemand_usd_per_hour for p in z) for z in sizes)
            e_note = "on-demand elastic group; priciest type"
        elif not spot_allowed(cfg, pool):
            # Kueue keeps this pool's production work off spot (config/scheduling.py): the policy grows the
            # on-demand group for it, so a ceiling at spot prices would understate what its elastic nodes cost.
            spot_rate = sum(max(p.ondemand_usd_per_hour for p in z) for z in sizes)
            e_note = (
                f"production work stays off spot ({pool.name} is not in scheduling.kueue.production_spot_pools):"
                " its elastic nodes are on-demand; priciest type"
            )
        else:
            spot_rate = sum(max(p.spot_or_ondemand_usd_per_hour for p in z) for z in sizes)
            bases = {p.spot_basis for p in priced}
            e_note = (
                "spot, priciest type"
                + ("; some types have no spot price in the data, shown at on-demand" if "none" in bases else "")
                + ("; spot partly from the Spot Advisor estimate" if "advisor-estimate" in bases else "")
            )
        spot_nodes = e.max_nodes
        if e.capacity == ElasticCapacity.spot_then_on_demand:
            fallback_nodes = e.on_demand_group_max_nodes
            fallback_rate = sum(max(p.ondemand_usd_per_hour for p in z) for z in sizes)
        if len(sizes) > 1:
            e_note += f"; {len(sizes)} node sizes, each its own groups up to max_nodes: rates per node of every size"
    gpus_per_node = cfg.gpu_type(g.instance_type).gpus if g else 0
    e_gpus_per_node = sum(z.gpus_per_node for z in node_sizes(e.instance_types, facts=cfg.instance_facts)) if e else 0
    return PoolCost(
        pool=pool.name,
        team=pool.team,
        tier=pool.tier.value,
        guaranteed_instance_type=g.instance_type if g else None,
        guaranteed_nodes=g.nodes if g else 0,
        guaranteed_gpus=(g.nodes * gpus_per_node) if g else 0,
        guaranteed_usd_per_hour=g_rate,
        # the same figure the config rules check against the budgets
        guaranteed_monthly_usd=None if fixed is None else round(fixed, 2),
        guaranteed_note=g_note,
        guaranteed_price_model=g_model,
        guaranteed_rate_source=g_source,
        guaranteed_commitments=[
            n for n in fixed_bill.covering.get(billing_key(cfg, i), ()) if not n.startswith("pools[")
        ],
        elastic_instance_types=list(e.instance_types) if e else [],
        elastic_max_nodes=spot_nodes,
        elastic_max_gpus=spot_nodes * e_gpus_per_node,
        elastic_spot_usd_per_hour=spot_rate,
        elastic_max_monthly_usd=_monthly(spot_rate, spot_nodes),
        fallback_max_nodes=fallback_nodes,
        fallback_usd_per_hour=fallback_rate,
        fallback_max_monthly_usd=_monthly(fallback_rate, fallback_nodes),
        elastic_price_model=(
            "none"
            if e is None
            else "on_demand"
            if e.capacity == ElasticCapacity.on_demand or not spot_allowed(cfg, pool)
            else "spot"
        ),
        fallback_price_model="on_demand" if fallback_nodes else "none",
        elastic_note=e_note,
        budget_monthly_usd=pool.budget.monthly_usd if pool.budget else None,
    )


def unknown_prices(prices: Prices, cfg: GpuLoanConfig) -> list[str]:
    """One line per instance type of the stack that the price source cannot price, saying why and the fix."""
    types = []
    for p in cfg.pools:
        pool_types = [p.guaranteed.instance_type] if p.guaranteed else []
        pool_types += list(p.elastic.instance_types) if p.elastic else []
        for t in pool_types:
            if t not in types and prices.price(t, cfg.region) is None:
                types.append(t)
    return [f"{t}: {prices.missing_price_reason(t, cfg.region)}" for t in types]


def stack_cost(prices: Prices, cfg: GpuLoanConfig) -> StackCost:
    fixed_bill = floor_bill(prices, cfg)  # one bill for the environment: a commitment covers several pools
    unused = fixed_bill.unused_commitment_usd
    if unused is None and not cfg.commitments:
        # nothing committed for the environment (a per-pool shorthand covers exactly its floor): nothing unused,
        # known without a price, and no row for it
        unused = 0.0
    return StackCost(
        region=cfg.region,
        pools=[pool_cost(prices, cfg, p, fixed_bill) for p in cfg.pools],
        budget_monthly_usd=cfg.budget.monthly_usd,
        price_source=prices.price_source(cfg.region),
        unknown_prices=unknown_prices(prices, cfg)
        + [line for line in fixed_bill.unknown if line.startswith("commitments[")],
        has_price_source=prices.origin is not None,
        commitments=fixed_bill.commitments,
        unused_commitment_monthly_usd=None if unused is None else round(unused, 2),
    )
