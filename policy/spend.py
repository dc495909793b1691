"""Month-to-date spend per budget scope: the last actual from AWS Budgets + the policy's running estimate since.

AWS Budgets lags hours and is read at most every `budget_refresh_minutes` (>= 60). Between reads, each tick
adds (floor + elastic hourly rate) x (time since the previous tick) to `estimated_since_usd`. Budgets refreshes
its figure only a few times a day, so a fresh read is usually the same (or a still-lagging) figure: it only
replaces what the estimate already counted where it is higher, so month-to-date never drops on a read and the
estimate keeps covering the Budgets lag. A new month resets everything. A read AWS refuses (access denied, no
such budget) is backed off the same `budget_refresh_minutes` (`refused_at`), where a throttled or unreachable one
is retried next tick. The figures live in the tick state (policy/io/state.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable, Protocol

from policy import fanout
from policy.io.aws_errors import refused
from policy.errors import DataUnavailable
from policy.model import Spend

# A gap longer than this (outage, disabled schedule) is not billed in full: the nodes may have been scaled by
# hand meanwhile, and the next Budgets read corrects the figure anyway.
MAX_ACCRUAL_GAP = timedelta(minutes=60)
REFUSED_WHY_CHARS = 300  # the refusal's message, kept in the state to report it on the ticks that do not ask


class BudgetReader(Protocol):
    def actual_usd(self, budget_name: str) -> float: ...


def _month(now: datetime) -> str:
    if now.year >= 1000:  # what strftime("%Y-%m") gives, without its cost (each tick reads the month)
        return f"{now.year}-{now.month:02d}"
    return now.strftime("%Y-%m")


def observe_spend(
    state: dict,
    scopes: dict[str, str | None],
    reader: BudgetReader | None,
    now: datetime,
    refresh_minutes: int,
    on_error: Callable[[Exception], None],
    in_flight: int = 1,
) -> dict[str, Spend]:
    """Spend per scope ("environment", "pool:<name>"), refreshing stale actuals from Budgets. Mutates `state`. The
    budgets due are read side by side, at most `in_flight` at once (policy/fanout.py): the hour's first tick of an
    organization of 200 pools reads 200 of them."""
    spend_state = state.setdefault("spend", {})
    ask: dict[str, str] = {}  # scope -> the budget to read now
    for scope, budget_name in scopes.items():
        s = spend_state.get(scope)
        if s is None or s.get("month") != _month(now):
            s = spend_state[scope] = {
                "month": _month(now),
                "actual_usd": None,
                "actual_as_of": None,
                "estimated_since_usd": 0.0,
                "elastic_month_usd": 0.0,
            }
        as_of = datetime.fromisoformat(s["actual_as_of"]) if s.get("actual_as_of") else None
        due = as_of is None or now - as_of >= timedelta(minutes=refresh_minutes)
        refused_at = datetime.fromisoformat(s["refused_at"]) if s.get("refused_at") else None
        if (
            due
            and budget_name
            and refused_at is not None
            and timedelta(0) <= now - refused_at < timedelta(minutes=refresh_minutes)
        ):
            # Refused (access denied, no such budget): asked again only `refresh_minutes` later, like a good read,
            # not every tick. Still reported every tick: the figure is still unknown (or stale), never zero.
            again = refused_at + timedelta(minutes=refresh_minutes)
            on_error(
                DataUnavailable(
                    f"Budgets DescribeBudget {budget_name} refused at {refused_at.isoformat()}, not "
                    f"asked again before {again.isoformat()}: {s.get('refused_why', '')}"
                )
            )
        elif due and budget_name and reader is not None:
            ask[scope] = budget_name
    answers = (
        {
            name: (actual, err)
            for name, actual, err in fanout.each(reader.actual_usd, sorted(set(ask.values())), in_flight)
        }
        if reader is not None
        else {}
    )
    out = {}
    for scope in scopes:
        s = spend_state[scope]
        as_of = datetime.fromisoformat(s["actual_as_of"]) if s.get("actual_as_of") else None
        if scope in ask:
            actual, err = answers[ask[scope]]
            if err is None and actual is not None:
                # Month-to-date so far (last actual + estimate since, or the estimate alone): a lagging actual
                # must not erase spend the estimate already counted, only a higher one supersedes it.
                before = (s.get("actual_usd") or 0.0) + float(s.get("estimated_since_usd", 0.0))
                s["actual_usd"] = actual
                s["actual_as_of"] = now.isoformat()
                s["estimated_since_usd"] = max(0.0, before - actual)
                s.pop("refused_at", None)
                s.pop("refused_why", None)
                as_of = now
            else:  # a failed read keeps the last figure (stale, not wrong)
                err = err or DataUnavailable(f"Budgets DescribeBudget {ask[scope]}: no answer")
                if refused(err):
                    s["refused_at"] = now.isoformat()
                    s["refused_why"] = str(err)[:REFUSED_WHY_CHARS]
                on_error(err)
        out[scope] = Spend(s.get("actual_usd"), float(s.get("estimated_since_usd", 0.0)), as_of)
    return out


def accrue(state: dict, rates: dict[str, tuple[float, float]], now: datetime) -> None:
    """Add spend since the previous tick: rates[scope] = (total USD/hour, elastic USD/hour)."""
    last = state.get("last_tick_at")
    state["last_tick_at"] = now.isoformat()
    if not last:
        return
    gap = min(now - datetime.fromisoformat(last), MAX_ACCRUAL_GAP)
    hours = max(gap.total_seconds(), 0.0) / 3600.0
    for scope, (total, elastic) in rates.items():
        s = state.get("spend", {}).get(scope)
        if s is None:
            continue
        s["estimated_since_usd"] = float(s.get("estimated_since_usd", 0.0)) + total * hours
        s["elastic_month_usd"] = float(s.get("elastic_month_usd", 0.0)) + elastic * hours
