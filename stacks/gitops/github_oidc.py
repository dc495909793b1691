"""GitHub Actions OIDC: the identity provider and the two roles CI assumes (no stored AWS keys anywhere).

- preview role: exactly the read actions a refresh of the declared resource types calls (stacks/gitops/iam_permissions.py),
  assumable only by `pull_request` workflow runs of the configured repository (`pulumi preview` refreshes with it)
  and by jobs of the `gpuloan-prices` environment (PRICES_ENVIRONMENT: the scheduled price refresh,
  .github/workflows/prices.yml, reads AWS prices with it and opens a pull request with gpuloan-prices.json).
- deploy role: reads the same and changes only this environment's resources (by name, IAM path or the environment
  tag, per service; roles it creates must carry the environment's permissions boundary, stacks/gitops/role_guard.py),
  assumable only by runs on `refs/heads/main` of that repository,
  or, when the stack deploys through a GitHub environment (github.deploy_environment), only by jobs of that
  environment: GitHub then puts `environment:<name>` in the token's subject instead of the ref, and the
  environment's deployment-branch rule (main only) plus its required reviewers are what gate the job.

The subject claims are matched with StringEquals (no wildcards): `repo:<owner>/<repo>:pull_request`,
`repo:<owner>/<repo>:ref:refs/heads/main`, `repo:<owner>/<repo>:environment:<name>` (GitHub's default subject
format, docs.github.com "OpenID Connect reference"). The audience is `sts.amazonaws.com`, what
aws-actions/configure-aws-credentials requests.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Iterable

import pulumi
import pulumi_aws as aws

from stacks.gitops import iam_permissions as perms
from config import tags
from stacks.gitops.ci_rbac import PREVIEW_GROUP
from stacks.cluster import cluster_name_for
from config.config import GpuLoanConfig

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
GITHUB_OIDC_URL = f"https://{GITHUB_OIDC_HOST}"
STS_AUDIENCE = "sts.amazonaws.com"
DEPLOY_REF = "refs/heads/main"
# A CI job needs minutes; an hour bounds what a leaked session token is worth.
ROLE_MAX_SESSION_SECONDS = 3600

# Kubernetes access of the CI roles (EKS access policies, cluster scope): `pulumi up` manages the Helm release,
# namespaces, quotas and RBAC, so the deploy role is cluster admin. The preview role is not given an access policy
# (AmazonEKSAdminViewPolicy would read every Secret): its access entry maps it to PREVIEW_GROUP, which
# stacks/gitops/ci_rbac.py binds to a reader of exactly the kinds the stack declares, Secrets only in the Helm release's
# namespace (Helm keeps the release record there and a refresh of the release reads it).
DEPLOY_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"

# Resource types this component declares itself (the program's other types come from stacks/gitops/role_guard.py).
OWN_TYPES = (
    "aws:iam/role:Role",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:eks/accessEntry:AccessEntry",
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
)
OIDC_PROVIDER = "aws:iam/openIdConnectProvider:OpenIdConnectProvider"


# The GitHub environment of the scheduled price refresh (.github/workflows/prices.yml): its jobs' tokens carry
# `environment:<name>` as subject, and its deployment-branch rule keeps it to main (docs/gitops.md).
PRICES_ENVIRONMENT = "gpuloan-prices"


def trust_subjects(cfg: GpuLoanConfig) -> dict[str, list[str]]:
    """The exact `sub` claims each role accepts (pure: tests and docs use it)."""
    gh = cfg.github
    assert gh is not None
    repo = gh.repository
    deploy = (
        [f"repo:{repo}:environment:{gh.deploy_environment}"]
        if gh.deploy_environment
        else [f"repo:{repo}:ref:{DEPLOY_REF}"]
    )
    return {"preview": [f"repo:{repo}:pull_request", f"repo:{repo}:environment:{PRICES_ENVIRONMENT}"], "deploy": deploy}


def _policy_part(document: dict, *, sids: list[str]) -> str:
    """One managed policy's share of the deploy role's document: the statements `sids`."""
    return json.dumps(perms.select(document, sids), sort_keys=True)


def trust_policy(provider_arn: str, subjects: list[str]) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{GITHUB_OIDC_HOST}:aud": STS_AUDIENCE,
                            f"{GITHUB_OIDC_HOST}:sub": subjects if len(subjects) > 1 else subjects[0],
                        }
                    },
                }
            ],
        },
        sort_keys=True,
    )


PULUMI_PROJECT = "gpuloan"  # Pulumi.yaml's name: the DIY backend keys state by project and stack

# Where the pulumi jobs run when the config names no runner labels (GitHub-hosted, pinned image).
HOSTED_RUNNER = "ubuntu-24.04"


def runs_on(cfg: GpuLoanConfig) -> str | list[str]:
    """The `runs-on` of the stack's pulumi jobs: they reach the cluster API (github.cluster_access)."""
    assert cfg.github is not None
    return list(cfg.github.runner_labels) if cfg.github.runner_labels else HOSTED_RUNNER


def provider_arn_for(cfg: GpuLoanConfig, account_id: str, partition: str) -> str:
    """The ARN of an existing provider: the configured one, else the account's (one per URL per account)."""
    assert cfg.github is not None
    return cfg.github.oidc_provider_arn or f"arn:{partition}:iam::{account_id}:oidc-provider/{GITHUB_OIDC_HOST}"


def state_backend(cfg: GpuLoanConfig) -> perms.StateBackend | None:
    """The self-managed S3 backend the roles reach the stack's state in, if the config names one."""
    assert cfg.github is not None
    if not cfg.github.state_bucket:
        return None
    return perms.StateBackend(cfg.github.state_bucket, PULUMI_PROJECT, cfg.environment, cfg.github.state_kms_key_arn)


@dataclass(frozen=True)
class GitHubOidcArgs:
    cfg: GpuLoanConfig
    account_id: pulumi.Input[str]
    partition: pulumi.Input[str]
    # The resource types the rest of the program declared (RoleGuard.declared_types), read when the roles are built.
    declared_types: Iterable[str]
    # The cluster the deploy role gets an access entry to (the Cluster component's name); None: no entry.
    cluster_name: pulumi.Input[str] | None = None

    @staticmethod
    def from_config(
        cfg: GpuLoanConfig,
        account_id: pulumi.Input[str],
        partition: pulumi.Input[str],
        declared_types: Iterable[str],
        cluster_name: pulumi.Input[str] | None = None,
    ) -> GitHubOidcArgs:
        return GitHubOidcArgs(cfg, account_id, partition, declared_types, cluster_name)


class GitHubOidc(pulumi.ComponentResource):
    """The GitHub OIDC provider (or a reference to the account's existing one) and the preview/deploy roles.

    `declared_types` are the resource types the rest of the program declared (stacks/gitops/role_guard.py): the roles'
    policies grant what those types need (stacks/gitops/iam_permissions.py), nothing for types the stack does not have.
    """

    provider_arn: pulumi.Output[str]
    preview_role_arn: pulumi.Output[str]
    deploy_role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: GitHubOidcArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:gitops:GitHubOidc", name, None, opts)
        cfg, account_id, partition = args.cfg, args.account_id, args.partition
        declared_types, cluster_name = args.declared_types, args.cluster_name
        if cfg.github is None:
            raise ValueError("GitHubOidc needs cfg.github (the repository to trust)")
        child = pulumi.ResourceOptions(parent=self)
        # Shared, not a pool's: the platform tier (the provider's default tags add the environment).
        platform = {tags.TAG_TIER: "platform"}
        types = set(declared_types) | set(OWN_TYPES)
        if cfg.github.create_oidc_provider:
            # AWS validates GitHub's certificate against its own trusted CAs, so no thumbprint is pinned here.
            # One provider per URL per account: a second stack in the same account references this one.
            oidc = aws.iam.OpenIdConnectProvider(
                f"{name}-provider", url=GITHUB_OIDC_URL, client_id_lists=[STS_AUDIENCE], tags=platform, opts=child
            )
            self.provider_arn = oidc.arn
            types.add(OIDC_PROVIDER)
        else:
            self.provider_arn = pulumi.Output.all(account_id, partition).apply(
                lambda v: provider_arn_for(cfg, v[0], v[1])
            )

        subjects = trust_subjects(cfg)
        env = cfg.environment
        repo = cfg.github.repository
        stack_cluster = cluster_name_for(cfg)
        scope = pulumi.Output.all(partition, account_id).apply(
            lambda v: perms.Scope(v[0], v[1], cfg.region, env, stack_cluster)
        )
        deploy_from = f"environment {cfg.github.deploy_environment}" if cfg.github.deploy_environment else DEPLOY_REF
        deploy_types = sorted(types)
        state = state_backend(cfg)
        # The deploy role's own permissions boundary (stacks/iam_permissions.deploy_boundary_document): a ceiling
        # over its policies, out of its own reach (CI path; the boundary denies IAM writes there).
        deploy_boundary = aws.iam.Policy(
            f"{name}-deploy-boundary",
            name=perms.deploy_boundary_name(env),
            path=perms.ci_path(env),
            description=f"gpuloan {env} deploy role: the most it may do, whatever its policies say",
            policy=scope.apply(
                lambda sc: json.dumps(
                    perms.deploy_boundary_document(sc, perms.deploy_services(sorted(types), state)), sort_keys=True
                )
            ),
            tags=platform,
            opts=child,
        )
        created: dict[str, aws.iam.Role] = {}
        for kind, description in (
            ("preview", f"pulumi preview from pull requests of {repo} (read-only)"),
            ("deploy", f"pulumi up from {repo} ({deploy_from})"),
        ):
            role = aws.iam.Role(
                f"{name}-{kind}",
                name=f"gpuloan-{env}-github-{kind}",
                # Outside the deploy role's IAM path: only an administrator changes what CI may do.
                path=perms.ci_path(env),
                description=description,
                assume_role_policy=self.provider_arn.apply(functools.partial(trust_policy, subjects=subjects[kind])),
                max_session_duration=ROLE_MAX_SESSION_SECONDS,
                permissions_boundary=deploy_boundary.arn if kind == "deploy" else None,
                tags=platform,
                opts=child,
            )
            if kind == "preview":
                aws.iam.RolePolicy(
                    f"{name}-preview-read",
                    role=role.id,
                    opts=child,
                    policy=scope.apply(
                        lambda sc: json.dumps(
                            perms.preview_policy_document(sorted(types), perms.INVOKES, state, sc.partition, scope=sc),
                            sort_keys=True,
                        )
                    ),
                )
            else:
                # Larger than a role's inline policies may be: managed policies, planned with the widest ARNs.
                document = scope.apply(lambda s: perms.deploy_policy_document(deploy_types, s, perms.INVOKES, state))
                for i, sids in enumerate(
                    perms.deploy_policy_chunks(deploy_types, env, cfg.region, stack_cluster, state)
                ):
                    policy = aws.iam.Policy(
                        f"{name}-deploy-manage-{i + 1}",
                        name=f"gpuloan-{env}-github-deploy-{i + 1}",
                        path=perms.ci_path(env),
                        description=f"gpuloan {env} deploy role, part {i + 1}",
                        policy=document.apply(functools.partial(_policy_part, sids=sids)),
                        tags=platform,
                        opts=child,
                    )
                    aws.iam.RolePolicyAttachment(
                        f"{name}-deploy-manage-{i + 1}", role=role.name, policy_arn=policy.arn, opts=child
                    )
            if cluster_name is not None:
                entry = aws.eks.AccessEntry(
                    f"{name}-{kind}-access",
                    cluster_name=cluster_name,
                    principal_arn=role.arn,
                    type="STANDARD",
                    kubernetes_groups=[PREVIEW_GROUP] if kind == "preview" else None,
                    tags=platform,
                    opts=child,
                )
                if kind == "deploy":
                    aws.eks.AccessPolicyAssociation(
                        f"{name}-{kind}-access-policy",
                        cluster_name=cluster_name,
                        principal_arn=role.arn,
                        policy_arn=pulumi.Output.concat(
                            "arn:", partition, ":eks::aws:cluster-access-policy/", DEPLOY_ACCESS_POLICY
                        ),
                        access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]),
                    )
            created[kind] = role

        self.preview_role_arn = created["preview"].arn
        self.deploy_role_arn = created["deploy"].arn
        self.register_outputs(
            {
                "provider_arn": self.provider_arn,
                "preview_role_arn": self.preview_role_arn,
                "deploy_role_arn": self.deploy_role_arn,
            }
        )
