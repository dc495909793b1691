"""Tiers and teams inside the cluster, as data (no Pulumi): the PriorityClasses' names and values, each team's GPU
quota and tier ceiling, container default requests, the policy function's Kubernetes RBAC rules.
stacks/kubernetes/tenancy.py creates the objects; stacks/kubernetes/kueue.py gives Kueue's WorkloadPriorityClasses
the same names and values; the simulator (sim/environment.py) orders its pods by the same values.

Preemption policy (docs/kubernetes.md): only `production` preempts. Preemption kills running work, and only
production work (what the guaranteed floor exists for) justifies killing someone's job. `experiment` and
`learning` pods never preempt: they wait, ordered by priority in the scheduler queue, while the policy function
adds elastic nodes for pending GPU pods. Pods without a class get priority 0 and are the first victims.
"""

from __future__ import annotations

from typing import Any

from config import scheduling, versions
from config.instance_types import InstanceFacts, known_type
from config.node_sizes import node_sizes
from config.config import GpuLoanConfig, Pool, Tier, policy_keeps_block

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuloan"}

# Values stay far below 1e9 (reserved for system-cluster-critical / system-node-critical) and far apart so a
# team can slot its own classes in between without renumbering these.
PRIORITY_VALUES: dict[Tier, int] = {Tier.production: 1_000_000, Tier.experiment: 100_000, Tier.learning: 10_000}
PREEMPTION_POLICIES: dict[Tier, str] = {
    Tier.production: "PreemptLowerPriority",
    Tier.experiment: "Never",
    Tier.learning: "Never",
}
TIER_RANK = {tier: rank for rank, tier in enumerate(sorted(PRIORITY_VALUES, key=lambda tier: PRIORITY_VALUES[tier]))}

# Defaults for containers that set no requests: the scheduler then packs by something real instead of zero.
# No default limits: a default memory limit would OOM-kill a training job that simply forgot to set one.
CONTAINER_DEFAULT_REQUESTS = {"cpu": "500m", "memory": "1Gi"}

POLICY_READER_CLUSTER_ROLE = "gpuloan-policy-pod-reader"
# Exactly what policy/io/kube.py calls (tests/stacks/test_kubernetes_layer.py derives it from the client's requests): list
# pods (pending GPU pods; the pods bound to a node before it is terminated), get and patch nodes (cordon it
# first: spec.unschedulable). No watch, no pod get, no delete or eviction: the node goes through Auto Scaling.
# The name stays "pod-reader" so existing clusters keep the same object; it now also cordons nodes.
POLICY_RBAC_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
]


# A Capacity Block floor's drain marks the GPU pods on the block's nodes with the time to checkpoint by
# (policy/io/kube.py mark_checkpoint: a merge patch of one annotation). Granted only where a pool has such a floor.
CAPACITY_BLOCK_RBAC_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}


def loan_rbac_rule(cfg: GpuLoanConfig) -> dict:
    """`get` of the environment's own ClusterQueues, by name: each tick reads their status for the loan's usage
    (policy/loan_usage.py). Not `list`: RBAC cannot narrow a list by name, and other environments' queues may
    share the cluster."""
    return {
        "apiGroups": [versions.KUEUE_API_VERSION.split("/")[0]],
        "resources": ["clusterqueues"],
        "verbs": ["get"],
        "resourceNames": sorted(scheduling.cluster_queue_name(cfg, p) for p in cfg.pools),
    }


def policy_rbac_rules(cfg: GpuLoanConfig) -> list[dict]:
    """The policy's ClusterRole rules for this config: POLICY_RBAC_RULES; with Kueue, `get` of the environment's
    ClusterQueues (loan_rbac_rule); where the policy keeps a Capacity Block's window (policy/capacity_blocks.py):
    pods `patch`, and with Kueue `get`/`patch` of exactly those pools' ClusterQueues (by name: their floor flavor's
    quota follows the window); with lend_ahead, `get`/`patch` of the lending floors' queues too (by name: their
    floor flavor's lendingLimit, policy/decide/lend_ahead.py)."""
    blocks = [p for p in cfg.pools if policy_keeps_block(cfg, p.guaranteed)]
    # Lend-ahead floors (scheduling.kueue.lend_ahead): the policy patches their lendingLimit, in the same queues.
    lenders = [p for p in cfg.pools if scheduling.lends_ahead(cfg, p)]
    rules = list(POLICY_RBAC_RULES)
    if cfg.scheduling.kueue.enabled:
        rules.append(loan_rbac_rule(cfg))
    if not blocks and not lenders:
        return rules
    if blocks:
        rules.append(CAPACITY_BLOCK_RBAC_RULE)
    if cfg.scheduling.kueue.enabled:
        rules.append(
            {
                "apiGroups": [versions.KUEUE_API_VERSION.split("/")[0]],
                "resources": ["clusterqueues"],
                "verbs": ["get", "patch"],
                "resourceNames": sorted({scheduling.floor_queue_name(cfg, p) for p in blocks + lenders}),
            }
        )
    return rules


def priority_class_name(tier: Tier | str) -> str:
    # Prefixed: an existing cluster may already have a class called "production".
    return f"gpuloan-{Tier(tier).value}"


def pool_gpus(pool: Pool, facts: InstanceFacts | None = None) -> int:
    """Guaranteed nodes + elastic max nodes, times GPUs per node; every node size's elastic groups together
    (config/node_sizes.py: each size's groups have max_nodes)."""
    gpus = 0
    if pool.guaranteed is not None:
        gpus += pool.guaranteed.nodes * known_type(pool.guaranteed.instance_type, facts).gpus
    if pool.elastic is not None:
        gpus += sum(
            pool.elastic.max_nodes * size.gpus_per_node for size in node_sizes(pool.elastic.instance_types, facts=facts)
        )
    return gpus


def team_gpu_quota(cfg: GpuLoanConfig, team: str) -> int:
    """`requests.nvidia.com/gpu` for a team: its pools' GPUs, in device-plugin units.

    With time-slicing every physical GPU is advertised as `replicas` nvidia.com/gpu, so the quota scales with it.
    With Kueue on, Kueue's queues are the admission control and this quota only bounds pods that bypass them: it is
    what Kueue can admit for the team at once, borrowed floors included, so it never refuses an admitted job's pods.
    """
    if cfg.scheduling.kueue.enabled:
        return scheduling.team_gpu_ceiling(cfg, team)
    physical = sum(pool_gpus(p, cfg.instance_facts) for p in cfg.pools if p.team == team)
    return physical * (cfg.gpu_operator.time_slicing_replicas or 1)


def team_max_tier(cfg: GpuLoanConfig, team: str) -> Tier:
    return max((p.tier for p in cfg.pools if p.team == team), key=lambda tier: TIER_RANK[tier])


def forbidden_priority_classes(cfg: GpuLoanConfig, team: str) -> list[str]:
    """Classes above the team's highest pool tier: a learning-only team cannot preempt production work."""
    top = TIER_RANK[team_max_tier(cfg, team)]
    return [priority_class_name(t) for t, rank in sorted(TIER_RANK.items(), key=lambda kv: kv[1]) if rank > top]


def priority_class_spec(tier: Tier) -> dict[str, Any]:
    return {
        "value": PRIORITY_VALUES[tier],
        "preemption_policy": PREEMPTION_POLICIES[tier],
        "global_default": False,
        "description": f"gpuloan {tier.value} tier ({'may preempt lower tiers' if PREEMPTION_POLICIES[tier] != 'Never' else 'never preempts; waits for capacity'})",
    }
