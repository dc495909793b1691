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


def _fit(runs: list[list[int]], need: int, left: int) -> int:
    """First fit of `left` pods of `need` GPUs into the bins of `runs` ([free GPUs, bins], tried in order), as
    policy/packing.py first_fit_runs does; returns the pods that found no bin."""
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
        untouched = bins - filled - (1 if rest else 0)
        if untouched:
            split.append([free, untouched])
        runs[i : i + 1] = split
        left = 0
    return left


def new_claims(
    pending: Mapping[int, int], gpus_per_node: int, free_gpus: Iterable[int] = (), claim_per_pod: bool = False
) -> dict[int, int]:
    """What Karpenter's provisioner packs onto new NodeClaims, for a NodePool of several node sizes whose largest
    has `gpus_per_node` GPUs: GPUs used on a new claim -> claims. As new_nodes_needed: gangs first onto whole empty
    nodes of the largest size (then new full claims), then first fit decreasing onto the free GPUs of existing and
    in-flight nodes (`free_gpus`, most free first), then onto new claims, each able to grow to the largest type.
    Each claim then launches the cheapest type that fits what it holds (Karpenter's instance type choice).
    `claim_per_pod`: a pod that fits no existing node gets a claim of its own (pods that came in batches of one)."""
    gpn = gpus_per_node
    free_count: dict[int, int] = {}
    for f in free_gpus:
        if f > 0:
            free_count[f] = free_count.get(f, 0) + 1
    runs = [[f, free_count[f]] for f in sorted(free_count, reverse=True)]
    claims: dict[int, int] = {}
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
        if k * left - take:
            claims[gpn] = claims.get(gpn, 0) + k * left - take
    new: list[list[int]] = []
    for need in sorted((n for n in pending if 0 < n <= gpn), reverse=True):
        left = _fit(runs, need, pending[need])
        if claim_per_pod:
            if left:
                claims[need] = claims.get(need, 0) + left
            continue
        left = _fit(new, need, left)
        if left:
            per_bin = gpn // need
            filled, rest = divmod(left, per_bin)
            if filled:
                new.append([gpn - per_bin * need, filled])
            if rest:
                new.append([gpn - rest * need, 1])
    for free, bins in new:
        if bins:
            claims[gpn - free] = claims.get(gpn - free, 0) + bins
    return claims
