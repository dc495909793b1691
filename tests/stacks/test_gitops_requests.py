"""Every create, update and delete of the dev and prod plans, as the requests the provider sends, against the deploy
role's policy documents (issue 24 item 1).

tests/provider_requests.py turns each resource of the recorded plan into the API calls the AWS provider makes on
create, update and delete, with the request context IAM evaluates (the new resource's ARN and `aws:RequestTag/*` on
create, `ec2:CreateAction` for EC2's tag-on-create, `aws:ResourceTag/*` on existing resources,
`iam:PermissionsBoundary`, `iam:PassedToService`). tests/iam_eval.py evaluates them against the generated documents
(and the deploy role's own permissions boundary, when it has one). Resources an administrator owns (the CI roles,
their policies, the boundary, the account's GitHub provider) must be refused instead.
"""

from __future__ import annotations

import json

import pytest
from conftest import STACKS
from iam_eval import allowed
from provider_requests import REQUESTS, Plan, requests_for

from stacks.gitops import iam_permissions as perms


def deploy_docs(rec) -> list[dict]:
    return [
        json.loads(r.inputs["policy"])
        for r in rec.of_type("aws:iam/policy:Policy")
        if "-github-deploy-manage-" in r.name
    ]


def deploy_boundary(rec) -> dict | None:
    """The deploy role's own permissions boundary document, if the plan gives it one."""
    (role,) = [r for r in rec.of_type("aws:iam/role:Role") if r.name.endswith("-github-deploy")]
    arn = role.inputs.get("permissionsBoundary")
    if not arn:
        return None
    (policy,) = [r for r in rec.of_type("aws:iam/policy:Policy") if r.outputs.get("arn") == arn]
    return json.loads(policy.inputs["policy"])


def administrators(p: Plan, r, req) -> bool:
    """Requests the deploy role must not be able to make: changes to the CI roles, their policies, the boundary and
    the account's GitHub provider (stacks/gitops/github_oidc.py, stacks/gitops/role_guard.py), and adopting a new VPC's default
    security group, which AWS creates untagged (a new VPC is an administrator's `pulumi up`, docs/gitops.md)."""
    ci = perms.ci_path(p.env)
    if req.op == "create" and (
        req.action in perms.ADMINISTRATOR_ONLY
        or (r.type == "aws:kms/key:Key" and req.action == "kms:TagResource" and req.resource == "*")
        or (
            r.type == "aws:iam/openIdConnectProvider:OpenIdConnectProvider"
            and req.action == "iam:TagOpenIDConnectProvider"
        )
    ):
        # KMS keys and the cluster's IRSA provider are created by the administrator's `pulumi up` (issue 42):
        # the tags their creates send could only be granted on resources of any owner (perms.ADMINISTRATOR_ONLY).
        return True
    if r.type == "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup":
        return req.op == "create" and not any(k.startswith("aws:ResourceTag/") for k in req.context)
    if r.type in ("aws:iam/role:Role", "aws:iam/policy:Policy"):
        return r.inputs.get("path") == ci
    if r.type in ("aws:iam/rolePolicy:RolePolicy", "aws:iam/rolePolicyAttachment:RolePolicyAttachment"):
        return f":role{ci}" in p.role_of(r)
    if r.type == "aws:iam/openIdConnectProvider:OpenIdConnectProvider":
        return "token.actions.githubusercontent.com" in r.outputs["arn"]
    return False


def plan_resources(rec) -> list:
    return [
        r
        for r in rec.resources
        if r.custom and r.type not in perms.NO_IAM_NEEDED and r.type not in perms.KUBERNETES_KINDS
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_type_of_the_plan_has_its_requests_mapped(recorded, stack):
    missing = sorted({r.type for r in plan_resources(recorded(stack))} - set(REQUESTS))
    assert missing == [], f"add these types to tests/provider_requests.py: {missing}"


@pytest.mark.parametrize("stack", STACKS)
def test_the_request_table_names_only_actions_the_permission_table_lists(recorded, stack):
    """The two tables describe the same provider: a call here that stacks/iam_permissions.TABLE lacks is a gap
    in the roles (or a mistake here)."""
    rec = recorded(stack)
    p = Plan(rec)
    for r in plan_resources(rec):
        needs = perms.TABLE[r.type]
        listed = set(needs.read) | set(needs.mutating)
        for req in requests_for(p, r):
            assert req.action in listed, f"{r.type}: {req.op} calls {req.action}, not in stacks/iam_permissions.TABLE"


def _decisions(rec):
    p = Plan(rec)
    docs = deploy_docs(rec)
    boundary = deploy_boundary(rec)
    for r in plan_resources(rec):
        for req in requests_for(p, r):
            ok = allowed(docs, req.action, req.resource, req.context, boundary=boundary)
            yield r, req, ok, administrators(p, r, req)


@pytest.mark.parametrize("stack", STACKS)
def test_deploy_role_may_make_every_request_of_its_plan(recorded, stack):
    refused = [
        f"{r.name} ({r.type}) {req.op}: {req.action} on {req.resource} {req.context}"
        for r, req, ok, admin in _decisions(recorded(stack))
        if not admin and not ok
    ]
    assert refused == [], "\n".join(refused)


@pytest.mark.parametrize("stack", STACKS)
def test_deploy_role_may_not_change_what_the_administrator_owns(recorded, stack):
    granted = [
        f"{r.name} {req.op}: {req.action} on {req.resource}"
        for r, req, ok, admin in _decisions(recorded(stack))
        if admin and ok and not perms._is_read(req.action)
    ]  # reading them is refresh, not change
    assert granted == [], "\n".join(granted)
    assert any(admin for _, _, _, admin in _decisions(recorded(stack)))


@pytest.mark.parametrize("own, other", [("dev", "prod"), ("prod", "dev")])
def test_deploy_role_cannot_make_the_other_environments_requests(recorded, own, other):
    """The other stack's plan, evaluated against this stack's role: nothing of it may go through, except requests
    that name no resource of either environment (reads, the registry token)."""
    docs, boundary = deploy_docs(recorded(own)), deploy_boundary(recorded(own))
    rec = recorded(other)
    p = Plan(rec)
    leaked = []
    for r in plan_resources(rec):
        for req in requests_for(p, r):
            shared = ":role/aws-service-role/" in req.resource  # the account's service-linked roles
            if perms._is_read(req.action) or req.action in perms.UNSCOPABLE or shared:
                continue  # refresh reads (on *), actions AWS authorizes only on *, service-linked roles
            if allowed(docs, req.action, req.resource, req.context, boundary=boundary):
                leaked.append(f"{r.name} {req.op}: {req.action} on {req.resource}")
    assert leaked == [], "\n".join(leaked)


def test_a_launch_template_create_is_refused_with_the_iam_action_in_create_action():
    """The bug of issue 24: `ec2:CreateAction` holds the API name; the old value never matches."""
    scope = perms.Scope("aws", "123456789012", "us-east-1", "dev", "gpuloan-dev")
    doc = perms.deploy_policy_document(["aws:ec2/launchTemplate:LaunchTemplate"], scope)
    new = {"aws:RequestTag/gpuloan:environment": "dev", "aws:TagKeys": ["gpuloan:environment"]}
    lt = "arn:aws:ec2:us-east-1:123456789012:launch-template/*"
    assert allowed(doc, "ec2:CreateLaunchTemplate", lt, new)
    assert allowed(doc, "ec2:CreateTags", lt, {**new, "ec2:CreateAction": "CreateLaunchTemplate"})
    assert not allowed(doc, "ec2:CreateTags", lt, {**new, "ec2:CreateAction": "ec2:CreateLaunchTemplate"})
    # Tagging on create only with this environment's tag; never a standalone CreateTags on someone else's resource.
    assert not allowed(
        doc,
        "ec2:CreateTags",
        lt,
        {"aws:RequestTag/gpuloan:environment": "prod", "ec2:CreateAction": "CreateLaunchTemplate"},
    )
    assert not allowed(doc, "ec2:CreateTags", "arn:aws:ec2:us-east-1:123456789012:launch-template/lt-1", new)


def test_the_deploy_role_cannot_adopt_an_untagged_key_role_or_provider():
    """Issue 42: kms:TagResource on `*` for a key without an environment tag let the deploy role tag any untagged
    key of the region, then re-policy, grant or delete it. Tagging an existing resource now needs this environment's
    tag on it already (and a role's create-time tag only under the environment's path)."""
    scope = perms.Scope("aws", "123456789012", "us-east-1", "dev", "gpuloan-dev")
    doc = perms.deploy_policy_document(
        [
            "aws:kms/key:Key",
            "aws:kms/alias:Alias",
            "aws:iam/role:Role",
            "aws:iam/openIdConnectProvider:OpenIdConnectProvider",
        ],
        scope,
    )
    adopt = {
        "aws:RequestTag/gpuloan:environment": "dev",
        "aws:TagKeys": ["gpuloan:environment"],
        "aws:RequestedRegion": "us-east-1",
    }
    key = "arn:aws:kms:us-east-1:123456789012:key/0f1e2d3c"
    for resource in ("*", key):
        assert not allowed(doc, "kms:TagResource", resource, adopt), resource
    assert not allowed(doc, "kms:CreateKey", "*", adopt)
    for action in ("kms:PutKeyPolicy", "kms:ScheduleKeyDeletion", "kms:EnableKeyRotation"):
        assert not allowed(doc, action, key, {"aws:RequestedRegion": "us-east-1"}), action
        assert allowed(doc, action, key, {"aws:ResourceTag/gpuloan:environment": "dev"}), action
    # An own key cannot be handed to another environment either.
    assert not allowed(
        doc,
        "kms:TagResource",
        key,
        {"aws:ResourceTag/gpuloan:environment": "dev", "aws:RequestTag/gpuloan:environment": "prod"},
    )
    # Another cluster's IRSA provider (untagged) cannot be tagged, then deleted.
    provider = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
    assert not allowed(doc, "iam:TagOpenIDConnectProvider", provider, adopt)
    assert not allowed(doc, "iam:CreateOpenIDConnectProvider", provider, adopt)
    # Roles: tags on an existing role only while it carries this environment's tag; a create's tags only with this
    # environment's tag, on the environment's path.
    role = "arn:aws:iam::123456789012:role/gpuloan/dev/x"
    assert not allowed(doc, "iam:TagRole", role, {"aws:RequestTag/team": "x", "aws:TagKeys": ["team"]})
    assert not allowed(doc, "iam:TagRole", role, {"aws:RequestTag/gpuloan:environment": "prod"})
    assert not allowed(doc, "iam:TagRole", "arn:aws:iam::123456789012:role/other", adopt)
    assert not allowed(doc, "iam:TagRole", role, {**adopt, "aws:ResourceTag/gpuloan:environment": "prod"})
    assert allowed(doc, "iam:TagRole", role, adopt)
    bound = {"iam:PermissionsBoundary": scope.boundary_arn}
    assert allowed(doc, "iam:CreateRole", role, {**adopt, **bound})
    assert not allowed(doc, "iam:CreateRole", role, bound)  # a role is born with the environment's tag
