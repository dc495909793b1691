"""Kueue from the one config: the Helm release, and the flavors, queues and cohort of config/scheduling.py.

Kueue holds a Job suspended until its queue has quota for it, so a Job that is not admitted creates no pods and
the policy function (which counts unschedulable GPU pods) never buys nodes for it; Deployment/StatefulSet pods
wait behind a scheduling gate, which the policy ignores too (policy/pods.py `unschedulable`). What the policy sees
pending is admitted work, and admitted work never exceeds what the groups can reach (docs/scheduling.md).

Manifests are pure functions (tests validate them against the CRD schemas); the component declares each one
after the release, whose chart installs the CRDs and the admission webhooks that must be up before any object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from config import scheduling, tags, tenancy, versions
from stacks.capacity import system_nodes
from config.config import GpuLoanConfig, NewCluster, Tier, policy_keeps_block
from config.names import KUEUE_NAMESPACE

NAMESPACE = KUEUE_NAMESPACE
RELEASE_NAME = "kueue"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MANAGED_BY = tenancy.MANAGED_BY

# Kueue refuses a workload that requests a resource its ClusterQueue does not cover ("resource cpu unavailable in
# ClusterQueue"). The loan is counted in GPUs only: a GPU node's CPU, memory and EFA interfaces come with its GPUs,
# and the catalog has no per-type CPU/memory to derive quotas from. So everything else is left out of admission.
EXCLUDED_RESOURCE_PREFIXES = ["cpu", "memory", "ephemeral-storage", "hugepages-", "vpc.amazonaws.com/"]
# Job kinds Kueue manages when they carry a queue-name label. `pod` is what `deployment`/`statefulset` build on.
INTEGRATIONS = [
    "batch/job",
    "jobset.x-k8s.io/jobset",
    "kubeflow.org/mpijob",
    "kubeflow.org/pytorchjob",
    "trainer.kubeflow.org/trainjob",
    "ray.io/rayjob",
    "ray.io/raycluster",
    "pod",
    "deployment",
    "statefulset",
    "leaderworkerset.x-k8s.io/leaderworkerset",
]


def chart_version(cfg: GpuLoanConfig) -> str:
    return cfg.scheduling.kueue.chart_version or versions.KUEUE_CHART_VERSION


def manager_config(fair_sharing: bool = False, strategies: Sequence[str] = ()) -> dict[str, Any]:
    """The controller's Configuration. Setting it replaces the chart's default file, so the chart defaults (ports
    the chart's Services and probes point at, leader election) are repeated here; compare with the chart's
    values.yaml `managerConfig.controllerManagerConfigYaml` when bumping KUEUE_CHART_VERSION.

    `fair_sharing` (config/scheduling.py fair_sharing_on): the config API v1beta2 has no `enable` field, the
    presence of `fairSharing` turns it on (v0.19.2 cmd/kueue/main.go: `if cfg.FairSharing != nil`).
    `strategies`: scheduling.kueue.fair_sharing_preemption_strategies, always written out (v0.19.2 requires the
    list when `fairSharing` is present: pkg/config/validation.go:413-414)."""
    config: dict[str, Any] = {
        "apiVersion": versions.KUEUE_CONFIG_API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 50, "burst": 100},
        # Only jobs that name a queue are managed, and only in team namespaces: system pods are never gated.
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": tags.LABEL_TEAM, "operator": "Exists"}]},
        "integrations": {"frameworks": INTEGRATIONS},
        "resources": {"excludeResourcePrefixes": EXCLUDED_RESOURCE_PREFIXES},
    }
    if fair_sharing:
        config["fairSharing"] = {"preemptionStrategies": [str(s) for s in strategies]}
    return config


def helm_values(cfg: GpuLoanConfig) -> dict[str, Any]:
    values: dict[str, Any] = {
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(
                manager_config(
                    scheduling.fair_sharing_on(cfg), cfg.scheduling.kueue.fair_sharing_preemption_strategies
                ),
                sort_keys=False,
            )
        },
    }
    if isinstance(cfg.cluster, NewCluster):
        # The system node group is untainted, so a selector is all it takes; GPU nodes are tainted and would
        # refuse the controller anyway. An existing cluster has no gpuloan system nodes to select.
        values["controllerManager"] = {"nodeSelector": {tags.LABEL_TIER: system_nodes.SYSTEM_TIER_LABEL}}
    return values


def _meta(name: str, namespace: str | None = None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **(extra or {})}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def resource_flavor_manifest(flavor: scheduling.Flavor) -> dict[str, Any]:
    return {
        "apiVersion": versions.KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(flavor.name, extra={tags.LABEL_POOL: flavor.pool}),
        # Kueue adds these to admitted pods: the node selector pins them to the group, the tolerations let them in.
        "spec": {"nodeLabels": dict(flavor.node_labels), "tolerations": [dict(t) for t in flavor.tolerations]},
    }


def cohort_manifest(cfg: GpuLoanConfig) -> dict[str, Any]:
    return {
        "apiVersion": versions.KUEUE_API_VERSION,
        "kind": "Cohort",
        "metadata": _meta(scheduling.cohort_name(cfg)),
        "spec": {},
    }


def cluster_queue_manifest(cfg: GpuLoanConfig, queue: scheduling.PoolQueue) -> dict[str, Any]:
    flavors = []
    for entry in queue.flavors:
        quota: dict[str, Any] = {"name": scheduling.GPU_RESOURCE, "nominalQuota": entry.nominal_gpus}
        if entry.lending_limit_gpus is not None:
            quota["lendingLimit"] = entry.lending_limit_gpus
        if entry.borrowing_limit_gpus is not None:
            quota["borrowingLimit"] = entry.borrowing_limit_gpus
        flavors.append({"name": entry.flavor, "resources": [quota]})
    manifest: dict[str, Any] = {
        "apiVersion": versions.KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _meta(queue.name, extra={tags.LABEL_POOL: queue.pool, tags.LABEL_TEAM: queue.team}),
        "spec": {
            "cohortName": scheduling.cohort_name(cfg),
            # Only the owning team's namespace may submit here (its LocalQueue is the only one pointing at it).
            "namespaceSelector": {"matchLabels": {tags.LABEL_TEAM: queue.team}},
            "queueingStrategy": "BestEffortFIFO",
            # Stop at the first flavor that fits even if it needs borrowing or preemption: the owner's work takes
            # its lent floor back (reclaim) instead of moving on to elastic nodes it would pay for. Not
            # TryNextFlavor, even for borrowing: the setting is per queue, and Kueue v0.19.2 gives an owner's
            # reclaim and a borrower's fair-sharing preemption the same mode (preemption_oracle.go:75-80,
            # flavorassigner.go:622-624, :1267), so it would send the owner past its own lent floor too.
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "Never"},
                "withinClusterQueue": "LowerPriority" if queue.preempt_lower_priority else "Never",
            },
            "resourceGroups": [{"coveredResources": [scheduling.GPU_RESOURCE], "flavors": flavors}],
        },
    }
    if scheduling.fair_sharing_on(cfg):
        # a Quantity (int-or-string in the CRD): a whole weight as a number, any other as its decimal string
        w = queue.fair_share_weight
        manifest["spec"]["fairSharing"] = {"weight": int(w) if w == int(w) else f"{w:g}"}
    return manifest


def local_queue_manifest(queue: scheduling.PoolQueue) -> dict[str, Any]:
    return {
        "apiVersion": versions.KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": _meta(queue.local_queue, namespace=queue.team, extra={tags.LABEL_POOL: queue.pool}),
        "spec": {"clusterQueue": queue.name},
    }


def workload_priority_class_manifest(tier: Tier) -> dict[str, Any]:
    # Same names and values as the PriorityClasses (config/tenancy.py), so a Job's queue order and its pods'
    # scheduling priority agree whichever of the two labels a user sets.
    return {
        "apiVersion": versions.KUEUE_API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": _meta(tenancy.priority_class_name(tier)),
        "value": tenancy.PRIORITY_VALUES[tier],
        "description": f"gpuloan {tier.value} tier (Kueue admission order; same value as the PriorityClass)",
    }


def manifests(cfg: GpuLoanConfig) -> list[dict[str, Any]]:
    """Every Kueue object of the environment, in creation order."""
    p = scheduling.plan(cfg)
    return (
        [workload_priority_class_manifest(t) for t in Tier]
        + [cohort_manifest(cfg)]
        + [resource_flavor_manifest(f) for f in p.flavors]
        + [cluster_queue_manifest(cfg, q) for q in p.queues]
        + [local_queue_manifest(q) for q in p.queues]
    )


def block_quota_ignored(cfg: GpuLoanConfig, pool, queue: scheduling.PoolQueue) -> list[str]:
    """The ClusterQueue path the policy function owns for a pool whose Capacity Block window it keeps: its floor
    flavor's nominalQuota (policy/capacity_blocks.py raises it at the block's start and sets 0 from the drain), so
    a later `pulumi up` does not put back the value of the moment it ran. The floor is the first flavor of the queue
    that holds its quota (config/scheduling.py:floor_queue_name). [] for any other queue."""
    if (
        not policy_keeps_block(cfg, pool.guaranteed)
        or not queue.flavors
        or queue.name != scheduling.floor_queue_name(cfg, pool)
    ):
        return []
    assert queue.flavors[0].flavor == scheduling.flavor_name(cfg, pool, scheduling.FLOOR)
    return ["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]


class KueueObject(pulumi.CustomResource):
    """Any Kueue custom resource, declared with exactly its manifest (the kubernetes provider's generic
    `kubernetes:<apiVersion>:<kind>` type; WorkloadPriorityClass has top-level fields that
    apiextensions.CustomResource cannot carry)."""

    def __init__(self, name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions):
        super().__init__(f"kubernetes:{manifest['apiVersion']}:{manifest['kind']}", name, dict(manifest), opts)


@dataclass(frozen=True)
class KueueArgs:
    cfg: GpuLoanConfig
    # team -> its namespace (the Tenancy component's): a team's LocalQueues wait for their namespace.
    team_namespaces: Mapping[str, pulumi.Resource]

    @staticmethod
    def from_config(cfg: GpuLoanConfig, team_namespaces: Mapping[str, pulumi.Resource]) -> KueueArgs:
        return KueueArgs(cfg, team_namespaces)


class Kueue(pulumi.ComponentResource):
    """Namespace, the kueue Helm release, and the queue objects of config/scheduling.py's plan."""

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:kueue:Kueue", name, None, opts)
        cfg, team_namespaces = args.cfg, args.team_namespaces
        self.chart_version = chart_version(cfg)
        self.values = helm_values(cfg)
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata={
                "name": NAMESPACE,
                "labels": {
                    **MANAGED_BY,
                    "pod-security.kubernetes.io/enforce": "baseline",
                    "pod-security.kubernetes.io/warn": "restricted",
                },
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE_NAME,
            chart=versions.KUEUE_CHART,
            version=self.chart_version,
            namespace=NAMESPACE,
            create_namespace=False,
            values=self.values,
            # Queues created against a half-installed Kueue (CRDs without a ready webhook) fail: roll back instead.
            atomic=True,
            cleanup_on_fail=True,
            timeout=600,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
        )
        after_release = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        p = scheduling.plan(cfg)
        for tier in Tier:
            KueueObject(f"{name}-priority-{tier.value}", workload_priority_class_manifest(tier), after_release)
        cohort = KueueObject(f"{name}-cohort", cohort_manifest(cfg), after_release)
        flavors = [
            KueueObject(f"{name}-flavor-{f.pool}-{f.kind}", resource_flavor_manifest(f), after_release)
            for f in p.flavors
        ]
        self.cluster_queues: dict[str, KueueObject] = {}
        self.local_queues: dict[str, str] = {}
        pools = {pool.name: pool for pool in cfg.pools}
        for q in p.queues:
            # a pool's production queue (config/scheduling.py production_queue) is a resource of its own: the
            # pool's queue keeps its name, so its URN does not change
            suffix = scheduling.PRODUCTION_QUEUE_SUFFIX if q.production_only else ""
            cq = KueueObject(
                f"{name}-cq-{q.pool}{suffix}",
                cluster_queue_manifest(cfg, q),
                pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[self.release, cohort, *flavors],
                    ignore_changes=block_quota_ignored(cfg, pools[q.pool], q),
                ),
            )
            self.cluster_queues[f"{q.pool}{suffix}"] = cq
            waits = [self.release, cq] + ([team_namespaces[q.team]] if q.team in team_namespaces else [])
            KueueObject(
                f"{name}-lq-{q.pool}{suffix}",
                local_queue_manifest(q),
                pulumi.ResourceOptions(parent=self, depends_on=waits),
            )
            self.local_queues[f"{q.pool}{suffix}"] = f"{q.team}/{q.local_queue}"
        self.register_outputs({"chart_version": self.chart_version, "local_queues": self.local_queues})
