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
  sim.engine.Simulation's result (tests/sim/test_environment.py).
- Spot events: each pool has its own common-random-number streams, drawn from the seed and the pool's name
  (`pool_stream`), so every policy and every floor meets the same events in the same pool.
- Job classes: a pool's tier gives the default (production: every job is production; other tiers: none);
  `service_target.production_share_pct` makes that share of the pool's jobs production, picked per job by the
  seeded hash of sim/demand.py that floor sizing and the fluid bound use too (stable: the same jobs whatever
  the floors or the policy). Production jobs never run on spot (unless the pool is in
  scheduling.kueue.production_spot_pools) and never on borrowed capacity, so a reclaim never preempts them: the
  shipped queues admit them so (a production pool's queue, or a pool's production queue). A demand series (no jobs) is all production when its share is 100 % (a production
  pool's default), else all interruptible; it fills its own nodes as in a single-pool run.
- What ships (issue 36; docs/scheduling.md, "In the simulator"): quota-only flavors, no Topology Aware
  Scheduling. A job is admitted (Kueue) to one flavor, by quota alone, once; its pods carry that flavor's node
  selector and wait for nodes of it (kube-scheduler); they are never moved to another flavor.
- Kueue admission (EnvJobsWorkload.admit): per waiting job, in its ClusterQueue's order (priority, then
  creation time; a production pool's or a pool with a production queue: production first), the first flavor of
  its queue (`plan(cfg)`) whose quota fits: the pool's own floor, then the idle floors its queue may borrow
  (plan order; interruptible jobs only) within the lender's lendingLimit and this queue's borrowingLimit, then
  its own elastic flavor (a spot flavor's quota: the spot group's max; work kept off spot: the on-demand group's).
  A pool with a production queue (config/scheduling.py production_queue) holds its floor's quota there: its
  interruptible jobs borrow it. Workloads that fit under nominal quota are admitted before those that borrow
  (Environment._schedule). A gang (a job larger than a node) is admitted to one flavor.
- Fair sharing (config/scheduling.py fair_sharing_on: on unless scheduling.kueue.fair_sharing is false, with two
  queues or more): in the borrowing round the queues' heads compete one admission at a time, lowest weighted
  dominant resource share first (borrowed quota x 1000 / the cohort's lendable quota / the team's
  fair_share_weight, Kueue's float expression: Environment.weighted_share; Environment._fair_sharing_round,
  Kueue v0.19.2 fair_sharing_iterator.go), equal shares by priority, then creation time (the queue order
  timestamp of a preempted workload too: docs/aws-rules.md); an owner's reclaim takes the victims' queues
  highest share first (sim/kueue.py _fair_sharing_order, fairsharing/ordering.go); a borrower that does not fit a floor's
  unused quota preempts other borrowers of it where Kueue's strategies let it (kueue.fair_borrow_targets:
  canPreemptWhileBorrowing, scheduling.kueue.fair_sharing_preemption_strategies), and stops its flavor search
  there (whenCanPreempt: MayStopSearch); the workloads it evicts compete again in the same round. Off: each pool
  in config order admits all it can, and a borrower never preempts (borrowWithinCohort: Never).
- Kueue preemption, one victim search (sim/kueue.py reclaim_targets): a job that fits its own floor's nominal
  quota but not the quota left evicts, by quota alone, the workloads admitted to the floor by queues that borrow
  it (reclaimWithinCohort: Any) and, in a production pool's queue (withinClusterQueue: LowerPriority), its own
  lower-priority ones; candidates other queues first, lowest priority first, most recently admitted first,
  until the job fits, then given back in reverse order where it still fits (Kueue v0.19.2
  pkg/scheduler/preemption). Evicted workloads lose the work since their last checkpoint and wait for admission
  again (`reclaim_preemptions`, `priority_preemptions` and their lost GPU-hours).
- kube-scheduler (EnvJobsWorkload.place): admitted pods bind to nodes of their flavor (fill order as in a
  single-pool run); a pod pinned to a floor with no node room preempts lower-priority pods there
  (sim/cluster.py scheduler_victims: SelectVictimsOnNode, pickOneNodeForPreemption); the victims' workloads stay admitted and
  their new pods wait on the same flavor (`scheduler_preemptions`, `scheduler_lost_gpu_hours`). The controllers
  see only the pending pods of jobs admitted to elastic flavors (floor-pinned pods are not demand for elastic
  nodes, policy/pods.py `admits`; a job not admitted has no pods).
- A pool that neither lends, borrows nor has two job classes (`plain`) is placed as in a single-pool run.
- A demand series lends its floor as the generated objects do whatever the demand's format (EnvSeriesWorkload,
  issue 36): its GPUs hold its queue's nominal quota up to the floor, other queues borrow the rest, and a rising
  series reclaims it by Kueue's preemption order. Each minute of a series is split into production and
  interruptible GPUs as the fluid profile splits it (sim/demand.py split_gpus): production on its floor, then
  on-demand (never spot unless the config lets production run there), the rest on what the floor leaves, spot,
  then on-demand (fill_series_classes).
Not modelled: series pools borrowing (fluid demand has no jobs to admit to another floor: they run on their own
capacity), a series' production waits (no jobs: `production_waiting_gpu_hours` counts job pools only), a
borrower's job spanning flavors, and under fair sharing the share of an elastic flavor a
pool's interruptible queue borrows from its own production queue (only floors count in a simulated share; that
quota does count in the cohort's lendable quota, the shares' denominator).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from pricing.sources.catalog import Prices
from sim.demand import production_flags, split_series  # the one classification (floors, the bound)
from sim.cloud import SimNode, ready_minute
from sim.engine import (
    FILL_RANK,
    GUARANTEED,
    MOST_ALLOCATED,
    ON_DEMAND,
    SPOT,
    JobsWorkload,
    SeriesWorkload,
    SimSettings,
    Simulation,
    default_horizon,
)
from sim.pool import PoolError, PoolSpec, demand_profile, spec_from_config
from sim.metrics import elastic_oracle_gpu_hours, metrics_of, oracle_gpu_hours, pending_summary, percentile
from sim.traces import JobsTrace
from sim import cluster, kueue
from sim.kueue import ELASTIC_FLAVOR, RECLAIM, elastic_lendable_gpus, sharing_of
from config.config_terms import Reservation, Tier
from config.tenancy import PRIORITY_VALUES
from config.scheduling import (
    fair_sharing_on,
    lends_ahead,
    production_queue,
    production_share_pct,
    production_work_on_spot,
)

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


# --- one pool inside the environment ---------------------------------------------------------------------------


class PoolSim(Simulation):
    """A Simulation that logs node counts (for hourly usage) and, on a job trace, admits as Kueue does."""

    def __init__(
        self,
        env: "Environment",
        spec: PoolSpec,
        trace,
        controller,
        settings: SimSettings,
        horizon: int,
        production: list[bool] | None,
        production_on_spot: bool,
        priority: int,
    ):
        if spec.sizes:  # the environment's usage and commitment accounting is per SPOT / ON_DEMAND group
            raise PoolError(
                f"pool {spec.name}: the environment simulator does not model pools of several node sizes "
                "yet; simulate the pool alone (`gpuloan simulate`, `make bench-sizes`)"
            )
        self.env = env
        self.node_log: list[tuple[int, str, int]] = []  # (minute, group, +1 / -1)
        self.lent_gpus = 0  # GPUs of this pool's floor running other pools' jobs now
        self.lent_on_node: dict[str, int] = {}  # floor node id -> GPUs of it other pools' jobs hold now
        self.floor_nodes: list[SimNode] = []  # never removed (a floor is never terminated)
        self._floor_busy = 0  # GPUs busy on the floor nodes, own and lent
        self.floor_version = 0  # bumped whenever a pod binds to or leaves a floor node
        self._floor_ready_at = 0  # the minute its last floor node is ready
        self._floor_room: tuple = ((), (0, -1, 0, -1))  # floor_room's last (key, answer)
        self.borrowed_jobs: dict = {}  # (id(borrower workload), job) -> (borrower workload, job) on this floor
        # Kueue's usage of the floor flavor: GPUs of workloads admitted to it (running or with pods pending) that
        # count against the owner's nominal quota, and that are borrowed (other queues, or the pool's interruptible
        # queue where it has a production queue); every admission: (id(workload), job) -> (workload, job, borrowed)
        self.quota_own = 0
        self.quota_lent = 0
        self.floor_admitted: dict = {}
        # the workloads holding borrowed quota of this floor now (as a set, in no particular order): fair sharing's
        # candidate queues, read without going through every admission or every pool (issue 41)
        self.borrowers: dict[EnvJobsWorkload, None] = {}
        # their two highest weighted shares, kept while no queue's borrowed quota and the cohort's lendable quota
        # moved (sim/kueue.py `holds_more_than`): ((Environment.share_epoch, lendable), top workload, top, second)
        self.borrower_shares: tuple | None = None
        self.lent_gpu_minutes = 0
        self._lent_since = 0
        self.priority = priority
        # Kueue's lendingLimit of the floor flavor now (set by the environment from the plan; moved by the policy's
        # lend-ahead rule where the config turns it on, policy/decide/lend_ahead.py), and that rule's settings for
        # this pool's controller: (configured limit, reclaim_lookahead_minutes), None where it is off.
        self.lending_limit_gpus = 0
        self.lend_ahead: tuple[int, int] | None = None
        self.order = 0  # its place in the config, and its group of pools that lend to each other (Environment)
        self.group_index = 0
        super().__init__(spec, trace, controller, settings, horizon, stream=pool_stream(settings.seed, spec.name))
        self.next_at = 0
        self.last = -1  # the last minute the environment processed this pool (Environment.run)
        if isinstance(trace, JobsTrace):
            self.workload = EnvJobsWorkload(self, production, production_on_spot)
        else:
            self.workload = EnvSeriesWorkload(self)

    def _new_node(self, group: str, ready_at: int) -> SimNode:
        node = super()._new_node(group, ready_at)
        self.node_log.append((self.now, group, 1))
        if group == GUARANTEED:
            self.env.floor_owner[id(node)] = self
            self.floor_nodes.append(node)
            self._floor_ready_at = max(self._floor_ready_at, node.ready_at)
        return node

    def _remove(self, node: SimNode, spot_reclaim: bool) -> None:
        super()._remove(node, spot_reclaim)
        self.node_log.append((self.now, node.group, -1))

    def set_lending_limit(self, gpus: int) -> None:
        """The policy patched the floor flavor's lendingLimit. Lowered: nothing is evicted, new borrowing stops at
        it (Kueue v0.19.2, docs/aws-rules.md); raised: borrowers waiting for room are woken."""
        raised = gpus > self.lending_limit_gpus
        self.env.cohort_lendable_gpus += gpus - self.lending_limit_gpus  # every fair share's denominator moves
        self.lending_limit_gpus = gpus
        if raised:
            self.changed = True
            self.env.wake(self)

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

    def floor_room(self, now: int) -> tuple[int, int, int, int]:
        """(ready floor nodes, most free GPUs on one of them, how many of them are empty, most free GPUs on any floor
        node) at minute `now`: kept until a pod binds to or leaves the floor (floor_version), a floor node is added
        or becomes ready (issue 41: kube-scheduler's passes and the wake-up test ask it for every pod pinned to the
        floor, and a floor has tens of nodes)."""
        key = (self.floor_version, len(self.floor_nodes), -1 if now >= self._floor_ready_at else now)
        if self._floor_room[0] != key:
            ready = [n for n in self.floor_nodes if n.ready_at <= now]
            answer = (
                len(ready),
                max((n.gpus - n.busy for n in ready), default=-1),
                sum(1 for n in ready if n.busy == 0),
                max((n.gpus - n.busy for n in self.floor_nodes), default=-1),
            )
            self._floor_room = (key, answer)
        return self._floor_room[1]

    def set_busy(self, node: SimNode, busy: int) -> None:
        if node.group == GUARANTEED:
            self._floor_busy += busy - node.busy
            self.floor_version += 1  # the pods on its floor changed (EnvJobsWorkload.place_on_floor reads it)
        super().set_busy(node, busy)


class EnvJobsWorkload(JobsWorkload):
    """JobsWorkload with job classes and Kueue's cohort, as the generated objects behave (module docstring).

    Two steps, as on a cluster. **Admission (Kueue)**: a waiting job gets one flavor, by quota alone, in its
    ClusterQueue's order (own floor, the floors its queue may borrow, its own elastic flavor), possibly after Kueue
    evicts other workloads to make quota room (sim/kueue.py `reclaim_targets`, the one victim search: reclaim and
    withinClusterQueue alike). **Placement (kube-scheduler)**: the admitted job's pods carry that flavor's node
    selector and wait for a node of it; they are never moved to another flavor. A pod pinned to a floor whose free
    GPUs are in pieces too small for it preempts lower-priority pods there (sim/cluster.py `scheduler_victims`, kube-scheduler's
    default preemption). With no lender, no production job kept off any node and no priority within the pool
    (`plain`) it schedules exactly as JobsWorkload."""

    sim: PoolSim  # always a PoolSim here (PoolSim.__init__ builds it)
    # What a kube-scheduler preemption victim takes to go: Kubernetes' default terminationGracePeriodSeconds (the
    # preemptor binds after it: kubernetes.io "Pod Priority and Preemption", "Graceful termination of preemption
    # victims"; docs/aws-rules.md)
    victim_grace_s = 30.0

    def __init__(self, sim: PoolSim, production: list[bool] | None, production_on_spot: bool):
        self.production = production
        self.production_on_spot = production_on_spot
        self.prod_queues: dict[int, list] = {}
        self.plain = True
        # Set by the environment (module docstring): the pool's ClusterQueue preempts lower priority within
        # (a production-tier pool), and its production jobs are admitted before its interruptible ones.
        self.priority_within = False
        self.within_lower_priority = False
        self.split = False  # the pool has a production queue: its interruptible work borrows its floor
        self.interruptible_priority = 0
        super().__init__(sim)
        n = len(self.gpus)
        self.lenders: list[tuple[PoolSim, int | None]] = []  # set by the environment
        self.borrowed: dict[str, int] = {}  # lender -> GPUs this pool's jobs hold on its floor now (running)
        self.quota_borrowed: dict[str, int] = {}  # lender -> GPUs of this pool's jobs admitted to its floor
        self.quota_borrowed_total = 0  # their sum, kept as they change (read at every fair-sharing comparison)
        self.borrowed_gpu_minutes = 0
        self.borrowed_gpu_minutes_from: dict[str, float] = {}  # lender -> GPU-minutes on its floor (the loan's bill)
        self.borrowed_now = 0
        self._borrowed_since = 0
        self.lender_of: list = [None] * n  # the PoolSim whose floor job i runs on, if borrowed
        self.admitted_at = [0] * n  # minute of the last admission (Kueue's QuotaReserved)
        self.admitted_to: list = [None] * n  # None (waiting), a PoolSim (its floor flavor) or ELASTIC_FLAVOR
        self.waiting: dict[int, list] = {}  # size -> heap of jobs Kueue has not admitted (suspended, no pods)
        self.floor_pending: list = []  # heap of jobs admitted to a floor whose pods wait for a node of it
        # self.queues / self.prod_queues: jobs admitted to the pool's elastic flavor whose pods are pending, the
        # interruptible and the production ones: what the policy function sees (floor-pinned pods it ignores,
        # policy/pods.py `admits`; suspended jobs have no pods)
        self.elastic_admitted: dict[str, int] = {}  # elastic flavor kind -> GPUs admitted to it
        self.first_placement: list = [None] * n  # (pool whose node, node group) of the first start
        self.production_interruptions = 0
        self.reclaim_preemptions = 0
        self.reclaim_lost_gpu_minutes = 0.0
        self.fair_share_preemptions = 0  # of the reclaims: evicted for another borrower under fair sharing
        self.fair_share_reclaims = 0  # of those, the ones whose pods were running (counted in reclaim_preemptions)
        self.fair_share_reclaim_lost_gpu_minutes = 0.0  # and the work they lost (in reclaim_lost_gpu_minutes)
        self.priority_preemptions = 0  # interruptible jobs evicted by Kueue for this pool's own production jobs
        self.priority_lost_gpu_minutes = 0.0
        self.scheduler_preemptions = 0  # jobs whose pods kube-scheduler preempted for a higher-priority pod
        self.scheduler_lost_gpu_minutes = 0.0
        self._stopping_as: str | None = None  # why the job being stopped stops: "reclaim" | "within" | "scheduler"
        # (floor owner, GPUs, priority, nodes) -> the owner's floor_version when kube-scheduler found no victims
        self._no_victims: dict[tuple, int] = {}

    # -- classes --

    def pending_workloads(self) -> int:
        """Kueue's status.pendingWorkloads of the pool's queues: the jobs not admitted yet (suspended, no pods)."""
        return sum(len(q) for q in self.waiting.values())

    def is_production(self, i: int) -> bool:
        return self.production is not None and self.production[i]

    def job_priority(self, i: int) -> int:
        """The job's WorkloadPriorityClass value, the same as its pods' PriorityClass (docs/scheduling.md)."""
        return PRIORITY_VALUES[Tier.production] if self.is_production(i) else self.interruptible_priority

    def _enqueue(self, i: int) -> None:
        if self.plain:
            heapq.heappush(self.queues.setdefault(self.gpus[i], []), i)
            return
        flavor = self.admitted_to[i]
        if flavor is None:
            heapq.heappush(self.waiting.setdefault(self.gpus[i], []), i)
        elif flavor == ELASTIC_FLAVOR:
            heapq.heappush((self.prod_queues if self.is_production(i) else self.queues).setdefault(self.gpus[i], []), i)
        else:
            heapq.heappush(self.floor_pending, i)

    def pending_counts(self) -> dict[int, int]:
        out = {size: len(q) for size, q in self.queues.items() if q}
        for size, q in self.prod_queues.items():
            if q:
                out[size] = out.get(size, 0) + len(q)
        return out

    def on_demand_only_pending(self) -> dict[int, int]:
        """Pending pods that may not run on spot (sim/controllers/karpenter.py Karpenter launches on-demand for them)."""
        if self.production_on_spot or not self.sim.spec.has_spot:
            return {}
        return {size: len(q) for size, q in self.prod_queues.items() if q}

    def pending_indices(self):
        """Every job not running: waiting for admission, or admitted with its pods pending."""
        for qs in (self.waiting, self.queues, self.prod_queues):
            for q in qs.values():
                yield from q
        yield from self.floor_pending

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
        owner.lent_on_node[node.id] = owner.lent_on_node.get(node.id, 0) + used
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
        owner.lent_on_node[node.id] -= used
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
        for lender, gpus in self.borrowed.items():
            self.borrowed_gpu_minutes_from[lender] = self.borrowed_gpu_minutes_from.get(lender, 0) + gpus * (
                now - self._borrowed_since
            )
        self._borrowed_since = now

    def _start(self, i: int, chosen: list, now: int) -> None:
        owner = self.sim.env.floor_owner.get(id(chosen[0][0]))
        self.lender_of[i] = owner if owner is not None and owner is not self.sim else None
        if self.plain:
            self.admitted_at[i] = now
        if self.first_placement[i] is None:
            self.first_placement[i] = ((owner or self.sim).spec.name, chosen[0][0].group)
        super()._start(i, chosen, now)

    def _stop(self, i: int, now: int, finished: bool) -> None:
        start = self.run_start[i]
        if start is not None and start > now:  # stopped while its victims terminate (`place_on_floor`): never ran
            self.pending_minutes_so_far[i] -= start - now
            if self.first_start[i] == start:
                self.first_start[i] = None
            self.run_start[i] = now
        why = self._stopping_as
        if finished or why in ("reclaim", "within"):
            self._release(i)  # the workload leaves its flavor's quota: done, or evicted by Kueue (requeued)
        if not finished and self.is_production(i):
            self.production_interruptions += 1
        if finished or why is None:
            super()._stop(i, now, finished)
            self.lender_of[i] = None
            return
        lost = self.sim.c.lost_gpu_minutes
        super()._stop(i, now, finished)
        lost = self.sim.c.lost_gpu_minutes - lost
        if why == "reclaim":
            self.reclaim_preemptions += 1
            self.reclaim_lost_gpu_minutes += lost
        elif why == "within":
            self.priority_preemptions += 1
            self.priority_lost_gpu_minutes += lost
        else:
            self.scheduler_preemptions += 1
            self.scheduler_lost_gpu_minutes += lost
        self.lender_of[i] = None

    def stop_as(self, i: int, now: int, why: str) -> None:
        """Job i's pods stop for `why`: "reclaim" / "within" (Kueue evicts the workload: it leaves its flavor and
        waits for admission again) or "scheduler" (kube-scheduler preempts its pods: the workload stays admitted and
        its new pods wait on the same flavor). Its work since the last checkpoint is lost."""
        self.sim.env.wake(self.sim)
        self._stopping_as = why
        try:
            self._stop(i, now, finished=False)
        finally:
            self._stopping_as = None

    def kueue_evict(self, i: int, now: int, why: str) -> None:
        """Kueue evicts workload i (a reclaim, or a higher priority in its ClusterQueue): running, its pods stop;
        admitted but pending, it only gives its quota back. Either way it waits for admission again."""
        if self.run_start[i] is not None:
            self.stop_as(i, now, why)
            return
        self.sim.env.wake(self.sim)
        flavor = self.admitted_to[i]
        if flavor == ELASTIC_FLAVOR:
            q = (self.prod_queues if self.is_production(i) else self.queues)[self.gpus[i]]
        else:
            q = self.floor_pending
        q.remove(i)
        heapq.heapify(q)
        self._release(i)
        self._enqueue(i)
        self.sim.changed = True
        self.sim.version += 1  # its pending pods are gone (suspended again): the controller reads another pod list

    # -- Kueue: quota and admission --

    def elastic_flavor(self, prod: bool) -> tuple[str, int] | None:
        """(kind, quota GPUs) of the elastic flavor a job of this class is admitted to (config/scheduling.py
        pool_flavors, pool_queues), or None: a spot flavor's quota is the spot group's max (the on-demand fallback
        replaces missing spot); work kept off spot gets the on-demand group's."""
        spec = self.sim.spec
        gpn = spec.gpus_per_node
        if prod and not self.production_on_spot and spec.has_spot:
            return (ON_DEMAND, spec.on_demand_max_nodes * gpn) if spec.has_on_demand else None
        if spec.has_spot:
            return SPOT, spec.spot_max_nodes * gpn
        return (ON_DEMAND, spec.on_demand_max_nodes * gpn) if spec.has_on_demand else None

    def own_nominal(self, i: int) -> bool:
        """Whether job i's use of its own floor counts against its ClusterQueue's nominal quota: every job of a pool
        with one queue; with a production queue, only production jobs (the others borrow the floor from it)."""
        return not self.split or self.is_production(i)

    def _admit(self, i: int, flavor, now: int) -> None:
        g = self.gpus[i]
        q = self.waiting[g]
        if q and q[0] == i:
            heapq.heappop(q)
        else:
            q.remove(i)
            heapq.heapify(q)
        self.admitted_to[i] = flavor
        self.admitted_at[i] = now
        if flavor == ELASTIC_FLAVOR:
            kind = self.elastic_flavor(self.is_production(i))[0]
            self.elastic_admitted[kind] = self.elastic_admitted.get(kind, 0) + g
        else:
            borrowed = flavor is not self.sim or not self.own_nominal(i)
            flavor.floor_admitted[(id(self), i)] = (self, i, borrowed)
            if borrowed:
                flavor.quota_lent += g
                name = flavor.spec.name
                self.quota_borrowed[name] = self.quota_borrowed.get(name, 0) + g
                self.quota_borrowed_total += g
                flavor.borrowers[self] = None
                self.sim.env.share_epoch += 1  # this queue's fair share moved
            else:
                flavor.quota_own += g
        self._enqueue(i)
        # Admitted, the Workload's pods are created (pending pods the pool's controller reads; a floor's usage the
        # lend-ahead rule reads): a change the quiet-tick proof must see, even after this minute's ticks (a job
        # Kueue evicted during the fair-sharing round is admitted in the next pass, after the controllers' turn).
        self.sim.version += 1

    def _release(self, i: int) -> None:
        flavor = self.admitted_to[i]
        if flavor is None:
            return
        g = self.gpus[i]
        self.admitted_to[i] = None
        if flavor == ELASTIC_FLAVOR:
            kind = self.elastic_flavor(self.is_production(i))[0]
            self.elastic_admitted[kind] -= g
            return
        _, _, borrowed = flavor.floor_admitted.pop((id(self), i))
        if borrowed:
            flavor.quota_lent -= g
            self.quota_borrowed[flavor.spec.name] -= g
            self.quota_borrowed_total -= g
            self.sim.env.share_epoch += 1  # this queue's fair share moved
            if not self.quota_borrowed[flavor.spec.name]:
                del flavor.borrowers[self]
        else:
            flavor.quota_own -= g
        if flavor is not self.sim:
            flavor.changed = True  # quota of its floor is free again
            flavor.env.wake(flavor)

    def admit(self, now: int, borrowing: bool) -> None:
        """Kueue's admission of this pool's waiting jobs, in its ClusterQueue order (priority, then creation time;
        production first where `priority_within`). Each job takes the first flavor of its queue where it fits, by
        quota alone; `flavorFungibility` MayStopSearch stops at a flavor where it fits by borrowing or by
        preempting. Kueue admits workloads that fit under nominal quota before those that borrow: the first round
        (`borrowing` False) admits only those, and a job whose first fitting flavor is borrowed waits for the
        second."""
        cursor = self.admission_cursor()
        if cursor is None:
            return
        order, fails_at = cursor
        for _, i in order:
            prod = self.is_production(i)
            g = self.gpus[i]
            if g >= fails_at[prod]:
                continue
            outcome = self._try_admit(i, now, borrowing)
            if outcome is None:
                fails_at[prod] = g

    def admission_cursor(self) -> tuple[list, dict] | None:
        """The waiting jobs in the ClusterQueue's order, and per class the smallest size that found no flavor this
        pass (sizes at or above it are skipped: BestEffortFIFO moves on past a head that does not fit). None:
        nothing waits."""
        if not any(self.waiting.values()):
            return None
        first = 0 if self.priority_within else 1
        order = sorted((first if self.is_production(i) else 1, i) for q in self.waiting.values() for i in q)
        return order, {False: math.inf, True: math.inf}

    def fair_head(self, cursor: tuple[list, dict], pos: int):
        """The queue's head for Kueue's fair-sharing tournament from position `pos` of `cursor`: the first job that
        some flavor has room for (jobs that find none are skipped, as in `admit`). (position, job, choice) or
        None when no job is left; `choice` as `kueue.choose`'s."""
        order, fails_at = cursor
        while pos < len(order):
            i = order[pos][1]
            prod, g = self.is_production(i), self.gpus[i]
            if g < fails_at[prod]:
                choice = kueue.choose(self, i, borrowing=True)
                if choice is not None:
                    return pos, i, choice
                fails_at[prod] = g
            pos += 1
        return None

    def borrowed_quota(self) -> int:
        """GPUs of quota this pool's queue holds above its nominal quota, every flavor together: what Kueue's
        dominant resource share counts (v0.19.2 pkg/cache/scheduler/fair_sharing.go `dominantResourceShare`:
        usage above the queue's SubtreeQuota, summed over flavors of one resource; a borrowed floor's nominal
        quota in this queue is 0, so all of its usage there)."""
        return self.quota_borrowed_total

    def admit_choice(self, i: int, choice, now: int) -> None:
        flavor, targets, borrows = choice
        for w, j, why in targets:
            if not borrows:
                w.kueue_evict(j, now, why)
                continue
            # a borrower preempting another borrower (fair sharing), counted apart within the reclaims: every
            # eviction, and of them those that stopped running pods, with the work they lost
            w.fair_share_preemptions += 1
            stopped, lost = w.reclaim_preemptions, w.reclaim_lost_gpu_minutes
            w.kueue_evict(j, now, why)
            w.fair_share_reclaims += w.reclaim_preemptions - stopped
            w.fair_share_reclaim_lost_gpu_minutes += w.reclaim_lost_gpu_minutes - lost
        self._admit(i, flavor, now)

    def _try_admit(self, i: int, now: int, borrowing: bool):
        """One job through its queue's flavors: True admitted, False deferred to the borrowing round, None no
        flavor has room."""
        choice = kueue.choose(self, i, borrowing)
        if not choice:
            return choice
        self.admit_choice(i, choice, now)
        return True

    # -- kube-scheduler: the admitted pods on their flavor's nodes --

    def schedule(self, now: int) -> None:
        if self.plain:
            super().schedule(now)
            return
        self.admit(now, borrowing=False)
        self.admit(now, borrowing=True)
        self.place(now)

    def place(self, now: int) -> None:
        """Bind the pending pods of admitted jobs to nodes of their flavor: the pool's elastic nodes (production
        kept off spot: its on-demand nodes), or the floor it was admitted to; a floor pod that finds no room
        preempts lower-priority pods (sim/cluster.py `scheduler_victims`). A pool alone; in a group of pools
        that lend to each other the environment places the floor pods of all of them in one priority order
        (Environment._floor_pass)."""
        self.place_elastic(now)
        if self.floor_pending:
            for i in sorted(self.floor_pending, key=lambda j: (-self.job_priority(j), j)):
                if self.place_on_floor(i, now):
                    self.floor_pending.remove(i)
            heapq.heapify(self.floor_pending)

    def place_elastic(self, now: int) -> None:
        """Bind the pending pods of jobs admitted to the pool's elastic flavor to its elastic nodes (production
        kept off spot: its on-demand nodes). No other pool's pod may use these nodes (the flavor's node
        selector), so the pools' order does not matter here."""
        sim = self.sim
        sim.changed = False
        if not self.pending_gpus:
            return
        elastic = [
            n
            for n in sim.nodes.values()
            if n.group != GUARANTEED and n.ready_at <= now and not n.warned and not n.closed and n.busy < n.gpus
        ]
        elastic.sort(key=lambda n: (FILL_RANK[n.group], n.serial))
        off_spot = [n for n in elastic if n.group != SPOT]
        gpn = sim.spec.gpus_per_node
        for prod, qs in ((True, self.prod_queues), (False, self.queues)):
            nodes = off_spot if prod and not self.production_on_spot else elastic
            fits_below, gang_below = gpn + 1, math.inf
            heads = [(q[0], size) for size, q in qs.items() if q]
            heapq.heapify(heads)
            while heads and nodes:
                i, size = heapq.heappop(heads)
                if size <= gpn:
                    if size >= fits_below:
                        continue
                    placed = self._place_single(i, nodes, now)
                    if not placed:
                        fits_below = size
                else:
                    k = -(-size // gpn)
                    if k >= gang_below:
                        continue
                    placed = self._place_gang(i, k, nodes, now)
                    if not placed:
                        gang_below = k
                if placed:
                    q = qs[size]
                    heapq.heappop(q)
                    if q:
                        heapq.heappush(heads, (q[0], size))
                    nodes = [n for n in nodes if n.busy < n.gpus]

    def place_on_floor(self, i: int, now: int) -> bool:
        owner, g = self.admitted_to[i], self.gpus[i]
        gpn = owner.spec.gpus_per_node
        # still no room (no node with g free, or fewer than a gang's empty nodes) and no victims: as below, without
        # going through the floor's nodes (a pod waits through many passes)
        _, most_free, empty, _ = owner.floor_room(now)
        if (most_free < g if g <= gpn else empty < -(-g // gpn)) and self.no_victims_on(owner, i):
            return False
        nodes = [n for n in owner.floor_nodes if n.ready_at <= now]
        sign = 1 if self.sim.placement == MOST_ALLOCATED else -1
        if g <= gpn:
            room = [n for n in nodes if n.gpus - n.busy >= g]
            if room:
                self._start(i, [(min(room, key=lambda n: (sign * (n.gpus - n.busy), n.serial)), g)], now)
                return True
        else:
            k = -(-g // gpn)
            whole = [n for n in nodes if n.busy == 0]
            if len(whole) >= k:
                self._start(i, [(n, gpn) for n in whole[: k - 1]] + [(whole[k - 1], g - gpn * (k - 1))], now)
                return True
        # The victim search reads only the floor's pods and this pod's size and priority: one that found none
        # finds none again until a pod binds to or leaves the floor (a pending gang or production pod is tried
        # at every scheduling pass while it waits: a fifth of a 32-pool month's CPU before this was kept).
        key = (owner.spec.name, g, self.job_priority(i), len(nodes))
        if self.no_victims_on(owner, i):
            return False
        chosen = cluster.scheduler_victims(self, i, nodes)
        if chosen is None:
            self._no_victims[key] = owner.floor_version
            return False
        chosen_nodes, victims = chosen
        for w, j in victims:
            if w.run_start[j] is not None:  # a victim on several chosen nodes stops once
                w.stop_as(j, now, "scheduler")
        # The victims get their graceful termination period; the pod, nominated to the node (its room held for it
        # meanwhile), binds once they are gone: it holds the GPUs from now and runs from then.
        runs_from = now + ready_minute(self.victim_grace_s)
        if len(chosen_nodes) == 1:
            if chosen_nodes[0].gpus - chosen_nodes[0].busy < g:
                return False  # not freed as counted (should not happen): the pod waits
            self._start(i, [(chosen_nodes[0], g)], runs_from)
        else:
            if any(n.busy for n in chosen_nodes):
                return False
            k = len(chosen_nodes)
            self._start(
                i, [(n, gpn) for n in chosen_nodes[: k - 1]] + [(chosen_nodes[k - 1], g - gpn * (k - 1))], runs_from
            )
        return True

    def may_place_on_floor(self, i: int) -> bool:
        """Whether kube-scheduler could bind job i's pending pods to the floor it was admitted to, or preempt for
        them there, now: a necessary condition of `place_on_floor` (false: it would find nothing)."""
        owner = self.admitted_to[i]
        need = min(self.gpus[i], owner.spec.gpus_per_node)
        if owner.floor_room(owner.now)[3] >= need:  # any floor node with room for it
            return True
        # no room, but kube-scheduler may preempt lower-priority pods there now: unless its last search on this
        # floor, unchanged since, found no victims (a pod another pool's job left makes room for it with victims
        # that did not add up before)
        return not self.no_victims_on(owner, i)

    def no_victims_on(self, owner: "PoolSim", i: int) -> bool:
        """Whether kube-scheduler's last victim search for job i's pods on `owner`'s floor found none and the
        floor's pods have not changed since."""
        key = (owner.spec.name, self.gpus[i], self.job_priority(i), owner.floor_room(self.sim.now)[0])
        return self._no_victims.get(key) == owner.floor_version

    def finish(self, horizon: int) -> None:
        for i, start in enumerate(self.run_start):
            if start is not None and start > horizon:  # still nominated at the horizon: nothing served yet
                self.run_start[i] = horizon
        super().finish(horizon)
        self._settle_borrowed()  # the borrowed GPU-minutes up to the horizon


# --- the environment -------------------------------------------------------------------------------------------


def fill_series_classes(
    tiers: list[list[SimNode]],
    lent_on: Callable[[SimNode], int],
    production: int,
    interruptible: int,
    prod_on_spot: bool,
) -> tuple[dict[str, int], dict[str, int]]:
    """A demand series' fill of two classes, as the generated Kueue objects route them (issue 36):
    (production GPUs per node id, interruptible GPUs per node id). `tiers`: the ready nodes in fill order (floor,
    spot, on-demand, then warned or closed ones last, sim/engine.py SeriesWorkload.schedule); `lent_on(node)`: GPUs
    of the node other pools' pods hold. Production work (the team's production queue: its floor, then on-demand,
    never spot unless the config lets production run there, config/scheduling.py production_work_on_spot, never
    a borrowed floor) fills first: it outranks the pool's interruptible work on the floor (its queue reclaims the
    floor, docs/scheduling.md). Interruptible work (the team's interruptible queue) takes what is left, floor,
    spot, then on-demand. A series borrows no other pool's floor (module docstring, "Not modelled")."""
    prod_on: dict[str, int] = {}
    rest_on: dict[str, int] = {}
    left = production
    for tier in tiers:
        for n in tier:
            if not left:
                break
            if n.group == SPOT and not prod_on_spot:
                continue
            use = min(n.gpus - lent_on(n), left)
            if use > 0:
                prod_on[n.id] = use
                left -= use
    left = interruptible
    for tier in tiers:
        for n in tier:
            if not left:
                break
            use = min(n.gpus - lent_on(n) - prod_on.get(n.id, 0), left)
            if use > 0:
                rest_on[n.id] = use
                left -= use
    return prod_on, rest_on


class EnvSeriesWorkload(SeriesWorkload):
    """A demand series in the environment: SeriesWorkload, with its floor lent as the generated Kueue objects lend
    it whatever the format the owner's demand is given in (issue 36). The series' GPUs are workloads of the
    owner's queue on its floor flavor, within its nominal quota (up to the floor's size); other queues borrow the
    quota it leaves (sim/kueue.py `borrow_room` reads `quota_own`), and when the series rises Kueue reclaims
    (reclaimWithinCohort: Any): the borrowed workloads are evicted in the order `kueue.reclaim_targets`
    takes them (lowest priority, most recently admitted first; by share under fair sharing) until the series
    fits, then given back in reverse where it still fits (fillBackWorkloads). The fill uses only the floor GPUs no
    borrowed pod holds (`lent_on`); its production GPUs fill first (fill_series_classes, split_production). Not
    modelled: a series borrowing (it has no jobs to admit to another floor).
    `plain` (the environment sets it): no queue may borrow the floor, so it runs as in a single-pool run."""

    def __init__(self, sim: PoolSim):
        super().__init__(sim)
        self.sim: PoolSim = sim
        self.plain = True
        # Two classes (split_production): each minute's production GPUs, None while the series is all
        # interruptible (it then fills as SeriesWorkload does). The totals of SeriesWorkload (backlog, waiting,
        # pending) stay the sums of both classes; below, the production class's part of them.
        self.production_series: tuple[int, ...] | None = None
        self.production_on_spot = False
        self.prod_backlog = 0
        self._prod_backlog_before = 0
        self._prod_backlog_after = 0
        self.prod_width = 0
        self.rest_width = 0
        self.prod_pending = 0
        self._prod_on: dict[str, int] = {}  # node id -> production GPUs the last fill put on it
        self.production_interruptions = 0  # nodes removed while they ran production GPUs

    def split_production(self, share: float, on_spot: bool) -> None:
        """Run the series as two classes: each minute `split_gpus(level, share)` production GPUs (the split the
        fluid profiles use, sim/demand.py), the rest interruptible; `on_spot`: production may use spot
        (config/scheduling.py production_work_on_spot)."""
        production = split_series(self.series, share)[0]
        self.production_series = production if any(production) else None
        self.production_on_spot = on_spot

    def lent_on(self, node: SimNode) -> int:
        return self.sim.lent_on_node.get(node.id, 0)

    def tick(self, now: int) -> None:
        super().tick(now)
        if self._minute == now:  # the fill repeats: nothing is delayed, in either class
            self._prod_backlog_before = self._prod_backlog_after = 0

    def schedule(self, now: int) -> None:
        """SeriesWorkload.schedule with two classes (fill_series_classes), each with its own backlog and width."""
        prod_series = self.production_series
        if prod_series is None:
            super().schedule(now)
            return
        sim = self.sim
        sim.changed = False
        d = self._level(now)
        dp = prod_series[now] if now < len(prod_series) else 0
        if self._minute == now:  # capacity changed within the minute: re-fill from the same starting point
            sim.c.served_gpu_minutes -= self._served_now
            self.backlog = self._backlog_before + (self.backlog - self._backlog_after)
            self.prod_backlog = self._prod_backlog_before + (self.prod_backlog - self._prod_backlog_after)
        self._minute = now
        self._backlog_before, self._prod_backlog_before = self.backlog, self.prod_backlog
        tiers: list[list[SimNode]] = [[], [], [], []]
        for n in sim.nodes.values():
            if n.ready_at <= now:
                tiers[3 if (n.warned or n.closed) else FILL_RANK[n.group]].append(n)
        prod_work = self.prod_backlog + dp
        rest_work = self.backlog - self.prod_backlog + d - dp
        prod_on, rest_on = fill_series_classes(tiers, self.lent_on, prod_work, rest_work, self.production_on_spot)
        for tier in tiers:
            for n in tier:
                sim.set_busy(n, self.lent_on(n) + prod_on.get(n.id, 0) + rest_on.get(n.id, 0))
        self._prod_on = prod_on
        served_prod, served_rest = sum(prod_on.values()), sum(rest_on.values())
        sim.c.served_gpu_minutes += served_prod + served_rest
        self._served_now = served_prod + served_rest
        self.prod_backlog = prod_work - served_prod
        rest_backlog = rest_work - served_rest
        self.backlog = self.prod_backlog + rest_backlog
        self._backlog_after, self._prod_backlog_after = self.backlog, self.prod_backlog
        self.level = d
        prod_waiting, rest_waiting = max(0, dp - served_prod), max(0, d - dp - served_rest)
        self.waiting = prod_waiting + rest_waiting
        self.prod_width = max(self.prod_width, prod_waiting) if self.prod_backlog else 0
        self.rest_width = max(self.rest_width, rest_waiting) if rest_backlog else 0
        prod_pending = min(math.ceil(self.prod_backlog), self.prod_width)
        pending = prod_pending + min(math.ceil(rest_backlog), self.rest_width)
        if pending != self.pending or prod_pending != self.prod_pending:
            self.pending, self.prod_pending = pending, prod_pending
            sim.version += 1

    def on_demand_only_pending(self) -> dict[int, int]:
        """Pending pods that may not run on spot: the production class's (sim/controllers read it as they read
        EnvJobsWorkload's)."""
        if self.production_on_spot or not self.sim.spec.has_spot or not self.prod_pending:
            return {}
        return {1: self.prod_pending}

    def evict(self, node: SimNode) -> None:
        """SeriesWorkload.evict, the lost work returned to the backlog of the class that ran it."""
        if self.production_series is None:
            super().evict(node)
            return
        busy, prod = node.busy, self._prod_on.pop(node.id, 0)
        before = self.backlog
        super().evict(node)
        lost = self.backlog - before
        prod_lost = lost * prod // busy if busy else 0  # exact: lost is busy GPUs x minutes unless capped
        self.prod_backlog += prod_lost
        if prod_lost:
            self.prod_width = max(self.prod_width, prod)
        if lost > prod_lost:
            self.rest_width = max(self.rest_width, busy - prod)
        if prod:
            self.production_interruptions += 1

    @property
    def unmet_production_gpu_minutes(self) -> float:
        return self.prod_backlog if self.production_series is not None else 0

    def pending_workloads(self) -> int:
        """Kueue's status.pendingWorkloads of the owner's queue: the series' GPUs are its workloads (see the class
        docstring), so the GPUs that found no capacity are the pending ones."""
        return self.waiting

    def admit(self, now: int, borrowing: bool) -> None:
        """Kueue's nominal pass: the series' demand (level and backlog, up to the floor) takes its quota back."""
        if borrowing:
            return
        sim = self.sim
        backlog = self._backlog_before + (self.backlog - self._backlog_after) if self._minute == now else self.backlog
        sim.quota_own = min(sim.floor_gpus, self._level(now) + backlog)
        over = sim.quota_own + sim.quota_lent - sim.floor_gpus
        if over <= 0:
            return
        cands = [kueue.candidate(w, j, RECLAIM) for w, j, _ in sim.floor_admitted.values()]
        cands = kueue.candidates_in_order(cands, sim.env.fair_sharing)
        floor = sim.floor_gpus
        targets = kueue.classic_victims(cands, sim.quota_own, sim.quota_lent, lambda own, lent: own + lent <= floor)
        for _, w, j, why, _ in targets:
            w.kueue_evict(j, now, why)

    def admission_cursor(self) -> None:
        return None  # nothing waits for admission: the series' demand is its quota (admit)

    def place(self, now: int) -> None:
        self.schedule(now)

    def place_elastic(self, now: int) -> None:
        # The series' 1-GPU pods fill its own floor and elastic nodes in its own step, before the pods of other
        # pools pinned to floors (Environment._floor_pass): they hold its floor's quota, and a borrower is admitted
        # only to what they leave (sim/kueue.py borrow_room), so on the floor's nodes it needs only the pieces.
        self.schedule(now)


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
    def __init__(
        self,
        prices: Prices,
        cfg,
        demands: dict,
        controller_factory: Callable,
        settings: SimSettings = SimSettings(),
        horizon_minutes: int | None = None,
        specs: dict[str, PoolSpec] | None = None,
        window_from_minute: int | None = None,
    ):
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
        self.horizon = (
            horizon_minutes if horizon_minutes is not None else max(default_horizon(demands[n]) for n in names)
        )
        if window_from_minute is not None and not 0 <= window_from_minute <= self.horizon:
            raise EnvironmentError(
                f"window_from_minute {window_from_minute}: must be between 0 and the horizon ({self.horizon} minutes)"
            )
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
        self.fair_sharing = fair_sharing_on(cfg)
        # the shipped fairSharing.preemptionStrategies (stacks/kubernetes/kueue.py manager_config)
        self.fair_sharing_strategies = tuple(cfg.scheduling.kueue.fair_sharing_preemption_strategies)
        self._pool_order = {p.name: n for n, p in enumerate(cfg.pools)}
        self._placing_floors = False  # inside kube-scheduler's floor pass (`_floor_pass`)
        self.floor_owner: dict[int, PoolSim] = {}
        self.pools: dict[str, PoolSim] = {}
        for p in cfg.pools:
            spec = specs.get(p.name) or spec_from_config(prices, cfg, p.name)
            trace = demands[p.name]
            share = production_share_pct(p)
            # a series has no jobs to class: its minutes are split (EnvSeriesWorkload.split_production, below)
            production = (
                production_flags(trace, share / 100, settings.seed, p.name) if isinstance(trace, JobsTrace) else None
            )
            if spec.floor_nodes != (p.guaranteed.nodes if p.guaranteed else 0):
                raise EnvironmentError(
                    f"specs['{p.name}'] has {spec.floor_nodes} floor nodes, the config "
                    f"{p.guaranteed.nodes if p.guaranteed else 0}: lending follows the config's "
                    f"plan, so change the floor in the config (pools[].guaranteed.nodes)"
                )
            # production work may use spot only where Kueue lets it: the one rule of config/scheduling.py, which the
            # single-pool advisor (advise/advisor.py) uses too
            on_spot = production_work_on_spot(cfg, p)
            self.pools[p.name] = PoolSim(
                self,
                spec,
                trace,
                controller_factory(spec),
                settings,
                self.horizon,
                production,
                on_spot,
                PRIORITY_VALUES[p.tier],
            )
            pool_sim = self.pools[p.name]
            if isinstance(pool_sim.workload, EnvSeriesWorkload):
                pool_sim.workload.split_production(share / 100, on_spot)
            pool_sim.lending_limit_gpus = self.sharing[p.name].lendable_gpus
            if lends_ahead(cfg, p) and pool_sim.lending_limit_gpus > 0:
                pool_sim.lend_ahead = (pool_sim.lending_limit_gpus, cfg.scheduling.kueue.reclaim_lookahead_minutes)
        # The cohort's lendable quota (Kueue v0.19.2 pkg/cache/scheduler/fair_sharing.go:186 `calculateLendable`:
        # each queue's nominal quota within its lendingLimit, every flavor): the floors' lendingLimits (moved by
        # lend-ahead, PoolSim.set_lending_limit) and the elastic quota a production queue leaves its pool's other
        # queue (no lendingLimit); other elastic flavors lend 0. In Kueue's units (time-slicing replicas).
        self._kueue_units = cfg.gpu_operator.time_slicing_replicas or 1
        self.cohort_lendable_gpus = elastic_lendable_gpus(cfg) // self._kueue_units + sum(
            s.lending_limit_gpus for s in self.pools.values()
        )
        self.share_epoch = 0  # bumped whenever a queue's borrowed quota changes (sim/kueue.py `holds_more_than`)
        # Lending links: a borrower's queue lists a lender's floor, the lender lends something, both run jobs.
        for name, sim in self.pools.items():
            w = sim.workload
            if not isinstance(w, EnvJobsWorkload):
                continue
            for lender in self.sharing[name].lenders:
                ls = self.pools[lender]
                if (
                    self.sharing[lender].lendable_gpus > 0
                    and ls.spec.floor_nodes
                    and isinstance(ls.workload, (EnvJobsWorkload, EnvSeriesWorkload))
                ):
                    w.lenders.append((ls, self.sharing[name].borrowing_limit_gpus.get(lender)))
            kept_off_spot = w.production is not None and not w.production_on_spot and sim.spec.has_spot
            # A production pool with a floor and interruptible jobs of its own: its ClusterQueue preempts lower
            # priority (config/scheduling.py preempt_lower_priority), its interruptible jobs run below production.
            # A pool of another tier with production work has a production queue that holds the floor's quota
            # (config/scheduling.py production_queue): its interruptible queue borrows the idle floor, and the
            # production queue admits first (it fits its nominal quota) and reclaims the floor from it
            # (reclaimWithinCohort: Any): the same order and the same preemption on the floor.
            pool_cfg = self.cfg.pool(name)
            w.split = self.cfg.scheduling.kueue.enabled and production_queue(self.cfg, pool_cfg)
            w.within_lower_priority = pool_cfg.tier == Tier.production
            w.priority_within = (
                (w.within_lower_priority or w.split)
                and w.production is not None
                and not all(w.production)
                and sim.spec.floor_nodes > 0
            )
            # a production-tier pool's interruptible jobs run at a lower WorkloadPriorityClass than its production
            w.interruptible_priority = PRIORITY_VALUES[
                Tier.experiment if pool_cfg.tier == Tier.production else pool_cfg.tier
            ]
            lends = (
                any(lender == name for o in self.sharing.values() for lender in o.lenders)
                and self.sharing[name].lendable_gpus > 0
            )
            w.plain = not w.lenders and not lends and not kept_off_spot and not w.priority_within
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
        # Where each pool sits, so that a minute costs work per pool processed, never per pool of the environment:
        # its place in the config (the order pools are woken, scheduled and reported in) and its group.
        for n, name in enumerate(names):
            self.pools[name].order = n
        self._by_order = [self.pools[name] for name in names]
        for k, group in enumerate(self.groups):
            for sim in group:
                sim.group_index = k
        self.lenders = [
            s
            for s in self.pools.values()
            if any(ls is s for o in self.pools.values() for ls, _ in getattr(o.workload, "lenders", ()))
        ]
        for s in self.lenders:  # a series whose floor a queue may borrow joins its group's Kueue passes
            if isinstance(s.workload, EnvSeriesWorkload):
                s.workload.plain = False

    # -- time --

    def run(self) -> "Environment":
        """Minute by minute, each pool's steps in sim.engine.Simulation.run's order. A pool is processed at the
        minutes its own quiet-tick proof (Simulation._quiet_until) names, and also at any minute another pool
        touches it (a job binding to or leaving its floor, a reclaim preempting its job, a lender's floor it could
        borrow now having room): it is woken first, its quiet minutes up to then accounted as Simulation._skip
        does. Processing a pool at a minute it could have skipped changes nothing (tests/sim/test_sim_speed.py), so
        the result is the tick-by-tick one (tests/sim/test_environment.py compares them).

        A minute costs work per pool processed in it, not per pool of the environment (issue 41): the minutes pools
        are due at sit in a heap (`due`: (minute, config order); an entry whose minute is no longer its pool's
        `next_at` is stale and dropped), a group is scheduled only when one of its pools was processed, and the
        pools another pool's change may let act are looked up among those with waiting work (`_hungry`)."""
        horizon, settings = self.horizon, self.settings
        warn, every, skip = settings.spot_warning_minutes, settings.sample_every_minutes, settings.skip_quiet_ticks
        self._warn, self._every = warn, every
        self._ticked = False
        pools = list(self.pools.values())
        for sim in pools:
            sim.controller.start(sim)
            sim.last = -1  # the last minute processed; minutes after it up to next_at - 1 are quiet
        # per group, its pools (config order) that could act when another pool frees room: waiting work
        self._hungry: list[set[PoolSim]] = [set() for _ in self.groups]
        due = [(sim.next_at, sim.order) for sim in pools]
        heapq.heapify(due)
        now = 0
        window = self.window_from
        while now < horizon:
            if window is not None and self._window_start is None and now >= window:
                if self.branches:
                    self._branch_off()
                self._window_start = {n: self._counters_at(sim, window) for n, sim in self.pools.items()}
            self._now = now
            self._awake: list[PoolSim] = []
            self._awake_in: dict[int, list[PoolSim]] = {}  # group index -> its pools processed this minute
            self._ticked = False
            woken = set()
            while due and due[0][0] <= now:
                at, n = heapq.heappop(due)
                if pools[n].next_at == at:  # else stale: the pool was processed since and is due later
                    woken.add(n)
            for n in sorted(woken):  # config order, as a scan of every pool would wake them
                self.wake(pools[n])
            for k in sorted(self._awake_in):
                self._schedule(self.groups[k], now)
            for sim in self._awake:  # may grow while iterating: a pool woken by a schedule
                sim.controller.tick(sim)
                sim.recommendations.clear()  # as Simulation.run: EventBridge delivers each recommendation once
                if sim.node_groups:
                    for g in (SPOT, ON_DEMAND):
                        if sim.desired[g] != sim.group_size(g):
                            sim._reconcile(g)
            self._ticked = True
            for k in sorted(self._awake_in):
                self._schedule(self.groups[k], now)
            for sim in self._awake:
                self._track_production_wait(sim, now)
                sim.gang_hold.tick(now)  # as Simulation.run, after the minute's last scheduling pass
                if now % every == 0:
                    sim._sample(now)
                sim.next_at = sim._quiet_until(now) if skip and now + 1 < horizon else now + 1
                heapq.heappush(due, (sim.next_at, sim.order))
                hungry = self._hungry[sim.group_index]
                if self._could_wait_on_others(sim):
                    hungry.add(sim)
                else:
                    hungry.discard(sim)
            while pools[due[0][1]].next_at != due[0][0]:  # drop stale entries: the earliest valid one is next
                heapq.heappop(due)
            now = due[0][0]
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
        self._awake_in.setdefault(sim.group_index, []).append(sim)
        if self._placing_floors:
            # Woken during kube-scheduler's floor pass (its pods preempted, or one of them may bind now): deciding
            # every minute it would have taken its elastic step before that pass, so it takes it now, before
            # whatever woke it changes the pool (a preemption's victims stop after this)
            self._kube_step(sim, now)
        if self._ticked:
            # Woken after the controllers' turn: its controller's tick this minute came before the change and,
            # the pool being quiet until then, repeated its last plan (Controller.repeat counts it so).
            sim.controller.repeat(sim, 1)

    def _schedule(self, group: list[PoolSim], now: int) -> None:
        awake = self._awake_in.get(group[0].group_index, [])
        if len(group) == 1:
            sim = group[0]
            if sim.last == now and sim.changed:
                sim.workload.schedule(now)
            return
        if not any(sim.changed for sim in awake):
            return
        # Pools not processed this minute join where they could act now (a floor they wait for or may borrow has
        # room), checked at their turn: what the pools before them did counts. Only a pool with waiting work can
        # (`_may_act`), and a pool not processed has not changed since it was: the group's `_hungry` ones.
        for sim in sorted(self._hungry[group[0].group_index], key=lambda s: s.order):
            if sim.last != now and self._may_act(sim):
                self.wake(sim)
        # Kueue admits the workloads that fit under their queue's nominal quota first, then those that borrow
        # (Kueue v0.19.2 pkg/scheduler/scheduler.go, the cohort's heads ordered "under nominal quota before
        # borrowing"); then kube-scheduler binds the admitted pods. Each pass goes through the pools in config
        # order, and a pool woken during a pass (a Kueue eviction requeued its job, a preemption stopped its pods)
        # takes its turn there if it has not come yet, as it would with every pool processed every minute.
        self._in_order(awake, lambda sim: sim.workload.plain or sim.workload.admit(now, borrowing=False))
        # the nominal pass's evictions may have left a floor room that a pool not processed could borrow
        for sim in sorted(self._hungry[group[0].group_index], key=lambda s: s.order):
            if sim.last != now and self._may_act(sim):
                self.wake(sim)
        if self.fair_sharing:
            self._fair_sharing_round(
                [sim.workload for sim in sorted(awake, key=lambda s: s.order) if not sim.workload.plain], now
            )
            # a borrower's preemption in that round may have freed floor nodes that a pool not processed has pods
            # pinned to (its waiting jobs could not be admitted at the round's start, or it would have been woken)
            for sim in sorted(self._hungry[group[0].group_index], key=lambda s: s.order):
                if sim.last != now and self._may_act(sim):
                    self.wake(sim)
        else:
            self._in_order(awake, lambda sim: sim.workload.plain or sim.workload.admit(now, borrowing=True))
        # kube-scheduler's pass: each pool's pods on its own elastic nodes (no other pool's pod may use them), then
        # the pods pinned to floors, of every pool in one order (`_floor_pass`). The admission rounds above may
        # have left room that a pool not processed could use: it is woken first, as every pool would be processed
        # deciding every minute (quota does not move during placement, so no later test can find more).
        hungry = self._hungry[group[0].group_index]
        for sim in sorted(hungry, key=lambda s: s.order):
            if sim.last != now and self._may_act(sim):
                self.wake(sim)
        self._in_order(awake, lambda sim: self._kube_step(sim, now))
        self._floor_pass(awake, hungry, now)

    def _floor_pass(self, awake: list[PoolSim], hungry: Iterable[PoolSim], now: int) -> None:
        """kube-scheduler binds the pods pinned to floors of the group's pools in one order: higher priority first,
        whatever the pool (kube-scheduler takes pending pods from one queue, kubernetes/kubernetes
        pkg/scheduler/framework/plugins/queuesort/priority_sort.go `Less`: priority, then the time the pod was
        queued; docs/aws-rules.md), equal priorities in the pools' config order then job index (the queue's
        timestamps are not modelled). A pod that finds no room preempts lower-priority pods (`place_on_floor`).
        Until the fourth session of 2026-12-06 each pool placed all its pods at its turn in config order, so an
        interruptible pod of an earlier pool could take a floor node that a production pod of a later pool was
        waiting for, and the production pod then preempted it.

        A pool not processed this minute (of `hungry`: it has waiting work) takes part lazily: its pod is tried at
        its turn when it could bind or preempt there (room on the floor, or victims not ruled out since the
        floor last changed: `EnvJobsWorkload.may_place_on_floor`), and its pool is woken then; deciding every minute it
        would have been tried and found nothing otherwise. A pool woken during the pass (its pods preempted, or
        lazily) takes its elastic step then. A pod that becomes pending during the pass (a preemption victim's
        replacement, created after the victim's graceful termination) waits for the next pass."""
        processed = set(awake)
        turns: list[tuple[int, int, int]] = []
        jobs_of: dict[int, EnvJobsWorkload] = {}  # config order -> the pool's workload
        for sim in itertools.chain(awake, (s for s in hungry if s not in processed)):
            w = sim.workload
            if isinstance(w, EnvJobsWorkload) and not w.plain and w.floor_pending:
                jobs_of[sim.order] = w
                turns.extend((-w.job_priority(i), sim.order, i) for i in w.floor_pending)
        if not turns:
            return
        turns.sort()
        placed: set[EnvJobsWorkload] = set()
        self._placing_floors = True  # a pool woken from here takes its elastic step at once (`wake`)
        try:
            for _, order, i in turns:
                sim, w = self._by_order[order], jobs_of[order]
                if sim.last != now:
                    if not w.may_place_on_floor(i):
                        continue
                    self.wake(sim)
                if i in w.floor_pending and w.place_on_floor(i, now):
                    w.floor_pending.remove(i)
                    placed.add(w)
        finally:
            self._placing_floors = False
        for w in placed:
            heapq.heapify(w.floor_pending)

    @staticmethod
    def _kube_step(sim: PoolSim, now: int) -> None:
        """kube-scheduler's pass over the pool's own nodes: a pool without Kueue's classes schedules all its pods
        (`schedule`), the others their elastic flavor's pods (`place_elastic`; the floors' come in `_floor_pass`)."""
        w = sim.workload
        if isinstance(w, (EnvJobsWorkload, EnvSeriesWorkload)) and not w.plain:
            w.place_elastic(now)
        else:
            w.schedule(now)

    def _in_order(self, awake: list[PoolSim], step: Callable[[PoolSim], object]) -> None:
        """`step` for each pool of `awake` in config order; a pool appended to `awake` meanwhile (woken by a step)
        gets its step too if its turn has not passed."""
        turns = sorted(sim.order for sim in awake)
        queued = set(turns)
        seen, pos = len(awake), -1
        while turns:
            pos = heapq.heappop(turns)
            step(self._by_order[pos])
            if len(awake) > seen:
                for other in awake[seen:]:
                    if other.order > pos and other.order not in queued:
                        heapq.heappush(turns, other.order)
                        queued.add(other.order)
                seen = len(awake)

    def _fair_sharing_round(self, queues: list, now: int) -> None:
        """The borrowing round under Kueue's fair sharing (config/scheduling.py fair_sharing_on): the heads of all
        queues compete, and the winner is admitted before the next tournament (Kueue v0.19.2 pkg/scheduler/
        fair_sharing_iterator.go `pop` recomputes every head's share after each admission; `entryComparer.less`):
        1. a head that borrows nothing first (feature FairSharingPrioritizeNonBorrowing, on by default);
        2. lowest dominant resource share with the head admitted: the queue's borrowed quota / the cohort's
           lendable quota / its weight (pkg/cache/scheduler/fair_sharing.go `dominantResourceShare`; one flat
           cohort, so the lendable quota is the same for every queue and the order is borrowed / weight);
        3. higher priority (PrioritySortingWithinCohort, on by default); 4. earlier creation (queue order
        timestamp); then the pools' config order (Kueue's tie among equal entries is its iteration order).
        Without fair sharing each pool in turn admits all it can (the flavor order and the pools' order decide)."""
        cursors = {id(w): (w, w.admission_cursor(), 0) for w in queues}
        cursors = {k: v for k, v in cursors.items() if v[1] is not None}
        while cursors:
            best = None
            for key, (w, cursor, pos) in list(cursors.items()):
                head = w.fair_head(cursor, pos)
                if head is None:
                    del cursors[key]
                    continue
                pos, i, choice = head
                cursors[key] = (w, cursor, pos)
                borrows = choice[2]
                share = self.weighted_share(w.sim.spec.name, w.borrowed_quota() + (w.gpus[i] if borrows else 0))
                rank = (borrows, share, -w.job_priority(i), w.submit_s[i], self._pool_order[w.sim.spec.name])
                if best is None or rank < best[0]:
                    best = (rank, key, i, choice)
            if best is None:
                return
            _, key, i, choice = best
            w, cursor, pos = cursors[key]
            w.admit_choice(i, choice, now)
            cursors[key] = (w, cursor, pos + 1)
            # a workload it evicted is requeued and competes in the next cycles (a borrower preempting another
            # borrower: its queue's cursor, if any, no longer holds it)
            for victim in {id(t[0]): t[0] for t in choice[1]}.values():
                fresh = victim.admission_cursor()
                if fresh is not None:
                    cursors[id(victim)] = (victim, fresh, 0)

    def weighted_share(self, pool: str, borrowed_gpus: int) -> float:
        """A ClusterQueue's weighted dominant resource share when it holds `borrowed_gpus` above its nominal quota,
        computed as Kueue v0.19.2 does (pkg/cache/scheduler/fair_sharing.go:149 `dominantResourceShare`: borrowed
        x 1000 / the cohort's lendable quota, in float, then :90 `PreciseWeightedShare` / the weight; compared as
        floats, :112 `CompareDRS`), so that ties and near-ties fall as on a cluster. GPUs are the one resource
        (the rest is excluded from quota), all queues sit in one flat cohort. 0 when it borrows nothing."""
        lendable = self.cohort_lendable_gpus * self._kueue_units
        if borrowed_gpus <= 0 or lendable <= 0:
            return 0.0
        ratio = float(borrowed_gpus * self._kueue_units) * 1000.0 / float(lendable)
        return ratio / self.sharing[pool].fair_share_weight

    @staticmethod
    def _could_wait_on_others(sim: PoolSim) -> bool:
        """Whether another pool's change could let `sim` act while `sim` itself is not processed: `_may_act`'s
        first test, true only with waiting work (the state it reads changes only at minutes the pool is
        processed, so it is kept per group from the end of each such minute)."""
        w = sim.workload
        return isinstance(w, EnvJobsWorkload) and not w.plain and bool(w.pending_gpus)

    def _may_act(self, sim: PoolSim) -> bool:
        """Whether a pool not processed this minute could admit or place something now that another pool changed:
        a waiting job a lender's floor quota has room for, or a pod pinned to a floor that has room for it now
        (its own quota and nodes are as they were), or a waiting job its elastic flavor has room for (requeued by a
        Kueue eviction after its own last admission pass)."""
        w = sim.workload
        if not isinstance(w, EnvJobsWorkload) or w.plain or not w.pending_gpus:
            return False
        sizes = [size for size, q in w.waiting.items() if q]
        if sizes and (w.lenders or w.split):
            small = min(sizes)
            lenders = [lender for lender, _ in w.lenders] + ([sim] if w.split else [])
            if any(kueue.borrow_room(w, lender) >= small for lender in lenders):
                return True
            # under fair sharing it may preempt other borrowers of a floor whose shares moved: a necessary condition
            # of either strategy (a queue holding that floor above this queue's share with the job)
            if self.fair_sharing:
                mine = self.weighted_share(sim.spec.name, w.borrowed_quota() + small)
                if any(kueue.holds_more_than(lender, w, mine) for lender in lenders):  # not a scan of every pool
                    return True
        if sizes and sim.floor_gpus and sim.floor_gpus - sim.quota_own - sim.quota_lent >= min(sizes):
            return True
        # a job Kueue evicted after the pool's own admission pass of its last minute (a lender reclaiming its
        # floor in the borrowing round) waits with room in the pool's elastic flavor: the next pass admits it
        if sizes and any(
            f is not None and f[1] - w.elastic_admitted.get(f[0], 0) >= min(sizes)
            for f in (w.elastic_flavor(False), w.elastic_flavor(True))
        ):
            return True
        return any(w.may_place_on_floor(i) for i in w.floor_pending)

    # -- results --

    def result(self, seconds: float = 0.0) -> EnvironmentResult:
        pools, usage = {}, []
        by_tier: dict[str, list[float]] = {}
        by_class: dict[str, list[float]] = {PRODUCTION: [], INTERRUPTIBLE: []}
        win_by_tier: dict[str, list[float]] = {}
        win_by_class: dict[str, list[float]] = {PRODUCTION: [], INTERRUPTIBLE: []}
        win_pending: dict[str, list[float]] = {}  # tier -> total pending minutes of the window's jobs
        env = {
            "production_interruptions": 0,
            "reclaim_preemptions": 0,
            "reclaim_lost_gpu_hours": 0.0,
            "priority_preemptions": 0,
            "priority_lost_gpu_hours": 0.0,
            "scheduler_preemptions": 0,
            "scheduler_lost_gpu_hours": 0.0,
            "floor_gpu_hours": 0.0,
            "floor_owned_gpu_hours": 0.0,
            "floor_lent_gpu_hours": 0.0,
            "borrowed_gpu_hours": 0.0,
            "production_jobs": 0,
        }
        sums = (
            "total_cost_usd",
            "guaranteed_cost_usd",
            "elastic_spot_cost_usd",
            "elastic_on_demand_cost_usd",
            "demand_gpu_hours",
            "gpu_hours_served",
            "unmet_gpu_hours",
            "interruptions",
            "jobs_interrupted",
            "busy_node_terminations",
            "lost_gpu_hours",
            "spot_launch_failures",
            "node_launches",
        )
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
            "lent": round(out["floor_lent_gpu_hours"] / floor, 4) if floor else None,
        }
        out["p95_wait_minutes_by_tier"] = {t: round(percentile(v, 95), 1) for t, v in sorted(by_tier.items())}
        out["p95_wait_minutes_by_class"] = {c: round(percentile(v, 95), 1) if v else None for c, v in by_class.items()}
        if self.window_from is not None:
            keys = (
                "production_interruptions",
                "jobs_interrupted",
                "spot_interruptions",
                "lost_gpu_hours",
                "reclaim_preemptions",
                "reclaim_lost_gpu_hours",
                "priority_preemptions",
                "priority_lost_gpu_hours",
                "scheduler_preemptions",
                "scheduler_lost_gpu_hours",
                "borrowed_gpu_hours",
                "floor_gpu_hours",
                "floor_owned_gpu_hours",
                "floor_lent_gpu_hours",
                "unmet_gpu_hours",
                "unmet_production_gpu_hours",
                "production_waiting_gpu_hours",
                "unmet_guaranteed_production_gpu_hours",
                "jobs_submitted",
            )
            win = {k: round(sum(p["window"][k] for p in pools.values()), 3) for k in keys}
            win["from_minute"], win["to_minute"] = self.window_from, self.horizon
            win["p95_wait_minutes_by_tier"] = {
                t: round(percentile(v, 95), 1) if v else None for t, v in sorted(win_by_tier.items())
            }
            win["p95_wait_minutes_by_class"] = {
                c: round(percentile(v, 95), 1) if v else None for c, v in win_by_class.items()
            }
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
        waiting = sum(w.gpus[i] for i in w.pending_indices() if w.production[i])
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
            "production_interruptions": env_w.production_interruptions
            if env_w
            else getattr(w, "production_interruptions", 0),
            "jobs_interrupted": sim.c.jobs_interrupted,
            "spot_interruptions": sim.c.spot_interruptions,
            "lost_gpu_minutes": sim.c.lost_gpu_minutes,
            "reclaim_preemptions": env_w.reclaim_preemptions if env_w else 0,
            "reclaim_lost_gpu_minutes": env_w.reclaim_lost_gpu_minutes if env_w else 0.0,
            "priority_preemptions": env_w.priority_preemptions if env_w else 0,
            "priority_lost_gpu_minutes": env_w.priority_lost_gpu_minutes if env_w else 0.0,
            "scheduler_preemptions": env_w.scheduler_preemptions if env_w else 0,
            "scheduler_lost_gpu_minutes": env_w.scheduler_lost_gpu_minutes if env_w else 0.0,
            "borrowed_gpu_minutes": (
                env_w.borrowed_gpu_minutes + env_w.borrowed_now * max(0, minute - env_w._borrowed_since)
            )
            if env_w
            else 0,
            "floor_lent_gpu_minutes": sim.lent_gpu_minutes + sim.lent_gpus * max(0, minute - sim._lent_since),
            **(
                {
                    f"borrowed_gpu_minutes_from:{p.spec.name}": env_w.borrowed_gpu_minutes_from.get(p.spec.name, 0)
                    + env_w.borrowed.get(p.spec.name, 0) * max(0, minute - env_w._borrowed_since)
                    for p, _ in env_w.lenders
                }
                if env_w
                else {}
            ),
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
            unmet_prod = getattr(w, "unmet_production_gpu_minutes", 0) / 60
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
            "scheduler_preemptions": d["scheduler_preemptions"],
            "scheduler_lost_gpu_hours": round(d["scheduler_lost_gpu_minutes"] / 60, 3),
            "borrowed_gpu_hours": round(d["borrowed_gpu_minutes"] / 60, 3),
            "borrowed_gpu_hours_from": {
                k.split(":", 1)[1]: round(v / 60, 3)
                for k, v in d.items()
                if k.startswith("borrowed_gpu_minutes_from:") and v
            },
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
                INTERRUPTIBLE: round(percentile(waits_rest, 95), 1) if waits_rest else None,
            },
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
            "production_interruptions": env_w.production_interruptions
            if env_w
            else getattr(w, "production_interruptions", 0),
            "reclaim_preemptions": env_w.reclaim_preemptions if env_w else 0,
            "reclaim_lost_gpu_hours": round(env_w.reclaim_lost_gpu_minutes / 60, 3) if env_w else 0.0,
            "priority_preemptions": env_w.priority_preemptions if env_w else 0,
            "priority_lost_gpu_hours": round(env_w.priority_lost_gpu_minutes / 60, 3) if env_w else 0.0,
            "scheduler_preemptions": env_w.scheduler_preemptions if env_w else 0,
            "scheduler_lost_gpu_hours": round(env_w.scheduler_lost_gpu_minutes / 60, 3) if env_w else 0.0,
            "borrowed_gpu_hours": round(env_w.borrowed_gpu_minutes / 60, 3) if env_w else 0.0,
            "borrowed_gpu_hours_from": {n: round(m / 60, 3) for n, m in env_w.borrowed_gpu_minutes_from.items() if m}
            if env_w
            else {},
            "floor_gpu_hours": round(floor_minutes / 60, 3),
            "floor_owned_gpu_hours": round((busy - lent) / 60, 3),
            "floor_lent_gpu_hours": round(lent / 60, 3),
        }
        if env_w is not None and env_w.production is not None:
            waits, _ = env_w.waits_minutes(horizon)
            prod = [x for x, p in zip(waits, env_w.production) if p]
            rest = [x for x, p in zip(waits, env_w.production) if not p]
            out["p95_wait_minutes_by_class"] = {
                PRODUCTION: round(percentile(prod, 95), 1) if prod else None,
                INTERRUPTIBLE: round(percentile(rest, 95), 1) if rest else None,
            }
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
        rate = spec.floor_usd_per_hour if cb else spec.prices.price(spec.floor_type, spec.region).ondemand_usd_per_hour
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


def simulate_environment(
    prices: Prices,
    cfg,
    demands: dict,
    controller_factory: Callable,
    settings: SimSettings = SimSettings(),
    horizon_minutes: int | None = None,
    specs: dict[str, PoolSpec] | None = None,
    window_from_minute: int | None = None,
) -> EnvironmentResult:
    """Run every pool of `cfg` on one clock (module docstring) and return the per-pool and environment figures."""
    t0 = time.perf_counter()
    env = Environment(
        prices, cfg, demands, controller_factory, settings, horizon_minutes, specs, window_from_minute
    ).run()
    return env.result(time.perf_counter() - t0)


def simulate_branches(
    prices: Prices,
    cfg,
    demands: dict,
    controller_factory: Callable,
    settings: SimSettings,
    horizon_minutes: int,
    window_from_minute: int,
    branches: list[tuple[tuple, tuple]],
    reduce: Callable,
) -> tuple[object, list]:
    """One run up to `window_from_minute`, then the run as it is (`reduce(result)`) and one continuation per
    branch, (spot windows, on-demand windows) in minutes, all at or after the window's start (each `reduce`d in
    a child process, which must return something picklable). The same figures as a separate run per branch with
    those windows in its settings (tests/advise/test_org_window.py), for the cost of the part after the window."""
    for spot_windows, od_windows in branches:
        if any(a < window_from_minute for a, _ in (*spot_windows, *od_windows)):
            raise EnvironmentError(
                "a branch's shortage windows must start at or after the window's first minute "
                f"({window_from_minute}): before it the branches share one run"
            )
    t0 = time.perf_counter()
    env = Environment(
        prices,
        cfg,
        demands,
        controller_factory,
        settings,
        horizon_minutes,
        specs=None,
        window_from_minute=window_from_minute,
    )
    env.branches, env.branch_reduce = list(branches), reduce
    env.run()
    seconds = time.perf_counter() - t0
    env.branch_results(seconds)  # a child ends here
    own = reduce(env.result(seconds))
    if env.branches:  # never forked: the window starts at the horizon, no branch has a minute of its own
        return own, [own for _ in env.branches]
    return own, env.collect_branches()
