"""The guardrails policy pack: each rule's validate function against resources of the mocked program,
a compliant and a violating case each (the violating ones change one property or one config value)."""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml
from conftest import REPO, requires_shared_prices, run_stack, stack_config, resolved_prices
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
)

from guardrails import policies as g

POLICY_BY_NAME = {p.name: p for p in g.policies(resolved_prices())}


# --- recording -> CrossGuard arguments ---------------------------------------------------------------------


def _provider(rec, r):
    if not r.provider:
        return None
    urn = r.provider.rsplit("::", 1)[0]  # the engine's provider reference is "<urn>::<id>"
    p = next(x for x in rec.resources if x.urn == urn)
    return PolicyProviderResource(p.type, p.inputs, p.urn, p.name)


def _opts(r, ignore_changes=None):
    return PolicyResourceOptions(
        protect=r.protect,
        ignore_changes=list(r.ignore_changes if ignore_changes is None else ignore_changes),
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
        parent=r.parent,
    )


def resource_args(rec, r, props=None, ignore_changes=None, urn=None):
    return ResourceValidationArgs(
        r.type,
        copy.deepcopy(r.inputs) if props is None else props,
        urn or r.urn,
        r.name,
        _opts(r, ignore_changes),
        _provider(rec, r),
    )


def stack_args(rec, edit=None, drop=()):
    resources = []
    for r in rec.resources:
        if r.name in drop:
            continue
        props = copy.deepcopy(r.inputs)
        if edit and r.name in edit:
            edit[r.name](props)
        resources.append(PolicyResource(r.type, props, r.urn, r.name, _opts(r), _provider(rec, r), None, [], {}))
    return StackValidationArgs(resources)


def violations(policy_name, args):
    found = []
    POLICY_BY_NAME[policy_name].validate(args, lambda msg, urn=None: found.append(msg))
    return found


def all_violations(rec):
    out = []
    for policy in g.policies(resolved_prices()):
        if isinstance(policy, ResourceValidationPolicy):
            for r in rec.resources:
                out += [(policy.name, r.name, m) for m in violations(policy.name, resource_args(rec, r))]
        else:
            out += [(policy.name, "", m) for m in violations(policy.name, stack_args(rec))]
    return out


def of_type(rec, type_, **where):
    return [r for r in rec.of_type(type_) if all(r.inputs.get(k) == v for k, v in where.items())]


def elastic_groups(rec):
    return [r for r in rec.of_type(g.NODE_GROUP) if r.inputs.get("labels", {}).get("gpuloan.io/tier") == "elastic"]


# --- the pack as a whole -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_shipped_stacks_pass_every_guardrail(recorded, stack):
    assert all_violations(recorded(stack)) == []


def test_mandatory_and_advisory_rules_are_the_issues():
    levels = {p.name: p.enforcement_level for p in g.policies(resolved_prices())}
    assert {n for n, lvl in levels.items() if lvl == EnforcementLevel.MANDATORY} == {
        "gpu-resources-tagged",
        "elastic-node-groups-bounded",
        "policy-role-no-mutating-star",
        "ecr-immutable-and-scanned",
        "pool-budget-with-email",
        "launch-templates-imdsv2",
        "roles-no-star-on-star",
        "rollout-blockers",
    }
    assert {n for n, lvl in levels.items() if lvl == EnforcementLevel.ADVISORY} == {
        "spot-pools-diversified",
        "floor-under-budget",
        "floor-protected",
    }


def test_pack_files_are_pinned_like_the_project():
    meta = yaml.safe_load((REPO / "guardrails" / "PulumiPolicy.yaml").read_text())
    assert meta["runtime"]["name"] == "python" and meta["version"]
    pins = dict(
        line.split("==")
        for line in (REPO / "guardrails" / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    project = (REPO / "requirements.txt").read_text() + (REPO / "requirements-dev.txt").read_text()
    for name, version in pins.items():
        assert f"{name}=={version}" in project, f"guardrails pins {name}=={version}, the project does not"
    assert "PolicyPack(" in (REPO / "guardrails" / "__main__.py").read_text()


# --- gpu-resources-tagged ----------------------------------------------------------------------------------


def test_gpu_tags_compliant_including_environment_from_provider_default_tags(recorded):
    rec = recorded("prod")
    gpu = [r for r in rec.resources if g.is_gpu_resource(resolved_prices(), r.type, r.inputs)]
    assert {r.type for r in gpu} >= {g.NODE_GROUP, g.LAUNCH_TEMPLATE}
    for r in gpu:
        assert violations("gpu-resources-tagged", resource_args(rec, r)) == []
    # Without its own environment tag a resource still has it through the provider's default tags.
    ng = elastic_groups(rec)[0]
    props = copy.deepcopy(ng.inputs)
    del props["tags"]["gpuloan:environment"]
    assert violations("gpu-resources-tagged", resource_args(rec, ng, props)) == []


@pytest.mark.parametrize("missing", ["gpuloan:pool", "gpuloan:team"])
def test_gpu_tags_violation_names_the_missing_tag(recorded, missing):
    rec = recorded("prod")
    ng = elastic_groups(rec)[0]
    props = copy.deepcopy(ng.inputs)
    del props["tags"][missing]
    (msg,) = violations("gpu-resources-tagged", resource_args(rec, ng, props))
    assert missing in msg and ng.name in msg


def test_non_gpu_system_nodes_need_no_pool_tag(recorded):
    rec = recorded("prod")
    system = [r for r in rec.of_type(g.NODE_GROUP) if r.inputs.get("labels", {}).get("gpuloan.io/tier") == "system"]
    assert system and not g.is_gpu_resource(resolved_prices(), g.NODE_GROUP, system[0].inputs)
    assert violations("gpu-resources-tagged", resource_args(rec, system[0])) == []


# --- elastic-node-groups-bounded ---------------------------------------------------------------------------


def test_elastic_groups_compliant(recorded):
    rec = recorded("prod")
    groups = elastic_groups(rec)
    assert len(groups) == 5  # training and inference: spot + on-demand fallback; research: spot
    for ng in groups:
        assert violations("elastic-node-groups-bounded", resource_args(rec, ng)) == []


def test_elastic_group_without_ignore_changes_violates(recorded):
    rec = recorded("prod")
    ng = elastic_groups(rec)[0]
    (msg,) = violations("elastic-node-groups-bounded", resource_args(rec, ng, ignore_changes=[]))
    assert "desiredSize" in msg


def test_elastic_group_without_max_size_violates(recorded):
    rec = recorded("prod")
    ng = elastic_groups(rec)[0]
    props = copy.deepcopy(ng.inputs)
    del props["scalingConfig"]["maxSize"]
    (msg,) = violations("elastic-node-groups-bounded", resource_args(rec, ng, props))
    assert "max size" in msg


def test_elastic_group_clamped_to_a_lower_max_is_compliant(recorded):
    # stacks/capacity/elastic.py: lowering max_nodes below the live size sends desiredSize = maxSize, without ignore_changes.
    rec = recorded("prod")
    ng = elastic_groups(rec)[0]
    props = copy.deepcopy(ng.inputs)
    props["scalingConfig"]["desiredSize"] = props["scalingConfig"]["maxSize"]
    assert violations("elastic-node-groups-bounded", resource_args(rec, ng, props, ignore_changes=[])) == []


# --- floor-protected ---------------------------------------------------------------------------------------


def _floor_resources(rec):
    return [
        r
        for r in rec.resources
        if (r.type == g.NODE_GROUP and r.inputs["labels"].get("gpuloan.io/tier") == "guaranteed")
        or r.type == g.CAPACITY_RESERVATION
    ]


def test_protected_floor_is_compliant(recorded):
    rec = recorded("prod")
    floor = _floor_resources(rec)
    assert {r.type for r in floor} == {g.NODE_GROUP, g.CAPACITY_RESERVATION}
    assert all(violations("floor-protected", resource_args(rec, r)) == [] for r in floor)


def test_unprotected_floor_is_flagged():
    config = stack_config("prod")
    config["gpuloan:protect_critical"] = False
    rec = run_stack("prod", config)
    floor = _floor_resources(rec)
    for r in floor:
        (msg,) = violations("floor-protected", resource_args(rec, r))
        assert "not protected" in msg and r.name in msg
    elastic = elastic_groups(rec)[0]
    assert violations("floor-protected", resource_args(rec, elastic)) == []


def test_guaranteed_groups_are_not_elastic(recorded):
    rec = recorded("prod")
    floor = [r for r in rec.of_type(g.NODE_GROUP) if r.inputs["labels"].get("gpuloan.io/tier") == "guaranteed"]
    assert floor and all(
        violations("elastic-node-groups-bounded", resource_args(rec, r, ignore_changes=[])) == [] for r in floor
    )


# --- policy-role-no-mutating-star --------------------------------------------------------------------------

POLICY_URN_TYPE = "gpuloan:policy:PolicyFunction"


def _as_policy_function_child(r):
    # The same recorded document, placed under the policy function component in the URN's type chain.
    prefix, project, types, name = r.urn.split("::")
    return "::".join([prefix, project, f"pulumi:pulumi:Stack${POLICY_URN_TYPE}${types.rsplit('$', 1)[-1]}", name])


def test_policy_role_documents_in_the_program_are_compliant(recorded):
    rec = recorded("prod")
    in_function = [r for r in rec.resources if g.in_policy_function(r.urn)]
    assert any(r.type == g.IAM_ROLE_POLICY for r in in_function)  # stacks/policy_function/function.py's role policy
    for r in in_function:
        assert violations("policy-role-no-mutating-star", resource_args(rec, r)) == [], r.name
    read_only = rec.named("prod-github-preview-read")
    assert (
        violations(
            "policy-role-no-mutating-star", resource_args(rec, read_only, urn=_as_policy_function_child(read_only))
        )
        == []
    )


WIDE = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["ec2:*", "eks:*", "iam:*"], "Resource": "*"}],
    }
)


def test_policy_role_with_mutating_star_violates(recorded):
    rec = recorded("prod")
    wide = rec.named("prod-github-preview-read")
    props = {**copy.deepcopy(wide.inputs), "policy": WIDE}
    assert violations("policy-role-no-mutating-star", resource_args(rec, wide, props)) == []  # not the policy role
    (msg,) = violations(
        "policy-role-no-mutating-star", resource_args(rec, wide, props, urn=_as_policy_function_child(wide))
    )
    assert "eks:*" in msg and "iam:*" in msg


@pytest.mark.parametrize(
    "name, statement, bad",
    [
        (
            "update any node group",
            {"Action": "eks:UpdateNodegroupConfig", "Resource": "*"},
            ["eks:UpdateNodegroupConfig"],
        ),
        (
            "terminate scoped by tag",
            {
                "Action": "autoscaling:TerminateInstanceInAutoScalingGroup",
                "Resource": "*",
                "Condition": {"StringEquals": {"autoscaling:ResourceTag/gpuloan:tier": "elastic"}},
            },
            [],
        ),
        (
            "metrics in one namespace",
            {
                "Action": "cloudwatch:PutMetricData",
                "Resource": "*",
                "Condition": {"StringEquals": {"cloudwatch:namespace": "gpuloan"}},
            },
            [],
        ),
        (
            "region condition does not scope",
            {"Action": ["eks:*"], "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": "us-east-1"}}},
            ["eks:*"],
        ),
        (
            "reads on star",
            {"Action": ["eks:DescribeNodegroup", "autoscaling:Describe*", "ce:GetCostAndUsage"], "Resource": "*"},
            [],
        ),
        (
            "named group ARN",
            {
                "Action": "eks:UpdateNodegroupConfig",
                "Resource": "arn:aws:eks:us-east-1:123456789012:nodegroup/gpuloan-prod/prod-training-spot/*",
            },
            [],
        ),
        (
            "vpc lambda enis",
            {"Action": ["ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface"], "Resource": "*"},
            [],
        ),
        ("deny is fine", {"Effect": "Deny", "Action": "*", "Resource": "*"}, []),
        ("budget reads", {"Action": ["budgets:ViewBudget", "dynamodb:Query"], "Resource": "*"}, []),
        ("everything", {"Action": "*", "Resource": "*"}, ["*"]),
        (
            "wildcard verb",
            {"Action": ["autoscaling:Terminate*", "eks:Update*"], "Resource": ["*"]},
            ["autoscaling:Terminate*", "eks:Update*"],
        ),
    ],
)
def test_unscoped_mutating_actions_table(name, statement, bad):
    stmt = {"Effect": "Allow", **statement}
    assert g.unscoped_mutating_actions(json.dumps({"Version": "2012-10-17", "Statement": [stmt]})) == bad, name


# --- ecr-immutable-and-scanned -----------------------------------------------------------------------------


def test_ecr_repositories_compliant(recorded):
    rec = recorded("prod")
    repos = rec.of_type(g.ECR_REPOSITORY)
    assert repos, "stacks/images.py declares one repository per image"
    for repo in repos:
        assert violations("ecr-immutable-and-scanned", resource_args(rec, repo)) == []


@pytest.mark.parametrize(
    "name, change, expect",
    [
        (
            "mutable and unscanned",
            {"imageTagMutability": "MUTABLE", "imageScanningConfiguration": {"scanOnPush": False}},
            ["IMMUTABLE", "scan on push"],
        ),
        (
            "exclusion of every tag",
            {
                "imageTagMutability": "IMMUTABLE_WITH_EXCLUSION",
                "imageTagMutabilityExclusionFilters": [{"filterType": "WILDCARD", "filter": "*"}],
            },
            ["literal prefixes"],
        ),
        (
            "exclusion without filters",
            {"imageTagMutability": "IMMUTABLE_WITH_EXCLUSION", "imageTagMutabilityExclusionFilters": []},
            ["literal prefixes"],
        ),
        ("scanning removed", {"imageScanningConfiguration": None}, ["scan on push"]),
    ],
)
def test_ecr_repository_violations(recorded, name, change, expect):
    rec = recorded("prod")
    repo = rec.of_type(g.ECR_REPOSITORY)[0]
    props = {**copy.deepcopy(repo.inputs), **change}
    msgs = violations("ecr-immutable-and-scanned", resource_args(rec, repo, props))
    assert len(msgs) == len(expect), (name, msgs)
    for msg, word in zip(msgs, expect):
        assert word in msg and repo.name in msg


# --- pool-budget-with-email --------------------------------------------------------------------------------


def test_every_prod_pool_has_an_emailing_budget(recorded):
    assert violations("pool-budget-with-email", stack_args(recorded("prod"))) == []
    assert set(g.pools_in_stack(resolved_prices(), stack_args(recorded("prod")))) == {
        "training",
        "inference",
        "research",
    }


def test_single_pool_stack_may_rely_on_the_environment_budget(recorded):
    args = stack_args(recorded("dev"))
    assert list(g.pools_in_stack(resolved_prices(), args)) == ["research"] and g.pool_budgets(args) == {}
    assert violations("pool-budget-with-email", args) == []


def test_pool_without_budget_violates():
    cfg = stack_config("prod")
    del cfg["gpuloan:pools"][1]["budget"]  # inference: no pool budget; the environment budget spans two pools
    (msg,) = violations("pool-budget-with-email", stack_args(run_stack("prod", cfg)))
    assert "inference" in msg and "no budget" in msg


def test_pool_budget_without_email_violates():
    cfg = stack_config("prod")
    cfg["gpuloan:pools"][1]["budget"]["alert_emails"] = []
    (msg,) = violations("pool-budget-with-email", stack_args(run_stack("prod", cfg)))
    assert "inference" in msg and "emails nobody" in msg


# --- launch-templates-imdsv2 -------------------------------------------------------------------------------


def test_launch_templates_require_imdsv2(recorded):
    rec = recorded("prod")
    templates = rec.of_type(g.LAUNCH_TEMPLATE)
    assert len(templates) >= 5
    for lt in templates:
        assert violations("launch-templates-imdsv2", resource_args(rec, lt)) == []
    props = copy.deepcopy(templates[0].inputs)
    props["metadataOptions"]["httpTokens"] = "optional"
    (msg,) = violations("launch-templates-imdsv2", resource_args(rec, templates[0], props))
    assert "IMDSv2" in msg
    del props["metadataOptions"]
    assert len(violations("launch-templates-imdsv2", resource_args(rec, templates[0], props))) == 1


# --- advisory: spot-pools-diversified ----------------------------------------------------------------------


def test_spot_groups_diversified_and_single_type_reported(recorded):
    rec = recorded("prod")
    spot = [r for r in rec.of_type(g.NODE_GROUP) if r.inputs.get("capacityType") == "SPOT"]
    assert len(spot) == 3 and all(violations("spot-pools-diversified", resource_args(rec, r)) == [] for r in spot)
    cfg = stack_config("dev")
    cfg["gpuloan:pools"][0]["elastic"]["instance_types"] = ["g6.xlarge"]
    one = run_stack("dev", cfg)
    (ng,) = [r for r in one.of_type(g.NODE_GROUP) if r.inputs.get("capacityType") == "SPOT"]
    (msg,) = violations("spot-pools-diversified", resource_args(one, ng))
    assert "g6.xlarge" in msg and "two" in msg


# --- advisory: floor-under-budget --------------------------------------------------------------------------


@requires_shared_prices
def test_floor_cost_is_computed_from_catalog_prices(recorded):
    floors = g.floor_monthly_usd(resolved_prices(), stack_args(recorded("prod")))
    p4d = resolved_prices().price("p4d.24xlarge", "us-east-1").ondemand_usd_per_hour
    assert floors["training"][0] == pytest.approx(2 * p4d * 730)
    g6e = resolved_prices().price("g6e.xlarge", "us-east-1").ondemand_usd_per_hour
    assert floors["inference"][0] == pytest.approx(2 * g6e * 730)


@requires_shared_prices
def test_a_capacity_block_floor_counts_its_whole_size_before_it_starts(recorded):
    rec = recorded("prod")
    (floor,) = [
        r
        for r in rec.of_type(g.NODE_GROUP)
        if r.inputs.get("labels", {}).get("gpuloan.io/pool") == "training"
        and r.inputs.get("labels", {}).get("gpuloan.io/tier") == "guaranteed"
    ]

    def block_before_its_start(props):  # as the program declares a block whose window has not begun
        props["capacityType"] = "CAPACITY_BLOCK"
        props["scalingConfig"] = {"minSize": 0, "desiredSize": 0, "maxSize": 2}

    floors = g.floor_monthly_usd(resolved_prices(), stack_args(rec, edit={floor.name: block_before_its_start}))
    p4d = resolved_prices().price("p4d.24xlarge", "us-east-1").ondemand_usd_per_hour
    assert floors["training"][0] == pytest.approx(2 * p4d * 730)


@requires_shared_prices
def test_floor_under_budget_compliant_and_violating(recorded):
    rec = recorded("prod")
    assert violations("floor-under-budget", stack_args(rec)) == []
    # The typed config already refuses such a budget; the guardrail also catches one set outside it.
    budget = next(r for r in rec.of_type(g.BUDGET) if "training" in r.name)

    def shrink(props):
        props["limitAmount"] = "1000.00"

    (msg,) = violations("floor-under-budget", stack_args(rec, edit={budget.name: shrink}))
    assert "training" in msg and re.search(r"\$[\d,]+/month", msg)


def test_lambda_trusted_role_inline_policies_are_checked_wherever_declared(recorded):
    rec = recorded("prod")
    role = rec.named("prod-github-preview")
    lambda_trust = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
    )
    props = {
        **copy.deepcopy(role.inputs),
        "assumeRolePolicy": lambda_trust,
        "inlinePolicies": [{"name": "resize", "policy": WIDE}],
    }
    (msg,) = violations("policy-role-no-mutating-star", resource_args(rec, role, props))
    assert "ec2:*" in msg
    props["inlinePolicies"] = [{"name": "read", "policy": rec.named("prod-github-preview-read").inputs["policy"]}]
    assert violations("policy-role-no-mutating-star", resource_args(rec, role, props)) == []


def test_policy_function_role_widened_to_every_node_group_violates(recorded):
    rec = recorded("prod")
    (policy,) = [
        r
        for r in rec.of_type(g.IAM_ROLE_POLICY)
        if g.in_policy_function(r.urn) and "UpdateNodegroupConfig" in r.inputs["policy"]
    ]
    doc = json.loads(policy.inputs["policy"])
    for stmt in doc["Statement"]:
        if "eks:UpdateNodegroupConfig" in stmt["Action"]:
            stmt["Resource"] = "*"  # the guaranteed floor's node groups would be resizable too
    props = {**copy.deepcopy(policy.inputs), "policy": json.dumps(doc)}
    (msg,) = violations("policy-role-no-mutating-star", resource_args(rec, policy, props))
    assert "eks:UpdateNodegroupConfig" in msg and "guaranteed floor" in msg


# --- roles-no-star-on-star ---------------------------------------------------------------------------------

IAM_DOCUMENT_TYPES = (g.IAM_ROLE, g.IAM_ROLE_POLICY, g.IAM_POLICY, g.IAM_ROLE_POLICY_ATTACHMENT)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_role_of_the_shipped_stacks_gets_star_on_star(recorded, stack):
    rec = recorded(stack)
    checked = [r for r in rec.resources if r.type in IAM_DOCUMENT_TYPES]
    assert len(checked) > 15  # every role, role policy, managed policy (deploy parts, boundary) and attachment
    for r in checked:
        assert violations("roles-no-star-on-star", resource_args(rec, r)) == [], r.name


@pytest.mark.parametrize(
    "name, statement, bad",
    [
        ("admin", {"Effect": "Allow", "Action": "*", "Resource": "*"}, True),
        ("admin in a list", {"Effect": "Allow", "Action": ["s3:GetObject", "*"], "Resource": ["*"]}, True),
        ("not-action on star", {"Effect": "Allow", "NotAction": ["iam:*"], "Resource": "*"}, True),
        ("every action on one bucket", {"Effect": "Allow", "Action": "*", "Resource": "arn:aws:s3:::b/*"}, False),
        ("service wildcard", {"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}, False),
        ("deny everything", {"Effect": "Deny", "Action": "*", "Resource": "*"}, False),
    ],
)
def test_star_on_star_statements_table(name, statement, bad):
    doc = {"Version": "2012-10-17", "Statement": [statement]}
    assert bool(g.star_on_star_statements(doc)) is bad, name


def test_star_on_star_violates_in_every_place_a_policy_can_live(recorded):
    rec = recorded("prod")
    admin = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Sid": "Everything", "Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
    )
    role_policy = next(r for r in rec.of_type(g.IAM_ROLE_POLICY))
    (msg,) = violations(
        "roles-no-star-on-star", resource_args(rec, role_policy, {**role_policy.inputs, "policy": admin})
    )
    assert "Everything" in msg and role_policy.name in msg
    managed = next(r for r in rec.of_type(g.IAM_POLICY))
    assert violations("roles-no-star-on-star", resource_args(rec, managed, {**managed.inputs, "policy": admin}))
    role = next(r for r in rec.of_type(g.IAM_ROLE))
    assert violations(
        "roles-no-star-on-star",
        resource_args(rec, role, {**role.inputs, "inlinePolicies": [{"name": "x", "policy": admin}]}),
    )
    attachment = next(r for r in rec.of_type(g.IAM_ROLE_POLICY_ATTACHMENT))
    (msg,) = violations(
        "roles-no-star-on-star",
        resource_args(
            rec, attachment, {**attachment.inputs, "policyArn": "arn:aws:iam::aws:policy/AdministratorAccess"}
        ),
    )
    assert "AdministratorAccess" in msg
