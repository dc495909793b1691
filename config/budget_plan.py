"""The environment's and pools' AWS Budgets as data, decided from the config alone (no Pulumi): their names,
limits, tag scopes and alert thresholds. stacks/spend/budgets.py creates them; the policy settings
(pricing/policy_settings.py) read the names the policy function queries.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.config import Budget, GpuLoanConfig
from config import tags


def tag_filter_value(key: str, value: str) -> str:
    """AWS Budgets' TagKeyValue form for user-defined tags: `user:<key>$<value>`."""
    return f"user:{key}${value}"


@dataclass(frozen=True)
class BudgetSpec:
    """One budget, decided from the config alone (pure; the tests read these and the recorded resources)."""

    resource_name: str
    budget_name: str
    monthly_usd: float
    tag_key: str
    tag_value: str
    emails: tuple[str, ...]
    actual_thresholds_pct: tuple[float, ...]
    forecasted_thresholds_pct: tuple[float, ...]
    resource_tags: dict[str, str]
    # Extra tags the spend must also carry (AND). A pool budget also requires the environment tag: pool names
    # repeat across stacks (dev and prod both have "training"), often in one account.
    also_tags: tuple[tuple[str, str], ...] = ()

    @property
    def filter_value(self) -> str:
        return tag_filter_value(self.tag_key, self.tag_value)

    @property
    def scope_tags(self) -> tuple[tuple[str, str], ...]:
        """Every (key, value) the budget's spend must carry."""
        return (*self.also_tags, (self.tag_key, self.tag_value))


def budget_spec(
    resource_name: str,
    budget_name: str,
    b: Budget,
    key: str,
    value: str,
    resource_tags,
    also_tags: tuple[tuple[str, str], ...] = (),
) -> BudgetSpec:
    return BudgetSpec(
        resource_name=resource_name,
        budget_name=budget_name,
        monthly_usd=b.monthly_usd,
        tag_key=key,
        tag_value=value,
        emails=tuple(dict.fromkeys(str(e) for e in b.alert_emails)),
        actual_thresholds_pct=tuple(b.actual_thresholds_pct),
        forecasted_thresholds_pct=tuple(b.forecasted_thresholds_pct),
        resource_tags=resource_tags,
        also_tags=also_tags,
    )


def budget_specs(cfg: GpuLoanConfig) -> list[BudgetSpec]:
    env = cfg.environment
    specs = [
        budget_spec(
            "budget-environment", f"gpuloan-{env}", cfg.budget, tags.TAG_ENVIRONMENT, env, tags.environment_tags(env)
        )
    ]
    for pool in cfg.pools:
        if pool.budget is None:
            continue
        specs.append(
            budget_spec(
                f"budget-pool-{pool.name}",
                f"gpuloan-{env}-{pool.name}",
                pool.budget,
                tags.TAG_POOL,
                pool.name,
                tags.pool_tags(env, pool.name, pool.team, "platform"),
                also_tags=((tags.TAG_ENVIRONMENT, env),),
            )
        )
    return specs
