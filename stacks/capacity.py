"""Per-pool capacity: names, labels and taints shared by the guaranteed and elastic node groups, and
`build_pool` which declares both for one pool.

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
import pulumi_aws as aws

from stacks import tags
from stacks.config import GpuLoanConfig, Pool

GROUP_GUARANTEED = "guaranteed"
GROUP_SPOT = "spot"
GROUP_ON_DEMAND = "on-demand"

# EKS spells taint effects in upper case; Kubernetes sees them as NoSchedule.
GPU_TAINT = aws.eks.NodeGroupTaintArgs(key=tags.GPU_TAINT_KEY, value="true", effect="NO_SCHEDULE")
SPOT_TAINT = aws.eks.NodeGroupTaintArgs(key=tags.SPOT_TAINT_KEY, value="true", effect="NO_SCHEDULE")


# The provider's generated suffix (terraform-plugin-sdk id.UniqueIDSuffixLength); EKS names are at most 63
# characters, so the provider refuses a prefix longer than 63 - 26 = 37 (docs/aws-rules.md).
GENERATED_SUFFIX_LENGTH = 26
NODE_GROUP_NAME_MAX = 63
NODE_GROUP_PREFIX_MAX = NODE_GROUP_NAME_MAX - GENERATED_SUFFIX_LENGTH
PREFIX_END = "_"


def node_group_label(environment: str, pool: str, group: str) -> str:
    """The human name of a group (`prod-training-guaranteed`): the Name tag of its instances, previews."""
    return f"{environment}-{pool}-{group}"


def node_group_name_prefix(environment: str, pool: str, group: str) -> str:
    """The prefix of the group's EKS name; the provider appends a unique suffix."""
    return node_group_label(environment, pool, group) + PREFIX_END


def node_group_name_pattern(environment: str, pool: str, group: str) -> str:
    """IAM/glob pattern matching every name the provider can give this group."""
    return node_group_name_prefix(environment, pool, group) + "*"


def node_group_arn_pattern(region: str, account_id: str, cluster_name: str, environment: str, pool: str,
                           group: str, partition: str = "aws") -> str:
    """The IAM resource pattern matching one gpuloan node group (any generated suffix, any UUID)."""
    return (f"arn:{partition}:eks:{region}:{account_id}:nodegroup/{cluster_name}/"
            f"{node_group_name_pattern(environment, pool, group)}/*")


# EKS on-demand groups launch their instance types in the listed order (allocation strategy "prioritized"); spot
# groups use price-capacity-optimized, where the order means nothing. So a spot group's list is sorted (a reorder
# in the config changes nothing; instance_types forces a replacement) and an on-demand group keeps the config's
# order, which is its preference.
def instance_types_for(capacity_type: str, instance_types: list[str]) -> list[str]:
    return sorted(instance_types) if capacity_type == "SPOT" else list(instance_types)


# Node replacements on GPU groups (AMI, Kubernetes version, a new launch-template version) use EKS's MINIMAL
# update strategy: terminate an old node, then launch its replacement. The DEFAULT strategy launches new nodes
# first, which needs room that a reservation sized to the floor (targeted ODCR, Capacity Block) does not have
# (NodeCreationFailure), and for unreserved GPU types a surge of p4d/p5 capacity that is often not to be had.
# Accepted cost: one node of the group at a time is down during a roll (max_unavailable 1).
GPU_UPDATE_STRATEGY = "MINIMAL"


def gpu_update_config(*, max_unavailable: int | None = None,
                      max_unavailable_percentage: int | None = None) -> aws.eks.NodeGroupUpdateConfigArgs:
    return aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=max_unavailable,
                                             max_unavailable_percentage=max_unavailable_percentage,
                                             update_strategy=GPU_UPDATE_STRATEGY)


def instance_tags(cfg: GpuLoanConfig, pool: Pool, tier: str, capacity: str, group: str) -> dict[str, str]:
    """Tags for the launch template's tag_specifications: user default tags + gpuloan cost-allocation tags.

    Provider default tags never reach ASG-launched instances, so everything a bill needs is spelled out here.
    """
    return {**cfg.default_tags, **tags.pool_tags(cfg.environment, pool.name, pool.team, tier, capacity),
            "Name": node_group_label(cfg.environment, pool.name, group)}


def build_pool(cfg: GpuLoanConfig, pool: Pool, cluster, opts: pulumi.ResourceOptions,
               live_desired: dict[str, int] | None = None):
    """(GuaranteedCapacity | None, ElasticCapacity | None) for one pool; `live_desired` as stacks/live_sizes.py reads."""
    from stacks.elastic import ElasticCapacity
    from stacks.guaranteed import GuaranteedCapacity

    guaranteed = elastic = None
    if pool.guaranteed is not None:
        guaranteed = GuaranteedCapacity(f"{pool.name}-guaranteed", cfg, pool, cluster, opts=opts)
    if pool.elastic is not None:
        elastic = ElasticCapacity(f"{pool.name}-elastic", cfg, pool, cluster, opts=opts, live_desired=live_desired)
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
