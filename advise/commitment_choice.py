"""Which commitment to buy: what AWS Cost Explorer would recommend, and the best one in hindsight.

AWS describes its reservation recommendation as: it "identifies your On-Demand instance ... usage for a service
during a specific time period", "collects your usage into categories that are eligible for a reservation",
"simulates every combination of reservation in each category of usage" and "identifies the best number of each
type of reservation to purchase to maximize your estimated savings", from "usage of the past seven, 30, or 60
days"; usage already covered by RIs, Spot or Savings Plans is not included (AWS Cost Management User Guide,
"Accessing reservation recommendations", https://docs.aws.amazon.com/cost-management/latest/userguide/ri-recommendations.html;
docs/aws-rules.md). Savings Plans recommendations likewise report the hourly commitment over the lookback period
(Cost Explorer API, SavingsPlansPurchaseRecommendationDetail).

So both choices here are one computation on pricing/cost_model/billing.py's `bill`, over different hours:
- `cost_explorer`: the commitment that would have saved most over the `lookback_days` before the purchase hour
  (the end of the sizing window), of the usage AWS counts as eligible (on-demand and capacity-reservation
  instance-hours; never spot or Capacity Blocks), then bought at that hour;
- `hindsight`: the one that saves most over the very hours it is then billed on (the fluid bound's commitment).

Savings as a function of the commitment's size are concave (each further RI, or each further dollar of a plan,
covers usage in no more hours than the one before), so the best size is found by bisection on the marginal
saving: each probe is a full `bill` over the window (usage summed per hour and type first: an RI covers
`min(count, usage)` instance-hours of its type in an hour, whoever ran them, so the sum bills the same).

The benchmark's commitment is regional Standard RIs (a count of one instance type in one region, no upfront):
the only commitment rates with a citable source in the shared data (COMMITMENTS.md). AWS applies an RI's discount
across the accounts of an organization, like a Savings Plan, unless sharing is turned off (docs/aws-rules.md).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from pricing.cost_model import billing

LOOKBACK_DAYS = (7, 30, 60)  # what Cost Explorer offers
HOURS_PER_DAY = 24


@dataclass(frozen=True)
class Choice:
    """A chosen commitment and how it was chosen."""

    method: str  # "cost-explorer" or "hindsight"
    commitments: tuple[billing.Commitment, ...]
    window: tuple[int, int]  # the hours [first, end) whose usage it was sized on
    estimated_savings_usd: float  # over that window, by `bill`
    counts: dict[str, int]  # "type@region" -> RIs (for the report)
    unpriced: tuple[str, ...] = ()  # eligible usage of types nobody gave a commitment rate for

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "window_hours": list(self.window),
            "estimated_savings_usd_over_window": round(self.estimated_savings_usd, 2),
            "reserved_instances": [
                {
                    "name": c.name,
                    "instance_type": c.instance_type,
                    "region": c.region,
                    "count": c.count,
                    "usd_per_hour": c.rates_usd_per_hour[c.instance_type],
                    "start_hour": c.start_hour,
                }
                for c in self.commitments
            ],
            "unpriced": list(self.unpriced),
        }


def eligible_by_hour(usage: list[billing.Usage], first: int, end: int) -> dict[tuple[str, str, float], list[float]]:
    """(type, region, its on-demand rate) -> eligible instance-hours in each hour of [first, end)."""
    out: dict[tuple[str, str, float], list[float]] = defaultdict(lambda: [0.0] * (end - first))
    for u in usage:
        if first <= u.hour < end and u.purchase in billing.COMMITMENT_ELIGIBLE and u.instance_hours > 0:
            out[(u.instance_type, u.region, u.usd_per_hour)][u.hour - first] += u.instance_hours
    return dict(out)


def _lines(key, series: list[float]) -> list[billing.Usage]:
    itype, region, rate = key
    return [billing.Usage(h, "*", itype, region, billing.ON_DEMAND, x, rate) for h, x in enumerate(series) if x > 0]


def best_units(savings: Callable[[int], float], upper: int) -> tuple[int, float]:
    """The n in 0..upper maximizing a concave `savings(n)` (savings(0) == 0); the smallest on a tie."""
    lo, hi = 0, max(0, upper)  # invariant: the best n lies in [lo, hi]
    cache: dict[int, float] = {0: 0.0}

    def f(n: int) -> float:
        if n not in cache:
            cache[n] = savings(n)
        return cache[n]

    while lo < hi:
        mid = (lo + hi) // 2
        if f(mid + 1) > f(mid) + 1e-9:
            lo = mid + 1
        else:
            hi = mid
    return lo, f(lo)


def ri(
    name: str, instance_type: str, region: str, count: int, usd_per_hour: float, start_hour: int = 0
) -> billing.Commitment:
    return billing.Commitment(
        name,
        billing.RESERVED_INSTANCES,
        {instance_type: usd_per_hour},
        region=region,
        instance_type=instance_type,
        count=count,
        start_hour=start_hour,
    )


def best_reserved_instances(
    usage: list[billing.Usage],
    ri_rates: dict[tuple[str, str], float],
    first: int,
    end: int,
    *,
    method: str,
    start_hour: int,
    name: str = "org-ri",
) -> Choice:
    """The RI count per (type, region) that saves most over the usage of hours [first, end), by `bill`."""
    if end <= first:
        raise ValueError(f"empty sizing window [{first}, {end})")
    series = eligible_by_hour(usage, first, end)
    commitments, counts, unpriced, total = [], {}, [], 0.0
    for key in sorted(series):
        itype, region, _ = key
        rate = ri_rates.get((itype, region))
        if rate is None:
            unpriced.append(f"{itype}@{region}")
            continue
        lines = _lines(key, series[key])

        def saved(n: int, lines=lines, itype=itype, region=region, rate=rate) -> float:
            return billing.bill(lines, [ri("probe", itype, region, n, rate)], hours=end - first).savings_usd

        n, s = best_units(saved, math.ceil(max(series[key])))
        counts[f"{itype}@{region}"] = n
        if n:
            commitments.append(ri(f"{name}-{itype}-{region}", itype, region, n, rate, start_hour))
            total += s
    return Choice(method, tuple(commitments), (first, end), total, counts, tuple(unpriced))


def cost_explorer(
    usage: list[billing.Usage],
    ri_rates: dict[tuple[str, str], float],
    purchase_hour: int,
    lookback_days: int = 30,
    name: str = "org-ri",
) -> Choice:
    """What Cost Explorer would recommend at `purchase_hour` from the last `lookback_days` of eligible usage,
    bought then (the commitment starts at `purchase_hour`). Only usage before the purchase hour is read."""
    if lookback_days not in LOOKBACK_DAYS:
        raise ValueError(
            f"lookback must be one of {', '.join(map(str, LOOKBACK_DAYS))} days (Cost Explorer's), got {lookback_days}"
        )
    first = max(0, purchase_hour - lookback_days * HOURS_PER_DAY)
    past = [u for u in usage if u.hour < purchase_hour]
    return best_reserved_instances(
        past, ri_rates, first, purchase_hour, method="cost-explorer", start_hour=purchase_hour, name=name
    )


def hindsight(
    usage: list[billing.Usage], ri_rates: dict[tuple[str, str], float], first: int, end: int, name: str = "org-ri"
) -> Choice:
    """The RIs that save most over the very hours they are billed on (in force from `first`)."""
    return best_reserved_instances(usage, ri_rates, first, end, method="hindsight", start_hour=first, name=name)
