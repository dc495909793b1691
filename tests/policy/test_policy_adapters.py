"""Adapters and the tick over in-memory fakes: notification templates, rate limits, batching, pod parsing,
spend accounting, and write faults (update in progress, throttling) that must leave capacity alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fake_kube import gpu_pod
from policy import notifications as N
from policy.errors import ConflictingUpdate, Throttled
from policy.pods import pod_gpus, pod_pools
from policy.model import ACTION_SET_DESIRED, ACTION_TERMINATE, Action, PoolDecision
from policy.terms import Reason
from policy.ports import GroupState, Instance
from policy.spend import accrue, observe_spend
from policy.memory_state import MemoryState
from policy.tick import Ports, run_tick
from policy.io.cloudwatch import MAX_QUERIES_PER_CALL, CloudWatchUtilization
from policy.gpu_series import Series
from policy.ports import NodeRef
from policy_cases import NOW, OD, SPOT, ago, group, pool_settings, settings


def _decision(*actions, **kw) -> PoolDecision:
    return PoolDecision(
        "training",
        tuple(actions),
        desired_after={"prod-training-spot": 3, "prod-training-on-demand": 0},
        month_to_date_usd=1234.5,
        projected_month_usd=5000.0,
        **kw,
    )


KINDS = {
    N.KIND_SCALE_UP: _decision(
        Action(
            "training",
            ACTION_SET_DESIRED,
            Reason.SCALE_UP_PENDING,
            "prod-training-spot",
            1,
            3,
            detail="2 pending GPU(s) need 2 more node(s)",
        )
    ),
    N.KIND_RECLAIM: _decision(
        Action(
            "training",
            ACTION_TERMINATE,
            Reason.RECLAIM_IDLE,
            "prod-training-spot",
            4,
            3,
            instance_id="i-0abc",
            detail="max GPU utilization 0.5% < 5% for 30 min",
        )
    ),
    N.KIND_BUDGET_CAP: _decision(
        Action(
            "training",
            "hold",
            Reason.BUDGET_CAP,
            "prod-training-spot",
            detail="pool training budget $60,000 affords 0 more node(s)",
        )
    ),
    N.KIND_BUDGET_DRAIN: _decision(
        Action(
            "training",
            ACTION_TERMINATE,
            Reason.BUDGET_DRAIN,
            "prod-training-spot",
            3,
            2,
            instance_id="i-0def",
            detail="month-to-date reached the budget",
        )
    ),
    N.KIND_FALLBACK: _decision(
        Action(
            "training",
            ACTION_SET_DESIRED,
            Reason.SPOT_FALLBACK,
            "prod-training-on-demand",
            0,
            1,
            detail="spot short (0/1 up)",
        ),
        fallback_active=True,
    ),
    N.KIND_RECOVERED: _decision(
        Action("training", "hold", Reason.SPOT_RECOVERED, "prod-training-on-demand", detail="spot is filled")
    ),
    N.KIND_ON_DEMAND_ONLY: _decision(
        Action(
            "training",
            "hold",
            Reason.ON_DEMAND_ONLY,
            detail="2 pending pod(s) that may not run on spot (2 x 8 GPUs): ... no on-demand group",
        )
    ),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_notification_kind_renders_readably(kind):
    d = KINDS[kind]
    assert kind in N.kinds_of(d)
    msg = N.render(kind, "prod", d, 60000.0)
    assert msg.subject.startswith("[gpuloan prod] training: ") and len(msg.subject) <= N.SUBJECT_MAX
    assert msg.subject.isascii() and "\n" not in msg.subject
    assert "Environment: prod" in msg.body and "Pool: training" in msg.body
    assert "$1,234.50 of $60,000.00 budget" in msg.body
    assert d.actions[0].reason.value in msg.body and d.actions[0].detail in msg.body
    assert N._ADVICE[kind] in msg.body


def test_subjects_say_what_happened():
    subjects = {k: N.render(k, "prod", d).subject for k, d in KINDS.items()}
    assert subjects[N.KIND_SCALE_UP] == "[gpuloan prod] training: added 2 elastic GPU node(s)"
    assert subjects[N.KIND_RECLAIM] == "[gpuloan prod] training: reclaimed 1 idle GPU node(s)"
    assert subjects[N.KIND_FALLBACK] == "[gpuloan prod] training: spot short, using on-demand fallback"
    assert N.render(N.KIND_SCALE_UP, "prod", KINDS[N.KIND_SCALE_UP], dry_run=True).subject.startswith(
        "[gpuloan prod] [dry run] training:"
    )
    err = N.render_error("prod", "Throttled: CloudWatch GetMetricData")
    assert err.subject == "[gpuloan prod] all pools: policy function could not complete a tick"
    assert "Capacity was left as it was" in err.body


def test_rate_limit():
    state: dict = {}
    assert N.due(state, "training:scale_up", NOW, 30)
    assert not N.due(state, "training:scale_up", NOW + timedelta(minutes=29), 30)
    assert N.due(state, "training:reclaim", NOW + timedelta(minutes=1), 30)
    assert N.due(state, "training:scale_up", NOW + timedelta(minutes=30), 30)


def test_pod_parsing():
    assert pod_gpus(gpu_pod("a", 2, pool="p")) == 2
    pod = gpu_pod("b", 1, pool="p")
    pod["spec"]["initContainers"] = [{"resources": {"requests": {"nvidia.com/gpu": 4}}}]
    assert pod_gpus(pod) == 4  # the largest init container wins when bigger than the app containers' sum
    assert pod_pools(gpu_pod("c", 1, pool="p")) == {"p"}
    assert pod_pools(gpu_pod("d", 1, affinity_pools=["p", "q"])) == {"p", "q"}
    assert pod_pools(gpu_pod("e", 1)) == set()


def test_only_pods_the_scheduler_could_not_place_are_demand():
    """A gated pod (e.g. held by a queueing controller) or one the scheduler has not tried yet is Pending with no
    node too; counting it would add nodes it may never use, and block idle reclaim while it waits."""
    import base64

    from fake_kube import FakeKube
    from policy.io.kube import KubeClient

    kube = FakeKube("c", page_size=2)
    try:
        kube.pods = [
            gpu_pod("unschedulable", 2, pool="p"),
            gpu_pod("gated", 4, pool="p", scheduled="SchedulingGated", gates=["kueue.x-k8s.io/admission"]),
            gpu_pod("gated-no-condition-yet", 4, pool="p", scheduled=None, gates=["example.com/hold"]),
            gpu_pod("not-tried-yet", 1, pool="p", scheduled=None),
            gpu_pod("other-pool", 1, pool="q"),
        ]
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        pods = KubeClient(kube.endpoint, kube.ca_pem, lambda: token)
        assert pods.pending_gpus(["p", "q"]) == {"p": (2,), "q": (1,)}
        assert kube.bad_tokens == 0
    finally:
        kube.close()


# What Kueue's flavors put on admitted pods (config/scheduling.py): floor work is pinned to tier=guaranteed, spot
# work to tier=elastic with the spot toleration.
SPOT_TOLERATION = {"key": "gpuloan.io/spot", "operator": "Exists", "effect": "NoSchedule"}
FLOOR_PIN = {"gpuloan.io/tier": "guaranteed"}
ELASTIC_PIN = {"gpuloan.io/tier": "elastic"}


def _affinity(*expressions: dict) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]
            }
        }
    }


ELASTIC_DEMAND_CASES = [
    # (name, pod, pool's groups (spot, on_demand), counted for the elastic groups)
    (
        "floor_pinned_by_kueue",
        gpu_pod("f", 8, pool="p", node_selector=FLOOR_PIN, tolerations=[SPOT_TOLERATION]),
        (True, True),
        False,
    ),
    (
        "floor_pinned_by_affinity",
        {
            **gpu_pod("f", 8, pool="p"),
            "spec": {
                **gpu_pod("f", 8, pool="p")["spec"],
                "affinity": _affinity({"key": "gpuloan.io/tier", "operator": "In", "values": ["guaranteed"]}),
            },
        },
        (True, True),
        False,
    ),
    (
        "spot_flavored",
        gpu_pod("s", 8, pool="p", node_selector=ELASTIC_PIN, tolerations=[SPOT_TOLERATION]),
        (True, False),
        True,
    ),
    ("no_spot_toleration_on_a_spot_only_pool", gpu_pod("n", 1, pool="p"), (True, False), False),
    ("no_spot_toleration_goes_to_the_on_demand_group", gpu_pod("n", 1, pool="p"), (True, True), True),
    (
        "pinned_to_on_demand_on_a_spot_only_pool",
        gpu_pod("o", 1, pool="p", node_selector={"gpuloan.io/capacity": "on-demand"}, tolerations=[SPOT_TOLERATION]),
        (True, False),
        False,
    ),
    (
        "kept_off_spot_by_affinity",
        {
            **gpu_pod("k", 1, pool="p", tolerations=[SPOT_TOLERATION]),
            "spec": {
                **gpu_pod("k", 1, pool="p", tolerations=[SPOT_TOLERATION])["spec"],
                "affinity": _affinity({"key": "gpuloan.io/capacity", "operator": "NotIn", "values": ["spot"]}),
            },
        },
        (True, False),
        False,
    ),
    (
        "a_label_gpuloan_does_not_set_is_not_held_against_it",
        gpu_pod(
            "z",
            1,
            pool="p",
            node_selector={"topology.kubernetes.io/zone": "us-east-1a"},
            tolerations=[{"operator": "Exists"}],
        ),
        (True, False),
        True,
    ),
    ("floor_only_pool", gpu_pod("x", 1, pool="p", tolerations=[SPOT_TOLERATION]), (False, False), False),
]


@pytest.mark.parametrize("name,pod,groups,counted", ELASTIC_DEMAND_CASES, ids=[c[0] for c in ELASTIC_DEMAND_CASES])
def test_pending_pods_count_for_the_elastic_groups_only_when_they_could_run_there(name, pod, groups, counted):
    """Issue 24 item 5: Kueue pins floor work to `gpuloan.io/tier: guaranteed`; while a floor node rolls or fails
    those pods are pending, and counting them bought spot or on-demand nodes they can never run on. A pending pod
    (and an arrival, for keep-warm) counts for a pool's elastic groups only when its node selector, required node
    affinity and tolerations admit one of them."""
    import base64
    from datetime import datetime, timezone

    from fake_kube import FakeKube
    from policy.io.kube import KubeClient
    from policy.pods import elastic_shapes

    pod["metadata"]["creationTimestamp"] = "2026-03-10T11:50:00Z"
    kube = FakeKube("c")
    try:
        kube.pods = [pod]
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        client = KubeClient(kube.endpoint, kube.ca_pem, lambda: token)
        shapes = {"p": elastic_shapes("p", *groups)}
        gpus = pod_gpus(pod)
        assert client.pending_gpus(["p"], shapes) == {"p": (gpus,) if counted else ()}
        since = datetime(2026, 3, 10, 11, 0, tzinfo=timezone.utc)
        assert len(client.gpu_pod_arrivals(["p"], since, shapes)["p"]) == (1 if counted else 0)
        assert client.pending_gpus(["p"]) == {"p": (gpus,)}  # without shapes: every pod of the pool, as before
    finally:
        kube.close()


def test_the_policy_knows_the_labels_and_taints_the_stack_puts_on_elastic_nodes():
    """policy/pods.py repeats config/tags.py's keys (the Lambda zip does not ship stacks/): they must agree, or
    floor work would count as elastic demand again."""
    from policy import pods
    from config import tags
    from stacks.capacity import elastic, guaranteed

    assert (pods.POOL_LABEL, pods.TIER_LABEL, pods.CAPACITY_LABEL) == (
        tags.LABEL_POOL,
        tags.LABEL_TIER,
        tags.LABEL_CAPACITY,
    )
    assert pods.SPOT_TAINT_KEY == tags.SPOT_TAINT_KEY and pods.ELASTIC_TIER == elastic.TIER != guaranteed.TIER
    # the spot-warning path tells this stack's instances by the launch templates' environment tag
    from policy import handler

    assert handler.ENVIRONMENT_TAG == tags.TAG_ENVIRONMENT


def test_gpu_pod_arrivals_are_recent_unfinished_gpu_pods_per_pool():
    """Issue 17: the keep-or-release rule's rate comes from the pool's GPU pods created recently, pending or
    running (a pod that landed at once on a free node is exactly a job a kept node served); finished pods, pods
    older than the window, CPU pods and pods without a creation time do not count. A warned node's GPU pods are
    read for the spot notice."""
    import base64
    from datetime import datetime, timezone

    from fake_kube import FakeKube
    from policy.io.kube import KubeClient

    def at(pod, when):
        pod["metadata"]["creationTimestamp"] = when
        return pod

    kube = FakeKube("c", page_size=2)
    try:
        kube.pods = [
            at(gpu_pod("new-pending", 2, pool="p"), "2026-03-10T11:50:00Z"),
            at(gpu_pod("new-running", 1, pool="p", node_name="n1", phase="Running"), "2026-03-10T11:55:00Z"),
            at(gpu_pod("new-done", 4, pool="p", node_name="n1", phase="Succeeded"), "2026-03-10T11:56:00Z"),
            at(gpu_pod("old", 8, pool="p", node_name="n2", phase="Running"), "2026-03-10T10:00:00Z"),
            at(gpu_pod("cpu", 0, pool="p", node_name="n1", phase="Running"), "2026-03-10T11:57:00Z"),
            gpu_pod("no-time", 1, pool="p"),
            at(gpu_pod("other", 1, pool="q", node_name="n3", phase="Running"), "2026-03-10T11:58:00Z"),
        ]
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        client = KubeClient(kube.endpoint, kube.ca_pem, lambda: token)
        utc = timezone.utc
        got = client.gpu_pod_arrivals(["p", "q"], datetime(2026, 3, 10, 11, 0, tzinfo=utc))
        assert got == {
            "p": ((datetime(2026, 3, 10, 11, 50, tzinfo=utc), 2), (datetime(2026, 3, 10, 11, 55, tzinfo=utc), 1)),
            "q": ((datetime(2026, 3, 10, 11, 58, tzinfo=utc), 1),),
        }
        assert client.node_pod_gpus("n1") == (1,)  # the finished and the CPU pod need no place
        # Demand and arrivals come from one list of the unfinished pods per tick (the client lives one tick).
        listed = len([r for r in kube.requests if r.startswith("GET /api/v1/pods") and "nodeName%3Dn1" not in r])
        assert client.pending_gpus(["p", "q"]) == {"p": (2, 1), "q": ()}
        # the GPU pods bound to each node, unfinished (the finished, the CPU and the unbound pods do not count)
        assert client.gpu_pods_by_node() == {"n1": 1, "n2": 1, "n3": 1}
        assert (
            len([r for r in kube.requests if r.startswith("GET /api/v1/pods") and "nodeName%3Dn1" not in r]) == listed
        )
    finally:
        kube.close()


class FakeCloudWatch:
    """Answers every query with 30 one-minute datapoints: 3.0 for utilization, 0.0 for GPU reserved capacity."""

    def __init__(self):
        self.batches = []
        self.metrics = set()

    def get_metric_data(self, **kw):
        self.batches.append(len(kw["MetricDataQueries"]))
        out = []
        for q in kw["MetricDataQueries"]:
            metric = q["MetricStat"]["Metric"]["MetricName"]
            self.metrics.add((metric, q["MetricStat"]["Stat"]))
            value = 0.0 if metric == "node_gpu_reserved_capacity" else 3.0
            out.append(
                {"Id": q["Id"], "Timestamps": [NOW - timedelta(minutes=m) for m in range(30)], "Values": [value] * 30}
            )
        return {"MetricDataResults": out}


def test_get_metric_data_is_batched_at_500_queries():
    cw = FakeCloudWatch()
    nodes = [NodeRef(f"i-{k}", f"ip-{k}") for k in range(600)]
    series = CloudWatchUtilization(cw, "c").read(nodes, NOW, 30)
    # three queries per node: utilization Average and Maximum, GPU reserved capacity Maximum
    # (the batches run side by side: in any order)
    assert sorted(cw.batches) == [300, MAX_QUERIES_PER_CALL, MAX_QUERIES_PER_CALL, MAX_QUERIES_PER_CALL]
    assert cw.metrics == {
        ("node_gpu_utilization", "Average"),
        ("node_gpu_utilization", "Maximum"),
        ("node_gpu_reserved_capacity", "Maximum"),
    }
    assert len(series) == 600 and series["i-599"].max_over(NOW, 30) == 3.0
    assert series["i-599"].reserved_max_over(NOW, 10) == 0.0
    assert Series(series["i-599"].points).reserved_max_over(NOW, 10) is None  # no reserved data: not "empty"


def test_series_needs_coverage_and_freshness():
    full = Series(tuple((NOW - timedelta(minutes=m), 1.0, 1.0) for m in range(30)))
    assert full.max_over(NOW, 30) == 1.0 and full.avg_over(NOW, 10) == 1.0
    sparse = Series(tuple((NOW - timedelta(minutes=m), 1.0, 1.0) for m in range(0, 30, 3)))
    assert sparse.max_over(NOW, 30) is None  # a third of the window is not "idle for 30 minutes"
    stale = Series(tuple((NOW - timedelta(minutes=m), 1.0, 1.0) for m in range(10, 40)))
    assert stale.max_over(NOW, 30) is None


@pytest.mark.parametrize("delay", [1, 2, 3, 4])
def test_idle_window_allows_for_the_publication_delay(delay):
    """Container Insights datapoints arrive minutes late: a node idle for longer than a short timeout, with every
    published minute present, is idle; a busy minute inside the window still counts, one before it does not."""
    idle = Series(tuple((NOW - timedelta(minutes=m), 1.0, 1.0) for m in range(delay, 60)))
    for timeout in (5, 10, 15, 30):
        assert idle.max_over(NOW, timeout) == 1.0, timeout
    busy_inside = Series(
        tuple((NOW - timedelta(minutes=m), 1.0, 90.0 if m == delay + 4 else 1.0) for m in range(delay, 60))
    )
    assert busy_inside.max_over(NOW, 5) == 90.0
    busy_before = Series(
        tuple((NOW - timedelta(minutes=m), 1.0, 90.0 if m == delay + 5 else 1.0) for m in range(delay, 60))
    )
    assert busy_before.max_over(NOW, 5) == 1.0
    gappy = Series(tuple((NOW - timedelta(minutes=m), 1.0, 1.0) for m in range(delay, 60) if m % 3))
    assert gappy.max_over(NOW, 10) is None  # 3 or 4 of 10 minutes missing is not "idle for 10 minutes"


def test_utilization_query_reaches_back_past_the_window_by_the_staleness_allowance():
    cw = FakeCloudWatch()
    calls = []
    cw.get_metric_data = lambda **kw: calls.append(kw) or {"MetricDataResults": []}
    CloudWatchUtilization(cw, "c").read([NodeRef("i-1", "ip-1")], NOW, 10)
    assert calls[0]["StartTime"] == NOW - timedelta(minutes=15) and calls[0]["EndTime"] == NOW


def test_spend_refreshes_at_most_hourly_and_accrues_between():
    class Reader:
        calls = 0

        def actual_usd(self, name):
            Reader.calls += 1
            return 100.0

    state: dict = {}
    errors = []
    s = observe_spend(state, {"environment": "b"}, Reader(), NOW, 60, errors.append)
    assert s["environment"].actual_usd == 100.0 and Reader.calls == 1
    accrue(state, {"environment": (10.0, 4.0)}, NOW)
    accrue(state, {"environment": (10.0, 4.0)}, NOW + timedelta(minutes=30))
    s = observe_spend(state, {"environment": "b"}, Reader(), NOW + timedelta(minutes=30), 60, errors.append)
    assert Reader.calls == 1 and s["environment"].month_to_date_usd == pytest.approx(105.0)
    s = observe_spend(state, {"environment": "b"}, Reader(), NOW + timedelta(minutes=61), 60, errors.append)
    # Budgets has not refreshed (same $100): the $5 the estimate counted since is kept, not erased.
    assert Reader.calls == 2 and s["environment"].month_to_date_usd == pytest.approx(105.0)
    assert state["spend"]["environment"]["elastic_month_usd"] == pytest.approx(2.0)


def test_a_lagging_budgets_figure_never_lowers_month_to_date():
    """AWS Budgets refreshes a few times a day: hourly reads of the same figure must not reset the running
    estimate, or month-to-date would stay at the stale figure + at most an hour and the cap would let spend run
    past the budget. A figure that has caught up (higher than the estimate) replaces it."""
    figures = iter([1000.0] * 12 + [1500.0, 1400.0])

    class Reader:
        def actual_usd(self, name):
            return next(figures)

    state: dict = {}
    errors: list = []
    t = NOW
    observe_spend(state, {"environment": "b"}, Reader(), t, 60, errors.append)
    accrue(state, {"environment": (40.0, 30.0)}, t)
    for _ in range(11):  # 11 hours at $40/h while Budgets still says $1,000
        for _ in range(60):
            t += timedelta(minutes=1)
            accrue(state, {"environment": (40.0, 30.0)}, t)
        s = observe_spend(state, {"environment": "b"}, Reader(), t, 60, errors.append)
    assert s["environment"].month_to_date_usd == pytest.approx(1000.0 + 11 * 40.0)
    t += timedelta(minutes=60)
    s = observe_spend(state, {"environment": "b"}, Reader(), t, 60, errors.append)  # Budgets caught up: $1,500
    assert s["environment"].actual_usd == 1500.0 and s["environment"].estimated_since_usd == 0.0
    t += timedelta(minutes=60)
    s = observe_spend(state, {"environment": "b"}, Reader(), t, 60, errors.append)  # a lower figure: keep $1,500
    assert s["environment"].month_to_date_usd == pytest.approx(1500.0)
    assert not errors


class FakeGroups:
    """In-memory node group port; write failures are injectable."""

    def __init__(self, groups, instances, fail=None):
        self.groups = {g.name: g for g in groups}
        self.instances = instances
        self.fail = fail
        self.fail_recheck = None
        self.rechecked = []
        self.writes = []

    def read(self, names, now, activities_for=frozenset(), on_error=None):
        return {
            n: GroupState(self.groups[n], tuple(i for i in self.instances if i.group == n))
            for n in names
            if n in self.groups
        }

    def recheck(self, name):
        """The group as it is now (AwsNodeGroups.recheck reads it again just before a change)."""
        self.rechecked.append(name)
        if self.fail_recheck:
            raise self.fail_recheck
        return GroupState(self.groups[name], tuple(i for i in self.instances if i.group == name))

    def set_desired(self, group, desired):
        if self.fail:
            raise self.fail
        self.writes.append(("set", group, desired))

    def terminate(self, instance_id):
        if self.fail:
            raise self.fail
        self.writes.append(("terminate", instance_id))


class FakeUtil:
    """Flat utilization per instance over the window; GPU reserved capacity 0 on a node under 5 %, else 100."""

    def __init__(self, util):
        self.util = util

    def read(self, nodes, now, window):
        out = {}
        for n in nodes:
            u = self.util.get(n.instance_id)
            if u is None:
                continue
            stamps = [now - timedelta(minutes=m) for m in range(window)]
            out[n.instance_id] = Series(
                tuple((t, u, u) for t in stamps), tuple((t, 0.0 if u < 5 else 100.0) for t in stamps)
            )
        return out


class FakePods:
    def __init__(self, pending):
        self.pending = pending

    def pending_gpus(self, pools, shapes=None):
        if isinstance(self.pending, Exception):
            raise self.pending
        return self.pending

    def gpu_pod_arrivals(self, pools, since, shapes=None):
        return {p: () for p in pools}

    def pending_gangs(self, pools, shapes=None):
        return {p: () for p in pools}

    def pending_on_demand_only(self, pools, shapes=None):
        return {p: () for p in pools}

    def gpu_pods_by_node(self):
        return {}


class FakeNodes:
    """In-memory node guard: pods per node name (as blocking reasons), cordon state, injectable read failure."""

    def __init__(self, blockers=None, fail=None):
        self.blockers_of = blockers or {}
        self.fail = fail
        self.cordoned: set[str] = set()
        self.log: list[tuple[str, str]] = []

    def cordon(self, name):
        self.log.append(("cordon", name))
        if name in self.cordoned:
            return False
        self.cordoned.add(name)
        return True

    def uncordon(self, name):
        self.log.append(("uncordon", name))
        self.cordoned.discard(name)

    def blockers(self, name):
        self.log.append(("pods", name))
        if self.fail:
            raise self.fail
        return list(self.blockers_of.get(name, []))

    def node_pod_gpus(self, name):
        return ()


class FakePublisher:
    def __init__(self):
        self.sent = []

    def publish(self, subject, body):
        self.sent.append(subject)


def _ports(fail=None, pending=None, nodes=None):
    groups = FakeGroups(
        [group(SPOT, 2), group(OD, 0)],
        [Instance("i-idle", SPOT, "InService", ago(120), "n1"), Instance("i-busy", SPOT, "InService", ago(120), "n2")],
        fail,
    )
    return Ports(
        groups,
        FakeUtil({"i-idle": 0.0, "i-busy": 70.0}),
        FakePods({"research": ()} if pending is None else pending),
        None,
        MemoryState(),
        FakePublisher(),
        FakeNodes() if nodes is None else nodes,
    )


@pytest.mark.parametrize(
    "fail",
    [ConflictingUpdate("EKS UpdateNodegroupConfig: ResourceInUseException"), Throttled("Auto Scaling: Throttling")],
    ids=["update_in_progress", "throttled"],
)
def test_write_faults_are_recorded_not_raised(fail):
    ports = _ports(fail)
    logs = []
    result = run_tick(settings(pool_settings()), ports, NOW, logs.append)
    assert result.applied == [] and len(result.failed) == 1 and result.errors
    assert ports.groups.writes == []
    assert any('"PolicyErrors":1' in line for line in logs)
    assert any("could not complete a tick" in s for s in ports.publisher.sent)


def test_tick_applies_reclaim_and_keeps_state_between_ticks():
    ports = _ports()
    logs = []
    first = run_tick(settings(pool_settings()), ports, NOW, logs.append)
    assert ports.groups.writes == [("terminate", "i-idle")] and first.errors == []
    assert ports.publisher.sent == ["[gpuloan dev] research: reclaimed 1 idle GPU node(s)"]
    # same world a minute later: the rate limit holds the notification back
    run_tick(settings(pool_settings()), ports, NOW + timedelta(minutes=1), logs.append)
    assert len(ports.publisher.sent) == 1
    assert ports.state.items["tick"][1] == 2  # two conditional writes


def test_tick_refuses_to_touch_a_group_outside_the_pool():
    from policy.tick import TickResult, _apply

    ps = pool_settings()
    a = Action("research", ACTION_SET_DESIRED, Reason.SCALE_UP_PENDING, "research-floor", 1, 5, detail="x")
    from policy.model import Observation, Plan

    result = TickResult(Plan(()))
    ports = _ports()
    _apply(settings(ps), Plan((PoolDecision("research", (a,)),)), Observation(()), ports, result)
    assert ports.groups.writes == [] and "not an elastic group" in result.failed[0][1]


def test_an_instance_ec2_does_not_know_yet_does_not_fail_the_read(aws_env):
    """Against the moto server: InstanceIds fails the whole DescribeInstances for one unknown id, as AWS does for
    an instance launched seconds ago; the adapter's filter returns the known ones and leaves the new one out."""
    import boto3
    from botocore.exceptions import ClientError

    from policy.io.nodegroups import AwsNodeGroups

    ec2 = boto3.client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    known = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="g6.xlarge")["Instances"][0]
    unknown = "i-0123456789abcdef0"
    with pytest.raises(ClientError):
        ec2.describe_instances(InstanceIds=[known["InstanceId"], unknown])
    adapter = AwsNodeGroups(boto3.client("eks"), boto3.client("autoscaling"), ec2, "gpuloan-dev")
    details = adapter._describe_instances([known["InstanceId"], unknown])
    assert set(details) == {known["InstanceId"]}
    assert details[known["InstanceId"]][1] == known["PrivateDnsName"]


def test_warm_container_reuses_its_session_and_clients(monkeypatch):
    """A new boto3 Session every tick re-parses each service's API model (the EC2 one is megabytes): the
    handler keeps one Session per warm container and one client per service."""
    from policy import handler

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(handler, "_session", None)
    first = handler._warm_session()
    assert handler._warm_session() is first
    assert handler._client(first, "sns") is handler._client(first, "sns")
    assert handler._client(first, "sns") is not handler._client(first, "sqs")


@pytest.mark.parametrize("drip_s_per_byte", [0.2, 1.2], ids=["fast_drip", "issue_drip"])
def test_a_kubernetes_answer_that_drips_in_is_cut_at_the_deadline(drip_s_per_byte):
    """Issue 24 item 13: an API server that sends its answer a byte at a time never trips a per-read socket
    timeout (each byte comes sooner), and made a 57 s tick against a 50 s function timeout. The whole request is
    bounded by the tick's deadline: the call ends there, as missing data (DeadlineExceeded), never later."""
    import base64
    import time

    from fake_kube import FakeKube
    from policy.deadline import Deadline
    from policy.errors import DeadlineExceeded
    from policy.io.kube import KubeClient

    kube = FakeKube("c")
    try:
        kube.pods = [gpu_pod("p", 1, pool="p")]
        kube.drip_s_per_byte = drip_s_per_byte
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        client = KubeClient(kube.endpoint, kube.ca_pem, lambda: token, Deadline(2.0))
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            client.pending_gpus(["p"])
        assert time.monotonic() - started < 2.5
    finally:
        kube.close()


def test_a_dripping_kubernetes_api_leaves_the_tick_blind_not_late():
    """The same drip in a whole tick: pending pods are unknown (nothing scales down on them, nothing is bought),
    the tick ends by its deadline and says why."""
    import base64
    import time

    from fake_kube import FakeKube
    from policy.deadline import Deadline
    from policy.io.kube import KubeClient

    kube = FakeKube("c")
    try:
        kube.drip_s_per_byte = 0.5
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
        deadline = Deadline(2.0)
        ports = _ports()
        ports = Ports(
            **{**ports.__dict__, "pods": KubeClient(kube.endpoint, kube.ca_pem, lambda: token, deadline), "nodes": None}
        )
        started = time.monotonic()
        result = run_tick(settings(pool_settings()), ports, NOW, lambda line: None, deadline=deadline)
        assert time.monotonic() - started < 3.0
        assert any("DeadlineExceeded" in e for e in result.errors), result.errors
        assert ports.groups.writes == []  # blind: the idle node is not reclaimed without its pods, nothing bought
    finally:
        kube.close()


# --- pods that may not run on spot (policy/off_spot.py) -------------------------------------------------------------

OD_PIN = {"gpuloan.io/capacity": "on-demand"}
OFF_SPOT_CASES = [
    # (name, pod, may run on on-demand only)
    ("spot_flavored", gpu_pod("s", 1, pool="p", node_selector=ELASTIC_PIN, tolerations=[SPOT_TOLERATION]), False),
    ("pinned_to_on_demand", gpu_pod("o", 1, pool="p", node_selector=OD_PIN, tolerations=[SPOT_TOLERATION]), True),
    ("no_spot_toleration", gpu_pod("n", 1, pool="p", node_selector=ELASTIC_PIN), True),
    (
        "kept_off_spot_by_affinity",
        {
            **gpu_pod("k", 1, pool="p", tolerations=[SPOT_TOLERATION]),
            "spec": {
                **gpu_pod("k", 1, pool="p", tolerations=[SPOT_TOLERATION])["spec"],
                "affinity": _affinity({"key": "gpuloan.io/capacity", "operator": "NotIn", "values": ["spot"]}),
            },
        },
        True,
    ),
    (
        "required_on_demand_by_affinity",
        {
            **gpu_pod("a", 1, pool="p", tolerations=[SPOT_TOLERATION]),
            "spec": {
                **gpu_pod("a", 1, pool="p", tolerations=[SPOT_TOLERATION])["spec"],
                "affinity": _affinity({"key": "gpuloan.io/capacity", "operator": "In", "values": ["on-demand"]}),
            },
        },
        True,
    ),
    ("floor_pinned_is_neither", gpu_pod("f", 1, pool="p", node_selector=FLOOR_PIN), False),
]


@pytest.mark.parametrize("name,pod,expected", OFF_SPOT_CASES, ids=[c[0] for c in OFF_SPOT_CASES])
def test_a_pod_may_not_run_on_spot_when_it_admits_the_on_demand_shape_only(name, pod, expected):
    from policy.pods import on_demand_only

    assert on_demand_only(pod, "p") is expected


def _client(kube):
    import base64

    from policy.io.kube import KubeClient

    url = (
        "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
        "&X-Amz-Signature=abc"
    )
    token = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return KubeClient(kube.endpoint, kube.ca_pem, lambda: token)


def test_the_lambda_reads_the_pending_pods_kept_off_spot_from_the_same_pod_list():
    """Issue 27 follow-up: the pending pods that may not run on spot, per pool, from the pod list pending_gpus read
    (no extra call); a gang with one such pod goes whole; shapes filter as for pending_gpus."""
    from fake_kube import FakeKube
    from policy.pods import elastic_shapes

    kube = FakeKube("c", page_size=2)
    try:
        gang = {"scheduling.x-k8s.io/pod-group": "train"}
        kube.pods = [
            gpu_pod("spot-ok", 2, pool="p", node_selector=ELASTIC_PIN, tolerations=[SPOT_TOLERATION]),
            gpu_pod("prod", 4, pool="p", node_selector=OD_PIN, tolerations=[SPOT_TOLERATION]),
            gpu_pod("g0", 8, pool="p", node_selector=OD_PIN, tolerations=[SPOT_TOLERATION]),
            gpu_pod("g1", 8, pool="p", node_selector=ELASTIC_PIN, tolerations=[SPOT_TOLERATION]),
            gpu_pod("floor", 1, pool="p", node_selector=FLOOR_PIN),
            gpu_pod("other", 1, pool="q", node_selector=OD_PIN),
            gpu_pod("running", 8, pool="p", node_selector=OD_PIN, node_name="n1", phase="Running"),
        ]
        for name in ("g0", "g1"):
            next(p for p in kube.pods if p["metadata"]["name"] == name)["metadata"]["labels"] = gang
        client = _client(kube)
        both = {"p": elastic_shapes("p", True, True), "q": elastic_shapes("q", True, True)}
        assert sorted(client.pending_gpus(["p", "q"], both)["p"]) == [2, 4, 8, 8]
        calls = kube.requests if hasattr(kube, "requests") else None
        off = client.pending_on_demand_only(["p", "q"], both)
        assert sorted(off["p"]) == [4, 8, 8] and off["q"] == (1,)
        assert [g.on_demand_only for g in client.pending_gangs(["p"], both)["p"]] == [True]
        if calls is not None:
            assert kube.requests == calls  # the same pod list
        # a spot-only pool's shapes leave them out of its pending pods (the tick adds the on-demand shape)
        assert client.pending_on_demand_only(["p"], {"p": elastic_shapes("p", True, False)}) == {"p": ()}
    finally:
        kube.close()


class OffSpotPods(FakePods):
    """Pending pods per pool and the ones among them that may not run on spot; records the shapes asked with."""

    def __init__(self, pending, off_spot):
        super().__init__(pending)
        self.off_spot = off_spot
        self.shapes = None

    def pending_gpus(self, pools, shapes=None):
        self.shapes = shapes
        return super().pending_gpus(pools, shapes)

    def pending_on_demand_only(self, pools, shapes=None):
        if isinstance(self.off_spot, Exception):
            raise self.off_spot
        return self.off_spot


def test_the_tick_passes_the_pods_kept_off_spot_and_the_on_demand_group_grows_for_them():
    from policy.errors import DataUnavailable
    from policy.pods import CAPACITY_LABEL, elastic_shapes

    ports = _ports(pending={"research": (1, 1)})
    pods = OffSpotPods({"research": (1, 1)}, {"research": (1, 1)})
    ports = Ports(ports.groups, ports.utilization, pods, None, MemoryState(), FakePublisher(), FakeNodes())
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert [(a.group, a.desired_to, a.reason) for a in result.applied if a.kind == ACTION_SET_DESIRED] == [
        (OD, 2, Reason.ON_DEMAND_ONLY)
    ]
    # unreadable: recorded, and every pending pod counts spot-first as before (never a guess that shrinks)
    pods.off_spot = DataUnavailable("pods unreadable")
    ports = Ports(ports.groups, ports.utilization, pods, None, MemoryState(), FakePublisher(), FakeNodes())
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert result.errors and [a.group for a in result.applied if a.kind == ACTION_SET_DESIRED] == [SPOT]
    # a spot-only pool's pending pods are read with the on-demand shape too, so its kept-off pods are seen
    run_tick(settings(pool_settings(on_demand_group=None, on_demand_max_nodes=0)), ports, NOW, lambda _: None)
    assert pods.shapes["research"] == elastic_shapes("research", True, True)
    assert any(dict(s.labels)[CAPACITY_LABEL] == "on-demand" for s in pods.shapes["research"])
