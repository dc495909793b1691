"""Every IAM role the stack creates lives under the environment's IAM path and carries its permissions boundary.

Why: the GitHub deploy role may create and change IAM roles (the node, cluster, CNI, metrics and policy-function
roles), so it could otherwise create an administrator role and assume it. Its IAM permissions are limited to roles
under `/gpuloan/<env>/` (stacks/gitops/iam_permissions.py) and require the boundary `gpuloan-<env>-boundary` on every
role it creates or gives a policy; the boundary grants no IAM action and nothing on another environment's
resources. The CI roles and the boundary itself live under `/gpuloan-ci/<env>/`, out of the deploy role's reach.

One stack transformation does this for every role, so a role added later cannot forget it (tests assert it on the
dev and prod plans).

A role's `path` cannot change in place: the provider replaces the role, and an auto-named role gets a new name, so
a new ARN. The EKS cluster's `role_arn` forces a new cluster, so giving the path to the roles of a stack deployed
before paths existed would delete the cluster and every node on it. Hence `ignore_changes=["path"]` on every role:
Pulumi uses the program's value when it creates a role (new stacks, new roles get the path) and the value in the
stack's state for a role it already has (Pulumi docs, "ignoreChanges"; docs/aws-rules.md). Such a role stays at
its old path (`/`), outside the deploy role's reach; docs/gitops.md says what that means.

The same hook records the resource types the program declares: the CI roles' policies are derived from them
(stacks/gitops/github_oidc.py, built last).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from stacks.gitops import iam_permissions as perms
from config import tags
from config.config import GpuLoanConfig

IAM_ROLE = "aws:iam/role:Role"
# Role inputs Pulumi takes from the state once a role exists: changing them would replace the role (module doc).
KEPT_FROM_STATE = ("path",)


class RoleGuard:
    """Installs the stack transformation; `declared_types` grows as the program registers resources."""

    def __init__(
        self,
        cfg: GpuLoanConfig,
        opts: pulumi.ResourceOptions,
        account_id: pulumi.Input[str],
        partition: pulumi.Input[str],
        cluster_name: str,
    ):
        self.env = cfg.environment
        self.declared_types: set[str] = set()
        self.boundary: aws.iam.Policy | None = None
        if cfg.github is not None:
            # Created by the first (administrator's) `pulumi up`; the deploy role cannot change it (CI path).
            document = pulumi.Output.all(partition, account_id).apply(
                lambda v: json.dumps(
                    perms.boundary_policy_document(perms.Scope(v[0], v[1], cfg.region, self.env, cluster_name)),
                    sort_keys=True,
                )
            )
            self.boundary = aws.iam.Policy(
                f"{self.env}-role-boundary",
                name=perms.boundary_name(self.env),
                path=perms.ci_path(self.env),
                description=f"gpuloan {self.env}: the most any role of this stack may do (no IAM, no other "
                f"environment's resources)",
                policy=document,
                tags={tags.TAG_TIER: "platform"},
                opts=opts,
            )
            self.declared_types.add("aws:iam/policy:Policy")
        pulumi.runtime.register_stack_transformation(self._transform)

    def _transform(self, args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        self.declared_types.add(args.type_)
        if args.type_ != IAM_ROLE:
            return None
        props = dict(args.props)
        # The path only ever applies when a role is created; a role already in the state keeps its path (module doc).
        opts = pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(ignore_changes=list(KEPT_FROM_STATE)))
        if props.get("path") is None:
            props["path"] = perms.workload_path(self.env)
        if self.boundary is None or props["path"] != perms.workload_path(self.env):
            # CI roles (their own path) are the administrator's; they carry no boundary (they need IAM actions).
            return pulumi.ResourceTransformationResult(props, opts)
        props["permissions_boundary"] = self.boundary.arn
        return pulumi.ResourceTransformationResult(props, opts)
