"""NVIDIA GPU Operator as a Helm release, configured for the EKS AL2023 NVIDIA AMI.

The AMI ships the driver and the container toolkit, so the operator installs neither (a second driver would
fight the preinstalled one at boot). What the operator adds: the device plugin (`nvidia.com/gpu` resources),
GPU feature discovery + NFD (node labels such as `nvidia.com/gpu.product`), the MIG strategy, and optional
time-slicing. Its DCGM exporter stays off: the CloudWatch Observability add-on runs the one DCGM exporter per
node (DESIGN.md decision 8, docs/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from policy.pods import BACK_TO_SPOT_TAINT_KEY, REBALANCE_TAINT_KEY
from config import tags, versions
from config.config import GpuLoanConfig, MigStrategy
from config.names import GPU_OPERATOR_NAMESPACE

NAMESPACE = GPU_OPERATOR_NAMESPACE
RELEASE_NAME = "gpu-operator"
TIME_SLICING_CONFIGMAP = "gpuloan-time-slicing"
# The device plugin reads this key of the ConfigMap on every node (no per-node config label needed).
TIME_SLICING_PROFILE = "any"

# Every GPU node carries the GPU taint; spot nodes also carry the spot taint. The operator's per-node daemonsets
# (device plugin, GFD, validator, MIG manager) and NFD's worker must run on all of them, or a spot node never
# advertises `nvidia.com/gpu` and its pods stay pending while the policy keeps paying for the node.
# The policy's own NoSchedule taints too (issue 35 item 7): a fallback node closing for back-to-spot and a spot
# node with a rebalance recommendation keep running pods, and a device-plugin pod recreated there (an operator
# upgrade, an eviction) must land, or the node's GPUs vanish from `nvidia.com/gpu` under the jobs still on it.
GPU_NODE_TOLERATIONS: list[dict[str, str]] = [
    {"key": key, "operator": "Exists", "effect": "NoSchedule"}
    for key in (tags.GPU_TAINT_KEY, tags.SPOT_TAINT_KEY, BACK_TO_SPOT_TAINT_KEY, REBALANCE_TAINT_KEY)
]


def chart_version(cfg: GpuLoanConfig) -> str:
    return cfg.gpu_operator.chart_version or versions.GPU_OPERATOR_CHART_VERSION


def time_slicing_config(replicas: int) -> dict[str, Any]:
    """The device plugin's sharing config: each physical GPU is advertised as `replicas` nvidia.com/gpu."""
    return {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                # Keep the resource name nvidia.com/gpu so quotas and workloads need no second resource name.
                "renameByDefault": False,
                # A pod asking for 2 slices would get 2 slices of possibly the same GPU, not 2 GPUs: refuse it.
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
            }
        },
    }


def helm_values(cfg: GpuLoanConfig) -> dict[str, Any]:
    """Chart values (pure: tests read them as data, the release gets exactly this)."""
    op = cfg.gpu_operator
    device_plugin: dict[str, Any] = {"enabled": True}
    if op.time_slicing_replicas:
        device_plugin["config"] = {"create": False, "name": TIME_SLICING_CONFIGMAP, "default": TIME_SLICING_PROFILE}
    return {
        "operator": {"defaultRuntime": "containerd"},  # AL2023 nodes run containerd
        "driver": {"enabled": False},  # preinstalled on the AL2023 NVIDIA AMI
        "toolkit": {"enabled": False},  # preinstalled on the AL2023 NVIDIA AMI
        "devicePlugin": device_plugin,
        "gfd": {"enabled": True},
        "nfd": {"enabled": True},
        "node-feature-discovery": {"worker": {"tolerations": GPU_NODE_TOLERATIONS}},
        "daemonsets": {"tolerations": GPU_NODE_TOLERATIONS},
        "mig": {"strategy": op.mig_strategy.value},
        "migManager": {"enabled": op.mig_strategy != MigStrategy.none},
        # One exporter per node: Container Insights' DCGM exporter publishes the metrics the policy reads.
        "dcgmExporter": {"enabled": False},
        "dcgm": {"enabled": False},  # the standalone host engine only serves the operator's exporter
    }


@dataclass(frozen=True)
class GpuOperatorArgs:
    # The chart's values come from `gpu_operator:` and the pools' instance types (helm_values).
    cfg: GpuLoanConfig

    @staticmethod
    def from_config(cfg: GpuLoanConfig) -> GpuOperatorArgs:
        return GpuOperatorArgs(cfg)


class GpuOperator(pulumi.ComponentResource):
    """Namespace, optional time-slicing ConfigMap, and the gpu-operator Helm release."""

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:gpu_operator:GpuOperator", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)
        self.chart_version = chart_version(cfg)
        self.values = helm_values(cfg)

        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata={
                "name": NAMESPACE,
                "labels": {
                    # Device plugin and validator pods need host access; only this namespace allows it.
                    "pod-security.kubernetes.io/enforce": "privileged",
                },
            },
            opts=child,
        )
        depends: list[pulumi.Resource] = [namespace]
        if cfg.gpu_operator.time_slicing_replicas:
            depends.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-time-slicing",
                    metadata={"name": TIME_SLICING_CONFIGMAP, "namespace": NAMESPACE},
                    data={
                        TIME_SLICING_PROFILE: yaml.safe_dump(
                            time_slicing_config(cfg.gpu_operator.time_slicing_replicas), sort_keys=False
                        )
                    },
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
                )
            )

        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE_NAME,
            chart=versions.GPU_OPERATOR_CHART,
            version=self.chart_version,
            repository_opts={"repo": versions.GPU_OPERATOR_CHART_REPO},
            namespace=NAMESPACE,
            create_namespace=False,
            values=self.values,
            # A half-installed operator (CRDs without the controller) is worse than none: roll back on failure.
            atomic=True,
            cleanup_on_fail=True,
            timeout=900,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
        )
        self.register_outputs({"chart_version": self.chart_version, "namespace": NAMESPACE})
