"""The policy function's deployment, from the mocked Pulumi program: IAM least privilege (parsed), Lambda shape,
schedule, alarms, VPC placement, access entry; and the package (deterministic zip) and settings mapping."""

from __future__ import annotations

import fnmatch
import io
import json
import zipfile

import pytest

from policy.model import Settings
from stacks import tags, versions
from stacks.policy_package import build_zip

MUTATING_PREFIXES = ("eks:Update", "eks:Create", "eks:Delete", "autoscaling:Terminate", "autoscaling:Set",
                     "autoscaling:Update", "autoscaling:Create", "autoscaling:Delete", "ec2:Terminate", "ec2:Run")


def _policy(rec, env):
    return json.loads(rec.named(f"{env}-policy-policy").inputs["policy"])


def _node_groups(rec):
    """{generated node group name: resource} (names come from the provider's prefix auto-naming)."""
    return {r.outputs["nodeGroupName"]: r for r in rec.of_type("aws:eks/nodeGroup:NodeGroup")}


def _matches_any(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_no_mutating_action_on_star_and_guaranteed_groups_not_covered(recorded, env):
    rec = recorded(env)
    doc = _policy(rec, env)
    groups = _node_groups(rec)
    tier = {n: r.inputs["labels"][tags.LABEL_TIER] for n, r in groups.items()}
    guaranteed = [n for n, t in tier.items() if t == "guaranteed"]
    elastic = [n for n, t in tier.items() if t == "elastic"]
    assert guaranteed and elastic
    for st in doc["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        mutating = [a for a in actions if a.startswith(MUTATING_PREFIXES) or "*" in a]
        if not mutating:
            continue
        assert "*" not in resources, st
        # IAM matches `*` across any characters, as fnmatch does: no pattern may match a floor's name or ARN.
        patterns = [p for p in resources] + [v for cond in (st.get("Condition") or {}).values()
                                            for vals in cond.values() for v in _listify(vals)]
        for g in guaranteed:
            arn = groups[g].outputs["arn"]
            assert not _matches_any(g, patterns) and not _matches_any(arn, patterns), \
                f"{g} is covered by {st['Sid']}"
    resize = next(s for s in doc["Statement"] if s["Sid"] == "ResizeElasticNodeGroups")
    for g in elastic:
        assert _matches_any(groups[g].outputs["arn"], resize["Resource"]), g
    reclaim = next(s for s in doc["Statement"] if s["Sid"] == "ReclaimIdleElasticInstances")
    assert reclaim["Action"] == ["autoscaling:TerminateInstanceInAutoScalingGroup"]
    tag_patterns = reclaim["Condition"]["StringLike"]["autoscaling:ResourceTag/eks:nodegroup-name"]
    assert sorted(g for g in groups if _matches_any(g, tag_patterns)) == sorted(elastic)
    # read-only on the floor is allowed (pool utilization), nothing else
    read = next(s for s in doc["Statement"] if s["Sid"] == "ReadNodeGroups")
    assert read["Action"] == ["eks:DescribeNodegroup"]
    assert all(a.split(":")[1].startswith(("Describe", "Get", "View", "List", "Create", "Put", "Send", "Publish",
                                            "Delete", "Assign", "Unassign", "Update", "Terminate", "Generate",
                                            "Decrypt"))
               for s in doc["Statement"] for a in s["Action"])


def _listify(v):
    return v if isinstance(v, list) else [v]


def test_lambda_shape(recorded):
    rec = recorded("prod")
    fn = rec.named("prod-policy-fn").inputs
    assert fn["runtime"] == versions.POLICY_LAMBDA_RUNTIME == "python3.12"
    assert fn["architectures"] == ["arm64"]
    assert fn["reservedConcurrentExecutions"] == 1
    assert fn["handler"] == "policy.handler.lambda_handler"
    assert fn["vpcConfig"]["securityGroupIds"] and fn["vpcConfig"]["subnetIds"]
    assert fn["timeout"] < 60
    settings = Settings.from_json(fn["environment"]["variables"]["GPULOAN_SETTINGS"])
    groups = _node_groups(rec)
    for ps in settings.pools:
        for g in (ps.spot_group, ps.on_demand_group, ps.guaranteed_group):
            assert g is None or g in groups, f"settings name {g}, which the capacity component does not create"
    assert settings.pool("training").on_demand_group and settings.budget_name == "gpuloan-prod"
    assert {"GPULOAN_STATE_TABLE", "GPULOAN_TOPIC_ARN"} <= set(fn["environment"]["variables"])
    logs = rec.named("prod-policy-logs").inputs
    assert logs["retentionInDays"] == 30 and logs["name"] == "/aws/lambda/gpuloan-prod-policy"
    invoke = rec.named("prod-policy-async").inputs
    assert invoke["maximumRetryAttempts"] == 0 and invoke["destinationConfig"]["onFailure"]["destination"]
    table = rec.named("prod-policy-state").inputs
    assert table["serverSideEncryption"]["enabled"] and table["hashKey"] == "pk"
    assert rec.named("prod-policy-dlq").inputs["sqsManagedSseEnabled"]


def test_schedule_alarms_network_access(recorded):
    rec = recorded("prod")
    sched = rec.named("prod-policy-schedule").inputs
    assert sched["scheduleExpression"] == "rate(1 minute)"
    assert sched["target"]["retryPolicy"]["maximumRetryAttempts"] == 0
    topic = rec.outputs["alerts_topic_arn"]
    for metric in ("errors", "throttles"):
        alarm = rec.named(f"prod-policy-{metric}").inputs
        assert alarm["namespace"] == "AWS/Lambda" and alarm["alarmActions"] == [topic]
    sg = rec.named("prod-policy-sg").inputs
    assert [(e["fromPort"], e["toPort"]) for e in sg["egress"]] == [(443, 443)]
    assert not sg.get("ingress")
    rule = rec.named("prod-policy-to-cluster").inputs
    assert rule["fromPort"] == rule["toPort"] == 443
    entry = rec.named("prod-policy-access").inputs
    assert entry["kubernetesGroups"] == [tags.POLICY_READER_GROUP] and entry["type"] == "STANDARD"


def test_disabled_policy_creates_no_function():
    from conftest import run_stack, stack_config

    cfg = stack_config("dev")
    cfg["gpuloan:policy"] = {**cfg["gpuloan:policy"], "enabled": False}
    rec = run_stack("dev", cfg)
    assert not rec.of_type("aws:lambda/function:Function")


def test_zip_is_deterministic_small_and_clean(tmp_path):
    first = build_zip()
    # a stray bytecode cache must not change the bytes
    cache = __import__("stacks.policy_package", fromlist=["POLICY_DIR"]).POLICY_DIR / "__pycache__"
    cache.mkdir(exist_ok=True)
    assert build_zip() == first
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert names == sorted(names) and "policy/handler.py" in names and "policy/metric_names.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zipfile.ZipFile(io.BytesIO(first)).infolist())
    assert len(first) < 200_000


def test_package_imports_nothing_outside_stdlib_and_boto3():
    import ast
    import sys

    allowed = set(sys.stdlib_module_names) | {"boto3", "botocore", "policy"}
    for name in zipfile.ZipFile(io.BytesIO(build_zip())).namelist():
        tree = ast.parse(zipfile.ZipFile(io.BytesIO(build_zip())).read(name))
        for node in ast.walk(tree):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module]
            for m in mods:
                assert m.split(".")[0] in allowed, f"{name} imports {m}"
