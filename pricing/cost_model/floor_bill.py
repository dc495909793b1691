"""The floors' month with the commitments in force: a config's floors and commitments billed through the billing
model (billing.py), as AWS bills them. What preview, cost-diff, the budget rule (pricing/checks.py) and the policy's
budget cap all price with.

Moved out of config/config.py (issue 34): the config is the bottom layer and knows no prices; this module reads the
config and the price sources (pricing/sources/floor_pricing.py for each floor's and commitment's rate).
"""

from __future__ import annotations

import dataclasses

from config.config import (
    SHORTHAND_COMMITMENTS,
    Commitment,
    CommitmentKind,
    FloorPayment,
    GpuLoanConfig,
    PaymentOption,
    Pool,
    Reservation,
)
from pricing.cost_model import billing
from pricing.cost_model.billing import HOURS_PER_MONTH
from pricing.sources import floor_pricing
from pricing.sources.catalog import Prices


def floor_rate(prices: Prices, cfg: GpuLoanConfig, pool: Pool) -> floor_pricing.FloorRate | None:
    """The hourly rate of one node of the pool's floor as it is paid (pricing/sources/floor_pricing.py); None when no
    source has it (or the pool has no floor)."""
    g = pool.guaranteed
    if g is None:
        return None
    return floor_pricing.floor_rate(
        prices,
        g.instance_type,
        cfg.region,
        g.price_model,
        g.rate.usd_per_hour if g.rate else None,
        g.rate.source if g.rate else None,
    )


def guaranteed_monthly_usd(prices: Prices, cfg: GpuLoanConfig, pool: Pool) -> float | None:
    """The floor's monthly cost once the environment's commitments apply (floor_bill: the floor's covered hours at
    the commitments' rates, the rest at its own); None when a rate it needs is unknown."""
    if pool.guaranteed is None:
        return 0.0
    i = next(i for i, p in enumerate(cfg.pools) if p is pool)
    return floor_bill(prices, cfg).pool_usd(billing_key(cfg, i))


def billing_key(cfg: GpuLoanConfig, i: int) -> str:
    """The name pools[i] is billed under: its name (the index too where the name is taken twice, an invalid config
    whose other rules still run)."""
    name = cfg.pools[i].name
    return name if sum(p.name == name for p in cfg.pools) == 1 else f"{name}#{i}"


_PURCHASE = {
    Reservation.none: billing.ON_DEMAND,
    Reservation.odcr: billing.RESERVED,
    Reservation.capacity_block: billing.CAPACITY_BLOCK,
}


def floor_payment_equivalent(prices: Prices, cfg: GpuLoanConfig, pool: Pool) -> str:
    """The per-pool payment (pricing/sources/floor_pricing.py PAYMENTS) the floor is paid as: its own `payment`, or
    `reserved_<n>yr` / `savings_plan` where one of the environment's commitments alone covers all of its nodes at
    the price book's offer of that payment (no-upfront RIs of its type in its region; a 1-year no-upfront EC2
    Instance plan of its family). The per-pool vocabulary the floor advisor compares sizes in. `pool` has a floor."""
    g = pool.guaranteed
    if g is None:
        raise ValueError(f"pool {pool.name} has no guaranteed floor to pay for")
    if g.payment is not None or g.reservation == Reservation.capacity_block:
        return g.price_model
    for c in cfg.commitments:
        if c.payment_option != PaymentOption.no_upfront or (c.region or cfg.region) != cfg.region:
            continue
        if (
            c.kind == CommitmentKind.reserved_instances
            and c.instance_type == g.instance_type
            and (c.count or 0) >= g.nodes
        ):
            return f"reserved_{c.term_years}yr"
        if (
            c.kind == CommitmentKind.ec2_instance_savings_plan
            and c.term_years == 1
            and c.instance_family == billing.instance_family(g.instance_type)
        ):
            r = commitment_rate(prices, cfg, c, g.instance_type)
            if r is not None and (c.hourly_commitment_usd or 0) >= g.nodes * r.usd_per_hour:
                return str(FloorPayment.savings_plan)
    return g.price_model


def commitment_scope_types(cfg: GpuLoanConfig, c: Commitment) -> list[str]:
    """The floor instance types of this environment the commitment may cover (those it needs a rate for)."""
    if c.kind == CommitmentKind.reserved_instances:
        return [c.instance_type] if c.instance_type else []
    region = c.region or cfg.region
    out: list[str] = []
    for p in cfg.pools:
        g = p.guaranteed
        if g is None or g.reservation == Reservation.capacity_block or g.instance_type in out:
            continue  # Capacity Block usage is never covered by a Savings Plan
        if c.kind == CommitmentKind.ec2_instance_savings_plan and (
            region != cfg.region or billing.instance_family(g.instance_type) != c.instance_family
        ):
            continue
        out.append(g.instance_type)
    return out


def commitment_rate(
    prices: Prices, cfg: GpuLoanConfig, c: Commitment, instance_type: str
) -> floor_pricing.FloorRate | None:
    """The rate of one instance-hour under the commitment: the user's (`rates`), else the price book's; None."""
    given = c.rates.get(instance_type)
    if given is not None:
        return floor_pricing.FloorRate(
            f"{c.kind}_{c.term_years}yr_{c.payment_option}",
            given.usd_per_hour,
            "user",
            f"your rate: {given.source}",
            "",
        )
    region = c.region or cfg.region
    return floor_pricing.commitment_rate(
        prices, str(c.kind), c.term_years, str(c.payment_option), instance_type, region
    )


@dataclasses.dataclass(frozen=True)
class FloorBill:
    """A month (HOURS_PER_MONTH) of the floors' reserved hours plus the commitments in force, as AWS bills them."""

    bill: billing.Bill | None  # None: a rate it needs is unknown (see `unknown`)
    unknown: tuple[str, ...]  # what has no rate, one line each
    unknown_pools: frozenset[str]  # pools whose floor figure is unknown
    commitments: tuple[dict, ...]  # per commitment: name, kind, status, source, fee, used, unused (monthly USD)
    rate_sources: dict[str, str]  # commitment name -> where its rates come from, one line
    # pool (billing_key) -> the commitments that may cover its floor's hours (their scope matches it)
    covering: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def pool_usd(self, pool: str) -> float | None:
        """The pool's floor: its hours no commitment covered at its own rate, the covered ones at the rate of the
        commitment that covered them."""
        if pool in self.unknown_pools or self.bill is None:
            return None
        return self.bill.by_pool_usd.get(pool, 0.0)

    @property
    def total_usd(self) -> float | None:
        """Floors plus the commitments' unused fees: the environment's fixed monthly spend on instances."""
        return None if self.bill is None or self.unknown_pools else self.bill.total_usd

    @property
    def unused_commitment_usd(self) -> float | None:
        return None if self.bill is None or self.unknown else self.bill.unused_commitment_usd


def _commitment_complete(c: Commitment) -> bool:
    if c.kind == CommitmentKind.reserved_instances:
        return c.instance_type is not None and c.count is not None
    if c.kind == CommitmentKind.ec2_instance_savings_plan and c.instance_family is None:
        return False
    return c.hourly_commitment_usd is not None


def billing_commitments(
    prices: Prices, cfg: GpuLoanConfig
) -> tuple[list[billing.Commitment], list[str], dict[str, str], set[str]]:
    """The config's commitments as the billing model takes them: the per-pool shorthand (`guaranteed.payment`)
    first, then `commitments`. Returns (commitments, unknown rates, rate sources, pools whose shorthand rate is
    unknown). A commitment without a rate for a type it needs is left out and listed as unknown."""
    out: list[billing.Commitment] = []
    unknown: list[str] = []
    sources: dict[str, str] = {}
    unknown_pools: set[str] = set()
    for i, pool in enumerate(cfg.pools):
        g = pool.guaranteed
        if g is None or g.payment not in SHORTHAND_COMMITMENTS:
            continue
        name = f"pools[{i}].guaranteed.payment"
        rate = floor_rate(prices, cfg, pool)
        if rate is None:
            unknown.append(f"{name}: no {g.payment} rate for {g.instance_type} in {cfg.region}")
            unknown_pools.add(billing_key(cfg, i))
            continue
        kind = SHORTHAND_COMMITMENTS[g.payment][0]
        if g.payment == FloorPayment.savings_plan and "savings_plan_compute" in rate.source:
            kind = CommitmentKind.compute_savings_plan  # the book had only a Compute plan rate
        out.append(
            billing.Commitment(
                name,
                str(kind),
                {g.instance_type: rate.usd_per_hour},
                region=cfg.region,
                instance_type=g.instance_type if kind == CommitmentKind.reserved_instances else None,
                instance_family=billing.instance_family(g.instance_type),
                count=g.nodes,
                hourly_commitment_usd=0.0 if kind == CommitmentKind.reserved_instances else rate.usd_per_hour * g.nodes,
            )
        )
        sources[name] = rate.source
    for i, c in enumerate(cfg.commitments):
        if not _commitment_complete(c) or c.name in sources:
            continue  # a field its kind needs is missing, or the name is taken: refused by _commitment_problems
        rates, missing, lines = {}, [], []
        for t in dict.fromkeys([*commitment_scope_types(cfg, c), *c.rates]):
            r = commitment_rate(prices, cfg, c, t)
            if r is None:
                missing.append(t)
            else:
                rates[t] = r.usd_per_hour
                lines.append(f"{t} ${r.usd_per_hour:g}/h ({r.source})")
        if missing:
            unknown.append(f"commitments[{i}] ({c.name}): no rate for {', '.join(missing)}")
            continue
        out.append(
            billing.Commitment(
                c.name,
                str(c.kind),
                rates,
                region=None if c.kind == CommitmentKind.compute_savings_plan else (c.region or cfg.region),
                instance_type=c.instance_type,
                instance_family=c.instance_family,
                count=c.count or 0,
                hourly_commitment_usd=c.hourly_commitment_usd or 0.0,
            )
        )
        sources[c.name] = "; ".join(lines) or "no floor of this environment in its scope"
    return out, unknown, sources, unknown_pools


def floor_usage(
    prices: Prices, cfg: GpuLoanConfig, hours: int = HOURS_PER_MONTH
) -> tuple[list[billing.Usage], set[str]]:
    """Every hour of the month, each floor's nodes as instance-hours bought the way its reservation is (an ODCR:
    `reserved`, billed used or not; a Capacity Block; no reservation: plain on-demand instances). Returns the usage
    and the pools whose own rate (on-demand, Capacity Block or the user's) is unknown."""
    usage: list[billing.Usage] = []
    unknown: set[str] = set()
    for i, pool in enumerate(cfg.pools):
        g = pool.guaranteed
        if g is None:
            continue
        key = billing_key(cfg, i)
        if g.payment in SHORTHAND_COMMITMENTS:
            # The floor's own rate is on-demand; its shorthand commitment covers it in full every hour, so without
            # an on-demand price the commitment's rate stands in (it changes no figure but the saving shown).
            od = prices.price(g.instance_type, cfg.region)
            r = floor_rate(prices, cfg, pool)
            rate = od.ondemand_usd_per_hour if od is not None else (r.usd_per_hour if r is not None else None)
        else:
            r = floor_rate(prices, cfg, pool)
            rate = None if r is None else r.usd_per_hour
        if rate is None:
            unknown.add(key)
            continue
        purchase = _PURCHASE[g.reservation]
        usage += [
            billing.Usage(h, key, g.instance_type, cfg.region, purchase, float(g.nodes), rate) for h in range(hours)
        ]
    return usage, unknown


def floor_bill(prices: Prices, cfg: GpuLoanConfig) -> FloorBill:
    """The floors' month with the commitments in force, billed by pricing/cost_model/billing.py: what preview,
    cost-diff, the budget rule and the policy's budget cap all price with."""
    commitments, unknown, sources, unknown_pools = billing_commitments(prices, cfg)
    usage, unpriced = floor_usage(prices, cfg)
    unknown_pools |= unpriced
    unknown += [f"pools: {p}: floor rate unknown" for p in sorted(unpriced)]
    env_commitment_unknown = any(u.startswith("commitments[") for u in unknown)
    if env_commitment_unknown or (unknown_pools and cfg.commitments):
        # An organization's commitment covers several pools: with one rate unknown no pool's share is known.
        return FloorBill(
            None,
            tuple(unknown),
            frozenset(billing_key(cfg, i) for i, p in enumerate(cfg.pools) if p.guaranteed),
            (),
            sources,
        )
    usage = [u for u in usage if u.pool not in unknown_pools]
    b = billing.bill(usage, commitments, hours=HOURS_PER_MONTH)
    status = {c.name: (str(c.status), c.source, str(c.kind)) for c in cfg.commitments}
    rows = []
    for c in commitments:
        st, src, _ = status.get(c.name, ("per-pool shorthand (deprecated)", "guaranteed.payment", c.kind))
        fee, used = b.commitment_fee_usd[c.name], b.commitment_used_usd[c.name]
        rows.append(
            {
                "name": c.name,
                "kind": c.kind,
                "status": st,
                "source": src,
                "fee_monthly_usd": round(fee, 2),
                "used_monthly_usd": round(used, 2),
                "unused_monthly_usd": round(fee - used, 2),
                "rates": sources.get(c.name, ""),
            }
        )
    first_hour = {u.pool: u for u in usage if u.hour == 0}
    covering = {key: tuple(c.name for c in billing._order(commitments) if c.covers(u)) for key, u in first_hour.items()}
    return FloorBill(b, tuple(unknown), frozenset(unknown_pools), tuple(rows), sources, covering)
