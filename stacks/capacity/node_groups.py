"""What the guaranteed and elastic node groups of a pool share: taints, update strategy, instance tags, type order.

stacks/capacity/guaranteed.py and stacks/capacity/elastic.py build on this; stacks/capacity/pools.py declares both for a pool. Their names
and prefixes are in config/names.py (config validates them too).
"""

from __future__ import annotations

import pulumi_aws as aws

from config import names, tags
from config.config import GpuLoanConfig, Pool

# EKS spells taint effects in upper case; Kubernetes sees them as NoSchedule.
GPU_TAINT = aws.eks.NodeGroupTaintArgs(key=tags.GPU_TAINT_KEY, value="true", effect="NO_SCHEDULE")
SPOT_TAINT = aws.eks.NodeGroupTaintArgs(key=tags.SPOT_TAINT_KEY, value="true", effect="NO_SCHEDULE")


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


def gpu_update_config(
    *, max_unavailable: int | None = None, max_unavailable_percentage: int | None = None
) -> aws.eks.NodeGroupUpdateConfigArgs:
    return aws.eks.NodeGroupUpdateConfigArgs(
        max_unavailable=max_unavailable,
        max_unavailable_percentage=max_unavailable_percentage,
        update_strategy=GPU_UPDATE_STRATEGY,
    )


def instance_tags(cfg: GpuLoanConfig, pool: Pool, tier: str, capacity: str, group: str) -> dict[str, str]:
    """Tags for the launch template's tag_specifications: user default tags + gpuloan cost-allocation tags.

    Provider default tags never reach ASG-launched instances, so everything a bill needs is spelled out here.
    """
    return {
        **cfg.default_tags,
        **tags.pool_tags(cfg.environment, pool.name, pool.team, tier, capacity),
        "Name": names.node_group_label(cfg.environment, pool.name, group),
    }
