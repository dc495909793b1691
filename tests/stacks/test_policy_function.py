"""The policy function's deployment, from the mocked Pulumi program: IAM least privilege (parsed), Lambda shape,
schedule, alarms, VPC placement, access entry; and the package (deterministic zip) and settings mapping."""

from __future__ import annotations

import fnmatch
import io
import json
import zipfile

import pytest

from conftest import requires_shared_prices, resolved_prices
from policy.model import Settings
from pricing import checks
from config import tags, versions
from stacks.policy_function.package import build_zip

MUTATING_PREFIXES = (
    "eks:Update",
    "eks:Create",
    "eks:Delete",
    "autoscaling:Terminate",
    "autoscaling:Set",
    "autoscaling:Update",
    "autoscaling:Create",
    "autoscaling:Delete",
    "ec2:Terminate",
    "ec2:Run",
)


def _policy(rec, env):
    return json.loads(rec.named(f"{env}-policy-policy").inputs["policy"])


def _packaged_settings(env: str, fn: dict) -> Settings:
    """The settings inside the package the recorded function names (by its sourceCodeHash: files are named by
    content)."""
    import base64

    from stacks.policy_function.function import BUILD_DIR
    from stacks.policy_function.package import SETTINGS_ENTRY

    digest = base64.b64decode(fn["sourceCodeHash"]).hex()[:16]
    with zipfile.ZipFile(BUILD_DIR / f"policy-function-{env}-{digest}.zip") as zf:
        return Settings.from_json(zf.read(SETTINGS_ENTRY).decode())


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
        patterns = [p for p in resources] + [
            v for cond in (st.get("Condition") or {}).values() for vals in cond.values() for v in _listify(vals)
        ]
        for g in guaranteed:
            arn = groups[g].outputs["arn"]
            assert not _matches_any(g, patterns) and not _matches_any(arn, patterns), f"{g} is covered by {st['Sid']}"
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
    assert all(
        a.split(":")[1].startswith(
            (
                "Describe",
                "Get",
                "View",
                "List",
                "Create",
                "Put",
                "Send",
                "Publish",
                "Delete",
                "Assign",
                "Unassign",
                "Update",
                "Terminate",
                "Generate",
                "Decrypt",
            )
        )
        for s in doc["Statement"]
        for a in s["Action"]
    )


def _listify(v):
    return v if isinstance(v, list) else [v]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_reclaim_reaches_this_clusters_elastic_asgs_only(recorded, env):
    """Issue 42: an elastic group's ASG is matched by its node group name AND its cluster's name, both tags EKS puts
    on a managed group's ASG; a group of the same name in another cluster of the account is out of reach."""
    from iam_eval import allowed

    rec = recorded(env)
    doc = _policy(rec, env)
    (cluster,) = rec.of_type("aws:eks/cluster:Cluster")
    cluster_name = cluster.inputs["name"]
    elastic = next(n for n, r in _node_groups(rec).items() if r.inputs["labels"][tags.LABEL_TIER] == "elastic")
    asg = (
        "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0f1e2d3c:"
        f"autoScalingGroupName/eks-{elastic}-0f1e2d3c"
    )
    action = "autoscaling:TerminateInstanceInAutoScalingGroup"
    own = {
        "autoscaling:ResourceTag/eks:nodegroup-name": elastic,
        "autoscaling:ResourceTag/eks:cluster-name": cluster_name,
    }
    assert allowed(doc, action, asg, own)
    for other in (
        {**own, "autoscaling:ResourceTag/eks:cluster-name": "another-cluster"},
        {"autoscaling:ResourceTag/eks:nodegroup-name": elastic},
    ):  # a look-alike ASG without the cluster
        assert not allowed(doc, action, asg, other), other


def test_lambda_shape(recorded):
    rec = recorded("prod")
    fn = rec.named("prod-policy-fn").inputs
    assert fn["runtime"] == versions.POLICY_LAMBDA_RUNTIME == "python3.12"
    assert fn["architectures"] == ["arm64"]
    assert fn.get("reservedConcurrentExecutions") is None, "off by default: new accounts refuse it"
    assert fn["handler"] == "policy.handler.lambda_handler"
    assert fn["vpcConfig"]["securityGroupIds"] and fn["vpcConfig"]["subnetIds"]
    assert fn["timeout"] < 60
    assert "GPULOAN_SETTINGS" not in fn["environment"]["variables"]
    settings = _packaged_settings("prod", fn)
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
    # issue 14: a tick that cannot read something still succeeds, so its own PolicyErrors metric is alarmed
    from policy import metric_names as M

    alarm = rec.named("prod-policy-policy-errors").inputs
    assert (alarm["namespace"], alarm["metricName"]) == (M.NAMESPACE, M.POLICY_ERRORS) == ("gpuloan", "PolicyErrors")
    assert alarm["dimensions"] == {M.DIM_ENVIRONMENT: "prod"} and alarm["statistic"] == "Sum"
    assert alarm["alarmActions"] == [topic] and alarm["okActions"] == [topic]
    assert alarm["threshold"] == 1 and alarm["period"] == 60 and alarm["treatMissingData"] == "notBreaching"
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
    cache = __import__("stacks.policy_function.package", fromlist=["POLICY_DIR"]).POLICY_DIR / "__pycache__"
    cache.mkdir(exist_ok=True)
    assert build_zip() == first
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert names == sorted(names) and "policy/handler.py" in names and "policy/metric_names.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zipfile.ZipFile(io.BytesIO(first)).infolist())
    assert len(first) < 200_000


def test_the_zip_alone_loads_the_handler_and_the_rule_modules_of_decide(tmp_path):
    """The package carries policy/'s subfolders (policy/decide/, one rule per module): the handler and every rule
    import from the extracted zip alone, not from the checkout."""
    import subprocess
    import sys

    with zipfile.ZipFile(io.BytesIO(build_zip())) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path)
    assert "policy/decide/__init__.py" in names and "policy/decide/bound.py" in names
    rules = sorted(
        n[len("policy/") : -len(".py")].replace("/", ".").removesuffix(".__init__")
        for n in names
        if n.startswith("policy/decide/")
    )
    code = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); import policy.handler; "
        "[importlib.import_module('policy.' + m) for m in sys.argv[2:]]; "
        "print(sys.modules['policy.decide.bound'].__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(tmp_path), *rules], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(tmp_path / "policy" / "decide" / "bound.py")


def test_the_zip_alone_loads_the_adapters_of_io(tmp_path):
    """Issue 34: the AWS and Kubernetes adapters live in policy/io/. The handler imports them only when it builds a
    tick's ports, so each is imported here, with the handler, from the extracted zip alone."""
    import subprocess
    import sys

    with zipfile.ZipFile(io.BytesIO(build_zip())) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path)
    adapters = sorted(
        n[len("policy/") : -len(".py")].replace("/", ".").removesuffix(".__init__")
        for n in names
        if n.startswith("policy/io/")
    )
    assert {"io", "io.kube", "io.nodegroups", "io.state", "io.cloudwatch", "io.budgets", "io.sns"} <= set(adapters)
    code = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); import policy.handler; "
        "[importlib.import_module('policy.' + m) for m in sys.argv[2:]]; "
        "print(sys.modules['policy.io.kube'].__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(tmp_path), *adapters], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(tmp_path / "policy" / "io" / "kube.py")


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


def test_reserved_concurrency_is_opt_in():
    from conftest import run_stack, stack_config

    cfg = stack_config("dev")
    cfg["gpuloan:policy"] = {**cfg["gpuloan:policy"], "reserve_concurrency": True}
    [fn] = run_stack("dev", cfg).of_type("aws:lambda/function:Function")
    assert fn.inputs["reservedConcurrentExecutions"] == 1


def test_state_table_permissions_cover_the_lease(recorded):
    [state] = [st for st in _policy(recorded("prod"), "prod")["Statement"] if st["Sid"] == "State"]
    assert state["Action"] == ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:UpdateItem"]
    [table] = recorded("prod").of_type("aws:dynamodb/table:Table")
    assert state["Resource"] == [table.outputs["arn"]], "the state table only"


def test_state_table_permissions_are_exactly_the_calls_the_state_adapter_makes(recorded, aws_env):
    """Least privilege derived from the requests: every method of the state port (StatePort) driven against the
    emulated DynamoDB, each request's operation recorded; the role's State statement allows exactly those."""
    import boto3

    from policy.io.state import DynamoState
    from policy.ports import StatePort

    session = boto3.Session()
    operations: set[str] = set()
    session.events.register("before-call.dynamodb", lambda model, **kw: operations.add(model.name))
    ddb = session.client("dynamodb")
    ddb.create_table(
        TableName="s",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    operations.clear()
    state = DynamoState(ddb, "s")
    iid = "i-0123456789abcdef0"
    drive = {
        "load": lambda: state.load("tick"),
        "save": lambda: state.save("tick", {"a": 1}, 0),
        "acquire_lease": lambda: state.acquire_lease("me", 1000.0, 60.0),
        "release_lease": lambda: state.release_lease("me"),
        "record_leaving": lambda: state.record_leaving({iid: 900.0}),
        "load_leaving": lambda: state.load_leaving(),
        "prune_leaving": lambda: state.prune_leaving([iid], 1000.0),
    }
    port_methods = {m for m in vars(StatePort) if not m.startswith("_")}
    assert set(drive) == port_methods, "drive every method of the port, so every call it makes is counted"
    for call in drive.values():
        call()
    [statement] = [st for st in _policy(recorded("prod"), "prod")["Statement"] if st["Sid"] == "State"]
    assert sorted(statement["Action"]) == sorted(f"dynamodb:{op}" for op in operations)


def _largest_config():
    """The most pools validation allows (200), each with both elastic groups and a budget, two with a guaranteed
    floor (200 floors would cost more than any budget validation accepts), the longest names validation allows."""
    from conftest import stack_config
    from config import config

    raw = stack_config("prod")
    data = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("gpuloan:")}
    template = next(p for p in data["pools"] if p.get("elastic"))
    limit = config.GpuLoanConfig.model_fields["pools"].metadata
    most = next(m.max_length for m in limit if hasattr(m, "max_length"))
    from config.names import NODE_GROUP_PREFIX_MAX, node_group_name_prefix

    # The longest pool name the node group name rule allows (EKS's 63 characters less the generated suffix).
    spare = NODE_GROUP_PREFIX_MAX - len(node_group_name_prefix(data["environment"], "", config._LONGEST_GROUP_SUFFIX))
    pools = []
    for k in range(most):
        name = f"p{k:03d}-" + "x" * (min(spare, 32) - 5)
        pools.append(
            {
                **template,
                "name": name,
                "team": template["team"],
                "budget": {"monthly_usd": 10_000_000, "enforcement": "cap_elastic"},
            }
        )
    data["pools"] = pools
    data["budget"] = {**data["budget"], "monthly_usd": 10_000_000}
    for p in pools:  # the floors and pool budgets must fit the environment budget (a cross-field rule)
        p["budget"] = {"monthly_usd": 10_000_000 / most, "enforcement": "cap_elastic"}
        p.pop("guaranteed", None)
    for p in pools[:2]:
        p["guaranteed"] = template.get("guaranteed")
    # The prod template pools are production tier on spot: Kueue must list each of them as allowed on spot.
    data["scheduling"] = {"kueue": {**data["scheduling"]["kueue"], "production_spot_pools": [p["name"] for p in pools]}}
    pools[:] = [{k: v for k, v in p.items() if v is not None} for p in pools]
    return checks.parse(data, prices=resolved_prices()), most


@requires_shared_prices
def test_settings_of_the_largest_config_travel_in_the_package_not_the_environment(tmp_path, monkeypatch):
    """Issue 12 item 7: at about six pools the settings passed Lambda's 4 KB environment limit. With the most
    pools validation allows, the environment stays a few hundred bytes and the package's handler loads them."""
    from policy import handler
    from stacks.cluster import cluster_name_for
    from config.names import GROUP_GUARANTEED, GROUP_ON_DEMAND, GROUP_SPOT, node_group_name_prefix
    from stacks.policy_function.function import LAMBDA_ENV_LIMIT_BYTES, function_environment
    from stacks.policy_function.package import SETTINGS_ENTRY
    from pricing.policy_settings import default_budget_names, settings_for

    cfg, most = _largest_config()
    assert most == 200 and len(cfg.pools) == most
    # Generated names as EKS returns them: the prefix plus the provider's 26-character unique suffix.
    suffix = "20261203072755123400000001"
    names = {
        p.name: {
            g: node_group_name_prefix(cfg.environment, p.name, g) + suffix
            for g in (GROUP_SPOT, GROUP_ON_DEMAND, GROUP_GUARANTEED)
        }
        for p in cfg.pools
    }
    settings_json = settings_for(
        resolved_prices(), cfg, cluster_name_for(cfg), names, default_budget_names(cfg)
    ).to_json()
    assert len(settings_json.encode()) > 30 * LAMBDA_ENV_LIMIT_BYTES  # ~150 KB: far past what an env var carries
    table = "gpuloan-" + "e" * 40 + "-policy-state"
    topic = "arn:aws:sns:ap-southeast-2:123456789012:" + "t" * 256
    variables = function_environment(table, topic)
    assert sum(len(k) + len(v) for k, v in variables.items()) < LAMBDA_ENV_LIMIT_BYTES // 4
    data = build_zip(settings_json=settings_json)
    zipfile.ZipFile(io.BytesIO(data)).extractall(tmp_path)
    monkeypatch.setattr(handler, "SETTINGS_FILE", tmp_path / SETTINGS_ENTRY)
    monkeypatch.setattr(handler, "_settings_cache", None)
    monkeypatch.delenv("GPULOAN_SETTINGS", raising=False)
    loaded = handler.load_settings()
    assert len(loaded.pools) == most and loaded.to_json() == settings_json


def test_recorded_function_environment_is_small(recorded):
    from stacks.policy_function.function import LAMBDA_ENV_LIMIT_BYTES

    for env in ("dev", "prod"):
        variables = recorded(env).named(f"{env}-policy-fn").inputs["environment"]["variables"]
        assert set(variables) <= {"GPULOAN_STATE_TABLE", "GPULOAN_TOPIC_ARN"}
        assert sum(len(k) + len(str(v)) for k, v in variables.items()) < LAMBDA_ENV_LIMIT_BYTES


def test_spot_interruption_warning_reaches_the_function_and_only_from_its_rule(recorded):
    """Issue 17: the policy function hears EC2's 2-minute spot notice through EventBridge (what the simulator
    models); the invoke permission is scoped to that one rule and this account."""
    from stacks.policy_function.function import EVENTS_PRINCIPAL

    rec = recorded("prod")
    rule = rec.named("prod-policy-spot-warning")
    assert json.loads(rule.inputs["eventPattern"]) == {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Spot Instance Interruption Warning"],
    }
    target = rec.named("prod-policy-spot-warning-target").inputs
    fn = rec.named("prod-policy-fn")
    assert target["arn"] == fn.outputs["arn"] and target["rule"] == rule.outputs["name"]
    assert target["retryPolicy"]["maximumEventAgeInSeconds"] == 60
    perm = rec.named("prod-policy-spot-warning-invoke").inputs
    assert perm["action"] == "lambda:InvokeFunction" and perm["principal"] == EVENTS_PRINCIPAL
    assert perm["sourceArn"] == rule.outputs["arn"] and perm.get("sourceAccount")
    # no other EventBridge permission on the function
    perms = [
        r for r in rec.of_type("aws:lambda/permission:Permission") if r.inputs.get("principal") == EVENTS_PRINCIPAL
    ]
    assert len(perms) == 1
