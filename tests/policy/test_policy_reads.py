"""What a tick reads from AWS, and when (issue 35 item 9, issue 42 item 3): every group through one tag-filtered
DescribeAutoScalingGroups (no DescribeNodegroup per group per tick), each group read again just before it is
changed (a decision never acts on a stale size or on a group EKS is updating), and a group whose Auto Scaling group
is gone reported once per tick and left alone, never sized from the EKS scaling config."""

from __future__ import annotations

import dataclasses
import importlib.util
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest

from aws_emulator import REGION, eks_asg_tags
from policy.errors import PolicyError, Throttled
from policy.model import ACTION_SET_DESIRED, ACTION_TERMINATE
from policy.io.nodegroups import AwsNodeGroups
from policy.ports import GroupState, Instance
from policy.memory_state import MemoryState
from policy.tick import Ports, run_tick
from policy_cases import NOW, OD, SPOT, ago, group, pool_settings, settings
from test_policy_adapters import FakeGroups, FakeNodes, FakePods, FakePublisher, FakeUtil

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "gpuloan-dev"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_policy", ROOT / "scripts" / "bench_policy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_steady_tick_of_ten_pools_makes_at_most_25_aws_calls_and_no_describe_nodegroup():
    """`make bench-policy`'s count (the packaged adapters against moto, 10 pools of a spot, an on-demand and a floor
    group): 48 calls before, 30 of them DescribeNodegroup; the goal is at most 25."""
    first, steady = _bench().bench_calls(10)
    assert sum(steady.values()) <= 25, steady
    assert "EKS" not in steady, steady  # nothing is changed in this tick, so no group is read again
    # one tag-filtered read for 30 groups; no scaling activities: no spot group has a launch outstanding and no pool
    # is a service pool (issue 41: read only where the engine uses them; 1 + 10 before)
    assert steady["Auto Scaling"] == 1


class _World:
    """A cluster with managed node groups whose Auto Scaling groups carry EKS's tags (moto's EKS makes none)."""

    def __init__(self):
        s = boto3.Session(region_name=REGION)
        self.eks, self.asg, self.ec2 = s.client("eks"), s.client("autoscaling"), s.client("ec2")
        vpc = self.ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
        self.subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.50.1.0/24", AvailabilityZone=f"{REGION}a")[
            "Subnet"
        ]["SubnetId"]
        self.eks.create_cluster(
            name=CLUSTER, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={"subnetIds": [self.subnet]}
        )
        self.ec2.create_launch_template(
            LaunchTemplateName="gpu",
            LaunchTemplateData={
                "ImageId": self.ec2.describe_images()["Images"][0]["ImageId"],
                "InstanceType": "g6.xlarge",
            },
        )
        self.asg_of: dict[str, str] = {}

    def group(self, name: str, desired: int, eks_desired: int | None = None, cluster: str = CLUSTER) -> None:
        self.eks.create_nodegroup(
            clusterName=CLUSTER,
            nodegroupName=name,
            nodeRole="arn:aws:iam::123456789012:role/n",
            subnets=[self.subnet],
            scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": desired if eks_desired is None else eks_desired},
        )
        asg_name = self.eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=name)["nodegroup"]["resources"][
            "autoScalingGroups"
        ][0]["name"]
        self.asg_of[name] = asg_name
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=asg_name,
            MinSize=0,
            MaxSize=4,
            DesiredCapacity=desired,
            VPCZoneIdentifier=self.subnet,
            LaunchTemplate={"LaunchTemplateName": "gpu", "Version": "$Latest"},
            Tags=eks_asg_tags(cluster, name),
        )

    def delete_asg(self, name: str) -> None:
        self.asg.delete_auto_scaling_group(AutoScalingGroupName=self.asg_of[name], ForceDelete=True)

    def adapter(self, calls: list | None = None) -> AwsNodeGroups:
        if calls is not None:
            for client in (self.eks, self.asg, self.ec2):
                client.meta.events.register(
                    "before-parameter-build",
                    lambda model, params, **_: calls.append(
                        (model.name, params.get("nodegroupName") or params.get("AutoScalingGroupNames"))
                    ),
                )
        return AwsNodeGroups(self.eks, self.asg, self.ec2, CLUSTER)


@pytest.fixture
def world(aws_env):
    return _World()


def test_sizes_and_instances_come_from_the_tagged_auto_scaling_groups_in_one_call(world):
    world.group(SPOT, 2, eks_desired=3)  # after a targeted termination the ASG's figure is the live one
    world.group(OD, 0)
    world.group("other-cluster-spot", 1, cluster="another-cluster")
    calls: list = []
    errors: list = []
    read = world.adapter(calls).read([SPOT, OD], NOW, frozenset(), errors.append)
    assert errors == []
    assert (read[SPOT].group.desired_nodes, read[SPOT].group.max_nodes, len(read[SPOT].instances)) == (2, 4, 2)
    assert read[OD].group.desired_nodes == 0 and read[SPOT].group.status == "ACTIVE"
    assert [c[0] for c in calls] == ["DescribeAutoScalingGroups", "DescribeInstances"]


def test_a_deleted_elastic_auto_scaling_group_is_reported_once_and_its_group_left_out(world):
    """Issue 42 item 3: the node group is still there, its Auto Scaling group is not. Before, the group's size was
    taken from the EKS scaling config, silently; now it is one report per tick naming the groups, and the group is
    missing from the read, so the engine holds its pool."""
    world.group(SPOT, 2)
    world.group(OD, 1)
    world.group("train-spot", 1)
    world.delete_asg(OD)
    world.delete_asg("train-spot")
    errors: list[PolicyError] = []
    read = world.adapter().read([SPOT, OD, "train-spot"], NOW, frozenset(), errors.append)
    assert set(read) == {SPOT}
    assert len(errors) == 1 and OD in str(errors[0]) and "train-spot" in str(errors[0])
    assert "no Auto Scaling group" in str(errors[0])


def test_a_tick_never_grows_or_shrinks_a_group_whose_auto_scaling_group_is_gone(world):
    """The same, through a whole tick: pending work in a pool whose spot group lost its ASG buys nothing there, and
    the tick's errors say why, once."""
    world.group(SPOT, 0)
    world.group(OD, 0)
    world.delete_asg(SPOT)
    ports = Ports(
        world.adapter(), FakeUtil({}), FakePods({"research": (1, 1)}), None, MemoryState(), FakePublisher(), FakeNodes()
    )
    result = run_tick(settings(pool_settings()), ports, datetime.now(timezone.utc), lambda _: None)
    assert not [a for a in result.applied if a.kind in (ACTION_SET_DESIRED, ACTION_TERMINATE)]
    assert (
        world.eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=SPOT)["nodegroup"]["scalingConfig"][
            "desiredSize"
        ]
        == 0
    )
    assert len([e for e in result.errors if "no Auto Scaling group" in e]) == 1


def test_a_change_is_made_right_after_its_group_is_read_again(world):
    """The scale-up reads the group's node group (EKS status) and its ASG again, then changes it: nothing else
    in between. A group the tick does not change is not read again."""
    world.group(SPOT, 0)
    world.group(OD, 0)
    calls: list = []
    ports = Ports(
        world.adapter(calls),
        FakeUtil({}),
        FakePods({"research": (1, 1)}),
        None,
        MemoryState(),
        FakePublisher(),
        FakeNodes(),
    )
    result = run_tick(settings(pool_settings()), ports, datetime.now(timezone.utc), lambda _: None)
    assert [(a.group, a.desired_to) for a in result.applied] == [(SPOT, 2)], result.failed
    update = calls.index(("UpdateNodegroupConfig", SPOT))
    # the two re-reads run side by side (issue 41), so in either order
    assert sorted(calls[update - 2 : update], key=str) == [
        ("DescribeAutoScalingGroups", [world.asg_of[SPOT]]),
        ("DescribeNodegroup", SPOT),
    ]
    assert ("DescribeNodegroup", OD) not in calls


def test_recheck_refuses_a_group_whose_auto_scaling_group_is_gone(world):
    world.group(SPOT, 1)
    fresh = world.adapter().recheck(SPOT)
    assert (fresh.group.status, fresh.group.desired_nodes, len(fresh.instances)) == ("ACTIVE", 1, 1)
    world.delete_asg(SPOT)
    with pytest.raises(PolicyError, match="does not exist"):
        world.adapter().recheck(SPOT)


# --- the tick's side: what a re-read refuses (in-memory port) ---------------------------------------------------


class MovedGroups(FakeGroups):
    """The groups as the tick read them; `now` is what a read just before the change finds."""

    def __init__(self, groups, instances, now: dict[str, GroupState]):
        super().__init__(groups, instances)
        self.now = now

    def recheck(self, name):
        self.rechecked.append(name)
        if name in self.now:
            return self.now[name]
        return super().recheck(name)


SPOT_NODES = [
    Instance("i-idle", SPOT, "InService", ago(120), "n1"),
    Instance("i-busy", SPOT, "InService", ago(120), "n2"),
]


def _tick(groups, pending=None):
    ports = Ports(
        groups,
        FakeUtil({"i-idle": 0.0, "i-busy": 70.0}),
        FakePods({"research": ()} if pending is None else pending),
        None,
        MemoryState(),
        FakePublisher(),
        FakeNodes(),
    )
    return ports, run_tick(settings(pool_settings()), ports, NOW, lambda _: None)


def test_a_scale_up_on_a_size_that_moved_since_the_read_is_refused():
    moved = GroupState(group(SPOT, 4), tuple(SPOT_NODES))  # someone (or EKS) raised it meanwhile
    ports, result = _tick(
        MovedGroups([group(SPOT, 2), group(OD, 0)], SPOT_NODES, {SPOT: moved}), {"research": (1, 1, 1)}
    )
    assert ports.groups.writes == []
    assert any("desired size is 4 now, not the 2" in why for _, why in result.failed)


@pytest.mark.parametrize("status", ["UPDATING", "DEGRADED"])
def test_no_change_while_eks_updates_the_group(status):
    """The batched read cannot see an EKS update; the re-read does, and the change waits for the next tick."""
    updating = GroupState(dataclasses.replace(group(SPOT, 2), status=status), tuple(SPOT_NODES))
    ports, result = _tick(MovedGroups([group(SPOT, 2), group(OD, 0)], SPOT_NODES, {SPOT: updating}))
    assert ports.groups.writes == [] and ports.nodes.cordoned == set()
    assert any(f"is {status}" in why for _, why in result.failed)


def test_an_instance_gone_from_its_group_is_not_terminated():
    gone = GroupState(group(SPOT, 1), (SPOT_NODES[1],))
    ports, result = _tick(MovedGroups([group(SPOT, 2), group(OD, 0)], SPOT_NODES, {SPOT: gone}))
    assert ports.groups.writes == [] and ports.nodes.cordoned == set()
    assert any("i-idle is no longer in" in why for _, why in result.failed)


def test_a_failed_re_read_changes_nothing_and_is_reported():
    groups = FakeGroups([group(SPOT, 2), group(OD, 0)], SPOT_NODES)
    groups.fail_recheck = Throttled("EKS DescribeNodegroup: ThrottlingException")
    ports, result = _tick(groups)
    assert ports.groups.writes == [] and ports.nodes.cordoned == set()
    assert any("ThrottlingException" in e for e in result.errors)
    assert groups.rechecked == [SPOT]


def test_a_group_is_read_again_once_per_tick_and_the_tick_remembers_its_own_change():
    """Two reclaims in one group: one re-read. The change's time goes into the tick state: the next tick's cooldown
    and spot fallback wait count from it (DescribeNodegroup's modifiedAt is no longer read every tick)."""
    nodes = [
        Instance("i-idle", SPOT, "InService", ago(120), "n1"),
        Instance("i-idle2", SPOT, "InService", ago(120), "n3"),
    ]
    groups = FakeGroups([group(SPOT, 2), group(OD, 0)], nodes)
    ports = Ports(
        groups,
        FakeUtil({"i-idle": 0.0, "i-idle2": 0.0}),
        FakePods({"research": ()}),
        None,
        MemoryState(),
        FakePublisher(),
        FakeNodes(),
    )
    run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert [w[0] for w in groups.writes] == ["terminate", "terminate"] and groups.rechecked == [SPOT]
    state, _ = ports.state.load("tick")
    assert state["changed"] == {SPOT: NOW.isoformat()}

    from policy.tick import observe

    seen = observe(settings(pool_settings()), ports, state, NOW + timedelta(minutes=1), [])
    spot = next(g for g in seen.pools[0].groups if g.name == SPOT)
    assert spot.last_change_at == NOW


# --- the batched read failing: throttled, denied, a page that fails after a good one (botocore's Stubber) --------


def _asg_answer(name: str, desired: int = 1) -> dict:
    return {
        "AutoScalingGroupName": f"eks-{name}-uuid",
        "MinSize": 0,
        "MaxSize": 4,
        "DesiredCapacity": desired,
        "DefaultCooldown": 300,
        "AvailabilityZones": ["us-east-1a"],
        "HealthCheckType": "EC2",
        "CreatedTime": NOW,
        "Instances": [],
        "Tags": [
            {
                "Key": "eks:nodegroup-name",
                "Value": name,
                "ResourceId": f"eks-{name}-uuid",
                "ResourceType": "auto-scaling-group",
                "PropagateAtLaunch": True,
            },
            {
                "Key": "eks:cluster-name",
                "Value": CLUSTER,
                "ResourceId": f"eks-{name}-uuid",
                "ResourceType": "auto-scaling-group",
                "PropagateAtLaunch": True,
            },
        ],
    }


def _stubbed():
    from botocore.stub import Stubber

    session = boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    asg, ec2, eks = session.client("autoscaling"), session.client("ec2"), session.client("eks")
    return AwsNodeGroups(eks, asg, ec2, CLUSTER), Stubber(asg), Stubber(ec2)


@pytest.mark.parametrize("code,status", [("Throttling", 400), ("AccessDenied", 403), ("ServiceUnavailable", 503)])
def test_a_page_that_fails_after_a_good_one_leaves_every_group_of_the_read_out(code, status):
    """Never a partial answer taken for the whole: the groups of a read whose second page fails are all missing
    (their pools hold), the failure is reported, and no group is sized from anywhere else."""
    adapter, asg, ec2 = _stubbed()
    names = sorted([SPOT, OD])
    with asg, ec2:
        asg.add_response(
            "describe_auto_scaling_groups",
            {"AutoScalingGroups": [_asg_answer(SPOT)], "NextToken": "p2"},
            {"Filters": [{"Name": "tag:eks:nodegroup-name", "Values": names}], "MaxRecords": 100},
        )
        asg.add_client_error("describe_auto_scaling_groups", code, "no", http_status_code=status)
        ec2.add_response("describe_instances", {"Reservations": []})
        errors: list = []
        read = adapter.read(names, NOW, frozenset(), errors.append)
    assert read == {}
    assert len(errors) == 1 and code in str(errors[0]) and "DescribeAutoScalingGroups" in str(errors[0])


def test_more_than_fifty_groups_are_read_fifty_names_a_call_and_a_failed_call_holds_only_its_groups():
    adapter, asg, ec2 = _stubbed()
    names = sorted(f"g{k:03d}" for k in range(60))
    with asg, ec2:
        asg.add_response(
            "describe_auto_scaling_groups",
            {"AutoScalingGroups": [_asg_answer(n) for n in names[:50]]},
            {"Filters": [{"Name": "tag:eks:nodegroup-name", "Values": names[:50]}], "MaxRecords": 100},
        )
        asg.add_client_error(
            "describe_auto_scaling_groups",
            "Throttling",
            "slow down",
            http_status_code=400,
            expected_params={"Filters": [{"Name": "tag:eks:nodegroup-name", "Values": names[50:]}], "MaxRecords": 100},
        )
        errors: list = []
        read = adapter.read(names, NOW, frozenset(), errors.append)
    assert sorted(read) == names[:50]
    assert len(errors) == 1 and "Throttling" in str(errors[0])  # the throttled ten are not reported as deleted too


def test_two_auto_scaling_groups_for_one_group_name_are_ambiguous_and_reported():
    adapter, asg, ec2 = _stubbed()
    twin = {**_asg_answer(SPOT, 3), "AutoScalingGroupName": "eks-research-spot-other"}
    with asg, ec2:
        asg.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": [_asg_answer(SPOT), twin]})
        ec2.add_response("describe_instances", {"Reservations": []})
        errors: list = []
        read = adapter.read([SPOT], NOW, frozenset(), errors.append)
    assert read == {} and len(errors) == 1 and "ambiguous" in str(errors[0])


def test_a_change_time_ahead_of_the_clock_is_ignored_and_dropped():
    """A hand-edited or restored tick state with a time in the future must not hold the cooldown forever."""
    from policy.tick import observe

    groups = FakeGroups([group(SPOT, 2, changed=None), group(OD, 0, changed=None)], SPOT_NODES)
    ports = Ports(groups, FakeUtil({}), FakePods({"research": ()}), None, MemoryState(), FakePublisher(), FakeNodes())
    future = {"changed": {SPOT: (NOW + timedelta(days=365)).isoformat()}}
    seen = observe(settings(pool_settings()), ports, dict(future), NOW, [])
    assert all(g.last_change_at is None for g in seen.pools[0].groups)
    ports.state.items["tick"] = (future, 1)
    run_tick(settings(pool_settings()), ports, NOW, lambda _: None)
    assert (
        SPOT not in (ports.state.load("tick")[0].get("changed") or {})
        or ports.state.load("tick")[0]["changed"][SPOT] == NOW.isoformat()
    )


# --- property: whatever the re-read finds, nothing is changed on a stale or unreadable group ---------------------

from hypothesis import given, strategies as st  # noqa: E402

from test_policy_properties import PodsOnNodes, worlds  # noqa: E402


class RereadWorld(FakeGroups):
    """Each group as the re-read finds it: as read, its size moved, EKS updating it, or unreadable."""

    def __init__(self, groups, instances, found: dict[str, str]):
        super().__init__(groups, instances)
        self.found = found

    def recheck(self, name):
        gs = super().recheck(name)
        how = self.found.get(name, "same")
        if how == "fail":
            raise Throttled("EKS DescribeNodegroup: ThrottlingException")
        if how == "moved":
            return GroupState(dataclasses.replace(gs.group, desired_nodes=gs.group.desired_nodes + 1), gs.instances)
        if how == "updating":
            return GroupState(dataclasses.replace(gs.group, status="UPDATING"), gs.instances)
        return gs


@given(worlds(), st.data())
def test_no_write_lands_on_a_group_the_re_read_does_not_confirm(world, data):
    from policy.tick import TickResult, _apply

    from policy.decide import decide

    s, obs = world
    plan = decide(s, obs, NOW)
    po = obs.pools[0]
    found = {g.name: data.draw(st.sampled_from(["same", "moved", "updating", "fail"])) for g in po.groups}
    instances = [
        Instance(n.instance_id, n.group, n.lifecycle, n.launched_at, f"node-{n.instance_id}") for n in po.nodes
    ]
    groups = RereadWorld(list(po.groups), instances, found)
    ports = Ports(groups, FakeUtil({}), FakePods({}), None, MemoryState(), FakePublisher(), PodsOnNodes({}))
    result = TickResult(plan)
    _apply(s, plan, obs, ports, result, None, {n.instance_id: f"node-{n.instance_id}" for n in po.nodes})
    group_of = {n.instance_id: n.group for n in po.nodes}
    for kind, *args in groups.writes:
        target = args[0] if kind == "set" else group_of[args[0]]
        assert found.get(target, "same") in (("same",) if kind == "set" else ("same", "moved")), (kind, args, found)
    assert len(set(groups.rechecked)) == len(groups.rechecked)  # once per group per tick
