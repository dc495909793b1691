"""Names, limits, namespaces and sizes that config, the cost model and the components share (a leaf: stdlib only).

config/config.py validates what the components will name (node group prefixes against EKS's length limit, teams
against the namespaces the add-ons take) and the platform cost prices the root volumes the launch templates declare;
all read the values here, so neither config nor the cost model imports a component.

Node group names come from the provider's auto-naming: a deterministic prefix `<env>-<pool>-<group>_` plus a
unique suffix the provider adds (stacks/capacity/pools.py says why). The `_` ends the prefix: pool and environment names
are slugs without underscores, so `dev-a-spot_*` can never match another pool's groups such as
`dev-a-spot-x-guaranteed_...` (with `-` it would).
"""

from __future__ import annotations

GROUP_GUARANTEED = "guaranteed"
GROUP_SPOT = "spot"
GROUP_ON_DEMAND = "on-demand"

# The provider's generated suffix (terraform-plugin-sdk id.UniqueIDSuffixLength); EKS names are at most 63
# characters, so the provider refuses a prefix longer than 63 - 26 = 37 (docs/aws-rules.md).
GENERATED_SUFFIX_LENGTH = 26
NODE_GROUP_NAME_MAX = 63
NODE_GROUP_PREFIX_MAX = NODE_GROUP_NAME_MAX - GENERATED_SUFFIX_LENGTH
PREFIX_END = "_"

# Namespaces of the add-ons gpuloan installs (stacks/kubernetes/gpu_operator.py, stacks/kubernetes/kueue.py, stacks/kubernetes/gpu_metrics.py).
GPU_OPERATOR_NAMESPACE = "gpu-operator"
KUEUE_NAMESPACE = "kueue-system"
# Where the CloudWatch observability add-on runs its agent; the Pod Identity association must name this exact pair.
GPU_METRICS_AGENT_NAMESPACE = "amazon-cloudwatch"

# Root volumes of the launch templates (stacks/capacity/launch_templates.py), priced by pricing/cost_model/platform_costs.py. CUDA/PyTorch
# images are 10-20 GiB each and containerd keeps several layers' versions on the root volume.
GPU_ROOT_VOLUME_GIB = 200
SYSTEM_ROOT_VOLUME_GIB = 50


def node_group_label(environment: str, pool: str, group: str) -> str:
    """The human name of a group (`prod-training-guaranteed`): the Name tag of its instances, previews."""
    return f"{environment}-{pool}-{group}"


def node_group_name_prefix(environment: str, pool: str, group: str) -> str:
    """The prefix of the group's EKS name; the provider appends a unique suffix."""
    return node_group_label(environment, pool, group) + PREFIX_END


def node_group_name_pattern(environment: str, pool: str, group: str) -> str:
    """IAM/glob pattern matching every name the provider can give this group."""
    return node_group_name_prefix(environment, pool, group) + "*"


def node_group_arn_pattern(
    region: str, account_id: str, cluster_name: str, environment: str, pool: str, group: str, partition: str = "aws"
) -> str:
    """The IAM resource pattern matching one gpuloan node group (any generated suffix, any UUID)."""
    return (
        f"arn:{partition}:eks:{region}:{account_id}:nodegroup/{cluster_name}/"
        f"{node_group_name_pattern(environment, pool, group)}/*"
    )
