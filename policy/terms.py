"""The policy's terms, one definition each (issue 34): what a pool runs, its tier, what its budget does, the
capacity a node group buys and why the engine acted. The config validates a pool's `tier`, `workload` and
`budget.enforcement` against these (config/config_terms.py re-exports those three), and the Lambda receives them
in its settings as plain strings: a StrEnum member equals its string, and `str()`, f-strings and `json.dumps`
write just that string, so settings JSON, log lines and metric dimensions read exactly as the strings did.
Standard library only, like all of policy/.
"""

from __future__ import annotations

from enum import StrEnum


# What the pool runs: jobs that queue (pending pods are the whole scale-up signal) or traffic that does not queue
# (sustained utilization adds a node too).
class Workload(StrEnum):
    batch = "batch"
    service = "service"


# What the budget does when spend reaches it: only alert, or cap the elastic capacity too.
class Enforcement(StrEnum):
    alert_only = "alert_only"
    cap_elastic = "cap_elastic"


# A pool's priority (config `pools[].tier`): production > experiment > learning (config/tenancy.py ranks them).
class Tier(StrEnum):
    production = "production"
    experiment = "experiment"
    learning = "learning"


# What a node group of a pool buys (PoolSettings.capacity_of): the `Capacity` dimension of the ElasticNodes metric.
# Not the Kubernetes label value of the same name: the nodes are labelled "on-demand" (config/names.py,
# policy/pods.py), and not the config's `elastic.capacity`, which says which elastic groups a pool has
# (config/config_terms.py ElasticCapacity).
class Capacity(StrEnum):
    spot = "spot"
    on_demand = "on_demand"
    guaranteed = "guaranteed"


class Reason(StrEnum):
    """Why the engine did (or did not do) something: the `Reason` dimension of its metrics, the `reason` of its log
    lines and notifications (written as `.value`, the same string)."""

    SCALE_UP_PENDING = "SCALE_UP_PENDING"  # pending pods that target the pool need more nodes
    SCALE_UP_UTILIZATION = "SCALE_UP_UTILIZATION"  # sustained high average GPU utilization
    RECLAIM_IDLE = "RECLAIM_IDLE"  # a node stayed idle for the idle timeout: terminate it by instance id
    BUDGET_CAP = "BUDGET_CAP"  # a wanted scale-up was cut or refused because of the budget
    BUDGET_UNKNOWN = "BUDGET_UNKNOWN"  # a wanted scale-up was refused: month-to-date spend could not be read (capped)
    BUDGET_DRAIN = "BUDGET_DRAIN"  # actual spend reached the budget: drain elastic capacity (idle first)
    SPOT_FALLBACK = "SPOT_FALLBACK"  # spot stayed short: the on-demand group takes the shortfall
    SPOT_RECOVERED = "SPOT_RECOVERED"  # spot filled again while on-demand nodes run: new demand goes to spot
    COOLDOWN = "COOLDOWN"  # a group changed too recently for a utilization-driven change
    AT_MAX = "AT_MAX"  # demand exceeds the elastic maximum
    UPDATE_IN_PROGRESS = "UPDATE_IN_PROGRESS"  # the node group is being updated: leave it alone this tick
    HOLD_MISSING_DATA = "HOLD_MISSING_DATA"  # data missing or stale: hold, never shrink
    KEEP_WARM = "KEEP_WARM"  # idle nodes kept: the next job is expected sooner than a relaunch would cost
    WARM_UP = "WARM_UP"  # spare nodes launched ahead of the arrivals this time of day usually brings (opt-in)
    GANG_RELEASED = "GANG_RELEASED"  # a gang past gang_wait_minutes that no group can complete: its idle nodes go
    # pending pods that may not run on spot (on-demand asked for, or the spot taint not tolerated): the on-demand
    # group grows for them directly, never spot; without an on-demand group they wait, reported
    ON_DEMAND_ONLY = "ON_DEMAND_ONLY"
    STEADY = "STEADY"  # nothing to do
    # Capacity Block floors (policy/capacity_blocks.py): the window's rules on the block's own node group.
    CAPACITY_BLOCK_WAITING = "CAPACITY_BLOCK_WAITING"  # before the block's start: its group is left at 0
    CAPACITY_BLOCK_START = "CAPACITY_BLOCK_START"  # the block is active (and paid): its group goes to the floor size
    CAPACITY_BLOCK_DRAIN = "CAPACITY_BLOCK_DRAIN"  # ahead of EKS's scale-down: cordon, ask GPU pods to checkpoint
    CAPACITY_BLOCK_END = "CAPACITY_BLOCK_END"  # from EKS's scale-down (40 min before the end): the group goes to 0
    CAPACITY_BLOCK_HELD = "CAPACITY_BLOCK_HELD"  # capacity_block_active: false: the group is left alone (a roll)
    # Lending ahead of the owner (policy/decide/lend_ahead.py): the floor flavor's Kueue lendingLimit.
    LEND_AHEAD = "LEND_AHEAD"  # lowered: the owner's work in use, waiting and forecast keeps that much unlent
    LEND_RESTORED = "LEND_RESTORED"  # raised again toward the configured limit (forecast passed, or unknown)
    LEND_UNKNOWN = "LEND_UNKNOWN"  # the floor's queue could not be read: its lendingLimit is left as it is
