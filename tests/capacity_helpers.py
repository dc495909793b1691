"""Helpers shared by the capacity and network/cluster tests: config variants and recording queries."""

from __future__ import annotations

import inspect
from functools import cache

import pulumi_aws

from conftest import stack_config
from offline import runner as offline

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ODCR = "aws:ec2/capacityReservation:CapacityReservation"
GUARANTEED = "gpuloan:capacity:GuaranteedCapacity"
ELASTIC = "gpuloan:capacity:ElasticCapacity"
CLUSTER = "gpuloan:cluster:Cluster"
DESIRED = "scalingConfig.desiredSize"
RESERVATION_ID = "cr-0123456789abcdef0"


def dev_variant(
    *,
    guaranteed: dict | None = None,
    elastic: dict | None = None,
    cluster: dict | None = None,
    drop: tuple[str, ...] = (),
) -> dict:
    """The dev stack's config with the research pool's guaranteed/elastic blocks (or the cluster) changed."""
    config = stack_config("dev")
    pool = config["gpuloan:pools"][0]
    if guaranteed is not None:
        pool["guaranteed"].update(guaranteed)
    if elastic is not None:
        pool["elastic"].update(elastic)
    for key in drop:
        pool.pop(key)
    if cluster is not None:
        config["gpuloan:cluster"] = cluster
    return config


def descendants(rec, urn: str) -> list:
    out, frontier = [], [urn]
    while frontier:
        kids = [r for r in rec.resources if r.parent in frontier]
        out.extend(kids)
        frontier = [k.urn for k in kids]
    return out


def under(rec, component_type: str) -> list:
    return [d for c in rec.of_type(component_type) for d in descendants(rec, c.urn)]


def parent_of(rec, resource):
    return next(r for r in rec.resources if r.urn == resource.parent)


def template_of(rec, node_group):
    """The launch template a node group points at (the offline mocks derive template ids from their names)."""
    lt_id = node_group.inputs["launchTemplate"]["id"]
    id_of = offline.TYPE_OUTPUTS[LAUNCH_TEMPLATE]
    matches = [r for r in rec.of_type(LAUNCH_TEMPLATE) if id_of(r.name, {}, "")["id"] == lt_id]
    assert len(matches) == 1, f"{node_group.name}: {len(matches)} launch templates have id {lt_id}"
    return matches[0]


@cache
def is_taggable(type_token: str) -> bool:
    """Whether the pulumi_aws resource class of a type token accepts `tags`."""
    pkg, module_path, cls_name = type_token.split(":")
    if pkg != "aws":
        return False
    module = getattr(pulumi_aws, module_path.split("/")[0].replace("index", ""), pulumi_aws) or pulumi_aws
    cls = getattr(module, cls_name)
    return "tags" in inspect.signature(cls._internal_init).parameters


SUBNET = "aws:ec2/subnet:Subnet"


def subnet_id(rec, subnet) -> str:
    """The offline mocks' id of a resource: <name>-<hash(stack, type, name)>."""
    return f"{subnet.name}-{offline._short_hash(rec.stack, subnet.type, subnet.name)}"


def private_subnet_azs(rec) -> dict[str, str]:
    """subnet id -> AZ of every private (internal-elb) subnet the network declared."""
    return {
        subnet_id(rec, s): s.inputs["availabilityZone"]
        for s in rec.of_type(SUBNET)
        if "kubernetes.io/role/internal-elb" in (s.inputs.get("tags") or {})
    }
