"""Right-sized nodes: a pool whose instance types come in several sizes (GPUs per node), each size its own spot and
on-demand managed node group (an EKS managed node group holds one instance shape: docs/aws-rules.md).

The engine decides such a pool one size at a time, with every rule it has for a one-size pool (budget cap and
drain, step limit, group max, spot fallback, back to spot, gangs, idle reclaim, keep warm, warm-up), after this
module has said which pending pods each size is to serve:

1. Pods that fit the nodes already on their way (desired but not yet in service) are counted against those first,
   smallest nodes first, first fit decreasing: a node launched last tick is not bought twice.
2. The rest are packed first fit, decreasing, onto new nodes; each new node's size is the one with the lowest
   hourly price per GPU actually used by the pods that first fit puts on it (price per fitted GPU). A size's price is
   its spot group's (spot before on-demand, as for a one-size pool), its on-demand group's without spot. A size whose
   groups are at their max is not chosen while another has room.
3. Gangs (policy/gangs.py) go whole to the largest size: their pods were split for whole nodes.

Each size is then decided as a pool of its own groups, nodes and pods (`split`), sharing the pool's budget scopes, so
a budget headroom one size spends is gone for the next; the decisions are merged into the pool's one decision.
Unknown pending pods stay unknown for every size (hold, never shrink). Floor nodes, arrivals and the daily rhythm
(the keep-warm and warm-up rules) go with the largest size, so only nodes of that size are kept warm.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from policy.decide.bound import group_max  # a cycle: decide/ reads this module at call time only
from policy.model import LIFECYCLE_IN_SERVICE, PoolDecision, PoolObservation, PoolSettings
from policy.terms import Reason


@dataclass(frozen=True)
class SizeChoice:
    """A node size the pending pods may be given: its GPUs, its hourly price per node (the group it would grow) and
    how many more nodes its groups may add."""

    gpus_per_node: int
    usd_per_hour: float
    room_nodes: int


def fill_one_node(counts: Counter, gpus: int) -> dict[int, int]:
    """First fit, decreasing, of the pods `counts` (GPUs per pod -> pods) onto one empty node of `gpus` GPUs:
    GPUs per pod -> pods placed."""
    free = gpus
    taken: dict[int, int] = {}
    for need in sorted(counts, reverse=True):
        if need <= 0 or counts[need] <= 0 or need > free:
            continue
        k = min(counts[need], free // need)
        if k:
            taken[need] = k
            free -= k * need
    return taken


def choose_new_nodes(pod_gpus: Counter, sizes: list[SizeChoice]) -> tuple[dict[int, Counter], dict[int, int]]:
    """Pack `pod_gpus` onto new nodes, first fit decreasing, each node of the size with the lowest price per GPU its
    pods use. Returns (pods given to each size, new nodes of each size). Pods larger than every size are given to
    the largest (its decision reports them as never fitting); pods no size has room for, to the cheapest size that
    fits them per GPU of the pod alone (its decision reports AT_MAX)."""
    left = Counter({g: n for g, n in pod_gpus.items() if g > 0 and n > 0})
    given: dict[int, Counter] = {s.gpus_per_node: Counter() for s in sizes}
    nodes: dict[int, int] = dict.fromkeys(given, 0)
    room = {s.gpus_per_node: s.room_nodes for s in sizes}
    largest = max(given)
    while left:
        biggest = max(left)
        fits = [s for s in sizes if s.gpus_per_node >= biggest]
        if not fits:
            given[largest][biggest] += left.pop(biggest)
            continue
        open_ = [s for s in fits if room[s.gpus_per_node] > 0]
        if not open_:
            best = min(fits, key=lambda s: (s.usd_per_hour / s.gpus_per_node, s.gpus_per_node))
            for g, n in left.items():
                if g <= best.gpus_per_node:
                    given[best.gpus_per_node][g] += n
                elif g <= largest:
                    given[largest][g] += n
            return given, nodes
        fills = {s.gpus_per_node: fill_one_node(left, s.gpus_per_node) for s in open_}
        best = min(
            open_,
            key=lambda s: (s.usd_per_hour / sum(g * k for g, k in fills[s.gpus_per_node].items()), s.gpus_per_node),
        )
        taken = fills[best.gpus_per_node]
        # The same choice repeats while no size's first fit changes, which holds while every pod size has at
        # least what any size's node would take of it with pods to spare. Take those repeats in one step
        # (thousands of pending pods of a few sizes after a spot outage).
        plenty = Counter({g: 1 << 40 for g in left})
        unlimited = [fill_one_node(plenty, s.gpus_per_node) for s in open_]
        most = {g: max(f.get(g, 0) for f in unlimited) for g in left}
        repeats = 1
        if all(left[g] >= most[g] for g in left):
            repeats = 1 + min((left[g] - most[g]) // taken[g] for g in taken)
        repeats = max(1, min(repeats, room[best.gpus_per_node]))
        for g, k in taken.items():
            given[best.gpus_per_node][g] += k * repeats
            left[g] -= k * repeats
            if left[g] <= 0:
                del left[g]
        nodes[best.gpus_per_node] += repeats
        room[best.gpus_per_node] -= repeats
    return given, nodes


def size_pools(ps: PoolSettings) -> list[PoolSettings]:
    """One PoolSettings per size, smallest first, each with only its own groups (and no other_sizes)."""
    out = [replace(ps, other_sizes=())]
    for s in ps.other_sizes:
        out.append(
            replace(
                ps,
                other_sizes=(),
                gpus_per_node=s.gpus_per_node,
                spot_group=s.spot_group,
                on_demand_group=s.on_demand_group,
                spot_max_nodes=s.spot_max_nodes,
                on_demand_max_nodes=s.on_demand_max_nodes,
                spot_usd_per_hour=s.spot_usd_per_hour,
                on_demand_usd_per_hour=s.on_demand_usd_per_hour,
            )
        )
    return sorted(out, key=lambda p: p.gpus_per_node)


def _choice(sp: PoolSettings, po: PoolObservation) -> SizeChoice:
    room = 0
    for gname in sp.elastic_groups:
        g = po.group(gname)
        room += max(0, group_max(sp, gname, g) - (g.desired_nodes if g is not None else 0))
    price = sp.spot_usd_per_hour if sp.spot_group else sp.on_demand_usd_per_hour
    return SizeChoice(sp.gpus_per_node, price, room)


def _coming_nodes(sp: PoolSettings, po: PoolObservation) -> int:
    """Nodes of this size asked for and not yet in service (booting, or not launched yet)."""
    in_service = Counter(n.group for n in po.nodes if n.lifecycle == LIFECYCLE_IN_SERVICE)
    coming = 0
    for gname in sp.elastic_groups:
        g = po.group(gname)
        if g is not None:
            coming += max(0, g.desired_nodes - in_service[gname])
    return coming


def assign_pending(pools: list[PoolSettings], po: PoolObservation) -> dict[int, tuple[int, ...]] | None:
    """Pending pods given to each size (GPUs per node -> the GPUs of its pods); None when pending pods are unknown.
    Gang pods go to the largest size; the others first to the nodes on their way, then to new nodes by price per
    fitted GPU (choose_new_nodes)."""
    if po.pending_pod_gpus is None:
        return None
    largest = pools[-1].gpus_per_node
    pending = Counter(p for p in po.pending_pod_gpus if p > 0)
    out: dict[int, Counter] = {sp.gpus_per_node: Counter() for sp in pools}
    for gang in po.pending_gangs:
        for p in gang.pod_gpus:
            if p > 0 and pending[p] > 0:
                pending[p] -= 1
                out[largest][p] += 1
    pending = +pending
    # 1. the nodes on their way, smallest first: each an empty bin of its size
    bins = [[sp.gpus_per_node, sp.gpus_per_node] for sp in pools for _ in range(_coming_nodes(sp, po))]
    for need in sorted(pending, reverse=True):
        for b in bins:
            while pending[need] and b[1] >= need:
                b[1] -= need
                pending[need] -= 1
                out[b[0]][need] += 1
    pending = +pending
    # 2. new nodes, by price per fitted GPU
    given, _ = choose_new_nodes(pending, [_choice(sp, po) for sp in pools])
    for gpus, c in given.items():
        out[gpus].update(c)
    return {g: tuple(sorted(c.elements(), reverse=True)) for g, c in out.items()}


def split(ps: PoolSettings, po: PoolObservation) -> list[tuple[PoolSettings, PoolObservation]]:
    """The pool as one (settings, observation) per size, smallest first: each with its own groups, its nodes, the
    pending pods given to it (assign_pending); floor nodes, arrivals, rhythm and gangs with the largest size."""
    pools = size_pools(ps)
    assigned = assign_pending(pools, po)
    largest = pools[-1].gpus_per_node
    off_spot = _off_spot_by_size(pools, po, assigned)
    out = []
    for sp in pools:
        mine = set(sp.elastic_groups)
        is_largest = sp.gpus_per_node == largest
        nodes = tuple(n for n in po.nodes if n.group in mine or (is_largest and n.group not in ps.elastic_groups))
        out.append(
            (
                sp,
                replace(
                    po,
                    groups=tuple(
                        g for g in po.groups if g.name in mine or (is_largest and g.name not in ps.elastic_groups)
                    ),
                    nodes=nodes,
                    pending_pod_gpus=None if assigned is None else assigned[sp.gpus_per_node],
                    arrivals=po.arrivals if is_largest else (() if po.arrivals is not None else None),
                    rhythm_rate_nodes_per_minute=po.rhythm_rate_nodes_per_minute if is_largest else None,
                    floor_quota_gpus=po.floor_quota_gpus if is_largest else None,
                    pending_gangs=po.pending_gangs if is_largest else (),
                    on_demand_only_pod_gpus=off_spot[sp.gpus_per_node],
                ),
            )
        )
    return out


def _off_spot_by_size(
    pools: list[PoolSettings], po: PoolObservation, assigned: dict[int, tuple[int, ...]] | None
) -> dict[int, tuple[int, ...] | None]:
    """The pods that may not run on spot (PoolObservation.on_demand_only_pod_gpus) among each size's pending pods:
    each size's share stays a subset of its own pending pods (policy/off_spot.py holds the pool otherwise), so the
    same pod is never counted by two sizes. Largest size first, where gang pods go."""
    if assigned is None or po.on_demand_only_pod_gpus is None:
        return {sp.gpus_per_node: None for sp in pools}
    left = Counter(p for p in po.on_demand_only_pod_gpus if p > 0)
    out: dict[int, tuple[int, ...] | None] = {}
    for sp in reversed(pools):
        mine = Counter(assigned[sp.gpus_per_node]) & left
        left -= mine
        out[sp.gpus_per_node] = tuple(sorted(mine.elements(), reverse=True))
    return out


def merge(
    ps: PoolSettings, po: PoolObservation, decisions: list[PoolDecision], guaranteed_usd_per_hour: float, hours: float
) -> PoolDecision:
    """The sizes' decisions as the pool's one: their actions (a size with nothing to do says nothing unless no size
    does anything), desired sizes, rates, and the figures recomputed over the whole pool."""
    actions = []
    for d in decisions:
        actions += [a for a in d.actions if a.reason is not Reason.STEADY or a.detail != "nothing to do"]
    if not actions:
        actions = list(decisions[0].actions)
    desired: dict[str, int] = {}
    for d in decisions:
        desired.update(d.desired_after)
    elastic_rate = sum(d.elastic_usd_per_hour for d in decisions)
    mtd = decisions[0].month_to_date_usd
    projected = None if mtd is None else mtd + (elastic_rate + guaranteed_usd_per_hour) * hours
    closed = [d.closed_to_new_pods for d in decisions if d.closed_to_new_pods is not None]
    util_sum: dict[str, float] = {}
    util_n: dict[str, int] = {}
    for n in po.nodes:
        if n.lifecycle == LIFECYCLE_IN_SERVICE and n.avg_utilization_pct is not None:
            tier = "elastic" if n.group in ps.elastic_groups else "guaranteed"
            util_sum[tier] = util_sum.get(tier, 0.0) + n.avg_utilization_pct
            util_n[tier] = util_n.get(tier, 0) + 1
    pending = None if po.pending_pod_gpus is None else sum(p for p in po.pending_pod_gpus if p > 0)
    return PoolDecision(
        ps.name,
        tuple(actions),
        desired_after=desired,
        pending_gpus=pending,
        elastic_usd_per_hour=elastic_rate,
        month_to_date_usd=mtd,
        projected_month_usd=projected,
        fallback_active=any(d.fallback_active for d in decisions),
        utilization_pct={t: util_sum[t] / util_n[t] for t in util_sum},
        closed_to_new_pods=tuple(i for c in closed for i in c) if closed else None,
    )


__all__ = ["SizeChoice", "assign_pending", "choose_new_nodes", "fill_one_node", "merge", "size_pools", "split"]
