"""Back to spot after a fallback (docs/policy.md, "Back to spot"): which on-demand fallback nodes take no new pods.

While spot is short the engine grows the on-demand fallback group (rule 4). Once spot fills again, a fallback node
with free GPUs would keep taking new pods -- kube-scheduler places a pod on any node it fits, and the preferred
affinity for spot only breaks ties between nodes that exist -- so it never empties and stays at the on-demand price
(Karpenter's users report the same: aws/karpenter-provider-aws#7832). So, once spot is back, every on-demand node of
the pool is closed to new pods (the tick puts a NoSchedule taint on it, policy/closing.py): the pods it runs finish
there, new pods wait as unschedulable, the scale-up adds spot nodes for them (the closed nodes count as no room),
and a closed node goes as soon as it is idle (never kept warm: nothing can land on it). When spot is short again,
or the rule is turned off, the taint comes off and the fallback group serves as before.

"Spot is back" is what rule 4 reads from the group: no desired instance is missing (the group keeps retrying its
desired size while short, so a shortfall that ends means launches succeeded) and its last scaling activity did not
fail for capacity. It does not need a spot instance up: after the spot nodes that came back were reclaimed idle
(the work they came for ran on the fallback nodes), spot is still no shorter than before, and a pod closed out of
the fallback goes to spot; should that launch fail, rule 4 falls back again within fallback_after_minutes and the
taints come off. While the budget drain runs nothing is added, so nothing is closed. Pure: no I/O.
"""

from __future__ import annotations

from policy.model import Group, PoolSettings


def closed_to_new_pods(
    ps: PoolSettings,
    spot: Group | None,
    od: Group | None,
    nodes,
    spot_short: bool,
    draining: bool,
    on_demand_only_pending: bool = False,
) -> tuple[str, ...] | None:
    """The instance ids of the pool's on-demand nodes (in service or booting) that should take no new pods; () when
    none should (spot short or its last activity failed for capacity, the budget drain, the rule off, or pods that
    may not run on spot are pending: the on-demand group is their home, not a fallback to leave, and a closed node
    would keep them off the very nodes added for them, policy/off_spot.py); None when the pool has no spot group
    with an on-demand fallback."""
    if spot is None or od is None:
        return None
    if not ps.back_to_spot or draining or spot_short or spot.capacity_shortage or on_demand_only_pending:
        return ()
    return tuple(sorted(n.instance_id for n in nodes if n.group == od.name and (n.in_service or n.launching)))


def why(spot: Group, closed: tuple[str, ...]) -> str:
    return (
        f"spot {spot.name} is back: {len(closed)} on-demand node(s) take no new pods (NoSchedule taint) and go "
        "once idle; pods that wait get spot nodes"
    )


__all__ = ["closed_to_new_pods", "why"]
