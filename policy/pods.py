"""What the policy reads from the Kubernetes API server's JSON, pure: which pods are demand for elastic nodes, which
pods and nodes forbid a termination, pod groups (gangs), and the labels and taints of the node groups pods are
matched against. policy/io/kube.py reads the objects (pods, nodes) and applies these rules to them; the tests
apply them to objects of their own (tests/stacks/test_kueue.py: what Kueue's admitted pods look like).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping, Sequence

GPU_RESOURCE = "nvidia.com/gpu"
# The labels and taints the stack puts on GPU node groups (config/tags.py, stacks/capacity/elastic.py; the Lambda zip does
# not ship stacks/, tests/policy/test_policy_adapters.py checks the two agree).
POOL_LABEL = "gpuloan.io/pool"
TIER_LABEL = "gpuloan.io/tier"
CAPACITY_LABEL = "gpuloan.io/capacity"
ELASTIC_TIER = "elastic"
CAPACITY_SPOT, CAPACITY_ON_DEMAND = "spot", "on-demand"
SPOT_TAINT_KEY = "gpuloan.io/spot"
# Taints the policy function itself puts on (and takes off) nodes: an on-demand fallback node once spot is back
# (policy/back_to_spot.py), a spot node under EC2's rebalance recommendation (policy/rebalance.py).
BACK_TO_SPOT_TAINT_KEY = "gpuloan.io/back-to-spot"
REBALANCE_TAINT_KEY = "gpuloan.io/rebalance-recommended"
TAINT_VALUE, TAINT_EFFECT = "true", "NoSchedule"
# Pod annotations that forbid terminating the pod's node: gpuloan's own, and Karpenter's, which users already put
# on jobs that must not be interrupted (https://karpenter.sh/docs/concepts/disruption/).
DO_NOT_DISRUPT = ("gpuloan.io/do-not-disrupt", "karpenter.sh/do-not-disrupt")
TERMINAL_PHASES = ("Succeeded", "Failed")
# What puts a pod in a gang (a pod group whose pods start only together), first match wins: the Kubernetes
# Workload API's pod field (GenericWorkload gate): spec.workloadRef {name, podGroup, podGroupReplicaKey} in v1.35,
# the version gpuloan ships, replaced by spec.schedulingGroup.podGroupName in v1.36 (k8s.io/api core/v1 types.go
# at v0.35.0 and v0.36.0); Kueue's plain-pod groups, the scheduler-plugins coscheduling label, Volcano's group
# annotation (docs/aws-rules.md cites each).
GANG_LABELS = ("kueue.x-k8s.io/pod-group-name", "scheduling.x-k8s.io/pod-group")
GANG_ANNOTATIONS = ("scheduling.k8s.io/group-name",)


def pod_gpus(pod: dict) -> int:
    """GPUs a pod asks for: the larger of its app containers' sum and its largest init container (k8s rule)."""
    spec = pod.get("spec") or {}

    def gpus(c: dict) -> int:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0
        try:
            return int(value)
        except (TypeError, ValueError):
            return 0

    app = sum(gpus(c) for c in spec.get("containers") or [])
    init = max((gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(app, init)


def pod_pools(pod: dict) -> set[str]:
    """Pools a pod can only run on: its nodeSelector, or required node affinity `gpuloan.io/pool In [...]`."""
    spec = pod.get("spec") or {}
    selected = (spec.get("nodeSelector") or {}).get(POOL_LABEL)
    if selected:
        return {selected}
    pools: set[str] = set()
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == POOL_LABEL and expr.get("operator") == "In":
                pools.update(expr.get("values") or [])
    return pools


@dataclass(frozen=True)
class NodeShape:
    """What the stack puts on one elastic node group's nodes that a pod's node selection can refuse: gpuloan's
    labels and the group's NoSchedule taints (keys, value "true")."""

    labels: tuple[tuple[str, str], ...]
    taint_keys: tuple[str, ...]


def elastic_shapes(pool: str, spot: bool, on_demand: bool) -> tuple[NodeShape, ...]:
    """The shapes of a pool's elastic groups (stacks/capacity/elastic.py): spot nodes carry the spot taint on top of the GPU
    taint, on-demand ones the GPU taint only. The GPU taint is not checked: EKS runs the ExtendedResourceToleration
    admission controller, which gives every pod that requests nvidia.com/gpu a toleration for it
    (docs/aws-rules.md), and only GPU pods are counted."""

    def shape(capacity: str, taints: tuple[str, ...]) -> NodeShape:
        return NodeShape(((POOL_LABEL, pool), (TIER_LABEL, ELASTIC_TIER), (CAPACITY_LABEL, capacity)), taints)

    out = []
    if spot:
        out.append(shape(CAPACITY_SPOT, (SPOT_TAINT_KEY,)))
    if on_demand:
        out.append(shape(CAPACITY_ON_DEMAND, ()))
    return tuple(out)


def _expression_holds(expr: dict, labels: dict[str, str]) -> bool:
    """One nodeSelectorRequirement against the labels gpuloan knows a node has (Kubernetes' operators). A key gpuloan
    does not set may or may not be on the node (zone, instance type, a user's own label): it is not held against
    the pod, so only a pod that provably cannot run on the group is left out."""
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if not isinstance(key, str) or not key.startswith("gpuloan.io/"):
        return True
    value = labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            number, bound = int(value), int(values[0])  # type: ignore[arg-type]  # None: TypeError, below
        except (TypeError, ValueError, IndexError):
            return False
        return number > bound if op == "Gt" else number < bound
    return False  # an operator the API server would have refused


def _tolerates(tolerations: list, taint_key: str) -> bool:
    """Kubernetes' toleration match for a NoSchedule taint `taint_key=true`."""
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("effect") not in (None, "", TAINT_EFFECT):
            continue
        key, op = t.get("key"), t.get("operator") or "Equal"
        if op == "Exists" and key in (None, "", taint_key):
            return True
        if op == "Equal" and key == taint_key and t.get("value", "") == TAINT_VALUE:
            return True
    return False


def admits(pod: dict, shape: NodeShape) -> bool:
    """Whether the pod's nodeSelector, required node affinity and tolerations let it run on a node of `shape`.
    Kueue pins floor work with `gpuloan.io/tier: guaranteed`: such a pod, pending while a floor node rolls or
    fails, is not demand for elastic nodes it can never run on."""
    spec = pod.get("spec") or {}
    labels = dict(shape.labels)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if key.startswith("gpuloan.io/") and labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(
        all(_expression_holds(e, labels) for e in (term or {}).get("matchExpressions") or [])
        for term in terms
        if isinstance(term, dict)
    ):
        return False
    tolerations = spec.get("tolerations") or []
    return all(_tolerates(tolerations, key) for key in shape.taint_keys)


def on_demand_only(pod: dict, pool: str) -> bool:
    """Whether the pod may run on an on-demand elastic node of `pool` but not on a spot one: its node selection asks
    for `gpuloan.io/capacity: on-demand` (or keeps off `spot`), or it does not tolerate the spot taint. Such a pod
    never lands on the spot nodes the policy adds first (docs/policy.md, "Pods that may not run on spot"). The
    shapes are the stack's, whatever groups the pool has: a spot-only pool's such pods are reported, not bought
    spot for."""
    spot, on_demand = elastic_shapes(pool, True, True)
    return admits(pod, on_demand) and not admits(pod, spot)


def unschedulable(pod: dict) -> bool:
    """The scheduler tried the pod and found no node for it: condition PodScheduled=False, reason Unschedulable
    (what cluster-autoscaler scales for). A pod behind scheduling gates (reason SchedulingGated) waits for a
    controller, not for capacity; one the scheduler has not tried yet usually lands on a free GPU within seconds.
    Neither is demand for a new node: the next tick sees the pod again if it does turn out unschedulable."""
    if (pod.get("spec") or {}).get("schedulingGates"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
    return False


def gang_of(pod: dict) -> str | None:
    """The pod group the pod belongs to, as "namespace/name", or None for a pod that starts on its own."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ref = spec.get("workloadRef") or {}
    # v1.35: the gang is one pod group of one Workload, and each replica key of it is a gang of its own.
    group = (
        "/".join(str(ref[k]) for k in ("name", "podGroup", "podGroupReplicaKey") if ref.get(k))
        if (ref.get("name") and ref.get("podGroup"))
        else None
    )
    group = group or (spec.get("schedulingGroup") or {}).get("podGroupName")
    if not group:
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        group = next((labels[k] for k in GANG_LABELS if labels.get(k)), None) or next(
            (annotations[k] for k in GANG_ANNOTATIONS if annotations.get(k)), None
        )
    if not isinstance(group, str) or not group:
        return None
    return f"{meta.get('namespace', '')}/{group}"


def blocking_reason(pod: dict) -> str | None:
    """Why this pod forbids terminating its node, or None. A terminal pod (Succeeded/Failed) never blocks; any
    other pod blocks when it requests a GPU (running, or bound and still starting) or carries a do-not-disrupt
    annotation set to "true"."""
    meta = pod.get("metadata") or {}
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    annotations = meta.get("annotations") or {}
    for key in DO_NOT_DISRUPT:
        if str(annotations.get(key, "")).lower() == "true":
            return f"{who} has {key}=true"
    gpus = pod_gpus(pod)
    if gpus > 0:
        return f"{who} requests {gpus} GPU(s)"
    return None


def fits_elastic(pod: dict, pool: str, shapes: Mapping[str, Sequence[NodeShape]] | None) -> bool:
    """Whether the pod could run on one of `pool`'s elastic groups (`shapes`); any pod where they are unknown."""
    if shapes is None or pool not in shapes:
        return True
    return any(admits(pod, shape) for shape in shapes[pool])


def creation_time(pod: dict) -> datetime | None:
    """metadata.creationTimestamp (RFC 3339, UTC, e.g. 2026-03-10T11:30:00Z) as an aware datetime; None if absent
    or malformed (such a pod is not counted)."""
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)
