"""Wires the components of one environment together, in dependency order.

__main__.py stays thin: it validates the config and calls `build`. Each component lives in its own module
under stacks/ and takes what it needs explicitly (region, cluster, topic ARN), never through invokes hidden
in constructors (STYLE.md 6).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from stacks import tags
from stacks.config import GpuLoanConfig


def aws_provider(cfg: GpuLoanConfig) -> aws.Provider:
    # Default tags reach every taggable AWS resource (except ASG-launched instances: node groups propagate
    # tags through their launch templates). User tags first, so gpuloan:* keys cannot be overridden.
    default_tags = {**cfg.default_tags, **tags.environment_tags(cfg.environment)}
    return aws.Provider("aws", region=cfg.region, default_tags=aws.ProviderDefaultTagsArgs(tags=default_tags))


def build(cfg: GpuLoanConfig) -> dict[str, object]:
    """Declare every resource of the environment; return the stack outputs."""
    provider = aws_provider(cfg)
    opts = pulumi.ResourceOptions(providers={"aws": provider})
    outputs: dict[str, object] = {"environment": cfg.environment, "region": cfg.region}

    # 1. alerts topic (stacks/alerts.py)                      -- issue: budgets & alarms
    # 2. network + cluster (stacks/network.py, stacks/cluster.py) -- issue: capacity
    # 3. per pool: guaranteed + elastic node groups (stacks/guaranteed.py, stacks/elastic.py)
    # 4. Kubernetes layer (stacks/kubernetes.py, gpu_operator.py, ...) -- issue: kubernetes
    # 5. CUDA images (stacks/images.py)                        -- issue: images
    # 6. budgets, alarms, dashboard (stacks/budgets.py, alarms.py, dashboard.py)
    # 7. policy function (stacks/policy_function.py)          -- issue: policy engine
    # 8. GitHub OIDC roles (stacks/github_oidc.py)             -- issue: gitops
    del opts
    return outputs
