"""The guaranteed floor of one pool: nodes that are always there and never preempted.

`reservation: odcr` creates an On-Demand Capacity Reservation (targeted, so only this pool's launch template
consumes it); `odcr` or `capacity_block` with a `reservation_id` use one the user already holds. gpuloan never
purchases a Capacity Block (`aws.ec2.CapacityBlockReservation` cannot be cancelled or deleted).

The node group's desired size is owned by Pulumi (min = desired = max = the floor): unlike the elastic groups
there is no `ignore_changes`, so drift on the floor is corrected by the next `pulumi up`. The exception is a floor
on a Capacity Block with the policy function on: the policy keeps its window (policy/capacity_blocks.py) and owns
its desired size, as it does the elastic groups' (block_scaling).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws

from config import tags, versions
from stacks.capacity import launch_templates
from config.instance_types import InstanceFacts, lookup
from config.names import GROUP_GUARANTEED, node_group_name_prefix
from stacks.capacity.node_groups import GPU_TAINT, gpu_update_config, instance_tags
from config.config import GpuLoanConfig, Guaranteed, Pool, Reservation, policy_keeps_block

if TYPE_CHECKING:  # annotations only: stacks/cluster.py builds the system nodes from this package
    from stacks.cluster import Cluster

TIER = "guaranteed"


def gpu_ami_type(instance_types: list[str], facts: InstanceFacts | None = None) -> str:
    """`facts`: a validated config's instance facts read from EC2 (types newer than the table)."""
    arm = set()
    for name in instance_types:
        itype = lookup(name, facts)
        if itype is None:  # the config's validation names an unknown type before any stack is built
            raise ValueError(f"{name}: not a known GPU instance type")
        arm.add(itype.cpu_architecture == "arm64")
    return versions.GPU_AMI_TYPE_ARM if arm == {True} else versions.GPU_AMI_TYPE


def floor_scaling(g: Guaranteed, now: dt.datetime | None = None) -> tuple[int, int, int]:
    """(min, desired, max) of a floor Pulumi owns: min = desired = max = nodes, except a Capacity Block outside its
    window (Guaranteed.floor_up): 0 before `capacity_block_start` (launches into a block that has not started fail),
    from EKS's scale-down 40 minutes before `capacity_block_end` (a later `pulumi up` never raises the group against
    an expired block), and while `capacity_block_active: false` holds it. A Capacity Block whose window the policy
    function keeps is sized by block_scaling instead."""
    if not g.floor_up(now):
        return 0, 0, g.nodes
    return g.nodes, g.nodes, g.nodes


# The policy function owns a Capacity Block group's desired size (policy/capacity_blocks.py): it raises the group
# at the block's start and lowers it at EKS's scale-down, between two `pulumi up`s. The path as the elastic groups
# ignore it (stacks/capacity/elastic.py); Pulumi.yaml's `options.refresh: always` keeps the state's value live.
DESIRED_SIZE_PATH = "scalingConfig.desiredSize"


def block_scaling(
    cfg: GpuLoanConfig, g: Guaranteed, now: dt.datetime | None = None
) -> tuple[tuple[int, int, int], list[str]]:
    """((min, desired, max), ignore_changes) of a floor's group. A Capacity Block the policy function keeps: min 0
    (the policy and EKS take it to 0 at the end; a min of `nodes` would refuse that), max `nodes`, and the desired
    size left to the policy (the value sent is only the one a new group starts at: the window's, as floor_up says).
    `capacity_block_active: false` takes the desired size over and sends 0 (a roll at desired 0). Any other floor:
    floor_scaling, owned by Pulumi."""
    if not policy_keeps_block(cfg, g):
        return floor_scaling(g, now), []
    if g.capacity_block_active is False:
        return (0, 0, g.nodes), []
    return (0, g.nodes if g.floor_up(now) else 0, g.nodes), [DESIRED_SIZE_PATH]


@dataclass(frozen=True)
class GuaranteedCapacityArgs:
    cfg: GpuLoanConfig
    pool: Pool  # one of cfg.pools, with a `guaranteed:` floor
    cluster: Cluster  # the Cluster component: name, version, node role, subnets, system node group

    @staticmethod
    def from_config(cfg: GpuLoanConfig, pool: Pool, cluster: Cluster) -> GuaranteedCapacityArgs:
        if pool.guaranteed is None:
            raise ValueError(f"pool {pool.name!r} has no guaranteed floor")
        return GuaranteedCapacityArgs(cfg, pool, cluster)


class GuaranteedCapacity(pulumi.ComponentResource):
    node_group: aws.eks.NodeGroup
    reservation_id: pulumi.Output[str] | None
    capacity_reservation: aws.ec2.CapacityReservation | None
    launch_template: aws.ec2.LaunchTemplate

    def __init__(self, name: str, args: GuaranteedCapacityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:capacity:GuaranteedCapacity", name, None, opts)
        cfg, pool, cluster = args.cfg, args.pool, args.cluster
        g = pool.guaranteed
        assert g is not None
        # The reservation and the floor's node group are what a team counts on: `protect` makes Pulumi refuse to
        # delete or replace them (a config change that would, fails the update instead) until
        # `protect_critical: false` says it is meant.
        critical = pulumi.ResourceOptions(parent=self, protect=cfg.protect_critical)
        capacity = "on-demand" if g.reservation == Reservation.none else "reserved"
        resource_tags = tags.pool_tags(cfg.environment, pool.name, pool.team, TIER, capacity)

        self.capacity_reservation = None
        if g.reservation == Reservation.odcr and not g.reservation_id:
            # Targeted: only launches that name this reservation use it, so no other workload eats the floor.
            # Unlimited: the reservation lives as long as the pool; removing the pool releases it.
            self.capacity_reservation = aws.ec2.CapacityReservation(
                f"{name}-odcr",
                instance_type=g.instance_type,
                instance_platform="Linux/UNIX",
                availability_zone=g.availability_zone,
                instance_count=g.nodes,
                instance_match_criteria="targeted",
                end_date_type="unlimited",
                tags=resource_tags,
                opts=critical,
            )
            self.reservation_id = self.capacity_reservation.id
        elif g.reservation_id:
            self.reservation_id = pulumi.Output.from_input(g.reservation_id)
        else:
            self.reservation_id = None

        is_block = g.reservation == Reservation.capacity_block
        self.launch_template = launch_templates.node_launch_template(
            f"{name}-lt",
            tags=instance_tags(cfg, pool, TIER, capacity, GROUP_GUARANTEED),
            root_volume_gib=launch_templates.GPU_ROOT_VOLUME_GIB,
            parent=self,
            # The type lives in the template: Capacity Block node groups require it there.
            instance_type=g.instance_type,
            reservation_id=self.reservation_id,
            capacity_block=is_block,
            description=f"gpuloan {cfg.environment}/{pool.name}: guaranteed floor",
        )

        (low, desired, high), ignore = block_scaling(cfg, g)
        depends_on = [cluster.system_node_group] if cluster.system_node_group is not None else []
        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=cluster.name,
            node_group_name_prefix=node_group_name_prefix(cfg.environment, pool.name, GROUP_GUARANTEED),
            # The control plane's version, so a version change rolls the floor too (MINIMAL, one node at a time;
            # a Capacity Block only at desired 0: offline/rollout.py stages it).
            version=cluster.kubernetes_version,
            node_role_arn=cluster.node_role_arn,
            # A reservation lives in one AZ; subnets elsewhere would launch instances outside it.
            subnet_ids=cluster.subnet_ids_in(g.availability_zone).apply(sorted),  # a set to EKS: order-free
            ami_type=gpu_ami_type([g.instance_type], cfg.instance_facts),
            capacity_type="CAPACITY_BLOCK" if is_block else "ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=low, desired_size=desired, max_size=high),
            # MINIMAL: a reservation sized to the floor has no room for surge nodes (stacks/capacity/pools.py).
            update_config=gpu_update_config(max_unavailable=1),
            launch_template=launch_templates.template_ref(self.launch_template),
            labels={tags.LABEL_POOL: pool.name, tags.LABEL_TIER: TIER, tags.LABEL_CAPACITY: capacity},
            taints=[GPU_TAINT],
            tags=resource_tags,
            # A floor on a reservation is replaced delete-first: the reservation is sized to the floor, so a new
            # group created beside the old one targets capacity the old group holds and its launches fail. The
            # floor is down until the new group is up; the cost diff says so (offline/rollout.py, docs/floor.md).
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=depends_on,
                protect=cfg.protect_critical,
                delete_before_replace=self.reservation_id is not None,
                ignore_changes=ignore,
            ),
        )
        self.register_outputs(
            {"node_group_name": self.node_group.node_group_name, "reservation_id": self.reservation_id}
        )
