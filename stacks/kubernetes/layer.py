"""The Kubernetes layer (platform slot 4): provider, GPU Operator, GPU metrics add-on, tiers and team quotas,
Kueue queues (docs/scheduling.md).

Everything in the cluster waits for the system node group (operators need somewhere to run); in existing-cluster
mode there is none to wait for and the cluster's own nodes are used.
"""

from __future__ import annotations

from typing import Any

import pulumi

from stacks.kubernetes import gpu_metrics, gpu_operator, k8s_provider, kueue, tenancy
from config.config import GpuLoanConfig
from config.tenancy import priority_class_name


def build(cfg: GpuLoanConfig, cluster: k8s_provider.ClusterLike, opts: pulumi.ResourceOptions) -> dict[str, Any]:
    """Declare the layer; `opts` carries the explicit aws provider. Returns stack outputs."""
    aws_providers = dict(opts.providers) if isinstance(opts.providers, dict) else {}
    waits = [r for r in [getattr(cluster, "system_node_group", None)] if r is not None]
    k8s = k8s_provider.make_provider(
        f"{cfg.environment}-k8s", cluster, cfg.region, opts=pulumi.ResourceOptions(depends_on=waits)
    )
    in_cluster = pulumi.ResourceOptions(providers={**aws_providers, "kubernetes": k8s}, depends_on=waits)

    outputs: dict[str, Any] = {}
    operator = None
    if cfg.gpu_operator.enabled:
        operator = gpu_operator.GpuOperator(
            f"{cfg.environment}-gpu-operator", gpu_operator.GpuOperatorArgs.from_config(cfg), opts=in_cluster
        )
        outputs["gpu_operator_chart_version"] = operator.chart_version
    metrics = gpu_metrics.GpuMetrics(
        f"{cfg.environment}-gpu-metrics", gpu_metrics.GpuMetricsArgs.from_config(cfg, cluster.name), opts=in_cluster
    )
    outputs["gpu_metric"] = f"{metrics.metric_namespace}/{metrics.utilization_metric}"
    tiers = tenancy.Tenancy(f"{cfg.environment}-tenancy", tenancy.TenancyArgs.from_config(cfg), opts=in_cluster)
    outputs["team_namespaces"] = sorted(tiers.namespaces)
    outputs["team_gpu_quotas"] = tiers.gpu_quotas
    outputs["priority_classes"] = {t: priority_class_name(t) for t in tiers.priority_classes}
    queues = None
    if cfg.scheduling.kueue.enabled:
        queues = kueue.Kueue(
            f"{cfg.environment}-kueue", kueue.KueueArgs.from_config(cfg, tiers.namespaces), opts=in_cluster
        )
        outputs["kueue_chart_version"] = queues.chart_version
        outputs["kueue_local_queues"] = queues.local_queues
    if cfg.github is not None:
        # What the GitHub preview role may read in the cluster (no Secrets outside the Helm release namespaces,
        # which exist once the releases' namespaces do).
        from stacks.gitops.ci_rbac import CiRbac, CiRbacArgs

        CiRbac(
            f"{cfg.environment}-ci-rbac",
            CiRbacArgs.from_config(cfg),
            opts=pulumi.ResourceOptions.merge(
                in_cluster, pulumi.ResourceOptions(depends_on=[r for r in (operator, queues) if r is not None])
            ),
        )
    return outputs
