"""The system node group: small on-demand, non-GPU, untainted nodes.

GPU nodes carry the `nvidia.com/gpu` taint, so without these nodes CoreDNS, the GPU operator's controllers and
the metrics agents would have nowhere to run and the cluster could not even resolve names.

The group is auto-named (`<env>-system_` plus the provider's suffix), like the GPU groups (stacks/capacity/pools.py): a
change that replaces it (instance type, subnets, AMI type) then creates the new group before deleting the old one,
so CoreDNS, Kueue (whose pod webhook fails closed for team namespaces), the GPU Operator and the CloudWatch agent
always have untainted nodes to move to. A fixed name would force delete-before-replace (two groups cannot share a
name): every such change would first delete the only nodes they can run on. A stack created with the fixed name
`<env>-system` replaces its group once on the upgrade, the same way: new group first (docs/capacity.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_aws as aws

from config import tags, versions
from stacks.capacity import launch_templates
from stacks.capacity.pools import PREFIX_END
from config.config import SystemNodes

SYSTEM_TIER_LABEL = "system"  # gpuloan.io/tier=system: where cluster-wide controllers should run


def system_node_group_name(environment: str) -> str:
    """The human name (instances' Name tag, previews)."""
    return f"{environment}-system"


def system_node_group_name_prefix(environment: str) -> str:
    """The prefix of the group's EKS name; the provider appends a unique suffix."""
    return system_node_group_name(environment) + PREFIX_END


def system_node_group(
    name: str,
    *,
    environment: str,
    spec: SystemNodes,
    cluster_name: pulumi.Input[str],
    kubernetes_version: str,
    node_role_arn: pulumi.Input[str],
    subnet_ids: pulumi.Input[list[str]],
    extra_tags: dict[str, str],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource],
) -> aws.eks.NodeGroup:
    node_tags = {
        **extra_tags,
        **tags.environment_tags(environment),
        tags.TAG_TIER: "platform",
        "Name": system_node_group_name(environment),
    }
    template = launch_templates.node_launch_template(
        f"{name}-lt",
        tags=node_tags,
        root_volume_gib=launch_templates.SYSTEM_ROOT_VOLUME_GIB,
        parent=parent,
        description="gpuloan system nodes (CoreDNS, operators, metrics agents)",
    )
    return aws.eks.NodeGroup(
        name,
        cluster_name=cluster_name,
        node_group_name_prefix=system_node_group_name_prefix(environment),
        # The control plane's version: a version change rolls the group after the control plane (its clusterName
        # comes from the cluster) and the pre-node add-ons (depends_on), so EKS's next control-plane update finds
        # no group behind it (docs/capacity.md, "Kubernetes upgrades").
        version=kubernetes_version,
        node_role_arn=node_role_arn,
        subnet_ids=subnet_ids,
        ami_type=versions.SYSTEM_AMI_TYPE,
        capacity_type="ON_DEMAND",
        instance_types=[spec.instance_type],
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(
            min_size=spec.nodes, desired_size=spec.nodes, max_size=spec.nodes
        ),
        update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
        launch_template=launch_templates.template_ref(template),
        labels={tags.LABEL_TIER: SYSTEM_TIER_LABEL},
        tags=node_tags,
        # Create before delete (Pulumi's default, spelled out): the name prefix lets both groups exist at once.
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on, delete_before_replace=False),
    )
