"""Pending pods that may not run on spot (docs/policy.md, "Pods that may not run on spot"): their own scale-up signal.

The engine adds nodes for pending pods to the spot group first (rule 4). A pod whose node selection asks for
`gpuloan.io/capacity: on-demand` (or keeps off spot), or that does not tolerate the spot taint, can never land on
those spot nodes (policy/pods.py `on_demand_only`): counted with the rest, it bought spot nodes nobody could use,
kept them idle "for pending pods", and waited until spot happened to be short. So the engine splits the pending
pods once per pool and tick (`split`):
- the pods that may not run on spot (and every pod of a gang with one: a gang starts whole) are packed onto the
  on-demand group directly (policy/decide/on_demand_only.py: the group max, the step, the budget cap and
  UPDATE_IN_PROGRESS as for any scale-up, a gang in one step), or, in a pool without an on-demand group, reported
  (`ON_DEMAND_ONLY`) and never bought spot for;
- the rest go spot-first as before, and only they keep idle spot nodes for pending pods; the idle reclaim may keep
  idle on-demand nodes for the others.
Karpenter does the same with a NodePool of both capacity types: a pod that requires `karpenter.sh/capacity-type:
on-demand` gets an on-demand node, the rest spot (docs/aws-rules.md).

Unknown (None) changes nothing: every pending pod counts spot-first, as before this was read. Data that does not
add up (pods that are not among the pending ones) is reported and ignored the same way. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

from policy.model import Group, PendingGang, PoolObservation


@dataclass(frozen=True)
class OffSpot:
    """This tick's split of a pool's pending pods."""

    pod_gpus: tuple[int, ...]  # the pods that may not run on spot (gangs with one included)
    gangs: tuple[PendingGang, ...]  # the gangs among them
    rest: PoolObservation  # the observation with only the pods that may run on spot pending


def split(po: PoolObservation, spot: Group | None) -> tuple[OffSpot | None, str | None]:
    """(the split, None); (None, None) when there is nothing to split (no spot group, none pending or unknown);
    (None, problem) when the data does not add up."""
    off = po.on_demand_only_pod_gpus
    pending = po.pending_pod_gpus
    if spot is None or not off or pending is None:
        return None, None
    pods = tuple(p for p in off if p > 0)
    if not pods:
        return None, None
    rest = Counter(p for p in pending if p > 0)
    rest.subtract(pods)
    if any(n < 0 for n in rest.values()):
        return None, (
            "pods that may not run on spot that are not among the pending pods: every pending pod "
            "counted spot-first this tick"
        )
    gangs = tuple(g for g in po.pending_gangs if g.on_demand_only)
    rest_po = dataclasses.replace(
        po,
        pending_pod_gpus=tuple(sorted(rest.elements(), reverse=True)),
        pending_gangs=tuple(g for g in po.pending_gangs if not g.on_demand_only),
        on_demand_only_pod_gpus=(),
    )
    return OffSpot(pods, gangs, rest_po), None


def describe(pods: tuple[int, ...]) -> str:
    """'3 pending pod(s) that may not run on spot (2 x 8 GPUs, 1 x 4 GPUs)' for the reasons' details."""
    sizes = ", ".join(f"{n} x {g} GPU{'s' if g != 1 else ''}" for g, n in sorted(Counter(pods).items(), reverse=True))
    return f"{len(pods)} pending pod(s) that may not run on spot ({sizes})"


__all__ = ["OffSpot", "describe", "split"]
