"""The budget scopes of a tick (one pool, or the environment): month-to-date spend, the hourly headroom the
projection leaves to the month's end, and whether it is exhausted (the drain) or capped (the scale-up's cap,
policy/decide/bound.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from policy.model import Spend, Timers
from policy.terms import Enforcement

_MIN_HOURS_LEFT = 1.0 / 60  # the last minute of a month must not divide by zero


def next_month_start(now: datetime) -> datetime:
    """The start of the next calendar month (UTC): where the budget projection's horizon starts again."""
    now = now.astimezone(timezone.utc)
    return datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=timezone.utc)


def hours_left_in_month(now: datetime) -> float:
    """Hours from `now` to the start of the next calendar month (UTC), the horizon of the budget projection."""
    return max((next_month_start(now) - now).total_seconds() / 3600.0, _MIN_HOURS_LEFT)


class Scope:
    """A budget scope (one pool, or the environment) while a tick is being decided.

    headroom_usd_per_hour is how much more hourly spend fits: (budget - month-to-date) / hours left, minus
    the hourly rate of everything already running in the scope (floor + elastic). Scale-ups consume it.
    """

    __slots__ = ("budget_usd", "month_to_date_usd", "known", "headroom_usd_per_hour", "capped", "name", "reread_at")

    def __init__(
        self,
        name: str,
        budget_usd: float,
        spend: Spend | None,
        rate_usd_per_hour: float,
        hours: float,
        enforcement: str,
        refresh_minutes: int = 60,
    ):
        self.name = name
        # When the tick reads AWS Budgets' actual figure again (policy/spend.py): month-to-date moves then.
        as_of = spend.actual_as_of if spend is not None else None
        self.reread_at = as_of + timedelta(minutes=refresh_minutes) if as_of is not None else None
        self.budget_usd = budget_usd
        mtd = spend.month_to_date_usd if spend is not None else None
        self.known = mtd is not None
        # Without an actual figure the projection still caps: spend so far counts as the running estimate only.
        self.month_to_date_usd = mtd if mtd is not None else (spend.estimated_since_usd if spend else 0.0)
        self.headroom_usd_per_hour = (budget_usd - self.month_to_date_usd) / hours - rate_usd_per_hour
        self.capped = enforcement == Enforcement.cap_elastic

    def read_headroom(self, timers: Timers, affordable: int, add: int) -> None:
        """Timers of a scale-up sized against this scope's headroom: the headroom grows as the month's hours run
        out (a cut scale-up may fit a minute later), starts again with the next month, and moves with the next
        actual figure from AWS Budgets."""
        if affordable < add:
            timers.next_minute()
        timers.at(next_month_start(timers.now))
        timers.at(self.reread_at)

    @property
    def exhausted(self) -> bool:
        """Spend reached the budget: drain, if capped. Without an actual figure (Budgets unreadable, e.g. access
        denied) the running estimate alone decides: it only undercounts, so a drain it triggers is due anyway."""
        return self.capped and self.month_to_date_usd >= self.budget_usd
