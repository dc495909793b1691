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

# EKS managed add-ons of a new cluster, per Kubernetes minor (coredns and kube-proxy follow the control plane;
# vpc-cni and the Pod Identity agent do not). Checked against published EKS add-on versions for 1.33
# (`aws eks describe-addon-versions --kubernetes-version 1.33 --addon-name <name>`). A cluster version
# without an entry here is rejected by config validation rather than silently getting "latest".
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {
        "vpc-cni": "v1.20.2-eksbuild.1",
        "kube-proxy": "v1.33.3-eksbuild.6",
        "coredns": "v1.12.4-eksbuild.1",
        "eks-pod-identity-agent": "v1.3.8-eksbuild.2",
    },
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
