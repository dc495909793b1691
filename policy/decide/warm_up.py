"""Warm-up ahead of the daily rhythm (rule 5, opt-in `warm_up`): the spare nodes the arrivals of this time of day
on earlier days pay for, kept by the reclaim and launched with the scale-up (WARM_UP)."""

from __future__ import annotations

from policy.decide.keep_warm import nodes_that_pay
from policy.model import Node, PoolObservation, PoolSettings


def warm_up_nodes(ps: PoolSettings, po: PoolObservation) -> int:
    """Spare nodes the daily rhythm asks for (docs/policy.md, "Warm-up ahead of the daily rhythm"); 0 unless
    `warm_up` is on and the history is known.

    The same cost rule as keep_warm_nodes, with the rate this time of day brought on earlier days: a spare node
    costs its price until the k-th next node's worth of demand arrives (k / rate minutes); without it, that
    demand waits launch_minutes for a launch (and an idle node relaunched pays its boot again). Launched ahead,
    the k-th node pays for itself while k / rate < 2 x launch_minutes: it serves a job up to launch_minutes
    after it is ready at no wait, and saves that job's launch_minutes of waiting; so k < 2 x launch_minutes x
    rate, as for keeping one."""
    return nodes_that_pay(ps, po.rhythm_rate_nodes_per_minute) if ps.warm_up else 0


def warm_up_launches(ps: PoolSettings, po: PoolObservation, elastic_nodes: list[Node], coming: int, needed: int) -> int:
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


def rhythm_why(ps: PoolSettings, po: PoolObservation) -> str:
    rate = po.rhythm_rate_nodes_per_minute or 0.0
    return (
        f"on earlier days {rate * 60:.1f} node(s) of demand per hour arrived at this time of day; a spare node "
        f"pays while that brings its job within {2 * ps.launch_minutes} min"
    )
