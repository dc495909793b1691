"""One pool's tick: rule 1 (a configured elastic group that could not be read holds the pool), the one pass over
its nodes, the spot shortfall, then the rules in their order: budget drain, or pods kept off spot, scale-up and
idle reclaim (the warm-up inside the last two). A pool of several node sizes is decided one size at a time."""

from __future__ import annotations

from datetime import datetime, timedelta

from policy import back_to_spot
from policy import gangs as gang_rules
from policy import off_spot, sizes
from policy.decide.budget import Scope
from policy.decide.common import group_usd_per_hour, hold, pack_pods
from policy.decide.drain import drain
from policy.decide.on_demand_only import scale_on_demand_only
from policy.decide.reclaim import reclaim
from policy.decide.scale import merge_set_desired, scale_up
from policy.model import (
    ACTION_SET_DESIRED,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_LEAVING,
    Action,
    Group,
    Node,
    PoolDecision,
    PoolObservation,
    PoolSettings,
    Timers,
)
from policy.terms import Reason


def decide_sizes(
    ps: PoolSettings, po: PoolObservation, scopes: list[Scope], now: datetime, hours: float, timers: Timers
) -> PoolDecision:
    """A pool of several node sizes: each size decided as a pool of its own groups and the pending pods given to
    it (policy/sizes.py), the sizes sharing the budget scopes."""
    for gname in ps.elastic_groups:
        if po.group(gname) is None:  # rule 1 holds the whole pool, every size
            return PoolDecision(
                ps.name,
                (hold(ps.name, Reason.HOLD_MISSING_DATA, f"node group {gname} could not be read", group=gname),),
            )
    parts = sizes.split(ps, po)
    return sizes.merge(
        ps,
        po,
        [decide_pool(sp, spo, scopes, now, hours, timers) for sp, spo in parts],
        ps.guaranteed_usd_per_hour,
        hours,
    )


def elastic_rate(ps: PoolSettings, po: PoolObservation) -> float:
    rate = 0.0
    for name in ps.elastic_groups:
        g = po.group(name)
        if g is not None:
            rate += group_usd_per_hour(ps, name, g.desired_nodes, po.nodes)
    return rate


def decide_pool(
    ps: PoolSettings, po: PoolObservation | None, scopes: list[Scope], now: datetime, hours: float, timers: Timers
) -> PoolDecision:
    name = ps.name
    if po is None:
        return PoolDecision(name, (hold(name, Reason.HOLD_MISSING_DATA, "no observation for this pool"),))
    groups: dict[str, Group] = {}
    for gname in ps.elastic_groups:
        g = po.group(gname)
        if g is None:
            return PoolDecision(
                name, (hold(name, Reason.HOLD_MISSING_DATA, f"node group {gname} could not be read", group=gname),)
            )
        groups[gname] = g

    # One pass over the nodes: counts per group, utilization per tier, idle candidates.
    in_service = dict.fromkeys(groups, 0)
    launching = dict.fromkeys(groups, 0)
    util_sum = {"guaranteed": 0.0, "elastic": 0.0}
    util_n = {"guaranteed": 0, "elastic": 0}
    elastic_nodes: list[Node] = []
    launching_nodes: list[Node] = []
    for node in po.nodes:
        elastic = node.group in groups
        if node.lifecycle == LIFECYCLE_IN_SERVICE:
            if elastic:
                in_service[node.group] += 1
                elastic_nodes.append(node)
            if node.avg_utilization_pct is not None:
                tier = "elastic" if elastic else "guaranteed"
                util_sum[tier] += node.avg_utilization_pct
                util_n[tier] += 1
        elif elastic and node.launching:
            launching[node.group] += 1
            launching_nodes.append(node)
    utilization = {t: util_sum[t] / util_n[t] for t in util_sum if util_n[t]}

    spot = groups.get(ps.spot_group) if ps.spot_group else None
    od = groups.get(ps.on_demand_group) if ps.on_demand_group else None
    spot_short = False
    # Short = desired instances that do not exist at all; a spot instance that is booting was granted. One under
    # EC2's interruption notice (leaving) is no capacity, but EC2 reclaiming it says nothing about whether spot
    # can be bought now: its slot is not a shortfall on the clock (the group's replacement for it is spot, as
    # before the notice), only with a failed launch, which says the replacement will fail too (docs/policy.md,
    # "Spot fallback").
    if spot is not None and spot.desired_nodes > in_service[spot.name] + launching[spot.name]:
        leaving_spot = sum(1 for n in po.nodes if n.group == spot.name and n.lifecycle == LIFECYCLE_LEAVING)
        fallback_at = (
            None if spot.last_change_at is None else spot.last_change_at + timedelta(minutes=ps.fallback_after_minutes)
        )
        waited = fallback_at is not None and now >= fallback_at
        timers.at(fallback_at)  # the wait runs out: spot counts as short from then on
        unmet_beyond_leaving = spot.desired_nodes > in_service[spot.name] + launching[spot.name] + leaving_spot
        spot_short = spot.capacity_shortage or (waited and unmet_beyond_leaving)
    # Pending pods that may not run on spot (policy/off_spot.py) go to the on-demand group directly; the rules below
    # see the rest (`view`) as the pool's pending pods.
    off, off_problem = off_spot.split(po, spot)
    view = off.rest if off is not None else po
    # Pending gangs (policy/gangs.py): launched whole, their wait bounded, their idle nodes released past it.
    gangs = gang_rules.view(ps, view, groups, elastic_nodes, in_service, launching, spot, od, spot_short, now, timers)
    if gangs is not None:
        spot_short = gangs.spot_short
    fallback_active = spot is not None and od is not None and od.desired_nodes > 0

    desired = {g: groups[g].desired_nodes for g in groups}
    pending_gpus = sum(p for p in po.pending_pod_gpus if p > 0) if po.pending_pod_gpus is not None else None
    # Reported figure: last actual + estimate since, or the running estimate alone when no actual was ever read.
    mtd = None
    if po.spend is not None:
        mtd = po.spend.month_to_date_usd
        if mtd is None:
            mtd = po.spend.estimated_since_usd

    actions: list[Action] = []
    exhausted = next((s for s in scopes if s.exhausted), None)
    closed = back_to_spot.closed_to_new_pods(
        ps, spot, od, po.nodes, spot_short, exhausted is not None, on_demand_only_pending=off is not None
    )
    if exhausted is not None:
        actions = drain(ps, groups, in_service, elastic_nodes, launching_nodes, exhausted, desired, now, timers)
    else:
        actions, taken = scale_on_demand_only(ps, off, od, in_service, scopes, desired, timers) if off else ([], 0)
        actions = merge_set_desired(
            actions
            + scale_up(
                ps,
                view,
                groups,
                in_service,
                elastic_nodes,
                spot,
                od,
                spot_short,
                utilization,
                scopes,
                now,
                desired,
                timers,
                gangs,
                closed_group=od.name if closed and od is not None else None,
                on_demand_taken=taken,
            )
        )
        # One kind of change per group per tick: a group that was resized now is not also reclaimed from.
        resized = {a.group for a in actions if a.kind == ACTION_SET_DESIRED and a.group is not None}
        keep_on_demand = (
            pack_pods([p for p in off.pod_gpus if p <= ps.gpus_per_node], ps.gpus_per_node)[0]
            if off is not None and od is not None
            else 0
        )
        actions += reclaim(
            ps,
            view,
            groups,
            elastic_nodes,
            now,
            desired,
            resized,
            timers,
            gangs,
            frozenset(closed or ()),
            keep_on_demand,
        )
        if off_problem:
            actions.append(hold(name, Reason.HOLD_MISSING_DATA, off_problem))
        if gangs is not None:
            actions += [hold(name, Reason.GANG_RELEASED, why) for why in gangs.released]
            actions += [hold(name, Reason.HOLD_MISSING_DATA, why) for why in gangs.problems]
        if closed and spot is not None and od is not None:  # (closed only with both: back_to_spot)
            actions.append(hold(name, Reason.SPOT_RECOVERED, back_to_spot.why(spot, closed), group=od.name))
        elif spot is not None and od is not None and od.desired_nodes > 0 and not spot_short and off is None:
            # (while pods that may not run on spot wait, the on-demand nodes are theirs, not a fallback to leave)
            actions.append(
                hold(
                    name,
                    Reason.SPOT_RECOVERED,
                    f"spot {spot.name} is filled; new demand goes to "
                    f"spot and on-demand nodes are reclaimed first when idle",
                    group=od.name,
                )
            )
    if not actions:
        actions.append(hold(name, Reason.STEADY, "nothing to do"))

    elastic_rate = sum(group_usd_per_hour(ps, g, desired[g], po.nodes) for g in desired)
    projected = None
    if mtd is not None:
        projected = mtd + (elastic_rate + ps.guaranteed_usd_per_hour) * hours
    return PoolDecision(
        name,
        tuple(actions),
        desired_after=desired,
        pending_gpus=pending_gpus,
        elastic_usd_per_hour=elastic_rate,
        month_to_date_usd=mtd,
        projected_month_usd=projected,
        fallback_active=fallback_active or (spot_short and od is not None and desired.get(od.name, 0) > 0),
        utilization_pct=utilization,
        closed_to_new_pods=closed,
    )
