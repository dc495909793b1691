"""Capacity Block floors that run themselves: the window rules the policy function keeps for a floor that sits on
an EC2 Capacity Block for ML (`guaranteed.reservation: capacity_block`). Pure: no I/O, no clock.

A block is paid up front for its whole window, whether nodes run in it or not, and EC2 takes the instances back
at its end. Times, with S = capacity_block_start, E = capacity_block_end (docs/aws-rules.md):

    S                  the block is active: launches into it succeed from now on
    D = E - 40 min     EKS's scheduled action scales the node group to 0 ("Amazon EKS Node Group Capacity Scaledown
                       Before Reservation End") and drains the nodes; EC2 starts shutting the instances down at E - 30
    L = D - lead       gpuloan's own drain (capacity_block_checkpoint_lead_minutes, default 30)

What the policy does to the block's node group, and only to it (`block_actions`):
    before S      nothing (CAPACITY_BLOCK_WAITING): a launch before the block is active fails
    S <= t < L    desired = nodes (CAPACITY_BLOCK_START) when it is lower: the block is up at the first tick after S,
                  not at the next `pulumi up`
    L <= t < D    each in-service node of the block: cordon it and mark its GPU pods
                  `gpuloan.io/checkpoint-by: <D>` (CAPACITY_BLOCK_DRAIN); nothing new lands there, the jobs save
                  a checkpoint and leave, and their pending pods go to the elastic groups (the engine's scale-up
                  counts them). The desired size is left alone: the block is paid, and a job still saving needs
                  its node.
    t >= D        desired = 0 (CAPACITY_BLOCK_END) when it is higher: the same as EKS's action, so nothing
                  raises the group again against a block that is going away
`capacity_block_held` (config `capacity_block_active: false`, for a roll at desired 0) makes the policy leave the
group alone (CAPACITY_BLOCK_HELD).

Dates from EC2. S and E above are the block's own dates when the tick could read them (DescribeCapacityReservations
StartDate, EndDate, State: `PoolObservation.block_dates`), the configured ones otherwise: an extension moves the
end date, and a typo in config must not drain a paid block early (the tick reports any mismatch as an error). The
State decides first: a block that ended (expired, cancelled, failed, payment failed) is PHASE_DOWN, one not yet
delivered (scheduled, pending, payment pending, assessing, delayed) PHASE_BEFORE. When the read failed
(BLOCK_UNREAD), the configured window still raises the group at its start (a launch before the real start only
fails), but what takes capacity away waits for the dates to be read (PHASE_UNCONFIRMED: no drain, no scale-down,
no quota change): EKS's own scale-down 40 minutes before the real end happens whatever the policy does, so
holding costs at most the checkpoint warning, never a paid block. With Kueue, the floor flavor's nominalQuota in the pool's ClusterQueue follows
the window too: the block's GPUs from S to the drain, 0 otherwise (set_floor_quota). A pool whose floor is not a Capacity Block gets no action from this module.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

from policy.model import (
    ACTION_HOLD,
    ACTION_SET_DESIRED,
    BLOCK_UNREAD,
    LIFECYCLE_IN_SERVICE,
    Action,
    BlockDates,
    PoolDecision,
    PoolObservation,
    PoolSettings,
    Timers,
)
from policy.terms import Reason

# EKS scales a Capacity Block node group to 0 forty minutes before the block ends (EKS User Guide, "Create a managed
# node group with Capacity Blocks for ML", step 6); EC2 starts shutting instances down 30 minutes before the end.
EKS_SCALEDOWN_BEFORE_END = timedelta(minutes=40)
EC2_SHUTDOWN_BEFORE_END = timedelta(minutes=30)
DEFAULT_CHECKPOINT_LEAD_MINUTES = 30
# The annotation a job reads (a downwardAPI volume of metadata.annotations refreshes in place) to save a
# checkpoint and exit before EKS evicts it; its value is the time EKS scales the group down (RFC 3339, UTC).
CHECKPOINT_BY_ANNOTATION = "gpuloan.io/checkpoint-by"
ACTION_CHECKPOINT = "checkpoint"  # cordon the node, mark its GPU pods CHECKPOINT_BY_ANNOTATION
ACTION_SET_QUOTA = "set_floor_quota"  # Kueue: the nominalQuota of the block's floor flavor in its ClusterQueue

PHASE_BEFORE, PHASE_UP, PHASE_DRAIN, PHASE_DOWN, PHASE_HELD = "before", "up", "drain", "down", "held"
PHASE_UNCONFIRMED = "unconfirmed"  # the configured window says drain or down, but EC2's dates could not be read
# EC2 CapacityReservation.State (botocore ec2 model): a block that is over, and one not delivered yet.
ENDED_STATES = frozenset({"expired", "cancelled", "cancelling", "failed", "payment-failed"})
WAITING_STATES = frozenset({"scheduled", "pending", "payment-pending", "assessing", "delayed"})
BLOCK_REASONS = frozenset(
    {
        Reason.CAPACITY_BLOCK_WAITING,
        Reason.CAPACITY_BLOCK_START,
        Reason.CAPACITY_BLOCK_DRAIN,
        Reason.CAPACITY_BLOCK_END,
        Reason.CAPACITY_BLOCK_HELD,
    }
)


def parse_time(text: str | None) -> datetime:
    """An ISO 8601 time with its zone (settings carry them as text); raises ValueError on anything else."""
    if text is None:
        raise ValueError("no time configured")
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return t


def scale_down_at(end: datetime) -> datetime:
    """When EKS scales the block's group to 0: 40 minutes before the end."""
    return end - EKS_SCALEDOWN_BEFORE_END


def drain_at(end: datetime, lead_minutes: int) -> datetime:
    """When gpuloan cordons the block's nodes and asks their work to checkpoint."""
    return scale_down_at(end) - timedelta(minutes=lead_minutes)


def is_block(ps: PoolSettings) -> bool:
    return bool(ps.guaranteed_group and ps.capacity_block_start and ps.capacity_block_end)


def window(ps: PoolSettings, dates: BlockDates | None = None) -> tuple[datetime, datetime]:
    """The block's (start, end): EC2's when it reported both, else the configured ones. Raises ValueError on
    unreadable configured times."""
    if dates is not None and dates.start is not None and dates.end is not None:
        return dates.start, dates.end
    return parse_time(ps.capacity_block_start), parse_time(ps.capacity_block_end)


def mismatch(ps: PoolSettings, dates: BlockDates | None) -> str | None:
    """What EC2 says of the block that config does not (dates, or a block that is over), or None."""
    if dates is None or dates.state == BLOCK_UNREAD or dates.start is None or dates.end is None:
        return None
    start, end = parse_time(ps.capacity_block_start), parse_time(ps.capacity_block_end)
    if (start, end) != (dates.start, dates.end):
        return (
            f"EC2 says {_iso(dates.start)} to {_iso(dates.end)} ({dates.state}), config says {_iso(start)} to "
            f"{_iso(end)}: the policy follows EC2; correct guaranteed.capacity_block_start/_end"
        )
    return None


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase(ps: PoolSettings, now: datetime, dates: BlockDates | None = None) -> str:
    """Where `now` lies in the block's window (module doc), on EC2's dates and state when `dates` has them. Raises
    ValueError on unreadable configured times."""
    if ps.capacity_block_held:
        return PHASE_HELD
    start, end = window(ps, dates)
    if dates is not None and dates.state in ENDED_STATES:
        return PHASE_DOWN
    if dates is not None and dates.state in WAITING_STATES:
        return PHASE_BEFORE
    if now < start:
        return PHASE_BEFORE
    if now >= scale_down_at(end):
        where = PHASE_DOWN
    elif now >= drain_at(end, ps.capacity_block_checkpoint_lead_minutes):
        where = PHASE_DRAIN
    else:
        return PHASE_UP
    if dates is not None and dates.state == BLOCK_UNREAD:
        return PHASE_UNCONFIRMED  # never take a paid block away on the configured dates alone
    return where


def _hold(ps: PoolSettings, reason: Reason, detail: str) -> Action:
    return Action(ps.name, ACTION_HOLD, reason, group=ps.guaranteed_group, detail=detail)


def block_actions(
    ps: PoolSettings, po: PoolObservation | None, now: datetime, timers: Timers | None = None
) -> list[Action]:
    """The window's actions on the pool's Capacity Block group this tick; [] for any other pool. `timers`: the
    window's dates (start, drain, EKS's scale-down) change the phase."""
    if not is_block(ps):
        return []
    name, gname = ps.name, ps.guaranteed_group
    dates = po.block_dates if po is not None else None
    try:
        where = phase(ps, now, dates)
        start, end = window(ps, dates)
        if timers is not None:
            for t in (start, drain_at(end, ps.capacity_block_checkpoint_lead_minutes), scale_down_at(end)):
                timers.at(t)
    except ValueError as err:  # the settings are validated at plan time; a bad one is reported, never a crash
        return [
            Action(
                name,
                ACTION_HOLD,
                Reason.HOLD_MISSING_DATA,
                group=gname,
                detail=f"Capacity Block window unreadable ({err}): the block's group is left alone",
            )
        ]
    return _group_actions(ps, po, now, where, start, end) + _quota_actions(ps, po, where)


def _group_actions(
    ps: PoolSettings, po: PoolObservation | None, now: datetime, where: str, start: datetime, end: datetime
) -> list[Action]:
    name, gname = ps.name, ps.guaranteed_group
    if where == PHASE_HELD:
        return [
            _hold(
                ps,
                Reason.CAPACITY_BLOCK_HELD,
                "capacity_block_active: false holds the block's group (a roll at desired 0): left alone",
            )
        ]
    if where == PHASE_UNCONFIRMED:
        return [
            Action(
                name,
                ACTION_HOLD,
                Reason.HOLD_MISSING_DATA,
                group=gname,
                detail=f"the configured window ends at {_iso(end)}, but EC2's dates for the block could not "
                "be read: no drain or scale-down on config alone (an extension or a typo would take "
                "a paid block away early); EKS still scales the group down 40 minutes before the "
                "real end",
            )
        ]
    dates = po.block_dates if po is not None else None
    if where == PHASE_BEFORE:
        state = f" (EC2: {dates.state})" if dates is not None and dates.state in WAITING_STATES else ""
        return [
            _hold(
                ps,
                Reason.CAPACITY_BLOCK_WAITING,
                f"the block starts at {_iso(start)}{state}: a launch before then fails",
            )
        ]
    group = po.group(gname) if po is not None else None
    if group is None:
        return [
            Action(
                name,
                ACTION_HOLD,
                Reason.HOLD_MISSING_DATA,
                group=gname,
                detail=f"Capacity Block group {gname} could not be read",
            )
        ]
    if group.status != "ACTIVE":
        return [Action(name, ACTION_HOLD, Reason.UPDATE_IN_PROGRESS, group=gname, detail=f"{gname} is {group.status}")]
    down = scale_down_at(end)
    if where == PHASE_UP:
        if group.desired_nodes < ps.guaranteed_nodes:
            return [
                Action(
                    name,
                    ACTION_SET_DESIRED,
                    Reason.CAPACITY_BLOCK_START,
                    group=gname,
                    desired_from=group.desired_nodes,
                    desired_to=ps.guaranteed_nodes,
                    detail=f"the block is active (from {_iso(start)}) and paid: raise its group "
                    f"to {ps.guaranteed_nodes} node(s)",
                )
            ]
        return []
    if where == PHASE_DRAIN:
        nodes = sorted(
            (
                n
                for n in (po.nodes if po is not None else ())
                if n.group == gname and n.lifecycle == LIFECYCLE_IN_SERVICE
            ),
            key=lambda n: n.instance_id,
        )
        if not nodes:
            return [
                _hold(ps, Reason.CAPACITY_BLOCK_DRAIN, f"no node of the block left to drain before {down.isoformat()}")
            ]
        return [
            Action(
                name,
                ACTION_CHECKPOINT,
                Reason.CAPACITY_BLOCK_DRAIN,
                group=gname,
                instance_id=n.instance_id,
                detail=f"EKS scales the block's group to 0 at {down.isoformat()}: cordon the node and ask its "
                f"GPU pods to checkpoint by then ({CHECKPOINT_BY_ANNOTATION})",
            )
            for n in nodes
        ]
    if group.desired_nodes > 0:  # PHASE_DOWN
        over = f" (EC2: {dates.state})" if dates is not None and dates.state in ENDED_STATES else ""
        return [
            Action(
                name,
                ACTION_SET_DESIRED,
                Reason.CAPACITY_BLOCK_END,
                group=gname,
                desired_from=group.desired_nodes,
                desired_to=0,
                detail=f"the block ends at {_iso(end)}{over}; from {down.isoformat()} its group is at 0 "
                "(EKS's own scale-down; EC2 shuts instances down 30 minutes before the end)",
            )
        ]
    return []


_QUOTA_REASON = {
    PHASE_BEFORE: Reason.CAPACITY_BLOCK_WAITING,
    PHASE_DRAIN: Reason.CAPACITY_BLOCK_DRAIN,
    PHASE_DOWN: Reason.CAPACITY_BLOCK_END,
    PHASE_HELD: Reason.CAPACITY_BLOCK_HELD,
}


def quota_wanted(ps: PoolSettings, where: str) -> int:
    """The floor flavor's Kueue quota the window wants: the block's GPUs while it is up, else 0 (Kueue then
    admits the pool's work to its elastic flavors; admitted workloads stay admitted)."""
    return ps.capacity_block_quota_gpus if where == PHASE_UP else 0


def _quota_actions(ps: PoolSettings, po: PoolObservation | None, where: str) -> list[Action]:
    """With Kueue: the floor flavor's nominalQuota in the pool's ClusterQueue follows the window, so Kueue
    admits work to the block once it is up and stops at the drain. Unread quota: nothing (the tick reported it)."""
    if not ps.capacity_block_queue or po is None or po.floor_quota_gpus is None or where == PHASE_UNCONFIRMED:
        return []
    want = quota_wanted(ps, where)
    if po.floor_quota_gpus == want:
        return []
    return [
        Action(
            ps.name,
            ACTION_SET_QUOTA,
            _QUOTA_REASON.get(where, Reason.CAPACITY_BLOCK_START),
            desired_from=po.floor_quota_gpus,
            desired_to=want,
            detail=f"Kueue ClusterQueue {ps.capacity_block_queue}, flavor {ps.capacity_block_flavor}: "
            f"nominalQuota {po.floor_quota_gpus} -> {want} GPU(s) "
            f"({'the block is up' if want else 'the block is not up or is draining'})",
        )
    ]


def with_block_actions(
    ps: PoolSettings, po: PoolObservation | None, decision: PoolDecision, now: datetime, timers: Timers | None = None
) -> PoolDecision:
    """The engine's hook: the decision with the block's actions added (the same decision for any other pool)."""
    extra = block_actions(ps, po, now, timers)
    if not extra:
        return decision
    kept = tuple(a for a in decision.actions if not (a.kind == ACTION_HOLD and a.reason == Reason.STEADY))
    return dataclasses.replace(decision, actions=kept + tuple(extra))


def may_touch(ps: PoolSettings, action: Action, now: datetime, dates: BlockDates | None = None) -> bool:
    """Defence in depth for the tick (behind IAM and RBAC): an action on a group that is not elastic, or on the
    pool's Kueue floor quota, is carried out only when it is the pool's Capacity Block and the window (on EC2's
    dates when `dates` has them) allows exactly that action now."""
    if not is_block(ps):
        return False
    try:
        where = phase(ps, now, dates)
    except ValueError:
        return False
    if where == PHASE_UNCONFIRMED:
        return False  # nothing is taken away from a block whose dates could not be read
    if action.kind == ACTION_SET_QUOTA:
        return bool(ps.capacity_block_queue) and action.desired_to == quota_wanted(ps, where)
    if action.group != ps.guaranteed_group:
        return False
    if action.kind == ACTION_SET_DESIRED:
        if where == PHASE_UP:
            return action.desired_to == ps.guaranteed_nodes
        return where == PHASE_DOWN and action.desired_to == 0
    return action.kind == ACTION_CHECKPOINT and where == PHASE_DRAIN
