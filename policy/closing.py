"""Carry out the engine's back-to-spot verdict in Kubernetes (policy/back_to_spot.py, docs/policy.md "Back to spot").

For each pool whose decision says which on-demand nodes take no new pods (`PoolDecision.closed_to_new_pods`), the
tick makes the cluster match: gpuloan's NoSchedule taint on exactly those nodes, off every other on-demand node of
the pool (spot short again, or the rule turned off). Idempotent: a node already as it should be is only read. A
node not registered yet is skipped (the next tick sees it); a failure is a tick error, never a crash, and changes
no capacity (the worst case is a fallback node that keeps taking pods for another minute).
"""

from __future__ import annotations

from typing import Callable

from policy.errors import PolicyError
from policy.pods import BACK_TO_SPOT_TAINT_KEY
from policy.ports import NodeGuardPort
from policy.model import Observation, Plan, Settings


def apply(
    settings: Settings,
    plan: Plan,
    obs: Observation,
    nodes: NodeGuardPort | None,
    node_names: dict[str, str],
    record: Callable[[Exception], None],
) -> list[tuple[str, bool]]:
    """(node name, closed) for every node whose taint changed."""
    changed: list[tuple[str, bool]] = []
    if nodes is None or plan.dry_run:
        return changed
    for d in plan.decisions:
        if d.closed_to_new_pods is None:
            continue
        ps, po = settings.pool(d.pool), obs.pool(d.pool)
        if po is None or not ps.on_demand_groups:
            continue
        closed = set(d.closed_to_new_pods)
        for n in po.nodes:
            name = node_names.get(n.instance_id)
            if n.group not in ps.on_demand_groups or not name or not (n.in_service or n.launching):
                continue
            want = n.instance_id in closed
            try:
                if nodes.set_taint(name, BACK_TO_SPOT_TAINT_KEY, want):
                    changed.append((name, want))
            except PolicyError as err:
                record(PolicyError(f"back to spot: could not {'taint' if want else 'untaint'} {name}: {err}"))
    return changed
