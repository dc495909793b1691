"""The Kubernetes provider every in-cluster object of the environment is declared through.

Built from the cluster's outputs (new cluster) or from the looked-up cluster (existing mode): the Cluster
component exposes the same `name`, `endpoint` and `certificate_authority_data` either way. Authentication is
`aws eks get-token` at run time, so the kubeconfig holds no credential (it is safe in state and in previews) and
whoever runs `pulumi up` uses their own AWS identity, which needs an EKS access entry on the cluster.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as k8s

# The exec credential API version aws-cli v2 (and v1 >= 1.24) emits for `aws eks get-token`.
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"


class ClusterLike(Protocol):
    """What the Kubernetes layer needs from stacks/cluster.py's Cluster (new or existing mode)."""

    name: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificate_authority_data: pulumi.Output[str]
    kubernetes_version: str


def kubeconfig(cluster_name: str, endpoint: str, certificate_authority_data: str, region: str) -> dict[str, Any]:
    """A one-cluster kubeconfig whose user runs `aws eks get-token` (pure, so tests read it as data)."""
    context = f"gpuloan-{cluster_name}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": endpoint, "certificate-authority-data": certificate_authority_data},
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": context}}],
        "current-context": context,
        "users": [
            {
                "name": context,
                "user": {
                    "exec": {
                        "apiVersion": EXEC_API_VERSION,
                        "command": "aws",
                        # --region pins the token to the stack's region even when the operator's shell defaults elsewhere.
                        "args": [
                            "eks",
                            "get-token",
                            "--cluster-name",
                            cluster_name,
                            "--region",
                            region,
                            "--output",
                            "json",
                        ],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
    }


def make_provider(
    name: str, cluster: ClusterLike, region: str, opts: pulumi.ResourceOptions | None = None
) -> k8s.Provider:
    config = pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority_data).apply(
        lambda parts: json.dumps(kubeconfig(parts[0], parts[1], parts[2], region))
    )
    return k8s.Provider(
        name,
        kubeconfig=config,
        # Server-side apply lets the add-on and the GPU Operator own the fields they manage on shared objects.
        enable_server_side_apply=True,
        opts=opts,
    )
