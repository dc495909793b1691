"""A whole environment on one clock: every pool of a stack, its own demand, node groups and controller, with the
Kueue admission the stack's plan configures between them (lending of idle floors, reclaim by preemption).

Public API (what `gpuloan advise` and the benchmarks call):

    simulate_environment(cfg, demands, controller_factory, settings=SimSettings(), horizon_minutes=None,
                         specs=None, window_from_minute=None) -> EnvironmentResult

- `cfg`: a validated GpuLoanConfig. Pools, floors, elastic sizes, tiers, teams, production shares
  (`service_target.production_share_pct`) and the Kueue plan (config/scheduling.py `plan(cfg)`: which queue may
  borrow which floor, lendingLimit, borrowingLimit) all come from it: a config with another floor is simulated
  as is, nothing is deployed. `specs` (pool name -> PoolSpec) replaces the PoolSpec sim/pool.py builds from a
  pool (e.g. auto-sized to a trace); the plan is still read from `cfg`.
- `demands`: pool name -> JobsTrace or SeriesTrace (sim/traces.py), one per pool of `cfg`, all on the same clock
  (minute 0 is the same instant for every pool).
- `controller_factory(spec) -> Controller`: a fresh controller per pool, the same policy for all (e.g.
  `lambda spec: GpuLoan()` or `lambda spec: Karpenter()`).
- `settings`, `horizon_minutes`: as sim.engine.Simulation's (default horizon: the longest pool's).
- `window_from_minute` (optional): the first minute of a report window (the organization advisor's, sim/
  org_advisor.py). The run is the same; the result adds each pool's `window` figures and the environment's
  (`_window_figures`): events in the window, floor use in it, unmet work and waits of the jobs submitted in it.

EnvironmentResult holds `pools` (pool name -> the metrics sim/runner.py reports for one pool, plus the
environment's: production jobs and interruptions, reclaim preemptions and the GPU-hours they lost, floor
GPU-hours used by the owner and lent, GPU-hours borrowed, p95 wait per job class), `environment` (the same
summed, p95 wait per tier, floor utilization owned and lent), `usage` (UsageRecord per hour, pool, instance type
and purchase: the input of the billing model pricing/cost_model/billing.py; `billing.Usage(**asdict(record))`)
and `sims` (pool name -> the Simulation, for samples and inspection).

What is modelled (docs/simulator.md, "An environment"; the Kueue semantics in docs/scheduling.md):
- Clock: minute by minute in lockstep; each pool is processed at the minutes its own quiet-tick proof names
  (as a single-pool Simulation skips), and also at any minute another pool touches it (a job binding to or
  leaving its floor, a reclaim preempting its job, a lender's floor with room for its pending work). The result
  is the minute-by-minute one, and a pool that lends nothing and borrows nothing gives exactly
  sim.engine.Simulation's result (tests/test_environment.py).
- Spot events: each pool has its own common-random-number streams, drawn from the seed and the pool's name
  (`pool_stream`), so every policy and every floor meets the same events in the same pool.
- Job classes: a pool's tier gives the default (production: every job is production; other tiers: none);
  `service_target.production_share_pct` makes that share of the pool's jobs production, picked per job id by a
  seeded hash (stable: the same jobs whatever the floors or the policy). Production jobs never run on spot
  (unless the pool is in scheduling.kueue.production_spot_pools) and never on borrowed capacity, so a reclaim
  never preempts them. A demand series (no jobs) is all production when its share is 100 % (a production
  pool's default), else all interruptible; it fills its own nodes as in a single-pool run.
- Kueue admission, per job, in the order of its ClusterQueue's flavors (`plan(cfg)`): the pool's own floor,
  then the idle floors its queue may borrow (plan order; interruptible jobs only), then its own elastic nodes.
  Borrowing takes a lender's floor GPUs only while (a) the GPUs borrowed from that floor stay within its
  lendingLimit, (b) this queue's GPUs borrowed from that floor stay within its borrowingLimit, and (c) the owner
  has no pending job that fits its own nominal floor quota (Kueue admits a workload that fits without borrowing
  before one that borrows). A gang (a job larger than a node) is admitted to one flavor: all its nodes on the
  own floor, or all on one lender's floor, or on the own nodes as kube-scheduler places it.
  Quota of the pool's own flavors is what its node groups can reach (the plan's rule), so it binds exactly where
  the nodes do; the simulator lets the nodes bind (kube-scheduler's placement of sim/engine.py).
- Reclaim (reclaimWithinCohort: Any, flavorFungibility whenCanPreempt: MayStopSearch): a pending job of the
  owner that fits the owner's nominal floor quota beside the owner's own use, but finds no floor node with room,
  preempts borrowed jobs on that floor: candidates by lowest priority first, then most recently admitted;
  greedily until the job fits, then the set is minimized (Kueue's classic preemption). Unlike Kueue, which picks
  victims by quota alone, the simulator picks them on the node(s) the job then starts on (the node needing the
  fewest borrowed GPUs back; a gang takes whole nodes free of the owner's work): quota-only victims can leave the
  room fragmented (two 1-GPU borrowers on two 4-GPU nodes keep a 4-GPU job off both), which would send the
  owner's work to elastic nodes and charge lending for a scheduler artefact. A preempted job loses the work since
  its last checkpoint and requeues in its original submission order, as after a spot interruption.
- Priority within a production pool (withinClusterQueue: LowerPriority): a ClusterQueue orders its workloads by
  priority, then creation time, and a production pool's queue lets a pending workload preempt lower-priority ones
  of the same queue (Kueue v0.19.2 site/content/en/docs/concepts/cluster_queue.md "Queueing strategy" and
  "Preemption"; workload_priority_class.md "Where workload's priority is used"). Where a production-tier pool
  has a floor and interruptible jobs of its own (production share < 100 %), those run at a lower
  WorkloadPriorityClass than its production jobs: its pending production jobs are admitted first, and one that
  fits the floor beside the production already on it but finds no floor room preempts the pool's interruptible
  jobs on the floor node(s) it then starts on, node-aware as the reclaim (most recently admitted first; the
  fewest GPUs on one node, the set minimized; a gang takes whole floor nodes running no production). They lose
  their work since the last checkpoint and requeue (`priority_preemptions`, `priority_lost_gpu_hours`).
  Everywhere else a pool's own jobs keep their submission order, as in a single-pool run.
Not modelled: series pools lending or borrowing (fluid demand has no jobs to admit: they run on their own
capacity), fair sharing, a borrower's job spanning flavors.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from pricing.sources import catalog
from sim.engine import (
    FILL_RANK,
    GUARANTEED,
    MOST_ALLOCATED,
    ON_DEMAND,
    SPOT,
    JobsWorkload,
    SimNode,
    SimSettings,
    Simulation,
    default_horizon,
)
from sim.pool import PoolError, PoolSpec, demand_profile, spec_from_config
from sim.runner import elastic_oracle_gpu_hours, metrics_of, oracle_gpu_hours, percentile
from sim.traces import JobsTrace
from config.config_terms import Reservation, Tier
from stacks.kubernetes.tenancy import PRIORITY_VALUES
from config.scheduling import FLOOR, plan, production_work_on_spot

# The billing model's purchase kinds (pricing/cost_model/billing.py): a floor is reserved capacity (an ODCR, or a
# fixed node group billed at the same on-demand rate), a Capacity Block its own kind; elastic nodes spot or on-demand.
RESERVED, CAPACITY_BLOCK = "reserved", "capacity_block"
PURCHASE_OF_GROUP = {SPOT: "spot", ON_DEMAND: "on_demand"}
PRODUCTION, INTERRUPTIBLE = "production", "interruptible"


class EnvironmentError(ValueError):
    """An environment that cannot be simulated (a pool without demand, a demand for no pool ...)."""


def pool_stream(seed: int, pool: str) -> str:
    """What a pool's spot interruption and shortage streams are drawn from: the seed and the pool's name."""
    return f"{seed}/{pool}"


# --- the plan, as the simulator reads it -------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolSharing:
    """What a pool's ClusterQueue lends and borrows, in simulated GPUs (device-plugin units / time-slicing)."""

    lendable_gpus: int  # of its own floor: the lendingLimit (or the whole nominal quota when none is set)
    lenders: tuple[str, ...]  # pools whose floor flavors its queue lists, in the queue's flavor order
    borrowing_limit_gpus: dict[str, int | None] = field(default_factory=dict)  # per lender; None: no limit


def sharing_of(cfg) -> dict[str, PoolSharing]:
    """Read `plan(cfg)`: a pool borrows exactly the floor flavors its queue lists (nominal 0), within the
    borrowingLimit of that entry; it lends its floor flavor's lendingLimit. Kueue off: nothing is shared."""
    if not cfg.scheduling.kueue.enabled:
        return {p.name: PoolSharing(0, ()) for p in cfg.pools}
    p = plan(cfg)
    units = cfg.gpu_operator.time_slicing_replicas or 1
    flavors = {f.name: f for f in p.flavors}
    out: dict[str, PoolSharing] = {}
    for q in p.queues:
        lendable, lenders, limits = 0, [], {}
        for entry in q.flavors:
            f = flavors[entry.flavor]
            if f.kind != FLOOR:
                continue
            if f.pool == q.pool:
                lend = entry.nominal_gpus if entry.lending_limit_gpus is None else entry.lending_limit_gpus
                lendable = lend // units
            else:
                lenders.append(f.pool)
                lim = entry.borrowing_limit_gpus
                limits[f.pool] = None if lim is None else lim // units
        out[q.pool] = PoolSharing(lendable, tuple(lenders), limits)
    return out


def production_share_pct(pool) -> float:
    """The pool's production share in percent: its service target's, else 100 for a production-tier pool and 0 for
    the others (the one reading of it: the simulator and the floor advisor)."""
    share = pool.service_target.production_share_pct
    if share is None:
        return 100.0 if pool.tier == Tier.production else 0.0
    return float(share)


def production_flags(trace: JobsTrace, share_pct: float, seed: int, pool: str) -> list[bool] | None:
    """Which jobs are production: a share of the jobs picked by a seeded hash of each job id (stable per job:
    the same jobs whatever the floors or the policy). None when no job is."""
    if share_pct <= 0:
        return None
    if share_pct >= 100:
        return [True] * len(trace.jobs)
    cut = share_pct / 100 * 2 ** 64
    out = []
    for k, j in enumerate(trace.jobs):
        digest = hashlib.blake2b(f"{seed}/{pool}/{j.job_id}/{k}".encode(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "big") < cut)
    return out


def pending_summary(minutes: list[float]) -> dict[str, float | None]:
    """p95, p99 and max of total pending minutes per job (None for no job): what the advisor reports per tier."""
    if not minutes:
        return {"p95_pending_minutes": None, "p99_pending_minutes": None, "max_pending_minutes": None}
    return {"p95_pending_minutes": round(percentile(minutes, 95), 1),
            "p99_pending_minutes": round(percentile(minutes, 99), 1),
            "max_pending_minutes": round(max(minutes), 1)}


# --- one pool inside the environment ---------------------------------------------------------------------------


class PoolSim(Simulation):
    """A Simulation that logs node counts (for hourly usage) and, on a job trace, admits as Kueue does."""

    def __init__(self, env: "Environment", spec: PoolSpec, trace, controller, settings: SimSettings,
                 horizon: int, production: list[bool] | None, production_on_spot: bool, priority: int):
        if spec.sizes:  # the environment's usage and commitment accounting is per SPOT / ON_DEMAND group
            raise PoolError(f"pool {spec.name}: the environment simulator does not model pools of several node sizes "
                            "yet; simulate the pool alone (`gpuloan simulate`, `make bench-sizes`)")
        self.env = env
        self.node_log: list[tuple[int, str, int]] = []  # (minute, group, +1 / -1)
        self.lent_gpus = 0  # GPUs of this pool's floor running other pools' jobs now
        self.floor_nodes: list[SimNode] = []  # never removed (a floor is never terminated)
        self._floor_busy = 0  # GPUs busy on the floor nodes, own and lent
        self.borrowed_jobs: dict = {}  # (id(borrower workload), job) -> (borrower workload, job) on this floor
        self.lent_gpu_minutes = 0
        self._lent_since = 0
        self.priority = priority
        super().__init__(spec, trace, controller, settings, horizon, stream=pool_stream(settings.seed, spec.name))
        self.next_at = 0
        if isinstance(trace, JobsTrace):
            self.workload = EnvJobsWorkload(self, production, production_on_spot)
        self.production_all = production is not None and not isinstance(trace, JobsTrace)

    def _new_node(self, group: str, ready_at: int) -> SimNode:
        node = super()._new_node(group, ready_at)
        self.node_log.append((self.now, group, 1))
        if group == GUARANTEED:
            self.env.floor_owner[id(node)] = self
            self.floor_nodes.append(node)
        return node

    def _remove(self, node: SimNode, spot_reclaim: bool) -> None:
        super()._remove(node, spot_reclaim)
        self.node_log.append((self.now, node.group, -1))

    def change_lent(self, gpus: int) -> None:
        now = self.now
        self.lent_gpu_minutes += self.lent_gpus * (now - self._lent_since)
        self._lent_since = now
        self.lent_gpus += gpus

    @property
    def floor_gpus(self) -> int:
        return self.spec.floor_gpus  # the floor's own size (smaller than the elastic nodes in a multi-size pool)

    def floor_busy(self) -> int:
        return self._floor_busy

    def set_busy(self, node: SimNode, busy: int) -> None:
        if node.group == GUARANTEED:
            self._floor_busy += busy - node.busy
        super().set_busy(node, busy)


class EnvJobsWorkload(JobsWorkload):
    """JobsWorkload with job classes and Kueue's cohort: production jobs wait in their own queues (they may use
    fewer nodes), interruptible jobs may borrow lenders' idle floors, and the owner's reclaim preempts them; in a
    production pool with a floor and interruptible jobs (`priority_within`) production comes first and preempts
    them (module docstring). With no lender, no production job kept off any node and no priority within the pool
    (`plain`) it schedules exactly as JobsWorkload."""

    def __init__(self, sim: PoolSim, production: list[bool] | None, production_on_spot: bool):
        self.production = production
        self.production_on_spot = production_on_spot
        self.prod_queues: dict[int, list] = {}
        self.plain = True
        # A production pool whose jobs are partly interruptible: Kueue admits its production jobs first and lets
        # them preempt its interruptible ones within its ClusterQueue (set by the environment; docstring).
        self.priority_within = False
        super().__init__(sim)
        self.lenders: list[tuple[PoolSim, int | None]] = []  # set by the environment
        self.borrowed: dict[str, int] = {}  # lender -> GPUs this pool's jobs hold on its floor now
        self.borrowed_gpu_minutes = 0
        self.borrowed_now = 0
        self._borrowed_since = 0
        self.lender_of: list = [None] * len(self.gpus)  # the PoolSim whose floor job i runs on, if borrowed
        self.admitted_at = [0] * len(self.gpus)
        self.first_placement: list = [None] * len(self.gpus)  # (pool whose node, node group) of the first start
        self.production_interruptions = 0
        self.reclaim_preemptions = 0
        self.reclaim_lost_gpu_minutes = 0.0
        self.priority_preemptions = 0  # interruptible jobs preempted by this pool's own production jobs
        self.priority_lost_gpu_minutes = 0.0
        self._reclaiming = False
        self._preempting_within = False

    # -- classes --

    def is_production(self, i: int) -> bool:
        return self.production is not None and self.production[i]

    def _enqueue(self, i: int) -> None:
        if not self.plain and self.production is not None and self.production[i]:
            heapq.heappush(self.prod_queues.setdefault(self.gpus[i], []), i)
        else:
            heapq.heappush(self.queues.setdefault(self.gpus[i], []), i)

    def pending_counts(self) -> dict[int, int]:
        out = {size: len(q) for size, q in self.queues.items() if q}
        for size, q in self.prod_queues.items():
            if q:
                out[size] = out.get(size, 0) + len(q)
        return out

    def on_demand_only_pending(self) -> dict[int, int]:
        """Pending pods that may not run on spot (sim/policies.py Karpenter launches on-demand for them)."""
        if self.production_on_spot or not self.sim.spec.has_spot:
            return {}
        return {size: len(q) for size, q in self.prod_queues.items() if q}

    def pending_jobs(self, limit: int) -> list[int]:
        """The first `limit` pending jobs in submission order."""
        qs = [q for q in self.queues.values() if q] + [q for q in self.prod_queues.values() if q]
        if not qs:
            return []
        return heapq.nsmallest(limit, (i for q in qs for i in q))

    # -- binding to nodes, own or borrowed --

    def _bind(self, node: SimNode, i: int, used: int) -> None:
        owner = self.sim.env.floor_owner.get(id(node))
        if owner is None or owner is self.sim:
            super()._bind(node, i, used)
            return
        node.jobs.add((self.sim.spec.name, i))  # a tuple: never equal to the owner's own job indices
        owner.env.wake(owner)
        owner.borrowed_jobs[(id(self), i)] = (self, i)
        owner.change_lent(used)
        owner.set_busy(node, node.busy + used)
        self._change_borrowed(owner.spec.name, used)

    def _unbind(self, node: SimNode, i: int, used: int) -> None:
        owner = self.sim.env.floor_owner.get(id(node))
        if owner is None or owner is self.sim:
            super()._unbind(node, i, used)
            return
        node.jobs.discard((self.sim.spec.name, i))
        owner.env.wake(owner)
        owner.borrowed_jobs.pop((id(self), i), None)
        owner.change_lent(-used)
        owner.set_busy(node, node.busy - used)
        owner.changed = True  # its floor has room again
        self._change_borrowed(owner.spec.name, -used)

    def _change_borrowed(self, lender: str, gpus: int) -> None:
        self._settle_borrowed()
        self.borrowed_now += gpus
        self.borrowed[lender] = self.borrowed.get(lender, 0) + gpus

    def _settle_borrowed(self) -> None:
        now = self.sim.now
        self.borrowed_gpu_minutes += self.borrowed_now * (now - self._borrowed_since)
        self._borrowed_since = now

    def _start(self, i: int, chosen: list, now: int) -> None:
        owner = self.sim.env.floor_owner.get(id(chosen[0][0]))
        self.lender_of[i] = owner if owner is not None and owner is not self.sim else None
        self.admitted_at[i] = now
        if self.first_placement[i] is None:
            self.first_placement[i] = ((owner or self.sim).spec.name, chosen[0][0].group)
        super()._start(i, chosen, now)

    def _stop(self, i: int, now: int, finished: bool) -> None:
        if not finished:
            if self.is_production(i):
                self.production_interruptions += 1
            if self._reclaiming:
                lost = self.sim.c.lost_gpu_minutes
                super()._stop(i, now, finished)
                self.reclaim_preemptions += 1
                self.reclaim_lost_gpu_minutes += self.sim.c.lost_gpu_minutes - lost
                self.lender_of[i] = None
                return
            if self._preempting_within:
                lost = self.sim.c.lost_gpu_minutes
                super()._stop(i, now, finished)
                self.priority_preemptions += 1
                self.priority_lost_gpu_minutes += self.sim.c.lost_gpu_minutes - lost
                return
        super()._stop(i, now, finished)
        self.lender_of[i] = None

    def preempt(self, i: int, now: int) -> None:
        """Kueue evicts job i (a reclaim): its pods stop, its work since the last checkpoint is lost."""
        self.sim.env.wake(self.sim)
        self._reclaiming = True
        try:
            self._stop(i, now, finished=False)
        finally:
            self._reclaiming = False

    def preempt_within(self, i: int, now: int) -> None:
        """Kueue evicts this pool's interruptible job i for a higher-priority job of the same ClusterQueue
        (withinClusterQueue: LowerPriority): its work since the last checkpoint is lost, it requeues."""
        self._preempting_within = True
        try:
            self._stop(i, now, finished=False)
        finally:
            self._preempting_within = False

    # -- admission and placement --

    def wants_own_floor(self) -> bool:
        """A pending job of this pool fits its own nominal floor quota beside its own use: Kueue admits it (or
        reclaims for it) before lending that quota to a borrower."""
        sim = self.sim
        room = sim.floor_gpus - (sim.floor_busy() - sim.lent_gpus)
        if room <= 0 or not self.pending_gpus:
            return False
        return any(q and size <= room for qs in (self.queues, self.prod_queues) for size, q in qs.items())

    def schedule(self, now: int) -> None:
        if self.plain:
            super().schedule(now)
            return
        sim = self.sim
        sim.changed = False
        if not self.pending_gpus:
            return
        # a closed node (back to spot's NoSchedule taint) takes no new pod, as in JobsWorkload.schedule
        own = [n for n in sim.nodes.values() if n.ready_at <= now and not n.warned and not n.closed
               and n.busy < n.gpus]
        own.sort(key=lambda n: (FILL_RANK[n.group], n.serial))
        spot_ok = self.production_on_spot
        prod_nodes = [n for n in own if spot_ok or n.group != SPOT]
        borrowable = []  # (lender, [its floor nodes with room], GPUs it may still lend to this queue)
        for lender, limit in self.lenders:
            if lender.lent_gpus >= lender.env.sharing[lender.spec.name].lendable_gpus:
                continue
            if lender.workload.wants_own_floor():
                continue
            nodes = [n for n in lender.floor_nodes if n.ready_at <= now and n.busy < n.gpus]
            if nodes:
                borrowable.append([lender, nodes])
        gpn = sim.spec.gpus_per_node
        fits_below = {False: gpn + 1, True: gpn + 1}  # single-node sizes >= this no longer fit, per class
        gang_below = {False: math.inf, True: math.inf}
        if self.priority_within and any(self.prod_queues.values()):
            self._preempt_for_production(now)
            own = [n for n in own if n.busy < n.gpus]
            prod_nodes = [n for n in prod_nodes if n.busy < n.gpus]
        # Kueue admits a ClusterQueue's workloads by priority, then creation time: where this pool's interruptible
        # jobs run at a lower priority (priority_within), its pending production jobs come first.
        first = 0 if self.priority_within else 1
        heads = [(1, q[0], size, False) for size, q in self.queues.items() if q]
        heads += [(first, q[0], size, True) for size, q in self.prod_queues.items() if q]
        heapq.heapify(heads)
        while heads:
            rank, i, size, prod = heapq.heappop(heads)
            if size <= gpn:
                if size >= fits_below[prod]:
                    continue
                placed = self._place_single_env(i, prod_nodes if prod else own, None if prod else borrowable, now)
                if not placed:
                    fits_below[prod] = size
            else:
                k = -(-size // gpn)
                if k >= gang_below[prod]:
                    continue
                placed = self._place_gang_env(i, k, prod_nodes if prod else own, None if prod else borrowable, now)
                if not placed:
                    gang_below[prod] = k
            if placed:
                q = (self.prod_queues if prod else self.queues)[size]
                heapq.heappop(q)
                if q:
                    heapq.heappush(heads, (rank, q[0], size, prod))
                own = [n for n in own if n.busy < n.gpus]
                prod_nodes = [n for n in prod_nodes if n.busy < n.gpus]
                for entry in borrowable:
                    entry[1] = [n for n in entry[1] if n.busy < n.gpus]

    def _preempt_for_production(self, now: int) -> None:
        """withinClusterQueue: LowerPriority. A pending production job (submission order) that fits the floor
        beside the production work already on it, but finds no floor node with room, preempts this pool's own
        interruptible jobs on the floor node(s) it then starts on: on one node the fewest interruptible GPUs that
        make room, candidates most recently admitted first, the set minimized; a gang takes whole floor nodes
        running no production (nor borrowed) work, those with the fewest interruptible GPUs. Node-aware, as
        Environment._reclaim (module docstring). Borrowed jobs are left to the reclaim."""
        sim = self.sim
        gpn = sim.spec.gpus_per_node
        nodes = [n for n in sim.floor_nodes if n.ready_at <= now]
        if not nodes:
            return
        prod_on: dict[int, int] = {}  # node -> GPUs of this pool's production jobs on it
        low_on: dict[int, list] = {}  # node -> [(candidate key, job, GPUs here)] of its interruptible jobs
        other_on: dict[int, int] = {}  # node -> GPUs of other pools' (borrowed) jobs on it
        for n in nodes:
            for j in n.jobs:
                if not isinstance(j, int):
                    other_on[id(n)] = other_on.get(id(n), 0) + next(
                        u for m, u in self.sim.env.pools[j[0]].workload.on_nodes[j[1]] if m is n)
                    continue
                used = next(u for m, u in self.on_nodes[j] if m is n)
                if self.production[j]:
                    prod_on[id(n)] = prod_on.get(id(n), 0) + used
                else:
                    low_on.setdefault(id(n), []).append(((-self.admitted_at[j], -j), j, used))
        for v in low_on.values():
            v.sort(key=lambda x: x[0])
        prod_use = sum(prod_on.values())
        nominal = sim.floor_gpus
        reserved = {id(n): 0 for n in nodes}  # GPUs of production jobs this pass counts on the scheduling pass for

        def free(n) -> int:
            return n.gpus - n.busy - reserved[id(n)]

        pending = sorted(i for q in self.prod_queues.values() for i in q)
        for i in pending:
            g = self.gpus[i]
            if prod_use + g > nominal:
                continue  # beyond the floor's quota even with every interruptible job gone
            if g <= gpn:
                room = [n for n in nodes if free(n) >= g]
                if room:  # the scheduling pass places it there
                    reserved[id(room[0])] += g
                    prod_use += g
                    continue
                best = None
                for n in nodes:
                    have = free(n)
                    cands = [v for v in low_on.get(id(n), []) if self.run_start[v[1]] is not None]
                    if have + sum(v[2] for v in cands) < g:
                        continue
                    targets = []
                    for v in cands:
                        if have >= g:
                            break
                        targets.append(v)
                        have += v[2]
                    for v in reversed(list(targets)):  # minimize: give back a target the job fits without
                        if have - v[2] >= g:
                            targets.remove(v)
                            have -= v[2]
                    cost = (sum(v[2] for v in targets), [v[0] for v in targets], n.serial)
                    if best is None or cost < best[0]:
                        best = (cost, [n], targets)
                if best is None:
                    continue
                chosen, victims = best[1], [v[1] for v in best[2]]
            else:
                k = -(-g // gpn)
                empty = [n for n in nodes if n.busy == 0 and reserved[id(n)] == 0]
                if len(empty) >= k:  # whole floor nodes are free: the scheduling pass places it
                    for n in empty[:k]:
                        reserved[id(n)] = n.gpus
                    prod_use += g
                    continue
                whole = [n for n in nodes if not prod_on.get(id(n)) and not other_on.get(id(n))
                         and reserved[id(n)] == 0]
                whole.sort(key=lambda n: (n.busy, n.serial))
                if len(whole) < k:
                    continue
                chosen = whole[:k]
                victims = sorted({j for n in chosen for _, j, _ in low_on.get(id(n), [])})
            for j in victims:
                if self.run_start[j] is not None:  # a gang victim may sit on several chosen nodes
                    self.preempt_within(j, now)
            if (chosen[0].gpus - chosen[0].busy < g) if len(chosen) == 1 else any(n.busy for n in chosen):
                continue  # not freed as counted (should not happen): leave it to the scheduling pass
            Environment._start_reclaimed(self, i, chosen, now)
            prod_use += g
            for n in chosen:
                prod_on[id(n)] = prod_on.get(id(n), 0) + (g if len(chosen) == 1 else n.gpus)

    def _room(self, lender: PoolSim) -> int:
        """GPUs this queue may still borrow from the lender's floor: its lendingLimit left, this queue's
        borrowingLimit left."""
        env = self.sim.env
        room = env.sharing[lender.spec.name].lendable_gpus - lender.lent_gpus
        limit = env.sharing[self.sim.spec.name].borrowing_limit_gpus.get(lender.spec.name)
        if limit is not None:
            room = min(room, limit - self.borrowed.get(lender.spec.name, 0))
        return room

    def _place_single_env(self, i: int, own: list, borrowable: list | None, now: int) -> bool:
        g = self.gpus[i]
        sign = 1 if self.sim.placement == MOST_ALLOCATED else -1
        best = best_key = None
        for n in own:
            free = n.gpus - n.busy
            if free >= g:
                # flavor order: own floor (0), borrowed floors (1, in plan order), own elastic (2, 3)
                rank = 0 if n.group == GUARANTEED else 1 + FILL_RANK[n.group]
                key = (rank, 0, sign * free)
                if best is None or key < best_key:
                    best, best_key = n, key
        if borrowable and (best is None or best_key[0] > 0):
            for j, (lender, nodes) in enumerate(borrowable):
                if self._room(lender) < g:
                    continue
                for n in nodes:
                    free = n.gpus - n.busy
                    if free >= g:
                        key = (1, j, sign * free)
                        if best is None or key < best_key:
                            best, best_key = n, key
        if best is None:
            return False
        self._start(i, [(best, g)], now)
        return True

    def _place_gang_env(self, i: int, k: int, own: list, borrowable: list | None, now: int) -> bool:
        gpn = self.sim.spec.gpus_per_node
        g = self.gpus[i]
        whole = [n for n in own if n.busy == 0]  # in fill order
        floor = [n for n in whole if n.group == GUARANTEED]
        chosen = None
        if len(floor) >= k:
            chosen = floor[:k]
        if chosen is None and borrowable:
            for lender, nodes in borrowable:
                free = [n for n in nodes if n.busy == 0]
                if len(free) >= k and self._room(lender) >= g:
                    chosen = free[:k]
                    break
        if chosen is None and len(whole) >= k:
            chosen = whole[:k]
        if chosen is None:
            return False
        self._start(i, [(n, gpn) for n in chosen[: k - 1]] + [(chosen[k - 1], g - gpn * (k - 1))], now)
        return True

    def finish(self, horizon: int) -> None:
        super().finish(horizon)
        self._settle_borrowed()  # the borrowed GPU-minutes up to the horizon


# --- the environment -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageRecord:
    """Instance-hours of one instance type, bought one way, by one pool, in one hour of the simulation: the
    fields of pricing/cost_model/billing.py's Usage."""

    hour: int
    pool: str
    instance_type: str
    region: str
    purchase: str
    instance_hours: float
    usd_per_hour: float  # the rate without any commitment: on-demand (floors too), spot, or the block's price


@dataclass
class EnvironmentResult:
    pools: dict[str, dict]
    environment: dict
    usage: list[UsageRecord]
    sims: dict[str, PoolSim]


class Environment:
    def __init__(self, cfg, demands: dict, controller_factory: Callable, settings: SimSettings = SimSettings(),
                 horizon_minutes: int | None = None, specs: dict[str, PoolSpec] | None = None,
                 window_from_minute: int | None = None):
        names = [p.name for p in cfg.pools]
        missing = [n for n in names if n not in demands]
        extra = [n for n in demands if n not in names]
        if missing:
            raise EnvironmentError(f"no demand for pool(s) {', '.join(missing)}: give one trace per pool")
        if extra:
            raise EnvironmentError(f"demand for unknown pool(s) {', '.join(extra)}; pools: {', '.join(names)}")
        specs = dict(specs or {})
        unknown = [n for n in specs if n not in names]
        if unknown:
            raise EnvironmentError(f"specs for unknown pool(s) {', '.join(unknown)}; pools: {', '.join(names)}")
        self.cfg = cfg
        self.settings = settings
        self.horizon = horizon_minutes if horizon_minutes is not None else max(
            default_horizon(demands[n]) for n in names)
        if window_from_minute is not None and not 0 <= window_from_minute <= self.horizon:
            raise EnvironmentError(f"window_from_minute {window_from_minute}: must be between 0 and the horizon "
                                   f"({self.horizon} minutes)")
        self.window_from = window_from_minute
        self._window_start: dict[str, dict] | None = None  # each pool's counters at the window's first minute
        # Production work waiting, per pool (the report window's, or the whole run's): [GPUs waiting now, of them
        # within the floor's room not running production now, since minute, GPU-minutes waiting, of them within].
        self._prod_wait: dict[str, list] = {}
        # Branches (simulate_branches): at the window's first minute the run forks, each child adds its shortage
        # windows and runs on; `_branch_out` is set in a child (where its reduced result goes).
        self.branches: list[tuple[tuple, tuple]] = []
        self.branch_reduce: Callable | None = None
        self._branch_pipes: list[tuple[int, int]] = []
        self._branch_out: int | None = None
        self.sharing = sharing_of(cfg)
        self.floor_owner: dict[int, PoolSim] = {}
        self.pools: dict[str, PoolSim] = {}
        for p in cfg.pools:
            spec = specs.get(p.name) or spec_from_config(cfg, p.name)
            trace = demands[p.name]
            share = production_share_pct(p)
            if isinstance(trace, JobsTrace):
                production = production_flags(trace, share, settings.seed, p.name)
            else:
                production = [True] if share >= 100 else None
            if spec.floor_nodes != (p.guaranteed.nodes if p.guaranteed else 0):
                raise EnvironmentError(f"specs['{p.name}'] has {spec.floor_nodes} floor nodes, the config "
                                       f"{p.guaranteed.nodes if p.guaranteed else 0}: lending follows the config's "
                                       f"plan, so change the floor in the config (pools[].guaranteed.nodes)")
            # production work may use spot only where Kueue lets it: the one rule of config/scheduling.py, which the
            # single-pool advisor (sim/advisor.py) uses too
            on_spot = production_work_on_spot(cfg, p)
            self.pools[p.name] = PoolSim(self, spec, trace, controller_factory(spec), settings, self.horizon,
                                         production, on_spot, PRIORITY_VALUES[p.tier])
        # Lending links: a borrower's queue lists a lender's floor, the lender lends something, both run jobs.
        for name, sim in self.pools.items():
            w = sim.workload
            if not isinstance(w, EnvJobsWorkload):
                continue
            for lender in self.sharing[name].lenders:
                ls = self.pools[lender]
                if self.sharing[lender].lendable_gpus > 0 and ls.spec.floor_nodes and isinstance(
                        ls.workload, EnvJobsWorkload):
                    w.lenders.append((ls, self.sharing[name].borrowing_limit_gpus.get(lender)))
            kept_off_spot = w.production is not None and not w.production_on_spot and sim.spec.has_spot
            # A production pool with a floor and interruptible jobs of its own: its ClusterQueue preempts lower
            # priority (config/scheduling.py preempt_lower_priority), its interruptible jobs run below production.
            w.priority_within = (self.cfg.pool(name).tier == Tier.production and w.production is not None
                                 and not all(w.production) and sim.spec.floor_nodes > 0)
            w.plain = not w.lenders and not kept_off_spot and not w.priority_within
        # Groups of pools that can influence each other (connected by lending): they skip quiet minutes together.
        parent = {n: n for n in self.pools}

        def root(n: str) -> str:
            while parent[n] != n:
                n = parent[n]
            return n

        for name, sim in self.pools.items():
            for lender, _ in getattr(sim.workload, "lenders", ()):
                parent[root(name)] = root(lender.spec.name)
        groups: dict[str, list[PoolSim]] = {}
        for name in names:
            groups.setdefault(root(name), []).append(self.pools[name])
        self.groups = list(groups.values())
        self.lenders = [s for s in self.pools.values() if any(
            ls is s for o in self.pools.values() for ls, _ in getattr(o.workload, "lenders", ()))]

    # -- time --

    def run(self) -> "Environment":
        """Minute by minute, each pool's steps in sim.engine.Simulation.run's order. A pool is processed at the
        minutes its own quiet-tick proof (Simulation._quiet_until) names, and also at any minute another pool
        touches it (a job binding to or leaving its floor, a reclaim preempting its job, a lender's floor it could
        borrow now having room): it is woken first, its quiet minutes up to then accounted as Simulation._skip
        does. Processing a pool at a minute it could have skipped changes nothing (tests/test_sim_speed.py), so
        the result is the tick-by-tick one (tests/test_environment.py compares them)."""
        horizon, settings = self.horizon, self.settings
        warn, every, skip = settings.spot_warning_minutes, settings.sample_every_minutes, settings.skip_quiet_ticks
        self._warn, self._every = warn, every
        self._ticked = False
        pools = list(self.pools.values())
        for sim in pools:
            sim.controller.start(sim)
            sim.last = -1  # the last minute processed; minutes after it up to next_at - 1 are quiet
        now = 0
        window = self.window_from
        while now < horizon:
            if window is not None and self._window_start is None and now >= window:
                if self.branches:
                    self._branch_off()
                self._window_start = {n: self._counters_at(sim, window) for n, sim in self.pools.items()}
            self._now = now
            self._awake: list[PoolSim] = []
            self._ticked = False
            for sim in pools:
                if sim.next_at <= now:
                    self.wake(sim)
            for group in self.groups:
                self._schedule(group, now)
            for sim in self._awake:  # may grow while iterating: a pool woken by a schedule
                sim.controller.tick(sim)
                sim.recommendations.clear()  # as Simulation.run: EventBridge delivers each recommendation once
                if sim.node_groups:
                    for g in (SPOT, ON_DEMAND):
                        if sim.desired[g] != sim.group_size(g):
                            sim._reconcile(g)
            self._ticked = True
            for group in self.groups:
                self._schedule(group, now)
            for sim in self._awake:
                self._track_production_wait(sim, now)
                sim.gang_hold.tick(now)  # as Simulation.run, after the minute's last scheduling pass
                if now % every == 0:
                    sim._sample(now)
                sim.next_at = sim._quiet_until(now) if skip and now + 1 < horizon else now + 1
            now = min(sim.next_at for sim in pools)
        if window is not None and self._window_start is None:  # the window starts at the horizon: empty
            self._window_start = {n: self._counters_at(sim, window) for n, sim in self.pools.items()}
        for sim in pools:
            self._settle_production_wait(sim, horizon)
            if horizon > sim.last + 1:
                sim._skip(sim.last, horizon, every)
            sim.now = horizon
            sim._settle(horizon)
            sim.change_lent(0)
            sim.workload.finish(horizon)
        return self

    def wake(self, sim: PoolSim) -> None:
        """Process `sim` at this minute: account its quiet minutes since the last one it was processed at, then
        its first steps of the minute (node events, arrivals and completions)."""
        now = self._now
        if sim.last == now:
            return
        if now > sim.last + 1:
            sim._skip(sim.last, now, self._every)
        sim.last = now
        sim.now = now
        if now >= sim._next_event:
            sim._node_events(now, self._warn)
        sim.workload.tick(now)
        self._awake.append(sim)
        if self._ticked:
            # Woken after the controllers' turn: its controller's tick this minute came before the change and,
            # the pool being quiet until then, repeated its last plan (Controller.repeat counts it so).
            sim.controller.repeat(sim, 1)

    def _schedule(self, group: list[PoolSim], now: int) -> None:
        if len(group) == 1:
            sim = group[0]
            if sim.last == now and sim.changed:
                sim.workload.schedule(now)
            return
        if not any(sim.changed for sim in group if sim.last == now):
            return
        # Pools not processed this minute join where they could act, checked at their turn (what the pools
        # before them did counts): an owner that wants its lent floor back, a borrower a lender has room for.
        for sim in group:
            if sim.last != now and sim.lent_gpus and isinstance(sim.workload, EnvJobsWorkload) \
                    and sim.workload.wants_own_floor():
                self.wake(sim)
            if sim.last == now and sim.lent_gpus and sim.workload.pending_gpus:
                self._reclaim(sim, now)
        for sim in group:
            if sim.last != now and self._may_borrow(sim):
                self.wake(sim)
            if sim.last == now:
                sim.workload.schedule(now)

    def _may_borrow(self, sim: PoolSim) -> bool:
        """Whether a pool not processed this minute has interruptible work pending that a lender's floor has room
        for now (nothing else it could schedule has changed: its own nodes are as they were)."""
        w = sim.workload
        if not isinstance(w, EnvJobsWorkload) or not w.pending_gpus:
            return False
        sizes = [size for size, q in w.queues.items() if q]
        if not sizes or not w.lenders:
            return False
        need = min(min(sizes), sim.spec.gpus_per_node)
        for lender, _ in w.lenders:
            if w._room(lender) < min(sizes) or lender.workload.wants_own_floor():
                continue
            if any(n.gpus - n.busy >= need for n in lender.floor_nodes):
                return True
        return False

    def _reclaim(self, owner: PoolSim, now: int) -> None:
        """The owner takes its floor back for its pending jobs, in submission order: a job that fits the owner's
        nominal floor quota beside the owner's own use (reclaimWithinCohort: Any) but finds no floor node with
        room preempts borrowed jobs on the floor node(s) it then starts on -- on one node the fewest borrowed
        GPUs that make room, in Kueue's candidate order (lowest priority, most recently admitted first), the set
        minimized; a gang takes whole nodes free of the owner's own work, those with the fewest borrowed GPUs.
        Node-aware, where Kueue picks victims by quota alone (module docstring)."""
        w = owner.workload
        nominal, gpn = owner.floor_gpus, owner.spec.gpus_per_node
        own_use = owner.floor_busy() - owner.lent_gpus
        nodes = [n for n in owner.floor_nodes if n.ready_at <= now]
        reserved = {id(n): 0 for n in nodes}  # GPUs of jobs this pass counts on without preempting
        lent_on: dict[int, int] = {}  # node -> borrowed GPUs on it
        for bw, j in owner.borrowed_jobs.values():
            for n, used in bw.on_nodes[j]:
                lent_on[id(n)] = lent_on.get(id(n), 0) + used

        def free(n) -> int:
            return n.gpus - n.busy - reserved[id(n)]

        for i in w.pending_jobs(max(1, nominal - own_use)):
            if owner.lent_gpus == 0 or own_use >= nominal:
                return
            g = w.gpus[i]
            if own_use + g > nominal:
                continue  # does not fit the owner's nominal quota even alone: no reclaim for it
            if g <= gpn:
                room = [n for n in nodes if free(n) >= g]
                if room:
                    reserved[id(room[0])] += g
                    own_use += g
                    continue
                best = None
                for n in nodes:
                    have = free(n)
                    if have + lent_on.get(id(n), 0) < g:
                        continue
                    victims = self._borrowed_on(n)
                    targets = []
                    for v in victims:
                        if have >= g:
                            break
                        targets.append(v)
                        have += v[3]
                    for v in reversed(list(targets)):  # minimize: give back a target the job fits without
                        if have - v[3] >= g:
                            targets.remove(v)
                            have -= v[3]
                    cost = (sum(v[3] for v in targets), [v[0] for v in targets], n.serial)
                    if best is None or cost < best[0]:
                        best = (cost, [n], targets)
            else:
                k = -(-g // gpn)
                whole = [n for n in nodes if reserved[id(n)] == 0 and n.busy == lent_on.get(id(n), 0)]
                whole.sort(key=lambda n: (lent_on.get(id(n), 0), n.serial))
                if len(whole) < k:
                    continue
                if all(n.busy == 0 for n in whole[:k]):
                    for n in whole[:k]:
                        reserved[id(n)] = n.gpus
                    own_use += g
                    continue
                best = (None, whole[:k], [v for n in whole[:k] for v in self._borrowed_on(n)])
            if best is None:
                continue
            _, chosen, targets = best
            done = set()
            for v in targets:
                if (id(v[1]), v[2]) not in done:  # a borrowed gang may sit on several of the chosen nodes
                    done.add((id(v[1]), v[2]))
                    for n, used in v[1].on_nodes[v[2]]:
                        lent_on[id(n)] -= used
                    v[1].preempt(v[2], now)
            self._start_reclaimed(w, i, chosen, now)
            own_use += g

    def _borrowed_on(self, node: SimNode) -> list:
        """Borrowed jobs on a floor node in Kueue's preemption-candidate order: (key, workload, job, GPUs here)."""
        out = []
        for key in node.jobs:
            if isinstance(key, tuple):
                bw = self.pools[key[0]].workload
                j = key[1]
                used = next(u for n, u in bw.on_nodes[j] if n is node)
                out.append(((bw.sim.priority, -bw.admitted_at[j], -j), bw, j, used))
        out.sort(key=lambda v: v[0])
        return out

    @staticmethod
    def _start_reclaimed(w: "EnvJobsWorkload", i: int, chosen: list, now: int) -> None:
        """Start the owner's job on the floor node(s) its reclaim freed (Kueue admits it on the floor flavor,
        kube-scheduler binds it to the room the preemption made)."""
        g, gpn = w.gpus[i], w.sim.spec.gpus_per_node
        queues = w.prod_queues if w.is_production(i) and not w.plain else w.queues
        q = queues[g]
        q.remove(i)
        heapq.heapify(q)
        if len(chosen) == 1:
            w._start(i, [(chosen[0], g)], now)
        else:
            k = len(chosen)
            w._start(i, [(n, gpn) for n in chosen[: k - 1]] + [(chosen[k - 1], g - gpn * (k - 1))], now)

    # -- results --

    def result(self, seconds: float = 0.0) -> EnvironmentResult:
        pools, usage = {}, []
        by_tier: dict[str, list[float]] = {}
        by_class: dict[str, list[float]] = {PRODUCTION: [], INTERRUPTIBLE: []}
        win_by_tier: dict[str, list[float]] = {}
        win_by_class: dict[str, list[float]] = {PRODUCTION: [], INTERRUPTIBLE: []}
        win_pending: dict[str, list[float]] = {}  # tier -> total pending minutes of the window's jobs
        env = {"production_interruptions": 0, "reclaim_preemptions": 0, "reclaim_lost_gpu_hours": 0.0,
               "priority_preemptions": 0, "priority_lost_gpu_hours": 0.0,
               "floor_gpu_hours": 0.0, "floor_owned_gpu_hours": 0.0, "floor_lent_gpu_hours": 0.0,
               "borrowed_gpu_hours": 0.0, "production_jobs": 0}
        sums = ("total_cost_usd", "guaranteed_cost_usd", "elastic_spot_cost_usd", "elastic_on_demand_cost_usd",
                "demand_gpu_hours", "gpu_hours_served", "unmet_gpu_hours", "interruptions", "jobs_interrupted",
                "busy_node_terminations", "lost_gpu_hours", "spot_launch_failures", "node_launches")
        for name, sim in self.pools.items():
            spec, trace = sim.spec, sim.trace
            horizon = self.horizon
            oracle = oracle_gpu_hours(trace, horizon) * spec.oracle_usd_per_gpu_hour
            elastic_oracle = elastic_oracle_gpu_hours(demand_profile(trace, horizon), spec.floor_gpus)
            m = metrics_of(sim, sim.controller, oracle, seconds, elastic_oracle * spec.oracle_usd_per_gpu_hour)
            m.update(self._pool_extras(sim))
            tier = str(self.cfg.pool(name).tier)
            m["tier"] = tier
            if self.window_from is not None:
                m["window"], waits, waits_prod, waits_rest = self._window_figures(sim, tier)
                if isinstance(sim.workload, JobsWorkload):
                    win_by_tier.setdefault(tier, []).extend(waits)
                    win_pending.setdefault(tier, []).extend(self._window_pending(sim))
                    win_by_class[PRODUCTION].extend(waits_prod)
                    win_by_class[INTERRUPTIBLE].extend(waits_rest)
            pools[name] = m
            w = sim.workload
            if isinstance(w, JobsWorkload):
                waits, _ = w.waits_minutes(horizon)
                by_tier.setdefault(tier, []).extend(waits)
                prod = w.production if isinstance(w, EnvJobsWorkload) else None
                for k, wait in enumerate(waits):
                    by_class[PRODUCTION if prod is not None and prod[k] else INTERRUPTIBLE].append(wait)
            for key in env:
                env[key] += m[key]
            usage += hourly_usage(sim, self.cfg, horizon)
        out = {k: round(sum(p[k] for p in pools.values()), 3) for k in sums}
        out.update({k: round(v, 3) for k, v in env.items()})
        floor = out["floor_gpu_hours"]
        out["floor_utilization"] = {
            "owned": round(out["floor_owned_gpu_hours"] / floor, 4) if floor else None,
            "lent": round(out["floor_lent_gpu_hours"] / floor, 4) if floor else None}
        out["p95_wait_minutes_by_tier"] = {t: round(percentile(v, 95), 1) for t, v in sorted(by_tier.items())}
        out["p95_wait_minutes_by_class"] = {c: round(percentile(v, 95), 1) if v else None
                                            for c, v in by_class.items()}
        if self.window_from is not None:
            keys = ("production_interruptions", "jobs_interrupted", "spot_interruptions", "lost_gpu_hours",
                    "reclaim_preemptions", "reclaim_lost_gpu_hours", "priority_preemptions",
                    "priority_lost_gpu_hours", "borrowed_gpu_hours", "floor_gpu_hours",
                    "floor_owned_gpu_hours", "floor_lent_gpu_hours", "unmet_gpu_hours", "unmet_production_gpu_hours",
                    "production_waiting_gpu_hours", "unmet_guaranteed_production_gpu_hours", "jobs_submitted")
            win = {k: round(sum(p["window"][k] for p in pools.values()), 3) for k in keys}
            win["from_minute"], win["to_minute"] = self.window_from, self.horizon
            win["p95_wait_minutes_by_tier"] = {t: round(percentile(v, 95), 1) if v else None
                                               for t, v in sorted(win_by_tier.items())}
            win["p95_wait_minutes_by_class"] = {c: round(percentile(v, 95), 1) if v else None
                                                for c, v in win_by_class.items()}
            win["pending_minutes_by_tier"] = {t: pending_summary(v) for t, v in sorted(win_pending.items())}
            out["window"] = win
        out["horizon_minutes"] = self.horizon
        out["seed"] = self.settings.seed
        out["sim_seconds"] = round(seconds, 3)
        return EnvironmentResult(pools, out, usage, dict(self.pools))

    # -- branches: one run up to the window, then one continuation per shortage scenario --

    def _branch_off(self) -> None:
        """Fork one child process per branch at this minute (before anything of it is processed): the child is
        this run so far, exactly (a process copy: every object, order and random state as they are), adds the
        branch's shortage windows to every pool and runs on; the parent runs on unchanged. A branch's windows lie
        in the report window, so a run that had them from minute 0 would have been the same up to here."""
        import os

        branches, self.branches = self.branches, []
        for spot_windows, od_windows in branches:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: this branch
                os.close(r)
                for pr, _ in self._branch_pipes:
                    os.close(pr)
                self._branch_pipes = []
                self._branch_out = w
                for sim in self.pools.values():
                    sim.add_shortage_windows(spot_windows, od_windows)
                return
            os.close(w)
            self._branch_pipes.append((r, pid))

    def branch_results(self, seconds: float) -> None:
        """In a branch's child: send its reduced result to the parent and end the process. In the parent: nothing."""
        import os
        import pickle

        if self._branch_out is None:
            return
        code = 0
        try:
            payload = ("ok", self.branch_reduce(self.result(seconds)))
        except BaseException as e:  # noqa: BLE001 - the parent re-raises it
            payload, code = ("error", f"{type(e).__name__}: {e}"), 1
        with os.fdopen(self._branch_out, "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        os._exit(code)

    def collect_branches(self) -> list:
        """In the parent, after its own run: each branch's reduced result, in the order of `branches`."""
        import os
        import pickle

        out = []
        for r, pid in self._branch_pipes:
            with os.fdopen(r, "rb") as f:
                kind, value = pickle.load(f)
            os.waitpid(pid, 0)
            if kind != "ok":
                raise EnvironmentError(f"a branch of the run failed: {value}")
            out.append(value)
        self._branch_pipes = []
        return out

    # -- the report window (window_from_minute): figures of this one run from that minute on --

    def _settle_production_wait(self, sim: PoolSim, now: int) -> None:
        """Carry the pool's production-wait figures from their last change to `now`, counting only the minutes of
        the report window (the whole run without one)."""
        t = self._prod_wait.get(sim.spec.name)
        if t is None:
            return
        waiting, within, since = t[0], t[1], t[2]
        lo = max(since, self.window_from or 0)
        if now > lo:
            t[3] += waiting * (now - lo)
            t[4] += within * (now - lo)
        t[2] = now

    def _track_production_wait(self, sim: PoolSim, now: int) -> None:
        """After the pool's minute: the GPUs its production jobs wait for, and of them the GPUs its floor had room
        for (ready floor GPUs not running this pool's production work: idle, lent, or running its other work).
        State changes only at the minutes a pool is processed, so the figures hold until its next one. The second
        is the guarantee not kept (what the fluid model calls unmet guaranteed production work): production
        waiting although its own floor is not all running production, whatever the reason (lent and not yet
        reclaimed, the pool's own interruptible work on it, GPUs left in pieces too small for the job)."""
        w = sim.workload
        if not isinstance(w, EnvJobsWorkload) or w.production is None:
            return
        self._settle_production_wait(sim, now)
        t = self._prod_wait.setdefault(sim.spec.name, [0, 0, now, 0.0, 0.0])
        waiting = sum(w.gpus[i] for qs in (w.queues, w.prod_queues) for q in qs.values() for i in q
                      if w.production[i])
        within = 0
        if waiting and sim.floor_nodes:
            ready = [n for n in sim.floor_nodes if n.ready_at <= now]
            running = 0
            for n in ready:
                for i in n.jobs:
                    if isinstance(i, int) and w.production[i]:
                        running += sum(used for node, used in w.on_nodes[i] if node is n)
            within = min(waiting, max(0, sum(n.gpus for n in ready) - running))
        t[0], t[1] = waiting, within

    def production_wait_gpu_hours(self, name: str) -> tuple[float, float]:
        """(production GPU-hours waiting, of them within the pool's floor) over the report window (whole run
        without one); (0, 0) for a pool without production jobs."""
        t = self._prod_wait.get(name)
        return (0.0, 0.0) if t is None else (round(t[3] / 60, 3), round(t[4] / 60, 3))

    @staticmethod
    def _counters_at(sim: PoolSim, minute: int) -> dict:
        """The pool's running totals at `minute`, read before anything of that minute is processed (events only
        happen at processed minutes; GPU-minute sums are carried from their last change to `minute`)."""
        w = sim.workload
        env_w = w if isinstance(w, EnvJobsWorkload) else None
        busy = 0
        for n in sim.floor_nodes:
            t, b = n.hist[-1]
            busy += n.busy_minutes + max(0, minute - t) * b
        return {
            "production_interruptions": env_w.production_interruptions if env_w else (
                sim.c.jobs_interrupted if sim.production_all else 0),
            "jobs_interrupted": sim.c.jobs_interrupted,
            "spot_interruptions": sim.c.spot_interruptions,
            "lost_gpu_minutes": sim.c.lost_gpu_minutes,
            "reclaim_preemptions": env_w.reclaim_preemptions if env_w else 0,
            "reclaim_lost_gpu_minutes": env_w.reclaim_lost_gpu_minutes if env_w else 0.0,
            "priority_preemptions": env_w.priority_preemptions if env_w else 0,
            "priority_lost_gpu_minutes": env_w.priority_lost_gpu_minutes if env_w else 0.0,
            "borrowed_gpu_minutes": (env_w.borrowed_gpu_minutes + env_w.borrowed_now * max(
                0, minute - env_w._borrowed_since)) if env_w else 0,
            "floor_lent_gpu_minutes": sim.lent_gpu_minutes + sim.lent_gpus * max(0, minute - sim._lent_since),
            "floor_busy_gpu_minutes": busy,
            "unmet_gpu_minutes": w.unmet_gpu_minutes if not isinstance(w, JobsWorkload) else 0.0,
        }

    def _window_figures(self, sim: PoolSim, tier: str) -> tuple[dict, list[float], list[float], list[float]]:
        """One pool's figures over the report window [window_from_minute, horizon) of this run: events (production
        interruptions, reclaim preemptions and their lost work, spot interruptions) that happened in it; floor
        GPU-hours owned and lent in it; unmet GPU-hours = the work of jobs submitted in the window that was due by
        the end of the run (from submission on, as the fluid model counts demand) and not served by then (a
        series pool: its backlog at the end). Also the waits of the jobs submitted in the window (all,
        production, the rest)."""
        start, end, w = self.window_from, self.horizon, sim.workload
        a = self._window_start[sim.spec.name]
        b = self._counters_at(sim, end)
        d = {k: b[k] - a[k] for k in a}
        floor_minutes = sim.floor_gpus * (end - start)
        waits_all: list[float] = []
        waits_prod: list[float] = []
        waits_rest: list[float] = []
        unmet = unmet_prod = 0.0
        if isinstance(w, JobsWorkload):
            waits, _ = w.waits_minutes(end)
            prod = getattr(w, "production", None)
            cut_s, end_s = start * 60, end * 60
            jobs = sim.trace.jobs
            for k, s in enumerate(w.submit_s):
                if s < cut_s:
                    continue
                p = prod is not None and prod[k]
                # the work the job asked for up to the end of the run (started at submission, never stopped),
                # less what was served: a job still running at the end is not counted for its work beyond it
                duration = jobs[k].duration_s
                served = duration - w.remaining_s[k]
                left = w.gpus[k] * max(0.0, min(duration, end_s - s) - served)
                unmet += left
                if p:
                    unmet_prod += left
                waits_all.append(waits[k])
                (waits_prod if p else waits_rest).append(waits[k])
            unmet, unmet_prod = unmet / 3600, unmet_prod / 3600
        else:  # a series: its backlog at the end, oldest served first (so the window's, unless older was never)
            unmet = w.unmet_gpu_minutes / 60
            unmet_prod = unmet if sim.production_all else 0.0
        out = {
            "from_minute": start,
            "to_minute": end,
            "production_interruptions": d["production_interruptions"],
            "jobs_interrupted": d["jobs_interrupted"],
            "spot_interruptions": d["spot_interruptions"],
            "lost_gpu_hours": round(d["lost_gpu_minutes"] / 60, 3),
            "reclaim_preemptions": d["reclaim_preemptions"],
            "reclaim_lost_gpu_hours": round(d["reclaim_lost_gpu_minutes"] / 60, 3),
            "priority_preemptions": d["priority_preemptions"],
            "priority_lost_gpu_hours": round(d["priority_lost_gpu_minutes"] / 60, 3),
            "borrowed_gpu_hours": round(d["borrowed_gpu_minutes"] / 60, 3),
            "floor_gpu_hours": round(floor_minutes / 60, 3),
            "floor_owned_gpu_hours": round((d["floor_busy_gpu_minutes"] - d["floor_lent_gpu_minutes"]) / 60, 3),
            "floor_lent_gpu_hours": round(d["floor_lent_gpu_minutes"] / 60, 3),
            "unmet_gpu_hours": round(unmet, 3),
            "unmet_production_gpu_hours": round(unmet_prod, 3),
            "production_waiting_gpu_hours": self.production_wait_gpu_hours(sim.spec.name)[0],
            "unmet_guaranteed_production_gpu_hours": self.production_wait_gpu_hours(sim.spec.name)[1],
            "jobs_submitted": len(waits_all),
            "p95_wait_minutes": round(percentile(waits_all, 95), 1) if waits_all else None,
            "p95_wait_minutes_by_class": {
                PRODUCTION: round(percentile(waits_prod, 95), 1) if waits_prod else None,
                INTERRUPTIBLE: round(percentile(waits_rest, 95), 1) if waits_rest else None},
        }
        return out, waits_all, waits_prod, waits_rest

    def _window_pending(self, sim: PoolSim) -> list[float]:
        """Total pending minutes (first wait plus every re-wait, engine.JobsWorkload.pending_minutes) of the
        pool's jobs submitted in the report window, censored at the end of the run."""
        w = sim.workload
        if not isinstance(w, JobsWorkload) or self.window_from is None:
            return []
        cut_s = self.window_from * 60
        pending = w.pending_minutes(self.horizon)
        return [m for m, s in zip(pending, w.submit_s) if s >= cut_s]

    def _pool_extras(self, sim: PoolSim) -> dict:
        horizon = self.horizon
        floor_minutes = sim.floor_gpus * horizon
        busy = 0
        for n in sim.nodes.values():
            if n.group == GUARANTEED:
                t, b = n.hist[-1]
                busy += n.busy_minutes + (horizon - t) * b
        lent = sim.lent_gpu_minutes
        w = sim.workload
        env_w = w if isinstance(w, EnvJobsWorkload) else None
        out = {
            "production_jobs": sum(env_w.production) if env_w and env_w.production else 0,
            "production_interruptions": env_w.production_interruptions if env_w else (
                sim.c.jobs_interrupted if sim.production_all else 0),
            "reclaim_preemptions": env_w.reclaim_preemptions if env_w else 0,
            "reclaim_lost_gpu_hours": round(env_w.reclaim_lost_gpu_minutes / 60, 3) if env_w else 0.0,
            "priority_preemptions": env_w.priority_preemptions if env_w else 0,
            "priority_lost_gpu_hours": round(env_w.priority_lost_gpu_minutes / 60, 3) if env_w else 0.0,
            "borrowed_gpu_hours": round(env_w.borrowed_gpu_minutes / 60, 3) if env_w else 0.0,
            "floor_gpu_hours": round(floor_minutes / 60, 3),
            "floor_owned_gpu_hours": round((busy - lent) / 60, 3),
            "floor_lent_gpu_hours": round(lent / 60, 3),
        }
        if env_w is not None and env_w.production is not None:
            waits, _ = env_w.waits_minutes(horizon)
            prod = [x for x, p in zip(waits, env_w.production) if p]
            rest = [x for x, p in zip(waits, env_w.production) if not p]
            out["p95_wait_minutes_by_class"] = {PRODUCTION: round(percentile(prod, 95), 1) if prod else None,
                                                INTERRUPTIBLE: round(percentile(rest, 95), 1) if rest else None}
        return out


def hourly_usage(sim: PoolSim, cfg, horizon: int) -> list[UsageRecord]:
    """Instance-hours per hour and purchase kind from the pool's node log (nodes are billed from launch to
    removal, as the simulator bills them)."""
    spec = sim.spec
    hours = -(-horizon // 60)
    pool = cfg.pool(spec.name)
    kinds = {}
    if spec.floor_nodes:
        cb = pool.guaranteed is not None and pool.guaranteed.reservation == Reservation.capacity_block
        rate = spec.floor_usd_per_hour if cb else catalog.price(spec.floor_type, spec.region).ondemand_usd_per_hour
        kinds[GUARANTEED] = (spec.floor_type, CAPACITY_BLOCK if cb else RESERVED, rate)
    if spec.spot_type:
        kinds[SPOT] = (spec.spot_type, PURCHASE_OF_GROUP[SPOT], spec.spot_usd_per_hour)
    if spec.on_demand_type:
        kinds[ON_DEMAND] = (spec.on_demand_type, PURCHASE_OF_GROUP[ON_DEMAND], spec.on_demand_usd_per_hour)
    minutes = {g: [0] * hours for g in kinds}
    count = {g: 0 for g in kinds}
    since = {g: 0 for g in kinds}

    def add(g: str, start: int, end: int, c: int) -> None:
        row = minutes[g]
        while start < end:
            h = start // 60
            stop = min(end, (h + 1) * 60)
            row[h] += c * (stop - start)
            start = stop

    for minute, g, delta in sim.node_log:
        if g not in kinds:
            continue
        minute = min(minute, horizon)
        if count[g]:
            add(g, since[g], minute, count[g])
        since[g] = minute
        count[g] += delta
    out = []
    for g, (itype, purchase, rate) in kinds.items():
        if count[g]:
            add(g, since[g], horizon, count[g])
        for h, m in enumerate(minutes[g]):
            if m:
                out.append(UsageRecord(h, spec.name, itype, spec.region, purchase, m / 60, rate))
    return out


def simulate_environment(cfg, demands: dict, controller_factory: Callable, settings: SimSettings = SimSettings(),
                         horizon_minutes: int | None = None, specs: dict[str, PoolSpec] | None = None,
                         window_from_minute: int | None = None) -> EnvironmentResult:
    """Run every pool of `cfg` on one clock (module docstring) and return the per-pool and environment figures."""
    t0 = time.perf_counter()
    env = Environment(cfg, demands, controller_factory, settings, horizon_minutes, specs, window_from_minute).run()
    return env.result(time.perf_counter() - t0)


def simulate_branches(cfg, demands: dict, controller_factory: Callable, settings: SimSettings, horizon_minutes: int,
                      window_from_minute: int, branches: list[tuple[tuple, tuple]], reduce: Callable
                      ) -> tuple[object, list]:
    """One run up to `window_from_minute`, then the run as it is (`reduce(result)`) and one continuation per
    branch, (spot windows, on-demand windows) in minutes, all at or after the window's start (each `reduce`d in
    a child process, which must return something picklable). The same figures as a separate run per branch with
    those windows in its settings (tests/test_org_window.py), for the cost of the part after the window."""
    for spot_windows, od_windows in branches:
        if any(a < window_from_minute for a, _ in (*spot_windows, *od_windows)):
            raise EnvironmentError("a branch's shortage windows must start at or after the window's first minute "
                                   f"({window_from_minute}): before it the branches share one run")
    t0 = time.perf_counter()
    env = Environment(cfg, demands, controller_factory, settings, horizon_minutes, specs=None,
                      window_from_minute=window_from_minute)
    env.branches, env.branch_reduce = list(branches), reduce
    env.run()
    seconds = time.perf_counter() - t0
    env.branch_results(seconds)  # a child ends here
    own = reduce(env.result(seconds))
    if env.branches:  # never forked: the window starts at the horizon, no branch has a minute of its own
        return own, [own for _ in env.branches]
    return own, env.collect_branches()
