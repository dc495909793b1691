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
