"""Per-pool capacity: names, labels and taints shared by the guaranteed and elastic node groups, and
`build_pool` which declares both for one pool.

Node group names are explicit and deterministic (`<env>-<pool>-guaranteed|spot|on-demand`) so the policy
function's IAM can be scoped to the elastic groups by ARN pattern and can never touch the floor:
    arn:aws:eks:<region>:<account>:nodegroup/<cluster>/<env>-<pool>-spot/*
    arn:aws:eks:<region>:<account>:nodegroup/<cluster>/<env>-<pool>-on-demand/*
(the trailing `/*` is the node group's UUID, which EKS appends to its ARN).
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


def node_group_name(environment: str, pool: str, group: str) -> str:
    return f"{environment}-{pool}-{group}"


def node_group_arn_pattern(region: str, account_id: str, cluster_name: str, environment: str, pool: str,
                           group: str, partition: str = "aws") -> str:
    """The IAM resource pattern matching one gpuloan node group (any UUID suffix)."""
    return (f"arn:{partition}:eks:{region}:{account_id}:nodegroup/{cluster_name}/"
            f"{node_group_name(environment, pool, group)}/*")


def instance_tags(cfg: GpuLoanConfig, pool: Pool, tier: str, capacity: str, group: str) -> dict[str, str]:
    """Tags for the launch template's tag_specifications: user default tags + gpuloan cost-allocation tags.

    Provider default tags never reach ASG-launched instances, so everything a bill needs is spelled out here.
    """
    return {**cfg.default_tags, **tags.pool_tags(cfg.environment, pool.name, pool.team, tier, capacity),
            "Name": node_group_name(cfg.environment, pool.name, group)}


def build_pool(cfg: GpuLoanConfig, pool: Pool, cluster, opts: pulumi.ResourceOptions):
    """(GuaranteedCapacity | None, ElasticCapacity | None) for one pool."""
    from stacks.elastic import ElasticCapacity
    from stacks.guaranteed import GuaranteedCapacity

    guaranteed = elastic = None
    if pool.guaranteed is not None:
        guaranteed = GuaranteedCapacity(f"{pool.name}-guaranteed", cfg, pool, cluster, opts=opts)
    if pool.elastic is not None:
        elastic = ElasticCapacity(f"{pool.name}-elastic", cfg, pool, cluster, opts=opts)
    return guaranteed, elastic


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
