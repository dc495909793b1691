"""Pods that may not run on spot (rule 3, ON_DEMAND_ONLY; policy/off_spot.py): packed onto the on-demand group
directly, under the same bounds as any scale-up; no spot node is added or kept for them."""

from __future__ import annotations

from datetime import datetime, timezone

from policy import gangs as gang_rules
from policy import off_spot
from policy.decide.budget import Scope
from policy.decide.bound import bound
from policy.decide.common import hold, pack_pods
from policy.model import ACTION_SET_DESIRED, Action, Group, PoolSettings, Timers
from policy.terms import Reason


def scale_on_demand_only(
    ps: PoolSettings,
    off: off_spot.OffSpot,
    od: Group | None,
    in_service: dict[str, int],
    scopes: list[Scope],
    desired: dict[str, int],
    timers: Timers,
) -> tuple[list[Action], int]:
    """Pods that may not run on spot (policy/off_spot.py) get on-demand nodes directly: packed like any pending
    pods, less the on-demand nodes already on their way, bounded by the group max, the step (never splitting a
    gang), UPDATE_IN_PROGRESS and the budget cap. Returns the actions and how many on-demand nodes on their way
    they take (not room for the other pending pods). No on-demand group: reported, nothing bought."""
    name = ps.name
    actions: list[Action] = []
    needed, unfittable = pack_pods(off.pod_gpus, ps.gpus_per_node)
    who = off_spot.describe(off.pod_gpus)
    if unfittable:
        actions.append(
            hold(
                name,
                Reason.HOLD_MISSING_DATA,
                f"{unfittable} pending pod(s) that may not run on spot "
                f"ask for more than {ps.gpus_per_node} GPUs per node and can never fit this pool",
            )
        )
    if od is None:
        actions.append(
            hold(
                name,
                Reason.ON_DEMAND_ONLY,
                f"{who}: their node selection asks for on-demand capacity "
                "(or they do not tolerate the spot taint) and the pool has no on-demand group, so they "
                "wait and no spot node is bought for them; give the pool on-demand capacity "
                "(elastic.capacity spot_then_on_demand) or let them tolerate spot",
            )
        )
        return actions, 0
    coming = max(0, od.desired_nodes - in_service[od.name])  # never closed while they wait (back_to_spot)
    taken = min(coming, needed)
    want = needed - taken
    if want <= 0:
        return actions, taken
    why = f"{who} need {want} more on-demand node(s); spot nodes are not added for them"
    if od.status != "ACTIVE":
        actions.append(hold(name, Reason.UPDATE_IN_PROGRESS, f"{why}, but {od.name} is {od.status}", group=od.name))
        return actions, taken
    base = desired[od.name]
    # A gang's nodes come in one step (policy/gangs.py): the step never splits one, a cut drops whole gangs. These
    # pods are the first the tick adds nodes for: none added before them counts against the step.
    oldest_first = sorted(
        off.gangs,
        key=lambda g: (g.waiting_since is None, g.waiting_since or datetime.min.replace(tzinfo=timezone.utc), g.name),
    )
    missing = [pack_pods([p for p in g.pod_gpus if p <= ps.gpus_per_node], ps.gpus_per_node)[0] for g in oldest_first]
    whole = gang_rules.GangView(False, needed, 0, 0, max(missing, default=0), missing).whole
    add, limits = bound(ps, od, base, want, 0, scopes, timers, why, whole, max(missing, default=0))
    actions += limits
    if add <= 0:
        return actions, taken
    desired[od.name] = base + add
    actions.insert(
        0,
        Action(
            name,
            ACTION_SET_DESIRED,
            Reason.ON_DEMAND_ONLY,
            group=od.name,
            desired_from=base,
            desired_to=base + add,
            detail=why,
        ),
    )
    return actions, taken
