"""Gangs: pending pods that start only together (a multi-node job), launched whole and never waited on forever.

A job that needs k nodes is useless until all k run. Its pods arrive pending together (Kueue admits a workload
all or nothing); a gang scheduler (coscheduling, Kueue pod groups, Volcano, the Kubernetes PodGroup API) binds
none of them until all fit, so the nodes that did arrive sit ready, paid and empty. Three rules, each a small
change to the engine's plan (policy/decide/pool.py calls `view` once per pool and tick):

1. **Launched whole.** A gang's missing nodes are one unit: `max_step_nodes` never spreads them over ticks (the
   step is raised to the largest gang's missing nodes), and a cut by the group maximum or the budget drops a
   whole gang rather than buying part of one (`whole`). Idle nodes the gang will take count towards it: it
   needs its k nodes less the empty nodes it already has, not k more.
2. **Bounded wait.** A gang pending for `gang_wait_minutes` (from its oldest pending pod's creation) while spot
   has not delivered its desired size makes spot short at once (its shortfall stops counting as capacity), so
   the missing nodes are asked of the on-demand fallback (`SPOT_FALLBACK`), whatever fallback_after_minutes says.
3. **Released, not held.** A gang past the bound that the group new nodes would go to cannot complete (spot
   short and no on-demand group, or not room for all its missing nodes in that group) is released
   (`GANG_RELEASED`): its idle nodes are no longer kept for it (the idle reclaim takes them, by the usual
   every-signal-idle rule) and nothing is added for it. It is retried whole once the group has room for all its
   missing nodes and spot is not short: the decision is a function of this tick's observation, so a released
   gang stays released while capacity looks as it did (releasing its nodes only makes it further from
   complete), and there is no flapping between buying and releasing.

Safety: nothing here terminates a node or touches the floor; it only changes which idle nodes the reclaim keeps
and how many nodes the scale-up asks for. A node with a GPU pod is never counted as a gang's idle node. Gang data
that does not add up (pods that are not among the pending ones) is reported and ignored: the plan is then
exactly the one without gangs. An unknown wait (no creation time) never releases anything.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from policy.decide.bound import group_max  # a cycle: decide/ reads this module at call time only
from policy.model import Group, Node, PendingGang, PoolObservation, PoolSettings, Timers
from policy.packing import first_fit_runs


def _nodes(pod_gpus, gpus_per_node: int) -> int:
    counts = Counter(p for p in pod_gpus if 0 < p <= gpus_per_node)
    return first_fit_runs(counts, gpus_per_node, [])


def empty_node(node: Node) -> bool:
    """No GPU pod on it: from this tick's pod list when known, else from the reserved-capacity metric."""
    if node.gpu_pods is not None:
        return node.gpu_pods == 0
    return node.max_reserved_pct == 0


def due_at(ps: PoolSettings, gang: PendingGang) -> datetime | None:
    """When the gang's wait reaches gang_wait_minutes; None for an unknown wait (it never releases anything)."""
    since = gang.waiting_since
    if since is None or since.tzinfo is None:
        return None
    return since + timedelta(minutes=ps.gang_wait_minutes)


def overdue(ps: PoolSettings, gang: PendingGang, now: datetime) -> bool:
    due = due_at(ps, gang)
    return due is not None and now >= due


@dataclass
class GangView:
    """What the pool's gangs change in this tick's plan (see the module doc)."""

    spot_short: bool  # the engine's spot_short, raised by a gang past its bound while spot's desired is unmet
    needed_nodes: int  # new nodes the pending pods need (scale-up), idle nodes gangs will take deducted
    unfittable: int  # pending pods larger than a node
    kept_for_pending: int  # idle nodes the reclaim keeps for pending pods (released gangs get none)
    largest_missing: int  # the most nodes one gang still lacks: the scale-up step never splits it
    missing: list[int] = field(default_factory=list)  # per gang not released, nodes it still lacks, oldest first
    released: list[str] = field(default_factory=list)  # one detail per released gang
    problems: list[str] = field(default_factory=list)  # gang data that did not add up (reported, then ignored)

    def whole(self, add: int, want: int) -> int:
        """The most of `add` new nodes (cut from `want` by the step, the group max or the budget) that buys no
        part of a gang: whole gangs, oldest first (one that does not fit is skipped), then single pods."""
        if add >= want:
            return add
        singles = max(0, want - sum(self.missing))
        total = 0
        for m in self.missing:
            if m and total + m <= add:
                total += m
        return total + min(singles, add - total)


def view(
    ps: PoolSettings,
    po: PoolObservation,
    groups: dict[str, Group],
    elastic_nodes: list[Node],
    in_service: dict[str, int],
    launching: dict[str, int],
    spot: Group | None,
    od: Group | None,
    spot_short: bool,
    now: datetime,
    timers: Timers | None = None,
) -> GangView | None:
    """The gangs' view of this tick, or None when the pool has no pending gang (the plan is then unchanged).
    `timers`: each gang's wait running out (rule 2) changes the view."""
    gangs = po.pending_gangs
    pending = po.pending_pod_gpus
    if not gangs or pending is None:
        return None
    if timers is not None:
        for g in gangs:
            timers.at(due_at(ps, g))
    gpn = ps.gpus_per_node
    singles = Counter(pending)
    for g in gangs:
        singles.subtract(g.pod_gpus)
    if any(n < 0 for n in singles.values()) or any(not g.pod_gpus for g in gangs):
        problem = (
            "gang pods that are not among the pending pods: gangs ignored this tick, every pending pod "
            "counted on its own"
        )
        return GangView(spot_short, *_plain(pending, gpn), largest_missing=0, problems=[problem])

    spot_unmet = spot is not None and spot.desired_nodes > in_service[spot.name] + launching[spot.name]
    order = sorted(gangs, key=lambda g: (g.waiting_since is None, g.waiting_since or now, g.name))
    late = [overdue(ps, g, now) for g in order]
    short = spot_short or (spot_unmet and any(late))

    idle_left = sum(1 for n in elastic_nodes if empty_node(n))
    coming_left = 0
    for gname, group in groups.items():
        if group is spot and short:
            coming_left += launching[gname]  # booting instances were granted; the shortfall is not on its way
            continue
        coming_left += max(0, group.desired_nodes - in_service[gname])
    target = spot if (spot is not None and not short) else od
    room_left = 0
    if target is not None:
        room_left = max(0, group_max(ps, target.name, target) - target.desired_nodes)

    needed = kept = 0
    missing: list[int] = []
    released: list[str] = []
    for g, is_late in zip(order, late):
        k = _nodes(g.pod_gpus, gpn)
        has = min(k, idle_left)
        on_way = min(k - has, coming_left)
        lacks = k - has - on_way
        if is_late and lacks > 0 and lacks > room_left:
            # Past the bound and the group new nodes go to cannot add them all: stop holding the part that came.
            where = (
                f"{target.name} has room for {room_left}"
                if target is not None
                else f"spot {spot.name} short and no on-demand fallback"
                if spot is not None
                else "no elastic group"
            )
            released.append(
                f"gang {g.name}: {has} of {k} node(s) up after {ps.gang_wait_minutes} min, {lacks} "
                f"missing, {where}: its idle nodes are released; retried whole once capacity is there"
            )
            continue
        idle_left -= has
        coming_left -= on_way
        room_left -= max(0, lacks)
        needed += k - has
        kept += has
        missing.append(lacks)
    single_needed, unfittable, single_kept = _plain(list(singles.elements()), gpn)
    unfittable += sum(1 for g in gangs for p in g.pod_gpus if p > gpn)
    kept += single_kept
    return GangView(short, needed + single_needed, unfittable, kept, max(missing, default=0), missing, released)


def _plain(pending, gpn: int) -> tuple[int, int, int]:
    """(needed, unfittable, kept for pending) as the engine counts them without gangs."""
    counts = Counter(pending)
    needed = first_fit_runs(counts, gpn, [])
    unfittable = sum(n for need, n in counts.items() if need > gpn and n > 0)
    return needed, unfittable, _nodes(pending, gpn)
