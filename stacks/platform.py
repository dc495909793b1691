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
    from stacks.alerts import Alerts, AlertsArgs

    identity = pulumi.InvokeOutputOptions(provider=provider)
    alerts = Alerts(f"{cfg.environment}-alerts", AlertsArgs.from_config(
        cfg, aws.get_caller_identity_output(opts=identity).account_id,
        aws.get_partition_output(opts=identity).partition), opts=opts)
    outputs["alerts_topic_arn"] = alerts.topic_arn
    # 2. network + cluster (stacks/network.py, stacks/cluster.py) -- issue: capacity
    from stacks import capacity as pool_capacity
    from stacks.cluster import Cluster

    cluster = Cluster(f"{cfg.environment}-cluster", cfg, opts=opts)
    outputs["cluster_name"] = cluster.name
    outputs["cluster_endpoint"] = cluster.endpoint
    # 3. per pool: guaranteed + elastic node groups (stacks/guaranteed.py, stacks/elastic.py)
    capacity = {pool.name: pool_capacity.build_pool(cfg, pool, cluster, opts) for pool in cfg.pools}
    outputs["pools"] = {name: pool_capacity.pool_outputs(cfg.pool(name), *groups) for name, groups in capacity.items()}
    # 4. Kubernetes layer (stacks/kubernetes.py, gpu_operator.py, ...) -- issue: kubernetes
    from stacks import kubernetes

    outputs.update(kubernetes.build(cfg, cluster, opts))
    # 5. CUDA images (stacks/images.py)                        -- issue: images
    if cfg.images:
        from stacks.images import CudaImages

        images = CudaImages(f"{cfg.environment}-images", cfg, opts=opts)
        outputs["image_uris"] = images.image_uris
    # 6. budgets, alarms, dashboard (stacks/budgets.py, alarms.py, dashboard.py)
    from stacks import alarms, budgets, dashboard

    budgets.Budgets(f"{cfg.environment}-budgets", budgets.BudgetsArgs(
        tuple(budgets.budget_specs(cfg)), alerts.topic_arn), opts=opts)
    pool_alarms = alarms.Alarms(f"{cfg.environment}-alarms", alarms.AlarmsArgs(
        tuple(alarms.alarm_specs(cfg, cluster.name)), alerts.topic_arn), opts=opts)
    # 7. policy function (stacks/policy_function.py)          -- issue: policy engine
    if cfg.policy.enabled:
        from stacks.policy_function import PolicyFunction, PolicyFunctionArgs

        ids = pulumi.InvokeOutputOptions(provider=provider)
        policy_fn = PolicyFunction(f"{cfg.environment}-policy", PolicyFunctionArgs(
            cfg, cluster, aws.get_caller_identity_output(opts=ids).account_id,
            aws.get_partition_output(opts=ids).partition, alerts.topic_arn, alerts.kms_key_arn,
            depends_on=[c for groups in capacity.values() for c in groups if c is not None]), opts=opts)
        outputs["policy_function_name"] = policy_fn.function_name
    # the dashboard (slot 6) comes after the policy function so its alarm widget shows the function's alarms too
    dashboard_alarms = pool_alarms.alarm_arns
    if cfg.policy.enabled:
        dashboard_alarms = pulumi.Output.all(pool_alarms.alarm_arns, policy_fn.alarm_arns).apply(lambda v: v[0] + v[1])
    board = dashboard.Dashboard(f"{cfg.environment}-dashboard", dashboard.DashboardArgs(
        cfg, cluster.name, dashboard_alarms), opts=opts)
    outputs["dashboard_name"] = board.dashboard_name
    # 8. GitHub OIDC roles (stacks/github_oidc.py)             -- issue: gitops
    if cfg.github is not None:
        from stacks.github_oidc import GitHubOidc

        invoke = pulumi.InvokeOutputOptions(provider=provider)
        github = GitHubOidc(f"{cfg.environment}-github", cfg,
                            account_id=aws.get_caller_identity_output(opts=invoke).account_id,
                            partition=aws.get_partition_output(opts=invoke).partition, opts=opts)
        outputs["github_oidc_provider_arn"] = github.provider_arn
        outputs["github_preview_role_arn"] = github.preview_role_arn
        outputs["github_deploy_role_arn"] = github.deploy_role_arn
    del opts
    return outputs
