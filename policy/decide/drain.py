"""Budget drain (rule 2, BUDGET_DRAIN): with cap_elastic, once a budget scope's month-to-date spend reaches its
budget, launches in flight are cancelled and idle in-service elastic nodes are terminated by instance id,
max_step_nodes per tick. A node with GPU work (or without the data to tell) is never drained."""

from __future__ import annotations

from datetime import datetime

from policy.decide.budget import Scope
from policy.decide.common import hold, step_limit
from policy.decide.idle import idle_verdict, shows_work
from policy.model import ACTION_SET_DESIRED, ACTION_TERMINATE, Action, Group, Node, PoolSettings, Timers
from policy.terms import Reason


def drain(
    ps: PoolSettings,
    groups: dict[str, Group],
    in_service: dict[str, int],
    nodes: list[Node],
    launching_nodes: list[Node],
    scope: Scope,
    desired: dict[str, int],
    now: datetime,
    timers: Timers,
) -> list[Action]:
    name = ps.name
    why = f"{scope.name} month-to-date ${scope.month_to_date_usd:,.0f} reached its budget ${scope.budget_usd:,.0f}"
    actions: list[Action] = []
    cancelled = False
    cancelled_by_id = 0  # terminations, max_step_nodes per tick as for any other
    for gname, g in groups.items():
        if g.status != "ACTIVE":
            actions.append(hold(name, Reason.UPDATE_IN_PROGRESS, f"{gname} is {g.status}", group=gname))
            continue
        if g.desired_nodes <= in_service[gname]:
            continue
        # Booting instances are cancelled by id: lowering desired by their number would let the Auto Scaling
        # group pick which instances go, possibly a busy in-service one. Desired drops by itself for those
        # (ShouldDecrementDesiredCapacity); only capacity with no instance yet is cancelled through desired. A
        # booting instance that already shows GPU work is kept, and it is an instance all the same: counted as
        # one, or the cut below would reach below the live instances and the group would choose who dies.
        live_booting = [n for n in launching_nodes if n.group == gname]
        booting = sorted((n for n in live_booting if not shows_work(ps, n)), key=lambda n: n.instance_id)
        not_launched = max(0, g.desired_nodes - in_service[gname] - len(live_booting))
        if not_launched or booting:
            cancelled = True
        if not_launched:
            # One kind of change per group per tick: the new desired size first; the booting instances go by id
            # next tick (EKS applies UpdateNodegroupConfig later, and an absolute size that lands after the
            # terminations would relaunch them).
            desired[gname] = g.desired_nodes - not_launched
            actions.append(
                Action(
                    name,
                    ACTION_SET_DESIRED,
                    Reason.BUDGET_DRAIN,
                    group=gname,
                    desired_from=g.desired_nodes,
                    desired_to=desired[gname],
                    detail=f"{why}; cancel {not_launched} launch(es) not started",
                )
            )
            continue
        for n in booting[: max(0, step_limit(ps) - cancelled_by_id)]:
            cancelled_by_id += 1
            desired[gname] -= 1
            actions.append(
                Action(
                    name,
                    ACTION_TERMINATE,
                    Reason.BUDGET_DRAIN,
                    group=gname,
                    instance_id=n.instance_id,
                    desired_from=desired[gname] + 1,
                    desired_to=desired[gname],
                    detail=f"{why}; cancel a launch in flight",
                )
            )
    if cancelled:
        return actions
    if not nodes:
        actions.append(hold(name, Reason.BUDGET_DRAIN, f"{why}; no elastic nodes left to drain"))
        return actions
    idle, working = [], 0
    for n in nodes:
        if groups[n.group].status != "ACTIVE":
            continue
        verdict, _ = idle_verdict(ps, n, now, timers)
        if verdict:
            idle.append(n)
        else:
            working += 1
    for node in sorted(idle, key=_drain_key(ps))[: step_limit(ps)]:
        desired[node.group] -= 1
        actions.append(
            Action(
                name,
                ACTION_TERMINATE,
                Reason.BUDGET_DRAIN,
                group=node.group,
                instance_id=node.instance_id,
                desired_from=desired[node.group] + 1,
                desired_to=desired[node.group],
                detail=f"{why}; the node is idle",
            )
        )
    if working:
        actions.append(
            hold(
                name,
                Reason.BUDGET_DRAIN,
                f"{why}; {working} elastic node(s) with GPU work (or without "
                "the data to tell) are kept and drained once idle: a working GPU is never taken",
            )
        )
    return actions


def _drain_key(ps: PoolSettings):
    def key(n: Node):
        util = n.max_utilization_pct
        # idle first, nodes without metrics last (they may be busy), on-demand before spot at equal use
        return (util is None, util if util is not None else 0.0, n.group != ps.on_demand_group, n.instance_id)

    return key
