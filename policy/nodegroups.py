"""Node groups: read EKS managed node groups and their Auto Scaling groups; resize and terminate by instance id.

The port (cluster-autoscaler's NodeGroup shape, STYLE.md 2): `read(names)`, `set_desired(group, n)`,
`terminate(instance_id)`. Desired size is read from the Auto Scaling group (what EKS itself reports after a
targeted termination) and falls back to the node group's scalingConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Protocol

from policy.aws_errors import classify
from policy.deadline import Deadline
from policy.errors import PolicyError
from policy.model import Group

# Scaling activity messages that mean "AWS had no capacity" (spot or on-demand).
SHORTAGE_MARKERS = ("InsufficientInstanceCapacity", "insufficient capacity", "Insufficient capacity",
                    "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "UnfulfillableCapacity")
SHORTAGE_RECENT = timedelta(minutes=30)


@dataclass(frozen=True)
class Instance:
    instance_id: str
    group: str
    lifecycle: str
    launched_at: datetime | None = None
    node_name: str = ""
    instance_type: str | None = None  # DescribeAutoScalingGroups' InstanceType: the budget cap prices the node at it


@dataclass(frozen=True)
class GroupState:
    group: Group
    instances: tuple[Instance, ...]


class NodeGroupPort(Protocol):
    def read(self, names: list[str], now: datetime, activities_for: set[str],
             on_error: Callable[[PolicyError], None]) -> dict[str, GroupState]: ...

    def set_desired(self, group: str, desired: int) -> None: ...

    def terminate(self, instance_id: str) -> None: ...


def _chunks(items: list, n: int):
    for i in range(0, len(items), n):
        yield items[i:i + n]


class AwsNodeGroups:
    """EKS DescribeNodegroup/UpdateNodegroupConfig + Auto Scaling + EC2 DescribeInstances (launch time, DNS)."""

    def __init__(self, eks, autoscaling, ec2, cluster_name: str, deadline: Deadline | None = None):
        self._eks, self._asg, self._ec2 = eks, autoscaling, ec2
        self._cluster = cluster_name
        self._deadline = deadline
        self.calls = 0

    def _call(self, what: str, fn, **kwargs):
        if self._deadline is not None:
            self._deadline.check()
        self.calls += 1
        try:
            return fn(**kwargs)
        except Exception as err:  # noqa: BLE001 - every failure becomes a typed PolicyError
            raise classify(err, what) from err

    def read(self, names: list[str], now: datetime, activities_for: set[str] = frozenset(),
             on_error: Callable[[PolicyError], None] | None = None) -> dict[str, GroupState]:
        """Groups that could be read in full (node group, its Auto Scaling group, its recent activities when
        asked). A group missing from the result could not be: the engine holds its pool, and only its pool.
        Each failure goes to `on_error` (raised when None)."""
        def fail(err: PolicyError) -> None:
            if on_error is None:
                raise err
            on_error(err)

        ngs: dict[str, dict] = {}
        for name in names:
            try:
                resp = self._call("EKS DescribeNodegroup", self._eks.describe_nodegroup, clusterName=self._cluster,
                                  nodegroupName=name)
                ngs[name] = resp["nodegroup"]
            except PolicyError as err:
                fail(err)
        asg_of = {name: ng["resources"]["autoScalingGroups"][0]["name"]
                  for name, ng in ngs.items() if (ng.get("resources") or {}).get("autoScalingGroups")}
        asgs: dict[str, dict] = {}
        unread: set[str] = set()
        for chunk in _chunks(sorted(set(asg_of.values())), 50):
            token = None
            try:
                while True:
                    kwargs = {"AutoScalingGroupNames": chunk, "MaxRecords": 100}
                    if token:
                        kwargs["NextToken"] = token
                    resp = self._call("Auto Scaling DescribeAutoScalingGroups",
                                      self._asg.describe_auto_scaling_groups, **kwargs)
                    for g in resp.get("AutoScalingGroups", []):
                        asgs[g["AutoScalingGroupName"]] = g
                    token = resp.get("NextToken")
                    if not token:
                        break
            except PolicyError as err:
                unread.update(chunk)
                fail(err)
        instance_ids = [i["InstanceId"] for g in asgs.values() for i in g.get("Instances", [])]
        try:
            details = self._describe_instances(instance_ids)
        except PolicyError as err:
            # Without launch times every node counts as just launched (never idle) and without node names none
            # can be checked for pods (never terminated): the groups stay usable for scale-up.
            details = {}
            fail(err)
        out: dict[str, GroupState] = {}
        for name, ng in ngs.items():
            asg_name = asg_of.get(name, "")
            if asg_name in unread:
                continue
            asg = asgs.get(asg_name)
            scaling = ng.get("scalingConfig") or {}
            desired = asg["DesiredCapacity"] if asg else scaling.get("desiredSize", 0)
            changed = [ng.get("modifiedAt")]
            shortage = False
            if asg is not None and name in activities_for:
                try:
                    last, shortage = self._activities(asg["AutoScalingGroupName"], now)
                except PolicyError as err:
                    fail(err)  # cooldown and shortage unknown: the group is not usable this tick
                    continue
                changed.append(last)
            stamps = [_utc(t) for t in changed if t is not None]
            group = Group(name, int(desired), int(scaling.get("minSize", 0)), int(scaling.get("maxSize", 0)),
                          ng.get("status", "ACTIVE"), max(stamps) if stamps else None, shortage)
            instances = []
            for i in (asg or {}).get("Instances", []):
                launched, dns = details.get(i["InstanceId"], (None, ""))
                instances.append(Instance(i["InstanceId"], name, i.get("LifecycleState", ""), launched, dns,
                                          i.get("InstanceType")))
            out[name] = GroupState(group, tuple(instances))
        return out

    def _describe_instances(self, ids: list[str]) -> dict[str, tuple[datetime | None, str]]:
        # An instance-id *filter*, not InstanceIds: an instance the Auto Scaling group launched seconds ago may
        # not be visible to EC2's API yet, and InstanceIds fails the whole call (InvalidInstanceID.NotFound) for
        # it, which would hold every pool for the tick. A filter just leaves it out (it counts as just launched).
        out = {}
        for chunk in _chunks(sorted(ids), 200):  # EC2 accepts at most 200 values per filter
            token = None
            while True:
                kwargs = {"Filters": [{"Name": "instance-id", "Values": chunk}]}
                if token:
                    kwargs["NextToken"] = token
                resp = self._call("EC2 DescribeInstances", self._ec2.describe_instances, **kwargs)
                for res in resp.get("Reservations", []):
                    for inst in res.get("Instances", []):
                        launched = inst.get("LaunchTime")
                        out[inst["InstanceId"]] = (_utc(launched) if launched else None, inst.get("PrivateDnsName", ""))
                token = resp.get("NextToken")
                if not token:
                    break
        return out

    def _activities(self, asg_name: str, now: datetime) -> tuple[datetime | None, bool]:
        resp = self._call("Auto Scaling DescribeScalingActivities", self._asg.describe_scaling_activities,
                          AutoScalingGroupName=asg_name, MaxRecords=10)
        acts = sorted(resp.get("Activities", []), key=lambda a: a.get("StartTime") or now, reverse=True)
        last = _utc(acts[0]["StartTime"]) if acts and acts[0].get("StartTime") else None
        shortage = False
        for act in acts:
            start = act.get("StartTime")
            if start is None or now - _utc(start) > SHORTAGE_RECENT:
                break
            if act.get("StatusCode") == "Successful":
                break  # a later success means capacity came back
            text = f"{act.get('StatusMessage', '')} {act.get('Description', '')}"
            if act.get("StatusCode") in ("Failed", "Cancelled") and any(m in text for m in SHORTAGE_MARKERS):
                shortage = True
                break
        return last, shortage

    def set_desired(self, group: str, desired: int) -> None:
        self._call("EKS UpdateNodegroupConfig", self._eks.update_nodegroup_config, clusterName=self._cluster,
                   nodegroupName=group, scalingConfig={"desiredSize": int(desired)})

    def terminate(self, instance_id: str) -> None:
        # Decrement, so the ASG does not launch a replacement for the node we just reclaimed.
        self._call("Auto Scaling TerminateInstanceInAutoScalingGroup",
                   self._asg.terminate_instance_in_auto_scaling_group, InstanceId=instance_id,
                   ShouldDecrementDesiredCapacity=True)


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
