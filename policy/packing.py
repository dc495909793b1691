"""First fit decreasing over runs of equal bins: the packing our engine (policy.decide.pack_pods) and the
simulator's Karpenter baseline (sim/cluster.py) both use.

Bins are kept as runs [free GPUs per bin, bins] in the order they are tried, and all pods of one size go in at
once (first fit puts identical pods into the earliest bins with room, as many as fit in each): the work grows
with the number of distinct sizes (each size adds at most three runs), not with the number of pods. A spot
outage can leave thousands of pending pods of a few sizes; packing them one by one was quadratic in the pods.
"""

from __future__ import annotations

from collections.abc import Mapping


def first_fit_runs(counts: Mapping[int, int], gpus_per_node: int, runs: list[list[int]]) -> int:
    """Place `counts` (GPUs per pod -> pods; only sizes 1..gpus_per_node are placed, largest first) into the
    bins of `runs`, then into new bins of gpus_per_node GPUs appended to `runs`. Returns the new bins opened;
    `runs` is left holding what is free afterwards."""
    nodes = 0
    for need in sorted(counts, reverse=True):
        left = counts[need]
        if need <= 0 or left <= 0 or need > gpus_per_node:
            continue
        left = fit_into_runs(runs, need, left)
        if left:
            per_bin = gpus_per_node // need
            filled, rest = divmod(left, per_bin)
            if filled:
                runs.append([gpus_per_node - per_bin * need, filled])
            if rest:
                runs.append([gpus_per_node - rest * need, 1])
            nodes += filled + (1 if rest else 0)
    return nodes


def fit_into_runs(runs: list[list[int]], need: int, left: int) -> int:
    """First fit of `left` pods of `need` GPUs into the bins of `runs` ([free GPUs, bins], tried in order; the
    runs are split in place where a run's bins fill differently). Returns the pods that found no bin."""
    i = 0
    while left and i < len(runs):
        free, bins = runs[i]
        per_bin = free // need
        if per_bin == 0:
            i += 1
            continue
        filled = min(bins, left // per_bin)  # bins that take per_bin pods each
        if filled == bins:
            runs[i][0] = free - per_bin * need
            left -= per_bin * bins
            i += 1
            continue
        rest = left - filled * per_bin  # < per_bin: one more bin takes them, the run's other bins none
        split = [[free - per_bin * need, filled]] if filled else []
        if rest:
            split.append([free - rest * need, 1])
        untouched = bins - filled - (1 if rest else 0)
        if untouched:
            split.append([free, untouched])
        runs[i : i + 1] = split
        left = 0
    return left
