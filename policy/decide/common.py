"""Helpers every rule of `decide` shares: packing pending pods onto nodes, a group's hourly price, a hold and the
per-tick step (docs/policy.md, "No artificial brakes")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from policy.model import ACTION_HOLD, Action, Node, PoolSettings
from policy.terms import Reason
from policy.packing import first_fit_runs


def pack_pods(pod_gpus: Iterable[int] | Mapping[int, int], gpus_per_node: int) -> tuple[int, int]:
    """First fit decreasing onto new nodes (policy/packing.py): (nodes needed, pods that fit no node). Pods asking
    for 0 GPUs are ignored. `pod_gpus` is one GPU request per pod, or a mapping GPUs -> number of pods."""
    counts = pod_gpus if isinstance(pod_gpus, Mapping) else Counter(pod_gpus)
    unfittable = sum(n for need, n in counts.items() if need > gpus_per_node and n > 0)
    return first_fit_runs(counts, gpus_per_node, []), unfittable


def group_usd_per_hour(ps: PoolSettings, group: str, desired: int, nodes: Iterable[Node]) -> float:
    """Hourly spend of `desired` nodes of `group`: the group's nodes at their own types (the priciest first when
    desired is below their count: a cap must not under-estimate), the nodes still to come at the type the group
    launches (PoolSettings)."""
    if not ps.instance_usd_per_hour:  # one price per group (the simulator): no per-node pass
        return desired * ps.usd_per_hour(group)
    own = sorted((ps.node_usd_per_hour(group, n.instance_type) for n in nodes if n.group == group), reverse=True)[
        :desired
    ]
    return sum(own) + max(0, desired - len(own)) * ps.usd_per_hour(group)


def hold(pool: str, reason: Reason, detail: str, group: str | None = None) -> Action:
    return Action(pool, ACTION_HOLD, reason, group=group, detail=detail)


_NO_STEP_LIMIT = 1 << 30


def step_limit(ps: PoolSettings) -> int:
    """Most nodes added or terminated per tick: max_step_nodes, or no limit when unset (the group maximum and the
    budget cap bound every tick already; docs/policy.md, "No artificial brakes")."""
    return ps.max_step_nodes if ps.max_step_nodes is not None else _NO_STEP_LIMIT
