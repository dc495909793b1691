"""Lending ahead of the owner (opt-in, `scheduling.kueue.lend_ahead`): a floor lends less of itself ahead of the
owner's forecast return, so that fewer borrowed jobs start only to be reclaimed (LEND_AHEAD / LEND_RESTORED).

The owner can always take its floor back: with `reclaimWithinCohort: Any` the owner's room on its floor flavor is
`nominal - own - borrowed` whatever the lendingLimit (Kueue v0.19.2 pkg/cache/scheduler/resource_node.go
`available`; docs/aws-rules.md), and lowering the limit evicts nothing. What the limit changes is how much NEW
lending Kueue admits: a borrower's room is `min(limit - borrowed, nominal - own - borrowed)`. So the rule keeps
unlent what the owner is about to use, and nothing else:

    kept   = own GPUs in use + GPUs the owner's arrivals brought over the next reclaim_lookahead_minutes at this
             time of day on earlier days (policy/rhythm.py; of those days the FORECAST_QUANTILE, not the mean: a
             return on two days of seven is kept for, one on a single day is not), rounded up; the whole floor
             while the owner's queue has workloads waiting (status.pendingWorkloads: they take every GPU of the
             floor that frees)
    limit  = nominal - kept, clamped to [0, the configured lendingLimit]

and sets it when it differs from the queue's. `nominalQuota` (the guarantee) is never touched. The forecast changes
only when a slot of the day begins (policy/rhythm.py), which is this rule's timer; everything else is observed.
Unknown rhythm (fewer than MIN_DAYS days on record): the configured limit, as without the rule. The queue unread:
no change (LEND_UNKNOWN), the limit stays whatever it is.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta

from policy.model import (
    ACTION_HOLD,
    ACTION_SET_LENDING_LIMIT,
    Action,
    Lending,
    PoolDecision,
    PoolObservation,
    PoolSettings,
    Timers,
)
from policy.terms import Reason
from policy.rhythm import SLOT_MINUTES, DailyArrivals


# Of the earlier days' arrivals over the lookahead, the one kept for (nearest rank): of 3-4 days the highest, of 5-7
# the second highest. Measured against the mean and the highest day (docs/scheduling.md, "Lending ahead of the
# owner"): the mean lends on exactly the days the owner comes back; the highest day passes the cost bound.
FORECAST_QUANTILE = 0.8


def lend_ahead_on(ps: PoolSettings) -> bool:
    return bool(ps.lend_ahead_queue and ps.lend_ahead_flavor)


def owner_forecast_gpus(history: DailyArrivals, now: datetime, lookahead_minutes: int) -> float | None:
    """The GPUs kept unlent for the owner's arrivals over the lookahead: what the same slots of the day brought on
    the earlier days (policy/rhythm.py), the FORECAST_QUANTILE of those days (nearest rank); None while the rhythm
    is unknown."""
    by_day = history.window_gpus_by_day(now, lookahead_minutes)
    if by_day is None:
        return None
    ranked = sorted(by_day)
    return ranked[max(0, math.ceil(FORECAST_QUANTILE * len(ranked)) - 1)]


def wanted_limit_gpus(ps: PoolSettings, lending: Lending) -> int | None:
    """The lendingLimit the rule wants for this reading; None when the forecast is unknown (the configured one
    then applies, as without the rule)."""
    configured = min(ps.lend_ahead_limit_gpus, lending.nominal_gpus)
    if lending.forecast_gpus is None or lending.own_gpus is None or lending.pending_workloads is None:
        return None
    if lending.pending_workloads > 0:
        return 0
    kept = math.ceil(lending.own_gpus + lending.forecast_gpus - 1e-9)
    return max(0, min(configured, lending.nominal_gpus - kept))


def next_slot_start(now: datetime) -> datetime:
    """The moment the rhythm's forecast can change next: the start of the next slot of the day (policy/rhythm.py
    reads whole slots from the current one; its slots divide the hour)."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=now.minute % SLOT_MINUTES)
    return start + timedelta(minutes=SLOT_MINUTES)


def with_lending_actions(
    ps: PoolSettings, po: PoolObservation | None, decision: PoolDecision, now: datetime, timers: Timers | None = None
) -> PoolDecision:
    """The engine's hook: the decision with the pool's lendingLimit change added (the same decision otherwise)."""
    extra = lending_limit_actions(ps, po, now, timers)
    if not extra:
        return decision
    kept = tuple(a for a in decision.actions if not (a.kind == ACTION_HOLD and a.reason == Reason.STEADY))
    return dataclasses.replace(decision, actions=kept + tuple(extra))


def lending_limit_actions(
    ps: PoolSettings, po: PoolObservation | None, now: datetime, timers: Timers | None = None
) -> list[Action]:
    """The pool's lendingLimit change, if any (docs/scheduling.md, "Lending ahead of the owner")."""
    if not lend_ahead_on(ps) or po is None:
        return []
    lending = po.lending
    if lending is None:
        return [
            Action(
                ps.name,
                ACTION_HOLD,
                Reason.LEND_UNKNOWN,
                detail=f"ClusterQueue {ps.lend_ahead_queue} could not be read: its lendingLimit is left as it is",
            )
        ]
    if timers is not None:
        timers.at(next_slot_start(now))
    configured = min(ps.lend_ahead_limit_gpus, lending.nominal_gpus)
    wanted = wanted_limit_gpus(ps, lending)
    now_limit = lending.nominal_gpus if lending.limit_gpus is None else lending.limit_gpus
    target = configured if wanted is None else wanted
    if target == now_limit:
        return []
    if wanted is None:
        why = "the owner's daily rhythm is not known yet (or its usage could not be read): the configured limit"
    elif lending.pending_workloads:
        why = f"{lending.pending_workloads} workload(s) wait in the owner's queue: nothing more is lent"
    else:
        own, forecast = lending.own_gpus or 0.0, lending.forecast_gpus or 0.0  # both known: `wanted` is set
        why = (
            f"owner uses {own:g} GPU(s) and on earlier days {forecast:.1f} more arrived in the next "
            f"{ps.reclaim_lookahead_minutes} min: {lending.nominal_gpus} - {math.ceil(own + forecast - 1e-9)} "
            f"of the floor lends (at most {configured})"
        )
    return [
        Action(
            ps.name,
            ACTION_SET_LENDING_LIMIT,
            Reason.LEND_AHEAD if target < now_limit else Reason.LEND_RESTORED,
            desired_from=now_limit,
            desired_to=target,
            detail=why,
        )
    ]
