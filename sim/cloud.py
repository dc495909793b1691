"""The simulated cloud: what EC2 and EKS do to a pool's nodes, whatever controller runs on it.

Node sizes and groups (`size_group`, `kind_of`); a node (`SimNode`) and what the run bills and counts
(`Counters`); spot interruptions with common random numbers (`SlotInterruptions`) and spot-unavailable episodes
(`spot_episodes`, `merge_windows`); and the elastic path's latency per side (`ElasticLatency`, below). The clock
that drives them is sim/engine.py's Simulation.

The elastic path's latency, per side, at second resolution (issue 36; docs/simulator.md, "The elastic path's
latency"; every figure's source in docs/aws-rules.md).

The simulator steps in minutes. A node's path from a pending pod to Ready is summed here in seconds and rounded up
to the simulator's minute only where the node becomes Ready (`ready_minute`): a path that ends at second 61 is
Ready at minute 2, one that ends at second 59 at minute 1. Nothing else is rounded.

gpuloan (`nodegroup_*`): the pod arrives at second s of minute t; the function runs on an EventBridge schedule at
second 0 of every minute, so it sees the pod at the next run, 60 (t + 1) (the simulator's tick of minute t stands
for that run); the function's own run time passes before its `UpdateNodegroupConfig`; EKS applies the update
asynchronously before the node group's Auto Scaling group acts; the group launches; the instance boots and joins.

Karpenter (`karpenter_*`): the pod arrives at second s; Karpenter's batch window closes 1 s after the last pod of a
burst, 10 s after its first at most (BATCH_IDLE_DURATION / BATCH_MAX_DURATION); CreateFleet (type instant,
synchronous) launches; the same boot and join.

The boot and join (request to schedulable GPU node) is SimSettings.provisioning_delay_minutes, the same figure on
both sides.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ElasticLatency:
    # EventBridge schedule of the policy function: rate(1 minute), `schedule_minutes` of the stack; a rate rule's
    # finest resolution is one minute. The run is taken at second 0 of each minute (the simulator's minute grid).
    schedule_period_s: float = 60.0
    # The function's run time from its start to its writes: the measured tick of `make bench-scale-tick`, 50 pools
    # each scaling up, every AWS call delayed 100 ms (docs/policy.md, "Figures": 11.8 s). Measured on 2 shared
    # cores against moto; an upper figure for the 10-16 pools of the organization's runs.
    function_run_s: float = 11.8
    # UpdateNodegroupConfig is asynchronous (EKS API Reference); no source gives how long EKS takes to apply a new
    # desired size to the Auto Scaling group. An assumption: half the schedule period, so the update is done by the
    # function's next run. Above 60 - function_run_s - asg_launch_s a scale-up is Ready a minute later.
    nodegroup_update_s: float = 30.0
    # The Auto Scaling group's launch after its desired capacity rises: no published figure; an assumption.
    asg_launch_s: float = 5.0
    # Karpenter's batch window, documented defaults (karpenter.sh, Reference > Settings).
    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    # CreateFleet (type instant) is synchronous; its duration is not published: an assumption.
    create_fleet_s: float = 2.0

    def __post_init__(self):
        for name in (
            "schedule_period_s",
            "function_run_s",
            "nodegroup_update_s",
            "asg_launch_s",
            "batch_idle_s",
            "batch_max_s",
            "create_fleet_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
                raise ValueError(f"ElasticLatency.{name} {value!r}: seconds, >= 0")
        if self.schedule_period_s <= 0:
            raise ValueError(f"ElasticLatency.schedule_period_s {self.schedule_period_s}: must be > 0")


def ready_minute(second: float) -> int:
    """The simulator's first minute at or after `second` (a node Ready then takes pods from that minute on)."""
    return math.ceil(second / 60 - 1e-9)


def nodegroup_update_second(tick: int, lat: ElasticLatency) -> float:
    """Second of the UpdateNodegroupConfig call the simulator's tick of minute `tick` stands for: the function's
    next run after the minute's pods arrived, plus its run time."""
    return 60.0 * tick + lat.schedule_period_s + lat.function_run_s


def nodegroup_applied_second(tick: int, lat: ElasticLatency) -> float:
    """Second at which EKS has applied that update to the Auto Scaling group (the group acts from then on)."""
    return nodegroup_update_second(tick, lat) + lat.nodegroup_update_s


def nodegroup_update_ticks(lat: ElasticLatency) -> int:
    """Ticks until the function finds the node group ACTIVE again: its run of a later tick reads the status at the
    same point of its run, so it sees the update done once `nodegroup_update_s` has passed."""
    return math.ceil(lat.nodegroup_update_s / lat.schedule_period_s - 1e-9)


def nodegroup_ready_minute(acts_second: float, lat: ElasticLatency, boot_s: float) -> int:
    """Minute a node is Ready that the Auto Scaling group starts launching at `acts_second`."""
    return ready_minute(acts_second + lat.asg_launch_s + boot_s)


def karpenter_batch_close(arrival_seconds: list[float], lat: ElasticLatency) -> float:
    """Second at which the batch window holding the last of these pod arrivals (seconds, any order) closes: a
    window opens at a pod, extends while the next pod comes within `batch_idle_s`, and closes `batch_idle_s` after
    its last pod or `batch_max_s` after its first, whichever is earlier."""
    if not arrival_seconds:
        raise ValueError("karpenter_batch_close: no arrivals")
    ordered = sorted(arrival_seconds)
    opened = close = ordered[0]
    for s in ordered:
        if s > close:
            opened = s  # the window before has closed: this pod opens a new one
        close = min(s + lat.batch_idle_s, opened + lat.batch_max_s)
    return close


def karpenter_ready_minute(request_second: float, lat: ElasticLatency, boot_s: float) -> int:
    """Minute a node is Ready that Karpenter requests (CreateFleet) at `request_second`."""
    return ready_minute(request_second + lat.create_fleet_s + boot_s)


def drawn_arrival_second(stream, minute: int) -> float:
    """A pod's arrival second within `minute` where the trace has none (a minute series): uniform, drawn from the
    stream (seed and pool) and the minute alone, so every policy meets the same second."""
    return random.Random(f"{stream}:arrival-second:{minute}").random() * 60.0


def size_group(kind: str, gpus: int) -> str:
    """The group of another node size of a pool of several sizes (PoolSpec.sizes): "spot-1gpu", "on_demand-4gpu".
    The largest size's groups keep the plain names SPOT and ON_DEMAND."""
    return f"{kind}-{gpus}gpu"


def kind_of(group: str) -> str:
    """GUARANTEED, SPOT or ON_DEMAND: the capacity a group (of any size) bills and fills as."""
    return group.split("-", 1)[0]


@dataclass
class SimNode:
    __slots__ = (
        "id",
        "serial",
        "group",
        "gpus",
        "usd_per_hour",
        "launched",
        "ready_at",
        "reclaim_at",
        "warned",
        "busy",
        "jobs",
        "hist",
        "empty_since",
        "slot",
        "busy_minutes",
        "empty_minutes",
        "closed",
        "rebalance_at",
        "recommended",
    )
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
    slot: int | None  # spot slot (common random numbers), None for other capacity
    busy_minutes: int  # GPU-minutes a pod held, up to the node's last busy change
    empty_minutes: int  # minutes ready with no pod, up to the node's last busy change
    closed: bool  # a NoSchedule taint keeps new pods off it (back to spot, the rebalance recommendation)
    rebalance_at: int | None  # minute of EC2's rebalance recommendation before the notice; None: with the notice
    recommended: bool  # the recommendation came (the node group's Capacity Rebalancing replaces it)

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
    nodegroup_update_conflicts: int = 0  # desired sizes refused: the node group was still UPDATING
    on_demand_launch_failures: int = 0  # launches refused in an on-demand shortage window
    node_launches: int = 0
    monthly_usd: dict = field(default_factory=dict)
    # Elastic GPU-minutes paid, split by what they did (closed nodes; Simulation.elastic_gpu_minutes adds the
    # open ones): where the cost above the oracle goes.
    elastic_paid: int = 0
    elastic_booting: int = 0
    elastic_empty: int = 0
    elastic_busy: int = 0
    # On-demand node-minutes billed while spot could be launched (outside every spot-unavailable episode): the
    # fallback capacity kept after spot came back (issue 28, "Back to spot").
    on_demand_node_minutes_spot_available: int = 0
    on_demand_node_minutes: int = 0


def spot_episodes(seed: int | str, horizon: int, per_week: float, mean_hours: float) -> list[tuple[int, int]]:
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


def merge_windows(windows) -> list[tuple[int, int]]:
    """[start, end) minute windows sorted and merged where they overlap or touch."""
    out: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in windows):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


class SlotInterruptions:
    """Common random numbers for spot interruptions: slot k's interruption minutes are a Poisson stream drawn
    from (seed, k) alone. A spot node that takes slot k at minute t is reclaimed at the slot's first event after
    t: by memorylessness its time to interruption is exponential at the same rate as a per-node draw, but two
    policies running k spot nodes at the same minute meet the same interruption, whatever their launch order."""

    def __init__(self, seed: int | str, rate_per_minute: float):
        self.seed = seed
        self.rate = rate_per_minute
        self.events: list[list[int]] = []
        self._clock: list[float] = []
        self._rngs: list[random.Random] = []

    def next_after(self, slot: int, minute: int) -> int | None:
        if self.rate <= 0:
            return None
        while len(self.events) <= slot:
            k = len(self.events)
            self.events.append([])
            self._clock.append(0.0)
            self._rngs.append(random.Random(f"spot-slot-{self.seed}-{k}"))
        ev = self.events[slot]
        while not ev or ev[-1] <= minute:
            self._clock[slot] += self._rngs[slot].expovariate(self.rate)
            ev.append(int(self._clock[slot]) + 1)  # at least one minute after the stream starts
        return ev[bisect.bisect_right(ev, minute)]
