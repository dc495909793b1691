"""Node groups: read EKS managed node groups through their Auto Scaling groups; re-read one just before changing
it; resize and terminate by instance id.

The port (cluster-autoscaler's NodeGroup shape, STYLE.md 2): `read(names)`, `recheck(group)`, `set_desired(group,
n)`, `terminate(instance_id)`.

AWS calls (docs/policy.md, "Figures"). Every tick reads all groups at once: one DescribeAutoScalingGroups per 50
groups, filtered on the `eks:nodegroup-name` tag EKS puts on each managed node group's Auto Scaling group
(docs/aws-rules.md). The ASG carries what the policy decides on: desired, min and max (EKS applies the node group's
scaling config to its ASG, and after a targeted termination the ASG's desired is the live figure) and the
instances. What only DescribeNodegroup reports, the node group's `status` (an EKS update in progress), is read by
`recheck`, once per group the tick is about to change, together with that group's ASG again: a change is refused
when the group is not ACTIVE or its size moved since the tick's read (policy/tick.py). A group whose ASG cannot
be found is reported (once per tick) and left out, so its pool holds: never a size guessed from elsewhere.
"""

from __future__ import annotations

from collections.abc import Collection
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
# EKS tags each managed node group's Auto Scaling group with these (docs/aws-rules.md, "Auto Scaling group
# (EKS-owned)"); the policy's IAM condition on TerminateInstanceInAutoScalingGroup reads the same tag.
EKS_NODEGROUP_TAG = "eks:nodegroup-name"
EKS_CLUSTER_TAG = "eks:cluster-name"
# Values per tag filter in one DescribeAutoScalingGroups: the API documents no bound for filter values; 50 is the
# bound it documents for AutoScalingGroupNames, kept here so that a request never asks for more than that.
NAMES_PER_READ = 50
ASG_DELETING = "Delete in progress"  # the ASG's Status while it is being deleted (absent otherwise)


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

    def recheck(self, group: str) -> GroupState: ...

    def set_desired(self, group: str, desired: int) -> None: ...

    def terminate(self, instance_id: str) -> None: ...


def _chunks(items: list, n: int):
    for i in range(0, len(items), n):
        yield items[i:i + n]


class AwsNodeGroups:
    """Auto Scaling (tag-filtered DescribeAutoScalingGroups, activities, targeted termination) + EC2
    DescribeInstances (launch time, DNS) + EKS DescribeNodegroup (recheck) / UpdateNodegroupConfig."""

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

    def read(self, names: list[str], now: datetime, activities_for: Collection[str] = frozenset(),
             on_error: Callable[[PolicyError], None] | None = None) -> dict[str, GroupState]:
        """Groups that could be read in full (their Auto Scaling group, its recent activities when asked). A group
        missing from the result could not be: the engine holds its pool, and only its pool. Each failure goes to
        `on_error` (raised when None); groups without an Auto Scaling group are one failure for all of them."""
        def fail(err: PolicyError) -> None:
            if on_error is None:
                raise err
            on_error(err)

        wanted = set(names)
        found: dict[str, list[dict]] = {}
        unread: set[str] = set()
        for chunk in _chunks(sorted(wanted), NAMES_PER_READ):
            try:
                for g in self._tagged_groups(chunk):
                    found.setdefault(_tag(g, EKS_NODEGROUP_TAG), []).append(g)
            except PolicyError as err:
                unread.update(chunk)
                fail(err)
        asgs: dict[str, dict] = {}
        ambiguous: set[str] = set()
        for name in sorted(wanted - unread):
            # Another cluster's node group of the same name is not ours (an ASG without the cluster tag counts).
            mine = [g for g in found.get(name, []) if _tag(g, EKS_CLUSTER_TAG) in ("", self._cluster)]
            if len(mine) == 1:
                asgs[name] = mine[0]
            elif len(mine) > 1:
                ambiguous.add(name)
                fail(PolicyError(f"node group {name}: {len(mine)} Auto Scaling groups carry {EKS_NODEGROUP_TAG}="
                                 f"{name} ({', '.join(sorted(g['AutoScalingGroupName'] for g in mine))}): its size "
                                 "is ambiguous, its pool holds"))
        missing = sorted(wanted - unread - set(asgs) - ambiguous)
        if missing:  # one report per tick for all of them (the tick's errors, PolicyErrors, the error email)
            fail(PolicyError(
                f"no Auto Scaling group of cluster {self._cluster} carries {EKS_NODEGROUP_TAG} = "
                f"{', '.join(missing)}: deleted (or the node group is gone or being replaced); nothing is grown or "
                "shrunk on a size that cannot be read, their pools hold"))
        instance_ids = [i["InstanceId"] for g in asgs.values() for i in g.get("Instances", [])]
        try:
            details = self._describe_instances(instance_ids)
        except PolicyError as err:
            # Without launch times every node counts as just launched (never idle) and without node names none
            # can be checked for pods (never terminated): the groups stay usable for scale-up.
            details = {}
            fail(err)
        out: dict[str, GroupState] = {}
        for name, asg in asgs.items():
            last, shortage = None, False
            if name in activities_for:
                try:
                    last, shortage = self._activities(asg["AutoScalingGroupName"], now)
                except PolicyError as err:
                    fail(err)  # cooldown and shortage unknown: the group is not usable this tick
                    continue
            out[name] = _state(name, asg, "DELETING" if asg.get("Status") == ASG_DELETING else "ACTIVE", last,
                               shortage, details)
        return out

    def _tagged_groups(self, names: list[str]) -> list[dict]:
        """Every Auto Scaling group tagged with one of these node group names, all pages."""
        out, token = [], None
        while True:
            kwargs = {"Filters": [{"Name": f"tag:{EKS_NODEGROUP_TAG}", "Values": names}], "MaxRecords": 100}
            if token:
                kwargs["NextToken"] = token
            resp = self._call("Auto Scaling DescribeAutoScalingGroups", self._asg.describe_auto_scaling_groups,
                              **kwargs)
            out += resp.get("AutoScalingGroups", [])
            token = resp.get("NextToken")
            if not token:
                return out

    def recheck(self, name: str) -> GroupState:
        """The group read again just before the tick changes it: its EKS status (only DescribeNodegroup reports an
        update in progress) and its Auto Scaling group's size and instances now. Raises PolicyError when either
        cannot be read, or the Auto Scaling group EKS names does not exist (then nothing may change it)."""
        ng = self._call("EKS DescribeNodegroup", self._eks.describe_nodegroup, clusterName=self._cluster,
                        nodegroupName=name)["nodegroup"]
        status = ng.get("status", "")
        asg_names = [a["name"] for a in (ng.get("resources") or {}).get("autoScalingGroups") or [] if a.get("name")]
        if not asg_names:
            raise PolicyError(f"node group {name} ({status or 'no status'}): EKS reports no Auto Scaling group; "
                              "left unchanged")
        resp = self._call("Auto Scaling DescribeAutoScalingGroups", self._asg.describe_auto_scaling_groups,
                          AutoScalingGroupNames=asg_names[:1])
        groups = resp.get("AutoScalingGroups", [])
        if not groups:
            raise PolicyError(f"node group {name}: its Auto Scaling group {asg_names[0]} does not exist (deleted?); "
                              "left unchanged")
        return _state(name, groups[0], status, None, False, {})

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


def _tag(asg: dict, key: str) -> str:
    return next((t.get("Value", "") for t in asg.get("Tags") or [] if t.get("Key") == key), "")


def _state(name: str, asg: dict, status: str, last_change: datetime | None, shortage: bool,
           details: dict[str, tuple[datetime | None, str]]) -> GroupState:
    group = Group(name, int(asg.get("DesiredCapacity", 0)), int(asg.get("MinSize", 0)), int(asg.get("MaxSize", 0)),
                  status, last_change, shortage)
    instances = []
    for i in asg.get("Instances", []):
        launched, dns = details.get(i["InstanceId"], (None, ""))
        instances.append(Instance(i["InstanceId"], name, i.get("LifecycleState", ""), launched, dns,
                                  i.get("InstanceType")))
    return GroupState(group, tuple(instances))


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
