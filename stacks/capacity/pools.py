"""Per-pool capacity: `build_pool` declares the guaranteed and elastic node groups of one pool; their shared
names are in config/names.py, their shared taints and tags in stacks/capacity/node_groups.py.

Node group names come from the provider's auto-naming: a deterministic prefix `<env>-<pool>-<group>_` plus a
unique suffix the provider adds. A fixed name would force delete-before-replace (two node groups cannot share a
name), so editing `elastic.instance_types` or a floor's AZ would delete the live group before its replacement
exists; with a prefix, Pulumi creates the new group first and deletes the old one once the new one is up.

The prefix is what the policy function's IAM is scoped to, so it can never touch the floor:
    arn:aws:eks:<region>:<account>:nodegroup/<cluster>/<env>-<pool>-spot_*/*
    arn:aws:eks:<region>:<account>:nodegroup/<cluster>/<env>-<pool>-on-demand_*/*
(the trailing `/*` is the node group's UUID, which EKS appends to its ARN). The `_` ends the prefix: pool and
environment names are slugs without underscores, so `dev-a-spot_*` can never match another pool's groups such as
`dev-a-spot-x-guaranteed_...` (with `-` it would).
"""

from __future__ import annotations

import pulumi

from config.config import GpuLoanConfig, Pool
from stacks.capacity.elastic import ElasticCapacity, ElasticCapacityArgs
from stacks.capacity.guaranteed import GuaranteedCapacity, GuaranteedCapacityArgs

# Re-exported, importable here as before the split, for code written against this module (branches in flight);
# new code imports them from config/names.py and stacks/capacity/node_groups.py.
from config.names import (  # noqa: F401
    GENERATED_SUFFIX_LENGTH,
    GROUP_GUARANTEED,
    GROUP_ON_DEMAND,
    GROUP_SPOT,
    NODE_GROUP_NAME_MAX,
    NODE_GROUP_PREFIX_MAX,
    PREFIX_END,
    node_group_arn_pattern,
    node_group_label,
    node_group_name_pattern,
    node_group_name_prefix,
)
from stacks.capacity.node_groups import (  # noqa: F401
    GPU_TAINT,
    GPU_UPDATE_STRATEGY,
    SPOT_TAINT,
    gpu_update_config,
    instance_tags,
    instance_types_for,
)


def build_pool(
    cfg: GpuLoanConfig, pool: Pool, cluster, opts: pulumi.ResourceOptions, live_desired: dict[str, int] | None = None
):
    """(GuaranteedCapacity | None, ElasticCapacity | None) for one pool; `live_desired` as stacks/capacity/live_sizes.py reads."""
    guaranteed = elastic = None
    if pool.guaranteed is not None:
        guaranteed = GuaranteedCapacity(
            f"{pool.name}-guaranteed", GuaranteedCapacityArgs.from_config(cfg, pool, cluster), opts=opts
        )
    if pool.elastic is not None:
        elastic = ElasticCapacity(
            f"{pool.name}-elastic", ElasticCapacityArgs.from_config(cfg, pool, cluster, live_desired), opts=opts
        )
    return guaranteed, elastic


def group_names(guaranteed, elastic) -> dict[str, pulumi.Output[str]]:
    """{"guaranteed" | "spot" | "on_demand": the generated node group name} of one pool's components."""
    out = dict(elastic.group_names) if elastic is not None else {}
    if guaranteed is not None:
        out["guaranteed"] = guaranteed.node_group.node_group_name
    return out


def pool_outputs(pool: Pool, guaranteed, elastic) -> dict[str, object]:
    """Stack outputs of one pool: node group names and ARNs per group, and the reservation id."""
    out: dict[str, object] = {}
    if guaranteed is not None:
        out["guaranteed_node_group_name"] = guaranteed.node_group.node_group_name
        out["guaranteed_node_group_arn"] = guaranteed.node_group.arn
        out["reservation_id"] = guaranteed.reservation_id
    if elastic is not None:
        for key, group in (("spot", elastic.spot_group), ("on_demand", elastic.on_demand_group)):
            if group is not None:
                out[f"elastic_{key}_node_group_name"] = group.node_group_name
                out[f"elastic_{key}_node_group_arn"] = group.arn
    return out
