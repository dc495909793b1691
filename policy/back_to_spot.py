"""Back to spot after a fallback (docs/policy.md, "Back to spot"): which on-demand fallback nodes take no new pods.

While spot is short the engine grows the on-demand fallback group (rule 4). Once spot fills again, a fallback node
with free GPUs would keep taking new pods -- kube-scheduler places a pod on any node it fits, and the preferred
affinity for spot only breaks ties between nodes that exist -- so it never empties and stays at the on-demand price
(Karpenter's users report the same: aws/karpenter-provider-aws#7832). So, once spot is back, every on-demand node of
the pool is closed to new pods (the tick puts a NoSchedule taint on it, policy/kube.py): the pods it runs finish
there, new pods wait as unschedulable, the scale-up adds spot nodes for them (the closed nodes count as no room),
and a closed node goes as soon as it is idle (never kept warm: nothing can land on it). When spot is short again,
or the rule is turned off, the taint comes off and the fallback group serves as before.

"Spot is back" needs evidence, not the absence of a shortfall: the spot group is not short (rule 4), its last
scaling activity did not fail for capacity, and at least one of its instances is in service or booting. A spot
group at 0 proves nothing (its desired size may have been cut by the budget drain, or never raised), so the
fallback nodes stay open then. Pure: no I/O.
"""

from __future__ import annotations

from policy.model import Group, Node, PoolSettings


def closed_to_new_pods(ps: PoolSettings, spot: Group | None, od: Group | None, nodes, spot_short: bool,
                       spot_live: int, draining: bool) -> tuple[str, ...] | None:
    """The instance ids of the pool's on-demand nodes (in service or booting) that should take no new pods; () when
    none should (spot short, no evidence that spot is back, the budget drain, the rule off); None when the pool has
    no spot group with an on-demand fallback. `spot_live`: the spot group's instances in service or booting."""
    if spot is None or od is None:
        return None
    if not ps.back_to_spot or draining or spot_short or spot.capacity_shortage or spot_live <= 0:
        return ()
    return tuple(sorted(n.instance_id for n in nodes if n.group == od.name and (n.in_service or n.launching)))


def why(spot: Group, closed: tuple[str, ...]) -> str:
    return (f"spot {spot.name} is back: {len(closed)} on-demand node(s) take no new pods (NoSchedule taint) and go "
            "once idle; pods that wait get spot nodes")


__all__ = ["closed_to_new_pods", "why", "Node"]
