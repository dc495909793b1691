"""A node's per-minute GPU utilization series, as the utilization port returns it (policy/ports.py
UtilizationSource; CloudWatch: policy/io/cloudwatch.py), and the rule that makes a window of it count: fresh and
mostly covered, else missing data, which never shrinks capacity. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

# A node counts as idle only when its datapoints cover most of the idle window and are fresh; anything less is
# missing data, which never shrinks capacity. Container Insights publishes a minute's datapoint a few minutes
# late, so the idle window ends at the newest datapoint (at most MAX_STALENESS old), not at `now`: anchored at
# `now`, the minutes still in flight count as gaps and a short idle timeout (5-10 min) could never be met.
MIN_COVERAGE = 0.8
MAX_STALENESS = timedelta(minutes=5)


@dataclass(frozen=True)
class Series:
    """Per-minute datapoints of one node, newest first: (timestamp, average, maximum)."""

    points: tuple[tuple[datetime, float | None, float | None], ...]
    reserved: tuple[tuple[datetime, float], ...] = ()  # (timestamp, max % of GPUs requested by pods)

    def max_over(self, now: datetime, minutes: int) -> float | None:
        """Max utilization over the `minutes` one-minute periods up to the newest datapoint; None when that is
        stale or the periods are not mostly covered."""
        return _covered_max([(ts, mx) for ts, _, mx in self.points if mx is not None], now, minutes)

    def reserved_max_over(self, now: datetime, minutes: int) -> float | None:
        """Max GPU reserved capacity over the window, with the same freshness and coverage rules."""
        return _covered_max(list(self.reserved), now, minutes)

    def avg_over(self, now: datetime, minutes: int) -> float | None:
        start = now - timedelta(minutes=minutes)
        vals = [av for ts, av, _ in self.points if ts >= start and av is not None]
        return sum(vals) / len(vals) if vals else None


def _covered_max(points: list[tuple[datetime, float]], now: datetime, minutes: int) -> float | None:
    stamps = [ts for ts, _ in points if ts <= now]
    if not stamps:
        return None
    newest = max(stamps)
    if now - newest > MAX_STALENESS:
        return None
    start = newest - timedelta(minutes=minutes)
    vals = [v for ts, v in points if start < ts <= newest]
    if len(vals) < MIN_COVERAGE * minutes:
        return None
    return max(vals)
