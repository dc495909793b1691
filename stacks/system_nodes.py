"""The system node group: small on-demand, non-GPU, untainted nodes.

GPU nodes carry the `nvidia.com/gpu` taint, so without these nodes CoreDNS, the GPU operator's controllers and
the metrics agents would have nowhere to run and the cluster could not even resolve names.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from stacks import launch_templates, tags, versions
from stacks.config import SystemNodes

SYSTEM_TIER_LABEL = "system"  # gpuloan.io/tier=system: where cluster-wide controllers should run


def system_node_group_name(environment: str) -> str:
    return f"{environment}-system"


def system_node_group(
    name: str,
    *,
    environment: str,
    spec: SystemNodes,
    cluster_name: pulumi.Input[str],
    node_role_arn: pulumi.Input[str],
    subnet_ids: pulumi.Input[list[str]],
    extra_tags: dict[str, str],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource],
) -> aws.eks.NodeGroup:
    node_tags = {**extra_tags, **tags.environment_tags(environment), tags.TAG_TIER: "platform",
                 "Name": system_node_group_name(environment)}
    template = launch_templates.node_launch_template(
        f"{name}-lt", tags=node_tags, root_volume_gib=launch_templates.SYSTEM_ROOT_VOLUME_GIB, parent=parent,
        description="gpuloan system nodes (CoreDNS, operators, metrics agents)")
    return aws.eks.NodeGroup(
        name,
        cluster_name=cluster_name,
        node_group_name=system_node_group_name(environment),
        node_role_arn=node_role_arn,
        subnet_ids=subnet_ids,
        ami_type=versions.SYSTEM_AMI_TYPE,
        capacity_type="ON_DEMAND",
        instance_types=[spec.instance_type],
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(
            min_size=spec.nodes, desired_size=spec.nodes, max_size=spec.nodes),
        update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
        launch_template=launch_templates.template_ref(template),
        labels={tags.LABEL_TIER: SYSTEM_TIER_LABEL},
        tags=node_tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
    )
