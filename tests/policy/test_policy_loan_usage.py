"""The loan's usage per pool (policy/loan_usage.py): read from the ClusterQueues' status over HTTPS (the fake
Kubernetes API), published as LoanGpus, problems reported once, nothing published from a guess."""

from __future__ import annotations

import base64
import json
import urllib.parse
from datetime import datetime, timezone

import pytest

from conftest import stack_config, resolved_prices
from fake_kube import FakeKube
from config import config, scheduling
from policy import loan_usage
from policy import metric_names as M
from policy.deadline import Deadline
from policy.io.kube import KubeClient
from config import tenancy
from stacks.kubernetes.kueue import cluster_queue_manifest
from pricing.policy_settings import settings_for

NOW = datetime(2026, 11, 3, 12, 0, tzinfo=timezone.utc)


def prod_cfg():
    return config.from_stack_yaml({"config": stack_config("prod")}, "test")


def groups(cfg) -> dict:
    return {
        p.name: {"spot": f"{p.name}-spot", "on_demand": f"{p.name}-od", "guaranteed": f"{p.name}-floor"}
        for p in cfg.pools
    }


def with_status(cfg, queue, used: dict[str, int]) -> dict:
    """A ClusterQueue as the stack makes it, with the status Kueue writes (cache.go getUsage: every flavor of the
    queue, `total` always, `borrowed` above the nominal quota)."""
    cq = cluster_queue_manifest(cfg, queue)
    rows = []
    for qf in queue.flavors:
        total = used.get(qf.flavor, 0)
        res = {"name": "nvidia.com/gpu", "total": str(total)}
        if total > qf.nominal_gpus:
            res["borrowed"] = str(total - qf.nominal_gpus)
        rows.append({"name": qf.flavor, "resources": [res]})
    return {**cq, "status": {"flavorsUsage": rows, "admittedWorkloads": 1}}


def client(kube: FakeKube) -> KubeClient:
    url = (
        "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
        "&X-Amz-Signature=abc"
    )
    return KubeClient(
        kube.endpoint, kube.ca_pem, lambda: "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    )


@pytest.fixture
def kube():
    k = FakeKube("c")
    yield k
    k.close()


def loaded(kube, cfg, used: dict[str, dict[str, int]]):
    for q in scheduling.plan(cfg).queues:
        kube.cluster_queues[q.name] = with_status(cfg, q, used.get(q.pool, {}))


def figures(lines: list[str]) -> dict[tuple[str, str, str], float]:
    out = {}
    for line in lines:
        doc = json.loads(line)
        assert doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == M.NAMESPACE
        assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
            sorted([M.DIM_ENVIRONMENT, M.DIM_FLAVOR, M.DIM_POOL, M.DIM_USE])
        ]
        out[(doc[M.DIM_POOL], doc[M.DIM_USE], doc[M.DIM_FLAVOR])] = doc[M.LOAN_GPUS]
    return out


def test_prod_research_borrowing_training_floor_is_lent_by_training(kube):
    cfg = prod_cfg()
    settings = settings_for(resolved_prices(), cfg, "c", groups(cfg), allow_unknown_prices=True)
    floor = scheduling.flavor_name(cfg, cfg.pool("training"), scheduling.FLOOR)
    spot = scheduling.flavor_name(cfg, cfg.pool("research"), scheduling.SPOT)
    # training runs 8 of its 16 floor GPUs, research borrows the other 8 and runs 16 on its own spot
    loaded(kube, cfg, {"training": {floor: 8}, "research": {floor: 8, spot: 16}})
    state: dict = {}
    errors: list[str] = []
    lines = loan_usage.tick_lines(settings, client(kube), state, NOW, None, errors, print)
    got = figures(lines)
    assert errors == []
    assert got[("training", "own_floor", floor)] == 8
    assert got[("training", "lent", floor)] == 8
    assert got[("research", "borrowed", floor)] == 8
    assert got[("research", "elastic_spot", spot)] == 16
    # lent equals borrowed over the environment, flavor by flavor
    lent = sum(v for (p, use, f), v in got.items() if use == "lent")
    borrowed = sum(v for (p, use, f), v in got.items() if use == "borrowed")
    assert lent == borrowed == 8
    # every flavor of every queue is published, zeros included: a day's samples average to its GPU-hours
    inference_floor = scheduling.flavor_name(cfg, cfg.pool("inference"), scheduling.FLOOR)
    assert got[("inference", "own_floor", inference_floor)] == 0
    assert got[("inference", "lent", inference_floor)] == 0
    # one GET per queue of the environment, by name, nothing else
    assert sorted(kube.requests) == sorted(
        f"GET /apis/kueue.x-k8s.io/v1beta2/clusterqueues/{q.name}" for q in scheduling.plan(cfg).queues
    )


def test_rbac_grants_exactly_the_get_the_loan_read_uses(kube):
    cfg = prod_cfg()
    rule = tenancy.loan_rbac_rule(cfg)
    assert rule in tenancy.policy_rbac_rules(cfg)
    assert rule == {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["clusterqueues"],
        "verbs": ["get"],
        "resourceNames": sorted(q.name for q in scheduling.plan(cfg).queues),
    }
    loaded(kube, cfg, {})
    settings = settings_for(resolved_prices(), cfg, "c", groups(cfg), allow_unknown_prices=True)
    loan_usage.tick_lines(settings, client(kube), {}, NOW, None, [], print)
    for request in kube.requests:
        method, target = request.split(" ", 1)
        parts = urllib.parse.urlparse(target).path.strip("/").split("/")  # apis, group, version, resource, name
        assert (method, parts[1], parts[3]) == ("GET", "kueue.x-k8s.io", "clusterqueues") and len(parts) == 5
        assert parts[4] in rule["resourceNames"]
    off = cfg.model_copy(
        update={
            "scheduling": cfg.scheduling.model_copy(
                update={"kueue": cfg.scheduling.kueue.model_copy(update={"enabled": False})}
            )
        }
    )
    assert not any("clusterqueues" in r["resources"] for r in tenancy.policy_rbac_rules(off))
    assert settings_for(resolved_prices(), off, "c", groups(off), allow_unknown_prices=True).pools[0].loan_queue is None


def test_an_absent_status_field_is_reported_once_and_nothing_is_charged_from_a_guess(kube):
    cfg = prod_cfg()
    settings = settings_for(resolved_prices(), cfg, "c", groups(cfg), allow_unknown_prices=True)
    floor = scheduling.flavor_name(cfg, cfg.pool("training"), scheduling.FLOOR)
    loaded(kube, cfg, {"training": {floor: 16}, "research": {floor: 0}})
    research = scheduling.cluster_queue_name(cfg, cfg.pool("research"))
    del kube.cluster_queues[research]["status"]  # a queue Kueue has not reconciled yet
    state: dict = {}
    errors: list[str] = []
    got = figures(loan_usage.tick_lines(settings, client(kube), state, NOW, None, errors, print))
    assert len(errors) == 1 and f"ClusterQueue {research}: status.flavorsUsage absent" in errors[0]
    assert not any(p == "research" for p, _, _ in got)  # nothing of the queue that could not be read
    assert ("training", "lent", floor) not in got  # its lent figure depends on research's queue: not published
    assert got[("training", "own_floor", floor)] == 16  # what is known still is
    # the next minute: the same problem is not reported again
    errors2: list[str] = []
    loan_usage.tick_lines(settings, client(kube), state, NOW, None, errors2, print)
    assert errors2 == []
    # it clears, then comes back: reported again
    loaded(kube, cfg, {})
    loan_usage.tick_lines(settings, client(kube), state, NOW, None, errors2, print)
    assert errors2 == [] and state[loan_usage.STATE_KEY] == {}
    del kube.cluster_queues[research]["status"]["flavorsUsage"][0]["resources"][0]["total"]
    loan_usage.tick_lines(settings, client(kube), state, NOW, None, errors2, print)
    assert len(errors2) == 1 and "has no nvidia.com/gpu total for flavor" in errors2[0]


def test_an_unreachable_queue_is_reported_once(kube):
    cfg = prod_cfg()
    settings = settings_for(resolved_prices(), cfg, "c", groups(cfg), allow_unknown_prices=True)
    state: dict = {"loan_reported": "not an object"}  # a malformed part of the state is started afresh
    errors: list[str] = []
    got = figures(loan_usage.tick_lines(settings, client(kube), state, NOW, None, errors, print))  # 404 each
    # nothing read: only the L40S floor's `lent`, which no queue may borrow (it lists no other pool's queue)
    inference_floor = scheduling.flavor_name(cfg, cfg.pool("inference"), scheduling.FLOOR)
    assert got == {("inference", "lent", inference_floor): 0}
    assert len(errors) == len(cfg.pools) and all("NotFound" in e for e in errors)
    errors.clear()
    loan_usage.tick_lines(settings, client(kube), state, NOW, None, errors, print)
    assert errors == []


def test_the_read_is_skipped_and_logged_when_the_deadline_is_near(kube):
    cfg = prod_cfg()
    settings = settings_for(resolved_prices(), cfg, "c", groups(cfg), allow_unknown_prices=True)
    loaded(kube, cfg, {})
    logged: list[str] = []
    near = Deadline(loan_usage.READ_MIN_SECONDS - 1)
    assert loan_usage.tick_lines(settings, client(kube), {}, NOW, near, [], logged.append) == []
    assert kube.requests == []
    assert json.loads(logged[0])["message"] == "loan usage not read: the tick's deadline is near"


def test_a_deadline_passing_mid_way_publishes_nothing_unread_and_reports_no_problem(kube):
    from policy.errors import DeadlineExceeded

    cfg = prod_cfg()
    settings = settings_for(resolved_prices(), cfg, "c", groups(cfg), allow_unknown_prices=True)
    floor = scheduling.flavor_name(cfg, cfg.pool("training"), scheduling.FLOOR)
    loaded(kube, cfg, {"training": {floor: 8}, "research": {floor: 8}})
    real = client(kube)

    class RunsOutOfTime:  # the first queue (training's) is read, then the deadline passes
        calls = 0

        def cluster_queue(self, api_version, queue):
            self.calls += 1
            if self.calls > 1:
                raise DeadlineExceeded("tick deadline reached")
            return real.cluster_queue(api_version, queue)

    errors: list[str] = []
    logged: list[str] = []
    got = figures(loan_usage.tick_lines(settings, RunsOutOfTime(), {}, NOW, None, errors, logged.append))
    assert errors == []  # out of time is not a queue's problem to report
    assert json.loads(logged[0])["queues_not_read"] == len(cfg.pools) - 1
    assert got[("training", "own_floor", floor)] == 8
    assert ("training", "lent", floor) not in got and not any(p == "research" for p, _, _ in got)
