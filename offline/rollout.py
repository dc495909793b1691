"""Which node groups a change replaces or rolls, from two offline preview documents (base and head).

A Pulumi diff lists changed inputs; what a reviewer needs is what happens to running nodes:
- **replaces**: an input the provider cannot update in place (ForceNew) changed, so Pulumi creates a new node
  group and deletes the old one: every node of the group is new, running pods are evicted;
- **rolls**: the group stays, but EKS replaces every node (UpdateNodegroupVersion): a new launch-template version
  (any template change: tags, volume, reservation target), an AMI release or Kubernetes version change;
- **deletes**: the group is gone from the plan.

`blockers` lists what a reviewer must stop at (the deploy workflow's gate refuses them unless the change says they
are meant): a change that replaces the EKS cluster (every node and workload goes with it), replaces or deletes a
floor, an elastic group (its live size is unknown offline, so its nodes count as up) or a reservation, rolls an
active Capacity Block, or takes a Kubernetes step EKS refuses (more than one minor, a downgrade, a group lagging
the control plane; `upgrade_steps` lists a version change in apply order). A delete-first floor replacement whose
node role predates role paths is one CI's deploy role cannot carry out at all (`Blocker.needs_administrator`).
Pulumi's `ignore_changes` is honoured the way the engine does it (an ignored input keeps its value in the state, so
it cannot force a replacement), and a role that is not replaced keeps its ARN, so the cluster's `roleArn` does not
change with it: role references are matched to roles by URN (the role's name), never by re-rendering an ARN with
this release's offline runner, which an earlier release's base did not use.

The tables below are the provider's (terraform-provider-aws `internal/service/eks/node_group.go` and
`internal/service/ec2/ec2_launch_template.go`, which pulumi-aws bridges; docs/aws-rules.md): inputs marked
ForceNew replace, `launch_template.version` / `release_version` / `version` go through UpdateNodegroupVersion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
CAPACITY_RESERVATION = "aws:ec2/capacityReservation:CapacityReservation"
CLUSTER = "aws:eks/cluster:Cluster"
IAM_ROLE = "aws:iam/role:Role"
ADDON = "aws:eks/addon:Addon"

# aws_eks_cluster: ForceNew arguments (terraform-provider-aws internal/service/eks/cluster.go). `vpcConfig.subnetIds`
# and `version` are updated in place (UpdateClusterConfig, UpdateClusterVersion).
CLUSTER_REPLACE_FORCING = (
    "name",
    "roleArn",
    "bootstrapSelfManagedAddons",
    "accessConfig.bootstrapClusterCreatorAdminPermissions",
    "kubernetesNetworkConfig.ipFamily",
    "kubernetesNetworkConfig.serviceIpv4Cidr",
    "outpostConfig",
    "remoteNetworkConfig",
)
# aws_iam_role: ForceNew arguments; a replaced role has a new ARN.
ROLE_REPLACE_FORCING = ("name", "namePrefix", "path")

# aws_eks_node_group: ForceNew arguments (engine/camelCase names). `subnetIds` is a set: order is not a change.
NODE_GROUP_REPLACE_FORCING = (
    "amiType",
    "capacityType",
    "clusterName",
    "diskSize",
    "instanceTypes",
    "launchTemplate.id",
    "launchTemplate.name",
    "nodeGroupName",
    "nodeGroupNamePrefix",
    "nodeRoleArn",
    "remoteAccess",
    "subnetIds",
)
SET_VALUED = frozenset({"subnetIds"})
# aws_eks_node_group: updated in place by UpdateNodegroupVersion, which replaces every node.
NODE_GROUP_ROLLING = ("launchTemplate.version", "releaseVersion", "version")
# aws_launch_template: ForceNew (a new template, so a new launchTemplate.id on the group: a replacement).
LAUNCH_TEMPLATE_REPLACE_FORCING = ("name", "namePrefix")
# aws_launch_template inputs whose change does NOT make a new template version (template-level metadata).
LAUNCH_TEMPLATE_NO_NEW_VERSION = frozenset({"tags", "tagsAll", "updateDefaultVersion", "defaultVersion"})
# aws_ec2_capacity_reservation: ForceNew arguments (a new reservation id, so a new template version).
CAPACITY_RESERVATION_REPLACE_FORCING = (
    "availabilityZone",
    "instanceType",
    "instancePlatform",
    "tenancy",
    "ebsOptimized",
    "ephemeralStorage",
    "outpostArn",
    "placementGroupArn",
)


@dataclass(frozen=True)
class GroupChange:
    action: str  # "replaces" | "rolls" | "deletes"
    group: str  # e.g. prod-training-guaranteed
    tier: str  # guaranteed | elastic | platform
    size: str  # e.g. "2× p4d.24xlarge", "0–8× p4d.24xlarge, p5.48xlarge"
    reasons: tuple[str, ...]

    @property
    def is_floor(self) -> bool:
        return self.tier == "guaranteed"

    def sentence(self) -> str:
        why = f": {', '.join(self.reasons)}" if self.reasons else ""
        return f"{self.action} `{self.group}` ({self.size}){why}"


def _get(inputs: dict[str, Any], path: str) -> Any:
    value: Any = inputs
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _changed(old: dict[str, Any], new: dict[str, Any], path: str) -> bool:
    a, b = _get(old, path), _get(new, path)
    if path in SET_VALUED and isinstance(a, list) and isinstance(b, list):
        return sorted(map(str, a)) != sorted(map(str, b))
    return a != b


def group_label(inputs: dict[str, Any]) -> str:
    name = inputs.get("nodeGroupName") or str(inputs.get("nodeGroupNamePrefix") or "?").rstrip("_-")
    return str(name)


def _tier(inputs: dict[str, Any]) -> str:
    return str((inputs.get("labels") or {}).get("gpuloan.io/tier") or "platform")


def _size(inputs: dict[str, Any], template: dict[str, Any] | None) -> str:
    """Nodes × instance types; a floor's type lives in its launch template (`template`, the resource)."""
    scaling = inputs.get("scalingConfig") or {}
    types = list(inputs.get("instanceTypes") or [])
    template_inputs = (template or {}).get("inputs") or {}
    if not types and template_inputs.get("instanceType"):
        types = [template_inputs["instanceType"]]
    kinds = ", ".join(types) or "?"
    if _tier(inputs) == "elastic":
        return f"0–{scaling.get('maxSize', '?')}× {kinds}"
    return f"{scaling.get('desiredSize', scaling.get('maxSize', '?'))}× {kinds}"


CAPACITY_BLOCK_STAGED = (
    "staged: a Capacity Block group is upgraded only at desired 0 (EKS); set "
    "capacity_block_active: false and apply, apply this change, then remove it (docs/floor.md)"
)


def _desired(inputs: dict[str, Any]) -> int:
    return int((inputs.get("scalingConfig") or {}).get("desiredSize") or 0)


def _reservation_target(template: dict[str, Any] | None) -> str | None:
    """The capacity reservation (ODCR or Capacity Block) a launch template targets, if any."""
    spec = ((template or {}).get("inputs") or {}).get("capacityReservationSpecification") or {}
    return (spec.get("capacityReservationTarget") or {}).get("capacityReservationId")


def _template_id(resource: dict[str, Any]) -> str:
    """The launch template id a node group points at, as the offline preview assigns it (from the template's
    logical name), so a template's change can be traced to its group."""
    from offline import runner as offline

    return offline.TYPE_OUTPUTS[LAUNCH_TEMPLATE](resource["name"], {}, "")["id"]


def _by_urn(doc: dict[str, Any] | None) -> dict[str, dict]:
    return {r["urn"]: r for r in (doc or {}).get("resources", [])}


ROLE_ARN = re.compile(r"^arn:[^:]+:iam:[^:]*:[^:]*:role/(?:.*/)?([^/]+)$")
MOCK_ID_SUFFIX = re.compile(r"^-[0-9a-f]{8}$")  # an offline id: the logical name plus a short hash (offline/runner.py)


def _role_urn_of(arn: str, roles: dict[str, dict[str, Any]]) -> str | None:
    """The URN of the role of `roles` ({urn: resource}) an ARN string names, or None. Matched on the role's name
    (its `name` input, else its logical name, with or without the short id an offline run appends), never on how
    one release of the offline runner renders an ARN: a base previewed by an earlier release rendered role ARNs
    differently (no path, a region), and re-rendering them with the head's runner made every role look new."""
    found = ROLE_ARN.match(arn)
    if not found:
        return None
    last = found.group(1)
    for urn, role in roles.items():
        for name in (role["inputs"].get("name"), role["name"]):
            if name and (last == name or (last.startswith(name) and MOCK_ID_SUFFIX.match(last[len(name) :]))):
                return urn
    return None


def _role_references(doc_resources: dict[str, dict[str, Any]]) -> dict[str, str]:
    """{ARN string used in any input of the document: the URN of the role it names}."""
    roles = {u: r for u, r in doc_resources.items() if r["type"] == IAM_ROLE}
    out: dict[str, str] = {}

    def walk(value: Any) -> None:
        if isinstance(value, str):
            if value not in out:
                urn = _role_urn_of(value, roles)
                if urn is not None:
                    out[value] = urn
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for r in doc_resources.values():
        walk(r["inputs"])
    return out


def _substitute(value: Any, renames: dict[str, str]) -> Any:
    if isinstance(value, str):
        return renames.get(value, value)
    if isinstance(value, dict):
        return {k: _substitute(v, renames) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, renames) for v in value]
    return value


def planned_inputs(base: dict[str, Any] | None, head: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{urn: the inputs Pulumi would diff for each resource of `head`}: an input under the resource's
    `ignore_changes` keeps its value from `base` (the state), and a role that is not replaced keeps its old ARN
    wherever the head plan uses it (Pulumi docs, "ignoreChanges": the old value is used "when determining whether
    an update or replace is needed")."""
    old, new = _by_urn(base), _by_urn(head)
    out: dict[str, dict[str, Any]] = {}
    for urn, r in new.items():
        inputs = dict(r["inputs"])
        if urn in old:
            for key in r.get("ignore_changes") or []:
                if key in old[urn]["inputs"]:
                    inputs[key] = old[urn]["inputs"][key]
                else:
                    inputs.pop(key, None)
        out[urn] = inputs
    # A role that is not replaced keeps its ARN: every head reference to it takes the string the base used for the
    # same role (same URN), whatever either side's offline runner rendered.
    kept = {
        urn
        for urn, r in new.items()
        if r["type"] == IAM_ROLE
        and urn in old
        and not any(_changed(old[urn]["inputs"], out[urn], k) for k in ROLE_REPLACE_FORCING)
    }
    base_arn: dict[str, str] = {}
    for arn, urn in sorted(_role_references(old).items()):
        base_arn.setdefault(urn, arn)
    renames = {arn: base_arn[urn] for arn, urn in _role_references(new).items() if urn in kept and urn in base_arn}
    return {urn: _substitute(inputs, renames) for urn, inputs in out.items()}


def _version_step(old: Any, new: Any) -> str | None:
    """Why EKS refuses a control-plane version change, or None: it updates one minor version at a time, upward."""
    try:
        a, b = (tuple(int(x) for x in str(v).split(".")[:2]) for v in (old, new))
    except ValueError:
        return None
    if a == b or (a[0] == b[0] and b[1] == a[1] + 1):
        return None
    if b < a:
        return f"Kubernetes {old} -> {new}: EKS never downgrades a cluster"
    return (
        f"Kubernetes {old} -> {new}: EKS updates a cluster one minor version at a time (apply {a[0]}.{a[1] + 1} first)"
    )


@dataclass(frozen=True)
class Blocker:
    """A change a reviewer must not merge by accident: the cluster, a floor, an elastic group that may have nodes up
    or a reservation is replaced or deleted, or the control plane takes a step EKS refuses."""

    what: str  # "EKS cluster" | "floor" | "elastic group" | "capacity reservation"
    name: str
    action: str  # "replaces" | "deletes" | "rolls" | "upgrades"
    reasons: tuple[str, ...]
    # True where CI's deploy role cannot carry the change out at all (docs/gitops.md): no override lets it through;
    # an administrator applies it.
    needs_administrator: bool = False

    def sentence(self) -> str:
        why = f" ({', '.join(self.reasons)})" if self.reasons else ""
        return f"{self.action} the {self.what} `{self.name}`{why}"


ELASTIC_NODES_UP = (
    "running nodes are evicted: the offline preview cannot see the group's live size, so it counts "
    'nodes as up (docs/capacity.md, "Node group names")'
)
ROLE_WITHOUT_PATH = (
    "delete first with the node role `{arn}`, which predates role paths: CI's deploy role may delete "
    "the group but not pass that role to CreateNodegroup, so a CI deploy would delete the floor and "
    "fail to create it; apply with an administrator's credentials (docs/gitops.md)"
)
DELETE_FIRST = "delete first:"


def control_plane_version(doc: dict[str, Any] | None) -> str | None:
    """The Kubernetes version of the stack's own EKS cluster, or None (an existing cluster, no document)."""
    for r in (doc or {}).get("resources", []):
        if r["type"] == CLUSTER and r["inputs"].get("version"):
            return str(r["inputs"]["version"])
    return None


def group_version(inputs: dict[str, Any], control_plane: str | None) -> str | None:
    """A group's Kubernetes version. A group an earlier release declared without `version` was created at the
    control plane's version (EKS's default) and, in that release, could not be moved past it: it counts as the
    control plane's. EKS itself refuses a control-plane step over a lagging group, before changing anything."""
    return str(inputs["version"]) if inputs.get("version") else control_plane


def _minor(version: str | None) -> tuple[int, int] | None:
    try:
        major, minor = str(version).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _lagging_groups(doc: dict[str, Any], control_plane: str | None) -> list[str]:
    """The node groups of `doc` whose version is not the control plane's: EKS refuses the next control-plane
    update until each matches ("Nodegroups ... must be updated to match cluster version")."""
    out = []
    for r in doc.get("resources", []):
        if r["type"] == NODE_GROUP:
            version = group_version(r["inputs"], control_plane)
            if control_plane and version != control_plane:
                out.append(f"`{group_label(r['inputs'])}` is on {version}")
    return sorted(out)


def _node_role_without_path(base: dict[str, Any], role_arn: Any) -> str | None:
    """The ARN of the base's role `role_arn` names when that role has no IAM path (created before role paths)."""
    if not isinstance(role_arn, str):
        return None
    old = _by_urn(base)
    urn = _role_references(old).get(role_arn)
    if urn is None:
        return None
    return role_arn if (old[urn]["inputs"].get("path") or "/") == "/" else None


def blockers(base: dict[str, Any] | None, head: dict[str, Any] | None) -> list[Blocker]:
    """Every replacement or deletion of the EKS cluster, a floor, an elastic group or a capacity reservation that
    `head` makes to `base`, with the inputs that force it, and every control-plane step EKS refuses."""
    if not base or not head:
        return []
    old, new = _by_urn(base), _by_urn(head)
    planned = planned_inputs(base, head)
    out: list[Blocker] = []
    for urn, before in old.items():
        kind = before["type"]
        if kind == CLUSTER:
            name = str(before["inputs"].get("name") or before["name"])
            what, forcing = "EKS cluster", CLUSTER_REPLACE_FORCING
        elif kind == CAPACITY_RESERVATION:
            what, forcing, name = "capacity reservation", CAPACITY_RESERVATION_REPLACE_FORCING, before["name"]
        else:
            continue
        if urn not in new:
            out.append(Blocker(what, name, "deletes", ()))
            continue
        keys = tuple(k for k in forcing if _changed(before["inputs"], planned[urn], k))
        if keys:
            out.append(Blocker(what, name, "replaces", keys))
        if kind == CLUSTER:  # always: a replacement elsewhere must not hide a step EKS refuses
            out += _version_blockers(name, base, head, before["inputs"].get("version"), planned[urn].get("version"))
    for change in group_changes(base, head):
        if change.is_floor and (change.action in ("replaces", "deletes") or CAPACITY_BLOCK_STAGED in change.reasons):
            admin = any(r.startswith("delete first with the node role") for r in change.reasons)
            out.append(Blocker("floor", change.group, change.action, change.reasons, needs_administrator=admin))
        elif change.tier == "elastic" and change.action in ("replaces", "deletes"):
            out.append(Blocker("elastic group", change.group, change.action, change.reasons + (ELASTIC_NODES_UP,)))
    order = {"EKS cluster": 0, "floor": 1, "elastic group": 2, "capacity reservation": 3}
    return sorted(out, key=lambda b: (order[b.what], b.name))


def _version_blockers(name: str, base: dict[str, Any], head: dict[str, Any], old: Any, new: Any) -> list[Blocker]:
    """EKS's rules for a control-plane update (docs/aws-rules.md): one minor at a time, upward; only when every
    managed node group matches the control plane; and every group moves with it, so the next step is possible."""
    if not old or not new or old == new:
        return []
    out = []
    step = _version_step(old, new)
    if step:
        out.append(Blocker("EKS cluster", name, "upgrades", (step,)))
    lagging = _lagging_groups(base, str(old))
    if lagging:
        out.append(
            Blocker(
                "EKS cluster",
                name,
                "upgrades",
                (
                    f"Kubernetes {old} -> {new} while node groups lag the control plane ({', '.join(lagging)}): EKS "
                    f"updates the control plane only when every managed node group is on {old}",
                ),
            )
        )
    behind = _lagging_groups(head, str(new))
    if behind:
        out.append(
            Blocker(
                "EKS cluster",
                name,
                "upgrades",
                (
                    f"Kubernetes {old} -> {new} leaves node groups behind ({', '.join(behind)}): EKS will refuse the "
                    "next control-plane update",
                ),
            )
        )
    return out


def upgrade_steps(base: dict[str, Any] | None, head: dict[str, Any] | None) -> list[str]:
    """What a Kubernetes version change does, in the order the program applies it (its dependencies: the node
    groups' clusterName comes from the cluster, the system group depends on the pre-node add-ons, every GPU group
    on the system group): the control plane, then the add-ons, then the node groups. Empty when the version stays."""
    if not base or not head:
        return []
    old, new = control_plane_version(base), control_plane_version(head)
    if not old or not new or old == new:
        return []
    steps = [f"1. control plane: Kubernetes {old} -> {new} (UpdateClusterVersion)"]
    before = _by_urn(base)
    addons = []
    for urn, r in sorted(_by_urn(head).items()):
        if r["type"] == ADDON and urn in before:
            a, b = before[urn]["inputs"].get("addonVersion"), r["inputs"].get("addonVersion")
            if a != b:
                addons.append(f"{r['inputs'].get('addonName')} {a} -> {b}")
    steps.append("2. add-ons: " + ("; ".join(addons) if addons else "no version change"))
    rolled = [
        c.group for c in group_changes(base, head) if c.action == "rolls" and any(r == "version" for r in c.reasons)
    ]
    steps.append(
        f"3. node groups to {new} (UpdateNodegroupVersion, one node at a time where MINIMAL): "
        + (", ".join(f"`{g}`" for g in rolled) or "none")
    )
    return steps


def group_changes(base: dict[str, Any] | None, head: dict[str, Any] | None) -> list[GroupChange]:
    """Every node group of `base` that `head` replaces, rolls or deletes (floors first)."""
    old, new = _by_urn(base), _by_urn(head)
    planned = planned_inputs(base, head)
    cp_before = control_plane_version(base)
    templates_old = {_template_id(r): r for r in old.values() if r["type"] == LAUNCH_TEMPLATE}
    templates_new = {_template_id(r): r for r in new.values() if r["type"] == LAUNCH_TEMPLATE}
    # Reservations whose replacement gives the floor a new reservation id (its template targets it).
    replaced_reservations = [
        (r, [k for k in CAPACITY_RESERVATION_REPLACE_FORCING if _changed(r["inputs"], planned[u], k)])
        for u, r in old.items()
        if r["type"] == CAPACITY_RESERVATION and u in new
    ]
    replaced_reservations = [(r, keys) for r, keys in replaced_reservations if keys]

    out: list[GroupChange] = []
    for urn, before in old.items():
        if before["type"] != NODE_GROUP:
            continue
        a = before["inputs"]
        lt_id = _get(a, "launchTemplate.id")
        tmpl_a = templates_old.get(lt_id)
        if urn not in new:
            out.append(GroupChange("deletes", group_label(a), _tier(a), _size(a, tmpl_a), ()))
            continue
        b = planned[urn]
        if not a.get("version"):
            # Declared without `version` by an earlier release: on the version it was created at (group_version);
            # with an existing cluster (no control plane in the plan), assumed on the one it is given now.
            a = {**a, "version": group_version(a, cp_before) or b.get("version")}
        tmpl_b = templates_new.get(_get(b, "launchTemplate.id"))
        replace = [k for k in NODE_GROUP_REPLACE_FORCING if _changed(a, b, k)]
        roll = [k for k in NODE_GROUP_ROLLING if _changed(a, b, k)]
        if tmpl_a is not None and tmpl_b is not None:
            ta, tb = tmpl_a["inputs"], tmpl_b["inputs"]
            replace += [f"launch template {k}" for k in LAUNCH_TEMPLATE_REPLACE_FORCING if _changed(ta, tb, k)]
            versioned = sorted(
                k for k in set(ta) | set(tb) if k not in LAUNCH_TEMPLATE_NO_NEW_VERSION and ta.get(k) != tb.get(k)
            )
            if versioned:
                roll.append(f"new launch template version ({', '.join(versioned)})")
        new_reservation = False
        if _tier(a) == "guaranteed":
            for reservation, keys in replaced_reservations:
                if reservation["parent"] == before["parent"]:
                    roll.append(f"new capacity reservation ({', '.join(keys)})")
                    new_reservation = True
        held = _reservation_target(tmpl_a)
        if (
            replace
            and _tier(a) == "guaranteed"
            and held
            and not new_reservation
            and held == _reservation_target(tmpl_b)
        ):
            # The new group would target a reservation whose whole capacity the old group holds: its launches
            # fail, so the floor group is replaced delete-first (stacks/capacity/guaranteed.py), with an outage.
            nodes = (a.get("scalingConfig") or {}).get("desiredSize", "?")
            replace.append(
                f"delete first: the reservation {held} stays and the old group holds all of it, so "
                f"{nodes} floor node(s) are down until the new group is up (docs/floor.md)"
            )
        if replace and _tier(a) == "guaranteed" and (_reservation_target(tmpl_b) or held):
            # A floor on a reservation is replaced delete-first (stacks/capacity/guaranteed.py). With a node role
            # from before role paths, CI's deploy role could delete the group but not create the new one.
            pathless = _node_role_without_path(base or {}, a.get("nodeRoleArn"))
            if pathless and b.get("nodeRoleArn") == a.get("nodeRoleArn"):
                replace.append(ROLE_WITHOUT_PATH.format(arn=pathless))
        if roll and not replace and a.get("capacityType") == "CAPACITY_BLOCK" and _desired(a) and _desired(b):
            # EKS upgrades a Capacity Block group only at desired 0: the roll must be staged.
            roll.append(CAPACITY_BLOCK_STAGED)
        if replace:
            out.append(GroupChange("replaces", group_label(b), _tier(b), _size(b, tmpl_b), tuple(replace + roll)))
        elif roll:
            out.append(GroupChange("rolls", group_label(b), _tier(b), _size(b, tmpl_b), tuple(roll)))
    order = {"guaranteed": 0, "elastic": 1}
    return sorted(out, key=lambda c: (order.get(c.tier, 2), c.action != "replaces", c.group))
