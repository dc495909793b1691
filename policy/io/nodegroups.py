"""Node groups: read EKS managed node groups through their Auto Scaling groups; re-read one just before changing
it; resize and terminate by instance id.

The port (cluster-autoscaler's NodeGroup shape, STYLE.md 2): `read(names)`, `recheck(group)`, `set_desired(group,
n)`, `terminate(instance_id)`.

AWS calls (docs/policy.md, "Figures"). Every tick reads all groups at once: one DescribeAutoScalingGroups per 50
groups, filtered on the `eks:nodegroup-name` tag EKS puts on each managed node group's Auto Scaling group
(docs/aws-rules.md). The ASG carries what the policy decides on: desired, min and max (EKS applies the node group's
scaling config to its ASG, and after a targeted termination the ASG's desired is the live figure) and the
instances. What only DescribeNodegroup reports, the node group's `status` (an EKS update in progress), is read by
`recheck_many`, once per group the tick is about to change, side by side with those groups' ASGs read again (one
DescribeAutoScalingGroups per 50 of them): a change is refused when the group is not ACTIVE or its size moved
since the tick's read (policy/tick.py). A group whose ASG cannot be found is reported (once per tick) and left
out, so its pool holds: never a size guessed from elsewhere.

A spot group's scaling activities (the capacity shortage and its last launch) are read only where the engine uses
them (policy/decide/pool.py): while a launch is outstanding (the ASG wants more instances than it has in service: the
spot fallback's shortage and wait), and always for the groups named `activities_always` (a `service` pool's,
whose utilization scale-up waits out a cooldown from any change). Calls that do not depend on each other (the
activities, the DescribeNodegroup of each group about to change and the re-read of their ASGs, the chunks of
instances, 100 ids each, one page) run side by side, at most `in_flight` at once
(policy/fanout.py).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from datetime import datetime, timedelta, timezone
from typing import Callable

from policy.io.aws_errors import classify
from policy import fanout
from policy.deadline import Deadline
from policy.errors import PolicyError
from policy.model import Group
from policy.ports import GroupState, Instance

# Scaling activity messages that mean "AWS had no capacity" (spot or on-demand).
SHORTAGE_MARKERS = (
    "InsufficientInstanceCapacity",
    "insufficient capacity",
    "Insufficient capacity",
    "MaxSpotInstanceCountExceeded",
    "SpotMaxPriceTooLow",
    "UnfulfillableCapacity",
)
SHORTAGE_RECENT = timedelta(minutes=30)
# EKS tags each managed node group's Auto Scaling group with these (docs/aws-rules.md, "Auto Scaling group
# (EKS-owned)"); the policy's IAM condition on TerminateInstanceInAutoScalingGroup reads the same tag.
EKS_NODEGROUP_TAG = "eks:nodegroup-name"
EKS_CLUSTER_TAG = "eks:cluster-name"
# Values per tag filter in one DescribeAutoScalingGroups: the API documents no bound for filter values; 50 is the
# bound it documents for AutoScalingGroupNames, kept here so that a request never asks for more than that.
NAMES_PER_READ = 50
# DescribeInstances by instance-id filter (docs/aws-rules.md, "EC2 DescribeInstances, paged"): ids per call (a
# filter takes at most 200 values) and the page asked for, EC2's largest, so that a chunk is one call.
IDS_PER_READ = 100
INSTANCES_PER_PAGE = 1000
ASG_DELETING = "Delete in progress"  # the ASG's Status while it is being deleted (absent otherwise)
IN_SERVICE = "InService"


def _chunks(items: list, n: int):
    for i in range(0, len(items), n):
        yield items[i : i + n]


class AwsNodeGroups:
    """Auto Scaling (tag-filtered DescribeAutoScalingGroups, activities, targeted termination) + EC2
    DescribeInstances (launch time, DNS) + EKS DescribeNodegroup (recheck) / UpdateNodegroupConfig."""

    def __init__(
        self,
        eks,
        autoscaling,
        ec2,
        cluster_name: str,
        deadline: Deadline | None = None,
        in_flight: int = fanout.DEFAULT_IN_FLIGHT,
        activities_always: Collection[str] = frozenset(),
    ):
        self._eks, self._asg, self._ec2 = eks, autoscaling, ec2
        self._cluster = cluster_name
        self._deadline = deadline
        self._in_flight = in_flight
        self._activities_always = frozenset(activities_always)
        self._lock = threading.Lock()
        self._asg_of: dict[str, str] = {}  # node group -> the Auto Scaling group the tick's read found for it
        self.calls = 0

    def _call(self, what: str, fn, **kwargs):
        if self._deadline is not None:
            self._deadline.check()
        with self._lock:  # calls run side by side (policy/fanout.py)
            self.calls += 1
        try:
            return fn(**kwargs)
        except Exception as err:  # noqa: BLE001 - every failure becomes a typed PolicyError
            raise classify(err, what) from err

    def read(
        self,
        names: list[str],
        now: datetime,
        activities_for: Collection[str] = frozenset(),
        on_error: Callable[[PolicyError], None] | None = None,
    ) -> dict[str, GroupState]:
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
        for chunk, groups, err in fanout.each(
            self._tagged_groups, _chunks(sorted(wanted), NAMES_PER_READ), self._in_flight
        ):
            if err is not None:
                unread.update(chunk)
                fail(_policy_error(err))
                continue
            for g in groups or ():
                found.setdefault(_tag(g, EKS_NODEGROUP_TAG), []).append(g)
        asgs: dict[str, dict] = {}
        ambiguous: set[str] = set()
        for name in sorted(wanted - unread):
            # Another cluster's node group of the same name is not ours (an ASG without the cluster tag counts).
            mine = [g for g in found.get(name, []) if _tag(g, EKS_CLUSTER_TAG) in ("", self._cluster)]
            if len(mine) == 1:
                asgs[name] = mine[0]
            elif len(mine) > 1:
                ambiguous.add(name)
                fail(
                    PolicyError(
                        f"node group {name}: {len(mine)} Auto Scaling groups carry {EKS_NODEGROUP_TAG}="
                        f"{name} ({', '.join(sorted(g['AutoScalingGroupName'] for g in mine))}): its size "
                        "is ambiguous, its pool holds"
                    )
                )
        missing = sorted(wanted - unread - set(asgs) - ambiguous)
        if missing:  # one report per tick for all of them (the tick's errors, PolicyErrors, the error email)
            fail(
                PolicyError(
                    f"no Auto Scaling group of cluster {self._cluster} carries {EKS_NODEGROUP_TAG} = "
                    f"{', '.join(missing)}: deleted (or the node group is gone or being replaced); nothing is grown or "
                    "shrunk on a size that cannot be read, their pools hold"
                )
            )
        self._asg_of.update({name: g["AutoScalingGroupName"] for name, g in asgs.items()})
        instance_ids = [i["InstanceId"] for g in asgs.values() for i in g.get("Instances", [])]
        try:
            details = self._describe_instances(instance_ids)
        except PolicyError as err:
            # Without launch times every node counts as just launched (never idle) and without node names none
            # can be checked for pods (never terminated): the groups stay usable for scale-up.
            details = {}
            fail(err)
        wanted_activities = [
            name
            for name, asg in asgs.items()
            if name in activities_for and (name in self._activities_always or _launch_outstanding(asg))
        ]
        activities = {
            name: (value, err)
            for name, value, err in fanout.each(
                lambda name: self._activities(asgs[name]["AutoScalingGroupName"], now),
                wanted_activities,
                self._in_flight,
            )
        }
        out: dict[str, GroupState] = {}
        for name, asg in asgs.items():
            seen, problem = activities.get(name, (None, None))
            if problem is not None:
                fail(_policy_error(problem))  # cooldown and shortage unknown: the group is not usable this tick
                continue
            last, shortage = seen if seen is not None else (None, False)
            out[name] = _state(
                name, asg, "DELETING" if asg.get("Status") == ASG_DELETING else "ACTIVE", last, shortage, details
            )
        return out

    def _tagged_groups(self, names: list[str]) -> list[dict]:
        """Every Auto Scaling group tagged with one of these node group names, all pages."""
        out, token = [], None
        while True:
            kwargs = {"Filters": [{"Name": f"tag:{EKS_NODEGROUP_TAG}", "Values": names}], "MaxRecords": 100}
            if token:
                kwargs["NextToken"] = token
            resp = self._call(
                "Auto Scaling DescribeAutoScalingGroups", self._asg.describe_auto_scaling_groups, **kwargs
            )
            out += resp.get("AutoScalingGroups", [])
            token = resp.get("NextToken")
            if not token:
                return out

    def recheck(self, name: str) -> GroupState:
        """The group read again just before the tick changes it: its EKS status (only DescribeNodegroup reports an
        update in progress) and its Auto Scaling group's size and instances now. Raises PolicyError when either
        cannot be read, or the Auto Scaling group EKS names does not exist (then nothing may change it)."""
        got = self.recheck_many([name])[name]
        if isinstance(got, PolicyError):
            raise got
        return got

    def recheck_many(self, names: list[str]) -> dict[str, GroupState | PolicyError]:
        """`recheck` of every group at once: one DescribeNodegroup per group (EKS has no batch form) and their Auto
        Scaling groups in one DescribeAutoScalingGroups per 50 names, all side by side: the ASGs are the ones the
        tick's read found (by the `eks:nodegroup-name` tag), so they need not wait for EKS to name them. A group
        whose DescribeNodegroup names another ASG (replaced in between) has that one read after. Each group that
        cannot be read again gets the PolicyError that says why, in its place (nothing may change it)."""
        names = list(dict.fromkeys(names))
        out: dict[str, GroupState | PolicyError] = {}
        described: dict[str, tuple[str, str]] = {}  # node group -> (EKS status, its ASG's name)
        by_asg: dict[str, dict] = {}
        failed: dict[str, PolicyError] = {}
        known = sorted({self._asg_of[n] for n in names if n in self._asg_of})
        # The ASG reads first: at most `in_flight` calls at once, these are the ones a change waits for longest.
        work = [("asgs", chunk) for chunk in _chunks(known, NAMES_PER_READ)] + [("nodegroup", n) for n in names]
        for (kind, item), value, err in fanout.each(self._recheck_part, work, self._in_flight):
            if kind == "asgs":
                self._take_asgs(item, value, err, by_asg, failed)
                continue
            if err is not None or value is None:
                out[item] = _policy_error(err or PolicyError("EKS DescribeNodegroup: no answer"))
                continue
            status = value.get("status", "")
            asg_names = [
                a["name"] for a in (value.get("resources") or {}).get("autoScalingGroups") or [] if a.get("name")
            ]
            if not asg_names:
                out[item] = PolicyError(
                    f"node group {item} ({status or 'no status'}): EKS reports no Auto Scaling group; left unchanged"
                )
                continue
            described[item] = (status, asg_names[0])
        late = sorted({asg for _, asg in described.values()} - set(known))  # named by EKS, not by the tick's read
        for chunk, groups, err in fanout.each(
            lambda chunk: self._recheck_part(("asgs", chunk)), _chunks(late, NAMES_PER_READ), self._in_flight
        ):
            self._take_asgs(chunk, groups, err, by_asg, failed)
        for name, (status, asg_name) in described.items():
            if asg_name in failed:
                out[name] = failed[asg_name]
            elif asg_name not in by_asg:
                out[name] = PolicyError(
                    f"node group {name}: its Auto Scaling group {asg_name} does not exist (deleted?); left unchanged"
                )
            else:
                out[name] = _state(name, by_asg[asg_name], status, None, False, {})
        return out

    def _recheck_part(self, part: tuple[str, object]):
        """One call of `recheck_many`: ("nodegroup", name) -> DescribeNodegroup's node group; ("asgs", names) ->
        those Auto Scaling groups."""
        kind, item = part
        if kind == "nodegroup":
            return self._call(
                "EKS DescribeNodegroup", self._eks.describe_nodegroup, clusterName=self._cluster, nodegroupName=item
            )["nodegroup"]
        return self._call(
            "Auto Scaling DescribeAutoScalingGroups",
            self._asg.describe_auto_scaling_groups,
            AutoScalingGroupNames=item,
            MaxRecords=NAMES_PER_READ,
        ).get("AutoScalingGroups", [])

    @staticmethod
    def _take_asgs(
        chunk: list[str], groups, err: Exception | None, by_asg: dict[str, dict], failed: dict[str, PolicyError]
    ) -> None:
        for asg_name in chunk:
            if err is not None:
                failed[asg_name] = _policy_error(err)
        for g in groups or ():
            by_asg[g["AutoScalingGroupName"]] = g

    def _describe_instances(self, ids: list[str]) -> dict[str, tuple[datetime | None, str]]:
        # An instance-id *filter*, not InstanceIds: an instance the Auto Scaling group launched seconds ago may
        # not be visible to EC2's API yet, and InstanceIds fails the whole call (InvalidInstanceID.NotFound) for
        # it, which would hold every pool for the tick. A filter just leaves it out (it counts as just launched).
        out = {}
        # EC2 accepts at most 200 values per filter; chunks of IDS_PER_READ side by side (each answer small, so
        # each call quick: the pagination guide's point), the first failure fails the read
        for _, part, err in fanout.each(self._instances, _chunks(sorted(ids), IDS_PER_READ), self._in_flight):
            if err is not None:
                raise _policy_error(err)
            out.update(part or {})
        return out

    def _instances(self, chunk: list[str]) -> dict[str, tuple[datetime | None, str]]:
        out, token = {}, None
        while True:
            # A filtered read pages: the most a page may hold, as EC2's pagination guide advises for a filter.
            kwargs = {"Filters": [{"Name": "instance-id", "Values": chunk}], "MaxResults": INSTANCES_PER_PAGE}
            if token:
                kwargs["NextToken"] = token
            resp = self._call("EC2 DescribeInstances", self._ec2.describe_instances, **kwargs)
            for res in resp.get("Reservations", []):
                for inst in res.get("Instances", []):
                    launched = inst.get("LaunchTime")
                    out[inst["InstanceId"]] = (_utc(launched) if launched else None, inst.get("PrivateDnsName", ""))
            token = resp.get("NextToken")
            if not token:
                return out

    def _activities(self, asg_name: str, now: datetime) -> tuple[datetime | None, bool]:
        resp = self._call(
            "Auto Scaling DescribeScalingActivities",
            self._asg.describe_scaling_activities,
            AutoScalingGroupName=asg_name,
            MaxRecords=10,
        )
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
        self._call(
            "EKS UpdateNodegroupConfig",
            self._eks.update_nodegroup_config,
            clusterName=self._cluster,
            nodegroupName=group,
            scalingConfig={"desiredSize": int(desired)},
        )

    def terminate(self, instance_id: str) -> None:
        # Decrement, so the ASG does not launch a replacement for the node we just reclaimed.
        self._call(
            "Auto Scaling TerminateInstanceInAutoScalingGroup",
            self._asg.terminate_instance_in_auto_scaling_group,
            InstanceId=instance_id,
            ShouldDecrementDesiredCapacity=True,
        )


def _launch_outstanding(asg: dict) -> bool:
    """The ASG wants more instances than it has in service: a launch is under way or failing, which is when the
    engine reads a spot group's shortage and how long the launch has waited (policy/decide/pool.py, spot_short). A
    booting instance counts as outstanding here (the engine counts it as granted): a read more, never one less."""
    in_service = sum(1 for i in asg.get("Instances", []) if i.get("LifecycleState") == IN_SERVICE)
    return int(asg.get("DesiredCapacity", 0)) > in_service


def _policy_error(err: Exception) -> PolicyError:
    """What a call side by side raised: a PolicyError as it is; anything else (a bug, not AWS) as one, so that one
    failed item is reported and the others are kept."""
    return err if isinstance(err, PolicyError) else PolicyError(f"{type(err).__name__}: {err}")


def _tag(asg: dict, key: str) -> str:
    return next((t.get("Value", "") for t in asg.get("Tags") or [] if t.get("Key") == key), "")


def _state(
    name: str,
    asg: dict,
    status: str,
    last_change: datetime | None,
    shortage: bool,
    details: dict[str, tuple[datetime | None, str]],
) -> GroupState:
    group = Group(
        name,
        int(asg.get("DesiredCapacity", 0)),
        int(asg.get("MinSize", 0)),
        int(asg.get("MaxSize", 0)),
        status,
        last_change,
        shortage,
    )
    instances = []
    for i in asg.get("Instances", []):
        launched, dns = details.get(i["InstanceId"], (None, ""))
        instances.append(
            Instance(i["InstanceId"], name, i.get("LifecycleState", ""), launched, dns, i.get("InstanceType"))
        )
    return GroupState(group, tuple(instances))


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
