"""Tiers and teams inside the cluster: PriorityClasses, a namespace per team with a GPU quota, policy read access.

What these objects hold (priority values, quotas, tier ceilings, the policy's RBAC rules) is decided without
Pulumi in config/tenancy.py; this component creates them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from config import tags
from config.config import GpuLoanConfig, Tier
from config.tenancy import (
    CONTAINER_DEFAULT_REQUESTS,
    MANAGED_BY,
    POLICY_READER_CLUSTER_ROLE,
    forbidden_priority_classes,
    policy_rbac_rules,
    priority_class_name,
    priority_class_spec,
    team_gpu_quota,
)


@dataclass(frozen=True)
class TenancyArgs:
    # The tiers and every team's namespace, quota and limits: the config's teams, pools and tenancy plan.
    cfg: GpuLoanConfig

    @staticmethod
    def from_config(cfg: GpuLoanConfig) -> TenancyArgs:
        return TenancyArgs(cfg)


class Tenancy(pulumi.ComponentResource):
    def __init__(self, name: str, args: TenancyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:tenancy:Tenancy", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)

        self.priority_classes: dict[str, k8s.scheduling.v1.PriorityClass] = {}
        for tier in Tier:
            spec = priority_class_spec(tier)
            self.priority_classes[tier.value] = k8s.scheduling.v1.PriorityClass(
                f"{name}-{tier.value}",
                metadata={"name": priority_class_name(tier), "labels": MANAGED_BY},
                **spec,
                opts=child,
            )

        self.namespaces: dict[str, k8s.core.v1.Namespace] = {}
        self.gpu_quotas: dict[str, int] = {}
        for team in cfg.teams:
            ns = k8s.core.v1.Namespace(
                f"{name}-{team}",
                metadata={
                    "name": team,
                    "labels": {
                        **MANAGED_BY,
                        tags.LABEL_TEAM: team,
                        # Baseline blocks privileged/host-access pods in team namespaces; warn on restricted so
                        # teams see what to tighten.
                        "pod-security.kubernetes.io/enforce": "baseline",
                        "pod-security.kubernetes.io/warn": "restricted",
                    },
                },
                opts=child,
            )
            self.namespaces[team] = ns
            in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
            self.gpu_quotas[team] = team_gpu_quota(cfg, team)
            k8s.core.v1.ResourceQuota(
                f"{name}-{team}-gpus",
                metadata={"name": "gpus", "namespace": team, "labels": MANAGED_BY},
                spec={"hard": {"requests.nvidia.com/gpu": str(self.gpu_quotas[team])}},
                opts=in_ns,
            )
            forbidden = forbidden_priority_classes(cfg, team)
            if forbidden:
                # A quota of zero pods for the higher classes: the API server rejects such pods at admission.
                k8s.core.v1.ResourceQuota(
                    f"{name}-{team}-tiers",
                    metadata={"name": "tier-ceiling", "namespace": team, "labels": MANAGED_BY},
                    spec={
                        "hard": {"pods": "0"},
                        "scopeSelector": {
                            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": forbidden}]
                        },
                    },
                    opts=in_ns,
                )
            k8s.core.v1.LimitRange(
                f"{name}-{team}-defaults",
                metadata={"name": "defaults", "namespace": team, "labels": MANAGED_BY},
                spec={"limits": [{"type": "Container", "defaultRequest": CONTAINER_DEFAULT_REQUESTS}]},
                opts=in_ns,
            )

        # The policy Lambda's IAM role maps to this group through an EKS access entry (stacks/policy_function/function.py);
        # it lists pods and cordons a node before terminating it, nothing else (POLICY_RBAC_RULES).
        reader = k8s.rbac.v1.ClusterRole(
            f"{name}-policy-reader",
            metadata={"name": POLICY_READER_CLUSTER_ROLE, "labels": MANAGED_BY},
            rules=policy_rbac_rules(cfg),
            opts=child,
        )
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-policy-reader",
            metadata={"name": POLICY_READER_CLUSTER_ROLE, "labels": MANAGED_BY},
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": POLICY_READER_CLUSTER_ROLE,
            },
            subjects=[{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": tags.POLICY_READER_GROUP}],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[reader]),
        )
        self.register_outputs(
            {
                "priority_classes": {t: priority_class_name(t) for t in self.priority_classes},
                "team_gpu_quotas": self.gpu_quotas,
            }
        )
