"""GitHub Actions OIDC: the identity provider and the two roles CI assumes (no stored AWS keys anywhere).

- preview role: read-only (Describe/Get/List on the services this stack manages), assumable only by
  `pull_request` workflow runs of the configured repository. `pulumi preview` refreshes state with it.
- deploy role: may change this stack's services, assumable only by runs on `refs/heads/main` of that repository,
  or, when the stack deploys through a GitHub environment (github.deploy_environment), only by jobs of that
  environment: GitHub then puts `environment:<name>` in the token's subject instead of the ref, and the
  environment's deployment-branch rule (main only) plus its required reviewers are what gate the job.

The subject claims are matched with StringEquals (no wildcards): `repo:<owner>/<repo>:pull_request`,
`repo:<owner>/<repo>:ref:refs/heads/main`, `repo:<owner>/<repo>:environment:<name>` (GitHub's default subject
format, docs.github.com "OpenID Connect reference"). The audience is `sts.amazonaws.com`, what
aws-actions/configure-aws-credentials requests.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from stacks import tags
from stacks.config import GpuLoanConfig

GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
GITHUB_OIDC_URL = f"https://{GITHUB_OIDC_HOST}"
STS_AUDIENCE = "sts.amazonaws.com"
DEPLOY_REF = "refs/heads/main"
# A CI job needs minutes; an hour bounds what a leaked session token is worth.
ROLE_MAX_SESSION_SECONDS = 3600

# Services the program declares resources in. The preview role reads them, the deploy role manages them.
REGIONAL_SERVICES = (
    "ec2", "eks", "autoscaling", "ecr", "sns", "lambda", "events", "scheduler", "sqs", "cloudwatch", "logs",
    "ssm", "dynamodb", "kms",
)
GLOBAL_SERVICES = ("iam", "budgets", "ce")

# Kubernetes access of the CI roles (EKS access policies, cluster scope): `pulumi up` manages the Helm release,
# namespaces, quotas and RBAC; `pulumi preview` diffs them, which reads every object including the Helm
# release's state Secrets. Without access entries only the identity that created the cluster can do either.
DEPLOY_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"
PREVIEW_ACCESS_POLICY = "AmazonEKSAdminViewPolicy"

# Read actions that return data rather than configuration (items, log lines, messages) are left out of the
# preview role: a refresh needs the Describe/List calls of these services, not their contents.
PREVIEW_NO_GET = ("dynamodb", "logs", "sqs")


def preview_actions() -> list[str]:
    actions = []
    for svc in (*REGIONAL_SERVICES, *GLOBAL_SERVICES):
        actions += [f"{svc}:Describe*", f"{svc}:List*"]
        if svc not in PREVIEW_NO_GET:
            actions.append(f"{svc}:Get*")
    actions.append("sqs:GetQueueAttributes")  # the one sqs Get a refresh needs (no messages)
    return sorted(set(actions))


def trust_subjects(cfg: GpuLoanConfig) -> dict[str, list[str]]:
    """The exact `sub` claims each role accepts (pure: tests and docs use it)."""
    gh = cfg.github
    assert gh is not None
    repo = gh.repository
    deploy = ([f"repo:{repo}:environment:{gh.deploy_environment}"] if gh.deploy_environment
              else [f"repo:{repo}:ref:{DEPLOY_REF}"])
    return {"preview": [f"repo:{repo}:pull_request"], "deploy": deploy}


def trust_policy(provider_arn: str, subjects: list[str]) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                f"{GITHUB_OIDC_HOST}:aud": STS_AUDIENCE,
                f"{GITHUB_OIDC_HOST}:sub": subjects if len(subjects) > 1 else subjects[0],
            }},
        }],
    }, sort_keys=True)


def preview_policy() -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Sid": "ReadOnlyRefresh", "Effect": "Allow", "Action": preview_actions(), "Resource": "*"}],
    }, sort_keys=True)


def deploy_policy(region: str) -> str:
    # Regional services only in the stack's region: a compromised main branch cannot spread into other regions.
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ManageRegional", "Effect": "Allow", "Action": [f"{s}:*" for s in REGIONAL_SERVICES],
             "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": region}}},
            {"Sid": "ManageGlobal", "Effect": "Allow",
             "Action": ["iam:*", "budgets:*", "ce:ListCostAllocationTags", "ce:UpdateCostAllocationTagsStatus"],
             "Resource": "*"},
        ],
    }, sort_keys=True)


class GitHubOidc(pulumi.ComponentResource):
    """The GitHub OIDC provider (or a reference to the account's existing one) and the preview/deploy roles."""

    provider_arn: pulumi.Output[str]
    preview_role_arn: pulumi.Output[str]
    deploy_role_arn: pulumi.Output[str]

    def __init__(self, name: str, cfg: GpuLoanConfig, account_id: pulumi.Input[str], partition: pulumi.Input[str],
                 cluster_name: pulumi.Input[str] | None = None, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:gitops:GitHubOidc", name, None, opts)
        if cfg.github is None:
            raise ValueError("GitHubOidc needs cfg.github (the repository to trust)")
        child = pulumi.ResourceOptions(parent=self)
        # Shared, not a pool's: the platform tier (the provider's default tags add the environment).
        platform = {tags.TAG_TIER: "platform"}
        if cfg.github.create_oidc_provider:
            # AWS validates GitHub's certificate against its own trusted CAs, so no thumbprint is pinned here.
            oidc = aws.iam.OpenIdConnectProvider(f"{name}-provider", url=GITHUB_OIDC_URL,
                                                 client_id_lists=[STS_AUDIENCE], tags=platform, opts=child)
            self.provider_arn = oidc.arn
        else:
            # One provider per URL per account: a second stack in the same account reuses the first one's.
            self.provider_arn = pulumi.Output.concat(
                "arn:", partition, ":iam::", account_id, ":oidc-provider/", GITHUB_OIDC_HOST)

        subjects = trust_subjects(cfg)
        env = cfg.environment
        repo = cfg.github.repository
        # (role, who may assume it, what it may do in AWS, what it may do in the cluster)
        roles = (
            ("preview", f"pulumi preview from pull requests of {repo} (read-only)", preview_policy(),
             PREVIEW_ACCESS_POLICY),
            ("deploy", f"pulumi up from {repo} on {DEPLOY_REF}", deploy_policy(cfg.region), DEPLOY_ACCESS_POLICY),
        )
        created: dict[str, aws.iam.Role] = {}
        for kind, description, permissions, access_policy in roles:
            role = aws.iam.Role(
                f"{name}-{kind}",
                name=f"gpuloan-{env}-github-{kind}",
                description=description,
                assume_role_policy=self.provider_arn.apply(lambda arn, k=kind: trust_policy(arn, subjects[k])),
                max_session_duration=ROLE_MAX_SESSION_SECONDS,
                tags=platform,
                opts=child,
            )
            suffix = "read" if kind == "preview" else "manage"
            aws.iam.RolePolicy(f"{name}-{kind}-{suffix}", role=role.id, policy=permissions, opts=child)
            if cluster_name is not None:
                entry = aws.eks.AccessEntry(f"{name}-{kind}-access", cluster_name=cluster_name,
                                            principal_arn=role.arn, type="STANDARD", tags=platform, opts=child)
                aws.eks.AccessPolicyAssociation(
                    f"{name}-{kind}-access-policy", cluster_name=cluster_name, principal_arn=role.arn,
                    policy_arn=pulumi.Output.concat("arn:", partition, ":eks::aws:cluster-access-policy/", access_policy),
                    access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]))
            created[kind] = role

        self.preview_role_arn = created["preview"].arn
        self.deploy_role_arn = created["deploy"].arn
        self.register_outputs({
            "provider_arn": self.provider_arn,
            "preview_role_arn": self.preview_role_arn,
            "deploy_role_arn": self.deploy_role_arn,
        })
