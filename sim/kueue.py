"""Kueue as the simulator reads it: what a pool's ClusterQueue lends and borrows under the stack's plan
(`PoolSharing`, `sharing_of`: config/scheduling.py `plan(cfg)`), and Kueue's decisions on the simulated pools
(Kueue v0.19.2): where a waiting job is admitted (`choose`: its queue's flavors in order, by quota alone; the room
it may borrow, `borrow_room`), and which workloads are evicted to make room: the candidates in Kueue's order
(`candidate`, `candidates_in_order`, `_fair_sharing_order`), the ONE classic victim search (`classic_victims`:
taken until the preemptor fits, then given back in reverse where it still fits) that an owner's reclaim runs for
a job (`reclaim_targets`) and for a demand series (sim/environment.py EnvSeriesWorkload.admit), and fair
sharing's search among borrowers (`fair_borrow_targets`). Each function decides without changing anything; the
workloads of sim/environment.py apply the choice (EnvJobsWorkload.admit_choice, kueue_evict). Nothing here
imports sim.environment: the workload and its PoolSim are read through what they hold (job arrays, quota, the
floor's admitted workloads, the environment's shares).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from config.config_terms import FairSharingPreemption
from config.scheduling import FLOOR, plan


RECLAIM, WITHIN = "reclaim", "within"  # why Kueue evicts: for another queue's quota, for its own queue's priority
ELASTIC_FLAVOR = "elastic"  # a job admitted to its pool's elastic flavor (EnvJobsWorkload.admitted_to)


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
    apply to a reclaim. `cands`: sorted (key, workload, job, why, borrowed) as `candidate` builds them."""
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


def candidate(w, j: int, why: str) -> tuple:
    """Job j of workload `w` as a preemption candidate: (key, workload, job, why, borrowed). `borrowed`: it holds
    quota another queue lends (a reclaim, `why` RECLAIM), else its own queue's (WITHIN). The key sorts as Kueue
    v0.19.2 pkg/scheduler/preemption/common/ordering.go `CandidatesOrdering`: other queues' workloads first, then
    lowest priority, then most recently admitted; the pool's name and the job make the order total."""
    borrowed = why == RECLAIM
    return ((0 if borrowed else 1, w.job_priority(j), -w.admitted_at[j], w.sim.spec.name, j), w, j, why, borrowed)


def candidates_in_order(cands: list, fair_sharing: bool) -> list:
    """The candidates in the order Kueue takes them: `CandidatesOrdering` (their keys), and under fair sharing
    queue by queue, highest share first (`_fair_sharing_order`). The one ordering of every reclaim, a job's or a
    demand series'."""
    cands.sort(key=lambda c: c[0])
    if fair_sharing:
        cands = _fair_sharing_order(cands)
    return cands


def classic_victims(cands: list, own: int, lent: int, fits: Callable[[int, int], bool]) -> list:
    """Kueue's classic victim search (v0.19.2 pkg/scheduler/preemption/preemption.go `classicalPreemptions`,
    `fillBackWorkloads`) on one floor flavor whose quota the owner holds `own` of and lends `lent` of: the
    candidates, in order, are taken until `fits(own, lent)` holds with them out (a borrowed candidate frees lent
    quota, the owner's own frees own quota), then each is given back, in reverse order, where it still fits.
    The targets (candidates as given), or [] when all of them do not make it fit."""
    targets = []
    for c in cands:
        g_c = c[1].gpus[c[2]]
        if c[4]:
            lent -= g_c
        else:
            own -= g_c
        targets.append(c)
        if fits(own, lent):
            break
    else:
        return []
    for c in reversed(targets[:-1]):  # fillBackWorkloads
        g_c = c[1].gpus[c[2]]
        own2, lent2 = (own, lent + g_c) if c[4] else (own + g_c, lent)
        if fits(own2, lent2):
            targets.remove(c)
            own, lent = own2, lent2
    return targets


def choose(workload, i: int, borrowing: bool):
    """Where job i of `workload` (sim/environment.py EnvJobsWorkload: its job arrays, quota held and lenders)
    goes through its queue's flavors, without changing anything: (flavor, Kueue eviction targets, whether it
    borrows), False deferred to the borrowing round, None no flavor has room. The workload applies it
    (`admit_choice`)."""
    sim, g, prod = workload.sim, workload.gpus[i], workload.is_production(i)
    if sim.floor_gpus:
        if workload.own_nominal(i):
            if g <= sim.floor_gpus - sim.quota_own - sim.quota_lent:
                return sim, [], False
            targets = reclaim_targets(workload, i)
            if targets:
                return sim, targets, False
        elif borrow_room(workload, sim) >= g:
            return (sim, [], True) if borrowing else False
        elif sim.env.fair_sharing:
            targets = fair_borrow_targets(workload, i, sim)
            if targets:
                return (sim, targets, True) if borrowing else False
    if not prod:
        # fair_borrow_targets' early exit, asked here first: the preemptor's share is the same on every floor, and
        # most floors have no borrower above it (a call per floor per head grew with pools x floors; issue 41)
        share = sim.env.weighted_share(sim.spec.name, workload.borrowed_quota() + g) if sim.env.fair_sharing else 0.0
        for lender, _ in workload.lenders:
            if borrow_room(workload, lender) >= g:
                return (lender, [], True) if borrowing else False
            # Under fair sharing a borrower may preempt other borrowers of this floor (canPreemptWhileBorrowing);
            # whenCanPreempt MayStopSearch stops here when victims are found, else the next flavor is tried.
            if sim.env.fair_sharing and holds_more_than(lender, workload, share):
                targets = fair_borrow_targets(workload, i, lender)
                if targets:
                    return (lender, targets, True) if borrowing else False
    elastic = workload.elastic_flavor(prod)
    if elastic is not None and workload.elastic_admitted.get(elastic[0], 0) + g <= elastic[1]:
        return ELASTIC_FLAVOR, [], False
    return None


def borrow_room(workload, lender) -> int:
    """GPUs of the lender's floor quota this queue may still borrow: the floor's unused quota, within its
    lendingLimit and this queue's borrowingLimit (own floor of a pool with a production queue: no limit of its
    own)."""
    env = workload.sim.env
    room = min(lender.floor_gpus - lender.quota_own - lender.quota_lent, lender.lending_limit_gpus - lender.quota_lent)
    if lender is not workload.sim:
        limit = env.sharing[workload.sim.spec.name].borrowing_limit_gpus.get(lender.spec.name)
        if limit is not None:
            room = min(room, limit - workload.quota_borrowed.get(lender.spec.name, 0))
    return room


def holds_more_than(lender, workload, share: float) -> bool:
    """Whether a queue other than `workload`'s borrows `lender`'s floor at a weighted share above `share`
    (Environment.weighted_share): the necessary condition of either fair-sharing strategy on that floor. Read from
    the floor's two highest borrower shares, recomputed only when some queue's borrowed quota or the cohort's
    lendable quota changed since (Environment.share_epoch): a tournament asks it for every head and every floor
    in between admissions (issue 41)."""
    env = lender.env
    key = (env.share_epoch, env.cohort_lendable_gpus)
    cached = lender.borrower_shares
    if cached is None or cached[0] != key:
        top_w, top, second = None, -math.inf, -math.inf
        for w in lender.borrowers:
            s = env.weighted_share(w.sim.spec.name, w.borrowed_quota())
            if s > top:
                top_w, top, second = w, s, top
            elif s > second:
                second = s
        cached = lender.borrower_shares = (key, top_w, top, second)
    _, top_w, top, second = cached
    return (second if top_w is workload else top) > share


def reclaim_targets(workload, i: int) -> list:
    """Kueue's classic preemption for job i on its own floor flavor (Kueue v0.19.2 pkg/scheduler/preemption/
    preemption.go `findCandidates`, `classicalPreemptions`, `fillBackWorkloads`; common/ordering.go
    `CandidatesOrdering`): candidates are the workloads admitted to the floor by queues that borrow it
    (reclaimWithinCohort: Any, only while job i fits its queue's nominal quota) and, where the queue has
    withinClusterQueue: LowerPriority, its own lower-priority workloads on the floor; ordered other queues
    first, lowest priority first, most recently admitted first; taken until job i fits the quota, then each
    given back, in reverse order, if it still fits. By quota alone: nodes are not looked at. [] if it cannot
    fit. Each target: (workload, job, "reclaim" | "within")."""
    sim, g = workload.sim, workload.gpus[i]
    nominal = sim.floor_gpus
    prio = workload.job_priority(i)
    reclaim = sim.quota_own + g <= nominal and sim.quota_lent > 0
    cands = []
    for w, j, borrowed in sim.floor_admitted.values():
        if borrowed and reclaim:
            cands.append(candidate(w, j, RECLAIM))
        elif not borrowed and w is workload and workload.within_lower_priority and w.job_priority(j) < prio:
            cands.append(candidate(w, j, WITHIN))
    if not cands:
        return []
    cands = candidates_in_order(cands, sim.env.fair_sharing)

    def fits(own_use: int, lent_use: int) -> bool:
        return own_use + g <= nominal and g <= nominal - own_use - lent_use

    targets = classic_victims(cands, sim.quota_own, sim.quota_lent, fits)
    return [(c[1], c[2], c[3]) for c in targets]


def fair_borrow_targets(workload, i: int, lender) -> list:
    """Kueue's fair-sharing preemption for job i, which would borrow `lender`'s floor flavor but does not fit its
    unused quota (Kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go:1371 `fitsResourceQuota` and
    :1382 `canPreemptWhileBorrowing`: with fair sharing on and reclaimWithinCohort not Never a borrowing
    workload may preempt, whatever borrowWithinCohort says; pkg/scheduler/preemption/preemption.go:534
    `fairPreemptions`). The shipped settings: reclaimWithinCohort Any, so the candidates are every workload
    other ClusterQueues hold on this flavor while they borrow it (preemption.go:631 `findCandidates`, any
    priority: common/preemption_policy.go:49); the borrower's own queue has withinClusterQueue Never (a
    production-tier queue, the only one with LowerPriority, borrows nothing). The strategies are the shipped
    scheduling.kueue.fair_sharing_preemption_strategies (Environment.fair_sharing_strategies; preemption.go:363
    `parseStrategies`):
    1. (preemption.go:382 `runFirstFsStrategy`, the first strategy) again and again the candidates' queue of
       highest share (fairsharing/ordering.go:144 `nextTarget`; a tie goes to the queue whose next candidate
       comes first in common/ordering.go `CandidatesOrdering`: lowest priority, most recently admitted); its
       candidates in that order: one is taken if it passes the strategy, LessThanOrEqualToFinalShare (S2-a:
       the preemptor's share with job i is at most that queue's share without it, fairsharing/strategy.go:41)
       or LessThanInitialShare (S2-b: strictly below the queue's share now, strategy.go:46); once taken, the
       queue is chosen again; one that fails waits for step 2;
    2. only with a second strategy (Kueue accepts only LessThanInitialShare there: pkg/config/validation.go:
       385-396; preemption.go:557-565 `fairPreemptions`), (preemption.go:499 `runSecondFsStrategy`, S2-b) over
       the candidates step 1 left, queue by queue in the same order: the queue's first one is taken if the
       preemptor's share with job i is strictly below the queue's share now, and the queue is dropped either way;
    until job i fits the flavor's unused quota; then each target is given back, in reverse order, where it
    still fits (`fillBackWorkloads`). Shares as Environment.weighted_share. [] if job i cannot take more of
    the flavor (past the lendingLimit or its borrowingLimit: NoFit) or no victims make it fit (the next
    flavor is tried). Each target: (workload, job, "reclaim")."""
    sim, g = workload.sim, workload.gpus[i]
    env = sim.env
    name = lender.spec.name
    limit = env.sharing[sim.spec.name].borrowing_limit_gpus.get(name) if lender is not sim else None
    held = workload.quota_borrowed.get(name, 0)
    # potentialAvailable (pkg/cache/scheduler/resource_node.go:129): the cohort's lendable quota of the flavor,
    # within this queue's borrowingLimit; a request past it is NoFit, no preemption is tried
    if held + g > (lender.lending_limit_gpus if limit is None else min(lender.lending_limit_gpus, limit)):
        return []
    preemptor_share = env.weighted_share(sim.spec.name, workload.borrowed_quota() + g)
    # neither strategy can pass without a target queue above the preemptor's share: checked on the floor's
    # borrowers before its admissions are gone through (the candidates' queues are exactly those borrowers)
    if not holds_more_than(lender, workload, preemptor_share):
        return []
    queues: dict[int, list] = {}
    for w, j, borrowed in lender.floor_admitted.values():
        if borrowed and w is not workload:
            queues.setdefault(id(w), []).append(candidate(w, j, RECLAIM))  # CandidatesOrdering within each queue
    share = {k: env.weighted_share(q[0][1].sim.spec.name, q[0][1].borrowed_quota()) for k, q in queues.items()}
    borrowed = {k: q[0][1].borrowed_quota() for k, q in queues.items()}
    for q in queues.values():
        q.sort(key=lambda c: c[0])
    lent = lender.quota_lent

    def fits(lent_now: int) -> bool:  # workloadFits: job i within the flavor's unused quota, its own usage out
        room = min(lender.floor_gpus - lender.quota_own - lent_now, lender.lending_limit_gpus - lent_now)
        return g <= (room if limit is None else min(room, limit - held))

    def next_queue(live: dict):  # nextTarget: queues that no longer borrow or have no candidates are pruned
        best = None
        for k in list(live):
            if not live[k] or borrowed[k] <= 0:
                del live[k]
                continue
            rank = (-share[k], live[k][0][0])
            if best is None or rank < best[0]:
                best = (rank, k)
        return None if best is None else best[1]

    def take(k: int, c) -> None:
        nonlocal lent
        g_c = c[1].gpus[c[2]]
        borrowed[k] -= g_c
        share[k] = env.weighted_share(c[1].sim.spec.name, borrowed[k])
        lent -= g_c
        targets.append(c)

    targets: list = []
    retry: dict[int, list] = {}
    live = dict(queues)
    done = False
    final_share_first = env.fair_sharing_strategies[0] == FairSharingPreemption.less_than_or_equal_to_final_share
    while not done and (k := next_queue(live)) is not None:
        while live[k]:
            c = live[k].pop(0)
            if final_share_first:  # LessThanOrEqualToFinalShare
                passed = preemptor_share <= env.weighted_share(c[1].sim.spec.name, borrowed[k] - c[1].gpus[c[2]])
            else:  # LessThanInitialShare
                passed = preemptor_share < share[k]
            if passed:
                take(k, c)
                done = fits(lent)
                break  # the shares moved: pick the queue again
            retry.setdefault(k, []).append(c)
    while not done and len(env.fair_sharing_strategies) > 1 and (k := next_queue(retry)) is not None:
        c = retry[k].pop(0)
        if preemptor_share < share[k]:  # LessThanInitialShare
            take(k, c)
            done = fits(lent)
        del retry[k]  # DropQueue: once per queue
    if not done:
        return []
    for c in reversed(targets[:-1]):  # fillBackWorkloads
        g_c = c[1].gpus[c[2]]
        if fits(lent + g_c):
            targets.remove(c)
            lent += g_c
    return [(c[1], c[2], "reclaim") for c in targets]


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
