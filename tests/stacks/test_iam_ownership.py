"""No role of the stack may change, tag, re-policy or delete a resource this environment did not create (issue 42).

Every identity policy the program generates (the deploy role's managed policies, the preview role's inline policy,
the policy function's and the scheduler's inline policies, and any policy a role added later gets) is read from the
dev and prod plans and evaluated statement by statement. For each Allow statement and each action that is not a
read, the statement's resources must be

- this environment's own names: an ARN of a resource of the plan, or a name pattern of the environment
  (stacks/gitops/iam_permissions.py `_named_resources`, the IAM path `/gpuloan/<env>/`); or
- guarded by a condition no resource of another owner can meet. tests/iam_eval.py evaluates the statement for a
  resource that matches its pattern but belongs to someone else, in every form such a resource takes: untagged
  (an existing untagged resource counts as another owner's), tagged for the other environment, and a look-alike
  that carries every tag the statement asks for except the ones that prove ownership (this environment's tag, an
  EKS cluster name). The request side is the attacker's: every request key (`aws:RequestTag/*`, `aws:TagKeys`,
  `aws:RequestedRegion`, `iam:PassedToService`, ...) is set to what the statement wants.

Actions that create a new resource (EC2's tag-on-create types, a Lambda's network interfaces, service-linked
roles) do not touch an existing one and are checked by tests/stacks/test_gitops_requests.py instead; actions AWS only
authorizes on `*` must be in perms.UNSCOPABLE with their reason. A failure names the role, policy, statement and
action. AWS managed policies attached to the workload roles are not generated here: each must be in
REVIEWED_AWS_MANAGED with why it is needed, and an unknown one fails.
"""

from __future__ import annotations

import json
import sys
import re

import pytest
from conftest import STACKS
from iam_eval import _glob, _listify, statement_applies

from stacks.gitops import iam_permissions as perms

ACCOUNT = "123456789012"  # the offline mocks' account (offline/runner.py)
REGION = "us-east-1"
OTHER_OWNER = "other-owner"

# Tag keys whose value proves whose a resource is: this environment's tag, and the cluster name EKS puts on what it
# makes for a cluster (`aws:` keys cannot be set by anyone but AWS).
OWNERSHIP_TAGS = (perms.ENV_TAG, "aws:eks:cluster-name", "eks:cluster-name")
# Condition keys the caller chooses with the request: an attacker sets them to whatever the statement wants.
REQUEST_KEYS = re.compile(
    r"^(aws:RequestTag/.+|aws:TagKeys|aws:RequestedRegion|iam:PassedToService|"
    r"iam:AWSServiceName|iam:PolicyARN|s3:prefix)$"
)
# Condition keys that describe the existing resource.
RESOURCE_KEYS = re.compile(r"^([a-z0-9-]+:ResourceTag/.+|iam:PermissionsBoundary)$")
# Keys only present when the request creates the resource (EC2's tag-on-create): never for an existing one.
CREATE_ONLY_KEYS = ("ec2:CreateAction",)

# Actions that make a new resource, by the ARN type they create: nothing of another owner is touched.
NEW_RESOURCE_ACTIONS: dict[str, str] = {
    **{a: f":{t}/" for a, t in perms.TAG_ON_CREATE.items()},
    "ec2:CreateNetworkInterface": ":network-interface/",  # a function's VPC interfaces (Lambda makes them)
    "iam:CreateServiceLinkedRole": ":role/aws-service-role/",  # AWS's own role for a service, one per account
}

# AWS managed policies the stack attaches (not generated here, so not evaluated statement by statement).
REVIEWED_AWS_MANAGED: dict[str, str] = {
    "AmazonEKSClusterPolicy": "the EKS control plane's role (EKS User Guide, cluster IAM role)",
    "AmazonEKSWorkerNodePolicy": "every node's role (EKS User Guide, node IAM role)",
    "AmazonEC2ContainerRegistryPullOnly": "nodes pull images (EKS User Guide, node IAM role)",
    "AmazonEKS_CNI_Policy": "the VPC CNI's IRSA role manages the nodes' network interfaces",
    "CloudWatchAgentServerPolicy": "the GPU metrics agent publishes metrics and logs",
}

# Statements this test flags that are not fixed yet: (role name suffix, statement Sid, action) -> why it is open
# and who owns the fix. The test fails when one is fixed (remove it here) and when any other appears.
OPEN_FINDINGS: dict[tuple[str, str, str], str] = {}

# Statements this test flags that AWS requires as they are: (role name suffix, statement Sid, action) -> the AWS
# reason and its source. Like an open finding, an entry the check no longer flags fails the test (remove it).
LAMBDA_VPC_GUIDE = (
    'Lambda developer guide, "Giving Lambda functions access to resources in an Amazon VPC", '
    "execution role permissions (docs.aws.amazon.com/lambda/latest/dg/configuration-vpc.html)"
)
ACCEPTED_EXCEPTIONS: dict[tuple[str, str, str], str] = {
    **{
        ("policy-role", "VpcNetworkInterfaces", a): (
            "Lambda itself creates and deletes the function's Hyperplane network interfaces and assigns their addresses "
            "with the execution role, on interfaces whose ids nobody knows in advance and that carry none of our tags. "
            "The guide: \"If you don't specify a resource ID for DeleteNetworkInterface in the execution role, your "
            "function may not be able to access the VPC. Either specify a unique resource ID, or include all resource "
            'IDs"; AWSLambdaVPCAccessExecutionRole grants the three on "*". A condition (ec2:Subnet, ec2:Vpc) is '
            "not a resource ID and is not among the forms the guide accepts, and the lifecycle cannot be exercised "
            "without AWS, so the statement keeps every interface of the region (hashicorp/terraform-provider-aws "
            "issue 20698: a narrower DeleteNetworkInterface resource made CreateFunction fail). " + LAMBDA_VPC_GUIDE
        )
        for a in ("ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses")
    },
    ("policy-role", "VpcDeleteNetworkInterfaces", "ec2:DeleteNetworkInterface"): (
        "DeleteNetworkInterface in exactly the form the Lambda guide gives (all resource IDs, "
        "arn:aws:ec2:<region>:<account>:*/*), since Lambda deletes the function's Hyperplane interfaces with the "
        "execution role and a narrower resource can make CreateFunction refuse it. " + LAMBDA_VPC_GUIDE
    ),
}


def _instance(pattern: str) -> str:
    """A concrete resource matching an ARN pattern, named by someone else where the pattern leaves the name open."""
    return pattern.replace("*", OTHER_OWNER).replace("?", "o")


# --- the generated identity policies of a plan ----------------------------------------------------------------


def _roles_by_id(rec) -> dict[str, object]:
    from offline.runner import _short_hash

    out = {}
    for r in rec.of_type("aws:iam/role:Role"):
        out[f"{r.name}-{_short_hash(rec.stack, r.type, r.name)}"] = r
        out[r.name] = r
        if r.inputs.get("name"):
            out[r.inputs["name"]] = r
    return out


def identity_policies(rec) -> list[tuple[str, str, dict]]:
    """(role, policy, document) of every policy the plan attaches to or puts on a role, and the AWS managed ones."""
    roles = _roles_by_id(rec)
    managed = {r.outputs.get("arn"): r for r in rec.of_type("aws:iam/policy:Policy")}
    out = []
    for r in rec.of_type("aws:iam/rolePolicy:RolePolicy"):
        role = roles[r.inputs["role"]]
        out.append((role.name, r.name, json.loads(r.inputs["policy"])))
    for r in rec.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment"):
        role = roles[r.inputs["role"]]
        arn = r.inputs["policyArn"]
        if arn in managed:
            out.append((role.name, managed[arn].name, json.loads(managed[arn].inputs["policy"])))
        else:
            out.append((role.name, arn, {}))  # AWS managed: checked against REVIEWED_AWS_MANAGED
    return out


def own_names(rec, state: perms.StateBackend | None = None) -> tuple[list[str], list[str]]:
    """(ARNs of the plan's resources, name patterns of the environment, its Pulumi state objects if any)."""
    (cluster,) = rec.of_type("aws:eks/cluster:Cluster")
    scope = perms.Scope("aws", ACCOUNT, REGION, rec.stack, cluster.inputs["name"])
    patterns = [p for ps in perms._named_resources(scope).values() for p in ps]
    patterns += [
        scope.arn("iam", f"role{perms.workload_path(rec.stack)}*", region=False),
        scope.arn("iam", f"policy{perms.workload_path(rec.stack)}*", region=False),
    ]
    if state is not None:
        # The stack's own objects of the self-managed backend (perms.StateBackend documents the layout).
        b = f"arn:aws:s3:::{state.bucket}/.pulumi"
        patterns += [
            f"{b}/stacks/{state.project}/{state.stack}.json*",
            *(f"{b}/{kind}/{state.project}/{state.stack}/*" for kind in ("history", "backups")),
            f"{b}/locks/organization/{state.project}/{state.stack}/*",
        ]
    from offline.runner import _short_hash

    arns = [a for r in rec.resources if r.custom for a in [r.outputs.get("arn")] if isinstance(a, str)]
    # Policies built from a resource's id (a security group's ARN from its id): the mocks' ids of the plan.
    ids = [f"{r.name}-{_short_hash(rec.stack, r.type, r.name)}" for r in rec.resources if r.custom]
    arns += [f"arn:aws:ec2:{REGION}:{ACCOUNT}:{kind}/{i}" for i in ids for kind in ("security-group", "subnet")]
    return arns, patterns


def _is_own(arn: str, plan_arns: list[str], patterns: list[str]) -> bool:
    if any(arn == a or arn.startswith((a + ":", a + "/")) for a in plan_arns):
        return True
    return any(_glob(p, arn) for p in patterns)


# --- the contexts of another owner's resource -----------------------------------------------------------------


def _satisfying(op: str, expected) -> str | list[str]:
    values = [str(v) for v in _listify(expected)]
    base = op.rpartition(":")[2].removesuffix("IfExists")
    if base in ("StringLike", "ArnLike"):
        return _instance(values[0])
    if base == "StringNotEquals":
        return OTHER_OWNER
    return values[0]


def foreign_contexts(st: dict, env: str) -> list[tuple[str, dict]]:
    """The request contexts of an attacker acting on another owner's resource matching this statement."""
    other_env = "prod" if env == "dev" else "dev"
    request: dict = {}
    lookalike: dict = {}
    for op, pairs in (st.get("Condition") or {}).items():
        base = op.rpartition(":")[2]
        for key, expected in pairs.items():
            if key in CREATE_ONLY_KEYS:
                continue  # absent for an existing resource
            if REQUEST_KEYS.match(key):
                if base != "Null":
                    request[key] = _satisfying(op, expected)
                continue
            if not RESOURCE_KEYS.match(key):
                raise AssertionError(
                    f"{st.get('Sid')}: condition key {key} is neither a request nor a resource key; "
                    "classify it in tests/stacks/test_iam_ownership.py"
                )
            tag = key.split("/", 1)[1] if "/" in key else key
            if base != "Null" and tag not in OWNERSHIP_TAGS and key != "iam:PermissionsBoundary":
                lookalike[key] = _satisfying(op, expected)
    if any(k.startswith("aws:RequestTag/") for k in request) and "aws:TagKeys" not in request:
        request["aws:TagKeys"] = sorted(k.split("/", 1)[1] for k in request if k.startswith("aws:RequestTag/"))
    other = {f"aws:ResourceTag/{perms.ENV_TAG}": other_env}
    return [
        ("untagged", dict(request)),
        ("tagged for the other environment", {**request, **other}),
        ("a look-alike without this environment's tag", {**request, **lookalike}),
        ("a look-alike of the other environment", {**request, **lookalike, **other}),
    ]


# --- the check ------------------------------------------------------------------------------------------------


# Using a key changes nothing about it (the class is change, tag, re-policy, delete): the state backend's key of the
# administrator's choosing is used by the CI roles for `awskms://` secrets, by its ARN only.
KEY_USE = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey")


def violations(rec, state: perms.StateBackend | None = None) -> tuple[list[tuple[str, str, str, str]], int]:
    """(role, statement, action, how) for every mutating action another owner's resource could be reached by,
    and the number of (statement, action) pairs checked."""
    plan_arns, patterns = own_names(rec, state)
    found = []
    checked = 0
    for role, policy, doc in identity_policies(rec):
        for i, st in enumerate(_listify(doc.get("Statement", []))):
            if st.get("Effect") != "Allow":
                continue
            sid = st.get("Sid") or f"{policy}[{i}]"
            for action in _listify(st.get("Action", [])):
                assert "*" not in action, f"{role} {sid}: {action} (exact actions only)"
                if perms._is_read(action) or action in KEY_USE:
                    continue
                checked += 1
                if action in perms.UNSCOPABLE:
                    continue  # no resource type at all; each has its reason, and the deploy role's region scope
                for pattern in _listify(st.get("Resource", "*")):
                    resource = _instance(pattern)
                    if _is_own(resource, plan_arns, patterns):
                        continue
                    if action in NEW_RESOURCE_ACTIONS and NEW_RESOURCE_ACTIONS[action] in resource:
                        continue
                    for how, context in foreign_contexts(st, rec.stack):
                        if statement_applies(st, action, resource, context):
                            found.append((role, sid, action, f"{how}: {resource} {context}"))
                            break
    return found, checked


def _key(role: str, sid: str, action: str) -> tuple[str, str, str]:
    suffix = role.split("-", 1)[1] if "-" in role else role  # dev-policy-role -> policy-role
    return suffix, sid, action


@pytest.mark.parametrize("stack", STACKS)
def test_no_role_may_change_a_resource_this_environment_did_not_create(recorded, stack):
    found, checked = violations(recorded(stack))
    assert checked > 100  # the deploy role alone has more; an empty walk would prove nothing
    known = {**OPEN_FINDINGS, **ACCEPTED_EXCEPTIONS}
    unexpected = [
        f"{role} {sid}: {action} reaches {how}"
        for role, sid, action, how in found
        if _key(role, sid, action) not in known
    ]
    assert unexpected == [], "\n".join(unexpected)
    fixed = sorted(set(known) - {_key(r, s, a) for r, s, a, _ in found})
    assert fixed == [], f"no longer flagged, remove from OPEN_FINDINGS / ACCEPTED_EXCEPTIONS: {fixed}"


def test_the_roles_of_a_stack_with_a_self_managed_state_backend_reach_only_its_own_state():
    """The CI roles' state statements (s3 objects, the secrets key) with github.state_bucket set."""
    from conftest import run_stack, stack_config

    cfg = stack_config("dev")
    key = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    cfg["gpuloan:github"].update(state_bucket="example-pulumi-state", state_kms_key_arn=key)
    rec = run_stack("dev", cfg)
    state = perms.StateBackend("example-pulumi-state", "gpuloan", "dev", key)
    found, _ = violations(rec, state)
    unexpected = [
        f"{role} {sid}: {action} reaches {how}"
        for role, sid, action, how in found
        if _key(role, sid, action) not in {**OPEN_FINDINGS, **ACCEPTED_EXCEPTIONS}
    ]
    assert unexpected == [], "\n".join(unexpected)
    sids = {st.get("Sid") for _, _, doc in identity_policies(rec) for st in doc.get("Statement", [])}
    assert {"StateLock", "StateWrite", "StateSecrets"} <= sids  # the statements were walked


@pytest.mark.parametrize("stack", STACKS)
def test_every_role_and_policy_of_the_plan_is_walked(recorded, stack):
    rec = recorded(stack)
    policies = identity_policies(rec)
    walked_roles = {role for role, _, _ in policies}
    suffixes = {r.split("-", 1)[1] for r in walked_roles}
    assert {
        "github-deploy",
        "github-preview",
        "policy-role",
        "policy-scheduler-role",
        "cluster-node-role",
        "cluster-cluster-role",
        "cluster-vpc-cni-role",
        "gpu-metrics-agent",
    } <= suffixes, suffixes
    # Every role with a policy is walked (a role with none can do nothing).
    for r in rec.of_type("aws:iam/role:Role"):
        has_policy = any(
            p.inputs.get("role") in (r.inputs.get("name"), r.name)
            or str(p.inputs.get("role", "")).startswith(r.name + "-")
            for t in ("aws:iam/rolePolicy:RolePolicy", "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            for p in rec.of_type(t)
        )
        assert not has_policy or r.name in walked_roles, r.name
    for role, policy, doc in policies:
        if policy.startswith("arn:aws:iam::aws:policy/"):
            assert policy.rsplit("/", 1)[1] in REVIEWED_AWS_MANAGED, f"{role}: review {policy}"
        else:
            assert doc.get("Statement"), f"{role} {policy}: no statements"


def _doc(*statements: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def test_the_check_flags_adoption_by_tagging_and_passes_own_names(recorded, monkeypatch):
    """The check can fail: the statements of the old deploy role (tag any untagged key; tag roles unconditioned
    and change them by tag; tag any cluster's OIDC provider) are flagged, names of this environment are not."""
    rec = recorded("dev")
    old = _doc(
        {
            "Sid": "TagNewKmsKey",
            "Effect": "Allow",
            "Action": ["kms:TagResource"],
            "Resource": "*",
            "Condition": {
                "StringEquals": {"aws:RequestTag/gpuloan:environment": "dev", "aws:RequestedRegion": REGION},
                "Null": {"aws:ResourceTag/gpuloan:environment": "true"},
            },
        },
        {
            "Sid": "IamCreateClusterOidcTagged",
            "Effect": "Allow",
            "Action": ["iam:TagOpenIDConnectProvider"],
            "Resource": f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/*",
            "Condition": {"StringEquals": {"aws:RequestTag/gpuloan:environment": "dev"}},
        },
        {
            "Sid": "ChangeOwnKmsKeys",
            "Effect": "Allow",
            "Action": ["kms:PutKeyPolicy"],
            "Resource": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/*",
            "Condition": {"StringEquals": {"aws:ResourceTag/gpuloan:environment": "dev"}},
        },
        {
            "Sid": "Tables",
            "Effect": "Allow",
            "Action": ["dynamodb:DeleteTable"],
            "Resource": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/gpuloan-dev-*",
        },
        {
            "Sid": "AnyTable",
            "Effect": "Allow",
            "Action": ["dynamodb:DeleteTable"],
            "Resource": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/gpuloan-*",
        },
    )
    monkeypatch.setattr(sys.modules[__name__], "identity_policies", lambda _rec: [("dev-x", "old", old)])
    found, _ = violations(rec)
    assert sorted({(sid, action) for _, sid, action, _ in found}) == [
        ("AnyTable", "dynamodb:DeleteTable"),
        ("IamCreateClusterOidcTagged", "iam:TagOpenIDConnectProvider"),
        ("TagNewKmsKey", "kms:TagResource"),
    ]


def test_the_check_flags_an_asg_matched_by_node_group_name_only(recorded, monkeypatch):
    """Issue 42: the policy function's old reclaim statement (the ASG's node group name tag only) reaches a group of
    the same name in another cluster; with the cluster's name tag as well it does not."""
    rec = recorded("dev")
    (cluster,) = rec.of_type("aws:eks/cluster:Cluster")
    asg = f"arn:aws:autoscaling:{REGION}:{ACCOUNT}:autoScalingGroup:*:autoScalingGroupName/eks-*"
    by_name = {"StringLike": {"autoscaling:ResourceTag/eks:nodegroup-name": ["dev-training-spot_*"]}}
    old = {
        "Sid": "Old",
        "Effect": "Allow",
        "Action": ["autoscaling:TerminateInstanceInAutoScalingGroup"],
        "Resource": [asg],
        "Condition": by_name,
    }
    new = {
        **old,
        "Sid": "New",
        "Condition": {**by_name, "StringEquals": {"autoscaling:ResourceTag/eks:cluster-name": cluster.inputs["name"]}},
    }
    monkeypatch.setattr(sys.modules[__name__], "identity_policies", lambda _rec: [("dev-x", "p", _doc(old, new))])
    found, _ = violations(rec)
    assert {(sid, action) for _, sid, action, _ in found} == {
        ("Old", "autoscaling:TerminateInstanceInAutoScalingGroup")
    }


def test_each_accepted_exception_cites_its_aws_source():
    assert not set(OPEN_FINDINGS) & set(ACCEPTED_EXCEPTIONS)
    for key, reason in ACCEPTED_EXCEPTIONS.items():
        assert "docs.aws.amazon.com" in reason, key


def test_a_condition_key_the_check_does_not_know_fails_it():
    st = {
        "Sid": "X",
        "Effect": "Allow",
        "Action": ["kms:PutKeyPolicy"],
        "Resource": "*",
        "Condition": {"StringEquals": {"kms:CallerAccount": ACCOUNT}},
    }
    with pytest.raises(AssertionError, match="kms:CallerAccount"):
        foreign_contexts(st, "dev")


def checked_statements(rec) -> list[str]:
    """`<role> <Sid>` of every statement with a mutating action the check evaluates (for the report)."""
    out = set()
    for role, policy, doc in identity_policies(rec):
        for i, st in enumerate(_listify(doc.get("Statement", []))):
            if st.get("Effect") == "Allow" and any(
                not perms._is_read(a) and a not in KEY_USE for a in _listify(st.get("Action", []))
            ):
                out.add(f"{role} {st.get('Sid') or f'{policy}[{i}]'}")
    return sorted(out)
