"""The loan in Kueue terms, as data: resource flavors, one cluster queue per pool, the cohort (pure).

stacks/kubernetes/kueue.py turns this plan into Kueue objects; the config rule at the bottom (config/config.py runs it) refuses
configs whose tiers and capacity cannot satisfy each other, before any resource exists. docs/scheduling.md explains the choices:

- A flavor per kind of node group a pool has, matched by the labels the node groups carry (stacks/capacity/guaranteed.py,
  stacks/capacity/elastic.py) and tolerating their taints:
  `floor` = the guaranteed group (tier=guaranteed);
  `spot` = the pool's elastic capacity as the policy provides it (tier=elastic): spot nodes, and the on-demand
  fallback nodes the policy adds while spot is short. The flavor does not pin capacity=spot on purpose: the policy
  adds on-demand nodes *for* pending spot-flavored pods when spot is short, and a capacity=spot selector would leave
  those nodes idle and paid for. A separate fallback flavor would also promise quota the policy never provides: it
  uses on-demand only to replace missing spot, never on top of a full spot group;
  `on-demand` = the elastic group of a pool whose elastic capacity is on-demand only, or the on-demand group of a
  production pool with `spot_then_on_demand` whose work may not use spot (pinned `capacity=on-demand`: the policy
  grows that group directly for pods that may not run on spot, policy/off_spot.py).
- Quotas are what the groups can reach: floor = nodes x GPUs per node (0 while a Capacity Block is not active);
  elastic = max nodes x GPUs per node. GPUs are counted in device-plugin units (x time-slicing replicas).
- Flavor order per tier: production uses its floor, then its elastic capacity, and never spot unless the pool is
  listed in scheduling.kueue.production_spot_pools, and never borrows (borrowingLimit 0); experiment and learning
  use their floor, then idle floors that other pools lend (already paid for, so cheaper than any elastic node;
  reclaimed when the owner needs them), then their own spot/on-demand capacity. A floor is lent only to queues
  whose work runs on its hardware (work_runs_on: GPU model, GPUs per node, memory per GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from config import tags
from config.node_sizes import node_sizes
from config.config_terms import SET_ASIDE, ElasticCapacity, Reservation, Tier, Workload

if TYPE_CHECKING:  # annotations only: config imports this module to run its rule
    from config.config import GpuLoanConfig, Pool, TeamSharing

GPU_RESOURCE = "nvidia.com/gpu"
FLOOR, SPOT, ON_DEMAND = "floor", "spot", "on-demand"
# Kueue limits (ClusterQueue CRD v1beta2): 64 flavors per resource group.
MAX_FLAVORS_PER_GROUP = 64

GPU_TOLERATION = {"key": tags.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": tags.SPOT_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Flavor:
    """A ResourceFlavor: one kind of node group of one pool."""

    name: str
    pool: str
    kind: str  # FLOOR | SPOT | ON_DEMAND
    node_labels: dict[str, str]
    tolerations: tuple[dict[str, str], ...]
    gpus: int  # what the group can reach, in device-plugin units


@dataclass(frozen=True)
class QueueFlavor:
    """One entry of a cluster queue's flavor list (admission order)."""

    flavor: str
    nominal_gpus: int
    lending_limit_gpus: int | None = None  # None: all of the nominal quota may be lent while unused
    borrowing_limit_gpus: int | None = None  # None: no limit beyond what the cohort has unused


@dataclass(frozen=True)
class PoolQueue:
    """A ClusterQueue for one pool, and the LocalQueue its team submits to."""

    pool: str
    team: str
    tier: Tier
    name: str
    local_queue: str
    flavors: tuple[QueueFlavor, ...]
    preempt_lower_priority: bool  # within the queue: production preempts, the others wait (as PriorityClasses)
    fair_share_weight: float = 1.0  # Kueue ClusterQueue spec.fairSharing.weight: the team's (TeamSharing)
    # The production queue of a pool whose tier is not production but part of whose work is (production_queue):
    # only the pool's floor and its elastic capacity production may use, nothing borrowed.
    production_only: bool = False


@dataclass(frozen=True)
class Plan:
    cohort: str
    flavors: tuple[Flavor, ...]
    queues: tuple[PoolQueue, ...]


def cohort_name(cfg: GpuLoanConfig) -> str:
    # Prefixed: ResourceFlavors, ClusterQueues and Cohorts are cluster-scoped and an existing cluster may have its own.
    return f"gpuloan-{cfg.environment}"


def cluster_queue_name(cfg: GpuLoanConfig, pool: Pool) -> str:
    return f"gpuloan-{cfg.environment}-{pool.name}"


def local_queue_name(pool: Pool) -> str:
    """What a user writes in `kueue.x-k8s.io/queue-name`: the pool's name, in the team's namespace."""
    return pool.name


PRODUCTION_QUEUE_SUFFIX = "-production"


def production_queue_name(cfg: GpuLoanConfig, pool: Pool) -> str:
    return f"{cluster_queue_name(cfg, pool)}{PRODUCTION_QUEUE_SUFFIX}"


def production_local_queue_name(pool: Pool) -> str:
    """The LocalQueue a team's production jobs name in `kueue.x-k8s.io/queue-name` (docs/workloads/)."""
    return f"{pool.name}{PRODUCTION_QUEUE_SUFFIX}"


def flavor_name(cfg: GpuLoanConfig, pool: Pool, kind: str) -> str:
    return f"gpuloan-{cfg.environment}-{pool.name}-{kind}"


def _units(cfg: GpuLoanConfig, instance_type: str, nodes: int) -> int:
    return nodes * cfg.gpu_type(instance_type).gpus * (cfg.gpu_operator.time_slicing_replicas or 1)


def elastic_units(cfg: GpuLoanConfig, pool: Pool, max_nodes: int | None = None) -> int:
    """The elastic flavor's quota: the GPUs the pool's elastic groups hold at their max, every node size's group
    together (config/node_sizes.py; one size: max_nodes nodes of it, as before sizes existed). One flavor for all
    sizes, not one per size: Kueue assigns a flavor by quota alone, so a flavor per size would admit an 8-GPU pod
    into the 1-GPU size's quota and pin it (nodeLabels) to nodes it cannot fit (docs/scheduling.md). `max_nodes`:
    the groups' max when it is not the pool's elastic max (the on-demand group's own, for work kept off spot)."""
    e = pool.elastic
    if e is None:
        raise ValueError(f"pool {pool.name} has no elastic capacity")
    nodes = e.max_nodes if max_nodes is None else max_nodes
    return sum(
        _units(cfg, size.instance_types[0], nodes) for size in node_sizes(e.instance_types, facts=cfg.instance_facts)
    )


def gpus_per_node(cfg: GpuLoanConfig, pool: Pool) -> int:
    # A pool has a floor, elastic capacity or both (validation refuses neither).
    e = pool.elastic
    t = pool.guaranteed.instance_type if pool.guaranteed else e.instance_types[0] if e else ""
    return _units(cfg, t, 1)


def floor_gpus(cfg: GpuLoanConfig, pool: Pool) -> int:
    """GPUs the floor actually has up: a Capacity Block outside its window (Guaranteed.floor_up, at the time the
    program runs) keeps its group at 0 nodes. Where the policy function keeps the block's window, this is only the
    quota a new ClusterQueue starts with: the policy moves it at the window's times (docs/floor.md, "Kueue")."""
    g = pool.guaranteed
    if g is None or (g.reservation == Reservation.capacity_block and not g.floor_up()):
        return 0
    return _units(cfg, g.instance_type, g.nodes)


def floor_life_gpus(cfg: GpuLoanConfig, pool: Pool) -> int:
    """GPUs the floor has at some time of its life: a Capacity Block's GPUs whether or not its window is open when
    the program runs. The policy raises the block flavor's nominalQuota to this inside the window without a
    `pulumi up` (policy/capacity_blocks.py), so whatever bounds admitted work from outside Kueue counts it."""
    g = pool.guaranteed
    return 0 if g is None else _units(cfg, g.instance_type, g.nodes)


def spot_allowed(cfg: GpuLoanConfig, pool: Pool) -> bool:
    return pool.tier != Tier.production or pool.name in cfg.scheduling.kueue.production_spot_pools


def production_work_on_spot(cfg: GpuLoanConfig, pool: Pool) -> bool:
    """Whether the pool's production work may run on spot: only in a pool listed in
    scheduling.kueue.production_spot_pools (elsewhere it is kept to the floor and on-demand). The one rule the
    environment simulator and both advisors count production interruptions by (sim/environment.py, advise/advisor.py)."""
    return pool.name in cfg.scheduling.kueue.production_spot_pools


def production_share_pct(pool: Pool) -> float:
    """The pool's production share in percent: its service target's, else 100 for a production-tier pool and 0 for
    the others (the one reading of it: the Kueue plan, the simulator and the advisors)."""
    share = pool.service_target.production_share_pct
    if share is None:
        return 100.0 if pool.tier == Tier.production else 0.0
    return float(share)


def production_queue(cfg: GpuLoanConfig, pool: Pool) -> bool:
    """Whether the pool gets a production ClusterQueue of its own beside its queue: a pool whose tier is not
    production but part of whose work is (service_target.production_share_pct > 0). Its queue lists spot and
    other teams' floors, which production work must never run on, and Kueue admits every workload of one
    ClusterQueue alike, so the production jobs go to a queue that lists neither (issue 36). A production-tier
    pool's queue already lists neither: its interruptible jobs wait behind its production ones (priority)."""
    return pool.tier != Tier.production and production_share_pct(pool) > 0


def _production_elastic_kind(cfg: GpuLoanConfig, pool: Pool) -> str | None:
    """The kind of elastic flavor a non-production pool's production work may use: spot where the pool is listed in
    production_spot_pools, else the on-demand group (capacity on_demand or spot_then_on_demand); None for a
    spot-only pool whose production work may not use spot (its floor only)."""
    e = pool.elastic
    if e is None:
        return None
    if e.capacity == ElasticCapacity.on_demand:
        return ON_DEMAND
    if production_work_on_spot(cfg, pool):
        return SPOT
    return ON_DEMAND if e.capacity == ElasticCapacity.spot_then_on_demand else None


def pool_flavors(cfg: GpuLoanConfig, pool: Pool) -> list[Flavor]:
    """The pool's own flavors in admission order (floor first). A production pool whose elastic capacity is spot
    that it may not use gets no elastic flavor (the config rules report it); with `spot_then_on_demand`, its
    on-demand group is its elastic flavor."""
    out: list[Flavor] = []
    base = {tags.LABEL_POOL: pool.name}
    if pool.guaranteed is not None:
        out.append(
            Flavor(
                flavor_name(cfg, pool, FLOOR),
                pool.name,
                FLOOR,
                {**base, tags.LABEL_TIER: "guaranteed"},
                (GPU_TOLERATION,),
                floor_gpus(cfg, pool),
            )
        )
    e = pool.elastic
    if e is None:
        return out
    elastic_labels = {**base, tags.LABEL_TIER: "elastic"}
    if e.capacity == ElasticCapacity.on_demand:
        out.append(
            Flavor(
                flavor_name(cfg, pool, ON_DEMAND),
                pool.name,
                ON_DEMAND,
                {**elastic_labels, tags.LABEL_CAPACITY: "on-demand"},
                (GPU_TOLERATION,),
                elastic_units(cfg, pool),
            )
        )
    elif e.capacity == ElasticCapacity.spot_then_on_demand and not spot_allowed(cfg, pool):
        # Production work kept off spot: the on-demand group, up to its own max. The flavor's capacity label goes
        # on the admitted pods, so the policy sees them as pods that may not run on spot and grows this group.
        out.append(
            Flavor(
                flavor_name(cfg, pool, ON_DEMAND),
                pool.name,
                ON_DEMAND,
                {**elastic_labels, tags.LABEL_CAPACITY: "on-demand"},
                (GPU_TOLERATION,),
                elastic_units(cfg, pool, e.on_demand_group_max_nodes),
            )
        )
    elif spot_allowed(cfg, pool):
        # Quota = the spot group's max: the on-demand fallback replaces missing spot nodes, it never adds to them.
        out.append(
            Flavor(
                flavor_name(cfg, pool, SPOT),
                pool.name,
                SPOT,
                elastic_labels,
                (GPU_TOLERATION, SPOT_TOLERATION),
                elastic_units(cfg, pool),
            )
        )
        if production_queue(cfg, pool) and _production_elastic_kind(cfg, pool) == ON_DEMAND:
            # The production queue's elastic capacity: the on-demand group, pinned as a production pool's is.
            out.append(
                Flavor(
                    flavor_name(cfg, pool, ON_DEMAND),
                    pool.name,
                    ON_DEMAND,
                    {**elastic_labels, tags.LABEL_CAPACITY: "on-demand"},
                    (GPU_TOLERATION,),
                    elastic_units(cfg, pool, e.on_demand_group_max_nodes),
                )
            )
    return out


def _sharing(cfg: GpuLoanConfig, team: str) -> TeamSharing:
    return cfg.scheduling.kueue.sharing(team)


def lendable_gpus(cfg: GpuLoanConfig, pool: Pool) -> int:
    return floor_gpus(cfg, pool) * int(_sharing(cfg, pool.team).lending_limit_pct) // 100


def lends_ahead(cfg: GpuLoanConfig, pool: Pool) -> bool:
    """The policy function keeps this floor's lendingLimit ahead of its owner (scheduling.kueue.lend_ahead;
    policy/decide/lend_ahead.py): Kueue on, lend_ahead on, the policy on and acting (a dry run patches nothing, so
    it is granted nothing to patch), and the floor lends something."""
    return (
        cfg.scheduling.kueue.enabled
        and cfg.scheduling.kueue.lend_ahead
        and cfg.policy.enabled
        and not cfg.policy.dry_run
        and floor_life_gpus(cfg, pool) > 0
        and _sharing(cfg, pool.team).lending_limit_pct > 0
    )


def borrowing_limit_gpus(cfg: GpuLoanConfig, pool: Pool) -> int | None:
    """The borrowingLimit of each lender's floor flavor in the pool's queue: the team's `borrowing_limit_gpus`, or
    its `borrowing_limit_pct` of the pool's own floor (floor_life_gpus: a Capacity Block's GPUs whether or not
    its window is open, since the limit is set once by `pulumi up`), rounded down so the limit never exceeds the
    percent; None: no limit. Kueue's borrowingLimit is per flavor and resource (v0.19.2 pkg/cache/scheduler/
    resource_node.go `available`), so the percent bounds what is borrowed of each other floor, as the GPU form."""
    sharing = _sharing(cfg, pool.team)
    if sharing.borrowing_limit_pct is None:
        return sharing.borrowing_limit_gpus
    return floor_life_gpus(cfg, pool) * int(round(sharing.borrowing_limit_pct * 100)) // 10_000


def fair_sharing_on(cfg: GpuLoanConfig) -> bool:
    """Whether Kueue's fair sharing is turned on: scheduling.kueue.fair_sharing (on by default) and the
    environment's cohort holds two ClusterQueues or more (one queue has nobody to share with). Under it the cohort's idle quota goes to the queue of lowest weighted share
    first (docs/scheduling.md, "Fair sharing among borrowers")."""
    k = cfg.scheduling.kueue
    return k.enabled and k.fair_sharing and len(plan(cfg).queues) > 1


def own_instance_types(pool: Pool) -> list[str]:
    """The instance types the pool's own node groups run: what its work is built and sized for."""
    return ([pool.guaranteed.instance_type] if pool.guaranteed else []) + (
        list(pool.elastic.instance_types) if pool.elastic else []
    )


def work_runs_on(cfg: GpuLoanConfig, borrower: Pool, lender_type: str) -> bool:
    """Whether the borrower's work can run on nodes of `lender_type`: one of the borrower's own types has the same
    GPU model, the same GPUs per node and CPU architecture, and no more memory per GPU than the lender's.

    Kueue assigns a flavor by quota alone (a workload's node selector is only checked against the labels the
    flavor sets, and gpuloan's flavors set pool and tier), so a borrowed floor must be hardware the borrower's work
    already runs on: a job built for A100s (their memory, their CUDA architecture) must not be admitted to an L40S
    floor, nor an 8-GPU job to 1-GPU nodes, where it would fail or sit pending on capacity its quota promised."""
    lender = cfg.gpu_type(lender_type)
    for t in own_instance_types(borrower):
        own = cfg.gpu_type(t)
        if (
            own.gpu_model == lender.gpu_model
            and own.gpus == lender.gpus
            and own.cpu_architecture == lender.cpu_architecture
            and own.gpu_memory_gib <= lender.gpu_memory_gib
        ):
            return True
    return False


def borrowable_floors(cfg: GpuLoanConfig, pool: Pool) -> list[Pool]:
    """Other pools' floors this pool's queue may borrow while they are idle.

    Production queues borrow nothing: borrowed GPUs are taken back by preemption when their owner's work arrives,
    which is the interruption production work pays a floor to avoid. Only floors the pool's work can run on
    (work_runs_on: same GPU model, GPUs per node and architecture, at least as much memory per GPU).
    """
    if pool.tier == Tier.production:
        return []
    return [
        p
        for p in cfg.pools
        if p.name != pool.name
        and lendable_gpus(cfg, p) > 0
        and p.guaranteed is not None
        and work_runs_on(cfg, pool, p.guaranteed.instance_type)
    ]


def pool_queue(cfg: GpuLoanConfig, pool: Pool) -> PoolQueue:
    """The pool's queue: all its work, or with a production queue (production_queue) its interruptible work."""
    return pool_queues(cfg, pool)[0]


def floor_queue_name(cfg: GpuLoanConfig, pool: Pool) -> str:
    """The ClusterQueue whose nominal quota the pool's floor is: its production queue where it has one."""
    return production_queue_name(cfg, pool) if production_queue(cfg, pool) else cluster_queue_name(cfg, pool)


def pool_queues(cfg: GpuLoanConfig, pool: Pool) -> list[PoolQueue]:
    """The pool's ClusterQueues: its queue, then its production queue where it has one (production_queue).

    With a production queue the floor's nominal quota (and the elastic flavor production may use) belong to the
    production queue, which borrows nothing (borrowingLimit 0) and lists no spot unless the pool is in
    production_spot_pools; the pool's other queue lists the same floor with nominal quota 0, first, so its
    interruptible work uses the idle floor by borrowing it, and the production queue takes it back by Kueue's
    reclaim (reclaimWithinCohort: Any; Kueue v0.19.2 pkg/scheduler/preemption/preemption.go findCandidates takes
    reclaim candidates only from ClusterQueues that borrow). No other team's queue can take it back: they have no
    nominal quota of it."""
    own = pool_flavors(cfg, pool)
    floor = [f for f in own if f.kind == FLOOR]
    split = production_queue(cfg, pool)
    prod_kind = _production_elastic_kind(cfg, pool) if split else None
    # the interruptible queue's elastic flavor: the pool's own (spot, or on-demand for capacity on_demand), not the
    # on-demand group added for the production queue of a pool whose elastic capacity is spot first
    prod_only_od = (
        split
        and prod_kind == ON_DEMAND
        and pool.elastic is not None
        and pool.elastic.capacity != ElasticCapacity.on_demand
    )
    elastic = [f for f in own if f.kind != FLOOR and not (prod_only_od and f.kind == ON_DEMAND)]
    prod_elastic = [f for f in own if f.kind == prod_kind] if prod_kind else []
    shared = {f.name for f in elastic} & {f.name for f in prod_elastic}  # one flavor both queues use
    entries: list[QueueFlavor] = []
    # A production queue never borrows (borrowingLimit 0 on each of its flavors): Kueue reclaims only quota that
    # is borrowed, so production work is never the one preempted to give quota back.
    own_borrow_limit = 0 if pool.tier == Tier.production else None
    lendable = lendable_gpus(cfg, pool)
    for f in floor:
        if split:
            entries.append(QueueFlavor(f.name, 0, None, None))
        else:
            entries.append(QueueFlavor(f.name, f.gpus, lendable if lendable < f.gpus else None, own_borrow_limit))
    borrow_limit = borrowing_limit_gpus(cfg, pool)
    for lender in borrowable_floors(cfg, pool):
        entries.append(QueueFlavor(flavor_name(cfg, lender, FLOOR), 0, None, borrow_limit))
    for f in elastic:
        # Elastic quota is never lent: another team's work on it would make this pool's policy buy nodes on this
        # pool's budget. Shared with the production queue, it is that queue's quota, borrowed here.
        entries.append(
            QueueFlavor(f.name, 0, None, None) if f.name in shared else QueueFlavor(f.name, f.gpus, 0, own_borrow_limit)
        )
    queues = [
        PoolQueue(
            pool.name,
            pool.team,
            pool.tier,
            cluster_queue_name(cfg, pool),
            local_queue_name(pool),
            tuple(entries),
            preempt_lower_priority=pool.tier == Tier.production,
            fair_share_weight=_sharing(cfg, pool.team).fair_share_weight,
        )
    ]
    if split:
        prod_entries = [QueueFlavor(f.name, f.gpus, lendable if lendable < f.gpus else None, 0) for f in floor]
        # only this pool's other queue lists a shared elastic flavor, so leaving its lendingLimit unset lends it
        # to that queue alone
        prod_entries += [QueueFlavor(f.name, f.gpus, None if f.name in shared else 0, 0) for f in prod_elastic]
        queues.append(
            PoolQueue(
                pool.name,
                pool.team,
                pool.tier,
                production_queue_name(cfg, pool),
                production_local_queue_name(pool),
                tuple(prod_entries),
                preempt_lower_priority=False,
                production_only=True,
                fair_share_weight=_sharing(cfg, pool.team).fair_share_weight,
            )
        )
    return queues


def plan(cfg: GpuLoanConfig) -> Plan:
    flavors = tuple(f for p in cfg.pools for f in pool_flavors(cfg, p))
    return Plan(cohort_name(cfg), flavors, tuple(q for p in cfg.pools for q in pool_queues(cfg, p)))


def queue_reach_gpus(cfg: GpuLoanConfig, queue: PoolQueue) -> int:
    """Most GPUs a queue can ever have admitted: its nominal quotas plus what it can borrow (a pool's own flavors
    that its interruptible queue borrows from its production queue are counted once, with the production queue,
    since both queues together never hold more of them). Its own floor counts with all its GPUs (floor_life_gpus): a Capacity Block outside its window has nominalQuota 0 in the generated
    ClusterQueue, and the policy raises it when the window opens, with no `pulumi up` in between."""
    pools = {p.name: p for p in cfg.pools}
    own_floor = flavor_name(cfg, pools[queue.pool], FLOOR)
    lenders = {flavor_name(cfg, p, FLOOR): lendable_gpus(cfg, p) for p in cfg.pools}
    total = 0
    own = {f.name for f in pool_flavors(cfg, pools[queue.pool])} if production_queue(cfg, pools[queue.pool]) else set()
    for entry in queue.flavors:
        if not queue.production_only and entry.nominal_gpus == 0 and entry.flavor in own:
            continue  # the pool's own floor or elastic flavor borrowed from its production queue, which counts it
        if entry.flavor == own_floor:
            total += floor_life_gpus(cfg, pools[queue.pool])
        elif entry.nominal_gpus:
            total += entry.nominal_gpus
        else:
            reach = lenders.get(entry.flavor, 0)
            total += reach if entry.borrowing_limit_gpus is None else min(reach, entry.borrowing_limit_gpus)
    return total


def team_gpu_ceiling(cfg: GpuLoanConfig, team: str) -> int:
    """The most GPUs Kueue can admit for a team at any time (own quotas, a Capacity Block's for its whole life, +
    borrowable): the team namespace's ResourceQuota is set to this, so it never refuses pods of admitted work and
    still bounds pods that bypass the queue (config/tenancy.py team_gpu_quota, docs/scheduling.md)."""
    return sum(queue_reach_gpus(cfg, q) for q in plan(cfg).queues if q.team == team)


# --- config rules ----------------------------------------------------------------------------------------------


def scheduling_problems(cfg: GpuLoanConfig) -> list[tuple[str, str]]:
    """The config rule (config/config.py runs it with the other cross-field rules)."""
    k = cfg.scheduling.kueue
    at = "scheduling.kueue"
    problems: list[tuple[str, str]] = []
    pools = {p.name: p for p in cfg.pools}
    set_aside = SET_ASIDE.get()  # pools whose own shape errors are reported already
    for j, name in enumerate(k.production_spot_pools):
        pool = pools.get(name)
        if pool is None and name in set_aside:
            continue
        # A name that matches no pool is a typo or a leftover; listing a pool that is not production or has no spot
        # is harmless (nothing to allow) and stays valid, so a pool can change tier or capacity on its own.
        if pool is None:
            problems.append(
                (f"{at}.production_spot_pools[{j}]", f"no pool named '{name}' (pools: {', '.join(sorted(pools))})")
            )
    for team in k.teams:
        if team not in cfg.teams and team not in set_aside:
            problems.append((f"{at}.teams.{team}", f"no pool belongs to team '{team}' (teams: {', '.join(cfg.teams)})"))
    if not k.enabled:
        return problems
    for i, pool in enumerate(cfg.pools):
        e = pool.elastic
        if e is None or e.capacity == ElasticCapacity.on_demand or spot_allowed(cfg, pool):
            continue
        # A production pool whose elastic capacity includes spot it may not use. With spot_then_on_demand its work
        # is admitted to the on-demand group (pool_flavors) and the policy grows that group for pods that may not
        # run on spot (policy/off_spot.py); only the rules that add nodes without a pending pod still go spot-first.
        if pool.guaranteed is None and e.capacity == ElasticCapacity.spot:
            why = "this pool has no floor and spot-only elastic capacity, so production work could never be admitted"
        elif e.capacity == ElasticCapacity.spot:
            why = "its spot-only elastic group could never run this pool's work"
        elif e.workload == Workload.service or e.warm_up:
            rule = "workload: service's utilization scale-up" if e.workload == Workload.service else "warm_up"
            why = (
                f"{rule} adds nodes before any pod is pending, spot first, and this pool's work could not use "
                "them (pods that may not run on spot get on-demand nodes only once they are pending)"
            )
        else:
            continue
        problems.append(
            (
                f"pools[{i}].elastic.capacity",
                f"production work stays off spot under Kueue, and {why}: "
                f"set capacity: on_demand, or list '{pool.name}' in {at}.production_spot_pools",
            )
        )
    names = {p.name for p in cfg.pools}
    for i, pool in enumerate(cfg.pools):
        if not production_queue(cfg, pool):
            continue
        # The promise of a production queue: the pool's production work runs on its floor or on capacity that is
        # never reclaimed for another team, never on spot (unless listed) and never on a borrowed floor.
        where = f"pools[{i}].service_target.production_share_pct"
        if pool.guaranteed is None and _production_elastic_kind(cfg, pool) is None:
            problems.append(
                (
                    where,
                    f"{production_share_pct(pool):g} % of this pool's work is production, which "
                    "stays off spot under Kueue, and the pool has no floor and spot-only elastic capacity, so "
                    "its production queue could never admit anything: add a floor (guaranteed), set "
                    f"elastic.capacity: spot_then_on_demand or on_demand, or list '{pool.name}' in "
                    f"{at}.production_spot_pools",
                )
            )
        pct = _sharing(cfg, pool.team).lending_limit_pct
        if pool.guaranteed is not None and pct < 100:
            problems.append(
                (
                    f"{at}.teams.{pool.team}.lending_limit_pct",
                    f"pool '{pool.name}' has production work "
                    f"({production_share_pct(pool):g} %), so its floor's quota is its production queue's "
                    "and its other work borrows the idle floor like any team's: a lendingLimit below 100 % "
                    "would cap this team's own interruptible work on its floor too; leave it at 100, or "
                    "set service_target.production_share_pct: 0",
                )
            )
        clash = f"{pool.name}{PRODUCTION_QUEUE_SUFFIX}"
        if clash in names:
            problems.append(
                (
                    f"pools[{i}].name",
                    f"pool '{pool.name}' gets the production queue '{clash}', and a "
                    f"pool of that name exists: rename one of them",
                )
            )
    for i, pool in enumerate(cfg.pools):
        n = len(pool_queue(cfg, pool).flavors)
        if n > MAX_FLAVORS_PER_GROUP:
            problems.append(
                (
                    f"pools[{i}]",
                    f"its Kueue queue would list {n} flavors (own + borrowable floors); "
                    f"Kueue allows {MAX_FLAVORS_PER_GROUP}: lower lending_limit_pct of some teams to 0",
                )
            )
    return problems
