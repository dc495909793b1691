"""Kubernetes read access of the GitHub preview role: every kind the stack declares, Secrets only where needed.

EKS's AmazonEKSAdminViewPolicy would let any same-repository pull request read every Secret of the cluster. The
preview role's access entry instead maps it to the Kubernetes group `gpuloan-ci-preview` (stacks/gitops/github_oidc.py),
bound here to:
- a ClusterRole that gets/lists/watches the kinds in stacks/iam_permissions.KUBERNETES_KINDS (what the stack
  declares) plus the kinds the GPU Operator chart installs (a preview of the Helm release diffs them), no Secrets;
- a Role in each Helm release's namespace (GPU Operator, Kueue; only where that release is enabled) that reads
  Secrets there: Helm stores each release's record as a Secret (`sh.helm.release.v1.<release>.v<revision>`,
  labelled `owner=helm,name=<release>`) in the release namespace, and refreshing the release finds it with a
  label-selected LIST (Helm's secret storage driver). That is as narrow as RBAC goes: `resourceNames` cannot limit
  a list unless the client selects by `metadata.name`, which Helm does not (Kubernetes RBAC docs, "Referring to
  resources"), and RBAC has no label selectors. So the preview role can read every Secret of those two namespaces,
  which includes the Kueue webhook's serving certificate and key (`kueue-webhook-server-cert`, made by Kueue's
  internal cert manager). Removing that read needs the Helm ConfigMap storage driver for the releases (the
  kubernetes provider's `helmReleaseSettings.driver`), a migration of the existing release records that is not
  done here (docs/gitops.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from stacks.kubernetes import gpu_operator, kueue
from stacks.gitops import iam_permissions as perms
from config import tenancy
from config.config import GpuLoanConfig

PREVIEW_GROUP = "gpuloan-ci-preview"
READER = "gpuloan-ci-preview-reader"
READ = ["get", "list", "watch"]
MANAGED_BY = tenancy.MANAGED_BY  # the one label of every object gpuloan creates in the cluster

# What the GPU Operator chart creates, by API group (a release preview renders and diffs them).
CHART_KINDS: dict[str, list[str]] = {
    "": ["serviceaccounts", "services", "configmaps", "pods"],
    "apps": ["daemonsets", "deployments"],
    "apiextensions.k8s.io": ["customresourcedefinitions"],
    "nvidia.com": ["clusterpolicies", "nvidiadrivers"],
    "nfd.k8s-sigs.io": ["nodefeaturerules"],
    "rbac.authorization.k8s.io": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"],
    # The Kueue chart adds its admission webhooks and the visibility API service.
    "admissionregistration.k8s.io": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
    "apiregistration.k8s.io": ["apiservices"],
}


def reader_rules() -> list[dict]:
    """ClusterRole rules: read every declared kind and every chart kind, never Secrets."""
    groups: dict[str, set[str]] = {g: set(r) for g, r in CHART_KINDS.items()}
    for group, resource in perms.KUBERNETES_KINDS.values():
        if resource != "secrets":
            groups.setdefault(group, set()).add(resource)
    return [{"apiGroups": [g], "resources": sorted(r), "verbs": READ} for g, r in sorted(groups.items())]


@dataclass(frozen=True)
class CiRbacArgs:
    # What the preview role may read depends on which releases the config enables (GPU Operator, Kueue).
    cfg: GpuLoanConfig

    @staticmethod
    def from_config(cfg: GpuLoanConfig) -> CiRbacArgs:
        return CiRbacArgs(cfg)


class CiRbac(pulumi.ComponentResource):
    def __init__(self, name: str, args: CiRbacArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:gitops:CiRbac", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)
        subjects = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": PREVIEW_GROUP}]
        reader = k8s.rbac.v1.ClusterRole(
            f"{name}-reader", metadata={"name": READER, "labels": MANAGED_BY}, rules=reader_rules(), opts=child
        )
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-reader",
            metadata={"name": READER, "labels": MANAGED_BY},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER},
            subjects=subjects,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[reader]),
        )
        # Helm keeps each release's records as Secrets in the release's namespace; a preview of the release reads
        # them there and nowhere else.
        release_namespaces = [gpu_operator.NAMESPACE] if cfg.gpu_operator.enabled else []
        if cfg.scheduling.kueue.enabled:
            release_namespaces.append(kueue.NAMESPACE)
        for namespace in release_namespaces:
            suffix = "" if namespace == gpu_operator.NAMESPACE else f"-{namespace}"
            releases = k8s.rbac.v1.Role(
                f"{name}-helm-releases{suffix}",
                metadata={"name": f"{READER}-helm-releases", "namespace": namespace, "labels": MANAGED_BY},
                rules=[{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
                opts=child,
            )
            k8s.rbac.v1.RoleBinding(
                f"{name}-helm-releases{suffix}",
                metadata={"name": f"{READER}-helm-releases", "namespace": namespace, "labels": MANAGED_BY},
                role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{READER}-helm-releases"},
                subjects=subjects,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[releases]),
            )
        self.register_outputs({"group": PREVIEW_GROUP})
