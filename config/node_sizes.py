"""The node sizes of a pool's elastic capacity: its instance types grouped by GPUs per node.

An EKS managed node group holds one instance shape (docs/aws-rules.md: the instance types of a group must have the
same vCPUs, memory and GPUs; Cluster Autoscaler and the group's own scaling assume every node alike), so a pool that
lists types of several sizes (g6e.2xlarge, g6e.12xlarge, g6e.48xlarge: 1, 4 and 8 L40S GPUs) gets one spot and one
on-demand group per size, and the policy function chooses which size to grow (policy/sizes.py).

Names: the size of the pool's first listed type is its first size and keeps the names a one-size pool has always had
(`<env>-<pool>-spot_...`, `<env>-<pool>-on-demand_...`, Pulumi names `<pool>-elastic-spot` ...), so an update from an
earlier release replaces nothing; every other size's groups carry its GPUs: `<env>-<pool>-spot-4gpu_...`. Group kind
keys (ElasticCapacity.group_names, live sizes, settings): "spot", "on_demand" for the first size, "spot-4gpu",
"on_demand-4gpu" for the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing.sources import catalog

SPOT, ON_DEMAND = "spot", "on_demand"


@dataclass(frozen=True)
class NodeSizeTypes:
    """One size of a pool: its GPUs per node and its instance types in config order."""

    gpus_per_node: int
    instance_types: tuple[str, ...]
    first: bool  # the size of the pool's first listed type: the plain group names


def node_sizes(instance_types: list[str] | tuple[str, ...]) -> list[NodeSizeTypes]:
    """The sizes of `instance_types`, the first listed type's size first, then in order of appearance."""
    order: list[int] = []
    types: dict[int, list[str]] = {}
    for t in instance_types:
        gpus = catalog.lookup(t).gpus
        if gpus not in types:
            order.append(gpus)
            types[gpus] = []
        types[gpus].append(t)
    return [NodeSizeTypes(g, tuple(types[g]), i == 0) for i, g in enumerate(order)]


def size_suffix(size: NodeSizeTypes) -> str:
    """'' for the first size; '-4gpu' for another: appended to group kinds, names and Pulumi names."""
    return "" if size.first else f"-{size.gpus_per_node}gpu"


def kind_key(kind: str, size: NodeSizeTypes) -> str:
    """The key of a size's group of `kind` (SPOT or ON_DEMAND): "spot", "on_demand-4gpu"."""
    return kind + size_suffix(size)


def other_size_of_key(key: str) -> tuple[str, int] | None:
    """(kind, GPUs) of another size's key ("on_demand-4gpu" -> ("on_demand", 4)); None for the first size's keys."""
    kind, sep, rest = key.partition("-")
    if not sep or kind not in (SPOT, ON_DEMAND) or not rest.endswith("gpu") or not rest[:-3].isdigit():
        return None
    return kind, int(rest[:-3])
