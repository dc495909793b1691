"""AWS Budgets for the environment and each pool, and (opt-in) activation of the cost-allocation tags they filter on.

A budget only sees spend that carries an *active* cost-allocation tag. AWS applies activation to spend from then
on (not retroactively) and needs up to 24 hours; a key that no billed resource carries yet cannot be activated at
all: UpdateCostAllocationTagsStatus fails, and with it the `pulumi up`. The gpuloan tags first appear on a bill
once the node groups have run, so activation can never be part of the first deploy: it is a second step,
`budget.activate_cost_allocation_tags: true` the next day (or one `aws ce` command), see docs/budgets.md.
Budget status itself lags spend by hours: the policy function's own running estimate fills that gap.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from config import budget_plan, tags
from config.budget_plan import BudgetSpec
from config.config import GpuLoanConfig

COMPARISON = "GREATER_THAN"
# Amortized cost (issue 35 item 8). A budget filtered on gpuloan's tags sees only line items of tagged resources.
# With unblended cost, a Reserved Instance's or Savings Plan's fee is its own line item (RIFee,
# SavingsPlanRecurringFee, the upfront fee) with no resource and so no tag, and the usage it covers is $0 (RI) or
# netted to $0 (SP): a floor paid with the organization's commitments would count almost nothing in the budget,
# while the preview prices it at the commitment's rate and the policy's cap reads the budget's actual spend.
# Amortized cost puts each covered hour's share of the fee on the usage line item it covers (CUR
# reservation/AmortizedUpfrontCostForUsage and savings_plan_effective_cost, on the tagged usage), which is what
# the preview shows. What no tagged usage uses (a commitment's unused hours) stays untagged: the policy's cap counts
# it itself (commitment_unused_usd_per_hour). Without commitments the two metrics are equal.
COST_METRIC = "AmortizedCost"


def notifications(spec: BudgetSpec, topic_arn: pulumi.Input[str]) -> list[aws.budgets.BudgetNotificationArgs]:
    # Every notification goes to the emails (AWS Budgets mails them directly, no confirmation needed) and to the
    # alerts topic (the platform team's subscriptions, chat hooks). AWS allows one topic per notification.
    def one(kind: str, pct: float) -> aws.budgets.BudgetNotificationArgs:
        return aws.budgets.BudgetNotificationArgs(
            comparison_operator=COMPARISON,
            notification_type=kind,
            threshold=pct,
            threshold_type="PERCENTAGE",
            subscriber_email_addresses=list(spec.emails) or None,
            subscriber_sns_topic_arns=[topic_arn],
        )

    return [one("ACTUAL", p) for p in spec.actual_thresholds_pct] + [
        one("FORECASTED", p) for p in spec.forecasted_thresholds_pct
    ]


def spend_filter(spec: BudgetSpec) -> dict:
    """Which spend a budget counts: one tag as a classic cost filter (`TagKeyValue`, `user:<key>$<value>`);
    several tags, which classic filters can only OR, as a filter expression that ANDs them (the Budgets
    Expression API; its tag keys are plain, without the `user:` prefix, as in Cost Explorer)."""
    if not spec.also_tags:
        return {
            "cost_filters": [aws.budgets.BudgetCostFilterArgs(name="TagKeyValue", values=[spec.filter_value])],
            "cost_types": aws.budgets.BudgetCostTypesArgs(use_amortized=True),
        }  # COST_METRIC
    return {
        "filter_expression": aws.budgets.BudgetFilterExpressionArgs(
            ands=[
                aws.budgets.BudgetFilterExpressionAndArgs(
                    tags=aws.budgets.BudgetFilterExpressionAndTagsArgs(
                        key=key, values=[value], match_options=["EQUALS"]
                    )
                )
                for key, value in spec.scope_tags
            ]
        ),
        "metrics": COST_METRIC,  # an expression budget takes a metric instead of cost types
    }


@dataclass(frozen=True)
class BudgetsArgs:
    specs: tuple[BudgetSpec, ...]
    topic_arn: pulumi.Input[str]
    # Empty by default: see the module docstring. `activation_keys(cfg)` fills it when the config opts in.
    activate_tag_keys: tuple[str, ...] = ()

    @staticmethod
    def from_config(cfg: GpuLoanConfig, topic_arn: pulumi.Input[str]) -> BudgetsArgs:
        """The config's budgets (config/budget_plan.py), notifying the alerts topic `topic_arn`."""
        return BudgetsArgs(tuple(budget_plan.budget_specs(cfg)), topic_arn, activation_keys(cfg))


def activation_keys(cfg: GpuLoanConfig) -> tuple[str, ...]:
    """The tag keys this stack activates: none unless `budget.activate_cost_allocation_tags` is set."""
    return tags.COST_ALLOCATION_KEYS if cfg.budget.activate_cost_allocation_tags else ()


class Budgets(pulumi.ComponentResource):
    """Monthly cost budgets (environment + pools) and the cost-allocation tag activations."""

    budget_names: pulumi.Output[list[str]]

    def __init__(self, name: str, args: BudgetsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:budgets:Budgets", name, None, opts)
        # Activation is account-wide and shared with every other stack of the account: destroying this stack
        # must not switch chargeback off for the others, so the activation is left in place on delete.
        tag_opts = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        self.tag_activations = [
            aws.costexplorer.CostAllocationTag(
                f"{name}-tag-{key.replace(':', '-')}", tag_key=key, status="Active", opts=tag_opts
            )
            for key in args.activate_tag_keys
        ]
        self.budgets: dict[str, aws.budgets.Budget] = {}
        for spec in args.specs:
            self.budgets[spec.budget_name] = aws.budgets.Budget(
                f"{name}-{spec.resource_name.removeprefix('budget-')}",
                name=spec.budget_name,
                budget_type="COST",
                time_unit="MONTHLY",
                limit_amount=f"{spec.monthly_usd:.2f}",
                limit_unit="USD",
                **spend_filter(spec),
                notifications=notifications(spec, args.topic_arn),
                tags=spec.resource_tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.budget_names = pulumi.Output.from_input(list(self.budgets))
        self.register_outputs({"budget_names": self.budget_names})
