"""Wires the components of one environment together, in dependency order.

__main__.py stays thin: it validates the config and calls `build`. Each component lives in its own module
under stacks/ and takes what it needs explicitly (region, account, cluster, topic ARN), never through invokes
hidden in constructors (STYLE.md 6): the account and partition are looked up once, here, with this stack's
provider.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from config import tags
from stacks.spend import alarms, budgets, dashboard
from stacks.kubernetes import layer as kubernetes
from stacks.capacity import live_sizes
from stacks.capacity import pools as pool_capacity
from stacks.spend.alerts import Alerts, AlertsArgs
from stacks.cluster import Cluster, ClusterArgs, cluster_name_for
from config.config import GpuLoanConfig
from pricing.sources.catalog import Prices
from stacks.gitops.role_guard import RoleGuard


def aws_provider(cfg: GpuLoanConfig) -> aws.Provider:
    # Default tags reach every taggable AWS resource (except ASG-launched instances: node groups propagate
    # tags through their launch templates). User tags first, so gpuloan:* keys cannot be overridden.
    default_tags = {**cfg.default_tags, **tags.environment_tags(cfg.environment)}
    return aws.Provider("aws", region=cfg.region, default_tags=aws.ProviderDefaultTagsArgs(tags=default_tags))


def build(cfg: GpuLoanConfig, prices: Prices) -> dict[str, object]:
    """Declare every resource of the environment; return the stack outputs."""
    env = cfg.environment
    provider = aws_provider(cfg)
    opts = pulumi.ResourceOptions(providers={"aws": provider})
    invoke = pulumi.InvokeOutputOptions(provider=provider)
    account_id = aws.get_caller_identity_output(opts=invoke).account_id
    partition = aws.get_partition_output(opts=invoke).partition
    outputs: dict[str, object] = {"environment": env, "region": cfg.region}
    # Every role below gets the environment's IAM path (and, with CI roles, its permissions boundary); the types
    # declared are recorded for the CI roles' policies (stacks/gitops/role_guard.py).
    guard = RoleGuard(cfg, opts, account_id, partition, cluster_name_for(cfg))

    # 1. Alerts topic first: budgets, alarms and the policy function all publish to it.
    alerts = Alerts(f"{env}-alerts", AlertsArgs.from_config(cfg, account_id, partition), opts=opts)
    outputs["alerts_topic_arn"] = alerts.topic_arn

    # 2. Network and cluster (or the existing cluster, looked up by name).
    cluster = Cluster(f"{env}-cluster", ClusterArgs.from_config(cfg), opts=opts)
    outputs["cluster_name"] = cluster.name
    outputs["cluster_endpoint"] = cluster.endpoint

    # 3. Per pool: the guaranteed floor and the elastic spot / on-demand groups.
    #    The elastic groups' live sizes are read first: lowering max_nodes below one must not fail (live_sizes.py).
    live = live_sizes.read_live_desired(cfg, cluster_name_for(cfg), provider)
    capacity = {
        pool.name: pool_capacity.build_pool(cfg, pool, cluster, opts, live.get(pool.name)) for pool in cfg.pools
    }
    outputs["pools"] = {name: pool_capacity.pool_outputs(cfg.pool(name), *groups) for name, groups in capacity.items()}

    # 4. Kubernetes layer: GPU Operator, GPU metrics add-on, tiers, team namespaces and quotas.
    outputs.update(kubernetes.build(cfg, cluster, opts))

    # 5. CUDA images (compatibility was checked at config validation).
    if cfg.images:
        from stacks.images import CudaImages, CudaImagesArgs

        outputs["image_uris"] = CudaImages(f"{env}-images", CudaImagesArgs.from_config(cfg), opts=opts).image_uris

    # 6. Budgets and pool alarms.
    budgets.Budgets(f"{env}-budgets", budgets.BudgetsArgs.from_config(cfg, alerts.topic_arn), opts=opts)
    pool_alarms = alarms.Alarms(
        f"{env}-alarms", alarms.AlarmsArgs.from_config(cfg, cluster.name, alerts.topic_arn), opts=opts
    )
    dashboard_alarms = pool_alarms.alarm_arns

    # 7. The policy function that resizes the elastic groups.
    if cfg.policy.enabled:
        from stacks.policy_function.function import PolicyFunction, PolicyFunctionArgs

        policy_fn = PolicyFunction(
            f"{env}-policy",
            PolicyFunctionArgs.from_config(
                cfg,
                prices,
                cluster,
                account_id,
                partition,
                alerts.topic_arn,
                alerts.kms_key_arn,
                node_groups=[c for groups in capacity.values() for c in groups if c is not None],
                group_names={name: pool_capacity.group_names(*groups) for name, groups in capacity.items()},
            ),
            opts=opts,
        )
        outputs["policy_function_name"] = policy_fn.function_name
        dashboard_alarms = pulumi.Output.all(pool_alarms.alarm_arns, policy_fn.alarm_arns).apply(lambda v: v[0] + v[1])

    # The dashboard comes last so its alarm widget lists the policy function's alarms too.
    board = dashboard.Dashboard(
        f"{env}-dashboard", dashboard.DashboardArgs.from_config(cfg, cluster.name, dashboard_alarms), opts=opts
    )
    outputs["dashboard_name"] = board.dashboard_name

    # 8. GitHub OIDC roles for pull-request previews and deploys (optional).
    if cfg.github is not None:
        from stacks.gitops.github_oidc import GitHubOidc, GitHubOidcArgs

        github = GitHubOidc(
            f"{env}-github",
            GitHubOidcArgs.from_config(cfg, account_id, partition, guard.declared_types, cluster.name),
            opts=opts,
        )
        outputs["github_oidc_provider_arn"] = github.provider_arn
        outputs["github_preview_role_arn"] = github.preview_role_arn
        outputs["github_deploy_role_arn"] = github.deploy_role_arn
    return outputs
