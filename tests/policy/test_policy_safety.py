"""Issue 14's safety rules at the tick and handler level, over in-memory fakes (and the fake Kubernetes API for
the deadline): the check before a termination, one kind of change per group, one deadline per tick with
nothing acted on that was not read, every read failure in the tick's errors, client timeouts and retries."""

from __future__ import annotations

import base64
import time
import types

import pytest

from fake_kube import FakeKube
from policy import handler
from policy.deadline import Deadline
from policy.errors import DataUnavailable, PolicyError
from policy.io.kube import KubeClient
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    Action,
    Node,
    Observation,
    Plan,
    PoolDecision,
    PoolObservation,
)
from policy.terms import Reason
from policy.ports import Instance
from policy.memory_state import MemoryState
from policy.tick import Ports, TickResult, _apply, run_tick
from policy_cases import NOW, OD, SPOT, ago, group, pool_settings, settings
from test_policy_adapters import FakeGroups, FakeNodes, FakePods, FakePublisher, FakeUtil


def _token() -> str:
    url = (
        "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
        "&X-Amz-Signature=abc"
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def _world(nodes: FakeNodes | None = None, n_idle: int = 2, pods=None):
    instances = [Instance(f"i-idle{k}", SPOT, "InService", ago(120), f"node-{k}") for k in range(n_idle)]
    instances.append(Instance("i-busy", SPOT, "InService", ago(120), "node-busy"))
    util = {i.instance_id: 0.0 for i in instances}
    util["i-busy"] = 70.0
    groups = FakeGroups([group(SPOT, len(instances)), group(OD, 0)], instances)
    pods = FakePods({"research": ()}) if pods is None else pods
    return Ports(
        groups, FakeUtil(util), pods, None, MemoryState(), FakePublisher(), FakeNodes() if nodes is None else nodes
    )


def test_every_termination_is_cordoned_then_checked():
    ports = _world()
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert ports.groups.writes == [("terminate", "i-idle0"), ("terminate", "i-idle1")]
    assert ports.nodes.log == [("cordon", "node-0"), ("pods", "node-0"), ("cordon", "node-1"), ("pods", "node-1")]
    assert result.errors == [] and len(result.applied) == 2


def test_a_pod_read_failure_stops_every_termination_of_the_tick():
    nodes = FakeNodes(fail=DataUnavailable("Kubernetes API 403 on GET /api/v1/pods"))
    ports = _world(nodes)
    logs: list[str] = []
    result = run_tick(settings(pool_settings()), ports, NOW, logs.append)
    assert ports.groups.writes == []
    # the first node was cordoned, its pods unreadable: uncordoned, and the second node is not even tried
    assert nodes.log == [("cordon", "node-0"), ("pods", "node-0"), ("uncordon", "node-0")]
    assert nodes.cordoned == set()
    assert any("403" in e for e in result.errors)
    assert any('"PolicyErrors":1' in line for line in logs)
    assert not any("reclaimed" in s for s in ports.publisher.sent), "nothing was reclaimed, nothing is announced"


def test_a_node_someone_else_cordoned_stays_cordoned():
    nodes = FakeNodes(blockers={"node-0": ["default/job requests 1 GPU(s)"]})
    nodes.cordoned.add("node-0")  # an operator drained it by hand
    ports = _world(nodes, n_idle=1)
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert ports.groups.writes == [] and len(result.blocked) == 1
    assert "node-0" in nodes.cordoned and ("uncordon", "node-0") not in nodes.log


def test_without_kubernetes_nothing_is_terminated_and_the_blindness_is_reported():
    ports = _world()
    ports.nodes = None
    ports.pods = None
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert ports.groups.writes == []
    assert any("pending pods are unknown" in e for e in result.errors)


def test_the_tick_refuses_two_kinds_of_change_on_one_group():
    """Defence in depth behind the engine's property: a plan with set_desired and terminate on one group (as a
    budget drain once produced) gets only its first change applied."""
    ps = pool_settings()
    ports = _world()
    obs = Observation((PoolObservation("research", (group(SPOT, 3),), (Node("i-idle0", SPOT, ago(120)),)),))
    plan = Plan(
        (
            PoolDecision(
                "research",
                (
                    Action("research", ACTION_SET_DESIRED, Reason.BUDGET_DRAIN, SPOT, 3, 2, detail="x"),
                    Action(
                        "research", ACTION_TERMINATE, Reason.BUDGET_DRAIN, SPOT, 2, 1, instance_id="i-idle0", detail="x"
                    ),
                ),
            ),
        )
    )
    result = TickResult(plan)
    _apply(settings(ps), plan, obs, ports, result, None, {"i-idle0": "node-0"})
    assert ports.groups.writes == [("set", SPOT, 2)]
    assert "already gets a set_desired" in result.failed[0][1]


def test_a_slow_kubernetes_api_cannot_stretch_the_tick_past_its_deadline():
    """Issue 14 item 5: the API server answers after 3 s; the tick has 1.5 s. The pod list times out at the
    deadline, pending pods are unknown, so nothing is scaled for pods and no idle node is reclaimed: the tick
    acts on nothing it has not fully read, and ends in time."""
    kube = FakeKube("c")
    kube.delay_s = 3.0
    try:
        deadline = Deadline(1.5)
        client = KubeClient(kube.endpoint, kube.ca_pem, _token, deadline)
        ports = _world(pods=client)
        ports.nodes = client
        start = time.monotonic()
        result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None, deadline=deadline)
        took = time.monotonic() - start
    finally:
        kube.delay_s = 0
        kube.close()
    assert took < 1.5 + 0.5, took
    assert ports.groups.writes == []
    assert result.plan.changes == () or all(a.kind != ACTION_TERMINATE for a in result.plan.changes)
    assert any("deadline" in e for e in result.errors), result.errors


def test_a_passed_deadline_skips_the_remaining_writes():
    clock = [0.0]
    deadline = Deadline(10.0, clock=lambda: clock[0])

    class SlowUtil(FakeUtil):
        def read(self, nodes, now, window):
            clock[0] = 11.0  # the reads used up the tick's time
            return super().read(nodes, now, window)

    ports = _world()
    ports.utilization = SlowUtil(ports.utilization.util)
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None, deadline=deadline)
    assert ports.groups.writes == [] and ports.nodes.log == []
    assert any("deadline" in e for e in result.errors)


def test_budgets_access_denied_is_an_error_and_the_estimate_still_drains():
    """Issue 14 item 6: Budgets refuses (AccessDenied): the failure is in the tick's errors, and a month-to-date
    estimate past the budget drains the idle node anyway."""

    class Denied:
        def actual_usd(self, name):
            raise DataUnavailable("Budgets DescribeBudget b: AccessDeniedException")

    ps = pool_settings(budget_monthly_usd=100.0, budget_name="b")
    ports = _world(n_idle=1)
    ports.budgets = Denied()
    ports.state.items["tick"] = (
        {
            "spend": {
                "pool:research": {
                    "month": NOW.strftime("%Y-%m"),
                    "actual_usd": None,
                    "actual_as_of": None,
                    "estimated_since_usd": 150.0,
                    "elastic_month_usd": 100.0,
                }
            }
        },
        1,
    )
    result = run_tick(settings(ps), ports, NOW, lambda _: None)
    assert any("AccessDenied" in e for e in result.errors)
    assert [(a.kind, a.reason, a.instance_id) for a in result.applied] == [
        (ACTION_TERMINATE, Reason.BUDGET_DRAIN, "i-idle0")
    ]
    assert ports.groups.writes == [("terminate", "i-idle0")], "the busy node is never drained"


def test_every_client_has_timeouts_and_adaptive_retries(monkeypatch):
    """Adaptive (issue 41): standard retries plus botocore's client-side rate limiter once AWS throttles, since a
    tick's calls run side by side; a pooled connection for each call in flight."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(handler, "_session", None)
    session = handler._warm_session()
    for service in ("eks", "autoscaling", "ec2", "cloudwatch", "budgets", "dynamodb", "sns", "sts"):
        cfg = handler._client(session, service).meta.config
        assert cfg.connect_timeout == handler.CONNECT_TIMEOUT_S and cfg.read_timeout == handler.READ_TIMEOUT_S
        assert cfg.retries["mode"] == "adaptive"
        # total_max_attempts counts the first try (botocore's "max_attempts" would count retries only)
        assert cfg.retries == {"mode": "adaptive", "total_max_attempts": handler.MAX_ATTEMPTS}
        assert cfg.max_pool_connections >= 32  # config.Policy.aws_calls_in_flight's maximum
    # one call in flight past the deadline plus the final state write still end before Lambda's timeout
    from stacks.policy_function.function import TIMEOUT_SECONDS

    assert handler.DEADLINE_MARGIN_S >= 2 * handler.WORST_CALL_S
    assert TIMEOUT_SECONDS - handler.DEADLINE_MARGIN_S >= 15, "the tick keeps most of its time for work"


def test_a_throttling_endpoint_is_tried_exactly_max_attempts_times(monkeypatch):
    """The worst case the deadline margin is sized for: every answer a 503, retried MAX_ATTEMPTS times in all."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import boto3

    hits = []

    class Busy(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            hits.append(1)
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "x")
    try:
        sns = boto3.Session(region_name="us-east-1").client(
            "sns", endpoint_url=f"http://127.0.0.1:{server.server_address[1]}", config=handler.boto_config()
        )
        with pytest.raises(Exception):
            sns.list_topics()
    finally:
        server.shutdown()
    assert len(hits) == handler.MAX_ATTEMPTS


def test_the_deadline_comes_from_the_context():
    ctx = types.SimpleNamespace(get_remaining_time_in_millis=lambda: 50_000)
    d = Deadline.from_context(ctx, handler.DEADLINE_MARGIN_S)
    assert 50 - handler.DEADLINE_MARGIN_S - 1 < d.remaining_s() <= 50 - handler.DEADLINE_MARGIN_S
    assert Deadline.from_context(types.SimpleNamespace(), 5) is None


def test_a_describe_cluster_failure_is_a_tick_error(monkeypatch):
    """Issue 14 item 6: it used to be only printed, and pending-pod scale-up and reclaim silently stopped."""
    monkeypatch.delenv("GPULOAN_KUBE_ENDPOINT", raising=False)
    monkeypatch.delenv("GPULOAN_STATE_TABLE", raising=False)
    monkeypatch.delenv("GPULOAN_TOPIC_ARN", raising=False)

    class Eks:
        def describe_cluster(self, name):
            raise RuntimeError("AccessDeniedException: not authorized to perform eks:DescribeCluster")

    class Session:
        def client(self, service, config=None):
            return Eks() if service == "eks" else object()

        def get_credentials(self):
            return None

    monkeypatch.setattr(handler, "_cluster_cache", {})
    errors: list[str] = []
    ports = handler.build_ports(settings(pool_settings()), Session(), types.SimpleNamespace(), None, errors)
    assert ports.pods is None and ports.nodes is None
    assert len(errors) == 1 and "DescribeCluster" in errors[0] and "AccessDenied" in errors[0]


@pytest.mark.parametrize("event", [{"now": "2027-01-15T00:00:00Z"}, {"now": "not a time"}])
def test_handle_uses_the_clock_in_a_live_tick(monkeypatch, event):
    seen = {}
    monkeypatch.setattr(handler, "load_settings", lambda: settings(pool_settings()))
    monkeypatch.setattr(handler, "build_ports", lambda *a, **k: None)
    monkeypatch.setattr(handler, "clock", lambda: NOW)
    monkeypatch.setattr(handler, "run_tick", lambda s, p, now, **kw: seen.update(now=now, **kw))
    handler.handle(event, types.SimpleNamespace(), session=object())
    assert seen["now"] == NOW and seen["persist"] is True


def test_a_dry_run_may_replay_a_time_but_never_writes_state(monkeypatch):
    seen = {}
    monkeypatch.setattr(handler, "load_settings", lambda: settings(pool_settings()))
    monkeypatch.setattr(handler, "build_ports", lambda *a, **k: None)
    monkeypatch.setattr(handler, "run_tick", lambda s, p, now, **kw: seen.update(now=now, dry=s.dry_run, **kw))
    handler.handle({"dry_run": True, "now": "2027-01-15T00:00:00Z"}, types.SimpleNamespace(), session=object())
    assert seen["now"].isoformat() == "2027-01-15T00:00:00+00:00" and seen["dry"] and seen["persist"] is False


def test_policy_errors_never_stop_a_tick():
    class Broken:
        def read(self, *a, **k):
            raise PolicyError("boom")

    ports = _world()
    ports.utilization = Broken()
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert "PolicyError: boom" in result.errors and ports.groups.writes == []


def test_a_node_annotated_do_not_disrupt_is_neither_cordoned_nor_terminated():
    """Karpenter reads karpenter.sh/do-not-disrupt on the Node too; so does the check before a termination."""
    kube = FakeKube("c")
    try:
        kube.add_node("node-0", annotations={"karpenter.sh/do-not-disrupt": "true"})
        client = KubeClient(kube.endpoint, kube.ca_pem, _token)
        ports = _world(n_idle=1, pods=client)
        ports.nodes = client
        result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    finally:
        kube.close()
    assert ports.groups.writes == [] and kube.patches == []
    assert "node node-0 has karpenter.sh/do-not-disrupt=true" in result.blocked[0][1]


def test_a_token_that_cannot_be_made_is_a_read_failure_not_a_crash():
    def no_credentials():
        raise RuntimeError("Unable to locate credentials")

    client = KubeClient("https://127.0.0.1:1", None, no_credentials)
    ports = _world(pods=client)
    ports.nodes = client
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert any("EKS token could not be made" in e for e in result.errors)
    assert ports.groups.writes == []
