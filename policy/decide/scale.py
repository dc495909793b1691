"""Scale-up (rule 3): the pending pods that may run on spot packed onto new nodes (SCALE_UP_PENDING), a service
pool's sustained utilization (SCALE_UP_UTILIZATION), the warm-up's spares; to spot, or on-demand while spot is
short (SPOT_FALLBACK); bounded by the group max, the step and the budget cap."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from policy import gangs as gang_rules
from policy.decide.budget import Scope
from policy.decide.bound import bound
from policy.decide.common import hold, pack_pods
from policy.decide.warm_up import rhythm_why, warm_up_launches
from policy.model import (
    ACTION_SET_DESIRED,
    LIFECYCLE_IN_SERVICE,
    Action,
    Group,
    Node,
    PoolObservation,
    PoolSettings,
    Timers,
)
from policy.terms import Reason, Workload


def scale_up(
    ps: PoolSettings,
    po: PoolObservation,
    groups: dict[str, Group],
    in_service: dict[str, int],
    elastic_nodes: list[Node],
    spot: Group | None,
    od: Group | None,
    spot_short: bool,
    utilization: dict[str, float],
    scopes: list[Scope],
    now: datetime,
    desired: dict[str, int],
    timers: Timers,
    gangs: gang_rules.GangView | None = None,
    closed_group: str | None = None,
    on_demand_taken: int = 0,
) -> list[Action]:
    """Scale-up for the pending pods of `po` (those that may run on spot, when policy/off_spot.py split them:
    `on_demand_taken` on-demand nodes on their way are the others', and the nodes added for the others this tick
    count against max_step_nodes)."""
    name = ps.name
    actions: list[Action] = []
    # Capacity that is up or on its way; a spot shortfall past the fallback delay is no longer "on its way", nor is
    # a fallback node closed to new pods (policy/back_to_spot.py): pending pods cannot land on it.
    capacity = 0
    up = 0
    for gname, g in groups.items():
        up += in_service[gname]
        short = (g is spot and spot_short) or gname == closed_group
        capacity += in_service[gname] if short else max(g.desired_nodes, in_service[gname])
    coming = capacity - up - on_demand_taken

    add_pending = needed = 0
    if po.pending_pod_gpus:
        needed, unfittable = (
            pack_pods(po.pending_pod_gpus, ps.gpus_per_node)
            if gangs is None
            else (gangs.needed_nodes, gangs.unfittable)
        )
        add_pending = max(0, needed - coming)
        if unfittable:
            actions.append(
                hold(
                    name,
                    Reason.HOLD_MISSING_DATA,
                    f"{unfittable} pending pod(s) ask for more than "
                    f"{ps.gpus_per_node} GPUs per node and can never fit this pool",
                )
            )
    add_util = 0
    # Utilization adds a node only for a service pool: in a batch pool a node added with nothing pending mostly
    # waits for the next job (docs/policy.md, rule 3).
    mean = _mean_utilization(po) if ps.workload == Workload.service else None
    if mean is not None and mean >= ps.scale_up_utilization_pct and coming == 0:
        cooling = _cooling(groups.values(), now, ps.cooldown_minutes, timers)
        if cooling is not None:
            actions.append(
                hold(
                    name,
                    Reason.COOLDOWN,
                    f"utilization {mean:.0f}% but {cooling} changed less than {ps.cooldown_minutes} min ago",
                    group=cooling,
                )
            )
        else:
            add_util = 1
    add_warm = warm_up_launches(ps, po, elastic_nodes, coming, needed)
    want = max(add_pending, add_util) + add_warm
    if want == 0:
        return actions
    if add_pending or add_util:
        reason = Reason.SCALE_UP_PENDING if add_pending >= add_util else Reason.SCALE_UP_UTILIZATION
        why = (
            f"{sum(po.pending_pod_gpus or ())} pending GPU(s) need {add_pending} more node(s)"
            if reason is Reason.SCALE_UP_PENDING
            else f"mean GPU utilization {mean:.0f}% >= {ps.scale_up_utilization_pct:.0f}%"
        )
        if add_warm:
            why += f"; {add_warm} more ahead of the daily rhythm ({rhythm_why(ps, po)})"
    else:
        reason, why = Reason.WARM_UP, f"{add_warm} spare node(s) ahead of the daily rhythm ({rhythm_why(ps, po)})"

    target = spot if (spot is not None and not spot_short) else od
    if target is None:  # spot-only pool and spot is short: nothing else to ask for
        short_name = spot.name if spot is not None else "(none)"
        actions.append(
            hold(
                name,
                reason,
                f"{why}, but spot {short_name} is short of capacity and the pool has no on-demand fallback",
                group=spot.name if spot is not None else None,
            )
        )
        return actions
    if target is od and spot is not None:
        why = f"{why}; spot {spot.name} short ({in_service[spot.name]}/{spot.desired_nodes} up)"
        reason = Reason.SPOT_FALLBACK
    if target.status != "ACTIVE":
        actions.append(
            hold(name, Reason.UPDATE_IN_PROGRESS, f"{why}, but {target.name} is {target.status}", group=target.name)
        )
        return actions
    base = desired[target.name]  # above the group's desired when nodes for pods kept off spot were added this tick
    # A gang's nodes come in one step: the step limit never splits one, a cut by the max drops whole gangs.
    add, limits = bound(
        ps,
        target,
        base,
        want,
        sum(desired[g] - groups[g].desired_nodes for g in groups),
        scopes,
        timers,
        why,
        gangs.whole if gangs is not None else None,
        gangs.largest_missing if gangs is not None else 0,
    )
    actions += limits
    if add <= 0:
        return actions
    desired[target.name] = base + add
    actions.insert(
        0,
        Action(
            name, ACTION_SET_DESIRED, reason, group=target.name, desired_from=base, desired_to=base + add, detail=why
        ),
    )
    return actions


def merge_set_desired(actions: list[Action]) -> list[Action]:
    """One set_desired per group and tick: the on-demand nodes for pods kept off spot and a spot fallback's go to the
    same group in one change (from the first's size to the last's), both details; SPOT_FALLBACK, the event the
    notifications report, wins the reason."""
    out: list[Action] = []
    first: dict[str, int] = {}
    for a in actions:
        if a.kind != ACTION_SET_DESIRED:
            out.append(a)
            continue
        key = a.group or ""  # every set_desired names its group (model.Action)
        i = first.get(key)
        if i is None:
            first[key] = len(out)
            out.append(a)
            continue
        prev = out[i]
        reason = a.reason if a.reason is Reason.SPOT_FALLBACK else prev.reason
        out[i] = dataclasses.replace(prev, reason=reason, desired_to=a.desired_to, detail=f"{prev.detail}; {a.detail}")
    out.sort(key=lambda a: a.kind != ACTION_SET_DESIRED)  # changes first, holds after, each in its order
    return out


def _mean_utilization(po: PoolObservation) -> float | None:
    """Mean over every in-service node of the pool with data (floor and elastic): the load the pool carries."""
    total = 0.0
    n = 0
    for node in po.nodes:
        if node.lifecycle == LIFECYCLE_IN_SERVICE and node.avg_utilization_pct is not None:
            total += node.avg_utilization_pct
            n += 1
    return total / n if n else None


def _cooling(groups, now: datetime, cooldown_minutes: int, timers: Timers) -> str | None:
    """The first group changed less than cooldown_minutes ago, if any; each cooldown's end is a timer."""
    limit = timedelta(minutes=cooldown_minutes)
    cooling = None
    for g in groups:
        if g.last_change_at is not None and now - g.last_change_at < limit:
            timers.at(g.last_change_at + limit)
            cooling = cooling or g.name
    return cooling
