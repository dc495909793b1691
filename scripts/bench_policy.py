"""Policy benchmark, one line: decide() time for 100 pools x 32 nodes, AWS API calls per tick for 10 pools
(counted against a local moto server), the Lambda zip size and the handler's import time.

    .venv/bin/python scripts/bench_policy.py      (or: make bench-policy)
"""

from __future__ import annotations

import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from policy.decide import decide  # noqa: E402
from policy.model import Group, Node, Observation, PoolObservation, PoolSettings, Settings, Spend  # noqa: E402
from stacks.policy_function.package import build_zip  # noqa: E402

NOW = datetime(2026, 3, 10, 12, tzinfo=timezone.utc)


def bench_decide(pools: int = 100, nodes: int = 32, repeat: int = 30) -> float:
    ps, po = [], []
    for p in range(pools):
        name = f"pool{p}"
        ps.append(
            PoolSettings(
                name=name,
                team="t",
                tier="experiment",
                gpus_per_node=8,
                spot_group=f"{name}-s",
                on_demand_group=f"{name}-o",
                guaranteed_group=f"{name}-g",
                spot_max_nodes=40,
                on_demand_max_nodes=8,
                spot_usd_per_hour=15.0,
                on_demand_usd_per_hour=55.0,
                guaranteed_nodes=4,
                guaranteed_usd_per_hour=88.0,
                budget_monthly_usd=500_000.0,
            )
        )
        ns = []
        for k in range(nodes):
            grp = f"{name}-g" if k < 4 else f"{name}-s"
            ns.append(
                Node(
                    f"i-{p}-{k}",
                    grp,
                    NOW - timedelta(minutes=30 + k * 7),
                    "InService",
                    float((k * 37) % 100),
                    float((k * 53) % 100),
                )
            )
        po.append(
            PoolObservation(
                name,
                (Group(f"{name}-s", nodes - 4, 0, 40, "ACTIVE", NOW - timedelta(hours=1)), Group(f"{name}-o", 0, 0, 8)),
                tuple(ns),
                (8, 4, 2) if p % 2 else (),
                Spend(10_000.0, 50.0, NOW),
            )
        )
    settings = Settings("bench", "us-east-1", "c", tuple(ps), budget_monthly_usd=50_000_000.0)
    obs = Observation(tuple(po), Spend(1_000_000.0, 0.0, NOW))
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        decide(settings, obs, NOW)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_calls(pools: int = 10) -> tuple[int, Counter]:
    """Two ticks of the real adapters for `pools` pools against moto: (calls of the first tick, which reads every
    budget, calls by service of the second, the steady state)."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    from policy.handler import build_ports
    from policy.tick import run_tick

    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_DEFAULT_REGION": "us-east-1",
        "GPULOAN_STATE_TABLE": "state",
        "GPULOAN_TOPIC_ARN": "",
        "GPULOAN_KUBE_ENDPOINT": f"http://127.0.0.1:{_free_port()}",
    }  # no Kubernetes here: counts AWS only
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        setup = boto3.Session(region_name="us-east-1")
        eks, asg, ec2 = setup.client("eks"), setup.client("autoscaling"), setup.client("ec2")
        subnet = ec2.create_subnet(
            VpcId=ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"],
            CidrBlock="10.0.1.0/24",
            AvailabilityZone="us-east-1a",
        )["Subnet"]["SubnetId"]
        eks.create_cluster(
            name="c", roleArn="arn:aws:iam::123456789012:role/r", resourcesVpcConfig={"subnetIds": [subnet]}
        )
        ec2.create_launch_template(
            LaunchTemplateName="gpu-lt",
            LaunchTemplateData={"ImageId": ec2.describe_images()["Images"][0]["ImageId"], "InstanceType": "g6.xlarge"},
        )
        setup.client("dynamodb").create_table(
            TableName="state",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        )
        topic = setup.client("sns").create_topic(Name="t")["TopicArn"]
        os.environ["GPULOAN_TOPIC_ARN"] = topic
        setup.client("budgets").create_budget(
            AccountId="123456789012",
            Budget={
                "BudgetName": "b",
                "BudgetLimit": {"Amount": "1000000", "Unit": "USD"},
                "TimeUnit": "MONTHLY",
                "BudgetType": "COST",
            },
        )
        ps = []
        for p in range(pools):
            for kind, n in (("s", 2), ("o", 0), ("g", 1)):
                name = f"p{p}-{kind}"
                eks.create_nodegroup(
                    clusterName="c",
                    nodegroupName=name,
                    nodeRole="arn:aws:iam::123456789012:role/n",
                    subnets=[subnet],
                    scalingConfig={"minSize": 0, "maxSize": 8, "desiredSize": n},
                )
                asg_name = eks.describe_nodegroup(clusterName="c", nodegroupName=name)["nodegroup"]["resources"][
                    "autoScalingGroups"
                ][0]["name"]
                asg.create_auto_scaling_group(
                    AutoScalingGroupName=asg_name,
                    MinSize=0,
                    MaxSize=8,
                    DesiredCapacity=n,
                    VPCZoneIdentifier=subnet,
                    LaunchTemplate={"LaunchTemplateName": "gpu-lt", "Version": "$Latest"},
                    Tags=[
                        {"Key": k, "Value": v, "PropagateAtLaunch": True}  # as EKS does
                        for k, v in (("eks:cluster-name", "c"), ("eks:nodegroup-name", name))
                    ],
                )
            ps.append(
                PoolSettings(
                    name=f"p{p}",
                    team="t",
                    tier="experiment",
                    gpus_per_node=1,
                    spot_group=f"p{p}-s",
                    on_demand_group=f"p{p}-o",
                    guaranteed_group=f"p{p}-g",
                    spot_max_nodes=8,
                    on_demand_max_nodes=8,
                    spot_usd_per_hour=0.4,
                    on_demand_usd_per_hour=1.0,
                    budget_monthly_usd=10_000.0,
                    budget_name="b",
                )
            )
        settings = Settings("bench", "us-east-1", "c", tuple(ps), budget_monthly_usd=100_000.0, budget_name="b")
        session = boto3.Session(region_name="us-east-1")
        calls: Counter = Counter()
        session.events.register("before-call", lambda model, **kw: calls.update([model.service_model.service_id]))

        class Ctx:
            invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"

        now = datetime.now(timezone.utc)
        run_tick(settings, build_ports(settings, session, Ctx()), now, log=lambda _: None, lease=("bench", 60.0))
        first = sum(calls.values())
        calls.clear()  # the next tick: Budgets is not read again within the hour
        run_tick(
            settings,
            build_ports(settings, session, Ctx()),
            now + timedelta(minutes=1),
            log=lambda _: None,
            lease=("bench", 60.0),
        )  # as the handler runs it: the lease is two DynamoDB calls per tick
        return first, calls
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def bench_import(data: bytes) -> float:
    with tempfile.TemporaryDirectory() as d:
        zipfile.ZipFile(io.BytesIO(data)).extractall(d)
        code = "import time; t=time.perf_counter(); import policy.handler; print(time.perf_counter()-t)"
        runs = [
            float(
                subprocess.run([sys.executable, "-c", code], cwd=d, capture_output=True, text=True, check=True).stdout
            )
            for _ in range(5)
        ]
    return statistics.median(runs) * 1000


def main() -> None:
    data = build_zip()
    decide_ms = bench_decide()
    first, by_service = bench_calls()
    import_ms = bench_import(data)
    services = " ".join(f"{k}={v}" for k, v in sorted(by_service.items()))
    print(
        f"decide 100 pools x 32 nodes: {decide_ms:.1f} ms (target < 20) | AWS calls per tick, 10 pools: {sum(by_service.values())} "
        f"({services}; {first} on an hourly budget tick) | zip: {len(data) / 1024:.1f} KiB (target < 200) | handler import: {import_ms:.0f} ms "
        f"(target < 300)"
    )


if __name__ == "__main__":
    main()
