"""The Karpenter baseline's bin packing: pending pods onto the free GPUs of existing nodes, then onto new nodes.

Karpenter's provisioner is its own code, not ours, so the baseline keeps its own packing rather than calling
policy.engine.pack_pods (which knows nothing of existing free capacity). Both are first fit decreasing over
runs of equal bins, so the work grows with the number of distinct pod sizes, not with the number of pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def new_nodes_needed(pending: Mapping[int, int], gpus_per_node: int, free_gpus: Iterable[int] = ()) -> int:
    """Nodes to launch so that every pending pod has a place.

    `pending` maps a pod's GPU request to the number of such pods; a request larger than a node is a gang (a
    multi-node job) that needs ceil(gpus / gpus_per_node) whole nodes. `free_gpus` lists the free GPUs of each
    existing node a pod may land on (in-flight nodes count as empty). First fit decreasing: existing nodes with
    the most free GPUs first, in that order, then new nodes in the order they are opened."""
    gpn = gpus_per_node
    free_count: dict[int, int] = {}
    for f in free_gpus:
        if f > 0:
            free_count[f] = free_count.get(f, 0) + 1
    runs = [[f, free_count[f]] for f in sorted(free_count, reverse=True)]
    nodes = 0
    for need in sorted(pending, reverse=True):
        left = pending[need]
        if need <= 0 or left <= 0:
            continue
        if need > gpn:  # a gang takes whole empty nodes, existing ones first
            k = -(-need // gpn)
            whole = runs[0][1] if runs and runs[0][0] == gpn else 0
            take = min(whole, k * left)
            if take:
                runs[0][1] -= take
                if not runs[0][1]:
                    runs.pop(0)
            nodes += k * left - take
            continue
        i = 0
        while left and i < len(runs):
            free, bins = runs[i]
            per_bin = free // need
            if per_bin == 0:
                i += 1
                continue
            filled = min(bins, left // per_bin)
            if filled == bins:
                runs[i][0] = free - per_bin * need
                left -= per_bin * bins
                i += 1
                continue
            rest = left - filled * per_bin
            split = [[free - per_bin * need, filled]] if filled else []
            if rest:
                split.append([free - rest * need, 1])
            if bins - filled - (1 if rest else 0):
                split.append([free, bins - filled - (1 if rest else 0)])
            runs[i:i + 1] = split
            left = 0
        if left:
            per_bin = gpn // need
            filled, rest = divmod(left, per_bin)
            if filled:
                runs.append([gpn - per_bin * need, filled])
            if rest:
                runs.append([gpn - rest * need, 1])
            nodes += filled + (1 if rest else 0)
    return nodes
