"""GitHub OIDC roles as code: who may assume them (trust policies parsed) and what they may do."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_stack, stack_config, resolved_prices

from pricing import checks
from config import config as config_mod
from stacks.gitops import github_oidc

REPO_NAME = "example-org/ml-infra"
SUB = "token.actions.githubusercontent.com:sub"
AUD = "token.actions.githubusercontent.com:aud"


def _github_resources(recording):
    return [r for r in recording.resources if "gpuloan:gitops:GitHubOidc" in r.urn]


def _role(recording, suffix):
    (role,) = [r for r in recording.of_type("aws:iam/role:Role") if r.name.endswith(f"-github-{suffix}")]
    return role


def _role_policy(recording, role):
    (pol,) = [r for r in recording.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.startswith(role.name + "-")]
    return json.loads(pol.inputs["policy"])


def _trust(role):
    (stmt,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    return stmt


def test_prod_preview_role_trusts_only_pull_requests_and_the_price_refresh_of_the_repository(recorded):
    rec = recorded("prod")
    stmt = _trust(_role(rec, "preview"))
    assert stmt["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert stmt["Principal"]["Federated"] == rec.outputs["github_oidc_provider_arn"]
    assert stmt["Condition"] == {
        "StringEquals": {
            AUD: "sts.amazonaws.com",
            SUB: [f"repo:{REPO_NAME}:pull_request", f"repo:{REPO_NAME}:environment:gpuloan-prices"],
        }
    }
    assert "StringLike" not in stmt["Condition"]  # no wildcard subjects


def test_prod_deploy_role_trusts_only_the_gated_environment(recorded):
    # Pulumi.prod.yaml deploys through the "prod" GitHub environment (required reviewers, main only).
    stmt = _trust(_role(recorded("prod"), "deploy"))
    assert stmt["Condition"]["StringEquals"][SUB] == f"repo:{REPO_NAME}:environment:prod"


def test_deploy_role_without_environment_trusts_only_main():
    cfg = stack_config("dev")
    del cfg["gpuloan:github"]["deploy_environment"]  # the shipped dev deploys through its "dev" environment
    stmt = _trust(_role(run_stack("dev", cfg), "deploy"))
    assert stmt["Condition"] == {
        "StringEquals": {AUD: "sts.amazonaws.com", SUB: f"repo:{REPO_NAME}:ref:refs/heads/main"}
    }


def test_preview_role_is_read_only(recorded):
    rec = recorded("prod")
    doc = _role_policy(rec, _role(rec, "preview"))
    actions = [a for s in doc["Statement"] for a in s["Action"]]
    assert actions and all(s["Effect"] == "Allow" for s in doc["Statement"])
    for action in actions:  # exact actions (tests/stacks/test_gitops_permissions.py checks them against the table)
        assert re.fullmatch(r"[a-z0-9-]+:(Describe|Get|List|View|BatchGet)[A-Za-z]*", action), action
    assert "budgets:ViewBudget" in actions  # refreshing a budget needs it; no Describe*/Get* wildcard matches it


def _deploy_docs(rec):
    return [
        json.loads(r.inputs["policy"])
        for r in rec.of_type("aws:iam/policy:Policy")
        if "-github-deploy-manage-" in r.name
    ]


def test_deploy_role_changes_are_pinned_to_the_stack_region(recorded):
    docs = _deploy_docs(recorded("prod"))
    for st in (st for d in docs for st in d["Statement"]):
        assert st["Action"] != "*" and "*" not in st["Action"]  # never a bare "*" action
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        for resource in resources:
            if resource == "*":
                # reads, AWS's resource-less actions, and key creation (pinned by condition)
                assert (
                    st["Sid"] in ("Refresh", "UnscopableByAws")
                    or st["Condition"]["StringEquals"]["aws:RequestedRegion"] == "us-east-1"
                ), st["Sid"]
                continue
            region = resource.split(":")[3]
            assert region in ("", "us-east-1"), (st["Sid"], resource)  # "": IAM, Budgets, dashboards are global


def test_roles_have_short_sessions_and_deterministic_names(recorded):
    rec = recorded("prod")
    assert _role(rec, "preview").inputs["name"] == "gpuloan-prod-github-preview"
    assert _role(rec, "deploy").inputs["name"] == "gpuloan-prod-github-deploy"
    for suffix in ("preview", "deploy"):
        assert _role(rec, suffix).inputs["maxSessionDuration"] == 3600


def test_oidc_provider_is_githubs_with_the_sts_audience(recorded):
    (provider,) = [
        r
        for r in _github_resources(recorded("prod"))
        if r.type == "aws:iam/openIdConnectProvider:OpenIdConnectProvider"
    ]
    assert provider.inputs["url"] == "https://token.actions.githubusercontent.com"
    assert provider.inputs["clientIdLists"] == ["sts.amazonaws.com"]
    assert "gpuloan:gitops:GitHubOidc" in provider.urn


def test_existing_oidc_provider_is_referenced_not_created():
    cfg = stack_config("prod")
    cfg["gpuloan:github"]["create_oidc_provider"] = False
    rec = run_stack("prod", cfg)
    assert [r for r in _github_resources(rec) if r.type == "aws:iam/openIdConnectProvider:OpenIdConnectProvider"] == []
    arn = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"
    assert rec.outputs["github_oidc_provider_arn"] == arn
    assert _trust(_role(rec, "preview"))["Principal"]["Federated"] == arn


def test_no_github_config_means_no_oidc_resources():
    cfg = stack_config("dev")
    cfg.pop("gpuloan:github")
    rec = run_stack("dev", cfg)
    assert _github_resources(rec) == []
    assert not any(k.startswith("github_") for k in rec.outputs)


def test_every_oidc_child_is_parented_to_the_component(recorded):
    rec = recorded("prod")
    (component,) = rec.of_type("gpuloan:gitops:GitHubOidc")
    children = [r for r in _github_resources(rec) if r is not component]
    parts = len(_deploy_docs(rec))
    # provider, 2 roles, the preview role policy, the deploy role's managed policies and their attachments,
    # 2 access entries, the deploy role's access policy association, the deploy role's own boundary
    assert len(children) == 1 + 2 + 1 + 2 * parts + 2 + 1 + 1
    assert parts >= 2
    assert all(r.parent == component.urn for r in children)


@pytest.mark.parametrize(
    "github, path",
    [
        ({"repository": "not-a-repo"}, "github.repository"),
        ({"repository": "o/r", "deploy_environment": "prod env"}, "github.deploy_environment"),
        ({"repository": "o/r", "trust": "*"}, "github.trust"),
    ],
)
def test_bad_github_config_names_the_field(github, path):
    data = {k.split(":", 1)[1]: v for k, v in stack_config("prod").items() if k.startswith("gpuloan:")}
    data["github"] = github
    with pytest.raises(config_mod.ConfigError) as err:
        checks.parse(data, prices=resolved_prices())
    assert path in [p for p, _ in err.value.problems]


def test_trust_subjects_are_exact():
    data = {k.split(":", 1)[1]: v for k, v in stack_config("prod").items() if k.startswith("gpuloan:")}
    cfg = checks.parse(data, prices=resolved_prices())
    assert github_oidc.trust_subjects(cfg) == {
        "preview": ["repo:example-org/ml-infra:pull_request", "repo:example-org/ml-infra:environment:gpuloan-prices"],
        "deploy": ["repo:example-org/ml-infra:environment:prod"],
    }


def test_oidc_resources_are_tagged_as_shared_platform_cost(recorded):
    rec = recorded("prod")
    taggable = [
        r
        for r in _github_resources(rec)
        if r.type in ("aws:iam/role:Role", "aws:iam/openIdConnectProvider:OpenIdConnectProvider")
    ]
    assert len(taggable) == 3
    assert all(r.inputs["tags"] == {"gpuloan:tier": "platform"} for r in taggable)


def test_ci_roles_get_cluster_access_admin_for_deploy_and_a_reader_group_for_preview(recorded):
    """Without an access entry only the cluster's creator can reach the Kubernetes API, so CI's `pulumi up` would
    be Unauthorized on the Helm release, namespaces and quotas, and its preview could not diff them. The preview
    role gets no EKS access policy (AmazonEKSAdminViewPolicy reads every Secret): its group is bound to a reader
    (stacks/gitops/ci_rbac.py, tests/stacks/test_gitops_permissions.py)."""
    rec = recorded("prod")
    cluster_name = rec.outputs["cluster_name"]
    entries = {r.name: r.inputs for r in rec.of_type("aws:eks/accessEntry:AccessEntry") if "-github-" in r.name}
    assocs = {
        r.name: r.inputs
        for r in rec.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
        if "-github-" in r.name
    }
    for role in ("preview", "deploy"):
        arn = _role(rec, role).outputs["arn"]
        (entry,) = [e for name, e in entries.items() if name.endswith(f"-{role}-access")]
        assert entry["principalArn"] == arn and entry["clusterName"] == cluster_name and entry["type"] == "STANDARD"
    (assoc,) = assocs.values()
    assert assoc["principalArn"] == _role(rec, "deploy").outputs["arn"] and assoc["clusterName"] == cluster_name
    assert assoc["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    assert assoc["accessScope"] == {"type": "cluster"}
    (preview_entry,) = [e for name, e in entries.items() if name.endswith("-preview-access")]
    assert preview_entry["kubernetesGroups"] == ["gpuloan-ci-preview"]


# --- issue 12 item 9: an existing provider, referenced by config ----------------------------------------------


def _parse_with_github(github: dict, stack: str = "prod", cluster: dict | None = None):
    data = {k.split(":", 1)[1]: v for k, v in stack_config(stack).items() if k.startswith("gpuloan:")}
    data["github"] = github
    if cluster is not None:
        data["cluster"] = cluster
    return checks.parse(data, prices=resolved_prices())


def _problems(github: dict, **kw) -> dict[str, str]:
    with pytest.raises(config_mod.ConfigError) as err:
        _parse_with_github(github, **kw)
    return dict(err.value.problems)


SELF_HOSTED = {
    "cluster_access": "self_hosted",
    "runner_labels": ["self-hosted", "vpc"],
    "runner_security_group_ids": ["sg-0a1b2c3d4e5f60718"],
}


def test_an_existing_provider_arn_from_config_is_trusted_and_nothing_is_created():
    cfg = stack_config("prod")
    arn = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"
    cfg["gpuloan:github"].update(create_oidc_provider=False, oidc_provider_arn=arn)
    rec = run_stack("prod", cfg)
    assert rec.of_type("aws:iam/openIdConnectProvider:OpenIdConnectProvider") == [rec.named("prod-cluster-oidc")]
    assert rec.outputs["github_oidc_provider_arn"] == arn
    for role in ("preview", "deploy"):
        assert _trust(_role(rec, role))["Principal"]["Federated"] == arn


def test_the_default_creates_the_provider_once():
    cfg = _parse_with_github({"repository": "o/r", **SELF_HOSTED})
    assert cfg.github.create_oidc_provider is True and cfg.github.oidc_provider_arn is None


@pytest.mark.parametrize(
    "github, path, words",
    [
        (
            {"oidc_provider_arn": "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"},
            "github.oidc_provider_arn",
            "create_oidc_provider: false",
        ),
        (
            {"create_oidc_provider": False, "oidc_provider_arn": "arn:aws:iam::123456789012:oidc-provider/example.com"},
            "github.oidc_provider_arn",
            "pattern",
        ),
        (
            {
                "create_oidc_provider": False,
                "oidc_provider_arn": "arn:aws:iam::12345:oidc-provider/token.actions.githubusercontent.com",
            },
            "github.oidc_provider_arn",
            "pattern",
        ),
    ],
)
def test_bad_provider_reference_names_the_field(github, path, words):
    problems = _problems({"repository": "o/r", **SELF_HOSTED, **github})
    assert path in problems and words in problems[path]


# --- issue 12 item 10: CI reach to the cluster API -------------------------------------------------------------


@pytest.mark.parametrize(
    "github, cluster, path, words",
    [
        ({}, None, "github.cluster_access", "pick how CI reaches the cluster API"),
        ({"cluster_access": "self_hosted"}, None, "github.runner_labels", "self-hosted runners"),
        (
            {"cluster_access": "self_hosted", "runner_labels": ["vpc"]},
            None,
            "github.runner_security_group_ids",
            "cluster security group must admit them on 443",
        ),
        (
            {**SELF_HOSTED, "runner_private_cidrs": ["10.0.0.0/8"]},
            None,
            "github.runner_private_cidrs",
            "/16 or narrower",
        ),
        ({**SELF_HOSTED, "runner_private_cidrs": ["192.0.2.0/24"]}, None, "github.runner_private_cidrs", "RFC 1918"),
        (
            {**SELF_HOSTED, "runner_security_group_ids": ["sg-nope"]},
            None,
            "github.runner_security_group_ids[0]",
            "pattern",
        ),
        (
            {
                "cluster_access": "runner_cidrs",
                "runner_cidrs": ["192.0.2.0/28"],
                "runner_security_group_ids": ["sg-0a1b2c3d4e5f60718"],
            },
            None,
            "github.runner_security_group_ids",
            "only with",
        ),
        ({**SELF_HOSTED, "runner_cidrs": ["192.0.2.0/28"]}, None, "github.runner_cidrs", "only with"),
        ({"cluster_access": "runner_cidrs"}, None, "github.runner_cidrs", "egress CIDRs"),
        (
            {"cluster_access": "runner_cidrs", "runner_cidrs": ["10.1.0.0/16"]},
            None,
            "github.runner_cidrs",
            "public IPv4",
        ),
        ({"cluster_access": "runner_cidrs", "runner_cidrs": ["0.0.0.0/0"]}, None, "github.runner_cidrs", "public IPv4"),
        ({"cluster_access": "hosted"}, None, "github.cluster_access", "self_hosted"),
        (
            {"cluster_access": "runner_cidrs", "runner_cidrs": ["192.0.2.0/28"]},
            {
                "mode": "new",
                "availability_zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
                "public_endpoint_cidrs": [],
            },
            "github.cluster_access",
            "endpoint is private",
        ),
        (
            {"cluster_access": "runner_cidrs", "runner_cidrs": ["192.0.2.0/28"]},
            {"mode": "existing", "name": "shared"},
            "github.cluster_access",
            "existing cluster",
        ),
    ],
)
def test_a_gitops_config_must_pick_how_ci_reaches_the_cluster(github, cluster, path, words):
    problems = _problems({"repository": "o/r", **github}, cluster=cluster)
    assert path in problems and words in problems[path], problems


def test_self_hosted_runners_are_admitted_to_the_cluster_security_group_on_443(recorded):
    for stack in ("dev", "prod"):
        rec = recorded(stack)
        [cluster] = rec.of_type("aws:eks/cluster:Cluster")
        cluster_sg = cluster.outputs["vpcConfig"]["clusterSecurityGroupId"]
        rules = [
            r.inputs
            for r in rec.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
            if r.inputs.get("referencedSecurityGroupId") in cfg_github(stack)["runner_security_group_ids"]
        ]
        assert len(rules) == 1
        assert rules[0]["securityGroupId"] == cluster_sg
        assert (rules[0]["ipProtocol"], rules[0]["fromPort"], rules[0]["toPort"]) == ("tcp", 443, 443)
    cfg = stack_config("dev")
    cfg["gpuloan:github"].update(runner_security_group_ids=[], runner_private_cidrs=["10.60.4.0/24"])
    [rule] = [
        r.inputs
        for r in run_stack("dev", cfg).of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
        if r.inputs.get("cidrIpv4") == "10.60.4.0/24"
    ]
    assert (rule["fromPort"], rule["toPort"]) == (443, 443)


def cfg_github(stack: str) -> dict:
    return stack_config(stack)["gpuloan:github"]


def test_runner_cidrs_join_the_endpoint_allow_list(recorded):
    cfg = stack_config("dev")
    cfg["gpuloan:github"].update(
        cluster_access="runner_cidrs", runner_cidrs=["192.0.2.0/28"], runner_labels=[], runner_security_group_ids=[]
    )
    (cluster,) = run_stack("dev", cfg).of_type("aws:eks/cluster:Cluster")
    vpc = cluster.inputs["vpcConfig"]
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24", "192.0.2.0/28"]  # the config's, then CI's
    (prod,) = recorded("prod").of_type("aws:eks/cluster:Cluster")  # self_hosted: the allow-list is unchanged
    assert prod.inputs["vpcConfig"]["publicAccessCidrs"] == ["198.51.100.0/24"]
    assert prod.inputs["vpcConfig"]["endpointPrivateAccess"] is True  # runners in the VPC reach it privately
