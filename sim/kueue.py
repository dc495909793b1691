"""Kueue as the simulator reads it: what a pool's ClusterQueue lends and borrows under the stack's plan
(`PoolSharing`, `sharing_of`: config/scheduling.py `plan(cfg)`) and the victim order of a reclaim under fair
sharing (`_fair_sharing_order`, Kueue v0.19.2). Admission and the victim search itself stay methods of
sim/environment.py's EnvJobsWorkload (`admit`, `_kueue_targets`): they read and change the pool's workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from config.scheduling import FLOOR, plan


@dataclass(frozen=True)
class PoolSharing:
    """What a pool's ClusterQueue lends and borrows, in simulated GPUs (device-plugin units / time-slicing)."""

    lendable_gpus: int  # of its own floor: the lendingLimit (or the whole nominal quota when none is set)
    lenders: tuple[str, ...]  # pools whose floor flavors its queue lists, in the queue's flavor order
    borrowing_limit_gpus: dict[str, int | None] = field(default_factory=dict)  # per lender; None: no limit
    fair_share_weight: float = 1.0  # its ClusterQueue's spec.fairSharing.weight (config/scheduling.py)


def sharing_of(cfg) -> dict[str, PoolSharing]:
    """Read `plan(cfg)`: a pool borrows exactly the floor flavors its queue lists (nominal 0), within the
    borrowingLimit of that entry; it lends its floor flavor's lendingLimit. Kueue off: nothing is shared."""
    if not cfg.scheduling.kueue.enabled:
        return {p.name: PoolSharing(0, ()) for p in cfg.pools}
    p = plan(cfg)
    units = cfg.gpu_operator.time_slicing_replicas or 1
    flavors = {f.name: f for f in p.flavors}
    out: dict[str, PoolSharing] = {}
    found: dict[str, tuple[list, list, dict]] = {}
    weights: dict[str, float] = {}
    for q in p.queues:  # a pool's queue, then its production queue where it has one (both read)
        lendable, lenders, limits = found.setdefault(q.pool, ([0], [], {}))
        weights.setdefault(q.pool, q.fair_share_weight)  # the queue that borrows (the team's weight, both alike)
        for entry in q.flavors:
            f = flavors[entry.flavor]
            if f.kind != FLOOR:
                continue
            if f.pool == q.pool:
                if entry.nominal_gpus:  # the queue that holds the floor's quota (its production queue if any)
                    lend = entry.nominal_gpus if entry.lending_limit_gpus is None else entry.lending_limit_gpus
                    lendable[0] = lend // units
            else:
                lenders.append(f.pool)
                lim = entry.borrowing_limit_gpus
                limits[f.pool] = None if lim is None else lim // units
    for name, (lendable, lenders, limits) in found.items():
        out[name] = PoolSharing(lendable[0], tuple(lenders), limits, weights[name])
    return out


def _fair_sharing_order(cands: list) -> list:
    """Kueue's victim order under fair sharing (v0.19.2 pkg/scheduler/preemption/fairsharing/ordering.go
    `nextTarget`, used by preemption.go `runFirstFsStrategy`): again and again the candidates' ClusterQueue of
    highest share (Environment.weighted_share, recomputed as its workloads are taken; ties: the one whose next
    candidate comes first in CandidatesOrdering), its next candidate in CandidatesOrdering. The preemptor's own
    queue (its lower-priority workloads) borrows nothing: share 0, last. An owner within its nominal quota
    preempts whatever it takes (feature FairSharingPreemptWithinNominal, on by default), so the strategies do not
    apply to a reclaim. `cands`: sorted (key, workload, job, why, borrowed) as `_kueue_targets` builds them."""
    groups: dict[tuple[int, bool], list] = {}
    for c in cands:
        groups.setdefault((id(c[1]), c[4]), []).append(c)
    borrowed = {key: (group[0][1].borrowed_quota() if key[1] else 0) for key, group in groups.items()}
    out = []
    while groups:

        def rank(key):
            w = groups[key][0][1]
            return (-w.sim.env.weighted_share(w.sim.spec.name, borrowed[key]), groups[key][0][0])

        key = min(groups, key=rank)
        c = groups[key].pop(0)
        out.append(c)
        if key[1]:
            borrowed[key] -= c[1].gpus[c[2]]
        if not groups[key]:
            del groups[key]
    return out


def elastic_lendable_gpus(cfg) -> int:
    """The elastic part of the cohort's lendable quota (Kueue v0.19.2 pkg/cache/scheduler/fair_sharing.go:186
    `calculateLendable`: each queue's nominal quota within its lendingLimit): the non-floor flavors' nominal GPUs
    within their lendingLimit, in the plan's GPUs (Environment divides by the time-slicing replicas)."""
    if not cfg.scheduling.kueue.enabled:
        return 0
    kueue_plan = plan(cfg)
    kinds = {f.name: f.kind for f in kueue_plan.flavors}
    lendable = 0
    for q in kueue_plan.queues:
        for entry in q.flavors:
            if kinds[entry.flavor] != FLOOR and entry.nominal_gpus:
                lend = entry.lending_limit_gpus
                lendable += entry.nominal_gpus if lend is None else min(entry.nominal_gpus, lend)
    return lendable
