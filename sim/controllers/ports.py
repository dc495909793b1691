"""The Lambda's ports (policy.tick.Ports) over a Simulation: the simulator runs the real tick.

`sim.controllers.gpuloan.GpuLoan` calls `policy.tick.run_tick` with these in-memory ports, as the Lambda's handler calls it
with the AWS and Kubernetes adapters (policy/handler.py). What the tick reads and writes goes to the simulated pool:

- node groups (`SimNodeGroups`, NodeGroupPort): the simulated groups' desired sizes, last changes, spot shortage
  and instances; UpdateNodegroupConfig is `Simulation.set_desired`, TerminateInstanceInAutoScalingGroup
  (ShouldDecrementDesiredCapacity) is `Simulation.terminate`;
- CloudWatch (`SimUtilization`, UtilizationSource): each node's figures over the policy's windows as they read
  `metric_delay_minutes` late (SimSettings);
- the pod list (`SimPods`, PendingPodsPort): pending pods, the ones that may not run on spot, recent arrivals,
  pending gangs and the GPU pods bound to each node;
- AWS Budgets (`SimBudgets`, BudgetReader): the calendar month's billed spend, read by the tick at most every
  `budget_refresh_minutes` (the policy's own rule, policy/spend.py: the figure lags by up to that);
- the node guard (`SimNodeGuard`, NodeGuardPort): cordon, the pods on a node (a GPU pod blocks a termination, as on
  a cluster), and the back-to-spot taint (`SimNode.closed`);
- the state table (`SimState`, StatePort): a dict, with the lease and the spot warnings' item. It keeps the
  dict the tick saved (no JSON round trip: nothing else holds it between ticks).

No AWS, no threads: the simulated Settings carry `aws_calls_in_flight=1`, so the tick makes its calls one after
another, in order, and a simulation stays deterministic. Kueue: only the lend-ahead rule's floor queue
(SimLendingQueue); the simulated pools have no Capacity Block floor quota for the tick to move
(sim/capacity_block.py simulates blocks on their own).
"""

from __future__ import annotations

import bisect
import functools
from datetime import datetime, timedelta, timezone
from typing import Any

from policy.errors import ConflictingUpdate, PolicyError
from policy.pods import GPU_RESOURCE
from policy.model import LIFECYCLE_IN_SERVICE, LIFECYCLE_PENDING, Group, PendingGang, PoolSettings
from policy.spend import _month as budget_month
from policy.memory_state import MemoryState
from policy.ports import GroupState, Instance
from policy.tick import Ports
from policy.gpu_series import Series
from sim.cloud import SimNode
from sim.engine import GUARANTEED, Simulation

# The ITP traces start on 2021-03-04; any fixed UTC midnight works (it places the calendar months of the budget
# and the days of the warm-up history).
SIM_EPOCH = datetime(2021, 3, 4, tzinfo=timezone.utc)


@functools.lru_cache(maxsize=8192)
def at_minute(minute: int) -> datetime:
    """The wall-clock time of a simulated minute (the same minutes come back tick after tick: cached)."""
    return SIM_EPOCH + timedelta(minutes=minute)


def minute_at_or_after(when: datetime) -> int:
    """The first whole simulated minute at or after `when` (a rule that flips just after a minute flips by the
    next one)."""
    return -(-(when - SIM_EPOCH) // timedelta(minutes=1))


class SimNodeGroups:
    """NodeGroupPort: the pool's simulated groups as EKS and Auto Scaling report them. A node under a spot notice
    is still InService to its Auto Scaling group; the tick learns it is leaving from the warning (run_tick's
    `leaving`)."""

    def __init__(self, sim: Simulation, ps: PoolSettings):
        self.sim, self.ps = sim, ps
        self.changed = False  # a write reached the simulation since `changed` was last cleared
        self._groups: dict[tuple, Group] = {}
        self._instances: dict[tuple[str, bool], Instance] = {}  # (node, still booting) -> as last reported
        # (key, first minute a booting node comes into service, group -> its instances) of the last instance read
        self._instances_read: tuple[tuple, float, dict[str, tuple[Instance, ...]]] | None = None
        self._last_read: tuple[Any, tuple[Group, ...], dict[str, GroupState]] | None = None

    def _group(self, name: str) -> Group:
        sim = self.sim
        if name == GUARANTEED:
            key: tuple = (name, sim.count(GUARANTEED), None, False)
        else:
            key = (
                name,
                sim.desired[name],
                sim.last_change[name],
                name in self.ps.spot_groups and sim.short_since[name] is not None,
            )
        group = self._groups.get(key)
        if group is None:  # frozen dataclasses are slow to build; most minutes a group is as it was
            last = key[2]
            group = Group(
                name,
                key[1],
                0,
                key[1] if name == GUARANTEED else self.ps.max_nodes(name),
                last_change_at=None if last is None else at_minute(last),
                capacity_shortage=key[3],
            )
            self._groups = {key: group, **{k: v for k, v in self._groups.items() if k[0] != name}}
        return group

    def _state(self, name: str, nodes: list[SimNode]) -> GroupState:
        now, cache = self.sim.now, self._instances
        out = []
        for n in nodes:
            key = (n.id, n.ready_at > now)
            inst = cache.get(key)
            if inst is None:  # an instance is the same object from tick to tick until it comes into service
                inst = cache[key] = Instance(
                    n.id,
                    name,
                    LIFECYCLE_PENDING if key[1] else LIFECYCLE_IN_SERVICE,
                    at_minute(n.launched),
                    node_name=n.id,
                )
            out.append(inst)
        return GroupState(self._group(name), tuple(out))

    def _by_group(self) -> dict[str, list[SimNode]]:
        nodes = self.sim.nodes
        if len(self._instances) > 2 * len(nodes) + 64:  # forget the instances that are gone
            self._instances = {k: v for k, v in self._instances.items() if k[0] in nodes}
        out: dict[str, list[SimNode]] = {}
        for n in nodes.values():
            out.setdefault(n.group, []).append(n)
        return out

    def read(self, names: list[str], now: datetime, activities_for, on_error) -> dict[str, GroupState]:
        sim = self.sim
        # A group's instances change only when a node is added or removed (sim.nodes_version) or one comes into
        # service (the earliest ready_at still ahead); most events (a job placed or finished) change neither, so
        # the instances are kept and only the groups' own figures (desired size, last change, shortage) are read.
        key = (sim.nodes_version, len(sim.nodes), tuple(names))
        kept = self._instances_read
        if kept is None or kept[0] != key or sim.now >= kept[1]:
            by_group = self._by_group()
            known = set(sim.elastic_groups) | {GUARANTEED}
            instances = {g: self._state(g, by_group.get(g, [])).instances for g in names if g in known}
            next_ready = min((n.ready_at for n in sim.nodes.values() if n.ready_at > sim.now), default=float("inf"))
            kept = self._instances_read = (key, next_ready, instances)
        groups = tuple(self._group(g) for g in kept[2])
        last = self._last_read
        if last is not None and last[0] is kept and all(a is b for a, b in zip(last[1], groups)):
            return last[2]  # the same read as last time: the same objects
        read = {g: GroupState(group, inst) for (g, inst), group in zip(kept[2].items(), groups)}
        self._last_read = (kept, groups, read)
        return read

    def recheck(self, group: str) -> GroupState:
        return self._state(group, self._by_group().get(group, []))

    def set_desired(self, group: str, desired: int) -> None:
        sim = self.sim
        sim.set_desired(group, desired)
        if sim.desired[group] != max(0, desired):
            # EKS refuses UpdateNodegroupConfig while the group's last update is in progress (ResourceInUse)
            raise ConflictingUpdate(f"UpdateNodegroupConfig {group}: an update is in progress")
        self.changed = True

    def terminate(self, instance_id: str) -> None:
        if instance_id not in self.sim.nodes:
            raise PolicyError(f"TerminateInstanceInAutoScalingGroup {instance_id}: no such instance")
        self.sim.terminate(instance_id, decrement=True)
        self.changed = True


class SimSeries(Series):
    """A node's CloudWatch figures as the tick reads them: the simulation's (max, mean) per window length, as of
    `metric_delay_minutes` ago. In the simulator a GPU is requested exactly while a job runs on it, so the reserved
    figure Container Insights reports equals the busy share."""

    def __init__(self, stats: dict[int, tuple[float | None, float | None]]):
        super().__init__(())
        object.__setattr__(self, "stats", stats)

    def max_over(self, now: datetime, minutes: int) -> float | None:
        return self.stats[minutes][0]  # type: ignore[attr-defined]

    def reserved_max_over(self, now: datetime, minutes: int) -> float | None:
        return self.stats[minutes][0]  # type: ignore[attr-defined]

    def avg_over(self, now: datetime, minutes: int) -> float | None:
        return self.stats[minutes][1]  # type: ignore[attr-defined]


class SimUtilization:
    """UtilizationSource: the windows the pool's rules read (idle, scale-up, empty), delayed. `instant_idle` (a
    what-if, sim.controllers.gpuloan.GpuLoan): a node with no pod reads 0 % from the minute its last pod ended."""

    def __init__(self, sim: Simulation, ps: PoolSettings, instant_idle: bool = False):
        self.sim, self.instant_idle = sim, instant_idle
        self.windows = tuple(sorted({ps.idle_timeout_minutes, ps.scale_up_window_minutes, ps.empty_timeout_minutes}))
        self._series: dict[tuple, SimSeries] = {}  # figures -> the series read last minute with them
        self._steady: dict[tuple[int, int], SimSeries] = {}  # (busy GPUs, node GPUs) -> a node's steady figures

    def read(self, nodes, now: datetime, window_minutes: int) -> dict[str, Series]:
        sim, windows = self.sim, self.windows
        read_at = sim.now - sim.settings.metric_delay_minutes
        earliest = read_at - windows[-1] + 1  # the first minute of the longest window read
        out: dict[str, Series] = {}
        cache, used, steady = self._series, {}, self._steady
        node_of = sim.nodes.get
        instant_idle = self.instant_idle
        for ref in nodes:
            n = node_of(ref.instance_id)
            if n is None:
                continue
            busy_since, busy = n.hist[-1]
            launched = n.launched
            if instant_idle and n.busy == 0:
                busy = 0
            elif not (read_at > launched and busy_since <= (launched if launched > earliest else earliest)):
                key = tuple(sim.window_stats(n, windows, at=read_at))
                series = cache.get(key)  # most nodes read as they did a minute ago: the same object again
                if series is None:
                    series = SimSeries(dict(zip(windows, key)))
                used[key] = out[ref.instance_id] = series
                continue
            # unchanged over every window (most nodes, most minutes), or idle from its last pod (instant_idle): one
            # series per (busy GPUs, node size), kept for the run
            series = steady.get((busy, n.gpus))
            if series is None:
                pct = 100.0 * busy / n.gpus
                series = steady[busy, n.gpus] = SimSeries(dict.fromkeys(windows, (pct, pct)))
            out[ref.instance_id] = series
        self._series = used
        return out


class SimPods:
    """PendingPodsPort: the pod list of the simulated pool. A multi-node job is one pod per node; in series mode
    the fill's work is 1-GPU pods. `keep_for_next_job=False` (a what-if) shows no recent arrivals; `gangs=False`
    no pod groups (the Lambda before it read them)."""

    def __init__(self, sim: Simulation, ps: PoolSettings, keep_for_next_job: bool = True, gangs: bool = True):
        self.sim, self.ps = sim, ps
        self.keep_for_next_job, self.gangs = keep_for_next_job, gangs
        # each view of the pod list with the key it was built from: rebuilt only when that changes
        self._pods_key: tuple | None = None
        self._pods_value: tuple[int, ...] = ()
        self._off_spot_key: tuple | None = None
        self._off_spot_value: tuple[int, ...] = ()
        self._gangs_key: tuple | None = None
        self._gangs_value: tuple[PendingGang, ...] = ()
        self._gang_seen: dict[tuple[int, int], int] = {}  # (job, run) -> minute its pods were first pending
        self._arrivals_key: tuple | None = None
        self._arrivals_value: tuple[tuple[datetime, int], ...] = ()
        self._by_node: tuple[int, dict[str, int]] = (-1, {})  # (sim.version, node -> GPU pods) of the last read
        series = getattr(sim.trace, "gpus_demanded", None)
        # A demand series has no pods: a rise of the level is that many 1-GPU pods created that minute.
        self._rises = (
            None if series is None else [max(0, series[t] - (series[t - 1] if t else 0)) for t in range(len(series))]
        )

    def _pod_list(self, counts) -> tuple[int, ...]:
        """(job size, jobs) pairs as pods: a multi-node job is one pod per node."""
        gpn = self.ps.gpus_per_node
        pods: list[int] = []
        for size, n in counts:
            whole, last = divmod(size, gpn) if size > gpn else (0, size)
            if size > gpn and last == 0:
                whole, last = whole - 1, gpn
            pods += [gpn] * (whole * n) + [last] * n
        return tuple(pods)

    def pending_gpus(self, pools: list[str], shapes=None) -> dict[str, tuple[int, ...]]:
        key = tuple(sorted(self.sim.workload.pending_counts().items()))
        if key != self._pods_key:
            self._pods_key, self._pods_value = key, self._pod_list(key)
        return {self.ps.name: self._pods_value}

    def pending_on_demand_only(self, pools: list[str], shapes=None) -> dict[str, tuple[int, ...]]:
        """Production work kept off spot in an environment (sim/environment.py `on_demand_only_pending`)."""
        read = getattr(self.sim.workload, "on_demand_only_pending", None)
        counts = read() if read is not None else None
        if not counts:
            return {self.ps.name: ()}
        key = tuple(sorted(counts.items()))
        if key != self._off_spot_key:
            self._off_spot_key, self._off_spot_value = key, self._pod_list(key)
        return {self.ps.name: self._off_spot_value}

    def arrival_minutes(self, since_minute: int) -> list[tuple[int, int]]:
        """(minute, GPUs) of the pods created after `since_minute` that have not finished."""
        sim = self.sim
        lo = since_minute + 1
        if self._rises is not None:
            rises = self._rises
            return [(t, rises[t]) for t in range(max(0, lo), min(sim.now + 1, len(rises))) if rises[t]]
        w: Any = sim.workload  # a job trace's workload (a series has its rises above)
        start = bisect.bisect_left(w._arrival_minute, lo, 0, w._next)
        out: dict[int, int] = {}
        for i in range(start, w._next):
            if not w.done[i] and w.gpus[i] <= w.pool_gpus:
                m = w._arrival_minute[i]
                out[m] = out.get(m, 0) + w.gpus[i]
        return sorted(out.items())

    def first_arrival_minute(self, since_minute: int) -> int | None:
        """The minute of the earliest of `arrival_minutes(since_minute)`, None if there is none: what the quiet-tick
        proof reads (sim/controllers/gpuloan.py), found without listing the others."""
        sim = self.sim
        lo = since_minute + 1
        if self._rises is not None:
            rises = self._rises
            return next((t for t in range(max(0, lo), min(sim.now + 1, len(rises))) if rises[t]), None)
        w: Any = sim.workload
        start = bisect.bisect_left(w._arrival_minute, lo, 0, w._next)
        for i in range(start, w._next):
            if not w.done[i] and w.gpus[i] <= w.pool_gpus:
                return w._arrival_minute[i]
        return None

    def gpu_pod_arrivals(self, pools: list[str], since: datetime, shapes=None) -> dict[str, tuple]:
        if not self.keep_for_next_job:
            return {self.ps.name: ()}
        key = tuple(self.arrival_minutes(minute_at_or_after(since)))
        if key != self._arrivals_key:
            self._arrivals_key, self._arrivals_value = key, tuple((at_minute(m), g) for m, g in key)
        return {self.ps.name: self._arrivals_value}

    def _gang_runs(self) -> list[tuple[int, int, int, bool]]:
        """(job, run, minute first pending, may not run on spot) of every pending multi-node job: its pods were
        created at that minute (at its arrival, or when an interruption sent it back to the queue). Production jobs
        kept off spot wait in their own queues (sim/environment.py) and are the gangs that may not run on spot."""
        sim = self.sim
        queues = getattr(sim.workload, "queues", None)
        if not self.gangs or queues is None:
            return []
        gpn = self.ps.gpus_per_node
        w: Any = sim.workload  # queues: a job trace's workload
        off_spot = bool(w.on_demand_only_pending()) if hasattr(w, "on_demand_only_pending") else False
        out = []
        seen = self._gang_seen
        for off, qs in ((False, queues), (off_spot, getattr(w, "prod_queues", {}) if off_spot else {})):
            for size, q in qs.items():
                if size <= gpn:
                    continue
                for i in q:
                    run = (i, w.run_id[i])
                    first = seen.get(run)
                    if first is None:
                        first = seen[run] = sim.now
                    out.append((i, run[1], first, off))
        if len(seen) > 4 * len(out) + 64:  # forget runs that started
            live = {(i, r) for i, r, _, _ in out}
            self._gang_seen = {k: v for k, v in seen.items() if k in live}
        return sorted(out)

    def workload_gpus(self, job: int) -> int:
        w: Any = self.sim.workload  # gangs come from a job trace's queues only
        return w.gpus[job]

    def pending_gangs(self, pools: list[str], shapes=None) -> dict[str, tuple[PendingGang, ...]]:
        runs = self._gang_runs()
        key = tuple(runs)
        if key != self._gangs_key:
            gpn = self.ps.gpus_per_node
            gangs = []
            for i, run, first, off in runs:
                whole, last = divmod(self.workload_gpus(i), gpn)
                if last == 0:
                    whole, last = whole - 1, gpn
                gangs.append(PendingGang(f"job-{i}", (gpn,) * whole + (last,), at_minute(first), on_demand_only=off))
            self._gangs_key, self._gangs_value = key, tuple(gangs)
        return {self.ps.name: self._gangs_value}

    def gpu_pods_by_node(self) -> dict[str, int]:
        sim = self.sim
        if self._by_node[0] != sim.version:  # a pod bound or gone, a node added or removed bumps sim.version
            pods_on = sim.workload.pods_on
            self._by_node = (sim.version, {n.id: pods for n in sim.nodes.values() if (pods := pods_on(n))})
        return self._by_node[1]


def node_pod_gpus(sim: Simulation, node: SimNode) -> tuple[int, ...]:
    """The GPU requests of the pods on `node`: one pod per job and node (a job's share of this node's GPUs); in
    series mode every busy GPU is one 1-GPU pod."""
    on_nodes = getattr(sim.workload, "on_nodes", None)
    if on_nodes is None:
        return (1,) * node.busy
    return tuple(used for i in node.jobs for n, used in on_nodes[i] if n is node)


class SimNodeGuard:
    """NodeGuardPort: cordon, the pods on a node, the back-to-spot taint. A cordon lasts only while the tick checks
    the node (nothing is scheduled in between in the simulator), so it is kept here, not on the node; a GPU pod on
    the node keeps it (policy/pods.py `blocking_reason`)."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self._cordoned: set[str] = set()
        self.blocked = 0  # terminations a pod on the node forbade
        self.changed = False

    @property
    def cordoned(self) -> set[str]:
        """The nodes cordoned now (a terminated node is gone, and with it its cordon)."""
        self._cordoned &= self.sim.nodes.keys()
        return self._cordoned

    def _node(self, name: str) -> SimNode:
        node = self.sim.nodes.get(name)
        if node is None:
            raise PolicyError(f"node {name} not found")
        return node

    def cordon(self, node_name: str) -> bool:
        self._node(node_name)
        if node_name in self.cordoned:
            return False
        self.cordoned.add(node_name)
        return True

    def uncordon(self, node_name: str) -> None:
        self.cordoned.discard(node_name)

    def node_pod_gpus(self, node_name: str) -> tuple[int, ...]:
        return node_pod_gpus(self.sim, self._node(node_name))

    def blockers(self, node_name: str) -> list[str]:
        found = [f"a pod on {node_name} requests {g} GPU(s)" for g in self.node_pod_gpus(node_name)]
        self.blocked += bool(found)
        return found

    def set_taint(self, node_name: str, key: str, present: bool) -> bool:
        node = self._node(node_name)
        if node.closed == present:
            return False
        node.closed = present
        self.sim.changed = True
        self.sim.version += 1
        self.changed = True
        return True

    def mark_checkpoint(self, node_name: str, key: str, value: str) -> int:
        return 0  # no Capacity Block drains here (sim/capacity_block.py)


class SimBudgets:
    """BudgetReader: the pool's billed spend in the current calendar month, as AWS Budgets reports it (a calendar
    month, UTC). The tick reads it at most every `budget_refresh_minutes`, and in a new month at the month's first
    minute (the controller wakes then: sim/controllers/gpuloan.py `GpuLoan._spend_changes`): the billed total at that read is
    where the month's figure starts."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self._month = budget_month(at_minute(0))  # nothing was billed before the simulation starts
        self._billed_before_month = 0.0

    def _billed(self) -> float:
        self.sim.month_usd(0)  # settles the bill up to now
        return sum(self.sim.c.monthly_usd.values())

    def actual_usd(self, budget_name: str) -> float:
        month = budget_month(at_minute(self.sim.now))
        billed = self._billed()
        if month != self._month:
            self._month, self._billed_before_month = month, billed
        return max(0.0, billed - self._billed_before_month)


class SimPublisher:
    """notifications.Publisher: the subjects the tick would have mailed, with the simulated minute."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.sent: list[tuple[int, str]] = []

    def publish(self, subject: str, body: str) -> None:
        self.sent.append((self.sim.now, subject))


class SimState(MemoryState):
    """policy/memory_state.py's StatePort (DynamoState's compare-and-set, leases and leaving ids), except that
    `load` hands the tick the dict it saved last and `save` keeps it: no JSON copy, since a simulated tick is the
    only reader and saves what it changed."""

    def load(self, key: str) -> tuple[dict, int]:
        return self.items.get(key, ({}, 0))

    def save(self, key: str, data: dict, version: int) -> None:
        if self.items.get(key, ({}, 0))[1] != version:
            raise ConflictingUpdate(f"state {key} changed since it was read")
        self.items[key] = (data, version + 1)


class SimLendingQueue:
    """Kueue for the lend-ahead rule (policy/decide/lend_ahead.py), on an environment's pool (sim/environment.py
    PoolSim): its floor's ClusterQueue as the tick reads it (spec nominalQuota and lendingLimit, status
    flavorsUsage and pendingWorkloads, read by policy.io.kube.lending_of) and the lendingLimit patch, applied to the
    simulated Kueue. Only the floor flavor is there: the rule reads nothing else."""

    def __init__(self, pool: Any, flavor: str):
        self.pool = pool
        self.flavor = flavor

    def cluster_queue(self, api_version: str, queue: str) -> dict:
        pool = self.pool
        gpus = {"name": GPU_RESOURCE, "nominalQuota": pool.floor_gpus, "lendingLimit": pool.lending_limit_gpus}
        waiting = pool.workload.pending_workloads()
        return {
            "metadata": {"name": queue},
            "spec": {"resourceGroups": [{"flavors": [{"name": self.flavor, "resources": [gpus]}]}]},
            "status": {
                "flavorsUsage": [{"name": self.flavor, "resources": [{"name": GPU_RESOURCE, "total": pool.quota_own}]}],
                "pendingWorkloads": waiting,
            },
        }

    def set_lending_limit(self, api_version: str, queue: str, flavor: str, gpus: int) -> None:
        self.pool.set_lending_limit(gpus)


def sim_ports(
    sim: Simulation, ps: PoolSettings, *, instant_idle: bool = False, keep_for_next_job: bool = True, gangs: bool = True
) -> Ports:
    """Every port of the tick over `sim` (no Capacity Block dates: see the module's docstring); Kueue only for a
    pool that lends ahead (SimLendingQueue)."""
    queues: Any = SimLendingQueue(sim, ps.lend_ahead_flavor or "") if ps.lend_ahead_queue else None
    return Ports(
        groups=SimNodeGroups(sim, ps),
        utilization=SimUtilization(sim, ps, instant_idle),
        pods=SimPods(sim, ps, keep_for_next_job, gangs),
        budgets=SimBudgets(sim),
        state=SimState(),
        publisher=SimPublisher(sim),
        nodes=SimNodeGuard(sim),
        queues=queues,
    )
