"""One tick for an organization of many pools (issue 41 item 2): independent AWS calls side by side within a bound,
batched reads where AWS has them, no write after the deadline, and the calls of a tick within 2.5 per pool plus a
constant (the packaged handler against moto, scripts/bench_scale_tick.py)."""

from __future__ import annotations

import importlib.util
import threading
import time
from datetime import datetime, timezone
from pathlib import Path


from policy import fanout
from policy.deadline import Deadline
from policy.errors import PolicyError, Throttled
from policy.model import Group
from policy.io.nodegroups import AwsNodeGroups
from policy.ports import GroupState
from policy.io.sns import SnsPublisher
from policy.notifications import publish_all
from policy.memory_state import MemoryState
from policy.tick import Ports, run_tick
from policy.io.cloudwatch import CloudWatchUtilization
from policy.ports import NodeRef
from policy_cases import pool_settings, settings
from test_policy_adapters import FakeCloudWatch, FakeGroups, FakePods, FakePublisher, FakeUtil

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 3, 10, 12, tzinfo=timezone.utc)


class _Concurrency:
    def __init__(self):
        self._lock = threading.Lock()
        self.now = self.most = 0

    def __enter__(self):
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc):
        with self._lock:
            self.now -= 1


def test_fanout_keeps_the_order_bounds_the_calls_in_flight_and_returns_each_failure():
    seen = _Concurrency()

    def call(i):
        with seen:
            time.sleep(0.02)
        if i == 3:
            raise Throttled("Auto Scaling: Rate exceeded")
        return i * 10

    out = fanout.each(call, range(20), in_flight=4)
    assert [item for item, _, _ in out] == list(range(20))
    assert [value for _, value, err in out if err is None] == [i * 10 for i in range(20) if i != 3]
    assert [type(err) for _, _, err in out if err is not None] == [Throttled]
    assert 1 < seen.most <= 4
    assert fanout.each(call, [1], in_flight=4) == [(1, 10, None)]


def test_metric_batches_are_read_side_by_side_each_with_its_pages_and_one_failure_fails_the_read():
    """1,800 queries (600 nodes) are four GetMetricData batches: side by side (policy/fanout.py), every page of
    each followed; a batch that fails fails the read as before (no series: every node counts as busy)."""
    seen = _Concurrency()

    class PagedCloudWatch(FakeCloudWatch):
        fail = False

        def get_metric_data(self, **kw):
            with seen:
                time.sleep(0.02)
            if self.fail and len(kw["MetricDataQueries"]) < 500:
                raise Throttled("CloudWatch: Rate exceeded")
            whole = super().get_metric_data(**{k: v for k, v in kw.items() if k != "NextToken"})
            half = len(whole["MetricDataResults"]) // 2  # each batch answers in two pages
            if "NextToken" in kw:
                return {"MetricDataResults": whole["MetricDataResults"][half:]}
            return {"MetricDataResults": whole["MetricDataResults"][:half], "NextToken": "more"}

    cw = PagedCloudWatch()
    nodes = [NodeRef(f"i-{k}", f"ip-{k}") for k in range(600)]
    util = CloudWatchUtilization(cw, "c", in_flight=4)
    series = util.read(nodes, NOW, 30)
    assert util.calls == 8 and 1 < seen.most <= 4
    assert len(series) == 600 and all(
        s.max_over(NOW, 30) == 3.0 and s.reserved_max_over(NOW, 30) == 0.0 for s in series.values()
    )
    cw.fail = True
    try:
        util.read(nodes, NOW, 30)
        raise AssertionError("a failed batch must fail the read")
    except Throttled:
        pass


# --- the node group adapter, over stub clients (what it asks AWS, not what moto answers) ---------------------------


class _Asg:
    def __init__(self, groups: dict[str, dict]):
        self.groups = groups  # ASG name -> ASG
        self.activities: list[str] = []
        self.reads: list[list[str]] = []
        self.fail_names: set[str] = set()

    def describe_auto_scaling_groups(self, Filters=None, AutoScalingGroupNames=None, MaxRecords=None, NextToken=None):  # noqa: N803
        if AutoScalingGroupNames is not None:
            self.reads.append(list(AutoScalingGroupNames))
            if self.fail_names & set(AutoScalingGroupNames):
                raise RuntimeError("Rate exceeded")
            return {"AutoScalingGroups": [self.groups[n] for n in AutoScalingGroupNames if n in self.groups]}
        wanted = set(Filters[0]["Values"])
        return {
            "AutoScalingGroups": [
                g
                for g in self.groups.values()
                if any(t["Key"] == "eks:nodegroup-name" and t["Value"] in wanted for t in g["Tags"])
            ]
        }

    def describe_scaling_activities(self, AutoScalingGroupName, MaxRecords):  # noqa: N803
        self.activities.append(AutoScalingGroupName)
        return {"Activities": []}


class _Ec2:
    def __init__(self):
        self.asked: list[dict] = []

    def describe_instances(self, Filters, MaxResults=None, NextToken=None):  # noqa: N803
        self.asked.append({"ids": len(Filters[0]["Values"]), "MaxResults": MaxResults})
        return {"Reservations": []}


class _Eks:
    def __init__(self, fail: set[str] = frozenset()):
        self.described: list[str] = []
        self.fail = fail

    def describe_nodegroup(self, clusterName, nodegroupName):  # noqa: N803
        self.described.append(nodegroupName)
        if nodegroupName in self.fail:
            raise RuntimeError("ThrottlingException")
        return {
            "nodegroup": {"status": "ACTIVE", "resources": {"autoScalingGroups": [{"name": f"asg-{nodegroupName}"}]}}
        }


def _asg(group: str, desired: int, in_service: int, pending: int = 0) -> dict:
    instances = [{"InstanceId": f"i-{group}-{k}", "LifecycleState": "InService"} for k in range(in_service)]
    instances += [{"InstanceId": f"i-{group}-p{k}", "LifecycleState": "Pending"} for k in range(pending)]
    return {
        "AutoScalingGroupName": f"asg-{group}",
        "DesiredCapacity": desired,
        "MinSize": 0,
        "MaxSize": 8,
        "Instances": instances,
        "Tags": [{"Key": "eks:nodegroup-name", "Value": group}, {"Key": "eks:cluster-name", "Value": "c"}],
    }


def test_scaling_activities_are_read_only_where_the_engine_uses_them():
    """A spot group's shortage and last launch matter to the engine only while a launch is outstanding (the spot
    fallback); a service pool's always (its cooldown). The others cost no call (issue 41: 1 a pool before)."""
    asg = _Asg(
        {
            f"asg-{g}": a
            for g, a in {
                "steady-spot": _asg("steady-spot", 2, 2),
                "short-spot": _asg("short-spot", 3, 2),  # one launch outstanding (failing, or not yet asked)
                "booting-spot": _asg("booting-spot", 2, 1, pending=1),
                "service-spot": _asg("service-spot", 1, 1),
                "od": _asg("od", 2, 1),  # not a spot group: never
            }.items()
        }
    )
    groups = AwsNodeGroups(_Eks(), asg, _Ec2(), "c", activities_always={"service-spot"})
    read = groups.read(
        ["steady-spot", "short-spot", "booting-spot", "service-spot", "od"],
        NOW,
        {"steady-spot", "short-spot", "booting-spot", "service-spot"},
    )
    assert set(read) == {"steady-spot", "short-spot", "booting-spot", "service-spot", "od"}
    assert sorted(asg.activities) == ["asg-booting-spot", "asg-service-spot", "asg-short-spot"]


def test_the_groups_about_to_change_are_read_again_at_once_and_each_failure_stays_its_own():
    names = [f"g{k}" for k in range(60)]
    asg = _Asg({f"asg-{g}": _asg(g, 1, 1) for g in names if g != "g7"})  # g7's ASG is gone
    asg.fail_names = set()
    eks = _Eks(fail={"g3"})
    got = AwsNodeGroups(eks, asg, _Ec2(), "c", in_flight=8).recheck_many(names)
    assert sorted(eks.described) == sorted(names)  # one DescribeNodegroup each: EKS has no batch form
    assert sorted(len(r) for r in asg.reads) == [9, 50]  # the 59 ASGs in one call per 50 names
    assert isinstance(got["g3"], PolicyError) and "ThrottlingException" in str(got["g3"])
    assert isinstance(got["g7"], PolicyError) and "does not exist" in str(got["g7"])
    ok = [g for g in names if g not in ("g3", "g7")]
    assert all(isinstance(got[g], GroupState) and got[g].group.status == "ACTIVE" for g in ok)


def test_instances_are_described_a_hundred_ids_a_call_side_by_side_each_call_one_page():
    """A filtered DescribeInstances pages (EC2's pagination guide: ask for up to 1,000 a page); 100 ids a call keep
    each answer small and the calls side by side, where 200 ids a call at moto's default page of 100 were two
    pages one after the other."""
    ec2 = _Ec2()
    groups = {f"asg-{g}": _asg(g, n, n) for g, n in (("a", 100), ("b", 100), ("c", 50))}
    AwsNodeGroups(_Eks(), _Asg(groups), ec2, "c", in_flight=8).read(["a", "b", "c"], NOW)
    assert sorted(a["ids"] for a in ec2.asked) == [50, 100, 100]
    assert {a["MaxResults"] for a in ec2.asked} == {1000}


def test_the_re_read_of_the_asgs_does_not_wait_for_eks_to_name_them():
    """The ASGs the tick's read found are read again side by side with the DescribeNodegroup calls (first: a change
    waits for them); only an ASG that EKS names and the read did not (the node group replaced in between) is read
    after. One call at a time here, so the order is the order they were started in."""
    log: list[str] = []

    class Asg(_Asg):
        def describe_auto_scaling_groups(self, **kw):
            if kw.get("AutoScalingGroupNames") is not None:
                log.append(f"asgs {len(kw['AutoScalingGroupNames'])}")
            return super().describe_auto_scaling_groups(**kw)

    class Eks(_Eks):
        def describe_nodegroup(self, clusterName, nodegroupName):  # noqa: N803
            log.append(f"nodegroup {nodegroupName}")
            got = super().describe_nodegroup(clusterName, nodegroupName)
            if nodegroupName == "g2":  # replaced since the read: EKS names a new ASG
                got["nodegroup"]["resources"]["autoScalingGroups"] = [{"name": "asg-g2-new"}]
            return got

    groups = {f"asg-{g}": _asg(g, 1, 1) for g in ("g0", "g1", "g2")}
    groups["asg-g2-new"] = {**_asg("g2", 3, 3), "AutoScalingGroupName": "asg-g2-new", "Tags": []}
    ec2 = _Ec2()
    adapter = AwsNodeGroups(Eks(), Asg(groups), ec2, "c", in_flight=1)
    assert set(adapter.read(["g0", "g1", "g2"], NOW)) == {"g0", "g1", "g2"}
    assert ec2.asked == [{"ids": 3, "MaxResults": 1000}]  # a filtered read pages at EC2's largest page
    got = adapter.recheck_many(["g0", "g1", "g2"])
    assert log == ["asgs 3", "nodegroup g0", "nodegroup g1", "nodegroup g2", "asgs 1"]
    assert {g: s.group.desired_nodes for g, s in got.items()} == {"g0": 1, "g1": 1, "g2": 3}


class _Sns:
    def __init__(self):
        self.batches: list[list[dict]] = []

    def publish_batch(self, TopicArn, PublishBatchRequestEntries):  # noqa: N803
        self.batches.append(PublishBatchRequestEntries)
        return {
            "Successful": [{"Id": e["Id"]} for e in PublishBatchRequestEntries if e["Id"] != "12"],
            "Failed": [{"Id": "12", "Code": "InternalError", "Message": "try again"}]
            if any(e["Id"] == "12" for e in PublishBatchRequestEntries)
            else [],
        }


def test_notifications_go_ten_a_request_and_a_failed_entry_is_its_own_error():
    sns = _Sns()
    messages = [(f"[gpuloan dev] p{k}: added 1 elastic GPU node(s)", "body") for k in range(23)]
    outcomes = publish_all(SnsPublisher(sns, "arn:aws:sns:us-east-1:123456789012:t"), messages)
    assert [len(b) for b in sns.batches] == [10, 10, 3]
    assert [e["Subject"] for b in sns.batches for e in b] == [s for s, _ in messages]
    assert [k for k, err in enumerate(outcomes) if err is not None] == [12]


# --- the tick: writes side by side, never one after the deadline ------------------------------------------------


class _SlowGroups(FakeGroups):
    """Each write takes `write_s`; records how many were in flight at once and whether the deadline had passed
    when one started."""

    def __init__(self, groups, instances, write_s: float, deadline: Deadline | None = None):
        super().__init__(groups, instances)
        self.write_s = write_s
        self.deadline = deadline
        self.seen = _Concurrency()
        self.late: list[str] = []
        self._lock = threading.Lock()

    def set_desired(self, group, desired):
        if self.deadline is not None:
            self.deadline.check()  # as every adapter call does (AwsNodeGroups._call, BoundedClient)
        with self.seen:
            time.sleep(self.write_s)
        with self._lock:
            self.writes.append(("set", group, desired))


def _org(pools: int):
    ps = tuple(pool_settings(f"p{k}") for k in range(pools))
    groups = [Group(g, 0, 0, 4, "ACTIVE", None) for p in ps for g in (p.spot_group, p.on_demand_group)]
    return ps, groups


def test_a_tick_of_many_pools_makes_its_writes_side_by_side_and_reports_them_in_the_plans_order():
    ps, groups = _org(40)
    fake = _SlowGroups(groups, [], write_s=0.05)
    ports = Ports(fake, FakeUtil({}), FakePods({p.name: (1,) for p in ps}), None, MemoryState(), FakePublisher())
    started = time.monotonic()
    result = run_tick(settings(*ps), ports, NOW, lambda _: None)
    took = time.monotonic() - started
    assert [a.group for a in result.applied] == [p.spot_group for p in ps], result.failed
    assert sorted(fake.rechecked) == sorted(p.spot_group for p in ps)
    assert 1 < fake.seen.most <= settings(*ps).aws_calls_in_flight
    assert took < 40 * 0.05, "one after another would take 2 s"


def test_no_write_starts_after_the_deadline_and_the_rest_are_reported_not_applied():
    ps, groups = _org(40)
    deadline = Deadline(0.3)  # the reads are in memory: time for a few rounds of 8 writes, not the 5 rounds of 40
    fake = _SlowGroups(groups, [], write_s=0.1, deadline=deadline)
    ports = Ports(fake, FakeUtil({}), FakePods({p.name: (1,) for p in ps}), None, MemoryState(), FakePublisher())
    result = run_tick(settings(*ps), ports, NOW, lambda _: None, deadline=deadline)
    assert 0 < len(result.applied) < 40
    assert len(result.applied) + len(result.failed) == 40
    assert len(fake.writes) == len(result.applied), "every write that started was reported as applied"
    assert all("deadline" in why for _, why in result.failed), result.failed
    assert any("DeadlineExceeded" in e for e in result.errors)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scale_tick", ROOT / "scripts" / "bench_scale_tick.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_packaged_tick_of_an_organization_stays_within_two_and_a_half_calls_a_pool():
    """`make bench-scale-tick` at a small size: the zip's handler against moto, a pending pod in every pool (every
    spot group grows). Before issue 41: 5.8 calls a pool (a DescribeScalingActivities per spot group, a
    DescribeAutoScalingGroups and an SNS Publish per change), one at a time."""
    pools = 10
    r = _bench().tick(pools, latency_s=0.02)
    total = sum(r["calls"].values())
    assert r["applied"] == pools and r["errors"] == [], r
    assert total <= 2.5 * pools + 10, r["operations"]
    assert r["max_in_flight"] > 1, "independent calls run side by side"
    # `--profile`: every call in the timeline, named by its API operation (EKS's REST paths too), in the tick.
    rows = {row["operation"]: row for row in _bench().profile(r["timeline"])}
    assert sum(row["calls"] for row in rows.values()) == total
    assert rows["eks DescribeNodegroup"]["calls"] == rows["eks UpdateNodegroupConfig"]["calls"] == pools, rows
    assert all(0 <= row["from_s"] <= row["to_s"] <= r["seconds"] + 1 for row in rows.values()), rows
    # a group is read again before it is changed
    assert rows["eks DescribeNodegroup"]["from_s"] < rows["eks UpdateNodegroupConfig"]["from_s"], rows


def test_the_profile_sums_each_operation_and_tells_its_span_and_the_seconds_covered():
    bench = _bench()
    timeline = [
        ("eks DescribeNodegroup", 1.0, 1.2, 0.05),
        ("eks DescribeNodegroup", 1.1, 1.4, 0.1),
        ("eks UpdateNodegroupConfig", 2.0, 2.1, 0.0),
    ]
    rows = bench.profile(timeline)
    assert [
        (r["operation"], r["calls"], round(r["wall_s"], 3), round(r["emulator_s"], 3), r["from_s"], r["to_s"])
        for r in rows
    ] == [("eks DescribeNodegroup", 2, 0.5, 0.15, 1.0, 1.4), ("eks UpdateNodegroupConfig", 1, 0.1, 0.0, 2.0, 2.1)]
    assert round(bench._busy_s([(s, e) for _, s, e, _ in timeline]), 3) == 0.5  # 1.0-1.4 and 2.0-2.1
    lines = bench.profile_lines({"timeline": timeline, "seconds": 3.0})
    assert all(len(line) <= 80 for line in lines), lines
    assert "AWS calls in flight 0.5 s" in "\n".join(lines)


def test_the_profile_names_rest_calls_by_their_api_operation():
    bench = _bench()
    assert bench._rest_operation("eks", "GET", "/clusters/c/node-groups/p0-s") == "DescribeNodegroup"
    assert bench._rest_operation("eks", "POST", "/clusters/c/node-groups/p0-s/update-config") == "UpdateNodegroupConfig"
    assert bench._rest_operation("eks", "GET", "/clusters/c") == "DescribeCluster"
    assert bench._rest_operation("no-such-service", "GET", "/x") == "GET /x"
