"""One policy tick of an organization of 50, 100 and 200 pools (issue 41 item 1, the tick part of `make
bench-scale`): the packaged handler (the zip, in a fresh interpreter, as Lambda runs it) against the moto server,
every AWS call delayed by a fixed latency on its way there, and a fake Kubernetes API with one pending GPU pod per
pool, so that every pool's spot group is grown in the tick measured: the tick with the most writes a steady
organization sees (a reclaim costs the same calls per group).

    .venv/bin/python scripts/bench_scale_tick.py [--pools 50,100,200] [--latency-ms 100] [--profile]
    (or: make bench-scale-tick)

Each pool has a spot group (2 instances), an on-demand group (0) and a floor group (1 instance), an hourly budget
of its own under the environment's, and the state table, topic and lease of the real function. Printed per size:
the tick's wall seconds (inside the handler, the import excluded), its AWS calls by service, and whether it held
its deadline. The last line is `tick 200 pools: S s, C calls` (the largest size asked for). `--profile` adds,
per size, a table of the AWS operations (calls, seconds summed, the emulator's own seconds, and the first start
and last end in the tick: spans that do not overlap ran one after the other) and how much of the tick had an AWS
call in flight and how much the emulator spent answering, so that moto's time is told apart from the tick's.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from policy.model import PoolSettings, Settings  # noqa: E402
from stacks.policy_function.package import POLICY_DIR, build_zip  # noqa: E402

ACCOUNT = "123456789012"
REGION = "us-east-1"
CLUSTER = "c"
TABLE = "state"
FUNCTION_REMAINING_MS = 50_000  # the function's timeout (stacks/policy_function/function.py TIMEOUT_SECONDS)
TARGET_S = 25.0
TARGET_CALLS_PER_POOL = 2.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LatencyProxy:
    """HTTP in front of the emulator: each request waits `latency_s` (in its own thread, as a round trip to AWS
    would), then goes to `upstream`; every request is counted by service (the SigV4 credential scope) and
    operation."""

    def __init__(self, upstream: str, latency_s: float):
        import requests

        self.latency_s = latency_s
        self.calls: Counter = Counter()
        self.operations: Counter = Counter()
        self.emulator_s: Counter = Counter()  # seconds the emulator took to answer, per operation (beyond latency)
        # Every call as (operation, started, ended, emulator seconds), on time.monotonic(): the same clock as the
        # handler's process, so `--profile` can place each call in the tick (what runs side by side, what waits).
        self.timeline: list[tuple[str, float, float, float]] = []
        self.in_flight = self.max_in_flight = 0
        lock = threading.Lock()
        local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                auth = self.headers.get("Authorization", "")
                service = auth.split("Credential=", 1)[1].split("/")[3] if "Credential=" in auth else "?"
                target = self.headers.get("X-Amz-Target", "")
                if target:
                    operation = target.rsplit(".", 1)[-1]
                elif body.startswith(b"Action="):
                    operation = body.split(b"&", 1)[0][len("Action=") :].decode()
                else:
                    operation = _rest_operation(service, self.command, self.path.split("?", 1)[0])
                started = time.monotonic()
                with lock:
                    proxy.calls[service] += 1
                    proxy.operations[f"{service} {operation}"] += 1
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    time.sleep(proxy.latency_s)
                    if not hasattr(local, "session"):
                        local.session = requests.Session()
                    sent = time.monotonic()
                    resp = local.session.request(
                        self.command,
                        upstream + self.path,
                        data=body,
                        timeout=60,
                        headers={k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")},
                    )
                    answered = time.monotonic()
                    with lock:
                        proxy.emulator_s[f"{service} {operation}"] += answered - sent
                        proxy.timeline.append((f"{service} {operation}", started, answered, answered - sent))
                finally:
                    with lock:
                        proxy.in_flight -= 1
                data = resp.content
                self.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                        "server",
                        "date",
                    ):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward  # noqa: N815 - http.server's names

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a call the tick cut at its deadline hangs up on the proxy: that is the tick's to report

        self._server = Server(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def reset(self) -> None:
        self.calls.clear()
        self.operations.clear()
        self.emulator_s.clear()
        self.timeline.clear()
        self.max_in_flight = 0

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


_REST_ROUTES: dict[str, list[tuple[re.Pattern, str, str]]] = {}


def _rest_operation(service: str, method: str, path: str) -> str:
    """The API operation of a REST request (EKS: `GET /clusters/c/node-groups/p0-s` is DescribeNodegroup), from
    botocore's own model of the service (`service`: its SigV4 signing name); the method and path when none matches."""
    if service not in _REST_ROUTES:
        import botocore.session

        routes = []
        try:
            model = botocore.session.get_session().get_service_model(service)
        except Exception:  # noqa: BLE001 - not a service botocore knows by that name: keep the raw path
            model = None
        for name in model.operation_names if model is not None else ():
            http = model.operation_model(name).http
            template = http.get("requestUri", "").split("?", 1)[0]
            pattern = re.escape(template)
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)  # every {member} of the URI: one segment
            routes.append((re.compile(pattern + "/?"), http.get("method", ""), name))
        # The longest template first, so `/clusters/{name}` does not take `/clusters/{name}/node-groups/...`.
        _REST_ROUTES[service] = sorted(routes, key=lambda r: -len(r[0].pattern))
    for pattern, verb, name in _REST_ROUTES[service]:
        if verb == method and pattern.fullmatch(path):
            return name
    return f"{method} {path}"


def _world(pools: int, session) -> Settings:
    """The emulated account: `pools` pools of a spot (2 nodes), an on-demand (0) and a floor (1) group each."""
    eks, asg, ec2 = session.client("eks"), session.client("autoscaling"), session.client("ec2")
    subnet = ec2.create_subnet(
        VpcId=ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"],
        CidrBlock="10.0.0.0/18",
        AvailabilityZone=f"{REGION}a",
    )["Subnet"]["SubnetId"]
    eks.create_cluster(
        name=CLUSTER, roleArn=f"arn:aws:iam::{ACCOUNT}:role/r", resourcesVpcConfig={"subnetIds": [subnet]}
    )
    ec2.create_launch_template(
        LaunchTemplateName="gpu-lt",
        LaunchTemplateData={"ImageId": ec2.describe_images()["Images"][0]["ImageId"], "InstanceType": "g6.xlarge"},
    )
    session.client("dynamodb").create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
    )
    budgets = session.client("budgets")
    budgets.create_budget(
        AccountId=ACCOUNT,
        Budget={
            "BudgetName": "env",
            "BudgetLimit": {"Amount": "10000000", "Unit": "USD"},
            "TimeUnit": "MONTHLY",
            "BudgetType": "COST",
        },
    )
    ps = []
    for p in range(pools):
        for kind, n in (("s", 2), ("o", 0), ("g", 1)):
            name = f"p{p}-{kind}"
            if kind != "g":  # an elastic group: EKS's node group too (the tick reads it again, then resizes it)
                eks.create_nodegroup(
                    clusterName=CLUSTER,
                    nodegroupName=name,
                    subnets=[subnet],
                    nodeRole=f"arn:aws:iam::{ACCOUNT}:role/n",
                    scalingConfig={"minSize": 0, "maxSize": 8, "desiredSize": n},
                )
                asg_name = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=name)["nodegroup"]["resources"][
                    "autoScalingGroups"
                ][0]["name"]
            else:  # a floor is read through its Auto Scaling group only: moto's CreateNodegroup is the slow part
                asg_name = f"eks-{name}"
            asg.create_auto_scaling_group(
                AutoScalingGroupName=asg_name,
                MinSize=0,
                MaxSize=8,
                DesiredCapacity=n,
                VPCZoneIdentifier=subnet,
                LaunchTemplate={"LaunchTemplateName": "gpu-lt", "Version": "$Latest"},
                Tags=[
                    {"Key": k, "Value": v, "PropagateAtLaunch": True}  # as EKS tags it
                    for k, v in (("eks:cluster-name", CLUSTER), ("eks:nodegroup-name", name))
                ],
            )
        budgets.create_budget(
            AccountId=ACCOUNT,
            Budget={
                "BudgetName": f"b{p}",
                "BudgetLimit": {"Amount": "100000", "Unit": "USD"},
                "TimeUnit": "MONTHLY",
                "BudgetType": "COST",
            },
        )
        ps.append(
            PoolSettings(
                name=f"p{p}",
                team=f"t{p}",
                tier="experiment",
                gpus_per_node=1,
                spot_group=f"p{p}-s",
                on_demand_group=f"p{p}-o",
                guaranteed_group=f"p{p}-g",
                spot_max_nodes=8,
                on_demand_max_nodes=8,
                spot_usd_per_hour=0.4,
                on_demand_usd_per_hour=1.0,
                guaranteed_nodes=1,
                budget_monthly_usd=100_000.0,
                budget_name=f"b{p}",
            )
        )
    return Settings("bench", REGION, CLUSTER, tuple(ps), budget_monthly_usd=10_000_000.0, budget_name="env")


_RUN = (
    "import json,sys,time,types; import policy.handler as h; "
    "end = time.monotonic() + int(sys.argv[1]) / 1000; "
    "ctx = types.SimpleNamespace(invoked_function_arn='arn:aws:lambda:us-east-1:123456789012:function:bench', "
    "aws_request_id='bench', get_remaining_time_in_millis=lambda: int((end - time.monotonic()) * 1000)); "
    "t = time.monotonic(); r = h.lambda_handler({}, ctx); s = time.monotonic() - t; "
    "print(json.dumps({'seconds': s, 'started': t, 'result': r}))"
)


def _invoke(package_dir: str, env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(FUNCTION_REMAINING_MS)],
        cwd=package_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the handler failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def tick(pools: int, latency_s: float, policy_dir: Path | None = None) -> dict:
    """One tick of `pools` pools: {"seconds", "calls" (by service), "operations", "errors", "changes", ...}."""
    import boto3
    import requests
    from moto.server import ThreadedMotoServer

    from fake_kube import FakeKube, gpu_pod

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    moto = f"http://127.0.0.1:{port}"
    proxy = LatencyProxy(moto, latency_s)
    kube = FakeKube(CLUSTER, page_size=500)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPULOAN_", "PYTHONPATH"))}
    creds = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}
    try:
        requests.post(f"{moto}/moto-api/reset", timeout=60)  # moto's backends are per process, not per server
        setup = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name=REGION)
        old = os.environ.get("AWS_ENDPOINT_URL")
        os.environ["AWS_ENDPOINT_URL"] = moto  # the world is built without the latency
        try:
            settings = _world(pools, setup)
            topic = setup.client("sns").create_topic(Name="alerts")["TopicArn"]
        finally:
            os.environ.pop("AWS_ENDPOINT_URL") if old is None else os.environ.update(AWS_ENDPOINT_URL=old)
        env = {
            **base_env,
            **creds,
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "GPULOAN_STATE_TABLE": TABLE,
            "GPULOAN_TOPIC_ARN": topic,
            "GPULOAN_KUBE_ENDPOINT": kube.endpoint,
            "GPULOAN_KUBE_CA_PEM": kube.ca_pem,
        }
        with tempfile.TemporaryDirectory() as d:
            zipfile.ZipFile(io.BytesIO(build_zip(policy_dir or POLICY_DIR, settings.to_json()))).extractall(d)
            # The first tick of the hour reads every budget (one DescribeBudget each, policy/spend.py) and finds
            # nothing to do; the tick measured is the next one, with a pending GPU pod in every pool.
            hourly = _invoke(d, env)
            hourly_calls = sum(proxy.calls.values())
            proxy.reset()
            spot_ok = [{"key": "gpuloan.io/spot", "operator": "Exists", "effect": "NoSchedule"}]
            kube.pods = [gpu_pod(f"job-{p}", 1, pool=f"p{p}", tolerations=spot_ok) for p in range(pools)]
            out = _invoke(d, env)
        timeline = [
            (op, round(start - out["started"], 3), round(end - out["started"], 3), round(emulator, 3))
            for op, start, end, emulator in sorted(proxy.timeline, key=lambda c: c[1])
        ]
        return {
            "pools": pools,
            "seconds": out["seconds"],
            "calls": dict(proxy.calls),
            "timeline": timeline,
            "operations": dict(proxy.operations),
            "emulator_s": {k: round(v, 2) for k, v in proxy.emulator_s.most_common()},
            "errors": out["result"]["errors"],
            "changes": len(out["result"]["changes"]),
            "applied": out["result"]["applied"],
            "failed": out["result"]["failed"],
            "max_in_flight": proxy.max_in_flight,
            "hourly_seconds": hourly["seconds"],
            "hourly_calls": hourly_calls,
            "hourly_errors": hourly["result"]["errors"],
        }
    finally:
        kube.close()
        proxy.close()
        server.stop()


SERVICE_LABELS = {
    "autoscaling": "ASG",
    "monitoring": "CloudWatch",
    "dynamodb": "DynamoDB",
    "ec2": "EC2",
    "eks": "EKS",
    "sns": "SNS",
    "budgets": "Budgets",
    "sts": "STS",
}


def profile(timeline: list[tuple[str, float, float, float]]) -> list[dict]:
    """Per operation, in the order the tick first called it: its calls, their seconds summed (the injected latency
    and the emulator's answer), the emulator's seconds alone, and when the first started and the last ended
    (seconds since the handler was called): operations whose spans do not overlap ran one after the other."""
    rows: dict[str, dict] = {}
    for op, start, end, emulator in timeline:
        row = rows.setdefault(
            op, {"operation": op, "calls": 0, "wall_s": 0.0, "emulator_s": 0.0, "from_s": start, "to_s": end}
        )
        row["calls"] += 1
        row["wall_s"] += end - start
        row["emulator_s"] += emulator
        row["from_s"], row["to_s"] = min(row["from_s"], start), max(row["to_s"], end)
    return list(rows.values())


def _busy_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the spans."""
    total, until = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > until:
            total += end - max(start, until)
            until = end
    return total


def profile_lines(r: dict) -> list[str]:
    """`--profile`: the table of `profile` (80 columns), then where the tick's seconds went."""
    timeline = r["timeline"]
    lines = [f"  {'operation':<40}{'calls':>6}{'sum s':>8}{'moto s':>8}{'from s':>8}{'to s':>8}"]
    for row in profile(timeline):
        service, _, op = row["operation"].partition(" ")
        name = f"{SERVICE_LABELS.get(service, service)} {op}"
        lines.append(
            f"  {name[:40]:<40}{row['calls']:>6}{row['wall_s']:>8.1f}{row['emulator_s']:>8.1f}"
            f"{row['from_s']:>8.1f}{row['to_s']:>8.1f}"
        )
    aws = _busy_s([(start, end) for _, start, end, _ in timeline])
    moto = _busy_s([(end - emulator, end) for _, _, end, emulator in timeline])
    summed = sum(emulator for *_, emulator in timeline)
    lines.append(
        f"  of the tick's {r['seconds']:.1f} s: AWS calls in flight {aws:.1f} s, the emulator answering {moto:.1f} s"
    )
    lines.append(f"  (its answers summed {summed:.1f} s), no AWS call in flight {r['seconds'] - aws:.1f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pools", default="50,100,200", help="sizes, comma-separated (default 50,100,200)")
    ap.add_argument("--latency-ms", type=float, default=100.0, help="added to every AWS call (default 100)")
    ap.add_argument("--json", action="store_true", help="one JSON object per size instead of text")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="per AWS operation: calls, seconds (summed, and the emulator's alone), and when in the tick they ran",
    )
    ap.add_argument(
        "--policy-dir",
        type=Path,
        help="package this policy/ instead (e.g. another commit's, from "
        "`git archive <commit> policy | tar -x -C DIR`, then DIR/policy)",
    )
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.pools.split(",") if x.strip()]
    last = None
    for n in sizes:
        r = tick(n, args.latency_ms / 1000, args.policy_dir)
        total = sum(r["calls"].values())
        if args.json:
            shown = {**r, "total_calls": total, "profile": profile(r["timeline"])}
            if not args.profile:
                shown.pop("timeline")
            print(json.dumps(shown, sort_keys=True))
        else:
            by = " ".join(f"{k}={v}" for k, v in sorted(r["calls"].items()))
            print(f"{n} pools: {r['seconds']:.1f} s, {total} calls ({total / n:.2f} a pool)")
            print(f"  {by}")
            print(
                f"  applied {r['applied']}/{r['changes']}, failed {r['failed']}, "
                f"{len(r['errors'])} errors, {r['max_in_flight']} calls at once at most"
            )
            if r["emulator_s"]:
                slowest, slowest_s = max(r["emulator_s"].items(), key=lambda kv: kv[1])
                service, _, op = slowest.partition(" ")
                print(
                    f"  moto's own answer time, summed: {sum(r['emulator_s'].values()):.1f} s "
                    f"(most: {SERVICE_LABELS.get(service, service)} {op} {slowest_s:.1f} s)"
                )
            print(
                f"  the hour's first tick (every budget read, no change): {r['hourly_seconds']:.1f} s, "
                f"{r['hourly_calls']} calls"
            )
            for e in r["errors"][:3]:
                print(f"  error: {e[:74]}")
            if args.profile:
                print("\n".join(profile_lines(r)))
        last = (n, r["seconds"], total)
    if last is not None:
        print(f"tick {last[0]} pools: {last[1]:.1f} s, {last[2]} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
