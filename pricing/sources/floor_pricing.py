"""What one node of a guaranteed floor costs per hour, the way it is paid (docs/floor.md).

A floor is paid one of five ways (`guaranteed.payment`):
- `on_demand`: the instance (or an on-demand capacity reservation, ODCR) at the on-demand rate, no commitment;
- `reserved_1yr` / `reserved_3yr`: a Standard Reserved Instance, no upfront (a regional RI discounts the
  floor's instance-hours, ODCR ones included, at the RI rate);
- `savings_plan`: an EC2 Instance Savings Plan, 1 year, no upfront (a Compute Savings Plan where the price
  book has no EC2 Instance plan rate): it discounts matching usage, ODCR usage included;
- `capacity_block`: a Capacity Block for ML, paid up front for its whole duration at the price quoted then.

Where the rate comes from, first that applies:
1. the user's own rate (`guaranteed.rate`: usd_per_hour + source) — always wins (a negotiated price, an
   Enterprise discount, a Capacity Block already bought);
2. the price book in force (pricing/sources/catalog.py): live rates read by `gpuloan prices refresh` (Price List RI
   terms, Savings Plans offering rates, Capacity Block offers), or the public commitment table
   (COMMITMENTS.md). Reserved Instance rows carrying the on-demand rate read with them are old (2022): their
   *ratio* to that on-demand rate is applied to today's on-demand rate, never their absolute figure;
3. nothing: `floor_rate` returns None and validation asks for a user rate. Nothing here guesses a rate.

Stdlib only (like pricing/sources/catalog.py): the policy pack imports the config, which imports this.
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.sources.catalog import Prices

ON_DEMAND = "on_demand"
RESERVED_1YR = "reserved_1yr"
RESERVED_3YR = "reserved_3yr"
SAVINGS_PLAN = "savings_plan"
CAPACITY_BLOCK = "capacity_block"
PAYMENTS = (ON_DEMAND, RESERVED_1YR, RESERVED_3YR, SAVINGS_PLAN, CAPACITY_BLOCK)

# Price book offers that price each payment, in order of preference (pricing/sources/pricebook.py CommitmentRate.offer).
OFFERS = {
    RESERVED_1YR: ("reserved_1yr_no_upfront",),
    RESERVED_3YR: ("reserved_3yr_no_upfront",),
    # An EC2 Instance plan is the one that matches a floor of one type in one region; a Compute plan is the
    # flexible one (and costs more): used only where the book has no EC2 Instance rate.
    SAVINGS_PLAN: ("savings_plan_ec2_instance_1yr_no_upfront", "savings_plan_compute_1yr_no_upfront"),
    CAPACITY_BLOCK: ("capacity_block",),
}

# How AWS bills each payment: printed beside the floor's cost so nobody reads the figure as something else.
BILLING = {
    ON_DEMAND: "on-demand rate around the clock (an ODCR bills whether its capacity is used or not)",
    RESERVED_1YR: "1-year Standard RI, no upfront: billed every hour of the term, used or not; a regional RI "
    "covers the floor's instance-hours (those in a capacity reservation too), which otherwise bill at on-demand",
    RESERVED_3YR: "3-year Standard RI, no upfront: billed every hour of the term, used or not; a regional RI "
    "covers the floor's instance-hours (those in a capacity reservation too), which otherwise bill at on-demand",
    SAVINGS_PLAN: "Savings Plan, 1 year, no upfront: a committed spend per hour that covers the floor's usage "
    "(in a capacity reservation too) at the plan rate; usage it does not cover bills at on-demand",
    CAPACITY_BLOCK: "Capacity Block: paid up front for its whole duration at the price quoted when bought; "
    "shown per hour (the OS fee while instances run is extra)",
}


@dataclass(frozen=True)
class FloorRate:
    """The hourly rate of one floor node and where it was read."""

    payment: str  # one of PAYMENTS: the price model of the floor's cost row
    usd_per_hour: float  # per node
    basis: str  # "user", "published" (a rate as read), "ratio" (an old RI ratio x today's on-demand), "on-demand"
    source: str  # one line a reader can check
    as_of: str

    @property
    def billing(self) -> str:
        return BILLING[self.payment]


def floor_rate(
    prices: Prices,
    instance_type: str,
    region: str,
    payment: str,
    user_usd_per_hour: float | None = None,
    user_source: str | None = None,
) -> FloorRate | None:
    """The rate of one floor node, or None when neither the user nor the price book has one."""
    if payment not in PAYMENTS:
        raise ValueError(f"unknown floor payment '{payment}' (one of {', '.join(PAYMENTS)})")
    if user_usd_per_hour is not None:
        return FloorRate(payment, float(user_usd_per_hour), "user", f"your rate: {user_source}", "")
    ondemand = prices.price(instance_type, region)
    if payment == ON_DEMAND:
        if ondemand is None:
            return None
        return FloorRate(
            payment,
            ondemand.ondemand_usd_per_hour,
            "on-demand",
            f"on-demand: {ondemand.source or prices.origin}",
            ondemand.as_of,
        )
    rates = prices.commitments(instance_type, region)
    for offer in OFFERS[payment]:
        found = [c for c in rates if c.offer == offer]
        if not found:
            continue
        # The newest reading; among readings of the same day (several Capacity Block offers), the cheapest.
        c = max(found, key=lambda c: (c.as_of, -c.usd_per_hour))
        if payment in (RESERVED_1YR, RESERVED_3YR) and c.reference_ondemand_usd_per_hour:
            # An RI rate published beside an on-demand rate of the same day (the 2022 table): prices have moved
            # since, the discount has not (much); use the ratio on today's on-demand rate.
            if ondemand is None:
                return None
            ratio = c.usd_per_hour / c.reference_ondemand_usd_per_hour
            usd = round(ratio * ondemand.ondemand_usd_per_hour, 4)
            return FloorRate(
                payment,
                usd,
                "ratio",
                f"{ratio:.3f} x today's on-demand ${ondemand.ondemand_usd_per_hour:g}: {offer} "
                f"${c.usd_per_hour:g} / on-demand ${c.reference_ondemand_usd_per_hour:g} as of {c.as_of} "
                f"({c.source})",
                c.as_of,
            )
        return FloorRate(payment, c.usd_per_hour, "published", f"{offer} as of {c.as_of} ({c.source})", c.as_of)
    return None


def missing_rate_reason(prices: Prices, instance_type: str, region: str, payment: str) -> str:
    """Why `floor_rate` is None for this floor (no user rate given), with the fix."""
    fix = (
        "give your own rate: guaranteed.rate: {usd_per_hour: N, source: 'where you read it'} "
        "(gpuloan never guesses a committed price; docs/floor.md)"
    )
    if payment == ON_DEMAND or prices.price(instance_type, region) is None:
        return f"{prices.missing_price_reason(instance_type, region)}; or {fix}"
    offers = " or ".join(OFFERS[payment])
    return f"the price book ({prices.origin}) has no {offers} rate for {instance_type} in {region}; {fix}"


# --- the organization's commitments (config `commitments`, docs/floor.md "Capacity and commitment") -------------

# Commitment kinds as the config names them (pricing/cost_model/billing.py KINDS) -> the price book's offer prefix.
COMMITMENT_OFFER_PREFIX = {
    "reserved_instances": "reserved",
    "ec2_instance_savings_plan": "savings_plan_ec2_instance",
    "compute_savings_plan": "savings_plan_compute",
}


def commitment_offer(kind: str, term_years: int, payment_option: str) -> str:
    """The price book offer of a commitment: `reserved_1yr_no_upfront`, `savings_plan_compute_3yr_partial_upfront`
    (the names pricing/sources/aws_prices.py writes and COMMITMENTS.md uses)."""
    return f"{COMMITMENT_OFFER_PREFIX[kind]}_{term_years}yr_{payment_option}"


def commitment_rate(
    prices: Prices, kind: str, term_years: int, payment_option: str, instance_type: str, region: str
) -> FloorRate | None:
    """What one instance-hour of `instance_type` costs under a commitment of this kind, term and payment option,
    from the price book; None when the book has no such rate (the user must give one: nothing here guesses).

    A Reserved Instance row published beside an on-demand rate of the same day (the 2022 table) is used as a ratio
    to today's on-demand rate, never as its absolute figure (COMMITMENTS.md)."""
    offer = commitment_offer(kind, term_years, payment_option)
    found = [c for c in prices.commitments(instance_type, region) if c.offer == offer]
    if not found:
        return None
    c = max(found, key=lambda c: (c.as_of, -c.usd_per_hour))
    payment = f"{kind}_{term_years}yr_{payment_option}"
    if c.reference_ondemand_usd_per_hour:
        ondemand = prices.price(instance_type, region)
        if ondemand is None:
            return None
        ratio = c.usd_per_hour / c.reference_ondemand_usd_per_hour
        return FloorRate(
            payment,
            round(ratio * ondemand.ondemand_usd_per_hour, 4),
            "ratio",
            f"{ratio:.3f} x today's on-demand ${ondemand.ondemand_usd_per_hour:g}: {offer} "
            f"${c.usd_per_hour:g} / on-demand ${c.reference_ondemand_usd_per_hour:g} as of {c.as_of} "
            f"({c.source})",
            c.as_of,
        )
    return FloorRate(payment, c.usd_per_hour, "published", f"{offer} as of {c.as_of} ({c.source})", c.as_of)
