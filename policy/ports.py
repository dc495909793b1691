"""The ports the tick drives (STYLE.md 2: one narrow port per side effect) and the data they carry.

policy/io/ implements them against AWS and the cluster's Kubernetes API; policy/memory_state.py, the tests and the
simulator implement them in memory. policy/tick.py `Ports` holds one of each for a tick. The ports whose pure
callers are alone in using them are declared beside those callers: BudgetReader (policy/spend.py), Publisher
(policy/notifications.py), ClusterQueuePort (policy/loan_usage.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Mapping, Protocol, Sequence

from policy.errors import PolicyError
from policy.gpu_series import Series
from policy.model import INSTANCE_ID, BlockDates, Group, PendingGang
from policy.pods import NodeShape

# --- Node groups (policy/io/nodegroups.py): EKS managed node groups read through their Auto Scaling groups.


@dataclass(frozen=True)
class Instance:
    instance_id: str
    group: str
    lifecycle: str
    launched_at: datetime | None = None
    node_name: str = ""
    instance_type: str | None = None  # DescribeAutoScalingGroups' InstanceType: the budget cap prices the node at it


@dataclass(frozen=True)
class GroupState:
    group: Group
    instances: tuple[Instance, ...]


class NodeGroupPort(Protocol):
    def read(
        self, names: list[str], now: datetime, activities_for: set[str], on_error: Callable[[PolicyError], None]
    ) -> dict[str, GroupState]: ...

    def recheck(self, group: str) -> GroupState: ...

    # Optional (policy/tick.py uses it when the port has it): every group about to change, read again at once;
    # a group that could not be is a PolicyError in its place.
    # def recheck_many(self, groups: list[str]) -> dict[str, GroupState | PolicyError]: ...

    def set_desired(self, group: str, desired: int) -> None: ...

    def terminate(self, instance_id: str) -> None: ...


# --- Persisted state (policy/io/state.py: DynamoDB; policy/memory_state.py: in memory).

# The items the state keeps besides the tick state: the tick lease and the spot warning records.
LEASE_KEY = "lease"
LEAVING_KEY = "leaving"
# save()'s `version` for an item whose own version did not parse (MalformedState.version None): it is replaced by
# version 1, as if it had been version 0.
MALFORMED_VERSION = -1


def checked_ids(expires_at: dict[str, float]) -> dict[str, float]:
    """Only well-formed instance ids are ever stored: they become attribute names, so anything else is refused."""
    bad = sorted(i for i in expires_at if not (isinstance(i, str) and INSTANCE_ID.fullmatch(i)))
    if bad:
        raise ValueError(f"not EC2 instance ids, not recorded: {', '.join(map(repr, bad))[:200]}")
    return expires_at


class StatePort(Protocol):
    def load(self, key: str) -> tuple[dict, int]: ...

    def save(self, key: str, data: dict, version: int) -> None: ...

    # `key`: the lease item; a shard's tick holds its own ("lease#<shard>", policy/shard_budget.py), so shards never
    # wait for each other. Callers pass it only for a shard: a port without shards may take two arguments.
    def acquire_lease(self, holder: str, now_epoch: float, ttl_s: float, key: str = LEASE_KEY) -> bool: ...

    def release_lease(self, holder: str, key: str = LEASE_KEY) -> None: ...

    def record_leaving(self, expires_at: dict[str, float]) -> None: ...

    def load_leaving(self) -> dict[str, float]: ...

    def prune_leaving(self, ids: list[str], now_epoch: float) -> bool: ...


# --- Capacity Block dates (policy/io/reservations.py: EC2 DescribeCapacityReservations).


class BlockDatesPort(Protocol):
    def read(self, reservation_ids: list[str]) -> dict[str, BlockDates]: ...


# --- The cluster's Kubernetes API (policy/io/kube.py), over the rules of policy/pods.py.


class PendingPodsPort(Protocol):
    def pending_gpus(
        self, pools: list[str], shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[int, ...]]: ...

    def gpu_pod_arrivals(
        self, pools: list[str], since: datetime, shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[tuple[datetime, int], ...]]: ...

    def pending_gangs(
        self, pools: list[str], shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[PendingGang, ...]]: ...

    def pending_on_demand_only(
        self, pools: list[str], shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[int, ...]]: ...

    def gpu_pods_by_node(self) -> dict[str, int]: ...


class NodeGuardPort(Protocol):
    """The check before a termination: cordon, then the node's pods (policy/tick.py)."""

    def cordon(self, node_name: str) -> bool: ...

    def node_pod_gpus(self, node_name: str) -> tuple[int, ...]: ...

    def uncordon(self, node_name: str) -> None: ...

    def set_taint(self, node_name: str, key: str, present: bool) -> bool: ...

    def blockers(self, node_name: str) -> list[str]: ...

    def mark_checkpoint(self, node_name: str, key: str, value: str) -> int: ...


class FloorQuotaPort(Protocol):
    """Kueue: the nominal quota of a Capacity Block's floor flavor in its pool's ClusterQueue; the lendingLimit of a
    lending floor's flavor (policy/decide/lend_ahead.py); and any of the environment's ClusterQueues as read, whose
    status the loan's usage and the lend-ahead rule's figures come from (policy/loan_usage.py, lending_of)."""

    def floor_quota(self, api_version: str, queue: str, flavor: str) -> int: ...

    def set_floor_quota(self, api_version: str, queue: str, flavor: str, gpus: int) -> None: ...

    def cluster_queue(self, api_version: str, queue: str) -> dict: ...

    def set_lending_limit(self, api_version: str, queue: str, flavor: str, gpus: int) -> None: ...


# --- GPU utilization per node (policy/io/cloudwatch.py: CloudWatch GetMetricData).


@dataclass(frozen=True)
class NodeRef:
    instance_id: str
    node_name: str  # the Kubernetes node name = the instance's private DNS name on EKS


class UtilizationSource(Protocol):
    def read(self, nodes: Iterable[NodeRef], now: datetime, window_minutes: int) -> dict[str, Series]: ...
