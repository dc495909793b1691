"""Issue 42 item 3: a Budgets read AWS refuses is backed off, not repeated every tick; unknown spend stays unknown.

Against a real botocore Budgets client (Stubber for AWS's answers) through the AwsBudgets adapter and
observe_spend, with the state carried from tick to tick as the tick carries it (JSON, then tick_state.clean).
"""

from __future__ import annotations

import json
from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber

from policy import tick_state
from policy.io.budgets import AwsBudgets
from policy.spend import observe_spend
from policy_cases import NOW

REFRESH_MINUTES = 60
SCOPES = {"environment": "gpuloan-dev"}
ANSWER = {
    "Budget": {
        "BudgetName": "gpuloan-dev",
        "BudgetType": "COST",
        "TimeUnit": "MONTHLY",
        "CalculatedSpend": {"ActualSpend": {"Amount": "123.4", "Unit": "USD"}},
    }
}
EXPECTED = {"AccountId": "123456789012", "BudgetName": "gpuloan-dev"}


def _ticks(answers: list[str | None], minutes: list[float]):
    """One observe_spend per entry of `minutes` after NOW; `answers` are what Budgets says to each call, in order
    (an error code, or None for the figure). Returns (the spends, the errors per tick, the calls made)."""
    budgets = boto3.client(
        "budgets", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    reader = AwsBudgets(budgets, "123456789012")
    state: dict = {}
    spends, errors = [], []
    with Stubber(budgets) as stub:
        for code in answers:
            if code is None:
                stub.add_response("describe_budget", ANSWER, EXPECTED)
            else:
                stub.add_client_error("describe_budget", code, f"{code} for the test", 400, expected_params=EXPECTED)
        for m in minutes:
            state, problems = tick_state.clean(json.loads(json.dumps(state)))  # as stored and read back
            assert problems == []
            tick_errors: list[str] = []
            spends.append(
                observe_spend(
                    state,
                    SCOPES,
                    reader,
                    NOW + timedelta(minutes=m),
                    REFRESH_MINUTES,
                    lambda err: tick_errors.append(str(err)),
                )["environment"]
            )
            errors.append(tick_errors)
        stub.assert_no_pending_responses()
    return spends, errors, reader.calls


@pytest.mark.parametrize("code", ["AccessDeniedException", "NotFoundException"])
def test_a_refused_budgets_read_is_asked_again_only_after_the_refresh_interval(code):
    spends, errors, calls = _ticks([code, None], [0, 1, 2, 30, 59, 60])
    assert calls == 2  # at 0 (refused) and at 60; not at 1, 2, 30, 59
    assert all(e for e in errors[:5]), errors  # every tick in between still says the figure is unknown
    assert "not asked again before" in errors[1][0] and code in errors[1][0]
    assert [s.actual_usd for s in spends] == [None] * 5 + [123.4]  # unknown, never zero, until read
    assert errors[5] == []


def test_a_throttled_budgets_read_is_retried_next_tick():
    spends, errors, calls = _ticks(["ThrottlingException", None], [0, 1])
    assert calls == 2 and spends[1].actual_usd == 123.4


def test_a_refusal_is_forgotten_at_a_new_month():
    """The state of a scope starts afresh each month (policy/spend.py), its refusal too: read at once."""
    spends, errors, calls = _ticks(["AccessDeniedException", None], [0, 60 * 24 * 30])
    assert calls == 2 and spends[1].actual_usd == 123.4
