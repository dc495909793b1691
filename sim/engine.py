"""The discrete-time (1-minute) simulated cloud and cluster for one pool.

Each tick, in order: spot reclaims and warnings, nodes finishing their boot, jobs finishing, arrivals,
scheduling (FIFO with EASY backfill), the policy's tick (it may set group sizes, launch or terminate nodes),
billing. A controller (sim/policies.py) sees the whole simulated state; the `gpuloan` controller turns it into the
Observation the real Lambda would build and calls the real policy.engine.decide.

Modelled: a provisioning delay for every new node; spot interruptions (exponential time to interruption at the
Spot Advisor rate, drawn per node; a 2-minute warning during which the node takes no new work); spot-unavailable
episodes (spot launches fail; the same episodes for every policy with the same seed); checkpoints (an interrupted
job loses the work since its last checkpoint and requeues in its original submission order); multi-node jobs
(a job larger than a node needs whole free nodes). Not modelled: AZs, per-type spot pools, partial GPU use.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from sim.pool import HOURS_PER_MONTH, PoolSpec
from sim.traces import JobsTrace, SeriesTrace

GUARANTEED, SPOT, ON_DEMAND = "guaranteed", "spot", "on_demand"
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60


@dataclass(frozen=True)
class SimSettings:
    # Request to schedulable GPU node. Public figures: ~70-80 s instance launch to node registration on EKS
    # (aws/karpenter-provider-aws#6128), "GPU instance types often take much longer to boot"
    # (awslabs/amazon-eks-ami#1099), then the NVIDIA device plugin / GPU Operator validation and a multi-GB CUDA
    # image pull (several minutes; docs/simulator.md). 6 minutes is the default; --provisioning-delay changes it.
    provisioning_delay_minutes: int = 6
    checkpoint_interval_minutes: int = 30
    spot_warning_minutes: int = 2
    spot_interruptions_per_month: float | None = None  # None: the Spot Advisor bucket of the pool's spot type
    spot_unavailable_episodes_per_week: float = 1.0
    spot_unavailable_mean_hours: float = 3.0
    sample_every_minutes: int = 10  # time series for the plot
    seed: int = 0


@dataclass
class SimNode:
    __slots__ = ("id", "serial", "group", "gpus", "usd_per_hour", "launched", "ready_at", "reclaim_at", "warned",
                 "busy", "jobs", "hist", "empty_since", "obs_cache")
    id: str
    serial: int
    group: str
    gpus: int
    usd_per_hour: float
    launched: int
    ready_at: int
    reclaim_at: int | None
    warned: bool
    busy: int
    jobs: set
    hist: list  # [(minute, busy_gpus)] change points, pruned to the longest window anyone asks about
    empty_since: int | None
    obs_cache: object

    @property
    def free(self) -> int:
        return self.gpus - self.busy

    def ready(self, now: int) -> bool:
        return now >= self.ready_at


@dataclass
class Counters:
    guaranteed_usd: float = 0.0
    spot_usd: float = 0.0
    on_demand_usd: float = 0.0
    served_gpu_minutes: float = 0.0  # useful work (redone work after an interruption is not counted twice)
    lost_gpu_minutes: float = 0.0
    spot_interruptions: int = 0
    jobs_interrupted: int = 0
    busy_terminations: int = 0  # nodes a policy terminated while they ran work
    spot_launch_failures: int = 0
    node_launches: int = 0
    monthly_usd: dict = field(default_factory=dict)


def spot_episodes(seed: int, horizon: int, per_week: float, mean_hours: float) -> list[tuple[int, int]]:
    """[start, end) minutes in which spot cannot be launched; a Poisson process, the same for every policy."""
    rng = random.Random(f"episodes-{seed}")
    out: list[tuple[int, int]] = []
    if per_week <= 0 or mean_hours <= 0:
        return out
    t = 0.0
    rate = per_week / (7 * 1440)
    while True:
        t += rng.expovariate(rate)
        if t >= horizon:
            return out
        length = max(1, int(rng.expovariate(1 / (mean_hours * 60))))
        out.append((int(t), int(t) + length))
        t += length


class Simulation:
    def __init__(self, spec: PoolSpec, trace: JobsTrace | SeriesTrace, controller, settings: SimSettings = SimSettings(),
                 horizon_minutes: int | None = None):
        self.spec = spec
        self.trace = trace
        self.controller = controller
        self.settings = settings
        self.now = 0
        self.horizon = horizon_minutes if horizon_minutes is not None else default_horizon(trace)
        self.rng = random.Random(f"nodes-{settings.seed}")
        rate = settings.spot_interruptions_per_month
        if rate is None:
            rate = spec.spot_interruptions_per_month
        self.spot_interrupt_rate_per_minute = rate / MINUTES_PER_MONTH
        self.episodes = spot_episodes(settings.seed, self.horizon, settings.spot_unavailable_episodes_per_week,
                                      settings.spot_unavailable_mean_hours) if spec.has_spot else []
        self._episode_i = 0
        self.nodes: dict[str, SimNode] = {}
        self._serial = 0
        self.desired = {SPOT: 0, ON_DEMAND: 0}
        self.last_change = {SPOT: None, ON_DEMAND: None}  # minute of the last size change (cooldown)
        self.short_since = {SPOT: None, ON_DEMAND: None}
        self.c = Counters()
        self.hist_keep = 60
        self.workload = JobsWorkload(self) if isinstance(trace, JobsTrace) else SeriesWorkload(self)
        self.samples: list[tuple] = []  # (minute, demand_gpus, guaranteed_gpus, spot_gpus, on_demand_gpus, cost)
        self.changed = True
        self.counts = {GUARANTEED: 0, SPOT: 0, ON_DEMAND: 0}
        self.rates = {GUARANTEED: 0.0, SPOT: 0.0, ON_DEMAND: 0.0}
        self._next_event = 0  # earliest ready / warning / reclaim minute among the nodes
        for _ in range(spec.floor_nodes):
            self._new_node(GUARANTEED, ready_at=0)

    # --- capacity --------------------------------------------------------------------------------------------

    @property
    def spot_available(self) -> bool:
        """False during a spot-unavailable episode. Only what a launch attempt would tell a real controller."""
        while self._episode_i < len(self.episodes) and self.episodes[self._episode_i][1] <= self.now:
            self._episode_i += 1
        return not (self._episode_i < len(self.episodes) and self.episodes[self._episode_i][0] <= self.now)

    def _new_node(self, group: str, ready_at: int) -> SimNode:
        self._serial += 1
        spec = self.spec
        price = {GUARANTEED: spec.floor_usd_per_hour, SPOT: spec.spot_usd_per_hour,
                 ON_DEMAND: spec.on_demand_usd_per_hour}[group]
        reclaim = None
        if group == SPOT and self.spot_interrupt_rate_per_minute > 0:
            reclaim = self.now + max(1, int(self.rng.expovariate(self.spot_interrupt_rate_per_minute)))
        node = SimNode(f"i-{group[0]}{self._serial:07d}", self._serial, group, spec.gpus_per_node, price, self.now,
                       ready_at, reclaim, False, 0, set(), [(self.now, 0)], None, None)
        self.nodes[node.id] = node
        self.counts[group] += 1
        self.rates[group] += price
        self._next_event = min(self._next_event, ready_at, reclaim - self.settings.spot_warning_minutes
                               if reclaim is not None else ready_at)
        if group != GUARANTEED:
            self.c.node_launches += 1
        self.changed = True
        return node

    def launch(self, group: str, count: int) -> int:
        """Launch nodes directly (Karpenter-style); returns how many launched (spot fails during an episode)."""
        if count <= 0:
            return 0
        if group == SPOT and not self.spot_available:
            self.c.spot_launch_failures += 1
            return 0
        for _ in range(count):
            self._new_node(group, ready_at=self.now + self.settings.provisioning_delay_minutes)
        self.desired[group] = self.count(group)
        self.last_change[group] = self.now
        return count

    def start_static(self, group: str, count: int) -> None:
        """Capacity that is there from minute 0 (the static baseline's always-on fleet)."""
        for _ in range(count):
            self._new_node(group, ready_at=0)
        self.desired[group] = self.count(group)

    def set_desired(self, group: str, desired: int) -> None:
        """ASG-style: the group converges to `desired` (launches after the provisioning delay; removes launching
        nodes first, then the emptiest, newest nodes)."""
        desired = max(0, desired)
        if desired != self.desired[group]:
            self.desired[group] = desired
            self.last_change[group] = self.now

    def terminate(self, node_id: str, decrement: bool = True) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.group == GUARANTEED:
            return
        if node.busy:
            self.c.busy_terminations += 1
        self._remove(node, spot_reclaim=False)
        if decrement:
            self.desired[node.group] = max(0, self.desired[node.group] - 1)
            self.last_change[node.group] = self.now

    def _remove(self, node: SimNode, spot_reclaim: bool) -> None:
        self.workload.evict(node)
        del self.nodes[node.id]
        self.counts[node.group] -= 1
        self.rates[node.group] -= node.usd_per_hour
        if not self.counts[node.group]:
            self.rates[node.group] = 0.0  # no float drift once a group is empty
        if spot_reclaim:
            self.c.spot_interruptions += 1
        self.changed = True

    def count(self, group: str) -> int:
        return self.counts[group]

    def group_nodes(self, group: str) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.group == group]

    def _reconcile(self, group: str) -> None:
        nodes = self.group_nodes(group)
        have, want = len(nodes), self.desired[group]
        if have < want:
            if group == SPOT and not self.spot_available:
                self.c.spot_launch_failures += 1
                if self.short_since[group] is None:
                    self.short_since[group] = self.now
                return
            for _ in range(want - have):
                self._new_node(group, ready_at=self.now + self.settings.provisioning_delay_minutes)
        elif have > want:
            now = self.now
            nodes.sort(key=lambda n: (n.ready(now), n.busy, -n.serial))
            for n in nodes[: have - want]:
                if n.busy:
                    self.c.busy_terminations += 1
                self._remove(n, spot_reclaim=False)
        self.short_since[group] = None

    # --- time --------------------------------------------------------------------------------------------------

    def run(self, progress=None) -> "Simulation":
        self.controller.start(self)
        step = max(1, self.horizon // 100)
        warn = self.settings.spot_warning_minutes
        for now in range(self.horizon):
            self.now = now
            if now >= self._next_event:
                self._node_events(now, warn)
            self.workload.tick(now)
            if self.changed:
                self.workload.schedule(now)
            self.controller.tick(self)
            for group in (SPOT, ON_DEMAND):
                if self.desired[group] != self.count(group):
                    self._reconcile(group)
            if self.changed:
                self.workload.schedule(now)
            self._bill(now)
            if now % self.settings.sample_every_minutes == 0:
                self._sample(now)
            if progress is not None and now % step == 0:
                progress(now, self.horizon)
        self.workload.finish(self.horizon)
        return self

    def _node_events(self, now: int, warn: int) -> None:
        upcoming = self.horizon + 1
        for node in list(self.nodes.values()):
            if node.reclaim_at is not None:
                if now >= node.reclaim_at:
                    self._remove(node, spot_reclaim=True)
                    continue
                if not node.warned:
                    if now >= node.reclaim_at - warn:
                        node.warned = True  # the 2-minute notice: no new work lands here
                        self.changed = True
                    else:
                        upcoming = min(upcoming, node.reclaim_at - warn)
                if node.warned:
                    upcoming = min(upcoming, node.reclaim_at)
            if node.ready_at == now and now > 0:
                self.changed = True
            elif node.ready_at > now:
                upcoming = min(upcoming, node.ready_at)
        self._next_event = upcoming

    def _bill(self, now: int) -> None:
        r = self.rates
        g, s, o = r[GUARANTEED], r[SPOT], r[ON_DEMAND]
        c = self.c
        c.guaranteed_usd += g / 60
        c.spot_usd += s / 60
        c.on_demand_usd += o / 60
        month = now // MINUTES_PER_MONTH
        c.monthly_usd[month] = c.monthly_usd.get(month, 0.0) + (g + s + o) / 60

    def _sample(self, now: int) -> None:
        gpus = {GUARANTEED: 0, SPOT: 0, ON_DEMAND: 0}
        for n in self.nodes.values():
            if n.ready(now):
                gpus[n.group] += n.gpus
        c = self.c
        self.samples.append((now, self.workload.demand_gpus(), gpus[GUARANTEED], gpus[SPOT], gpus[ON_DEMAND],
                             c.guaranteed_usd + c.spot_usd + c.on_demand_usd))

    # --- utilization as CloudWatch would report it -------------------------------------------------------------

    def set_busy(self, node: SimNode, busy: int) -> None:
        if busy == node.busy:
            return
        node.busy = busy
        hist = node.hist
        if hist[-1][0] == self.now:
            hist[-1] = (self.now, busy)
        else:
            hist.append((self.now, busy))
        cutoff = self.now - self.hist_keep
        while len(hist) > 2 and hist[1][0] <= cutoff:
            hist.pop(0)
        node.empty_since = self.now if busy == 0 else None
        node.obs_cache = None

    def window_utilization(self, node: SimNode, minutes: int) -> tuple[float | None, float | None]:
        """(max %, mean %) of the node's GPUs busy over the last `minutes` (including this minute); None when the
        node has been up for less than one full minute (no datapoint yet)."""
        now = self.now
        start = max(node.launched, now - minutes + 1)
        if start > now or now <= node.launched:
            return None, None
        hist = node.hist
        if hist[-1][0] <= start:  # unchanged over the whole window
            pct = 100.0 * node.busy / node.gpus
            return pct, pct
        peak = 0
        area = 0
        for i in range(len(hist) - 1, -1, -1):
            t, busy = hist[i]
            seg_end = hist[i + 1][0] if i + 1 < len(hist) else now + 1
            seg_start = max(t, start)
            if seg_end > seg_start:
                area += busy * (seg_end - seg_start)
                if busy > peak:
                    peak = busy
            if t <= start:
                break
        span = now + 1 - start
        return 100.0 * peak / node.gpus, 100.0 * area / (span * node.gpus)


    def window_stats(self, node: SimNode, windows: tuple[int, ...]) -> list[tuple[float | None, float | None]]:
        """window_utilization for several windows in one walk over the node's history (the simulator's hot path:
        the policy reads three windows per node every minute)."""
        now = self.now
        launched = node.launched
        if now <= launched:
            return [(None, None)] * len(windows)
        hist = node.hist
        earliest = now - max(windows) + 1
        if earliest < launched:
            earliest = launched
        if hist[-1][0] <= earliest:  # unchanged over every window (the common case: check it first, cheaply)
            pct = 100.0 * node.busy / node.gpus
            return [(pct, pct)] * len(windows)
        starts = [max(launched, now - w + 1) for w in windows]
        peaks = [0] * len(windows)
        areas = [0] * len(windows)
        seg_end = now + 1
        for i in range(len(hist) - 1, -1, -1):
            t, busy = hist[i]
            for k, start in enumerate(starts):
                seg_start = t if t > start else start
                if seg_end > seg_start:
                    areas[k] += busy * (seg_end - seg_start)
                    if busy > peaks[k]:
                        peaks[k] = busy
            if t <= earliest:
                break
            seg_end = t
        g = node.gpus
        return [(100.0 * peaks[k] / g, 100.0 * areas[k] / ((now + 1 - starts[k]) * g)) for k in range(len(windows))]


def default_horizon(trace) -> int:
    if isinstance(trace, SeriesTrace):
        return len(trace.gpus_demanded)
    if "[days " in trace.name:
        a, b = trace.name.rsplit("[days ", 1)[1].rstrip("]").split(":")
        return (int(b) - int(a) + 1) * 1440
    return max((int(math.ceil((j.submit_s + j.duration_s) / 60)) for j in trace.jobs), default=0) + 1


# --- workloads ---------------------------------------------------------------------------------------------


class JobsWorkload:
    """Jobs queue FIFO (by submission) with EASY backfill: the first job that does not fit reserves the nodes it
    will need; later jobs may start only on other nodes. A job no larger than a node runs on one node (best fit,
    floor nodes first); a larger job needs ceil(gpus / gpus_per_node) whole free nodes."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        jobs = sim.trace.jobs
        n = len(jobs)
        self.submit_s = [j.submit_s for j in jobs]
        self.gpus = [j.gpus for j in jobs]
        self.remaining_s = [j.duration_s for j in jobs]
        self.first_start = [None] * n
        self.run_start = [None] * n
        self.run_id = [0] * n
        self.on_nodes: list[list] = [[] for _ in range(n)]
        self.done = [False] * n
        self._next = 0
        self.queues: dict[int, list] = {}  # gpus -> heap of job index (index order = submission order)
        self.pending_gpus = 0
        self.running_gpus = 0
        self.ends: list = []  # heap (end minute, job, run id)
        self.demand_gpu_minutes = sum(j.gpus * j.duration_s for j in jobs) / 60
        # A job larger than the whole pool (floor + elastic max) can never start. It is reported (never started,
        # its work unmet, its wait censored at the horizon) but does not enter the FIFO queue: as the head job it
        # would reserve every node and block every later job, for every policy alike.
        self.pool_gpus = sim.spec.peak_nodes * sim.spec.gpus_per_node
        self.larger_than_pool = sum(1 for g in self.gpus if g > self.pool_gpus)

    def demand_gpus(self) -> int:
        return self.running_gpus + self.pending_gpus

    def pending_list(self) -> list[int]:
        return [self.gpus[i] for q in self.queues.values() for i in q]

    def tick(self, now: int) -> None:
        sim = self.sim
        ends = self.ends
        while ends and ends[0][0] <= now:
            _, i, rid = heapq.heappop(ends)
            if rid != self.run_id[i] or self.done[i]:
                continue
            self._stop(i, now, finished=True)
        limit = (now + 1) * 60
        jobs_submit = self.submit_s
        while self._next < len(jobs_submit) and jobs_submit[self._next] < limit:
            i = self._next
            self._next += 1
            if self.gpus[i] > self.pool_gpus:
                continue
            heapq.heappush(self.queues.setdefault(self.gpus[i], []), i)
            self.pending_gpus += self.gpus[i]
            sim.changed = True

    def _stop(self, i: int, now: int, finished: bool) -> None:
        sim = self.sim
        elapsed_s = (now - self.run_start[i]) * 60
        gpus = self.gpus[i]
        if finished:
            sim.c.served_gpu_minutes += gpus * self.remaining_s[i] / 60
            self.remaining_s[i] = 0
            self.done[i] = True
        else:
            interval = sim.settings.checkpoint_interval_minutes * 60
            saved = min(self.remaining_s[i], (elapsed_s // interval) * interval if interval > 0 else 0)
            lost = min(elapsed_s, self.remaining_s[i]) - saved
            sim.c.served_gpu_minutes += gpus * saved / 60
            sim.c.lost_gpu_minutes += gpus * lost / 60
            sim.c.jobs_interrupted += 1
            self.remaining_s[i] -= saved
            heapq.heappush(self.queues.setdefault(gpus, []), i)
            self.pending_gpus += gpus
        self.running_gpus -= gpus
        self.run_id[i] += 1
        for node, used in self.on_nodes[i]:
            node.jobs.discard(i)
            sim.set_busy(node, node.busy - used)
        self.on_nodes[i] = []
        self.run_start[i] = None
        sim.changed = True

    def evict(self, node: SimNode) -> None:
        for i in list(node.jobs):
            self._stop(i, self.sim.now, finished=False)

    def schedule(self, now: int) -> None:
        sim = self.sim
        sim.changed = False
        if not self.pending_gpus:
            return
        gpn = sim.spec.gpus_per_node
        nodes = [n for n in sim.nodes.values() if n.ready_at <= now and not n.warned]
        if not nodes:
            return
        # floor first, then on-demand, then spot; oldest first: new elastic nodes stay empty and get reclaimed
        rank = {GUARANTEED: 0, ON_DEMAND: 1, SPOT: 2}
        nodes.sort(key=lambda n: (rank[n.group], n.serial))
        reserved: set = set()
        blocked: set = set()
        heads = [(q[0], size) for size, q in self.queues.items() if q]
        heapq.heapify(heads)
        while heads:
            i, size = heapq.heappop(heads)
            placed = self._place(i, nodes, reserved, gpn, now)
            if placed:
                q = self.queues[size]
                heapq.heappop(q)
                if q:
                    heapq.heappush(heads, (q[0], size))
                continue
            blocked.add(size)
            if not reserved:
                self._reserve(i, nodes, reserved, gpn)
            if not any(n.free for n in nodes if n.id not in reserved):
                break

    def _place(self, i: int, nodes: list, reserved: set, gpn: int, now: int) -> bool:
        g = self.gpus[i]
        sim = self.sim
        if g <= gpn:
            best = None
            for n in nodes:
                free = n.gpus - n.busy
                if free >= g and n.id not in reserved and (best is None or free < best.gpus - best.busy):
                    best = n
                    if free == g:
                        break
            if best is None:
                return False
            chosen = [(best, g)]
        else:
            k = -(-g // gpn)
            whole = [n for n in nodes if n.busy == 0 and n.id not in reserved]
            if len(whole) < k:
                return False
            chosen = [(n, gpn) for n in whole[: k - 1]] + [(whole[k - 1], g - gpn * (k - 1))]
        for n, used in chosen:
            n.jobs.add(i)
            sim.set_busy(n, n.busy + used)
        self.on_nodes[i] = chosen
        self.run_start[i] = now
        if self.first_start[i] is None:
            self.first_start[i] = now
        self.pending_gpus -= g
        self.running_gpus += g
        end = now + max(1, math.ceil(self.remaining_s[i] / 60))
        heapq.heappush(self.ends, (end, i, self.run_id[i]))
        return True

    def _reserve(self, i: int, nodes: list, reserved: set, gpn: int) -> None:
        g = self.gpus[i]
        k = 1 if g <= gpn else -(-g // gpn)
        by_free = sorted(nodes, key=lambda n: -(n.gpus - n.busy))
        for n in by_free[:k]:
            reserved.add(n.id)

    def finish(self, horizon: int) -> None:
        """Account work still running at the horizon (done so far counts as served, the rest as unmet)."""
        for i, start in enumerate(self.run_start):
            if start is not None and not self.done[i]:
                done_s = min(self.remaining_s[i], (horizon - start) * 60)
                self.sim.c.served_gpu_minutes += self.gpus[i] * done_s / 60
                self.remaining_s[i] -= done_s

    def waits_minutes(self, horizon: int) -> tuple[list[float], int]:
        """Wait to first start of every job; a job never started counts with its wait so far (censored)."""
        out = []
        never = 0
        for i, s in enumerate(self.submit_s):
            start = self.first_start[i]
            if start is None:
                never += 1
                start = horizon
            out.append(max(0.0, start - s / 60))
        return out, never

    @property
    def unmet_gpu_minutes(self) -> float:
        return sum(g * r for g, r in zip(self.gpus, self.remaining_s)) / 60


class SeriesWorkload:
    """Fluid demand: each minute adds gpus_demanded GPU-minutes of work; capacity serves what it can (floor first,
    then on-demand, then spot, oldest first); the rest carries over as backlog. A reclaimed node loses the work
    its GPUs did since the last checkpoint boundary (it returns to the backlog)."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.series = sim.trace.gpus_demanded
        self.backlog = 0.0
        self.demand_gpu_minutes = float(sum(self.series[: sim.horizon]))
        self.last_demand = 0
        self._minute = -1
        self._backlog_before = 0.0

    def demand_gpus(self) -> int:
        return int(math.ceil(self.backlog)) + self.last_demand

    def pending_list(self) -> list[int]:
        return [1] * int(math.ceil(self.backlog)) if self.backlog > 0 else []

    def tick(self, now: int) -> None:
        self.sim.changed = True  # fluid: capacity is re-filled every minute

    def schedule(self, now: int) -> None:
        sim = self.sim
        sim.changed = False
        d = self.series[now] if now < len(self.series) else 0
        if self._minute == now:  # capacity changed within the minute: re-fill from the same starting point
            sim.c.served_gpu_minutes -= self._served_now
            self.backlog = self._backlog_before + (self.backlog - self._backlog_after)
        self._minute = now
        self._backlog_before = self.backlog
        work = self.backlog + d
        rank = {GUARANTEED: 0, ON_DEMAND: 1, SPOT: 2}
        nodes = sorted((n for n in sim.nodes.values() if n.ready_at <= now), key=lambda n: (rank[n.group], n.serial))
        served = 0
        for n in nodes:
            use = int(min(n.gpus, max(0.0, work - served)))
            sim.set_busy(n, use)
            served += use
        served = min(served, work)
        sim.c.served_gpu_minutes += served
        self._served_now = served
        self.backlog = work - served
        self._backlog_after = self.backlog
        self.last_demand = int(min(d, served))

    def evict(self, node: SimNode) -> None:
        interval = self.sim.settings.checkpoint_interval_minutes
        lost = node.busy * (self.sim.now % interval if interval > 0 else 0)
        lost = min(lost, self.sim.c.served_gpu_minutes)
        self.sim.c.served_gpu_minutes -= lost
        self.sim.c.lost_gpu_minutes += lost
        self.backlog += lost
        if node.busy:
            self.sim.c.jobs_interrupted += 1

    def finish(self, horizon: int) -> None:
        pass

    @property
    def unmet_gpu_minutes(self) -> float:
        return self.backlog
