"""Every pinned version in one place (STYLE.md 10): charts, add-ons, AMI types, runtimes.

Bump here, run `make test`, read the preview diff. Each pin names where it was checked.
"""

from __future__ import annotations

# EKS managed node group AMI for NVIDIA GPUs: AL2023 with the NVIDIA driver and container toolkit preinstalled.
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
GPU_AMI_TYPE_ARM = "AL2023_ARM_64_NVIDIA"
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"

# Lambda runtime of the policy function (boto3 is part of the runtime; the zip is stdlib + our code).
POLICY_LAMBDA_RUNTIME = "python3.12"
POLICY_LAMBDA_ARCHITECTURE = "arm64"

# The Kubernetes version of new clusters: in EKS standard support until 2027-03-27 (EKS_VERSION_CALENDAR). 1.33 and
# 1.34 left standard support on 2026-07-29 and 2026-12-02: a cluster on them is billed the extended-support
# surcharge and force-upgraded when extended support ends. EKS upgrades one minor at a time, so 1.33 and 1.34 keep
# their pins for stacks that step through them.
DEFAULT_KUBERNETES_VERSION = "1.35"

# EKS managed add-ons of a new cluster, per Kubernetes minor (coredns and kube-proxy follow the control plane;
# vpc-cni and the Pod Identity agent do not). A cluster version without an entry here is rejected by config
# validation rather than silently getting "latest". Check availability before a bump:
# `aws eks describe-addon-versions --kubernetes-version 1.35 --addon-name <name>`.
# 1.34 / 1.35 kube-proxy and coredns: the EKS user guide's "Manage kube-proxy" and "Manage CoreDNS" version tables
# (docs.amazonaws.cn/zh_cn/eks/latest/userguide/managing-kube-proxy.md, managing-coredns.md: 1.35 -> kube-proxy
# v1.35.3-eksbuild.2, coredns v1.13.2-eksbuild.4; 1.34 -> v1.34.6-eksbuild.2, v1.13.2-eksbuild.4).
# 1.34 / 1.35 vpc-cni and eks-pod-identity-agent: no EKS user guide snapshot lists 1.35 for them (the "Amazon VPC
# CNI" table stops at 1.33; the Pod Identity agent page has no version table and AWS points to
# DescribeAddonVersions, aws/containers-roadmap#2410). The pins are the version maps of awslabs/cdk-eks-blueprints
# (lib/addons/vpc-cni/index.ts, lib/addons/eks-pod-identity-agent/index.ts at 05d3dbd, 2026-07; 1.35 added by PR
# 1246, "checked against aws eks describe-addon-versions ... the current AWS recommended default versions", merged
# by its AWS maintainer 2026-04-24): 1.35 -> v1.21.1-eksbuild.1, v1.3.10-eksbuild.2; 1.34 -> v1.20.4-eksbuild.2,
# v1.3.10-eksbuild.2. Along the one-minor-at-a-time path no pin goes back and the CNI moves one minor per step
# (AWS: "update one minor version at a time"); tests/stacks/test_kubernetes_upgrade.py checks both.
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {
        "vpc-cni": "v1.20.2-eksbuild.1",
        "kube-proxy": "v1.33.3-eksbuild.6",
        "coredns": "v1.12.4-eksbuild.1",
        "eks-pod-identity-agent": "v1.3.8-eksbuild.2",
    },
    "1.34": {
        "vpc-cni": "v1.20.4-eksbuild.2",
        "kube-proxy": "v1.34.6-eksbuild.2",
        "coredns": "v1.13.2-eksbuild.4",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.2",
    },
    "1.35": {
        "vpc-cni": "v1.21.1-eksbuild.1",
        "kube-proxy": "v1.35.3-eksbuild.2",
        "coredns": "v1.13.2-eksbuild.4",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.2",
    },
}

# EKS release calendar, UTC: minor -> (end of standard support, end of extended support). Extended support is
# billed from the start of the day standard support ends. The offline preview prices the control plane from this
# table and says so; `gpuloan prices refresh` reads the live status (EKS DescribeClusterVersions) and reports a
# disagreement. Sources: Amazon EKS User Guide, "Understand the Kubernetes version lifecycle on EKS" (release
# calendar; 1.33: July 29, 2026 / July 29, 2027); endoflife.date/amazon-eks and aws-samples sample-apex-skills
# "Cluster Lifecycle & Upgrades" calendar (1.34: 2026-12-02 / 2027-12-02; 1.35: 2027-03-27 / 2028-03-27).
EKS_VERSION_CALENDAR_AS_OF = "2026-12-04"
EKS_VERSION_CALENDAR: dict[str, tuple[str, str]] = {
    "1.33": ("2026-07-29", "2027-07-29"),
    "1.34": ("2026-12-02", "2027-12-02"),
    "1.35": ("2027-03-27", "2028-03-27"),
}

# NVIDIA GPU Operator Helm chart (repo https://helm.ngc.nvidia.com/nvidia, calendar versions). v25.10.1 is listed
# in NVIDIA/gpu-operator ("Add helm chart for GPU Operator 25.10.1"); a stack may override it with
# gpuloan:gpu_operator.chart_version.
GPU_OPERATOR_CHART = "gpu-operator"
GPU_OPERATOR_CHART_REPO = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_CHART_VERSION = "v25.10.1"

# amazon-cloudwatch-observability EKS add-on: enhanced Container Insights (classic CloudWatch metrics, which the
# policy reads with GetMetricData) incl. its own DCGM exporter for GPU metrics. v4.10.3-eksbuild.1 is the version
# aws-observability/application-signals-demo pins (2026-04; v5.3.0 dropped a ClusterRole rule the agent's EKS
# resource detector uses). Check availability: aws eks describe-addon-versions --addon-name amazon-cloudwatch-observability
CLOUDWATCH_OBSERVABILITY_ADDON_VERSION = "v4.10.3-eksbuild.1"

# --- CUDA images (stacks/images.py, images/, checked by config/compat.py) -------------------------------------
# NVIDIA driver on GPU nodes: the EKS-optimized AL2023 NVIDIA AMI (GPU_AMI_TYPE) ships the R580 branch; the GPU
# Operator runs with driver.enabled=false, so this is the driver every image meets. Sources: awslabs/amazon-eks-ami
# issue #2470 (AL2023 NVIDIA AMIs moved to the 580 branch, 2025-10/11) and aws-samples/sample-eks-enterprise-quickstart
# docs/AMI_VERSIONS.md (release v20260512: driver 580.159.03). A managed node group takes the latest AMI release of
# its Kubernetes version when it is created or its version changes, and keeps it until then (EKS refreshes no AMI by
# itself; docs/capacity.md, "Kubernetes upgrades", node AMIs), so bump this when the AMI's driver branch changes.
EKS_AL2023_NVIDIA_DRIVER_VERSION = "580.159.03"
EKS_AL2023_NVIDIA_DRIVER_SOURCE_NAME = "EKS AL2023 NVIDIA AMI, R580 branch"
# nvidia/cuda runtime image tag per CUDA major.minor: the last patch release and its Ubuntu (Docker Hub nvidia/cuda).
CUDA_IMAGE_PATCH: dict[tuple[int, ...], str] = {
    (11, 8): "11.8.0",
    (12, 1): "12.1.1",
    (12, 2): "12.2.2",
    (12, 4): "12.4.1",
    (12, 6): "12.6.3",
    (12, 8): "12.8.1",
    (12, 9): "12.9.1",
    (13, 0): "13.0.1",
}
CUDA_IMAGE_UBUNTU = {11: "22.04", 12: "22.04", 13: "24.04"}
# CPython (python-build-standalone, installed with uv) per minor version the config may ask for.
IMAGE_PYTHON_PATCH = {
    "3.10": "3.10.16",
    "3.11": "3.11.11",
    "3.12": "3.12.9",
    "3.13": "3.13.2",
}
IMAGE_UV_VERSION = "0.6.14"
IMAGE_PIP_VERSION = "25.0.1"

# Kueue (kubernetes-sigs/kueue), the batch admission controller behind scheduling.kueue (stacks/kubernetes/kueue.py). The chart
# is published as an OCI artifact; its templates carry the CRDs, so the release installs them. 0.19.2 serves the
# v1beta2 APIs gpuloan generates (CRDs of tag v0.19.2, commit 8eab687, checked in tests against
# ../shared/data/kueue-crds-v0.19.2). Overridable with gpuloan:scheduling.kueue.chart_version.
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_CHART_VERSION = "0.19.2"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
