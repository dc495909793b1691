"""End to end: the packaged Lambda (build_zip(), extracted) runs lambda_handler in a subprocess against the moto
server (EKS node groups, Auto Scaling, EC2, CloudWatch, Budgets, DynamoDB, SNS->SQS) and a fake Kubernetes API
over HTTPS. Asserts what changed in the emulator, not what the code says it did."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest

from aws_emulator import REGION, eks_asg_tags, emulator_env
from conftest import requires_shared_prices, stack_config, resolved_prices
from fake_kube import FakeKube, gpu_pod
from config import scheduling
from pricing import checks
from stacks.kubernetes.kueue import cluster_queue_manifest
from stacks.policy_function.package import build_zip
from pricing.policy_settings import settings_for

CLUSTER = "gpuloan-dev"
ACCOUNT = "123456789012"
NOW = datetime.now(timezone.utc).replace(second=0, microsecond=0) + timedelta(minutes=45)
PYTHON = sys.executable


def _cfg():
    raw = stack_config("dev")
    data = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("gpuloan:")}
    data["pools"].append(
        {
            "name": "train",
            "team": "research",
            "tier": "experiment",
            "elastic": {"instance_types": ["g6.xlarge"], "capacity": "spot_then_on_demand", "max_nodes": 3},
        }
    )
    return checks.parse(data, prices=resolved_prices())


GROUPS = {
    "research": {"spot": "dev-research-spot", "guaranteed": "dev-research-guaranteed"},
    "train": {"spot": "dev-train-spot", "on_demand": "dev-train-on-demand"},
}


def _settings():
    return settings_for(resolved_prices(), _cfg(), CLUSTER, GROUPS)


@pytest.fixture(scope="module")
def lambda_dir(tmp_path_factory):
    """The package as the stack builds it: the code and the settings (policy/settings.json), no env variable."""
    root = tmp_path_factory.mktemp("lambda")
    zipfile.ZipFile(io.BytesIO(build_zip(settings_json=_settings().to_json()))).extractall(root)
    return root


@pytest.fixture
def kube():
    k = FakeKube(CLUSTER)
    yield k
    k.close()


class World:
    """The emulated account: a cluster with node groups whose ASGs have instances, metrics, budget, topic."""

    def __init__(self, endpoint: str):
        s = boto3.Session(region_name=REGION)
        self.eks, self.asg, self.ec2 = s.client("eks"), s.client("autoscaling"), s.client("ec2")
        self.cw, self.sns, self.sqs = s.client("cloudwatch"), s.client("sns"), s.client("sqs")
        self.ddb, self.budgets = s.client("dynamodb"), s.client("budgets")
        vpc = self.ec2.create_vpc(CidrBlock="10.40.0.0/16")["Vpc"]["VpcId"]
        subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.40.1.0/24", AvailabilityZone=f"{REGION}a")
        self.subnet = subnet["Subnet"]["SubnetId"]
        role = f"arn:aws:iam::{ACCOUNT}:role/eks"
        self.eks.create_cluster(name=CLUSTER, roleArn=role, resourcesVpcConfig={"subnetIds": [self.subnet]})
        image = self.ec2.describe_images()["Images"][0]["ImageId"]
        # As the stack's launch templates do (stacks/capacity/pools.py:instance_tags): every GPU instance carries the
        # environment's tag, which tells the spot-warning path this stack's instances from another's.
        self.ec2.create_launch_template(
            LaunchTemplateName="gpu",
            LaunchTemplateData={
                "ImageId": image,
                "InstanceType": "g6.xlarge",
                "TagSpecifications": [
                    {"ResourceType": "instance", "Tags": [{"Key": "gpuloan:environment", "Value": "dev"}]}
                ],
            },
        )
        self.asg_of: dict[str, str] = {}
        self.table = "gpuloan-dev-policy-state"
        self.ddb.create_table(
            TableName=self.table,
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.topic = self.sns.create_topic(Name="gpuloan-dev-alerts")["TopicArn"]
        self.queue = self.sqs.create_queue(QueueName="alerts")["QueueUrl"]
        qarn = self.sqs.get_queue_attributes(QueueUrl=self.queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.sns.subscribe(
            TopicArn=self.topic, Protocol="sqs", Endpoint=qarn, Attributes={"RawMessageDelivery": "false"}
        )
        self.budgets.create_budget(
            AccountId=ACCOUNT,
            Budget={
                "BudgetName": "gpuloan-dev",
                "BudgetLimit": {"Amount": "2500", "Unit": "USD"},
                "TimeUnit": "MONTHLY",
                "BudgetType": "COST",
                "CalculatedSpend": {"ActualSpend": {"Amount": "310.5", "Unit": "USD"}},
            },
        )

    def group(self, name: str, desired: int, max_nodes: int = 4) -> list[str]:
        self.eks.create_nodegroup(
            clusterName=CLUSTER,
            nodegroupName=name,
            nodeRole=f"arn:aws:iam::{ACCOUNT}:role/n",
            subnets=[self.subnet],
            scalingConfig={"minSize": 0, "maxSize": max_nodes, "desiredSize": desired},
        )
        ng = self.eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=name)["nodegroup"]
        asg_name = ng["resources"]["autoScalingGroups"][0]["name"]  # moto names it eks-<uuid>; mirror that
        self.asg_of[name] = asg_name
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=asg_name,
            MinSize=0,
            MaxSize=max_nodes,
            DesiredCapacity=desired,
            VPCZoneIdentifier=self.subnet,
            LaunchTemplate={"LaunchTemplateName": "gpu", "Version": "$Latest"},
            Tags=eks_asg_tags(CLUSTER, name),
        )
        return self.instances(name)

    def instances(self, name: str) -> list[str]:
        g = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[self.asg_of[name]])["AutoScalingGroups"][0]
        return sorted(i["InstanceId"] for i in g["Instances"])

    def desired(self, name: str) -> int:
        return self.eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=name)["nodegroup"]["scalingConfig"][
            "desiredSize"
        ]

    def dns(self, instance_id: str) -> str:
        return self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0][
            "PrivateDnsName"
        ]

    def utilization(
        self, instance_id: str, pct: float, minutes: int = 40, metric: str = "node_gpu_utilization"
    ) -> None:
        dns = self.dns(instance_id)
        dims = [
            {"Name": "ClusterName", "Value": CLUSTER},
            {"Name": "InstanceId", "Value": instance_id},
            {"Name": "NodeName", "Value": dns},
        ]
        data = [
            {
                "MetricName": metric,
                "Dimensions": dims,
                "Timestamp": NOW - timedelta(minutes=m),
                "Value": pct,
                "Unit": "Percent",
            }
            for m in range(minutes)
        ]
        for k in range(0, len(data), 20):
            self.cw.put_metric_data(Namespace="ContainerInsights", MetricData=data[k : k + 20])

    def messages(self) -> list[dict]:
        out = []
        while True:
            resp = self.sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            msgs = resp.get("Messages", [])
            if not msgs:
                return out
            for m in msgs:
                out.append(json.loads(m["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=m["ReceiptHandle"])


@pytest.fixture
def world(aws_env, kube):
    w = World(aws_env)
    w.floor = w.group("dev-research-guaranteed", 1)
    w.idle, w.busy = w.group("dev-research-spot", 2)
    w.group("dev-train-spot", 0, 3)
    w.group("dev-train-on-demand", 0, 3)
    w.utilization(w.idle, 0.5)
    w.utilization(w.busy, 60.0)
    w.utilization(w.floor[0], 40.0)
    # no pod requested a GPU on the idle node; one of the busy node's GPUs is requested
    w.utilization(w.idle, 0.0, minutes=15, metric="node_gpu_reserved_capacity")
    w.utilization(w.busy, 12.5, minutes=15, metric="node_gpu_reserved_capacity")
    w.node_name = {i: w.dns(i) for i in [*w.floor, w.idle, w.busy]}
    for name in w.node_name.values():
        kube.add_node(name)
    # the spot flavor's toleration (config/scheduling.py): pods without it may not run on spot (policy/off_spot.py)
    spot_ok = [{"key": "gpuloan.io/spot", "operator": "Exists", "effect": "NoSchedule"}]
    kube.pods = [
        gpu_pod("train-a", 1, pool="train", tolerations=spot_ok),
        gpu_pod("train-b", 1, affinity_pools=["train"], tolerations=spot_ok),
        gpu_pod("research-running", 1, pool="research", node_name=w.node_name[w.busy], phase="Running"),
        gpu_pod("cpu-only", 0, pool="train"),
    ]
    w.settings = _settings()
    # Kueue's queues as the stack makes them, with the status Kueue writes: train borrows research's 1-GPU floor
    cfg = _cfg()
    for q in scheduling.plan(cfg).queues:
        used = {"gpuloan-dev-research-floor": 1} if q.pool == "train" else {"gpuloan-dev-research-spot": 1}
        kube.cluster_queues[q.name] = {
            **cluster_queue_manifest(cfg, q),
            "status": {
                "flavorsUsage": [
                    {"name": f.flavor, "resources": [{"name": "nvidia.com/gpu", "total": str(used.get(f.flavor, 0))}]}
                    for f in q.flavors
                ]
            },
        }
    return w


def run_lambda(
    lambda_dir: Path,
    endpoint: str,
    settings_json: str,
    env_extra: dict,
    event: dict,
    clock: datetime = NOW,
    remaining_ms: int = 50_000,
) -> tuple[dict, list]:
    """Run the zip's lambda_handler in a fresh interpreter. The test sets the function's clock (the emulated
    instances were launched at the real time, the metrics are laid out around NOW) and a Lambda context with
    the remaining time a 50 s function has at its start."""
    env = {**emulator_env(endpoint), "AWS_MAX_ATTEMPTS": "2", **env_extra}
    env.pop("PYTHONPATH", None)
    env.pop("GPULOAN_SETTINGS", None)
    packaged = (lambda_dir / "policy" / "settings.json").read_text()
    assert settings_json == packaged, "the package carries the settings the test expects"
    code = (
        "import datetime,json,sys,time,types; import policy; import policy.handler as h; "
        "h.clock = lambda: datetime.datetime.fromisoformat(sys.argv[2]); "
        "end = time.monotonic() + int(sys.argv[3]) / 1000; "
        "ctx=types.SimpleNamespace(invoked_function_arn='arn:aws:lambda:us-east-1:123456789012:function:p', "
        "get_remaining_time_in_millis=lambda: int((end - time.monotonic()) * 1000)); "
        "r=h.lambda_handler(json.loads(sys.argv[1]), ctx); "
        "print(json.dumps({'result': r, 'module': policy.__file__}))"
    )
    proc = subprocess.run(
        [PYTHON, "-c", code, json.dumps(event), clock.isoformat(), str(remaining_ms)],
        cwd=lambda_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    final = lines[-1]
    assert final["module"].startswith(str(lambda_dir)), "the test must run the zip's code, not the repo's"
    return final["result"], lines[:-1]


def _env(w: World, kube: FakeKube) -> dict:
    return {
        "GPULOAN_STATE_TABLE": w.table,
        "GPULOAN_TOPIC_ARN": w.topic,
        "GPULOAN_KUBE_ENDPOINT": kube.endpoint,
        "GPULOAN_KUBE_CA_PEM": kube.ca_pem,
    }


@requires_shared_prices
def test_tick_scales_up_reclaims_the_idle_node_and_notifies(world, kube, lambda_dir, aws_env):
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert result["errors"] == []
    # pending pods for "train" (node selector and affinity) -> 2 spot nodes; the scheduled and CPU pods do not count
    assert world.desired("dev-train-spot") == 2
    assert world.desired("dev-train-on-demand") == 0
    # the idle research node is terminated by id, the busy one and the floor are untouched
    assert world.instances("dev-research-spot") == [world.busy]
    assert world.instances("dev-research-guaranteed") == world.floor
    decisions = [x for x in logs if x.get("message") == "pool decision"]
    assert {d["pool"] for d in decisions} == {"research", "train"}
    research = next(d for d in decisions if d["pool"] == "research")
    assert research["actions"][0] == {
        **research["actions"][0],
        "kind": "terminate",
        "instance_id": world.idle,
        "reason": "RECLAIM_IDLE",
    }
    emf = [x for x in logs if "_aws" in x]
    published = {m["Name"] for x in emf for m in x["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    from policy import metric_names as M

    assert published == {
        M.ELASTIC_NODES,
        M.ELASTIC_MAX_NODES,
        M.PENDING_GPUS,
        M.DECISIONS,
        M.ESTIMATED_ELASTIC_SPEND_USD,
        M.MONTH_TO_DATE_SPEND_USD,
        M.FALLBACK_ACTIVE,
        M.POLICY_ERRORS,
        M.POOL_GPU_UTILIZATION,
        M.LOAN_GPUS,
    }
    # the loan from Kueue's queue status (policy/loan_usage.py): train borrows the research floor's GPU
    loan = {(x[M.DIM_POOL], x[M.DIM_USE]): x[M.LOAN_GPUS] for x in emf if M.LOAN_GPUS in x}
    assert loan == {
        ("research", "own_floor"): 0,
        ("research", "lent"): 1,
        ("research", "elastic_spot"): 1,
        ("train", "borrowed"): 1,
        ("train", "elastic_spot"): 0,
    }
    subjects = sorted(json.loads(json.dumps(m))["Subject"] for m in world.messages())
    assert subjects == [
        "[gpuloan dev] research: reclaimed 1 idle GPU node(s)",
        "[gpuloan dev] train: added 2 elastic GPU node(s)",
    ]
    # state persisted with a conditional write: the budget actual was read once
    item = world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "tick"}})["Item"]
    assert json.loads(item["data"]["S"])["spend"]["environment"]["actual_usd"] == 310.5
    assert kube.bad_tokens == 0 and any("fieldSelector" in r for r in kube.requests)
    # the idle node was cordoned, then its pods read, before TerminateInstanceInAutoScalingGroup
    idle_node = world.node_name[world.idle]
    assert kube.patches == [(idle_node, {"spec": {"unschedulable": True}})]
    cordon = kube.requests.index(f"PATCH /api/v1/nodes/{idle_node}")
    pods = next(i for i, r in enumerate(kube.requests) if "spec.nodeName%3D" + idle_node in r)
    assert cordon < pods
    assert result["blocked"] == 0


def _research(logs: list) -> dict:
    return next(x for x in logs if x.get("message") == "pool decision" and x["pool"] == "research")


@requires_shared_prices
@pytest.mark.parametrize(
    "pod",
    [
        {"phase": "Running"},
        {"phase": "Pending"},  # bound to the node, still pulling its image: the GPU metrics cannot see it yet
    ],
    ids=["running_gpu_pod", "starting_gpu_pod"],
)
def test_a_gpu_pod_on_the_node_keeps_it(world, kube, lambda_dir, aws_env, pod):
    """Issue 14 item 2: the metrics say idle (a job landed in the last minutes), the pods say otherwise. The
    tick's pod list shows the pod, so the node is not even planned for termination: no cordon, nothing to undo."""
    idle_node = world.node_name[world.idle]
    kube.pods.append(gpu_pod("late-job", 1, pool="research", node_name=idle_node, **pod))
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert result["blocked"] == 0 and result["errors"] == []
    assert not [a for a in _research(logs)["actions"] if a["kind"] == "terminate"]
    assert not [name for name, _ in kube.patches if name == idle_node], "never cordoned"
    assert not any("reclaimed" in m["Subject"] for m in world.messages())


@requires_shared_prices
@pytest.mark.parametrize(
    "pod",
    [
        {"phase": "Running"},
        {"phase": "Pending"},
    ],
    ids=["running_gpu_pod", "starting_gpu_pod"],
)
def test_a_gpu_pod_that_lands_after_the_pod_list_keeps_the_node(world, kube, lambda_dir, aws_env, pod):
    """The race the pre-termination check closes: the pod lands after the tick listed the pods (the plan says
    terminate), before the node is cordoned; the check reads the node's pods and keeps it."""
    idle_node = world.node_name[world.idle]
    kube.late_pods.append(gpu_pod("late-job", 1, pool="research", node_name=idle_node, **pod))
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert result["blocked"] == 1 and result["errors"] == []
    (term,) = [a for a in _research(logs)["actions"] if a["kind"] == "terminate"]
    assert "default/late-job requests 1 GPU(s)" in term["blocked"]
    assert kube.nodes[idle_node]["spec"] == {}, "our own cordon is undone when the node stays"
    assert not any("reclaimed" in m["Subject"] for m in world.messages())


@requires_shared_prices
@pytest.mark.parametrize("annotation", ["karpenter.sh/do-not-disrupt", "gpuloan.io/do-not-disrupt"])
def test_do_not_disrupt_keeps_the_node(world, kube, lambda_dir, aws_env, annotation):
    idle_node = world.node_name[world.idle]
    kube.pods.append(gpu_pod("checkpointer", 0, node_name=idle_node, phase="Running", annotations={annotation: "true"}))
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    (term,) = [a for a in _research(logs)["actions"] if a["kind"] == "terminate"]
    assert f"{annotation}=true" in term["blocked"]


@requires_shared_prices
def test_finished_pods_do_not_keep_the_node(world, kube, lambda_dir, aws_env):
    idle_node = world.node_name[world.idle]
    kube.pods += [
        gpu_pod("done", 1, node_name=idle_node, phase="Succeeded"),
        gpu_pod("crashed", 1, node_name=idle_node, phase="Failed"),
        gpu_pod("daemon", 0, node_name=idle_node, phase="Running"),
    ]
    run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert world.instances("dev-research-spot") == [world.busy]


@requires_shared_prices
def test_unreadable_node_pods_terminate_nothing(world, kube, lambda_dir, aws_env):
    kube.fail_node_pods = 403
    result, _ = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert any("403" in e for e in result["errors"])
    assert kube.nodes[world.node_name[world.idle]]["spec"] == {}, "uncordoned again"
    assert world.desired("dev-train-spot") == 2  # scale-ups are not affected


@requires_shared_prices
def test_a_live_tick_ignores_event_now(world, kube, lambda_dir, aws_env):
    """Issue 14 item 4: a crafted time 40 days ahead would reset the month's spend and push every notification
    timestamp weeks ahead; a live tick uses its clock and says so."""
    crafted = NOW + timedelta(days=40)
    result, logs = run_lambda(
        lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {"now": crafted.isoformat()}
    )
    item = world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "tick"}})["Item"]
    state = json.loads(item["data"]["S"])
    assert state["last_tick_at"] == NOW.isoformat()
    assert all(t == NOW.isoformat() for t in state["notified"].values())
    assert any(x.get("message") == "event.now ignored: a live tick uses the clock" for x in logs)
    assert world.instances("dev-research-spot") == [world.busy]  # it acted, at the real time


@requires_shared_prices
def test_one_unreadable_group_holds_only_its_pool(world, kube, lambda_dir, aws_env):
    """Issue 14 item 6: train's on-demand group is gone (EKS deletes its Auto Scaling group with it); train holds,
    research still reclaims."""
    world.eks.delete_nodegroup(clusterName=CLUSTER, nodegroupName="dev-train-on-demand")
    world.asg.delete_auto_scaling_group(AutoScalingGroupName=world.asg_of["dev-train-on-demand"], ForceDelete=True)
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert any("no Auto Scaling group" in e and "dev-train-on-demand" in e for e in result["errors"])
    assert world.desired("dev-train-spot") == 0
    assert world.instances("dev-research-spot") == [world.busy]
    errors = [x for x in logs if "_aws" in x and "PolicyErrors" in x]
    assert errors[0]["PolicyErrors"] >= 1


@requires_shared_prices
def test_floor_pinned_pending_pods_buy_no_elastic_node(world, kube, lambda_dir, aws_env):
    """Issue 24 item 5: research's floor node is rolling, so two jobs Kueue admitted to the floor flavor
    (`gpuloan.io/tier: guaranteed`) are pending. They can never run on elastic nodes: research buys none, and its
    idle spot node is not kept for them."""
    floor_pin = {"gpuloan.io/tier": "guaranteed"}
    spot_ok = [{"key": "gpuloan.io/spot", "operator": "Exists", "effect": "NoSchedule"}]
    kube.pods += [
        gpu_pod(f"floor-job-{k}", 1, pool="research", node_selector=floor_pin, tolerations=spot_ok) for k in range(2)
    ]
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert result["errors"] == []
    assert world.instances("dev-research-spot") == [world.busy]
    research = _research(logs)
    assert research["pending_gpus"] == 0


@requires_shared_prices
def test_unknown_spend_refuses_the_capped_scale_up_and_says_so(world, kube, lambda_dir, aws_env):
    """Issue 24 item 10: Budgets unreadable (the budget is gone) and no figure in the DynamoDB state (a new month,
    or a lost item) leave no month-to-date figure. Under cap_elastic that is not $0: train's pending pods buy
    nothing, the decision says why, an email says so, and the safety rules still run (the idle node goes)."""
    world.budgets.delete_budget(AccountId=ACCOUNT, BudgetName="gpuloan-dev")
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert world.desired("dev-train-spot") == 0 and world.desired("dev-train-on-demand") == 0
    train = next(x for x in logs if x.get("message") == "pool decision" and x["pool"] == "train")
    assert "BUDGET_UNKNOWN" in {a["reason"] for a in train["actions"]}
    assert any("DescribeBudget" in e for e in result["errors"])
    subjects = [m["Subject"] for m in world.messages()]
    assert "[gpuloan dev] train: spend unknown, scale-up refused" in subjects
    assert world.instances("dev-research-spot") == [world.busy]


@requires_shared_prices
def test_empty_node_is_reclaimed_from_the_reserved_capacity_metric(world, kube, lambda_dir, aws_env):
    """Container Insights' node_gpu_reserved_capacity read end to end: 0 for the idle node makes it empty (reclaimed
    as such), 12.5 % on the busy one (one of its GPUs requested) keeps it."""
    world.utilization(world.idle, 0.0, minutes=15, metric="node_gpu_reserved_capacity")
    world.utilization(world.busy, 12.5, minutes=15, metric="node_gpu_reserved_capacity")
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert result["errors"] == []
    assert world.instances("dev-research-spot") == [world.busy]
    research = next(x for x in logs if x.get("message") == "pool decision" and x["pool"] == "research")
    (term,) = [a for a in research["actions"] if a["kind"] == "terminate"]
    assert term["instance_id"] == world.idle and "no pod requested its GPUs" in term["detail"]


@requires_shared_prices
def test_dry_run_changes_nothing(world, kube, lambda_dir, aws_env):
    result, logs = run_lambda(
        lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {"now": NOW.isoformat(), "dry_run": True}
    )
    assert result["dry_run"] and result["applied"] == 0 and len(result["changes"]) == 2
    assert world.desired("dev-train-spot") == 0
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert all(m["Subject"].startswith("[gpuloan dev] [dry run]") for m in world.messages())
    # a replay at an explicit time reads the state but never writes it back
    assert "Item" not in world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "tick"}})


@requires_shared_prices
def test_kubernetes_down_holds_and_reports(world, kube, lambda_dir, aws_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"https://localhost:{s.getsockname()[1]}"
    env = {**_env(world, kube), "GPULOAN_KUBE_ENDPOINT": dead}
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), env, {})
    assert any("Kubernetes API unreachable" in e for e in result["errors"])
    assert world.desired("dev-train-spot") == 0  # no scale-up on unknown demand
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])  # and no reclaim
    errors = [x for x in logs if "_aws" in x and "PolicyErrors" in x]
    assert errors and errors[0]["PolicyErrors"] >= 1
    assert any("could not complete a tick" in m["Subject"] for m in world.messages())


@requires_shared_prices
def test_kubernetes_5xx_holds(world, kube, lambda_dir, aws_env):
    kube.fail_status = 503
    result, _ = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert any("Throttled" in e for e in result["errors"])
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])


@requires_shared_prices
def test_missing_metrics_keep_the_node(world, kube, lambda_dir, aws_env):
    later = NOW + timedelta(hours=3)  # every datapoint is now outside the windows
    kube.pods = []
    result, _ = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {}, clock=later)
    assert result["errors"] == [] and result["changes"] == []
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])


@requires_shared_prices
def test_cloudwatch_throttling_and_5xx_change_nothing(world, kube, lambda_dir, aws_env):
    """A CloudWatch endpoint that answers 503 / Throttling: no utilization, so no reclaim; pending still scales."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Throttle(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"Rate exceeded"  # the status alone must be enough, whatever the wire protocol
            self.send_response(429 if self.server.calls % 2 else 503)
            self.server.calls += 1
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Throttle)
    server.calls = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**_env(world, kube), "AWS_ENDPOINT_URL_CLOUDWATCH": f"http://127.0.0.1:{server.server_address[1]}"}
        result, _ = run_lambda(lambda_dir, aws_env, world.settings.to_json(), env, {})
    finally:
        server.shutdown()
    assert any("Throttled" in e and "GetMetricData" in e for e in result["errors"]), result["errors"]
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert world.desired("dev-train-spot") == 2  # pending pods are hard demand; metrics are not needed for them


@requires_shared_prices
def test_a_tick_never_acts_while_another_holds_the_lease(world, kube, lambda_dir, aws_env):
    """Issue 12 item 8: no reserved concurrency by default, so two ticks may overlap (a slow tick and the next
    schedule, a manual invocation). The one that finds the other's unexpired lease does nothing at all."""
    lease = {"pk": {"S": "lease"}, "holder": {"S": "other-tick"}, "expires_at": {"N": str(NOW.timestamp() + 30)}}
    world.ddb.put_item(TableName=world.table, Item=lease)
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert result["skipped"] == "lease held" and result["applied"] == 0
    assert world.desired("dev-train-spot") == 0
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert any(x.get("message", "").startswith("another tick holds the lease") for x in logs)
    held = world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "lease"}})["Item"]
    assert held["holder"]["S"] == "other-tick", "the other tick's lease is left alone"


@requires_shared_prices
def test_an_expired_lease_is_taken_over_and_released(world, kube, lambda_dir, aws_env):
    lease = {"pk": {"S": "lease"}, "holder": {"S": "dead-tick"}, "expires_at": {"N": str(NOW.timestamp() - 1)}}
    world.ddb.put_item(TableName=world.table, Item=lease)
    result, _ = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {})
    assert result["skipped"] == "" and world.desired("dev-train-spot") == 2
    assert "Item" not in world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "lease"}})


def test_the_lease_is_exclusive_on_dynamodb(aws_env):
    """DynamoState's lease against the emulated DynamoDB: one holder at a time, its own release only, and an
    expired lease can be taken."""
    import boto3

    from policy.io.state import DynamoState

    ddb = boto3.client("dynamodb")
    ddb.create_table(
        TableName="t",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    state = DynamoState(ddb, "t")
    assert state.acquire_lease("a", 1000.0, 60) is True
    assert state.acquire_lease("b", 1030.0, 60) is False
    from policy.errors import ConflictingUpdate

    with pytest.raises(ConflictingUpdate):
        state.release_lease("b")  # not b's to release
    assert state.acquire_lease("b", 1061.0, 60) is True  # a's expired
    state.release_lease("b")
    assert state.acquire_lease("c", 1062.0, 60) is True


@requires_shared_prices
def test_a_spot_interruption_warning_makes_its_pods_demand_and_keeps_an_idle_node_for_them(
    world, kube, lambda_dir, aws_env
):
    """Issue 17: EventBridge delivers EC2's 2-minute notice for the busy research node. That node no longer counts as
    capacity, its GPU pod counts as pending, so the idle node (reclaimed in the plain tick above) is kept for it; the
    warned instance is remembered in the state for the next ticks."""
    # the world's "research-running" pod (1 GPU) runs on the busy node
    event = {
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": world.busy, "instance-action": "terminate"},
    }
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), event)
    assert result["errors"] == []
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    research = _research(logs)
    assert research["pending_gpus"] == 1  # nothing else of research is pending: that is the warned node's pod
    assert any(a["reason"] == "STEADY" and "pods are pending" in a["detail"] for a in research["actions"])
    item = world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "tick"}})["Item"]
    assert list(json.loads(item["data"]["S"])["leaving"]) == [world.busy]


@requires_shared_prices
def test_a_spot_warning_for_another_stacks_instance_is_skipped_cheaply(world, kube, lambda_dir, aws_env):
    """Issue 24: the EventBridge rule matches every spot warning of the account and region. An instance without this
    environment's tag (another stack's, or anyone's) costs one EC2 call: no lease, no Kubernetes call, no tick."""
    foreign = world.ec2.run_instances(
        ImageId=world.ec2.describe_images()["Images"][0]["ImageId"], MinCount=1, MaxCount=1, InstanceType="g6.xlarge"
    )["Instances"][0]["InstanceId"]
    event = {
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": foreign, "instance-action": "terminate"},
    }
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), event)
    assert result["skipped"] == "not this stack's instance" and result["errors"] == []
    assert kube.requests == [] and world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert "Item" not in world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "leaving"}})
    assert any(x.get("message") == "spot warning for an instance of another stack: skipped" for x in logs)


@requires_shared_prices
@pytest.mark.parametrize(
    "detail",
    ["i-0123456789abcdef0", None, ["i-0123456789abcdef0"], {"instance-id": 42}],
    ids=["string", "null", "list", "id_not_a_string"],
)
def test_a_malformed_spot_warning_is_reported_and_the_tick_still_runs(world, kube, lambda_dir, aws_env, detail):
    """Issue 24: a spot warning whose `detail` is not an object used to crash the handler; a malformed one left no
    trace. It is now a tick error (PolicyErrors, the error email) and the tick runs as a scheduled one would."""
    event = {"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": detail}
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), event)
    assert any(e.startswith("malformed spot warning ignored") for e in result["errors"]), result["errors"]
    assert result["skipped"] == "" and world.instances("dev-research-spot") == [world.busy]  # the tick ran
    assert any("_aws" in x and x.get("PolicyErrors", 0) >= 1 for x in logs)


def test_an_event_that_is_not_a_spot_warning_names_no_instance():
    from policy.handler import spot_warning

    warning = {
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": "i-0123456789abcdef0"},
    }
    assert spot_warning(warning) == ("i-0123456789abcdef0",)
    assert spot_warning({}) == ()
    assert spot_warning({**warning, "source": "custom.app"}) == ()  # only EC2 itself
    assert spot_warning({**warning, "detail": {"instance-id": "i-0; drop"}}) == ()


# A spot warning is never lost to a held lease (policy/lease.py, policy/io/state.py's "leaving" item).


def _warning(instance_id: str) -> dict:
    return {
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    }


def _hold_lease(w: World, seconds: float = 300) -> None:
    w.ddb.put_item(
        TableName=w.table,
        Item={"pk": {"S": "lease"}, "holder": {"S": "other-tick"}, "expires_at": {"N": str(NOW.timestamp() + seconds)}},
    )


def _leaving_item(w: World) -> dict:
    return w.ddb.get_item(TableName=w.table, Key={"pk": {"S": "leaving"}}, ConsistentRead=True).get("Item") or {}


@requires_shared_prices
def test_a_warning_while_another_tick_holds_the_lease_is_recorded_and_the_next_tick_acts_on_it(
    world, kube, lambda_dir, aws_env
):
    """The holder outlasts the warning invocation's wait (a 40 s remaining time leaves it about 3 s): the warning
    is recorded, and the next scheduled tick, once the holder released the lease, treats the warned node as leaving
    (its GPU pod pending, so the idle node is kept for it instead of being reclaimed)."""
    _hold_lease(world)
    result, logs = run_lambda(
        lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), _warning(world.busy), remaining_ms=40_000
    )
    assert result["skipped"] == "lease held" and result["errors"] == []
    item = _leaving_item(world)
    assert float(item[world.busy]["N"]) == pytest.approx(NOW.timestamp() + 180)
    messages = [x.get("message", "") for x in logs]
    assert any(m.startswith("spot warning recorded") for m in messages)
    assert any(m.startswith("spot warning left to the next tick") for m in messages)
    assert world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "lease"}})["Item"]["holder"]["S"] == "other-tick"

    world.ddb.delete_item(TableName=world.table, Key={"pk": {"S": "lease"}})  # the holder's tick ends
    result, logs = run_lambda(
        lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), {}, clock=NOW + timedelta(minutes=1)
    )
    assert result["skipped"] == "" and result["errors"] == []
    assert _research(logs)["pending_gpus"] == 1, "the warned node's GPU pod"
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy]), "the idle node is kept for it"
    state = json.loads(world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "tick"}})["Item"]["data"]["S"])
    assert list(state["leaving"]) == [world.busy]


@requires_shared_prices
def test_a_warning_gets_the_lease_when_the_holder_releases_it_and_acts_itself(world, kube, lambda_dir, aws_env):
    import threading
    import time

    _hold_lease(world)
    released = threading.Event()

    def holder_finishes():  # the other tick ends a second after the warning invocation recorded its instance
        end = time.monotonic() + 60
        while not _leaving_item(world) and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(1.0)
        world.ddb.delete_item(TableName=world.table, Key={"pk": {"S": "lease"}})
        released.set()

    thread = threading.Thread(target=holder_finishes, daemon=True)
    thread.start()
    result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), _warning(world.busy))
    thread.join(5)
    assert released.is_set()
    assert result["skipped"] == "" and result["errors"] == []
    [acted] = [x for x in logs if x.get("message") == "spot warning acted on by this invocation"]
    assert acted["instances"] == [world.busy] and 0.9 < acted["waited_for_lease_s"] < 13
    assert _research(logs)["pending_gpus"] == 1
    assert world.instances("dev-research-spot") == sorted([world.idle, world.busy])
    assert "Item" not in world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "lease"}}), "released"


@requires_shared_prices
def test_a_malformed_instance_id_is_not_recorded(world, kube, lambda_dir, aws_env):
    result, _ = run_lambda(lambda_dir, aws_env, world.settings.to_json(), _env(world, kube), _warning("i-0; drop"))
    # reported, not silent (issue 24), and never stored
    assert result["skipped"] == "" and result["errors"] == [
        "malformed spot warning ignored: detail.instance-id 'i-0; drop' is not an EC2 instance id"
    ]
    assert _leaving_item(world) == {}
    assert world.instances("dev-research-spot") == [world.busy], "an ordinary tick: the idle node goes"


class _FailingUpdates:
    """A proxy in front of the moto server that answers every DynamoDB UpdateItem with a 500 and forwards the
    rest: the record of a warning fails, the lease and the state still work."""

    def __init__(self, upstream: str):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        target = urlsplit(upstream)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("X-Amz-Target", "").endswith(".UpdateItem"):
                    self.server.refused += 1
                    status, headers = 500, {"Content-Type": "application/x-amz-json-1.0"}
                    data = b'{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"boom"}'
                else:
                    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
                    conn.request("POST", self.path, body, dict(self.headers))
                    resp = conn.getresponse()
                    status, data = resp.status, resp.read()
                    headers = {
                        k: v for k, v in resp.getheaders() if k.lower() not in ("content-length", "transfer-encoding")
                    }
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.refused = 0
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@requires_shared_prices
def test_a_failed_record_is_loud(world, kube, lambda_dir, aws_env):
    proxy = _FailingUpdates(aws_env)
    try:
        env = {**_env(world, kube), "AWS_ENDPOINT_URL_DYNAMODB": proxy.url}
        result, logs = run_lambda(lambda_dir, aws_env, world.settings.to_json(), env, _warning(world.busy))
    finally:
        proxy.close()
    assert proxy.server.refused >= 1
    assert any("spot warning not recorded" in e and world.busy in e for e in result["errors"]), result["errors"]
    errors = [x for x in logs if "_aws" in x and "PolicyErrors" in x]
    assert errors and errors[0]["PolicyErrors"] >= 1
    assert _research(logs)["pending_gpus"] == 1, "the lease was free: this invocation still acted"
    assert any("could not complete a tick" in m["Subject"] for m in world.messages())


def test_leaving_records_on_dynamodb(aws_env):
    """DynamoState's records against the emulated DynamoDB: written without a read or a lease (the item is created
    by the first one), kept beside the tick item's whole-item writes, pruned only while still expired."""
    from policy.io.state import DynamoState

    ddb = boto3.client("dynamodb")
    ddb.create_table(
        TableName="t",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    state = DynamoState(ddb, "t")
    a, b = "i-0123456789abcdef0", "i-00000001"
    assert state.load_leaving() == {}
    state.record_leaving({a: 100.0})
    state.save("tick", {"x": 1}, 0)  # the tick item's conditional PutItem: another item, the record stays
    state.record_leaving({b: 150.0})
    assert state.load_leaving() == {a: 100.0, b: 150.0}
    state.record_leaving({a: 300.0})  # delivered again after a pruner read it
    assert state.prune_leaving([a, b], 200.0) is False
    assert state.load_leaving() == {a: 300.0, b: 150.0}
    assert state.prune_leaving([b], 200.0) is True
    assert state.load_leaving() == {a: 300.0}
    with pytest.raises(ValueError):
        state.record_leaving({"pk": 1.0})  # an attribute name that is not an instance id is refused
    assert state.load("tick") == ({"x": 1}, 1)


@requires_shared_prices
def test_warm_up_runs_in_the_package_with_its_history_in_dynamodb(world, kube, aws_env, tmp_path):
    """The packaged function with `warm_up` on for the "train" pool: the week of history kept in the DynamoDB
    state item (8 GPUs arriving at this time of day on each earlier day) makes it launch spares beyond what the
    pending pods need, within the group's maximum, and the tick writes this tick's arrivals back."""
    import dataclasses

    from policy.rhythm import DailyArrivals

    s = world.settings
    s = dataclasses.replace(
        s, pools=tuple(dataclasses.replace(p, warm_up=True) if p.name == "train" else p for p in s.pools)
    )
    root = tmp_path / "lambda"
    root.mkdir()
    zipfile.ZipFile(io.BytesIO(build_zip(settings_json=s.to_json()))).extractall(root)
    history = DailyArrivals()
    for d in range(6, 0, -1):
        day = NOW - timedelta(days=d)
        history.record(day + timedelta(minutes=1), [(day, 8)])
    world.ddb.put_item(
        TableName=world.table,
        Item={
            "pk": {"S": "tick"},
            "version": {"N": "1"},
            "data": {"S": json.dumps({"rhythm": {"train": history.to_state()}})},
        },
    )
    created = (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for pod in kube.pods:
        if pod["metadata"]["name"].startswith("train-"):
            pod["metadata"]["creationTimestamp"] = created

    result, logs = run_lambda(root, aws_env, s.to_json(), _env(world, kube), {})
    assert result["errors"] == []
    # 2 pending 1-GPU pods need 2 nodes; 8 GPUs in 20 minutes on earlier days want 4 spares (1-GPU nodes,
    # launch 6 min: ceil(12 x 0.4) - 1); the group's maximum of 3 bounds it
    assert world.desired("dev-train-spot") == 3
    train = next(x for x in logs if x.get("message") == "pool decision" and x.get("pool") == "train")
    assert any("ahead of the daily rhythm" in (a.get("detail") or "") for a in train["actions"])
    stored = json.loads(world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "tick"}})["Item"]["data"]["S"])
    kept = DailyArrivals.from_state(stored["rhythm"]["train"])
    assert sum(kept.rows[max(kept.rows)]) == 2  # this tick's two pods, filed under today
