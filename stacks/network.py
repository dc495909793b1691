"""The VPC of a new cluster: per AZ a private subnet (nodes) and a public subnet (NAT, load balancers).

The subnet layout is planned by a pure function first (`plan_subnets`, like awsx's getSubnetSpecs), then
declared. Nodes get no public IPs; they reach ECR, EKS and the internet through one NAT gateway per AZ, so
losing an AZ does not cut the egress of the others (a NAT gateway costs far less than one idle GPU hour a day).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from config import tags
from config.config import NewCluster

# Private subnets take 1/8 of the VPC each (up to 6 AZs); the last 1/8 is cut into 8 small public subnets.
_PRIVATE_SPLIT_BITS = 3
_PUBLIC_SPLIT_BITS = 3


@dataclass(frozen=True)
class SubnetSpec:
    availability_zone: str
    kind: str  # "private" | "public"
    cidr_block: str


MAX_AZ_SLOTS = 6  # private blocks 0-5 (the 7th is spare, the 8th holds the public subnets)


def az_slot(availability_zone: str) -> int:
    """An AZ's block: its letter (us-east-1a -> 0, ...-1f -> 5), not its position in the config list.

    A subnet's CIDR cannot change (a new subnet, and EC2 refuses to delete one with nodes in it), so the layout
    must not depend on the list's order: reordering `availability_zones` or adding an AZ anywhere leaves every
    existing subnet as it is."""
    return ord(availability_zone[-1]) - ord("a")


def plan_subnets(vpc_cidr: str, availability_zones: list[str]) -> list[SubnetSpec]:
    """Deterministic, non-overlapping subnets, each AZ's at its letter's slot (az_slot)."""
    vpc = ipaddress.ip_network(vpc_cidr)
    blocks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = list(vpc.subnets(prefixlen_diff=_PRIVATE_SPLIT_BITS))
    public_blocks = list(blocks[-1].subnets(prefixlen_diff=_PUBLIC_SPLIT_BITS))
    specs = []
    for az in availability_zones:
        slot = az_slot(az)
        if not 0 <= slot < MAX_AZ_SLOTS:
            raise ValueError(f"{az}: only AZs lettered a-f fit this layout")
        specs.append(SubnetSpec(az, "private", str(blocks[slot])))
        specs.append(SubnetSpec(az, "public", str(public_blocks[slot])))
    return specs


@dataclass(frozen=True)
class NetworkArgs:
    vpc_cidr: str
    availability_zones: tuple[str, ...]
    cluster_name: str  # names the VPC and tags the subnets for the cluster's load balancers

    @staticmethod
    def from_config(spec: NewCluster, cluster_name: str) -> NetworkArgs:
        """The network of a new cluster (`cluster:` in the config); `cluster_name` is stacks/cluster.py's."""
        return NetworkArgs(spec.vpc_cidr, tuple(spec.availability_zones), cluster_name)


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]
    private_subnet_ids_by_az: dict[str, pulumi.Output[str]]
    public_subnet_ids: pulumi.Output[list[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:network:Network", name, None, opts)
        vpc_cidr, availability_zones, cluster_name = args.vpc_cidr, list(args.availability_zones), args.cluster_name
        child = pulumi.ResourceOptions(parent=self)
        platform = {tags.TAG_TIER: "platform"}
        specs = plan_subnets(vpc_cidr, availability_zones)

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**platform, "Name": f"{cluster_name}"},
            opts=child,
        )
        # The default security group of a new VPC allows all traffic between its members; empty it so nothing
        # relies on it by accident (EKS uses its own cluster security group).
        aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, tags=platform, opts=child)
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=platform, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            tags={**platform, "Name": f"{cluster_name}-public"},
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            opts=child,
        )

        # Kubernetes discovers load-balancer subnets by these tags.
        cluster_tag = {f"kubernetes.io/cluster/{cluster_name}": "shared"}
        public_by_az: dict[str, aws.ec2.Subnet] = {}
        private_by_az: dict[str, aws.ec2.Subnet] = {}
        for spec in specs:
            is_public = spec.kind == "public"
            subnet = aws.ec2.Subnet(
                f"{name}-{spec.kind}-{spec.availability_zone}",
                vpc_id=vpc.id,
                cidr_block=spec.cidr_block,
                availability_zone=spec.availability_zone,
                map_public_ip_on_launch=False,
                tags={
                    **platform,
                    **cluster_tag,
                    "Name": f"{cluster_name}-{spec.kind}-{spec.availability_zone}",
                    ("kubernetes.io/role/elb" if is_public else "kubernetes.io/role/internal-elb"): "1",
                },
                opts=child,
            )
            (public_by_az if is_public else private_by_az)[spec.availability_zone] = subnet
            if is_public:
                aws.ec2.RouteTableAssociation(
                    f"{name}-public-{spec.availability_zone}",
                    subnet_id=subnet.id,
                    route_table_id=public_rt.id,
                    opts=child,
                )

        for az in availability_zones:
            eip = aws.ec2.Eip(
                f"{name}-nat-{az}",
                domain="vpc",
                tags={**platform, "Name": f"{cluster_name}-nat-{az}"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
            )
            nat = aws.ec2.NatGateway(
                f"{name}-nat-{az}",
                allocation_id=eip.id,
                subnet_id=public_by_az[az].id,
                tags={**platform, "Name": f"{cluster_name}-nat-{az}"},
                opts=child,
            )
            rt = aws.ec2.RouteTable(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                tags={**platform, "Name": f"{cluster_name}-private-{az}"},
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{az}", subnet_id=private_by_az[az].id, route_table_id=rt.id, opts=child
            )

        self.vpc_id = vpc.id
        self.private_subnet_ids_by_az = {az: private_by_az[az].id for az in availability_zones}
        self.private_subnet_ids = pulumi.Output.all(*[private_by_az[az].id for az in availability_zones])
        self.public_subnet_ids = pulumi.Output.all(*[public_by_az[az].id for az in availability_zones])
        self.register_outputs({"vpc_id": self.vpc_id, "private_subnet_ids": self.private_subnet_ids})
