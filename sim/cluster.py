"""The simulated cluster's placement side: what the bin packing of pending pods onto nodes needs (the Karpenter
baseline's provisioner, `new_nodes_needed`, `new_claims`) and what waiting gangs (multi-node jobs placed
all-or-nothing by the scheduler) hold (`GangHoldMeter`), and kube-scheduler's preemption of lower-priority pods
for a pod pinned to a floor (`scheduler_victims`: it reads the environment's workloads and nodes through what they
hold, so it imports none of them). Stdlib and policy/packing.py only.

The Karpenter baseline's bin packing: pending pods onto the free GPUs of existing nodes, then onto new nodes.

The same first fit decreasing over runs of equal bins as our engine (policy/packing.py); what the baseline adds
is what Karpenter's provisioner sees and our pack_pods does not: the free GPUs of existing and in-flight nodes,
and multi-node jobs that take whole nodes.

What waiting gangs cost: GPU-minutes of elastic nodes held for multi-node jobs that cannot start yet.

A job larger than a node is a gang (sim/engine.py JobsWorkload): it starts only with all its k pods placed, each
on a whole free node. Until then the nodes that did arrive for it are ready, paid and empty. After the
scheduler's pass at minute t, a pending gang and an empty ready node coexist only when the gang needs more whole
nodes than are free (a pending single-node job would have taken the empty node), so every such empty node is
waiting for a gang. Counted per minute:

    held = min(empty ready elastic nodes not under a spot notice, whole nodes the pending gangs need)

times the node's GPUs; nothing while no gang is pending. The floor is not counted (paid whatever the policy
does). The meter reads the state the minute ends with (after the policy's tick and the second scheduling pass),
the state billing charges the minute at; skipped quiet minutes repeat it (Simulation._skip).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from policy.packing import first_fit_runs, fit_into_runs


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
        left = fit_into_runs(runs, need, pending[need])
        if claim_per_pod:
            if left:
                claims[need] = claims.get(need, 0) + left
            continue
        left = fit_into_runs(new, need, left)
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


class GangHoldMeter:
    """GPU-minutes of elastic nodes held for pending gangs (`held_gpu_minutes`), and the minutes any gang
    waited with such a node held (`minutes_with_held_nodes`)."""

    __slots__ = ("sim", "floor_group", "held_gpu_minutes", "minutes_with_held_nodes", "_held_gpus")

    def __init__(self, sim, floor_group: str):
        self.sim = sim
        self.floor_group = floor_group  # sim/engine.py's GUARANTEED (passed in: the engine imports this module)
        self.held_gpu_minutes = 0
        self.minutes_with_held_nodes = 0
        self._held_gpus = 0  # what the last metered minute held: a skipped quiet minute repeats it

    def _gang_nodes_pending(self) -> int:
        queues = getattr(self.sim.workload, "queues", None)
        if not queues:
            return 0
        gpn = self.sim.spec.gpus_per_node
        return sum(-(-size // gpn) * len(q) for size, q in queues.items() if size > gpn and q)

    def tick(self, now: int) -> None:
        self._held_gpus = 0
        wanted = self._gang_nodes_pending()
        if wanted:
            empty = [
                n.gpus
                for n in self.sim.nodes.values()
                if n.group != self.floor_group and n.busy == 0 and not n.warned and n.ready_at <= now
            ]
            self._held_gpus = sum(sorted(empty, reverse=True)[:wanted])
        self.repeat(1)

    def repeat(self, minutes: int) -> None:
        if self._held_gpus:
            self.held_gpu_minutes += self._held_gpus * minutes
            self.minutes_with_held_nodes += minutes


# --- kube-scheduler's preemption of lower-priority pods on a floor (issue 36) ---


def scheduler_victims(workload, i: int, nodes: list):
    """kube-scheduler's default preemption for job i's pod(s) pinned to these floor nodes (kubernetes
    pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go `SelectVictimsOnNode`: every
    lower-priority pod is removed, then as many as possible are reprieved, the most important first, while the
    pod still fits; pkg/scheduler/framework/preemption/preemption.go `pickOneNodeForPreemption`: the node whose
    highest victim priority is lowest, then the lowest sum of victim priorities, then the fewest victims, then
    the latest start among the highest-priority victims). A gang needs whole nodes: each of its pods takes a
    node whose pods are all of lower priority. (nodes, [(workload, job)]) or None.

    Where kube-scheduler leaves the choice open, the simulator breaks the tie by the pods' identity, never by
    the order they sit on the node: `SelectVictimsOnNode` sorts the node's pods with `sort.Slice` (not stable) by
    `MoreImportantPod` (pkg/scheduler/util/utils.go: higher priority, then the earlier `GetPodStartTime`), so
    pods equal on both keep the order of the node's pod list, i.e. the order they were bound. Here two pods of
    one priority that started the same minute are ranked by job index, then by pool name (job indices repeat
    across pools); before 2026-12-06 the second key was the order of `n.jobs`, a set whose order follows the
    history of binds and string hashes, and skipping quiet minutes could change which of two such pods of
    different pools was preempted (issue 41). The victims come back in that order too."""
    g, prio = workload.gpus[i], workload.job_priority(i)
    gpn = workload.admitted_to[i].spec.gpus_per_node
    env = workload.sim.env

    def pods_on(n):
        out = []
        for key in n.jobs:
            w, j = (
                (env.pools[key[0]].workload, key[1])
                if isinstance(key, tuple)
                else (env.floor_owner[id(n)].workload, key)
            )
            used = next(u for m, u in w.on_nodes[j] if m is n)
            out.append((w.job_priority(j), w.run_start[j], used, w, j, w.sim.spec.name))
        # most important first (`MoreImportantPod`), ties by identity: the same order whatever the binding history
        out.sort(key=lambda p: (-p[0], p[1], p[4], p[5]))
        return out

    if g > gpn:
        return _scheduler_gang_victims(workload, i, nodes, pods_on)
    best = None
    for n in nodes:
        pods = pods_on(n)
        lower = [p for p in pods if p[0] < prio]
        have = n.gpus - n.busy + sum(p[2] for p in lower)
        if have < g:
            continue
        victims = []
        for p in lower:  # most important first (pods_on's order): reprieve
            if have - p[2] >= g:
                have -= p[2]
            else:
                victims.append(p)
        if not victims:
            continue  # fits without preemption: not this pass's case
        top = max(p[0] for p in victims)
        latest = max(p[1] for p in victims if p[0] == top)
        key = (top, sum(p[0] for p in victims), len(victims), -latest, n.serial)
        if best is None or key < best[0]:
            best = (key, n, victims)
    return None if best is None else ([best[1]], [(p[3], p[4]) for p in best[2]])


def _scheduler_gang_victims(workload, i: int, nodes: list, pods_on):
    """A gang's pods each need a whole node: the nodes whose pods are all of lower priority, ranked as
    `pickOneNodeForPreemption` ranks them (empty nodes first)."""
    g, prio = workload.gpus[i], workload.job_priority(i)
    k = -(-g // workload.admitted_to[i].spec.gpus_per_node)
    ranked = []
    for n in nodes:
        pods = pods_on(n)
        if any(p[0] >= prio for p in pods):
            continue
        top = max((p[0] for p in pods), default=-math.inf)
        ranked.append(((top, sum(p[0] for p in pods), len(pods), n.serial), n, pods))
    if len(ranked) < k:
        return None
    ranked.sort(key=lambda r: r[0])
    chosen = ranked[:k]
    return [r[1] for r in chosen], [(p[3], p[4]) for r in chosen for p in r[2]]
