"""The node sizes of a pool's elastic capacity: its instance types grouped by GPUs per node.

An EKS managed node group holds one instance shape (docs/aws-rules.md: the instance types of a group must have the
same vCPUs, memory and GPUs; Cluster Autoscaler and the group's own scaling assume every node alike), so a pool that
lists types of several sizes (g6e.2xlarge, g6e.12xlarge, g6e.48xlarge: 1, 4 and 8 L40S GPUs) gets one spot and one
on-demand group per size, and the policy function chooses which size to grow (policy/sizes.py).

Names are keyed to a size, never to list order (issue 35 item 4): reordering `instance_types` renames and replaces
nothing. One size, the pool's **plain size**, keeps the names a one-size pool has always had (`<env>-<pool>-spot_...`,
`<env>-<pool>-on-demand_...`, Pulumi names `<pool>-elastic-spot` ...), so a one-size pool's update from an earlier
release replaces nothing; every other size's groups carry its GPUs: `<env>-<pool>-spot-4gpu_...`. The plain size is
`elastic.plain_names_gpus` where set, else the pool's largest size (the one gangs go to). An earlier release gave the
plain names to the first listed type's size: a stack whose first listed type was not the largest sets
`plain_names_gpus` to that size's GPUs, or the cost diff shows its groups replaced, a blocker (docs/capacity.md,
"Node group names"). Group kind keys (ElasticCapacity.group_names, live sizes, settings): "spot", "on_demand" for the
plain size, "spot-4gpu", "on_demand-4gpu" for the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.instance_types import InstanceFacts, lookup

SPOT, ON_DEMAND = "spot", "on_demand"


@dataclass(frozen=True)
class NodeSizeTypes:
    """One size of a pool: its GPUs per node and its instance types in config order."""

    gpus_per_node: int
    instance_types: tuple[str, ...]
    first: bool  # the pool's plain size: the plain group names (module doc)


def node_sizes(
    instance_types: list[str] | tuple[str, ...], plain_gpus: int | None = None, facts: InstanceFacts | None = None
) -> list[NodeSizeTypes]:
    """The sizes of `instance_types`: the plain size first (`plain_gpus` GPUs per node, else the largest), then the
    others by GPUs per node, ascending; each size's types in config order (an on-demand group's preference). The
    result depends on the set of types only, never on their order. `facts`: those read from EC2 for types newer
    than the table (a validated config's `instance_facts`)."""
    types: dict[int, list[str]] = {}
    for t in instance_types:
        itype = lookup(t, facts)
        if itype is None:
            raise ValueError(f"unknown GPU instance type '{t}' (validation refuses it)")
        types.setdefault(itype.gpus, []).append(t)
    plain = plain_gpus if plain_gpus in types else max(types, default=0)
    order = [plain] + sorted(g for g in types if g != plain) if types else []
    return [NodeSizeTypes(g, tuple(types[g]), g == plain) for g in order]


def pool_sizes(elastic, facts: InstanceFacts | None = None) -> list[NodeSizeTypes]:
    """node_sizes of a pool's elastic config (config.config.Elastic), its plain size as configured."""
    return node_sizes(elastic.instance_types, getattr(elastic, "plain_names_gpus", None), facts)


def size_suffix(size: NodeSizeTypes) -> str:
    """'' for the plain size; '-4gpu' for another: appended to group kinds, names and Pulumi names."""
    return "" if size.first else f"-{size.gpus_per_node}gpu"


def kind_key(kind: str, size: NodeSizeTypes) -> str:
    """The key of a size's group of `kind` (SPOT or ON_DEMAND): "spot", "on_demand-4gpu"."""
    return kind + size_suffix(size)


def other_size_of_key(key: str) -> tuple[str, int] | None:
    """(kind, GPUs) of another size's key ("on_demand-4gpu" -> ("on_demand", 4)); None for the plain size's keys."""
    kind, sep, rest = key.partition("-")
    if not sep or kind not in (SPOT, ON_DEMAND) or not rest.endswith("gpu") or not rest[:-3].isdigit():
        return None
    return kind, int(rest[:-3])
