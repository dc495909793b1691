"""Money rules: what a config's prices must satisfy before anything is deployed.

- prices needed to deploy: every floor and elastic type has a price where the price source covers the region, a
  floor paid other than on demand has the rate of its payment, a commitment has a rate for every floor type it may
  cover (gpuloan never guesses a rate);
- floor vs budget: the floors (billed with the commitments, pricing/cost_model/floor_bill.py) cost no more than the
  pool's budget and, with every commitment's fee, the environment's. `floor_over_budget` is the one comparison the
  config validation and the CrossGuard pack (guardrails/policies.py, floor-under-budget) both apply.

The config (the layer below) knows no prices: it runs these rules because the caller passes them in
(`config.parse(..., rules=checks.rules(prices))`); `parse` and `from_stack_yaml` below (and stacks/load.py
`from_pulumi_config`, the Pulumi program's) are the config's entry points with the money rules and the price book's
instance facts, so every caller that validates for a deployment refuses the same configs with the same messages.

Stdlib only at import time: the policy pack (guardrails/, whose virtualenv has no pydantic) imports
`floor_over_budget`; the rules import the config and the floor bill when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the policy pack imports this module without pydantic
    from collections.abc import Callable

    from config.config import GpuLoanConfig, Problems, Rule
    from pricing.sources.catalog import Prices


def floor_over_budget(floor_monthly_usd: float | None, budget_monthly_usd: float) -> bool:
    """Whether a floor's month costs more than the budget watching it: elastic capacity would be capped at once, so
    the budget cannot be meant. An unknown floor (None) is never over: costs without prices are shown as unknown."""
    return floor_monthly_usd is not None and floor_monthly_usd > budget_monthly_usd


def floor_over_budget_message(floor_monthly_usd: float, paid_as: str, budget: str, budget_monthly_usd: float) -> str:
    """The one wording of the rule: "the guaranteed floor alone costs $X/month (paid as), more than the <budget>
    ($Y)"."""
    return (
        f"the guaranteed floor alone costs ${floor_monthly_usd:,.0f}/month ({paid_as}), more than the {budget} "
        f"(${budget_monthly_usd:,.0f})"
    )


def missing_price_problems(prices: Prices, cfg: GpuLoanConfig) -> Problems:
    """Every floor and elastic type has a price. Only a price source that covers the region can tell a type is
    missing there; with no prices at all the plan is still valid, its costs are shown as unknown."""
    if not prices.prices_cover(cfg.region):
        return []
    problems: Problems = []
    for i, pool in enumerate(cfg.pools):
        g, e = pool.guaranteed, pool.elastic
        if g is not None and prices.price(g.instance_type, cfg.region) is None:
            problems.append(
                (f"pools[{i}].guaranteed.instance_type", prices.missing_price_reason(g.instance_type, cfg.region))
            )
        for j, t in enumerate(e.instance_types if e is not None else ()):
            if prices.price(t, cfg.region) is None:
                problems.append((f"pools[{i}].elastic.instance_types[{j}]", prices.missing_price_reason(t, cfg.region)))
    return problems


def floor_rate_problems(prices: Prices, cfg: GpuLoanConfig) -> Problems:
    """A floor paid other than on demand (a Capacity Block, a per-pool commitment) has the rate of its payment: the
    user's or the price book's. As with on-demand prices, only a source covering the region can tell a rate is
    missing there; a missing on-demand price is missing_price_problems'."""
    from pricing.cost_model.floor_bill import floor_rate
    from pricing.sources import floor_pricing

    if not prices.prices_cover(cfg.region):
        return []
    problems: Problems = []
    for i, pool in enumerate(cfg.pools):
        g = pool.guaranteed
        if (
            g is not None
            and g.rate is None
            and prices.price(g.instance_type, cfg.region) is not None
            and floor_rate(prices, cfg, pool) is None
        ):
            problems.append(
                (
                    f"pools[{i}].guaranteed.rate",
                    floor_pricing.missing_rate_reason(prices, g.instance_type, cfg.region, g.price_model),
                )
            )
    return problems


def commitment_rate_problems(prices: Prices, cfg: GpuLoanConfig) -> Problems:
    """A commitment has a rate for every floor type it may cover: the user's (`rates`) or the price book's. Only a
    price source covering the region can tell a committed rate is missing; a user rate needs no price source."""
    from pricing.cost_model.floor_bill import commitment_rate, commitment_scope_types
    from pricing.sources import floor_pricing

    problems: Problems = []
    for i, c in enumerate(cfg.commitments):
        region = c.region or cfg.region
        for t in commitment_scope_types(cfg, c):
            if t in c.rates or not prices.prices_cover(region) or commitment_rate(prices, cfg, c, t) is not None:
                continue
            offer = floor_pricing.commitment_offer(str(c.kind), c.term_years, str(c.payment_option))
            problems.append(
                (
                    f"commitments[{i}].rates",
                    f"the price book ({prices.origin}) has no {offer} "
                    f"rate for {t} in {region} (the shared price data has no Savings Plans rates and only "
                    f"no-upfront Reserved Instances of some types); give your own: rates: {{{t}: "
                    "{usd_per_hour: N, source: 'where you read it, with its date'}} (gpuloan never "
                    "guesses a committed rate; docs/floor.md)",
                )
            )
    return problems


def floor_budget_problems(prices: Prices, cfg: GpuLoanConfig) -> Problems:
    """The floors, billed with the environment's commitments, within each pool's budget; the floors plus every
    commitment's fee (a commitment bills every hour of its term, used or not) within the environment's."""
    from pricing.cost_model.floor_bill import billing_key, floor_bill

    problems: Problems = []
    fixed_bill = floor_bill(prices, cfg)
    for i, pool in enumerate(cfg.pools):
        if pool.budget is None or pool.guaranteed is None:
            continue
        fixed = fixed_bill.pool_usd(billing_key(cfg, i))
        if fixed and floor_over_budget(fixed, pool.budget.monthly_usd):
            paid_as = pool.guaranteed.price_model + (", with the environment's commitments" if cfg.commitments else "")
            problems.append(
                (
                    f"pools[{i}].budget.monthly_usd",
                    floor_over_budget_message(fixed, paid_as, "pool budget", pool.budget.monthly_usd),
                )
            )
    b = fixed_bill.bill
    if b is None:
        return problems
    total_fixed = (
        sum(v for p, v in b.by_pool_usd.items() if p not in fixed_bill.unknown_pools) + b.unused_commitment_usd
    )
    if floor_over_budget(total_fixed, cfg.budget.monthly_usd):
        unused = b.unused_commitment_usd
        problems.append(
            (
                "budget.monthly_usd",
                f"the guaranteed floors alone cost ${total_fixed:,.0f}/month"
                + (f" (${unused:,.0f} of it commitment fees no floor uses)" if unused > 0.005 else "")
                + f", more than the environment budget (${cfg.budget.monthly_usd:,.0f})",
            )
        )
    return problems


# The money rules, run after the config's own (config.config.RULES) in this order; each takes the prices in force.
MONEY_RULES: tuple[Callable[[Prices, GpuLoanConfig], Problems], ...] = (
    missing_price_problems,
    floor_rate_problems,
    commitment_rate_problems,
    floor_budget_problems,
)


def rules(prices: Prices) -> tuple[Rule, ...]:
    """The money rules as config rules (config.parse's `rules`): each checks a config against `prices` plus the
    config's own `instance_prices`."""

    def bind(rule: Callable[[Prices, GpuLoanConfig], Problems]) -> Rule:
        return lambda cfg: rule(prices.with_config(cfg), cfg)

    return tuple(bind(rule) for rule in MONEY_RULES)


def parse(data: dict[str, Any], source: str = "config", *, prices: Prices) -> GpuLoanConfig:
    """config.parse with the money rules and the price book's instance facts."""
    from config import config

    return config.parse(data, source, instance_facts=prices.book.instance_facts, rules=rules(prices))


def from_stack_yaml(doc: dict[str, Any], source: str, *, prices: Prices) -> GpuLoanConfig:
    """config.from_stack_yaml with the money rules and the price book's instance facts: what every command that
    prices or deploys a stack file validates with."""
    from config import config

    return config.from_stack_yaml(doc, source, instance_facts=prices.book.instance_facts, rules=rules(prices))
