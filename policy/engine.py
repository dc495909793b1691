"""The decision core: `decide(settings, observation, now) -> Plan`. Pure: no I/O, no clock, no randomness.

The same function runs in the Lambda every tick and in the simulator every simulated minute, so it is kept
cheap (one pass over each pool's nodes, no copies of the observation). The plan says when the rules' own clocks
could change it (`Plan.next_decision_at`): each rule reports its timer to a `Timers` where the rule lives.

Rules per pool, in order (docs/policy.md explains each with its reason code):
1. A configured elastic group that could not be read holds the whole pool (HOLD_MISSING_DATA).
2. Budget drain: with cap_elastic, once month-to-date spend reaches a budget (pool or environment; the running
   estimate alone counts when no actual figure could be read), launches still in flight are cancelled and idle
   in-service elastic nodes are terminated by instance id, max_step_nodes per tick (BUDGET_DRAIN). A node with
   GPU work is never drained: it goes once it is idle.
3. Scale-up: pending pods targeting the pool are packed (first fit, decreasing) onto nodes of gpus_per_node (a
   pool of several node sizes: each size is decided by these rules for the pods policy/sizes.py gives it);
   the nodes they need beyond those already launching are added (SCALE_UP_PENDING). For a `service` pool only,
   sustained mean GPU utilization at or above the threshold adds one node when nothing is launching and no group
   is in cooldown (SCALE_UP_UTILIZATION); a `batch` pool scales to what is pending, exactly. Additions go to
   spot; while spot stays short of its desired size for fallback_after_minutes, or its activities report
   insufficient capacity, they go to on-demand (SPOT_FALLBACK), and the spot shortfall no longer counts as
   capacity. Once spot is back, the on-demand nodes are closed to new pods (back_to_spot, policy/back_to_spot.py:
   PoolDecision.closed_to_new_pods, SPOT_RECOVERED): no room for pending pods, never kept idle. Bounded by group
   max, max_step_nodes when set, and the budget projection (BUDGET_CAP). Pending gangs (pods that start only
   together, policy/gangs.py) are bought whole and in one step, and their wait is bounded by gang_wait_minutes:
   then on-demand, or their idle nodes released (GANG_RELEASED). Pending pods that may not run on spot
   (policy/off_spot.py) are packed onto the on-demand group directly, under the same bounds (ON_DEMAND_ONLY); the
   rules above and below see only the rest as pending, so no spot node is added or kept for them.
4. Idle reclaim (groups not resized this tick): in-service elastic nodes on which EVERY signal says idle (no
   GPU requested by a pod over the empty window, and GPU utilization below the idle threshold over the window
   the node is judged on: the empty window, or the idle window without a figure for it) are terminated by
   instance id, on-demand first (RECLAIM_IDLE), except those kept for pending pods that would fill them and
   those that pay for themselves at the pool's recent arrival rate (KEEP_WARM, `keep_warm_nodes`). A missing
   signal is busy; unknown pending pods hold.
5. Warm-up (opt-in, `warm_up`): spare nodes for the arrivals this time of day brought on earlier days are kept
   and, short of them, launched with the scale-up (WARM_UP, `warm_up_nodes`); the same cost rule as keeping an
   idle node, the same budget cap. Unknown history or node data: no warm-up.

6. Capacity Block floors: the window's rules on the block's own group (policy/capacity_blocks.py).

Safety rules every plan keeps (tests/policy/test_policy_properties.py): the floor is never touched, except a Capacity
Block's group inside its window's rules (policy/capacity_blocks.py); a group gets one
kind of change per tick (set_desired or terminate, never both: UpdateNodegroupConfig is asynchronous, so an
absolute size could land after the terminations and relaunch them); no node with any sign of GPU work is
terminated. The tick adds the last check the engine cannot make: the node's pods, read just before terminating.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone

from policy.model import (
    ACTION_HOLD,
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    CAPACITY_GUARANTEED,
    ENFORCEMENT_CAP,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_LEAVING,
    WORKLOAD_SERVICE,
    Action,
    Group,
    Node,
    Observation,
    Plan,
    PoolDecision,
    PoolObservation,
    PoolSettings,
    Reason,
    Settings,
    Spend,
    Timers,
    JUST_AFTER,
)
from policy.capacity_blocks import with_block_actions
from policy import back_to_spot
from policy import gangs as gang_rules
from policy import sizes
from policy import off_spot
from policy.packing import first_fit_runs

_MIN_HOURS_LEFT = 1.0 / 60  # the last minute of a month must not divide by zero


def next_month_start(now: datetime) -> datetime:
    """The start of the next calendar month (UTC): where the budget projection's horizon starts again."""
    now = now.astimezone(timezone.utc)
    return datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=timezone.utc)


def hours_left_in_month(now: datetime) -> float:
    """Hours from `now` to the start of the next calendar month (UTC), the horizon of the budget projection."""
    return max((next_month_start(now) - now).total_seconds() / 3600.0, _MIN_HOURS_LEFT)


def pack_pods(pod_gpus: Iterable[int] | Mapping[int, int], gpus_per_node: int) -> tuple[int, int]:
    """First fit decreasing onto new nodes (policy/packing.py): (nodes needed, pods that fit no node). Pods asking
    for 0 GPUs are ignored. `pod_gpus` is one GPU request per pod, or a mapping GPUs -> number of pods."""
    counts = pod_gpus if isinstance(pod_gpus, Mapping) else Counter(pod_gpus)
    unfittable = sum(n for need, n in counts.items() if need > gpus_per_node and n > 0)
    return first_fit_runs(counts, gpus_per_node, []), unfittable


class _Scope:
    """A budget scope (one pool, or the environment) while a tick is being decided.

    headroom_usd_per_hour is how much more hourly spend fits: (budget - month-to-date) / hours left, minus
    the hourly rate of everything already running in the scope (floor + elastic). Scale-ups consume it.
    """

    __slots__ = ("budget_usd", "month_to_date_usd", "known", "headroom_usd_per_hour", "capped", "name", "reread_at")

    def __init__(self, name: str, budget_usd: float, spend: Spend | None, rate_usd_per_hour: float, hours: float,
                 enforcement: str, refresh_minutes: int = 60):
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
        self.capped = enforcement == ENFORCEMENT_CAP

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


def decide(settings: Settings, observation: Observation, now: datetime) -> Plan:
    """Decide one tick for every pool of `settings`. Same inputs, same plan."""
    hours = hours_left_in_month(now)
    timers = Timers(now)
    rates = {}
    for ps in settings.pools:
        po = observation.pool(ps.name)
        rates[ps.name] = ps.guaranteed_usd_per_hour + (_elastic_rate(ps, po) if po is not None else 0.0)
    env_scope = None
    if settings.budget_monthly_usd is not None:
        env_scope = _Scope("environment", settings.budget_monthly_usd, observation.environment_spend,
                           sum(rates.values()) + settings.commitment_unused_usd_per_hour, hours,
                           settings.budget_enforcement, settings.budget_refresh_minutes)
    decisions = []
    for ps in settings.pools:
        po = observation.pool(ps.name)
        scopes = []
        if ps.budget_monthly_usd is not None:
            scopes.append(_Scope(f"pool {ps.name}", ps.budget_monthly_usd, po.spend if po else None,
                                 rates[ps.name], hours, ps.budget_enforcement, settings.budget_refresh_minutes))
        if env_scope is not None:
            scopes.append(env_scope)
        # A pool of several node sizes is decided one size at a time (policy/sizes.py). A floor on a Capacity
        # Block also gets its window's actions (policy/capacity_blocks.py).
        decision = (_decide_sizes(ps, po, scopes, now, hours, timers) if ps.other_sizes and po is not None
                    else _decide_pool(ps, po, scopes, now, hours, timers))
        decisions.append(with_block_actions(ps, po, decision, now, timers))
    return Plan(tuple(decisions), dry_run=settings.dry_run, decided_at=now, next_decision_at=timers.earliest)


def _decide_sizes(ps: PoolSettings, po: PoolObservation, scopes: list[_Scope], now: datetime,
                  hours: float, timers: Timers) -> PoolDecision:
    """A pool of several node sizes: each size decided as a pool of its own groups and the pending pods given to
    it (policy/sizes.py), the sizes sharing the budget scopes."""
    for gname in ps.elastic_groups:
        if po.group(gname) is None:  # rule 1 holds the whole pool, every size
            return PoolDecision(ps.name, (_hold(ps.name, Reason.HOLD_MISSING_DATA,
                                                f"node group {gname} could not be read", group=gname),))
    parts = sizes.split(ps, po)
    return sizes.merge(ps, po, [_decide_pool(sp, spo, scopes, now, hours, timers) for sp, spo in parts],
                       ps.guaranteed_usd_per_hour, hours)


def _elastic_rate(ps: PoolSettings, po: PoolObservation) -> float:
    rate = 0.0
    for name in ps.elastic_groups:
        g = po.group(name)
        if g is not None:
            rate += group_usd_per_hour(ps, name, g.desired_nodes, po.nodes)
    return rate


def group_usd_per_hour(ps: PoolSettings, group: str, desired: int, nodes: Iterable[Node]) -> float:
    """Hourly spend of `desired` nodes of `group`: the group's nodes at their own types (the priciest first when
    desired is below their count: a cap must not under-estimate), the nodes still to come at the type the group
    launches (PoolSettings)."""
    if not ps.instance_usd_per_hour:  # one price per group (the simulator): no per-node pass
        return desired * ps.usd_per_hour(group)
    own = sorted((ps.node_usd_per_hour(group, n.instance_type) for n in nodes if n.group == group),
                 reverse=True)[:desired]
    return sum(own) + max(0, desired - len(own)) * ps.usd_per_hour(group)


def _hold(pool: str, reason: Reason, detail: str, group: str | None = None) -> Action:
    return Action(pool, ACTION_HOLD, reason, group=group, detail=detail)


def _decide_pool(ps: PoolSettings, po: PoolObservation | None, scopes: list[_Scope], now: datetime,
                 hours: float, timers: Timers) -> PoolDecision:
    name = ps.name
    if po is None:
        return PoolDecision(name, (_hold(name, Reason.HOLD_MISSING_DATA, "no observation for this pool"),))
    groups: dict[str, Group] = {}
    for gname in ps.elastic_groups:
        g = po.group(gname)
        if g is None:
            return PoolDecision(name, (_hold(name, Reason.HOLD_MISSING_DATA, f"node group {gname} could not be read",
                                             group=gname),))
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
        fallback_at = None if spot.last_change_at is None else spot.last_change_at + timedelta(
            minutes=ps.fallback_after_minutes)
        waited = fallback_at is not None and now >= fallback_at
        timers.at(fallback_at)  # the wait runs out: spot counts as short from then on
        unmet_beyond_leaving = spot.desired_nodes > in_service[spot.name] + launching[spot.name] + leaving_spot
        spot_short = spot.capacity_shortage or (waited and unmet_beyond_leaving)
    # Pending pods that may not run on spot (policy/off_spot.py) go to the on-demand group directly; the rules below
    # see the rest (`view`) as the pool's pending pods.
    off, off_problem = off_spot.split(po, spot)
    view = off.rest if off is not None else po
    # Pending gangs (policy/gangs.py): launched whole, their wait bounded, their idle nodes released past it.
    gangs = gang_rules.view(ps, view, groups, elastic_nodes, in_service, launching, spot, od, spot_short, now,
                            timers)
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
    drain = next((s for s in scopes if s.exhausted), None)
    closed = back_to_spot.closed_to_new_pods(ps, spot, od, po.nodes, spot_short, drain is not None,
                                             on_demand_only_pending=off is not None)
    if drain is not None:
        actions = _drain(ps, groups, in_service, elastic_nodes, launching_nodes, drain, desired, now, timers)
    else:
        actions, taken = _scale_on_demand_only(ps, off, od, in_service, scopes, desired, timers) if off else ([], 0)
        actions = _merge_set_desired(actions + _scale(
            ps, view, groups, in_service, elastic_nodes, spot, od, spot_short, utilization, scopes, now, desired,
            timers, gangs, closed_group=od.name if closed and od is not None else None, on_demand_taken=taken))
        # One kind of change per group per tick: a group that was resized now is not also reclaimed from.
        resized = {a.group for a in actions if a.kind == ACTION_SET_DESIRED and a.group is not None}
        keep_on_demand = pack_pods([p for p in off.pod_gpus if p <= ps.gpus_per_node], ps.gpus_per_node)[0] \
            if off is not None and od is not None else 0
        actions += _reclaim(ps, view, groups, elastic_nodes, now, desired, resized, timers, gangs,
                            frozenset(closed or ()), keep_on_demand)
        if off_problem:
            actions.append(_hold(name, Reason.HOLD_MISSING_DATA, off_problem))
        if gangs is not None:
            actions += [_hold(name, Reason.GANG_RELEASED, why) for why in gangs.released]
            actions += [_hold(name, Reason.HOLD_MISSING_DATA, why) for why in gangs.problems]
        if closed and spot is not None and od is not None:  # (closed only with both: back_to_spot)
            actions.append(_hold(name, Reason.SPOT_RECOVERED, back_to_spot.why(spot, closed), group=od.name))
        elif spot is not None and od is not None and od.desired_nodes > 0 and not spot_short and off is None:
            # (while pods that may not run on spot wait, the on-demand nodes are theirs, not a fallback to leave)
            actions.append(_hold(name, Reason.SPOT_RECOVERED, f"spot {spot.name} is filled; new demand goes to "
                                 f"spot and on-demand nodes are reclaimed first when idle", group=od.name))
    if not actions:
        actions.append(_hold(name, Reason.STEADY, "nothing to do"))

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


def _drain(ps: PoolSettings, groups: dict[str, Group], in_service: dict[str, int], nodes: list[Node],
           launching_nodes: list[Node], scope: _Scope, desired: dict[str, int], now: datetime,
           timers: Timers) -> list[Action]:
    name = ps.name
    why = f"{scope.name} month-to-date ${scope.month_to_date_usd:,.0f} reached its budget ${scope.budget_usd:,.0f}"
    actions: list[Action] = []
    cancelled = False
    cancelled_by_id = 0  # terminations, max_step_nodes per tick as for any other
    for gname, g in groups.items():
        if g.status != "ACTIVE":
            actions.append(_hold(name, Reason.UPDATE_IN_PROGRESS, f"{gname} is {g.status}", group=gname))
            continue
        if g.desired_nodes <= in_service[gname]:
            continue
        # Booting instances are cancelled by id: lowering desired by their number would let the Auto Scaling
        # group pick which instances go, possibly a busy in-service one. Desired drops by itself for those
        # (ShouldDecrementDesiredCapacity); only capacity with no instance yet is cancelled through desired. A
        # booting instance that already shows GPU work is kept, and it is an instance all the same: counted as
        # one, or the cut below would reach below the live instances and the group would choose who dies.
        live_booting = [n for n in launching_nodes if n.group == gname]
        booting = sorted((n for n in live_booting if not _shows_work(ps, n)), key=lambda n: n.instance_id)
        not_launched = max(0, g.desired_nodes - in_service[gname] - len(live_booting))
        if not_launched or booting:
            cancelled = True
        if not_launched:
            # One kind of change per group per tick: the new desired size first; the booting instances go by id
            # next tick (EKS applies UpdateNodegroupConfig later, and an absolute size that lands after the
            # terminations would relaunch them).
            desired[gname] = g.desired_nodes - not_launched
            actions.append(Action(name, ACTION_SET_DESIRED, Reason.BUDGET_DRAIN, group=gname,
                                  desired_from=g.desired_nodes, desired_to=desired[gname],
                                  detail=f"{why}; cancel {not_launched} launch(es) not started"))
            continue
        for n in booting[: max(0, _step(ps) - cancelled_by_id)]:
            cancelled_by_id += 1
            desired[gname] -= 1
            actions.append(Action(name, ACTION_TERMINATE, Reason.BUDGET_DRAIN, group=gname, instance_id=n.instance_id,
                                  desired_from=desired[gname] + 1, desired_to=desired[gname],
                                  detail=f"{why}; cancel a launch in flight"))
    if cancelled:
        return actions
    if not nodes:
        actions.append(_hold(name, Reason.BUDGET_DRAIN, f"{why}; no elastic nodes left to drain"))
        return actions
    idle, working = [], 0
    for n in nodes:
        if groups[n.group].status != "ACTIVE":
            continue
        verdict, _ = _idle_verdict(ps, n, now, timers)
        if verdict:
            idle.append(n)
        else:
            working += 1
    for node in sorted(idle, key=_drain_key(ps))[: _step(ps)]:
        desired[node.group] -= 1
        actions.append(Action(name, ACTION_TERMINATE, Reason.BUDGET_DRAIN, group=node.group,
                              instance_id=node.instance_id, desired_from=desired[node.group] + 1,
                              desired_to=desired[node.group], detail=f"{why}; the node is idle"))
    if working:
        actions.append(_hold(name, Reason.BUDGET_DRAIN, f"{why}; {working} elastic node(s) with GPU work (or without "
                             "the data to tell) are kept and drained once idle: a working GPU is never taken"))
    return actions


def _drain_key(ps: PoolSettings):
    def key(n: Node):
        util = n.max_utilization_pct
        # idle first, nodes without metrics last (they may be busy), on-demand before spot at equal use
        return (util is None, util if util is not None else 0.0, n.group != ps.on_demand_group, n.instance_id)

    return key


def _scale(ps: PoolSettings, po: PoolObservation, groups: dict[str, Group], in_service: dict[str, int],
           elastic_nodes: list[Node], spot: Group | None, od: Group | None, spot_short: bool, utilization: dict[str, float],
           scopes: list[_Scope], now: datetime, desired: dict[str, int], timers: Timers,
           gangs: gang_rules.GangView | None = None, closed_group: str | None = None,
           on_demand_taken: int = 0) -> list[Action]:
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
        needed, unfittable = pack_pods(po.pending_pod_gpus, ps.gpus_per_node) if gangs is None else (
            gangs.needed_nodes, gangs.unfittable)
        add_pending = max(0, needed - coming)
        if unfittable:
            actions.append(_hold(name, Reason.HOLD_MISSING_DATA, f"{unfittable} pending pod(s) ask for more than "
                                 f"{ps.gpus_per_node} GPUs per node and can never fit this pool"))
    add_util = 0
    # Utilization adds a node only for a service pool: in a batch pool a node added with nothing pending mostly
    # waits for the next job (docs/policy.md, rule 3).
    mean = _mean_utilization(po) if ps.workload == WORKLOAD_SERVICE else None
    if mean is not None and mean >= ps.scale_up_utilization_pct and coming == 0:
        cooling = _cooling(groups.values(), now, ps.cooldown_minutes, timers)
        if cooling is not None:
            actions.append(_hold(name, Reason.COOLDOWN, f"utilization {mean:.0f}% but {cooling} changed less than "
                                 f"{ps.cooldown_minutes} min ago", group=cooling))
        else:
            add_util = 1
    add_warm = _warm_up_launches(ps, po, elastic_nodes, coming, needed)
    want = max(add_pending, add_util) + add_warm
    if want == 0:
        return actions
    if add_pending or add_util:
        reason = Reason.SCALE_UP_PENDING if add_pending >= add_util else Reason.SCALE_UP_UTILIZATION
        why = (f"{sum(po.pending_pod_gpus or ())} pending GPU(s) need {add_pending} more node(s)" if reason is
               Reason.SCALE_UP_PENDING else f"mean GPU utilization {mean:.0f}% >= {ps.scale_up_utilization_pct:.0f}%")
        if add_warm:
            why += f"; {add_warm} more ahead of the daily rhythm ({_rhythm_why(ps, po)})"
    else:
        reason, why = Reason.WARM_UP, f"{add_warm} spare node(s) ahead of the daily rhythm ({_rhythm_why(ps, po)})"

    target = spot if (spot is not None and not spot_short) else od
    if target is None:  # spot-only pool and spot is short: nothing else to ask for
        short_name = spot.name if spot is not None else "(none)"
        actions.append(_hold(name, reason, f"{why}, but spot {short_name} is short of capacity and the pool has no "
                             "on-demand fallback", group=spot.name if spot is not None else None))
        return actions
    if target is od and spot is not None:
        why = f"{why}; spot {spot.name} short ({in_service[spot.name]}/{spot.desired_nodes} up)"
        reason = Reason.SPOT_FALLBACK
    if target.status != "ACTIVE":
        actions.append(_hold(name, Reason.UPDATE_IN_PROGRESS, f"{why}, but {target.name} is {target.status}",
                             group=target.name))
        return actions
    limit = ps.max_nodes(target.name)
    if target.max_nodes > 0:
        limit = min(limit, target.max_nodes)
    base = desired[target.name]  # above the group's desired when nodes for pods kept off spot were added this tick
    room = max(0, limit - base)
    # A gang's nodes come in one step: the step limit never splits one, a cut by the max drops whole gangs.
    step = max(0, _step(ps) - sum(desired[g] - groups[g].desired_nodes for g in groups))
    add = min(want, step if gangs is None else max(step, gangs.largest_missing), room)
    if gangs is not None:
        add = gangs.whole(add, want)
    if add < want and room < want:
        actions.append(_hold(name, Reason.AT_MAX, f"{why}; {target.name} is at {base}/{limit}",
                             group=target.name))
    price = ps.usd_per_hour(target.name)
    for s in scopes:
        if not s.capped:
            continue
        if not s.known:
            # Unknown spend is not zero: without an actual figure from AWS Budgets (unreadable now and none kept in
            # the state) the month so far could already be at the budget, so a capped scope buys nothing.
            actions.append(_hold(name, Reason.BUDGET_UNKNOWN, f"{why}; {s.name} month-to-date spend is unknown "
                                 f"(no AWS Budgets figure read this month), so cap_elastic refuses the scale-up",
                                 group=target.name))
            add = 0
            break
        affordable = max(0, math.floor(s.headroom_usd_per_hour / price + 1e-9)) if price > 0 else add
        s.read_headroom(timers, affordable, add)
        if affordable < add:
            actions.append(_hold(name, Reason.BUDGET_CAP, f"{why}; {s.name} budget ${s.budget_usd:,.0f} affords "
                                 f"{affordable} more node(s) (month-to-date ${s.month_to_date_usd:,.0f} + projection)",
                                 group=target.name))
            add = affordable if gangs is None else gangs.whole(affordable, want)
    if add <= 0:
        return actions
    for s in scopes:
        s.headroom_usd_per_hour -= add * price
    desired[target.name] = base + add
    actions.insert(0, Action(name, ACTION_SET_DESIRED, reason, group=target.name, desired_from=base,
                             desired_to=base + add, detail=why))
    return actions


def _scale_on_demand_only(ps: PoolSettings, off: off_spot.OffSpot, od: Group | None, in_service: dict[str, int],
                          scopes: list[_Scope], desired: dict[str, int], timers: Timers) -> tuple[list[Action], int]:
    """Pods that may not run on spot (policy/off_spot.py) get on-demand nodes directly: packed like any pending
    pods, less the on-demand nodes already on their way, bounded by the group max, the step (never splitting a
    gang), UPDATE_IN_PROGRESS and the budget cap. Returns the actions and how many on-demand nodes on their way
    they take (not room for the other pending pods). No on-demand group: reported, nothing bought."""
    name = ps.name
    actions: list[Action] = []
    needed, unfittable = pack_pods(off.pod_gpus, ps.gpus_per_node)
    who = off_spot.describe(off.pod_gpus)
    if unfittable:
        actions.append(_hold(name, Reason.HOLD_MISSING_DATA, f"{unfittable} pending pod(s) that may not run on spot "
                             f"ask for more than {ps.gpus_per_node} GPUs per node and can never fit this pool"))
    if od is None:
        actions.append(_hold(name, Reason.ON_DEMAND_ONLY, f"{who}: their node selection asks for on-demand capacity "
                             "(or they do not tolerate the spot taint) and the pool has no on-demand group, so they "
                             "wait and no spot node is bought for them; give the pool on-demand capacity "
                             "(elastic.capacity spot_then_on_demand) or let them tolerate spot"))
        return actions, 0
    coming = max(0, od.desired_nodes - in_service[od.name])  # never closed while they wait (back_to_spot)
    taken = min(coming, needed)
    want = needed - taken
    if want <= 0:
        return actions, taken
    why = f"{who} need {want} more on-demand node(s); spot nodes are not added for them"
    if od.status != "ACTIVE":
        actions.append(_hold(name, Reason.UPDATE_IN_PROGRESS, f"{why}, but {od.name} is {od.status}", group=od.name))
        return actions, taken
    limit = ps.max_nodes(od.name)
    if od.max_nodes > 0:
        limit = min(limit, od.max_nodes)
    base = desired[od.name]
    room = max(0, limit - base)
    # A gang's nodes come in one step (policy/gangs.py): the step never splits one, a cut drops whole gangs.
    oldest_first = sorted(off.gangs, key=lambda g: (g.waiting_since is None,
                                                    g.waiting_since or datetime.min.replace(tzinfo=timezone.utc),
                                                    g.name))
    missing = [pack_pods([p for p in g.pod_gpus if p <= ps.gpus_per_node], ps.gpus_per_node)[0]
               for g in oldest_first]
    whole = gang_rules.GangView(False, needed, 0, 0, max(missing, default=0), missing).whole
    add = whole(min(want, max(_step(ps), max(missing, default=0)), room), want)
    if add < want and room < want:
        actions.append(_hold(name, Reason.AT_MAX, f"{why}; {od.name} is at {base}/{limit}", group=od.name))
    price = ps.usd_per_hour(od.name)
    for s in scopes:
        if not s.capped:
            continue
        if not s.known:  # unknown spend is not zero (as in _scale)
            actions.append(_hold(name, Reason.BUDGET_UNKNOWN, f"{why}; {s.name} month-to-date spend is unknown "
                                 f"(no AWS Budgets figure read this month), so cap_elastic refuses the scale-up",
                                 group=od.name))
            add = 0
            break
        affordable = max(0, math.floor(s.headroom_usd_per_hour / price + 1e-9)) if price > 0 else add
        s.read_headroom(timers, affordable, add)
        if affordable < add:
            actions.append(_hold(name, Reason.BUDGET_CAP, f"{why}; {s.name} budget ${s.budget_usd:,.0f} affords "
                                 f"{affordable} more node(s) (month-to-date ${s.month_to_date_usd:,.0f} + projection)",
                                 group=od.name))
            add = whole(affordable, want)
    if add <= 0:
        return actions, taken
    for s in scopes:
        s.headroom_usd_per_hour -= add * price
    desired[od.name] = base + add
    actions.insert(0, Action(name, ACTION_SET_DESIRED, Reason.ON_DEMAND_ONLY, group=od.name, desired_from=base,
                             desired_to=base + add, detail=why))
    return actions, taken


def _merge_set_desired(actions: list[Action]) -> list[Action]:
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


def _shows_work(ps: PoolSettings, node: Node) -> bool:
    """Any known signal of GPU work: a GPU pod on it now, a utilization figure at or above the idle threshold, or
    a GPU requested."""
    if node.gpu_pods:
        return True
    threshold = node_idle_threshold_pct(ps)
    for v in (node.max_utilization_pct, node.recent_max_utilization_pct, node.avg_utilization_pct):
        if v is not None and v >= threshold:
            return True
    return node.max_reserved_pct is not None and node.max_reserved_pct > 0


def _idle_verdict(ps: PoolSettings, node: Node, now: datetime, timers: Timers | None = None) -> tuple[bool | None, str]:
    """(True, why) when every signal agrees the node is idle; (False, "") when one says it works or the node is
    too young to judge; (None, what is missing) when a signal is missing (missing counts as busy).

    Signals: GPU reserved capacity (a pod requested a GPU) over the empty window, and GPU utilization over the
    window the node is judged on. A node no pod requested a GPU of over the empty window is judged on that same
    window (nothing requested, nothing running: it goes after empty_timeout_minutes); without a utilization
    figure for it, on the idle window. Every utilization figure of that judgement must be below the per-GPU idle
    threshold; work that ended before the window (a job that finished) does not keep the node, work within it
    does. The tick reads the node's pods once more before terminating it (policy/tick.py).
    """
    if node.gpu_pods:
        # a GPU pod on it in this tick's pod list: busy, whatever the minutes-old metrics say (a pod that landed
        # after their newest datapoint); the tick would refuse the termination anyway, after cordoning it
        return False, ""
    threshold = node_idle_threshold_pct(ps)
    reserved = node.max_reserved_pct
    recent, longer, mean = node.recent_max_utilization_pct, node.max_utilization_pct, node.avg_utilization_pct
    # The window the node is judged on: the empty window when there is a figure for it, else the idle window.
    judged = ps.empty_timeout_minutes if recent is not None else ps.idle_timeout_minutes
    figures: list[float | None] = [recent] if recent is not None else [longer]
    if ps.scale_up_window_minutes <= judged:
        figures.append(mean)  # the scale-up window's mean lies within the judged window: work seen there counts
    if (reserved is not None and reserved > 0) or any(v is not None and v >= threshold for v in figures):
        return False, ""
    up = now - node.launched_at
    empty_w, idle_w = timedelta(minutes=ps.empty_timeout_minutes), timedelta(minutes=ps.idle_timeout_minutes)
    if timers is not None:  # no sign of work: the verdict moves as the node's age passes each window
        timers.at(node.launched_at + empty_w)
        timers.at(node.launched_at + idle_w)
    if up < min(empty_w, idle_w):
        return False, ""
    if reserved is None:
        return None, "no GPU reserved-capacity data"
    if up >= empty_w and recent is not None:
        return True, (f"no pod requested its GPUs and max GPU utilization {recent:.2f}% < {threshold:.2f}% for "
                      f"{ps.empty_timeout_minutes} min")
    if up >= idle_w and recent is None and longer is not None:
        return True, (f"max GPU utilization {longer:.2f}% < {threshold:.2f}% for {ps.idle_timeout_minutes} min and "
                      "no pod requested its GPUs")
    if up >= idle_w and recent is None:
        return None, "no GPU utilization data"
    return False, ""


def _reclaim(ps: PoolSettings, po: PoolObservation, groups: dict[str, Group], nodes: list[Node], now: datetime,
             desired: dict[str, int], resized: set[str], timers: Timers, gangs: gang_rules.GangView | None = None,
             closed: frozenset[str] = frozenset(), keep_on_demand: int = 0) -> list[Action]:
    """`po`'s pending pods (those that may run on spot, when policy/off_spot.py split them) may keep idle nodes of
    any group; `keep_on_demand` more may be kept for the others, on-demand nodes only."""
    name = ps.name
    idle: list[Node] = []
    why: dict[str, str] = {}
    unknown = 0
    for node in nodes:
        verdict, reason = _idle_verdict(ps, node, now, timers)
        if verdict is None:
            unknown += 1
        elif verdict:
            idle.append(node)
            why[node.instance_id] = reason
    actions: list[Action] = []
    if unknown:
        actions.append(_hold(name, Reason.HOLD_MISSING_DATA, f"{unknown} elastic node(s) without GPU utilization or "
                             "reserved-capacity data count as busy"))
    if not idle:
        return actions
    if po.pending_pod_gpus is None:
        actions.append(_hold(name, Reason.HOLD_MISSING_DATA, f"{len(idle)} idle node(s) kept: pending pods unknown "
                             "(Kubernetes API unreachable)"))
        return actions
    # The nodes that go first come first: on-demand before spot, then the idlest, the oldest.
    idle.sort(key=lambda n: (n.group != ps.on_demand_group, n.max_utilization_pct or 0.0, n.launched_at,
                             n.instance_id))
    # Pending pods that fit a node may land on an idle one (a gang waiting for the rest of its nodes, the
    # scheduler not yet through): keep as many idle nodes as they would fill, no more.
    for_pending = pack_pods([p for p in po.pending_pod_gpus if 0 < p <= ps.gpus_per_node], ps.gpus_per_node)[0] \
        if gangs is None else gangs.kept_for_pending  # a gang released past its wait keeps none
    warm = keep_warm_nodes(ps, po.arrivals, now, timers)
    # A node that never got a pod is not kept warm: the demand it was launched for went elsewhere (Karpenter
    # counts such a node empty from the moment it is ready).
    used = [n for n in idle if not never_got_a_pod(ps, n, now, timers if warm else None)]
    kept = {n.instance_id for n in used[len(used) - min(len(used), warm):]}
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
            actions.append(_hold(name, Reason.WARM_UP, f"{len(kept)} idle node(s) kept: {_rhythm_why(ps, po)}"))
        elif for_pending >= warm or for_pending >= len(kept):
            actions.append(_hold(name, Reason.STEADY, f"{len(kept)} idle node(s) kept: pods are pending and may "
                                 "land on them"))
        else:
            actions.append(_hold(name, Reason.KEEP_WARM, f"{len(kept)} idle node(s) kept: "
                                 f"{_rate_why(ps, po.arrivals, now)}"))
        idle = [n for n in idle if n.instance_id not in kept]
    taken = 0
    reported: set[str] = set()
    for node in idle:
        if taken >= _step(ps):
            break
        g = groups[node.group]
        if g.name in resized:
            continue
        if g.status != "ACTIVE":
            if g.name not in reported:
                reported.add(g.name)
                actions.append(_hold(name, Reason.UPDATE_IN_PROGRESS, f"idle node(s) kept: {g.name} is {g.status}",
                                     group=g.name))
            continue
        if desired[g.name] - 1 < g.min_nodes:
            continue
        desired[g.name] -= 1
        taken += 1
        actions.append(Action(name, ACTION_TERMINATE, Reason.RECLAIM_IDLE, group=g.name, instance_id=node.instance_id,
                              desired_from=desired[g.name] + 1, desired_to=desired[g.name],
                              detail=why[node.instance_id]))
    return actions


_NO_STEP_LIMIT = 1 << 30


def _step(ps: PoolSettings) -> int:
    """Most nodes added or terminated per tick: max_step_nodes, or no limit when unset (the group maximum and the
    budget cap bound every tick already; docs/policy.md, "No artificial brakes")."""
    return ps.max_step_nodes if ps.max_step_nodes is not None else _NO_STEP_LIMIT


def arrival_rate_nodes_per_minute(ps: PoolSettings, arrivals, now: datetime, timers: Timers | None = None) -> float:
    """The pool's recent demand in nodes per minute: GPUs of the pods created within arrival_window_minutes
    (and not finished), in nodes' worth, over the window. No look-ahead: only pods that exist at `now` count.
    `timers`: each arrival counts from its creation and leaves the window arrival_window_minutes later."""
    if not arrivals:
        return 0.0
    window = timedelta(minutes=ps.arrival_window_minutes)
    if timers is not None:
        for t, g in arrivals:
            if g > 0:
                timers.at(t)
                timers.at(t + window)
    gpus = sum(g for t, g in arrivals if g > 0 and timedelta(0) <= now - t < window)
    return gpus / max(ps.gpus_per_node, 1) / ps.arrival_window_minutes


def keep_warm_nodes(ps: PoolSettings, arrivals, now: datetime, timers: Timers | None = None) -> int:
    """How many idle elastic nodes are worth keeping (docs/policy.md, "Release on cost").

    Keeping the k-th idle node costs its price until the k-th next node's worth of demand arrives: k / rate
    minutes on average (arrivals as a Poisson process at the recent rate). Releasing it costs, when that demand
    comes, a relaunch: launch_minutes paid for a node that boots, plus launch_minutes that the job waits, a
    minute of waiting valued at the price of the capacity it waits for. So the k-th node is kept while
    k / rate < 2 x launch_minutes, i.e. k < 2 x launch_minutes x rate."""
    return _nodes_that_pay(ps, arrival_rate_nodes_per_minute(ps, arrivals, now, timers))


def _nodes_that_pay(ps: PoolSettings, rate: float | None) -> int:
    """The k-th spare node pays for itself while k / rate < 2 x launch_minutes (keep_warm_nodes)."""
    if rate is None or rate <= 0:
        return 0
    return max(0, math.ceil(2.0 * ps.launch_minutes * rate - 1e-9) - 1)


def warm_up_nodes(ps: PoolSettings, po: PoolObservation) -> int:
    """Spare nodes the daily rhythm asks for (docs/policy.md, "Warm-up ahead of the daily rhythm"); 0 unless
    `warm_up` is on and the history is known.

    The same cost rule as keep_warm_nodes, with the rate this time of day brought on earlier days: a spare node
    costs its price until the k-th next node's worth of demand arrives (k / rate minutes); without it, that
    demand waits launch_minutes for a launch (and an idle node relaunched pays its boot again). Launched ahead,
    the k-th node pays for itself while k / rate < 2 x launch_minutes: it serves a job up to launch_minutes
    after it is ready at no wait, and saves that job's launch_minutes of waiting; so k < 2 x launch_minutes x
    rate, as for keeping one."""
    return _nodes_that_pay(ps, po.rhythm_rate_nodes_per_minute) if ps.warm_up else 0


def _warm_up_launches(ps: PoolSettings, po: PoolObservation, elastic_nodes: list[Node], coming: int,
                      needed: int) -> int:
    """Nodes to launch so that warm_up_nodes spare ones are up or on their way. Spare: in-service elastic nodes
    (`elastic_nodes`, from decide's one pass) no pod requested a GPU of over the empty window, plus nodes on their
    way that pending pods will not take. Any of them without that figure makes the count unknown: no warm-up
    launch on a guess."""
    target = warm_up_nodes(ps, po)
    if target <= 0:
        return 0
    if any(n.max_reserved_pct is None for n in elastic_nodes):
        return 0
    empty = sum(1 for n in elastic_nodes if n.max_reserved_pct == 0 and not n.gpu_pods)  # a pod landed: not spare
    return max(0, target - max(0, empty + coming - needed))


def _rhythm_why(ps: PoolSettings, po: PoolObservation) -> str:
    rate = po.rhythm_rate_nodes_per_minute or 0.0
    return (f"on earlier days {rate * 60:.1f} node(s) of demand per hour arrived at this time of day; a spare node "
            f"pays while that brings its job within {2 * ps.launch_minutes} min")


def never_got_a_pod(ps: PoolSettings, node: Node, now: datetime, timers: Timers | None = None) -> bool:
    """The node's empty window (no GPU requested over it) reaches back into its boot: it has had no GPU pod in
    its whole ready life. launch_minutes stands for the boot (the Lambda keeps no per-node history)."""
    until = node.launched_at + timedelta(minutes=ps.empty_timeout_minutes + ps.launch_minutes)
    if timers is not None:
        timers.at(until + JUST_AFTER)  # true up to and including `until`
    return now <= until


def _rate_why(ps: PoolSettings, arrivals, now: datetime) -> str:
    rate = arrival_rate_nodes_per_minute(ps, arrivals, now)
    return (f"{rate * 60:.1f} node(s) of demand arrived per hour over the last {ps.arrival_window_minutes} min; "
            f"a relaunch costs {2 * ps.launch_minutes} node-minutes ({ps.launch_minutes} booting, paid, + "
            f"{ps.launch_minutes} a job waits)")


ABOVE_IDLE = "above the idle threshold"


def node_reading(ps: PoolSettings, max_pct: float | None, avg_pct: float | None, reserved_pct: float | None,
                 recent_max_pct: float | None) -> tuple:
    """What the rules read of a node's CloudWatch figures (Node.max_utilization_pct, avg_utilization_pct,
    max_reserved_pct, recent_max_utilization_pct): two nodes whose readings are equal get the same actions (the
    reported figures, PoolDecision.utilization_pct, may differ). A utilization figure is compared with the idle
    threshold, and a max's value counts only below it (the idle nodes' order, the reasons' details); a batch
    pool's mean only on which side of it it is, a service pool's mean whole (the pool's mean against the
    scale-up threshold); the reserved figure is unknown, zero or not. The simulator skips the minutes in which a window's figures move without changing this (sim/policies.py)."""
    threshold = node_idle_threshold_pct(ps)

    def level(v: float | None) -> float | str | None:
        return v if v is None or v < threshold else ABOVE_IDLE

    # a batch pool reads a node's mean only against the idle threshold (`_shows_work`, `_idle_verdict`)
    mean = avg_pct if ps.workload == WORKLOAD_SERVICE or avg_pct is None else avg_pct >= threshold
    return level(max_pct), mean, None if reserved_pct is None else reserved_pct > 0, level(recent_max_pct)


def node_idle_threshold_pct(ps: PoolSettings) -> float:
    """The node-level utilization under which a node is idle.

    `idle_utilization_pct` is meant per GPU, but the per-node metric averages the node's GPUs: on an 8-GPU node
    one job keeping one GPU at 30 % reads 3.75 %. Dividing by the GPUs per node keeps such a node busy, so a
    node is reclaimed only when even a single GPU at the threshold would have shown up in its average.
    """
    return ps.idle_utilization_pct / max(ps.gpus_per_node, 1)


__all__ = ["decide", "hours_left_in_month", "node_reading", "node_idle_threshold_pct", "pack_pods", "warm_up_nodes",
           "CAPACITY_GUARANTEED"]
