"""Elastic capacity of one pool: GPUs borrowed only while needed, sized by the policy function.

A SPOT managed node group over the pool's diversified instance types (more spot pools, fewer interruptions),
and for `spot_then_on_demand` a second ON_DEMAND group the policy scales only when spot cannot be had. Both
start at 0 nodes. Spot nodes carry an extra taint so only interruption-tolerant workloads land there.

A pool whose types come in several sizes (GPUs per node) gets that pair of groups per size (config/node_sizes.py: a
managed node group holds one instance shape); the pool's plain size keeps the one-size names (config/node_sizes.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws

from config import tags
from stacks.capacity import launch_templates
from config.names import GROUP_ON_DEMAND, GROUP_SPOT, node_group_name_prefix
from stacks.capacity.node_groups import GPU_TAINT, SPOT_TAINT, gpu_update_config, instance_tags, instance_types_for
from config.config import ElasticCapacity as CapacityMode
from config.config import GpuLoanConfig, Pool
from config.node_sizes import NodeSizeTypes, kind_key, pool_sizes, size_suffix
from stacks.capacity.guaranteed import gpu_ami_type

if TYPE_CHECKING:  # annotations only: stacks/cluster.py builds the system nodes from this package
    from stacks.cluster import Cluster

TIER = "elastic"
# The policy function owns the desired size (EKS UpdateNodegroupConfig). Without this, every `pulumi up`
# would reset live elastic capacity to 0 and kill running jobs. min and max stay Pulumi's. An update of the scaling
# config still sends the desired size held in state, so Pulumi.yaml sets `options.refresh: always` to keep it live.
DESIRED_SIZE_PATH = "scalingConfig.desiredSize"


def scaling(max_nodes: int, live_desired: int | None) -> tuple[int, list[str]]:
    """(desired_size, ignore_changes) of an elastic group.

    EKS refuses a scaling config whose desired size is above its max (InvalidParameterException), and an update
    under `ignore_changes` sends the live desired size: lowering `max_nodes` below the live size would fail the
    update. So when the live size (stacks/capacity/live_sizes.py) is known to exceed the new max, this one update takes the
    desired size over and sends the max (the group shrinks to it, as it must); otherwise the policy function keeps
    owning it. An unknown live size (first deploy, group unreadable) keeps ownership with the policy."""
    if live_desired is not None and live_desired > max_nodes:
        return max_nodes, []
    return 0, [DESIRED_SIZE_PATH]


@dataclass(frozen=True)
class ElasticCapacityArgs:
    cfg: GpuLoanConfig
    pool: Pool  # one of cfg.pools, with `elastic:` capacity
    cluster: Cluster  # the Cluster component: name, version, node role, subnets, system node group
    # The live desired size per group kind ("spot", "on_demand", per size) where it could be read
    # (stacks/capacity/live_sizes.py): lowering max_nodes below it must not fail.
    live_desired: Mapping[str, int] | None = None

    @staticmethod
    def from_config(
        cfg: GpuLoanConfig, pool: Pool, cluster: Cluster, live_desired: Mapping[str, int] | None = None
    ) -> ElasticCapacityArgs:
        if pool.elastic is None:
            raise ValueError(f"pool {pool.name!r} has no elastic capacity")
        return ElasticCapacityArgs(cfg, pool, cluster, live_desired)


class ElasticCapacity(pulumi.ComponentResource):
    spot_group: aws.eks.NodeGroup | None
    on_demand_group: aws.eks.NodeGroup | None
    group_names: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: ElasticCapacityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:capacity:ElasticCapacity", name, None, opts)
        cfg, pool, cluster = args.cfg, args.pool, args.cluster
        self._live = args.live_desired or {}
        e = pool.elastic
        assert e is not None
        self._cfg, self._pool, self._cluster = cfg, pool, cluster
        self.spot_group = None
        self.on_demand_group = None
        self.group_names = {}
        self.size_groups: dict[str, aws.eks.NodeGroup] = {}  # every size's groups by kind key (node_sizes.py)
        for size in pool_sizes(e, self._cfg.instance_facts):
            sfx = size_suffix(size)
            if e.capacity in (CapacityMode.spot, CapacityMode.spot_then_on_demand):
                key = kind_key("spot", size)
                group = self._group(
                    f"{name}-spot{sfx}",
                    GROUP_SPOT + sfx,
                    "SPOT",
                    "spot",
                    e.max_nodes,
                    [GPU_TAINT, SPOT_TAINT],
                    self._live.get(key),
                    size,
                )
                self.size_groups[key] = group
                self.group_names[key] = group.node_group_name
                if size.first:
                    self.spot_group = group
            if e.capacity in (CapacityMode.on_demand, CapacityMode.spot_then_on_demand):
                key = kind_key("on_demand", size)
                group = self._group(
                    f"{name}-on-demand{sfx}",
                    GROUP_ON_DEMAND + sfx,
                    "ON_DEMAND",
                    "on-demand",
                    e.on_demand_group_max_nodes,
                    [GPU_TAINT],
                    self._live.get(key),
                    size,
                )
                self.size_groups[key] = group
                self.group_names[key] = group.node_group_name
                if size.first:
                    self.on_demand_group = group
        self.register_outputs({"group_names": self.group_names})

    def _group(
        self,
        name: str,
        group: str,
        capacity_type: str,
        capacity: str,
        max_nodes: int,
        taints: list[aws.eks.NodeGroupTaintArgs],
        live_desired: int | None,
        size: NodeSizeTypes,
    ) -> aws.eks.NodeGroup:
        cfg, pool, cluster = self._cfg, self._pool, self._cluster
        types = list(size.instance_types)  # one shape per group: this size's types only
        template = launch_templates.node_launch_template(
            f"{name}-lt",
            tags=instance_tags(cfg, pool, TIER, capacity, group),
            root_volume_gib=launch_templates.GPU_ROOT_VOLUME_GIB,
            parent=self,
            description=f"gpuloan {cfg.environment}/{pool.name}: elastic {capacity}",
        )
        depends_on = [cluster.system_node_group] if cluster.system_node_group is not None else []
        desired, ignore = scaling(max_nodes, live_desired)
        return aws.eks.NodeGroup(
            name,
            cluster_name=cluster.name,
            node_group_name_prefix=node_group_name_prefix(cfg.environment, pool.name, group),
            version=cluster.kubernetes_version,  # the control plane's: a version change rolls the group
            node_role_arn=cluster.node_role_arn,
            subnet_ids=cluster.subnet_ids_in(None).apply(sorted),  # a set to EKS: order-free
            ami_type=gpu_ami_type(types, self._cfg.instance_facts),
            capacity_type=capacity_type,
            # Sorted for SPOT (order-free), config order for ON_DEMAND (its preference): stacks/capacity/node_groups.py.
            instance_types=instance_types_for(capacity_type, types),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=0, desired_size=desired, max_size=max_nodes),
            # MINIMAL: no surge of scarce GPU capacity during a roll (stacks/capacity/node_groups.py); elastic work tolerates
            # losing half the group at once.
            update_config=gpu_update_config(max_unavailable_percentage=50),
            launch_template=launch_templates.template_ref(template),
            labels={tags.LABEL_POOL: pool.name, tags.LABEL_TIER: TIER, tags.LABEL_CAPACITY: capacity},
            taints=taints,
            tags=tags.pool_tags(cfg.environment, pool.name, pool.team, TIER, capacity),
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on, ignore_changes=ignore),
        )
