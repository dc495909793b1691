"""A pool's daily rhythm: GPUs of pod arrivals per time of day over the last days, for the warm-up rule.

The warm-up rule (docs/policy.md, "Warm-up ahead of the daily rhythm"; off unless `elastic.warm_up`) keeps or
launches spare nodes ahead of the arrivals the pool usually sees at this time of day, so that they land on a
ready node instead of waiting out a boot. What it needs from history is one figure: the expected arrival rate
over the next minutes, read from the same time of day on earlier days. Kept here as GPUs per 10-minute slot of
the day for the last DAYS days, in plain JSON (the Lambda keeps it in its DynamoDB state item; the simulator
feeds it the trace's arrivals as they happen, so both run this code and neither looks ahead).

Days are UTC calendar days. A day counts once a tick recorded anything in it (even zero arrivals), so a day the
function did not run is no evidence of a quiet day; until MIN_DAYS days are on record the rate is unknown and
the rule does nothing (no warm-up on a guess).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

SLOT_MINUTES = 10
SLOTS_PER_DAY = 24 * 60 // SLOT_MINUTES
DAYS = 7  # a week of memory: weekday patterns shift within a week, older ones do not predict tomorrow
MIN_DAYS = 3  # fewer recorded days than this: the rate is unknown

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def day_and_slot(t: datetime) -> tuple[int, int]:
    minutes = int((t - _EPOCH).total_seconds() // 60)
    return minutes // 1440, (minutes % 1440) // SLOT_MINUTES


class DailyArrivals:
    """GPUs arrived per slot of the day, one row per recorded day (the last DAYS days).

    `rows` maps a UTC day number (days since the epoch) to SLOTS_PER_DAY counts. `last` is the creation time
    (epoch seconds) of the newest arrival already counted, so that a pod seen by several ticks counts once."""

    __slots__ = ("rows", "last")

    def __init__(self, rows: dict[int, list[float]] | None = None, last: float | None = None):
        self.rows = rows or {}
        self.last = last

    # --- state (JSON) ----------------------------------------------------------------------------------------

    @classmethod
    def from_state(cls, raw) -> "DailyArrivals":
        """Read the state's form; anything malformed starts an empty history (the rule is then unknown for
        MIN_DAYS days, never wrong)."""
        if not isinstance(raw, dict):
            return cls()
        rows = {}
        for k, v in (raw.get("rows") or {}).items() if isinstance(raw.get("rows"), dict) else ():
            try:
                day = int(k)
            except (TypeError, ValueError):
                continue
            if (
                isinstance(v, list)
                and len(v) == SLOTS_PER_DAY
                and all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 and math.isfinite(x) for x in v
                )
            ):
                rows[day] = [float(x) for x in v]
        last = raw.get("last")
        last = float(last) if isinstance(last, (int, float)) and not isinstance(last, bool) else None
        return cls(rows, last)

    def to_state(self) -> dict:
        # GPU counts are whole numbers: written as ints, a row of a quiet day is mostly "0, " (3 bytes a slot;
        # about 3 KB a pool for the week, far inside DynamoDB's 400 KB item).
        return {
            "rows": {str(d): [int(x) if x == int(x) else round(x, 3) for x in v] for d, v in sorted(self.rows.items())},
            "last": self.last,
        }

    # --- recording -------------------------------------------------------------------------------------------

    def record(self, now: datetime, arrivals) -> None:
        """Count the arrivals (creation time, GPUs) not counted yet, and mark today as recorded. Arrivals older
        than the last one counted were counted by an earlier tick; those in the future are ignored."""
        today, _ = day_and_slot(now)
        self.rows.setdefault(today, [0.0] * SLOTS_PER_DAY)
        newest = self.last
        for t, gpus in arrivals or ():
            if gpus <= 0 or t > now:
                continue
            ts = t.timestamp()
            if self.last is not None and ts <= self.last:
                continue
            day, slot = day_and_slot(t)
            if today - day >= DAYS:
                continue
            self.rows.setdefault(day, [0.0] * SLOTS_PER_DAY)[slot] += gpus
            newest = ts if newest is None else max(newest, ts)
        self.last = newest
        for day in [d for d in self.rows if today - d >= DAYS]:
            del self.rows[day]

    # --- reading ---------------------------------------------------------------------------------------------

    def expected_rate_nodes_per_minute(self, now: datetime, minutes: int, gpus_per_node: int) -> float | None:
        """The arrival rate, in nodes' worth per minute, that the current slot of the day and the ones after it,
        `minutes` long together (rounded up to whole slots), brought on average over the earlier recorded days
        (not today: today's window is still to come). The figure changes only when a slot begins. None until
        MIN_DAYS days are on record."""
        by_day = self.window_gpus_by_day(now, minutes)
        if by_day is None:
            return None
        n_slots = -(-minutes // SLOT_MINUTES)  # from the start of the current slot: fixed, whatever the minute
        gpus_per_minute = sum(by_day) / len(by_day) / (n_slots * SLOT_MINUTES)  # whole GPUs: the sum is exact
        return gpus_per_minute / max(gpus_per_node, 1)

    def window_gpus_by_day(self, now: datetime, minutes: int) -> list[float] | None:
        """GPUs the same slots of the day (from the current one, `minutes` rounded up to whole slots) brought on
        each earlier recorded day, oldest first. None until MIN_DAYS days are on record."""
        today, slot = day_and_slot(now)
        days = sorted(d for d in self.rows if d < today)
        if len(days) < MIN_DAYS or minutes <= 0:
            return None
        n_slots = -(-minutes // SLOT_MINUTES)
        out = []
        for d in days:
            total = 0.0
            for k in range(n_slots):
                day, s = divmod(d * SLOTS_PER_DAY + slot + k, SLOTS_PER_DAY)
                row = self.rows.get(day)
                if row is not None:
                    total += row[s]
            out.append(total)
        return out

    def expected_gpus(self, now: datetime, minutes: int) -> float | None:
        """GPUs the same slots of the day (from the current one, `minutes` rounded up to whole slots) brought on
        average over the earlier recorded days: the lend-ahead rule's forecast (policy/decide/lend_ahead.py). None
        until MIN_DAYS days are on record."""
        rate = self.expected_rate_nodes_per_minute(now, minutes, 1)
        return None if rate is None else rate * -(-minutes // SLOT_MINUTES) * SLOT_MINUTES
