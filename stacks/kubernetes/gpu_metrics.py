"""GPU metrics into CloudWatch: the `amazon-cloudwatch-observability` EKS add-on, IAM through EKS Pod Identity.

Enhanced Container Insights with accelerated-compute metrics publishes `ContainerInsights/node_gpu_utilization`
(dimensions ClusterName and ClusterName+InstanceId+NodeName) from the add-on's own DCGM exporter, the one GPU
exporter of the environment (docs/metrics.md). The policy function reads exactly these classic metrics with
GetMetricData, so `GPU_METRIC_NAMESPACE`/`GPU_UTILIZATION_METRIC` are the defaults of cfg.policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from config import versions
from config.config import GpuLoanConfig
from stacks.cluster import managed_policy_arn
from config.names import GPU_METRICS_AGENT_NAMESPACE

ADDON_NAME = "amazon-cloudwatch-observability"
# Where the add-on runs the CloudWatch agent; the Pod Identity association must name this exact pair.
AGENT_NAMESPACE = GPU_METRICS_AGENT_NAMESPACE
AGENT_SERVICE_ACCOUNT = "cloudwatch-agent"
CLOUDWATCH_AGENT_POLICY = "CloudWatchAgentServerPolicy"

# What the add-on publishes and the policy reads (config/config.py Policy defaults must equal these).
GPU_METRIC_NAMESPACE = "ContainerInsights"
GPU_UTILIZATION_METRIC = "node_gpu_utilization"
GPU_RESERVED_METRIC = "node_gpu_reserved_capacity"  # % of the node's GPUs requested by pods: the "empty node" signal
GPU_NODE_METRICS = (
    "node_gpu_utilization",
    "node_gpu_memory_utilization",
    "node_gpu_limit",
    "node_gpu_usage_total",
    "node_gpu_reserved_capacity",
)
GPU_NODE_DIMENSIONS = (("ClusterName",), ("ClusterName", "InstanceId", "NodeName"))


def addon_configuration() -> dict[str, Any]:
    """The add-on's configuration_values (checked against the add-on schema: agent.config.logs...)."""
    return {
        "agent": {
            "config": {
                "logs": {
                    "metrics_collected": {
                        "kubernetes": {
                            "enhanced_container_insights": True,
                            "accelerated_compute_metrics": True,
                        }
                    }
                }
            }
        }
    }


def trust_policy(cluster_name: str) -> dict[str, Any]:
    """Only the agent's service account, in its namespace, on this cluster, may assume the role."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "CloudWatchAgentPodIdentity",
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                # Pod Identity sets these session tags; without the condition any association in the account could
                # hand this role to any pod.
                "Condition": {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-name": cluster_name,
                        "aws:RequestTag/kubernetes-namespace": AGENT_NAMESPACE,
                        "aws:RequestTag/kubernetes-service-account": AGENT_SERVICE_ACCOUNT,
                    }
                },
            }
        ],
    }


@dataclass(frozen=True)
class GpuMetricsArgs:
    cluster_name: pulumi.Input[str]
    region: str

    @staticmethod
    def from_config(cfg: GpuLoanConfig, cluster_name: pulumi.Input[str]) -> GpuMetricsArgs:
        """The add-on on the cluster `cluster_name` (the Cluster component's name output)."""
        return GpuMetricsArgs(cluster_name, cfg.region)


class GpuMetrics(pulumi.ComponentResource):
    """IAM role + Pod Identity association, then the add-on (so the agent starts with credentials)."""

    def __init__(self, name: str, args: GpuMetricsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:gpu_metrics:GpuMetrics", name, None, opts)
        cluster_name, region = args.cluster_name, args.region
        child = pulumi.ResourceOptions(parent=self)

        self.role = aws.iam.Role(
            f"{name}-agent",
            assume_role_policy=pulumi.Output.from_input(cluster_name).apply(lambda n: json.dumps(trust_policy(n))),
            description="CloudWatch agent of the amazon-cloudwatch-observability add-on (EKS Pod Identity)",
            opts=child,
        )
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-agent-policy",
            role=self.role.name,
            # The partition from the region name, not an invoke (STYLE.md 6): the ARN differs per partition.
            policy_arn=managed_policy_arn(region, CLOUDWATCH_AGENT_POLICY),
            opts=child,
        )
        association = aws.eks.PodIdentityAssociation(
            f"{name}-agent",
            cluster_name=cluster_name,
            namespace=AGENT_NAMESPACE,
            service_account=AGENT_SERVICE_ACCOUNT,
            role_arn=self.role.arn,
            opts=child,
        )
        self.addon = aws.eks.Addon(
            f"{name}-addon",
            cluster_name=cluster_name,
            addon_name=ADDON_NAME,
            addon_version=versions.CLOUDWATCH_OBSERVABILITY_ADDON_VERSION,
            configuration_values=json.dumps(addon_configuration(), sort_keys=True),
            # The stack is the source of truth for the add-on's settings, also over a hand-installed copy.
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[association, attachment]),
        )
        self.metric_namespace = GPU_METRIC_NAMESPACE
        self.utilization_metric = GPU_UTILIZATION_METRIC
        self.register_outputs({"addon": self.addon.addon_name, "role_arn": self.role.arn})
