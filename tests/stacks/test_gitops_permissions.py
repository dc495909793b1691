"""The CI roles' permissions against the table of what each declared resource type needs (issue 13).

Every resource of the dev and prod plans is walked: a type the table does not know, a refresh read the preview role
lacks, or a create/update/delete action the deploy role lacks fails here. The deploy role's scoping (dev cannot
change prod, no admin role can be minted) is checked on the policy documents with tests/iam_eval.py.
"""

from __future__ import annotations

import json
from pricing import checks

import pytest
from conftest import STACKS, resolved_prices
from iam_eval import allowed, granted_somewhere

from stacks.gitops import ci_rbac, iam_permissions as perms

ACCOUNT = "123456789012"
REGION = "us-east-1"


def declared_types(rec) -> set[str]:
    return {r.type for r in rec.resources if r.custom}


def preview_doc(rec) -> dict:
    (pol,) = [r for r in rec.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-github-preview-read")]
    return json.loads(pol.inputs["policy"])


def deploy_docs(rec) -> list[dict]:
    docs = [
        json.loads(r.inputs["policy"])
        for r in rec.of_type("aws:iam/policy:Policy")
        if "-github-deploy-manage-" in r.name
    ]
    assert docs
    return docs


def boundary_doc(rec) -> dict:
    (pol,) = [r for r in rec.of_type("aws:iam/policy:Policy") if r.name.endswith("-role-boundary")]
    return json.loads(pol.inputs["policy"])


def arn(service: str, rest: str, region: str = REGION) -> str:
    return f"arn:aws:{service}:{region}:{ACCOUNT}:{rest}"


def tagged(env: str) -> dict:
    return {"aws:ResourceTag/gpuloan:environment": env}


# --- the table covers the plans -----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_declared_resource_type_has_an_entry(recorded, stack):
    assert perms.missing_types(declared_types(recorded(stack))) == []


def test_a_type_without_an_entry_is_reported():
    assert perms.missing_types(["aws:s3/bucketV2:BucketV2", "aws:iam/role:Role"]) == ["aws:s3/bucketV2:BucketV2"]


def test_every_entry_cites_its_source():
    for type_, needs in perms.TABLE.items():
        assert needs.source.startswith("https://"), type_
        assert needs.read, f"{type_}: a refresh reads something"
        assert needs.create, f"{type_}: creating calls something"
        for action in (*needs.read, *needs.mutating):
            assert ":" in action and "*" not in action, f"{type_}: {action} (exact actions, no wildcards)"


@pytest.mark.parametrize("stack", STACKS)
def test_preview_role_can_refresh_every_declared_resource(recorded, stack):
    rec = recorded(stack)
    doc = preview_doc(rec)
    for r in rec.resources:
        needs = perms.needs_for(r.type)
        for action in needs.read if needs else ():
            resource = "*"
            if action.startswith("lambda:"):  # scoped to the stack's functions: read them by their ARN
                name = r.inputs.get("name") or r.inputs.get("functionName") or r.inputs.get("function")
                resource = arn("lambda", f"function:{name}")
            if action in perms.OWN_IMAGE_READS:  # scoped to the stack's repositories: the image's, from its tag
                repository = r.inputs["tags"][0].split("/", 1)[1].rsplit(":", 1)[0]
                resource = arn("ecr", f"repository/{repository}")
            assert allowed(doc, action, resource), f"{r.name} ({r.type}): preview cannot {action}"


def test_the_check_catches_the_old_wildcard_preview_policy():
    # The previous preview policy: Describe*/List*/Get* per service. Reading a budget is budgets:ViewBudget.
    old = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Resource": "*",
                "Action": [
                    f"{svc}:{verb}*" for svc in ("budgets", "ec2", "eks") for verb in ("Describe", "List", "Get")
                ],
            }
        ],
    }
    missing = [a for a in perms.TABLE["aws:budgets/budget:Budget"].read if not allowed(old, a)]
    assert missing == ["budgets:ViewBudget"]


@pytest.mark.parametrize("stack", STACKS)
def test_deploy_role_is_granted_every_action_of_every_declared_type(recorded, stack):
    rec = recorded(stack)
    docs = deploy_docs(rec)
    for type_ in sorted(declared_types(rec)):
        needs = perms.needs_for(type_)
        for action in (*needs.read, *needs.mutating) if needs else ():
            if action in perms.ADMINISTRATOR_ONLY:
                # The administrator's `pulumi up` makes these (issue 42): never granted to the deploy role.
                assert not granted_somewhere(docs, action), f"{type_}: deploy role holds {action}"
                continue
            assert granted_somewhere(docs, action), f"{type_}: deploy role lacks {action}"


@pytest.mark.parametrize("stack", STACKS)
def test_both_roles_can_look_up_prices(recorded, stack):
    rec = recorded(stack)
    for action in perms.PRICING_ACTIONS:
        assert allowed(preview_doc(rec), action) and allowed(deploy_docs(rec), action), action


# --- preview: nothing beyond refresh ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        "kms:Decrypt",
        "kms:GenerateDataKey",
        "ssm:GetParameter",
        "ssm:GetParameters",
        "secretsmanager:GetSecretValue",
        "lambda:GetLayerVersion",
        "ecr:GetDownloadUrlForLayer",
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:Scan",
        "logs:GetLogEvents",
        "logs:FilterLogEvents",
        "sqs:ReceiveMessage",
        "s3:GetObject",
        "ce:GetCostAndUsage",
        "iam:PassRole",
        "sts:AssumeRole",
    ],
)
@pytest.mark.parametrize("stack", STACKS)
def test_preview_role_reads_no_data_and_decrypts_nothing(recorded, stack, action):
    assert not allowed(preview_doc(recorded(stack)), action)


@pytest.mark.parametrize("stack", STACKS)
def test_preview_role_reads_only_its_own_functions(recorded, stack):
    """GetFunction returns a function's environment variables and a link to its code: only this stack's."""
    doc = preview_doc(recorded(stack))
    other = "prod" if stack == "dev" else "dev"
    assert allowed(doc, "lambda:GetFunction", arn("lambda", f"function:gpuloan-{stack}-policy"))
    for name in (f"gpuloan-{other}-policy", "payroll-export", "gpuloan"):
        for action in ("lambda:GetFunction", "lambda:GetPolicy", "lambda:ListVersionsByFunction"):
            assert not allowed(doc, action, arn("lambda", f"function:{name}")), (action, name)
    assert not allowed(doc, "lambda:GetFunction", arn("lambda", f"function:gpuloan-{stack}-policy", "eu-west-1"))


@pytest.mark.parametrize("stack", STACKS)
def test_preview_role_reads_image_manifests_of_its_own_repositories_only(recorded, stack):
    """Issue 42 item 3: ecr:BatchGetImage (an image's manifest) was granted on `*`."""
    doc = preview_doc(recorded(stack))
    other = "prod" if stack == "dev" else "dev"
    assert allowed(doc, "ecr:BatchGetImage", arn("ecr", f"repository/gpuloan/{stack}/pytorch"))
    for repository in (f"gpuloan/{other}/pytorch", "payroll/api", "gpuloan"):
        assert not allowed(doc, "ecr:BatchGetImage", arn("ecr", f"repository/{repository}")), repository
    assert not allowed(doc, "ecr:BatchGetImage", "*")


@pytest.mark.parametrize("stack", STACKS)
def test_deploy_role_reads_images_and_layers_of_its_own_repositories_only(recorded, stack):
    docs = deploy_docs(recorded(stack))
    other = "prod" if stack == "dev" else "dev"
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"):
        assert allowed(docs, action, arn("ecr", f"repository/gpuloan/{stack}/pytorch")), action
        for repository in (f"gpuloan/{other}/pytorch", "payroll/api"):
            assert not allowed(docs, action, arn("ecr", f"repository/{repository}")), (action, repository)


@pytest.mark.parametrize("stack", STACKS)
def test_preview_role_holds_exact_read_actions_only(recorded, stack):
    for action in [a for st in preview_doc(recorded(stack))["Statement"] for a in st["Action"]]:
        assert "*" not in action, action
        assert action.split(":")[1].startswith(("Describe", "Get", "List", "View", "BatchGet")), action


def test_preview_kubernetes_reader_lists_every_declared_kind_and_no_secret(recorded):
    rec = recorded("prod")
    (role,) = [
        r
        for r in rec.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
        if r.inputs["metadata"]["name"] == ci_rbac.READER
    ]
    rules = role.inputs["rules"]
    readable = {(g, res) for rule in rules for g in rule["apiGroups"] for res in rule["resources"]}
    assert all(set(rule["verbs"]) == {"get", "list", "watch"} for rule in rules)
    assert not any(res in ("secrets", "*") for _, res in readable)
    for type_ in declared_types(rec):
        if type_.startswith("kubernetes:") and type_ != "kubernetes:helm.sh/v3:Release":
            assert perms.KUBERNETES_KINDS[type_] in readable, type_
    secrets = [
        r
        for r in rec.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
        if r.inputs["metadata"]["name"].startswith(ci_rbac.READER)
    ]
    # The Helm release records of the two charts (GPU Operator, Kueue), nowhere else.
    assert sorted(r.inputs["metadata"]["namespace"] for r in secrets) == ["gpu-operator", "kueue-system"]
    for role in secrets:
        assert role.inputs["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]


def test_preview_access_entry_maps_to_the_reader_group_without_an_access_policy(recorded):
    rec = recorded("prod")
    (entry,) = [r for r in rec.of_type("aws:eks/accessEntry:AccessEntry") if r.name.endswith("-preview-access")]
    assert entry.inputs["kubernetesGroups"] == [ci_rbac.PREVIEW_GROUP]
    assert not [
        r for r in rec.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation") if "-preview-" in r.name
    ]
    (binding,) = [
        r
        for r in rec.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
        if r.inputs["metadata"]["name"] == ci_rbac.READER
    ]
    assert binding.inputs["subjects"][0]["name"] == ci_rbac.PREVIEW_GROUP


# --- deploy: only this environment --------------------------------------------------------------------------


def _requests(env: str) -> list[tuple[str, str, dict]]:
    """Changes a deploy of `env` makes to its own resources (each must be allowed for env, denied for the other)."""
    p = f"gpuloan-{env}"
    return [
        ("eks:UpdateNodegroupConfig", arn("eks", f"nodegroup/{p}/{env}-training-elastic-spot/uuid"), {}),
        ("eks:DeleteCluster", arn("eks", f"cluster/{p}"), {}),
        ("eks:AssociateAccessPolicy", arn("eks", f"access-entry/{p}/role/{ACCOUNT}/x/uuid"), {}),
        ("budgets:ModifyBudget", f"arn:aws:budgets::{ACCOUNT}:budget/{p}-training", {}),
        ("budgets:ModifyBudget", f"arn:aws:budgets::{ACCOUNT}:budget/{p}", {}),
        ("lambda:UpdateFunctionCode", arn("lambda", f"function:{p}-policy"), {}),
        ("dynamodb:DeleteTable", arn("dynamodb", f"table/{p}-policy-state"), {}),
        ("sns:SetTopicAttributes", arn("sns", f"{p}-alerts"), {}),
        ("sqs:DeleteQueue", arn("sqs", f"{p}-policy-dlq"), {}),
        ("cloudwatch:PutMetricAlarm", arn("cloudwatch", f"alarm:{p}-training-idle-waste"), {}),
        ("cloudwatch:PutDashboard", f"arn:aws:cloudwatch::{ACCOUNT}:dashboard/{p}", {}),
        ("logs:DeleteLogGroup", arn("logs", f"log-group:/aws/lambda/{p}-policy:*"), {}),
        ("scheduler:UpdateSchedule", arn("scheduler", f"schedule/default/{p}-policy-tick"), {}),
        ("ecr:PutImage", arn("ecr", f"repository/gpuloan/{env}/pytorch"), {}),
        ("ec2:DeleteSubnet", arn("ec2", "subnet/subnet-0abc"), tagged(env)),
        ("ec2:CreateLaunchTemplateVersion", arn("ec2", "launch-template/lt-0abc"), tagged(env)),
        ("ec2:CancelCapacityReservation", arn("ec2", "capacity-reservation/cr-0abc"), tagged(env)),
        ("ec2:CreateSubnet", arn("ec2", "subnet/*"), {"aws:RequestTag/gpuloan:environment": env}),
        ("ec2:CreateSubnet", arn("ec2", "vpc/vpc-0abc"), {**tagged(env), "aws:RequestTag/gpuloan:environment": env}),
        (
            "ec2:AuthorizeSecurityGroupIngress",
            arn("ec2", "security-group/sg-0eks"),
            {"aws:ResourceTag/aws:eks:cluster-name": p},
        ),
        ("kms:ScheduleKeyDeletion", arn("kms", "key/1234"), tagged(env)),
        ("kms:CreateAlias", arn("kms", f"alias/{p}-alerts"), {}),
        (
            "iam:PutRolePolicy",
            f"arn:aws:iam::{ACCOUNT}:role/gpuloan/{env}/{p}-policy-us-east-1",
            {"iam:PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/gpuloan-ci/{env}/{p}-boundary"},
        ),
        (
            "iam:DeleteRole",
            f"arn:aws:iam::{ACCOUNT}:role/gpuloan/{env}/{env}-cluster-node-role-abc",
            {**tagged(env), "iam:PermissionsBoundary": f"arn:aws:iam::{ACCOUNT}:policy/gpuloan-ci/{env}/{p}-boundary"},
        ),
        (
            "iam:PassRole",
            f"arn:aws:iam::{ACCOUNT}:role/gpuloan/{env}/{env}-cluster-node-role-abc",
            {"iam:PassedToService": "eks.amazonaws.com"},
        ),
        (
            "iam:DeleteOpenIDConnectProvider",
            f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/X",
            tagged(env),
        ),
    ]


@pytest.mark.parametrize("own, other", [("dev", "prod"), ("prod", "dev")])
def test_deploy_role_changes_its_own_environment_and_not_the_other(recorded, own, other):
    own_docs = deploy_docs(recorded(own))
    needed = set(perms.mutating_actions(declared_types(recorded(own))))
    for action, resource, context in _requests(own):
        if action not in needed:
            continue  # e.g. dev has no capacity reservation, so its role cannot cancel one
        assert allowed(own_docs, action, resource, context), (own, action, resource)
    for action, resource, context in _requests(other):
        assert not allowed(own_docs, action, resource, context), f"{own} may {action} {resource}"


@pytest.mark.parametrize("stack", STACKS)
def test_deploy_role_cannot_mint_an_admin_role(recorded, stack):
    docs = deploy_docs(recorded(stack))
    role = f"arn:aws:iam::{ACCOUNT}:role/gpuloan/{stack}/x"
    boundary = f"arn:aws:iam::{ACCOUNT}:policy/gpuloan-ci/{stack}/gpuloan-{stack}-boundary"
    with_boundary = {"iam:PermissionsBoundary": boundary}
    assert allowed(docs, "iam:CreateRole", role, {**with_boundary, "aws:RequestTag/gpuloan:environment": stack})
    with_boundary = {**with_boundary, "aws:RequestTag/gpuloan:environment": stack}
    assert not allowed(docs, "iam:CreateRole", role)  # no boundary
    assert not allowed(
        docs, "iam:CreateRole", role, {"iam:PermissionsBoundary": "arn:aws:iam::aws:policy/AdministratorAccess"}
    )
    assert not allowed(docs, "iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/admin", with_boundary)  # outside the path
    assert not allowed(docs, "iam:AttachRolePolicy", role)  # a role without the boundary
    assert not allowed(docs, "iam:DeleteRolePermissionsBoundary", role, with_boundary)
    # Removing what a role may do also names the boundary it carries.
    for action in ("iam:DeleteRolePolicy", "iam:DetachRolePolicy"):
        assert allowed(docs, action, role, with_boundary) and not allowed(docs, action, role), action
    # Trust-policy edits, deletes and role settings (iam:PermissionsBoundary is in their context: the Service
    # Authorization Reference for IAM) need the environment's tag and the boundary on the role: a role under the path
    # that an administrator made without the boundary cannot be taken over through its trust policy.
    bounded = {"iam:PermissionsBoundary": boundary}
    for action in ("iam:UpdateAssumeRolePolicy", "iam:DeleteRole", "iam:UpdateRole", "iam:UpdateRoleDescription"):
        assert allowed(docs, action, role, {**tagged(stack), **bounded}), action
        assert not allowed(docs, action, role, tagged(stack)), f"{action} on a tagged role without the boundary"
        assert not allowed(docs, action, role, bounded), f"{action} on an untagged role of the path"
        assert not allowed(docs, action, role, {**tagged("prod" if stack == "dev" else "dev"), **bounded}), action
    # Tag changes carry no iam:PermissionsBoundary: the environment's tag on the role.
    assert allowed(docs, "iam:UntagRole", role, tagged(stack))
    assert not allowed(docs, "iam:UntagRole", role)
    assert not allowed(docs, "iam:UntagRole", role, tagged("prod" if stack == "dev" else "dev"))
    # Its own roles and the boundary are the administrator's.
    ci_role = f"arn:aws:iam::{ACCOUNT}:role/gpuloan-ci/{stack}/gpuloan-{stack}-github-deploy"
    for action in ("iam:PutRolePolicy", "iam:AttachRolePolicy", "iam:UpdateAssumeRolePolicy", "iam:DeleteRole"):
        assert not allowed(docs, action, ci_role, with_boundary), action
    for action in ("iam:CreatePolicyVersion", "iam:DeletePolicy", "iam:SetDefaultPolicyVersion"):
        assert not allowed(docs, action, boundary), action
    assert not allowed(docs, "iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/x")
    # The account's GitHub provider (not tagged by the deploy role) stays as the administrator made it.
    github = f"arn:aws:iam::{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com"
    assert not allowed(docs, "iam:DeleteOpenIDConnectProvider", github)


@pytest.mark.parametrize("stack", STACKS)
def test_no_mutating_action_on_star_without_a_reason(recorded, stack):
    for doc in deploy_docs(recorded(stack)):
        for st in doc["Statement"]:
            if st["Resource"] != "*" or st["Sid"] == "Refresh":
                continue
            keys = {k for pairs in st.get("Condition", {}).values() for k in pairs}
            scoped = any(k.startswith(("aws:RequestTag/", "aws:ResourceTag/")) or k == "ec2:CreateAction" for k in keys)
            for action in st["Action"]:
                assert scoped or action in perms.UNSCOPABLE, f"{st['Sid']}: {action} on * unscoped and unexplained"
    (refresh,) = [st for d in deploy_docs(recorded(stack)) for st in d["Statement"] if st["Sid"] == "Refresh"]
    assert all(a.split(":")[1].startswith(("Describe", "Get", "List", "View", "BatchGet")) for a in refresh["Action"])


@pytest.mark.parametrize("stack", STACKS)
def test_deploy_policies_fit_iams_managed_policy_size(recorded, stack):
    docs = deploy_docs(recorded(stack))
    assert len(docs) <= perms.ROLE_MANAGED_POLICIES_MAX
    assert all(perms.policy_size(d) <= perms.MANAGED_POLICY_MAX_CHARS for d in docs)
    sids = [st["Sid"] for d in docs for st in d["Statement"]]
    assert len(sids) == len(set(sids))


# --- roles the stack creates --------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_role_is_under_its_path_with_the_boundary(recorded, stack):
    rec = recorded(stack)
    (boundary,) = [r for r in rec.of_type("aws:iam/policy:Policy") if r.name.endswith("-role-boundary")]
    assert boundary.inputs["path"] == f"/gpuloan-ci/{stack}/"
    roles = rec.of_type("aws:iam/role:Role")
    assert len(roles) >= 8
    for role in roles:
        if role.name.endswith("-github-preview"):
            assert role.inputs["path"] == f"/gpuloan-ci/{stack}/" and "permissionsBoundary" not in role.inputs
        elif role.name.endswith("-github-deploy"):
            # Its own boundary (the ceiling over its policies), not the workload one.
            (own,) = [r for r in rec.of_type("aws:iam/policy:Policy") if r.name.endswith("-github-deploy-boundary")]
            assert own.inputs["path"] == f"/gpuloan-ci/{stack}/"
            assert role.inputs["path"] == f"/gpuloan-ci/{stack}/"
            assert role.inputs["permissionsBoundary"] == own.outputs["arn"]
        else:
            assert role.inputs["path"] == f"/gpuloan/{stack}/", role.name
            assert role.inputs["permissionsBoundary"] == boundary.outputs["arn"], role.name


@pytest.mark.parametrize("stack", STACKS)
def test_boundary_grants_no_iam_and_nothing_on_another_environment(recorded, stack):
    doc = boundary_doc(recorded(stack))
    other = "prod" if stack == "dev" else "dev"
    assert allowed(doc, "eks:UpdateNodegroupConfig", "*", tagged(stack))
    assert not allowed(doc, "eks:UpdateNodegroupConfig", "*", tagged(other))
    for action in (
        "iam:CreateRole",
        "iam:PutRolePolicy",
        "iam:AttachRolePolicy",
        "iam:PassRole",
        "organizations:LeaveOrganization",
        "sts:AssumeRole",
    ):
        assert not allowed(doc, action, "*"), action
    assert allowed(
        doc, "iam:CreateServiceLinkedRole", "*", {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}
    )


# --- a self-managed S3 backend through the roles (no Pulumi token in CI) ------------------------------------


KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


@pytest.fixture(scope="module")
def s3_backend_dev():
    from conftest import run_stack, stack_config

    cfg = stack_config("dev")
    cfg["gpuloan:github"].update(state_bucket="example-pulumi-state", state_kms_key_arn=KEY)
    return run_stack("dev", cfg)


def test_preview_reads_only_its_own_state_and_never_writes_it(s3_backend_dev):
    doc = preview_doc(s3_backend_dev)
    bucket = "arn:aws:s3:::example-pulumi-state"
    own, other = f"{bucket}/.pulumi/stacks/gpuloan/dev.json", f"{bucket}/.pulumi/stacks/gpuloan/prod.json"
    assert allowed(doc, "s3:GetObject", own)
    assert not allowed(doc, "s3:GetObject", other)
    assert not allowed(doc, "s3:PutObject", own) and not allowed(doc, "s3:DeleteObject", own)
    assert allowed(doc, "s3:PutObject", f"{bucket}/.pulumi/locks/organization/gpuloan/dev/l.json")
    assert allowed(doc, "kms:Decrypt", KEY) and not allowed(doc, "kms:Encrypt", KEY)
    assert not allowed(doc, "kms:Decrypt", KEY.replace("0f1e", "aaaa"))


def test_deploy_writes_its_own_state_only(s3_backend_dev):
    docs = deploy_docs(s3_backend_dev)
    bucket = "arn:aws:s3:::example-pulumi-state"
    assert allowed(docs, "s3:PutObject", f"{bucket}/.pulumi/stacks/gpuloan/dev.json")
    assert allowed(docs, "s3:PutObject", f"{bucket}/.pulumi/history/gpuloan/dev/dev-1.checkpoint.json")
    assert not allowed(docs, "s3:PutObject", f"{bucket}/.pulumi/stacks/gpuloan/prod.json")
    assert allowed(docs, "kms:Encrypt", KEY)
    assert all(perms.policy_size(d) <= perms.MANAGED_POLICY_MAX_CHARS for d in docs)


def test_state_key_without_a_bucket_is_refused():
    from conftest import stack_config

    from config import config

    data = {k.split(":", 1)[1]: v for k, v in stack_config("dev").items() if k.startswith("gpuloan:")}
    data["github"]["state_kms_key_arn"] = KEY
    with pytest.raises(config.ConfigError) as err:
        checks.parse(data, prices=resolved_prices())
    assert "github.state_kms_key_arn" in dict(err.value.problems)


def test_docs_permission_table_is_generated_from_the_code():
    from conftest import REPO

    assert (REPO / "docs" / "iam-permissions.md").read_text() == perms.markdown(), (
        "run: python -m stacks.gitops.iam_permissions > docs/iam-permissions.md"
    )


def test_every_service_the_deploy_role_changes_has_its_scope_documented(recorded):
    services = {a.split(":")[0] for stack in STACKS for a in perms.mutating_actions(declared_types(recorded(stack)))}
    assert services <= set(perms.SCOPE_BY_SERVICE), services - set(perms.SCOPE_BY_SERVICE)


@pytest.mark.parametrize("stack", STACKS)
def test_every_invoke_the_program_makes_has_an_entry_and_both_roles_may_call_it(recorded, stack):
    """Data sources run in previews and deploys alike (stacks/capacity/live_sizes.py reads the node groups' live sizes):
    a missing entry would fail both jobs on a real account, never under the mocks."""
    rec = recorded(stack)
    invoked = set(rec.invokes)
    assert "aws:eks/getNodeGroups:getNodeGroups" in invoked  # the live-size read this test was written for
    assert sorted(invoked - set(perms.INVOKES)) == []
    deploy_actions = {
        a
        for d in deploy_docs(rec)
        for st in d["Statement"]
        if st["Effect"] == "Allow"
        for a in ([st["Action"]] if isinstance(st.get("Action"), str) else st.get("Action") or [])
    }
    for token in invoked:
        for action in perms.INVOKES[token]:
            assert allowed(preview_doc(rec), action, "*"), f"preview cannot {action} ({token})"
            assert action in deploy_actions, f"deploy cannot {action} ({token})"


@pytest.mark.parametrize("stack", STACKS)
def test_deploy_roles_own_boundary_caps_whatever_its_policies_grant(recorded, stack):
    """Even an allow-everything policy on the deploy role could not reach the administrator's resources, mint
    users, assume roles or touch the other environment: the boundary takes those away."""
    rec = recorded(stack)
    (policy,) = [r for r in rec.of_type("aws:iam/policy:Policy") if r.name.endswith("-github-deploy-boundary")]
    boundary = json.loads(policy.inputs["policy"])
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    other = "prod" if stack == "dev" else "dev"
    ci = f"arn:aws:iam::{ACCOUNT}:role/gpuloan-ci/{stack}/gpuloan-{stack}-github-deploy"
    ci_policy = f"arn:aws:iam::{ACCOUNT}:policy/gpuloan-ci/{stack}/gpuloan-{stack}-github-deploy-1"
    github = f"arn:aws:iam::{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com"
    for action, resource in (
        ("iam:PutRolePolicy", ci),
        ("iam:DeleteRolePermissionsBoundary", ci),
        ("iam:UpdateAssumeRolePolicy", ci),
        ("iam:CreatePolicyVersion", ci_policy),
        ("iam:DeleteOpenIDConnectProvider", github),
        ("iam:CreateUser", "*"),
        ("iam:CreateAccessKey", "*"),
        ("sts:AssumeRole", "*"),
        ("organizations:LeaveOrganization", "*"),
    ):
        assert allowed(everything, action, resource), action
        assert not allowed(everything, action, resource, boundary=boundary), action
    assert not allowed(everything, "eks:DeleteCluster", "*", tagged(other), boundary=boundary)
    assert allowed(everything, "eks:DeleteCluster", "*", tagged(stack), boundary=boundary)
    # Only the services its policies use (and no `*` on `*`, which the guardrail roles-no-star-on-star refuses).
    (allow,) = [st for st in boundary["Statement"] if st["Effect"] == "Allow"]
    assert "*" not in allow["Action"]
    assert not allowed(everything, "secretsmanager:GetSecretValue", "*", boundary=boundary)


@pytest.mark.parametrize("stack", STACKS)
def test_unsubscribe_is_limited_to_the_stacks_region(recorded, stack):
    """sns:Unsubscribe has no resource type (Service Authorization Reference, SNS): the region is its only scope."""
    docs = deploy_docs(recorded(stack))
    sub = arn("sns", f"gpuloan-{stack}-alerts:0f1e2d3c")
    assert allowed(docs, "sns:Unsubscribe", sub, {"aws:RequestedRegion": REGION})
    assert not allowed(docs, "sns:Unsubscribe", sub.replace(REGION, "eu-west-1"), {"aws:RequestedRegion": "eu-west-1"})
    assert not allowed(docs, "sns:Unsubscribe", "*")
