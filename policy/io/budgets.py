"""AWS Budgets: a budget's month-to-date actual spend (DescribeBudget), the BudgetReader of policy/spend.py.

Read at most every `budget_refresh_minutes` (policy/spend.py decides when; DESIGN.md decision 7).
"""

from __future__ import annotations

from policy.deadline import Deadline, check
from policy.io.aws_errors import classify


class AwsBudgets:
    def __init__(self, budgets, account_id: str, deadline: Deadline | None = None):
        self._budgets = budgets
        self._account = account_id
        self._deadline = deadline
        self.calls = 0

    def actual_usd(self, budget_name: str) -> float:
        check(self._deadline)
        self.calls += 1
        try:
            resp = self._budgets.describe_budget(AccountId=self._account, BudgetName=budget_name)
        except Exception as err:  # noqa: BLE001
            raise classify(err, f"Budgets DescribeBudget {budget_name}") from err
        spend = ((resp.get("Budget") or {}).get("CalculatedSpend") or {}).get("ActualSpend") or {}
        return float(spend.get("Amount", 0.0))
