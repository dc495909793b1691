"""The bill of an environment's EC2 usage, hour by hour, with the commitments the organization holds.

One model for every figure gpuloan prints about what instances cost once commitments apply (docs/floor.md, "The loan
for an organization"). AWS keeps two things apart, and so does this module:
- *capacity*: what is guaranteed to be there. An On-Demand Capacity Reservation bills at the on-demand rate every
  hour, used or not; a Capacity Block is paid up front for its window. Both are usage here (`purchase`).
- *commitment*: a billing discount the organization buys (Reserved Instances, Savings Plans). It guarantees no
  capacity; it is billed every hour of its term, used or not, and discounts whatever matching usage it finds in
  that hour: floors and elastic on-demand nodes alike, of any team.

How AWS applies them, each hour (docs/aws-rules.md, "Billing: ..." rows, from the Savings Plans User Guide
"Understanding how Savings Plans are applied to your usage",
https://docs.aws.amazon.com/savingsplans/latest/userguide/sp-applying.html):
1. Reserved Instances first: a regional RI covers up to `count` instance-hours of its type in its region.
2. Then EC2 Instance Savings Plans (one family in one region), then Compute Savings Plans (any family, any
   region). A plan's hourly commitment is spent at the plan's rate on the eligible usage with the highest savings
   percentage over on-demand first; on equal percentages, the usage with the lower rate first; until the usage or
   the commitment runs out.
3. What no commitment covers bills at its own rate: on-demand (ODCR hours included), spot, Capacity Block.
Spot and Capacity Block usage are never covered by an RI or a Savings Plan (`COMMITMENT_ELIGIBLE`).

Simplifications, each on the side of less discount than AWS might give: an RI covers its exact instance type only
(Linux regional RIs are also size-flexible within their family); all plans of a kind are applied one after the
other in the order given rather than pooled; the account-first step of a multi-account organization is not
modelled (the whole organization is one payer, which is where an org-wide commitment ends up anyway).

Attribution: covered usage is charged to its pool at the commitment's rate; the commitment's unused part in an hour
belongs to nobody's pool and is reported as `unused_commitment_usd` (what AWS's amortized view calls unused
commitment). Every dollar billed is in exactly one of the two.

Stdlib only: the policy function's budget cap prices with it too.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping

# A month is 730 hours, AWS's convention for monthly estimates: every monthly figure of gpuloan (preview, cost diff,
# budget rule, simulator, guardrails) uses this one.
HOURS_PER_MONTH = 730

# What an instance-hour was bought as.
RESERVED = "reserved"  # in an On-Demand Capacity Reservation (a floor): on-demand rate, billed used or not
ON_DEMAND = "on_demand"
SPOT = "spot"
CAPACITY_BLOCK = "capacity_block"
PURCHASES = (RESERVED, ON_DEMAND, SPOT, CAPACITY_BLOCK)
COMMITMENT_ELIGIBLE = frozenset({RESERVED, ON_DEMAND})

# Commitment kinds, in the order AWS applies them.
RESERVED_INSTANCES = "reserved_instances"
EC2_INSTANCE_SAVINGS_PLAN = "ec2_instance_savings_plan"
COMPUTE_SAVINGS_PLAN = "compute_savings_plan"
KINDS = (RESERVED_INSTANCES, EC2_INSTANCE_SAVINGS_PLAN, COMPUTE_SAVINGS_PLAN)


class BillingError(ValueError):
    """Usage or a commitment the model cannot price (it names the record and the field)."""


def instance_family(instance_type: str) -> str:
    """`p4d.24xlarge` -> `p4d`: the family an EC2 Instance Savings Plan is bought for."""
    return instance_type.split(".", 1)[0]


@dataclass(frozen=True)
class Usage:
    """Instance-hours of one instance type, bought one way, by one pool, in one hour."""

    hour: int  # hours since the start of the billed period
    pool: str
    instance_type: str
    region: str
    purchase: str  # one of PURCHASES
    instance_hours: float  # may be fractional: EC2 bills Linux instances per second
    usd_per_hour: float  # what one instance-hour bills at without any commitment (on-demand, spot or block rate)


@dataclass(frozen=True)
class Commitment:
    """A Reserved Instance purchase or a Savings Plan, held or planned by the organization."""

    name: str
    kind: str  # one of KINDS
    # What one instance-hour costs under this commitment, per instance type it may cover. A type not listed is
    # not covered (the price book or the user has no rate for it: nothing here guesses one).
    rates_usd_per_hour: Mapping[str, float]
    region: str | None = None  # RIs and EC2 Instance plans: the region they apply in; Compute plans: None
    instance_type: str | None = None  # RIs: the type
    instance_family: str | None = None  # EC2 Instance plans: the family
    count: int = 0  # RIs: instances
    hourly_commitment_usd: float = 0.0  # Savings Plans: the committed spend per hour, at plan rates
    start_hour: int = 0  # in force from this hour ...
    end_hour: int | None = None  # ... up to (not including) this one; None: past the billed period

    def in_force(self, hour: int) -> bool:
        return self.start_hour <= hour and (self.end_hour is None or hour < self.end_hour)

    def hourly_fee_usd(self) -> float:
        """What the commitment bills every hour of its term, used or not."""
        if self.kind == RESERVED_INSTANCES:
            return self.count * self.rates_usd_per_hour[self.instance_type or ""]  # an RI names its type
        return self.hourly_commitment_usd

    def covers(self, u: Usage) -> bool:
        if u.purchase not in COMMITMENT_ELIGIBLE or u.instance_type not in self.rates_usd_per_hour:
            return False
        if self.kind == RESERVED_INSTANCES:
            return u.instance_type == self.instance_type and u.region == self.region
        if self.kind == EC2_INSTANCE_SAVINGS_PLAN:
            return instance_family(u.instance_type) == self.instance_family and u.region == self.region
        return True  # a Compute Savings Plan: any family, any region


def check_commitment(c: Commitment) -> None:
    """Refuse a commitment the model would misprice, naming the field."""
    where = f"commitment '{c.name}'"
    if c.kind not in KINDS:
        raise BillingError(f"{where}: kind '{c.kind}' is not one of {', '.join(KINDS)}")
    for t, rate in c.rates_usd_per_hour.items():
        if not rate > 0:
            raise BillingError(f"{where}: rates_usd_per_hour[{t}] must be > 0, got {rate}")
    if c.kind == RESERVED_INSTANCES:
        if not c.instance_type or not c.region:
            raise BillingError(f"{where}: a Reserved Instance needs instance_type and region")
        if c.count < 1:
            raise BillingError(f"{where}: count must be >= 1 for a Reserved Instance, got {c.count}")
        if c.instance_type not in c.rates_usd_per_hour:
            raise BillingError(f"{where}: no rate for its own instance type {c.instance_type}")
    else:
        if not c.hourly_commitment_usd > 0:
            raise BillingError(f"{where}: hourly_commitment_usd must be > 0, got {c.hourly_commitment_usd}")
        if c.kind == EC2_INSTANCE_SAVINGS_PLAN and (not c.instance_family or not c.region):
            raise BillingError(f"{where}: an EC2 Instance Savings Plan needs instance_family and region")
    if c.end_hour is not None and c.end_hour <= c.start_hour:
        raise BillingError(f"{where}: end_hour {c.end_hour} is not after start_hour {c.start_hour}")


def check_usage(u: Usage) -> None:
    where = f"usage of pool '{u.pool}' at hour {u.hour}"
    if u.purchase not in PURCHASES:
        raise BillingError(f"{where}: purchase '{u.purchase}' is not one of {', '.join(PURCHASES)}")
    if u.hour < 0:
        raise BillingError(f"{where}: hour must be >= 0")
    if not u.instance_hours >= 0:
        raise BillingError(f"{where}: instance_hours must be >= 0, got {u.instance_hours}")
    if not u.usd_per_hour >= 0:
        raise BillingError(f"{where}: usd_per_hour must be >= 0, got {u.usd_per_hour}")


@dataclass
class Bill:
    """Dollars for the billed hours. total_usd = sum(by_pool_usd) + unused_commitment_usd."""

    hours: int = 0
    by_pool_usd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_purchase_usd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    unused_commitment_usd: float = 0.0
    commitment_fee_usd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    commitment_used_usd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # what the same usage would bill without any commitment: the base every saving is measured from
    without_commitments_usd: float = 0.0

    @property
    def total_usd(self) -> float:
        return sum(self.by_pool_usd.values()) + self.unused_commitment_usd

    @property
    def savings_usd(self) -> float:
        return self.without_commitments_usd - self.total_usd

    def commitment_utilization(self, name: str) -> float | None:
        """Share (0..1) of the commitment's fee that covered usage; None when it billed nothing."""
        fee = self.commitment_fee_usd.get(name, 0.0)
        return None if fee <= 0 else self.commitment_used_usd.get(name, 0.0) / fee

    def to_json(self) -> dict:
        return {
            "hours": self.hours,
            "total_usd": round(self.total_usd, 2),
            "without_commitments_usd": round(self.without_commitments_usd, 2),
            "savings_usd": round(self.savings_usd, 2),
            "unused_commitment_usd": round(self.unused_commitment_usd, 2),
            "by_pool_usd": {k: round(v, 2) for k, v in sorted(self.by_pool_usd.items())},
            "by_purchase_usd": {k: round(v, 2) for k, v in sorted(self.by_purchase_usd.items())},
            "commitments": {
                name: {
                    "fee_usd": round(fee, 2),
                    "used_usd": round(self.commitment_used_usd.get(name, 0.0), 2),
                    "utilization": (None if (u := self.commitment_utilization(name)) is None else round(u, 4)),
                }
                for name, fee in sorted(self.commitment_fee_usd.items())
            },
        }


def _order(commitments: Iterable[Commitment]) -> list[Commitment]:
    rank = {k: i for i, k in enumerate(KINDS)}
    return sorted(commitments, key=lambda c: rank[c.kind])  # stable: the given order within a kind


def bill(usage: Iterable[Usage], commitments: Iterable[Commitment] = (), hours: int | None = None) -> Bill:
    """Price `usage` hour by hour with `commitments` applied as AWS applies them (module docstring).

    `hours`: the length of the billed period; a commitment bills its fee in every hour of it where it is in
    force, including hours without usage. Default: up to the last hour with usage.
    """
    commitments = list(commitments)
    for c in commitments:
        check_commitment(c)
    ordered = _order(commitments)
    names = [c.name for c in ordered]
    if len(set(names)) != len(names):
        raise BillingError(
            f"commitment names must be unique: {', '.join(sorted(n for n in set(names) if names.count(n) > 1))}"
        )
    by_hour: dict[int, list[Usage]] = defaultdict(list)
    for u in usage:
        check_usage(u)
        by_hour[u.hour].append(u)
    last = max(by_hour, default=-1) + 1
    period = last if hours is None else hours
    if period < last:
        raise BillingError(f"usage at hour {last - 1} lies past the billed period of {period} hours")
    out = Bill(hours=period)
    for c in ordered:  # list every commitment, even one that never bills in the period
        out.commitment_fee_usd[c.name] += 0.0
        out.commitment_used_usd[c.name] += 0.0
    for hour in range(period):
        _bill_hour(by_hour.get(hour, ()), [c for c in ordered if c.in_force(hour)], out)
    return out


def _bill_hour(lines: Iterable[Usage], commitments: list[Commitment], out: Bill) -> None:
    lines = list(lines)
    left = [u.instance_hours for u in lines]  # instance-hours no commitment has covered yet
    for u in lines:
        out.without_commitments_usd += u.instance_hours * u.usd_per_hour
    for c in commitments:
        fee = c.hourly_fee_usd()
        out.commitment_fee_usd[c.name] += fee
        if c.kind == RESERVED_INSTANCES:
            capacity = float(c.count)  # instance-hours the RIs cover this hour
            rate = c.rates_usd_per_hour[c.instance_type or ""]  # an RI names its type
            for i, u in enumerate(lines):
                if capacity <= 0:
                    break
                if left[i] > 0 and c.covers(u):
                    take = min(left[i], capacity)
                    left[i] -= take
                    capacity -= take
                    _charge(out, u, take * rate, c.name)
            out.unused_commitment_usd += capacity * rate
            continue
        budget = fee
        eligible = [i for i, u in enumerate(lines) if left[i] > 0 and c.covers(u)]
        # highest savings percentage over the usage's own rate first; equal percentages: the lower rate first
        eligible.sort(
            key=lambda i: (
                -(1 - c.rates_usd_per_hour[lines[i].instance_type] / lines[i].usd_per_hour)
                if lines[i].usd_per_hour > 0
                else 0.0,
                c.rates_usd_per_hour[lines[i].instance_type],
            )
        )
        for i in eligible:
            if budget <= 1e-12:
                break
            u = lines[i]
            rate = c.rates_usd_per_hour[u.instance_type]
            take = min(left[i], budget / rate)
            left[i] -= take
            budget -= take * rate
            _charge(out, u, take * rate, c.name)
        out.unused_commitment_usd += max(budget, 0.0)
    for i, u in enumerate(lines):
        if left[i] > 0:
            usd = left[i] * u.usd_per_hour
            out.by_pool_usd[u.pool] += usd
            out.by_purchase_usd[u.purchase] += usd


def _charge(out: Bill, u: Usage, usd: float, commitment: str) -> None:
    out.by_pool_usd[u.pool] += usd
    out.by_purchase_usd[u.purchase] += usd
    out.commitment_used_usd[commitment] += usd
