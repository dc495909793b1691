"""Typed config (config/config.py) -> policy.model.Settings: a pure mapping, used by the stack (Lambda settings
JSON) and by the simulator, so both run the policy with the same knobs.

Group names are plain strings; the stack passes resolved node group names (inside an `apply`), the simulator
any labels it likes. Prices per node come from pricing/sources/catalog.py: for a pool of several instance types the
most expensive type's price (a budget cap must not under-estimate); a type without a spot price counts at
its on-demand price. With no price for a type, `settings_for` raises PriceUnknown, unless the caller allows
unknown prices (an offline or `pulumi preview` run, where nothing is deployed): then those rates are null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast
from types import SimpleNamespace

from pricing.sources import catalog
from pricing.sources.catalog import Prices
from config import scheduling, versions
from config.budget_plan import budget_specs
from config.config import ElasticCapacity, GpuLoanConfig, Pool, Reservation
from pricing.cost_model.billing import HOURS_PER_MONTH
from pricing.cost_model.floor_bill import FloorBill, billing_key, floor_bill
from pricing.cost_model.floor_bill import floor_rate as config_floor_rate
from pricing.sources.floor_pricing import missing_rate_reason

from policy.model import NodeSize, PoolSettings, Settings, ShardSettings
from config.instance_types import known_type
from config.node_sizes import other_size_of_key, pool_sizes


@dataclass(frozen=True)
class GroupNames:
    """Node group names of one pool; None where the pool has no such group."""

    spot: str | None = None
    on_demand: str | None = None
    guaranteed: str | None = None
    # The pool's other node sizes (config/node_sizes.py): (GPUs per node, spot group, on-demand group) each.
    other_sizes: tuple[tuple[int, str | None, str | None], ...] = ()

    @property
    def other_size_groups(self) -> tuple[str | None, ...]:
        return tuple(n for _, spot, od in self.other_sizes for n in (spot, od))

    @classmethod
    def from_keys(cls, names: dict[str, str]) -> "GroupNames":
        """From ElasticCapacity.group_names' shape: "spot", "on_demand", "guaranteed", and "spot-4gpu",
        "on_demand-4gpu" ... for the other sizes."""
        sizes: dict[int, dict[str, str]] = {}
        for key, value in names.items():
            other = other_size_of_key(key)
            if other is not None:
                sizes.setdefault(other[1], {})[other[0]] = value
        return cls(
            names.get("spot"),
            names.get("on_demand"),
            names.get("guaranteed"),
            tuple((g, sizes[g].get("spot"), sizes[g].get("on_demand")) for g in sizes),
        )


class PriceUnknown(ValueError):
    """The policy's budget cap needs a price the price source does not have."""


def missing_prices(prices: Prices, cfg: GpuLoanConfig) -> list[str]:
    """One line per instance type the policy would need a price for and the price source lacks."""
    types = []
    for pool in cfg.pools:
        names = [pool.guaranteed.instance_type] if pool.guaranteed else []
        names += list(pool.elastic.instance_types) if pool.elastic else []
        types += [t for t in names if t not in types and prices.price(t, cfg.region) is None]
    return [f"{t}: {prices.missing_price_reason(t, cfg.region)}" for t in types]


def _price(prices: Prices, cfg: GpuLoanConfig, t: str, allow_unknown: bool) -> catalog.Price | None:
    p = prices.price(t, cfg.region)
    if p is None and not allow_unknown:
        raise PriceUnknown(
            f"the policy function needs the price of {t} in {cfg.region} for its budget cap: "
            f"{prices.missing_price_reason(t, cfg.region)}"
        )
    return p


def _prices(
    prices: Prices, cfg: GpuLoanConfig, types: list[str], allow_unknown: bool = False
) -> tuple[float | None, float | None, tuple[tuple[str, float, float], ...]]:
    """(spot, on-demand) price of the node a group of these types launches, and (type, spot, on-demand) for each
    type. An on-demand group launches its types in the listed order (EKS's "prioritized" allocation,
    stacks/capacity/node_groups.py): its first type. A spot group uses price-capacity-optimized, which asks the
    lowest-priced of the pools with the most capacity: the cheapest type, while that type has capacity; a node of
    another type is priced at its own type once it runs (policy/decide/common.py group_usd_per_hour)."""
    rows = []
    for t in types:
        p = _price(prices, cfg, t, allow_unknown)
        if p is None:
            return None, None, ()  # one unknown type makes the group's rate unknown: no cap on a guess
        rows.append((t, p.spot_or_ondemand_usd_per_hour, p.ondemand_usd_per_hour))
    return min(r[1] for r in rows), rows[0][2], tuple(rows)


def _rate(usd_per_hour: float | None) -> float:
    """A rate as the settings carry it. None only where the caller allowed unknown prices (an offline or `pulumi
    preview` run: nothing is deployed, the rate is null in the settings JSON); policy.model types the deployed
    settings, which never hold None (settings_for raises PriceUnknown first). A type-level cast, no conversion."""
    return cast(float, usd_per_hour)


def _type_rows(spot_group: str | None, od_group: str | None, rows) -> tuple[tuple[str, str, float], ...]:
    """PoolSettings.instance_usd_per_hour rows of one size's groups."""
    out = []
    for t, spot, od in rows:
        if spot_group:
            out.append((spot_group, t, spot))
        if od_group:
            out.append((od_group, t, od))
    return tuple(out)


def pool_settings(
    prices: Prices,
    cfg: GpuLoanConfig,
    pool: Pool,
    names: GroupNames,
    budget_name: str | None = None,
    allow_unknown_prices: bool = False,
    fixed_bill: FloorBill | None = None,
) -> PoolSettings:
    e, g = pool.elastic, pool.guaranteed
    loan = loan_settings(cfg, pool)  # before `cfg` may stand for this pool alone below
    floor_gpus = known_type(g.instance_type, prices.book.instance_facts).gpus if g else 0
    floor_rate: float | None = 0.0
    if g is not None:
        # The floor as billed with the environment's commitments (pricing/cost_model/floor_bill.py, the same month preview and
        # the budget rule price): the fixed part of the budget projection. A user rate needs no price book.
        if fixed_bill is None and not hasattr(cfg, "pools"):
            # One pool priced alone (the simulator passes its region only and sets the floor's rate itself):
            # the pool's own floor and its per-pool shorthand, no environment commitments. Duck-typed: the three
            # fields floor_bill and the pricing below read of a config (the cast is for mypy only).
            cfg = cast(GpuLoanConfig, SimpleNamespace(region=cfg.region, pools=[pool], commitments=[]))
        fixed_bill = fixed_bill if fixed_bill is not None else floor_bill(prices, cfg)
        i = next(i for i, p in enumerate(cfg.pools) if p is pool)
        monthly = fixed_bill.pool_usd(billing_key(cfg, i))
        if monthly is None:
            rate = config_floor_rate(prices, cfg, pool)
            if rate is None:
                _price(prices, cfg, g.instance_type, allow_unknown_prices)  # no on-demand price: the usual message
            if not allow_unknown_prices:
                # Unknown spend is not zero: no budget cap without the figure.
                reason = (
                    missing_rate_reason(prices, g.instance_type, cfg.region, g.price_model)
                    if rate is None
                    else "; ".join(fixed_bill.unknown)
                )
                raise PriceUnknown(
                    f"the policy function needs the {g.price_model} rate of the floor ({g.instance_type} "
                    f"in {cfg.region}) for its budget cap: {reason}"
                )
        floor_rate = None if monthly is None else monthly / HOURS_PER_MONTH
    if e is None:
        gpus = floor_gpus or 1
        spot_usd: float | None = 0.0
        od_usd: float | None = 0.0
        spot_group = od_group = None
        spot_max = od_max = 0
        knobs: dict[str, Any] = {}
    else:
        sizes = pool_sizes(e, prices.book.instance_facts)
        gpus = sizes[0].gpus_per_node
        # the plain size's groups price its own types: one shape per group (config/node_sizes.py)
        spot_usd, od_usd, type_rows = _prices(prices, cfg, list(sizes[0].instance_types), allow_unknown_prices)
        has_spot = e.capacity in (ElasticCapacity.spot, ElasticCapacity.spot_then_on_demand)
        has_od = e.capacity in (ElasticCapacity.on_demand, ElasticCapacity.spot_then_on_demand)
        spot_group = names.spot if has_spot else None
        od_group = names.on_demand if has_od else None
        instance_rows = _type_rows(spot_group, od_group, type_rows)
        spot_max = e.max_nodes if has_spot else 0
        od_max = e.on_demand_group_max_nodes if has_od else 0
        knobs = dict(
            scale_up_utilization_pct=e.scale_up_utilization_pct,
            scale_up_window_minutes=e.scale_up_window_minutes,
            idle_utilization_pct=e.idle_utilization_pct,
            idle_timeout_minutes=e.idle_timeout_minutes,
            empty_timeout_minutes=e.empty_timeout_minutes,
            cooldown_minutes=e.cooldown_minutes,
            max_step_nodes=e.max_step_nodes,
            fallback_after_minutes=e.fallback_after_minutes,
            workload=str(e.workload),
            launch_minutes=e.launch_minutes,
            warm_up=e.warm_up,
            back_to_spot=e.back_to_spot,
            rebalance_checkpoint=e.rebalance_checkpoint,
            gang_wait_minutes=e.gang_wait_minutes,
        )
        # The other sizes, each its own pair of groups priced by its own types (policy/sizes.py chooses among them).
        # A size the caller named no group of is left out (the simulator names its own: sim/controllers/gpuloan.py).
        named = {gpus: (spot, od) for gpus, spot, od in names.other_sizes}
        others = []
        for size in sizes[1:]:
            spot_name, od_name = named.get(size.gpus_per_node, (None, None))
            if spot_name is None and od_name is None:
                continue
            s_usd, o_usd, rows = _prices(prices, cfg, list(size.instance_types), allow_unknown_prices)
            instance_rows += _type_rows(spot_name if has_spot else None, od_name if has_od else None, rows)
            others.append(
                NodeSize(
                    size.gpus_per_node,
                    spot_name if has_spot else None,
                    od_name if has_od else None,
                    spot_max,
                    od_max,
                    _rate(s_usd),
                    _rate(o_usd),
                )
            )
        knobs["other_sizes"] = tuple(others)
        knobs["instance_usd_per_hour"] = instance_rows
    block: dict[str, Any] = {}
    if (
        g is not None
        and g.reservation == Reservation.capacity_block
        and g.capacity_block_start
        and g.capacity_block_end
    ):
        # The window the policy function keeps (policy/capacity_blocks.py); times as ISO 8601 with their zone.
        block = dict(
            capacity_block_start=g.capacity_block_start.isoformat(),
            capacity_block_end=g.capacity_block_end.isoformat(),
            capacity_block_checkpoint_lead_minutes=g.capacity_block_checkpoint_lead_minutes,
            capacity_block_held=g.capacity_block_active is False,
            capacity_block_reservation_id=g.reservation_id,
        )
        if cfg.scheduling.kueue.enabled:
            block.update(
                capacity_block_queue=scheduling.floor_queue_name(cfg, pool),
                capacity_block_queue_api=versions.KUEUE_API_VERSION,
                capacity_block_flavor=scheduling.flavor_name(cfg, pool, scheduling.FLOOR),
                capacity_block_quota_gpus=scheduling.gpus_per_node(cfg, pool) * g.nodes,
            )
    budget: dict[str, Any] = {}
    if pool.budget is not None:
        budget = dict(
            budget_monthly_usd=pool.budget.monthly_usd,
            budget_enforcement=str(pool.budget.enforcement),
            budget_name=budget_name,
        )
    return PoolSettings(
        name=pool.name,
        team=pool.team,
        tier=str(pool.tier),
        gpus_per_node=gpus,
        spot_group=spot_group,
        on_demand_group=od_group,
        spot_max_nodes=spot_max,
        on_demand_max_nodes=od_max,
        spot_usd_per_hour=_rate(spot_usd),
        on_demand_usd_per_hour=_rate(od_usd),
        guaranteed_group=names.guaranteed if g else None,
        guaranteed_nodes=g.nodes if g else 0,
        guaranteed_usd_per_hour=_rate(floor_rate),
        **knobs,
        **budget,
        **block,
        **loan,
    )


def loan_settings(cfg, pool: Pool) -> dict[str, Any]:
    """With Kueue: the pool's ClusterQueue and its flavor list as (flavor, owning pool, kind), what the tick reads
    the loan's usage from (policy/loan_usage.py). {} without Kueue, or for a pool priced alone (the simulator)."""
    if not isinstance(cfg, GpuLoanConfig) or not cfg.scheduling.kueue.enabled:
        return {}
    flavors = {f.name: f for p in cfg.pools for f in scheduling.pool_flavors(cfg, p)}
    queue = scheduling.pool_queue(cfg, pool)
    out: dict[str, Any] = dict(
        loan_queue=queue.name,
        loan_queue_api=versions.KUEUE_API_VERSION,
        loan_flavors=tuple((q.flavor, flavors[q.flavor].pool, flavors[q.flavor].kind) for q in queue.flavors),
    )
    if scheduling.lends_ahead(cfg, pool):
        # The queue that holds the floor's nominal quota (its production queue where it has one), and the
        # lendingLimit the plan gives it there: the most the lend-ahead rule may set (policy/decide/lend_ahead.py).
        floor_flavor = scheduling.flavor_name(cfg, pool, scheduling.FLOOR)
        holder = next(q for q in scheduling.pool_queues(cfg, pool) if q.name == scheduling.floor_queue_name(cfg, pool))
        entry = next(e for e in holder.flavors if e.flavor == floor_flavor)
        out.update(
            lend_ahead_queue=holder.name,
            lend_ahead_flavor=floor_flavor,
            lend_ahead_limit_gpus=entry.nominal_gpus if entry.lending_limit_gpus is None else entry.lending_limit_gpus,
            reclaim_lookahead_minutes=cfg.scheduling.kueue.reclaim_lookahead_minutes,
        )
    return out


def default_budget_names(cfg: GpuLoanConfig) -> dict[str, str]:
    """Budget names as config/budget_plan.py plans them: "" -> environment budget, pool name -> pool budget."""
    out = {}
    for spec in budget_specs(cfg):
        out[spec.tag_value if spec.resource_name.startswith("budget-pool-") else ""] = spec.budget_name
    return out


def settings_for(
    prices: Prices,
    cfg: GpuLoanConfig,
    cluster_name: str,
    group_names: dict[str, GroupNames | dict[str, str]],
    budget_names: dict[str, str] | None = None,
    allow_unknown_prices: bool = False,
) -> Settings:
    """The policy settings of a whole environment. group_names[pool] is a GroupNames or a dict with keys
    spot / on_demand / guaranteed (the shape of ElasticCapacity.group_names)."""
    if budget_names is None:
        budget_names = default_budget_names(cfg)
    pools = []
    fixed_bill = floor_bill(prices, cfg)  # one bill for the environment: a commitment covers several pools
    for pool in cfg.pools:
        names = group_names.get(pool.name, GroupNames())
        if isinstance(names, dict):
            names = GroupNames.from_keys(names)
        pools.append(
            pool_settings(prices, cfg, pool, names, budget_names.get(pool.name), allow_unknown_prices, fixed_bill)
        )
    # A commitment's fee is fixed spend, used or not: what no floor uses counts against the environment budget.
    unused = fixed_bill.unused_commitment_usd
    if unused is None and not allow_unknown_prices:
        raise PriceUnknown(
            "the policy function needs every commitment's rates for its budget cap: " + "; ".join(fixed_bill.unknown)
        )
    return Settings(
        environment=cfg.environment,
        region=cfg.region,
        cluster_name=cluster_name,
        pools=tuple(pools),
        budget_monthly_usd=cfg.budget.monthly_usd,
        budget_enforcement=str(cfg.budget.enforcement),
        budget_name=budget_names.get(""),
        dry_run=cfg.policy.dry_run,
        commitment_unused_usd_per_hour=_rate(None if unused is None else unused / HOURS_PER_MONTH),
        schedule_minutes=cfg.policy.schedule_minutes,
        metric_namespace=cfg.policy.metric_namespace,
        utilization_metric=cfg.policy.utilization_metric,
        reserved_metric=cfg.policy.reserved_metric,
        budget_refresh_minutes=cfg.policy.budget_refresh_minutes,
        notify_min_interval_minutes=cfg.policy.notify_min_interval_minutes,
        aws_calls_in_flight=cfg.policy.aws_calls_in_flight,
        shards=tuple(ShardSettings(sh.name, tuple(sh.pools)) for sh in cfg.policy.shards),
    )
