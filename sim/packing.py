"""The Karpenter baseline's bin packing: pending pods onto the free GPUs of existing nodes, then onto new nodes.

The same first fit decreasing over runs of equal bins as our engine (policy/packing.py); what the baseline adds
is what Karpenter's provisioner sees and our pack_pods does not: the free GPUs of existing and in-flight nodes,
and multi-node jobs that take whole nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from policy.packing import first_fit_runs


def new_nodes_needed(pending: Mapping[int, int], gpus_per_node: int, free_gpus: Iterable[int] = ()) -> int:
    """Nodes to launch so that every pending pod has a place.

    `pending` maps a pod's GPU request to the number of such pods; a request larger than a node is a gang (a
    multi-node job) that needs ceil(gpus / gpus_per_node) whole nodes. `free_gpus` lists the free GPUs of each
    existing node a pod may land on (in-flight nodes count as empty). Gangs (the largest requests) go first, onto
    whole empty nodes, existing ones first; then first fit decreasing: existing nodes with the most free GPUs
    first, then new nodes in the order they are opened."""
    gpn = gpus_per_node
    free_count: dict[int, int] = {}
    for f in free_gpus:
        if f > 0:
            free_count[f] = free_count.get(f, 0) + 1
    runs = [[f, free_count[f]] for f in sorted(free_count, reverse=True)]
    nodes = 0
    for need in sorted((n for n in pending if n > gpn), reverse=True):
        k, left = -(-need // gpn), pending[need]
        if left <= 0:
            continue
        whole = runs[0][1] if runs and runs[0][0] == gpn else 0
        take = min(whole, k * left)
        if take:
            runs[0][1] -= take
            if not runs[0][1]:
                runs.pop(0)
        nodes += k * left - take
    return nodes + first_fit_runs(pending, gpn, runs)
