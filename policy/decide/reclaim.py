"""Idle reclaim (rule 4, RECLAIM_IDLE): idle in-service elastic nodes of the groups not resized this tick are
terminated by instance id, on-demand first, except those kept for pending pods that would fill them, those that
pay for themselves at the recent arrival rate (KEEP_WARM) and the warm-up's spares (WARM_UP)."""

from __future__ import annotations

from datetime import datetime

from policy import gangs as gang_rules
from policy.decide.common import hold, pack_pods, step_limit
from policy.decide.idle import idle_verdict
from policy.decide.keep_warm import keep_warm_nodes, never_got_a_pod, rate_why
from policy.decide.warm_up import rhythm_why, warm_up_nodes
from policy.model import ACTION_TERMINATE, Action, Group, Node, PoolObservation, PoolSettings, Timers
from policy.terms import Reason


def reclaim(
    ps: PoolSettings,
    po: PoolObservation,
    groups: dict[str, Group],
    nodes: list[Node],
    now: datetime,
    desired: dict[str, int],
    resized: set[str],
    timers: Timers,
    gangs: gang_rules.GangView | None = None,
    closed: frozenset[str] = frozenset(),
    keep_on_demand: int = 0,
) -> list[Action]:
    """`po`'s pending pods (those that may run on spot, when policy/off_spot.py split them) may keep idle nodes of
    any group; `keep_on_demand` more may be kept for the others, on-demand nodes only."""
    name = ps.name
    idle: list[Node] = []
    why: dict[str, str] = {}
    unknown = 0
    for node in nodes:
        verdict, reason = idle_verdict(ps, node, now, timers)
        if verdict is None:
            unknown += 1
        elif verdict:
            idle.append(node)
            why[node.instance_id] = reason
    actions: list[Action] = []
    if unknown:
        actions.append(
            hold(
                name,
                Reason.HOLD_MISSING_DATA,
                f"{unknown} elastic node(s) without GPU utilization or reserved-capacity data count as busy",
            )
        )
    if not idle:
        return actions
    if po.pending_pod_gpus is None:
        actions.append(
            hold(
                name,
                Reason.HOLD_MISSING_DATA,
                f"{len(idle)} idle node(s) kept: pending pods unknown (Kubernetes API unreachable)",
            )
        )
        return actions
    # The nodes that go first come first: on-demand before spot, then the idlest, the oldest.
    idle.sort(key=lambda n: (n.group != ps.on_demand_group, n.max_utilization_pct or 0.0, n.launched_at, n.instance_id))
    # Pending pods that fit a node may land on an idle one (a gang waiting for the rest of its nodes, the
    # scheduler not yet through): keep as many idle nodes as they would fill, no more.
    for_pending = (
        pack_pods([p for p in po.pending_pod_gpus if 0 < p <= ps.gpus_per_node], ps.gpus_per_node)[0]
        if gangs is None
        else gangs.kept_for_pending
    )  # a gang released past its wait keeps none
    warm = keep_warm_nodes(ps, po.arrivals, now, timers)
    # A node that never got a pod is not kept warm: the demand it was launched for went elsewhere (Karpenter
    # counts such a node empty from the moment it is ready).
    used = [n for n in idle if not never_got_a_pod(ps, n, now, timers if warm else None)]
    kept = {n.instance_id for n in used[len(used) - min(len(used), warm) :]}
    # Warm-up (opt-in) keeps spare nodes for the arrivals this time of day usually brings, used or not: a node
    # launched ahead of them has had no pod yet by design.
    rhythm = warm_up_nodes(ps, po)
    by_rhythm = 0
    for n in reversed(idle):
        if len(kept) >= min(len(idle), rhythm):
            break
        if n.instance_id not in kept:
            kept.add(n.instance_id)
            by_rhythm += 1
    for n in reversed(idle):
        if len(kept) >= min(len(idle), for_pending):
            break
        kept.add(n.instance_id)
    # Pods that may not run on spot may land on an idle on-demand node only: never a spot node kept for them.
    on_demand_kept = sum(1 for n in idle if n.group == ps.on_demand_group and n.instance_id in kept)
    for n in reversed(idle):
        if on_demand_kept >= keep_on_demand:
            break
        if n.group == ps.on_demand_group and n.instance_id not in kept:
            kept.add(n.instance_id)
            on_demand_kept += 1
    for_pending += keep_on_demand
    # A node closed to new pods (back to spot) is kept for nothing: no pod can land on it.
    kept -= closed
    if kept:
        if by_rhythm and rhythm > max(warm, for_pending):
            actions.append(hold(name, Reason.WARM_UP, f"{len(kept)} idle node(s) kept: {rhythm_why(ps, po)}"))
        elif for_pending >= warm or for_pending >= len(kept):
            actions.append(
                hold(name, Reason.STEADY, f"{len(kept)} idle node(s) kept: pods are pending and may land on them")
            )
        else:
            actions.append(
                hold(name, Reason.KEEP_WARM, f"{len(kept)} idle node(s) kept: {rate_why(ps, po.arrivals, now)}")
            )
        idle = [n for n in idle if n.instance_id not in kept]
    taken = 0
    reported: set[str] = set()
    for node in idle:
        if taken >= step_limit(ps):
            break
        g = groups[node.group]
        if g.name in resized:
            continue
        if g.status != "ACTIVE":
            if g.name not in reported:
                reported.add(g.name)
                actions.append(
                    hold(name, Reason.UPDATE_IN_PROGRESS, f"idle node(s) kept: {g.name} is {g.status}", group=g.name)
                )
            continue
        if desired[g.name] - 1 < g.min_nodes:
            continue
        desired[g.name] -= 1
        taken += 1
        actions.append(
            Action(
                name,
                ACTION_TERMINATE,
                Reason.RECLAIM_IDLE,
                group=g.name,
                instance_id=node.instance_id,
                desired_from=desired[g.name] + 1,
                desired_to=desired[g.name],
                detail=why[node.instance_id],
            )
        )
    return actions
