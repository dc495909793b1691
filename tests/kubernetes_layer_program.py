"""A Pulumi program that declares only the Kubernetes layer, against a stand-in for stacks/cluster.py's Cluster.

Lets the layer's tests run on any config (time-slicing, MIG, existing mode) without depending on the network
and node groups of the capacity layer; tests/stacks/test_kubernetes_stack.py checks the same layer in the real program.
"""

import pulumi

from stacks import cluster, platform
from stacks.load import from_pulumi_config
from pricing.sources import catalog
from stacks.kubernetes import layer as kubernetes

cfg = from_pulumi_config(prices=catalog.Prices.resolve())  # a program entry reads its prices once


class StandInCluster:
    """The attributes the Kubernetes layer reads, with values shaped like an EKS cluster's outputs."""

    name = pulumi.Output.from_input(cluster.cluster_name_for(cfg))
    endpoint = pulumi.Output.from_input(f"https://0A1B2C3D.gr7.{cfg.region}.eks.amazonaws.com")
    certificate_authority_data = pulumi.Output.from_input("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==")
    kubernetes_version = cfg.cluster.kubernetes_version
    system_node_group = None


opts = pulumi.ResourceOptions(providers={"aws": platform.aws_provider(cfg)})
for key, value in kubernetes.build(cfg, StandInCluster(), opts).items():
    pulumi.export(key, value)
