"""The elastic path's latency, per side, at second resolution (issue 36; docs/simulator.md, "The elastic path's
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

import math
import random
from dataclasses import dataclass


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
