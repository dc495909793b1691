"""The one launch-template builder every gpuloan node group uses (system, guaranteed, elastic).

Managed node groups launch instances through an EC2 Auto Scaling group, which does not copy the node group's
tags onto instances or volumes: cost allocation per pool only works if the launch template's
tag_specifications carry them. The template also holds what EKS cannot set on a node group: IMDSv2,
the encrypted root volume, and reservation targeting (ODCR or Capacity Block).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from config.names import GPU_ROOT_VOLUME_GIB, SYSTEM_ROOT_VOLUME_GIB  # noqa: F401  (re-exported: the templates' callers read them here)

ROOT_DEVICE_NAME = "/dev/xvda"  # the root device of the EKS AL2023 AMIs
# 2, not 1: pods that still use the instance role (the GPU operator's validators, CNI on existing clusters)
# sit one network hop behind the node; 1 would make IMDS unreachable from them.
IMDS_HOP_LIMIT = 2
# Instances, their volumes and ENIs are what shows up in the bill; tag all three.
TAGGED_RESOURCE_TYPES = ("instance", "volume", "network-interface")


def node_launch_template(
    name: str,
    *,
    tags: dict[str, str],
    root_volume_gib: int,
    parent: pulumi.Resource,
    instance_type: str | None = None,
    reservation_id: pulumi.Input[str] | None = None,
    capacity_block: bool = False,
    description: str = "",
) -> aws.ec2.LaunchTemplate:
    """A launch template for an EKS managed node group.

    `tags` go on the template and, through tag_specifications, on every instance, volume and ENI it launches
    (provider default tags do not reach ASG-launched instances). With `reservation_id` the instances launch
    only into that reservation; `capacity_block` marks it as a Capacity Block (market type capacity-block).
    No image id, no user data: EKS picks the AMI from the node group's ami_type and bootstraps it.
    """
    if capacity_block and reservation_id is None:
        raise ValueError("a Capacity Block launch template needs the block's reservation id")
    reservation = None
    if reservation_id is not None:
        target = aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=reservation_id
        )
        reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(capacity_reservation_target=target)
    return aws.ec2.LaunchTemplate(
        name,
        description=description or None,
        instance_type=instance_type,
        update_default_version=True,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled",
            http_tokens="required",  # IMDSv2 only
            http_put_response_hop_limit=IMDS_HOP_LIMIT,
            instance_metadata_tags="disabled",
        ),
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE_NAME,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=root_volume_gib, volume_type="gp3", encrypted="true", delete_on_termination="true"
                ),
            )
        ],
        capacity_reservation_specification=reservation,
        instance_market_options=(
            aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block") if capacity_block else None
        ),
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=rt, tags=tags) for rt in TAGGED_RESOURCE_TYPES
        ],
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def template_ref(template: aws.ec2.LaunchTemplate) -> aws.eks.NodeGroupLaunchTemplateArgs:
    # Pin the node group to the template's latest version so a template change rolls the nodes.
    return aws.eks.NodeGroupLaunchTemplateArgs(id=template.id, version=template.latest_version.apply(str))
