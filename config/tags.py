"""Cost-allocation tags: one place decides the keys, so budgets, Cost Explorer and the tests agree."""

from __future__ import annotations

TAG_ENVIRONMENT = "gpuloan:environment"
TAG_POOL = "gpuloan:pool"
TAG_TEAM = "gpuloan:team"
TAG_TIER = "gpuloan:tier"  # guaranteed | elastic | platform (shared, non-GPU resources)
TAG_CAPACITY = "gpuloan:capacity"  # spot | on-demand | reserved

COST_ALLOCATION_KEYS = (TAG_ENVIRONMENT, TAG_POOL, TAG_TEAM, TAG_TIER)

# Kubernetes node labels and taints (docs/capacity.md); workloads select pools and tiers with these.
LABEL_POOL = "gpuloan.io/pool"
LABEL_TIER = "gpuloan.io/tier"
LABEL_CAPACITY = "gpuloan.io/capacity"
GPU_TAINT_KEY = "nvidia.com/gpu"  # the taint GPU users already tolerate (EKS, GKE and the GPU Operator use it)
SPOT_TAINT_KEY = "gpuloan.io/spot"  # only workloads that tolerate interruption land on spot nodes


def environment_tags(environment: str) -> dict[str, str]:
    """Tags for shared resources (network, cluster, alerts): the provider's default tags add these everywhere."""
    return {TAG_ENVIRONMENT: environment}


def pool_tags(environment: str, pool: str, team: str, tier: str, capacity: str | None = None) -> dict[str, str]:
    tags = {TAG_ENVIRONMENT: environment, TAG_POOL: pool, TAG_TEAM: team, TAG_TIER: tier}
    if capacity:
        tags[TAG_CAPACITY] = capacity
    return tags


# Kubernetes group the policy function's IAM role maps to (EKS access entry); a ClusterRole lets it list pods only.
POLICY_READER_GROUP = "gpuloan-policy-readers"

# Label on each team's namespace (stacks/kubernetes/tenancy.py).
LABEL_TEAM = "gpuloan.io/team"
