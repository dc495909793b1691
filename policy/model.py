"""The data the policy engine reads and writes: frozen dataclasses, standard library only.

    Settings     what the operator configured (built at plan time by pricing/policy_settings.py, shipped inside the
                 Lambda package as policy/settings.json: `Settings.to_json()` / `Settings.from_json()`).
    Observation  what one tick saw: per pool, the node groups, the nodes with their GPU utilization, the GPUs
                 requested by pending pods and the spend. Built by policy/tick.py:observe in the Lambda, or directly
                 by the simulator (nothing here needs AWS).
    Plan         what the engine decided: per pool, the actions (each with a reason code) and figures.

Times are timezone-aware UTC datetimes. Money is USD. Utilization is percent (0-100) of a node's GPUs.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import KW_ONLY, asdict, dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any

from policy.terms import Capacity, Enforcement, Reason, Workload

SETTINGS_VERSION = 1

# Auto Scaling instance lifecycle states the engine distinguishes (the adapter passes AWS's names through).
LIFECYCLE_IN_SERVICE = "InService"
LIFECYCLE_PENDING = "Pending"  # also "Pending:Wait", "Pending:Proceed": the node is still booting
# "Terminating*", "Terminated", "Detaching", "Standby", ... are neither capacity nor launching.

# Auto Scaling's lifecycle state of an instance on its way out; the tick also gives it to a spot instance under
# EC2's 2-minute interruption notice: neither capacity nor launching, never reclaimed.
LIFECYCLE_LEAVING = "Terminating"
# An EC2 instance id ("i-" and 8 or 17 hex digits): what a spot warning must name before it is trusted or stored.
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")

ACTION_SET_DESIRED = "set_desired"  # EKS UpdateNodegroupConfig(desiredSize)
ACTION_TERMINATE = "terminate"  # ASG TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=True)
ACTION_HOLD = "hold"  # no change; the reason says why
ACTION_SET_LENDING_LIMIT = "set_lending_limit"  # Kueue: the lendingLimit of a floor flavor in its ClusterQueue


# --- settings ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSize:
    """One more node size of a pool that lists GPU instance types of several sizes (policy/sizes.py): its own spot
    and on-demand groups (an EKS managed node group holds one instance shape), their maxima and prices per node."""

    gpus_per_node: int
    spot_group: str | None
    on_demand_group: str | None
    spot_max_nodes: int = 0
    on_demand_max_nodes: int = 0
    spot_usd_per_hour: float = 0.0
    on_demand_usd_per_hour: float = 0.0

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(g for g in (self.spot_group, self.on_demand_group) if g)


@dataclass(frozen=True)
class PoolSettings:
    """One pool's elastic capacity. A group name is None when the pool has no such group.

    `spot_group` is the primary group when present; `on_demand_group` is the fallback (or the only group for
    capacity: on_demand). Prices are per node and hour. A group's `*_usd_per_hour` is the price of the type the
    group launches when it grows (pricing/policy_settings.py: an on-demand group its first listed type,
    EKS's "prioritized" order; a spot group its cheapest, what price-capacity-optimized asks for first); a
    running node is priced at its own type (`instance_usd_per_hour`), and a node whose type is not known at the
    group's priciest listed type (unknown spend is not zero).
    """

    name: str
    team: str
    tier: str  # a Tier value (a plain string once read back from the settings JSON)
    gpus_per_node: int
    spot_group: str | None
    on_demand_group: str | None
    spot_max_nodes: int
    on_demand_max_nodes: int
    spot_usd_per_hour: float
    on_demand_usd_per_hour: float
    guaranteed_group: str | None = None
    guaranteed_nodes: int = 0
    guaranteed_usd_per_hour: float = 0.0  # the whole floor, per hour (fixed spend in the budget projection)
    scale_up_utilization_pct: float = 80.0
    scale_up_window_minutes: int = 10
    idle_utilization_pct: float = 5.0
    idle_timeout_minutes: int = 10
    # A node on which no pod has requested a GPU for this long is reclaimed sooner than an idle one: with no GPU
    # pod there is nothing to interrupt (Karpenter's "empty" nodes), so it need not wait out idle_timeout_minutes.
    empty_timeout_minutes: int = 2
    cooldown_minutes: int = 5  # after a group's change, before a utilization-driven scale-up (service pools)
    # Most nodes added or removed per tick; None = no step limit (the group max and the budget cap bound a tick).
    max_step_nodes: int | None = None
    fallback_after_minutes: int = 10
    # Workload.batch: jobs queue, pending pods are the whole scale-up signal. Workload.service: traffic that does
    # not queue; sustained utilization adds a node too.
    workload: str = Workload.batch
    # Minutes from a scale-up to a node that takes pods (boot, join, driver): what a relaunch costs, paid and
    # waited; and how far back the pool's GPU pod arrivals are counted for the keep-or-release rule.
    launch_minutes: int = 6
    arrival_window_minutes: int = 60
    # Warm-up ahead of the daily rhythm (opt-in): spare nodes kept or launched for the arrivals the pool saw at
    # this time of day on earlier days (policy/rhythm.py), by the same cost rule as keep-or-release.
    warm_up: bool = False
    # Back to spot after a fallback (policy/back_to_spot.py): once spot fills again, the on-demand fallback nodes take
    # no new pods (a NoSchedule taint) and go when idle, while the spot group grows for the pods that wait.
    back_to_spot: bool = True
    # Early spot warnings (opt-in, policy/rebalance.py): on EC2's rebalance recommendation the node gets a NoSchedule
    # taint that jobs watching their node read as "checkpoint now".
    rebalance_checkpoint: bool = False
    # Minutes a gang (pods that start only together: policy/gangs.py) may wait for the rest of its nodes; past
    # them its missing nodes are asked of the on-demand fallback, or, if no group can add them, the idle nodes
    # held for it are released and it is not scaled for until capacity looks available again.
    gang_wait_minutes: int = 15
    budget_monthly_usd: float | None = None
    budget_enforcement: str = Enforcement.cap_elastic
    budget_name: str | None = None
    # A floor on a Capacity Block (policy/capacity_blocks.py): its window (ISO 8601 with zone; None for any other
    # floor), the drain's lead before EKS's scale-down, and whether config holds the group (a roll at desired 0).
    capacity_block_start: str | None = None
    capacity_block_end: str | None = None
    capacity_block_checkpoint_lead_minutes: int = 30
    capacity_block_held: bool = False
    # The block's reservation id (cr-...): the tick reads its real dates and state from EC2 and prefers them over
    # the configured window (policy/capacity_blocks.py, "Dates from EC2"). None: the configured window alone.
    capacity_block_reservation_id: str | None = None
    # With Kueue: the pool's ClusterQueue, its floor flavor and the block's whole quota (GPUs in Kueue's units);
    # the policy sets that flavor's nominalQuota to it inside the window and to 0 outside (capacity_blocks.py).
    capacity_block_queue: str | None = None
    capacity_block_queue_api: str = "kueue.x-k8s.io/v1beta2"
    capacity_block_flavor: str | None = None
    capacity_block_quota_gpus: int = 0
    # With Kueue: the pool's ClusterQueue and its flavor list as (flavor, owning pool, kind floor|spot|on-demand),
    # which policy/loan_usage.py reads the loan's usage from each tick. None: no Kueue, no loan figures.
    loan_queue: str | None = None
    loan_queue_api: str = "kueue.x-k8s.io/v1beta2"
    loan_flavors: tuple[tuple[str, str, str], ...] = ()
    # Lending ahead of the owner (opt-in, scheduling.kueue.lend_ahead; policy/decide/lend_ahead.py): the queue that
    # holds the floor's nominal quota, its floor flavor, and the lendingLimit the config sets there (Kueue units;
    # the whole nominal quota when the config sets none). None: the rule is off for the pool.
    lend_ahead_queue: str | None = None
    lend_ahead_flavor: str | None = None
    lend_ahead_limit_gpus: int = 0
    # How far ahead the owner's daily rhythm is read (policy/rhythm.py): the GPUs its arrivals brought in the next
    # this-many minutes on earlier days are kept unlent.
    reclaim_lookahead_minutes: int = 60
    # The pool's other node sizes (policy/sizes.py), one NodeSize each with its own spot and on-demand groups; the
    # fields above (gpus_per_node, spot_group, ...) are the size of the pool's first listed instance type. () for a
    # pool of one size: its groups are spot_group and on_demand_group alone, as before sizes existed.
    other_sizes: tuple[NodeSize, ...] = ()
    # (group, instance type, USD per node-hour) for every type a group lists: a running node is priced at its own
    # type. () when the caller knows only one price per group (the simulator, whose nodes are the launch type).
    instance_usd_per_hour: tuple[tuple[str, str, float], ...] = ()

    def __post_init__(self):
        # Settings JSON carries the rows as lists: back to tuples (the dataclass stays hashable).
        object.__setattr__(self, "loan_flavors", tuple((str(f), str(p), str(k)) for f, p, k in self.loan_flavors))
        object.__setattr__(
            self,
            "instance_usd_per_hour",
            tuple((str(g), str(t), float(usd)) for g, t, usd in self.instance_usd_per_hour),
        )
        # Settings JSON carries the sizes as objects: rebuild them, refusing unknown keys and clashing sizes.
        sizes = []
        for i, s in enumerate(self.other_sizes):
            if isinstance(s, dict):
                s = _build(NodeSize, s, f"other_sizes[{i}]")
            if not isinstance(s, NodeSize):
                raise TypeError(f"other_sizes[{i}] must be an object")
            sizes.append(s)
        gpus = [self.gpus_per_node] + [s.gpus_per_node for s in sizes]
        if len(set(gpus)) != len(gpus):
            raise TypeError(f"other_sizes: GPUs per node listed twice ({gpus}): each size is one pair of groups")
        object.__setattr__(self, "other_sizes", tuple(sizes))

    @property
    def primary_group(self) -> str | None:
        return self.spot_group or self.on_demand_group

    @functools.cached_property
    def elastic_groups(self) -> tuple[str, ...]:
        # cached: decide() asks for it several times per pool and tick (the simulator ticks 82,080 times a run)
        own = tuple(g for g in (self.spot_group, self.on_demand_group) if g)
        return own + tuple(g for s in self.other_sizes for g in s.groups)

    @functools.cached_property
    def spot_groups(self) -> tuple[str, ...]:
        """Every size's spot group (one at most without other_sizes)."""
        return tuple(g for g in (self.spot_group, *(s.spot_group for s in self.other_sizes)) if g)

    @functools.cached_property
    def on_demand_groups(self) -> tuple[str, ...]:
        return tuple(g for g in (self.on_demand_group, *(s.on_demand_group for s in self.other_sizes)) if g)

    def size_of(self, group: str) -> NodeSize | None:
        """The other size whose group `group` is; None for the first size's groups (or an unknown name)."""
        for s in self.other_sizes:
            if group == s.spot_group or group == s.on_demand_group:
                return s
        return None

    def gpus_of(self, group: str) -> int:
        s = self.size_of(group) if self.other_sizes else None
        return s.gpus_per_node if s is not None else self.gpus_per_node

    @property
    def elastic_max_nodes(self) -> int:
        own = (self.spot_max_nodes if self.spot_group else 0) + (
            self.on_demand_max_nodes if self.on_demand_group else 0
        )
        return own + sum(
            (s.spot_max_nodes if s.spot_group else 0) + (s.on_demand_max_nodes if s.on_demand_group else 0)
            for s in self.other_sizes
        )

    def max_nodes(self, group: str) -> int:
        s = self.size_of(group) if self.other_sizes else None
        if s is not None:
            return s.spot_max_nodes if group == s.spot_group else s.on_demand_max_nodes
        return self.spot_max_nodes if group == self.spot_group else self.on_demand_max_nodes

    def usd_per_hour(self, group: str) -> float:
        s = self.size_of(group) if self.other_sizes else None
        if s is not None:
            return s.spot_usd_per_hour if group == s.spot_group else s.on_demand_usd_per_hour
        return self.spot_usd_per_hour if group == self.spot_group else self.on_demand_usd_per_hour

    @functools.cached_property
    def _type_prices(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for group, itype, usd in self.instance_usd_per_hour:
            out.setdefault(group, {})[itype] = usd
        return out

    def node_usd_per_hour(self, group: str, instance_type: str | None) -> float:
        """A running node's price: its own type's when the settings price it; otherwise (type unknown, or not
        one the group lists) the group's priciest listed type, never less than its launch price."""
        prices = self._type_prices.get(group)
        if not prices:
            return self.usd_per_hour(group)
        own = prices.get(instance_type) if instance_type is not None else None
        return own if own is not None else max(max(prices.values()), self.usd_per_hour(group))

    def capacity_of(self, group: str) -> Capacity:
        if group in self.spot_groups:
            return Capacity.spot
        if group in self.on_demand_groups:
            return Capacity.on_demand
        return Capacity.guaranteed


@dataclass(frozen=True)
class ShardSettings:
    """Some of the environment's pools, decided by invocations of their own (config policy.shards,
    docs/policy.md "Shards"): the schedule of this shard sends {"shard": name}."""

    name: str
    pools: tuple[str, ...]


@dataclass(frozen=True)
class Settings:
    """Everything the policy function needs that does not change between ticks."""

    environment: str
    region: str
    cluster_name: str
    pools: tuple[PoolSettings, ...]
    budget_monthly_usd: float | None = None  # the environment budget (all pools together)
    budget_enforcement: str = Enforcement.cap_elastic
    budget_name: str | None = None
    dry_run: bool = False
    # The environment's commitments' fees that no floor uses, per hour (Savings Plans / RIs bill every hour of their
    # term, used or not): fixed spend of the environment scope, like the floors (config/config.py floor_bill).
    commitment_unused_usd_per_hour: float = 0.0
    schedule_minutes: int = 1
    metric_namespace: str = "ContainerInsights"
    utilization_metric: str = "node_gpu_utilization"
    reserved_metric: str = "node_gpu_reserved_capacity"  # % of a node's GPUs requested by pods (Container Insights)
    budget_refresh_minutes: int = 60
    notify_min_interval_minutes: int = 30
    # AWS calls of one tick that may be in flight at once (policy/fanout.py; docs/aws-rules.md: EKS and Auto Scaling
    # publish no request rate, so the bound is a setting, policy.aws_calls_in_flight)
    aws_calls_in_flight: int = 8
    # The shards (config policy.shards): empty, one invocation decides every pool (and the JSON has no key).
    shards: tuple[ShardSettings, ...] = ()

    def pool(self, name: str) -> PoolSettings:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def to_json(self) -> str:
        data = asdict(self)
        if not self.shards:
            del data["shards"]  # unsharded settings read exactly as before shards existed
        data["version"] = SETTINGS_VERSION
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Settings":
        """Parse settings JSON; unknown or missing keys raise BadSettings naming them (never a silent default)."""
        from policy.errors import BadSettings

        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as err:
            raise BadSettings(f"settings are not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise BadSettings("settings must be a JSON object")
        version = data.pop("version", None)
        if version != SETTINGS_VERSION:
            raise BadSettings(f"settings version {version!r}; this policy function reads version {SETTINGS_VERSION}")
        pools = data.pop("pools", None)
        if not isinstance(pools, list) or not pools:
            raise BadSettings("settings.pools must be a non-empty list")
        parsed = tuple(_build(PoolSettings, p, f"pools[{i}]") for i, p in enumerate(pools))
        shards = data.pop("shards", [])
        if not isinstance(shards, list):
            raise BadSettings("settings.shards must be a list")
        parsed_shards = []
        for i, raw in enumerate(shards):
            shard = _build(ShardSettings, raw, f"shards[{i}]")
            if not isinstance(shard.pools, list) or not all(isinstance(p, str) for p in shard.pools):
                raise BadSettings(f"shards[{i}].pools must be a list of pool names")
            parsed_shards.append(ShardSettings(str(shard.name), tuple(shard.pools)))
        settings = _build(cls, {**data, "pools": parsed, "shards": tuple(parsed_shards)}, "settings")
        problem = shard_problem(settings)
        if problem:
            raise BadSettings(f"settings.shards: {problem}")
        return settings

    def shard(self, name: str) -> "Settings":
        """These settings restricted to one shard's pools (KeyError: no such shard)."""
        for sh in self.shards:
            if sh.name == name:
                return replace(self, pools=tuple(p for p in self.pools if p.name in sh.pools))
        raise KeyError(name)

    def shard_of_pool(self, pool: str | None) -> str | None:
        """The shard that decides `pool`, or None."""
        return next((sh.name for sh in self.shards if pool in sh.pools), None)

    def shard_of_group(self, group: str | None) -> str | None:
        """The shard whose pools own node group `group`, or None."""
        for sh in self.shards:
            for name in sh.pools:
                ps = self.pool(name)
                if group in ps.elastic_groups or group == ps.guaranteed_group:
                    return sh.name
        return None


def shard_problem(settings: Settings) -> str | None:
    """Why the shards do not put every pool in exactly one shard (config/config.py validates the same before a
    deploy; this guards a package whose settings were edited by hand), or None."""
    if not settings.shards:
        return None
    pools = [p.name for p in settings.pools]
    listed = [p for sh in settings.shards for p in sh.pools]
    names = [sh.name for sh in settings.shards]
    if len(set(names)) != len(names):
        return "a shard name is used twice"
    if any(not sh.pools for sh in settings.shards):
        return "a shard has no pools"
    twice = sorted({p for p in listed if listed.count(p) > 1})
    missing = sorted(set(pools) - set(listed))
    unknown = sorted(set(listed) - set(pools))
    if twice or missing or unknown:
        return "; ".join(
            f"{what}: {', '.join(which)}"
            for what, which in (("pools in two shards", twice), ("pools in no shard", missing), ("not pools", unknown))
            if which
        )
    return None


def _build(cls, data: Any, path: str):
    from policy.errors import BadSettings

    if not isinstance(data, dict):
        raise BadSettings(f"{path} must be an object")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise BadSettings(f"{path}: unknown keys {', '.join(unknown)}")
    try:
        return cls(**data)
    except (TypeError, ValueError) as err:
        raise BadSettings(f"{path}: {err}") from None


# --- observation ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One instance of a pool's node group (guaranteed nodes included, so pool utilization can be reported).

    Utilization is None when CloudWatch had no datapoint for the window: the engine treats it as busy.
    """

    instance_id: str
    group: str
    launched_at: datetime
    lifecycle: str = LIFECYCLE_IN_SERVICE
    max_utilization_pct: float | None = None  # max over the last idle_timeout_minutes
    avg_utilization_pct: float | None = None  # mean over the last scale_up_window_minutes
    max_reserved_pct: float | None = None  # max % of the node's GPUs requested by pods, last empty_timeout_minutes
    # max utilization over the last empty_timeout_minutes: an empty node goes before the idle timeout only when
    # its GPUs were also idle over that window (0 GPUs requested is one signal, not proof: issue 14)
    recent_max_utilization_pct: float | None = None
    # GPU-requesting pods bound to the node in this tick's pod list (policy/io/kube.py gpu_pods_by_node): read from
    # the API server, so fresh where the metrics are minutes old. None: unknown (the pod list failed).
    gpu_pods: int | None = None
    # The EC2 instance type (Auto Scaling's DescribeAutoScalingGroups lists it per instance): the budget cap prices
    # the node at it. None: unknown, priced at its group's priciest listed type.
    instance_type: str | None = None

    @property
    def in_service(self) -> bool:
        return self.lifecycle == LIFECYCLE_IN_SERVICE

    @property
    def launching(self) -> bool:
        return self.lifecycle.startswith(LIFECYCLE_PENDING)


@dataclass(frozen=True)
class Group:
    """A managed node group as EKS and its Auto Scaling group report it."""

    name: str
    desired_nodes: int
    min_nodes: int = 0
    max_nodes: int = 0
    # Anything but ACTIVE means "do not touch this tick". The tick's batched read sees only what the Auto Scaling
    # group says (DELETING while it is deleted); EKS's own status (UPDATING, DEGRADED, ...) is read again just
    # before a change, which is refused unless ACTIVE (policy/io/nodegroups.py, policy/tick.py:_recheck).
    status: str = "ACTIVE"
    # Latest of the group's last scaling activity and the last change this policy made to it (the tick state).
    last_change_at: datetime | None = None
    capacity_shortage: bool = False  # a recent scaling activity failed for lack of capacity (spot)


@dataclass(frozen=True)
class Spend:
    """Month-to-date spend of a budget scope: the last actual figure from AWS Budgets (it lags hours) plus the
    policy's own running estimate of elastic spend since that figure was read. actual_usd None = never read
    (e.g. Budgets denied access): the running estimate alone then still caps and drains."""

    actual_usd: float | None
    estimated_since_usd: float = 0.0
    actual_as_of: datetime | None = None

    @property
    def month_to_date_usd(self) -> float | None:
        if self.actual_usd is None:
            return None
        return self.actual_usd + self.estimated_since_usd


@dataclass(frozen=True)
class PendingGang:
    """Pending pods that start only together (one pod group: policy/pods.py `gang_of`). Its pods are also among
    the pool's pending_pod_gpus; this says which of them belong together.

    waiting_since: the creation time of its oldest pending pod (when its nodes were first due); None = unknown,
    and an unknown wait never releases anything."""

    name: str  # namespace/group, for the reasons' details
    pod_gpus: tuple[int, ...]
    waiting_since: datetime | None = None
    # One of its pods may not run on spot (PoolObservation.on_demand_only_pod_gpus holds all of its pods): the
    # gang goes to the on-demand group whole.
    on_demand_only: bool = False


BLOCK_UNREAD = "unread"  # BlockDates.state when EC2 could not be read or did not return the block


@dataclass(frozen=True)
class BlockDates:
    """A Capacity Block as EC2 reports it (DescribeCapacityReservations): State, StartDate, EndDate. State
    BLOCK_UNREAD: the read failed or did not return the block, so its window is unconfirmed."""

    reservation_id: str
    state: str
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True)
class Lending:
    """A floor flavor in the ClusterQueue that holds its nominal quota, as read this tick (Kueue units). `limit_gpus`
    None: no lendingLimit set (all of the nominal quota lends). `own_gpus`: the queue's usage of the flavor
    (status.flavorsUsage total), None if absent. `pending_workloads`: status.pendingWorkloads, None if absent.
    `forecast_gpus`: GPUs the pool's arrivals brought over the lookahead at this time of day on earlier days
    (policy/rhythm.py), None while unknown."""

    nominal_gpus: int
    limit_gpus: int | None
    own_gpus: float | None
    pending_workloads: int | None
    forecast_gpus: float | None


@dataclass(frozen=True)
class PoolObservation:
    """groups: the pool's elastic groups that could be read (a missing one makes the engine hold the pool).
    pending_pod_gpus: GPUs requested by each pending pod that targets the pool; None when unknown."""

    name: str
    groups: tuple[Group, ...] = ()
    nodes: tuple[Node, ...] = ()
    pending_pod_gpus: tuple[int, ...] | None = ()
    spend: Spend | None = None
    # (creation time, GPUs) of the pool's GPU pods not yet finished and created within arrival_window_minutes
    # (pending or running): the arrivals the keep-or-release rule estimates the pool's rate from. None = unknown.
    arrivals: tuple[tuple[datetime, int], ...] | None = None
    # The arrival rate (nodes' worth per minute) the same time of day brought on earlier days, over the next
    # 2 x launch_minutes (policy/rhythm.py); None = unknown or warm-up off.
    rhythm_rate_nodes_per_minute: float | None = None
    # Later fields by keyword only: fields added side by side by two changes once slid into each other's place
    # positionally (a gang list read as a Kueue quota), silently.
    _: KW_ONLY
    # A Capacity Block pool with Kueue: the nominal quota of its floor flavor now; None = not read (or no Kueue).
    floor_quota_gpus: int | None = None
    # The pending pods that form gangs (a subset of pending_pod_gpus, grouped); () = none known.
    pending_gangs: tuple[PendingGang, ...] = ()
    # The pending pods that may not run on the pool's spot nodes: they admit the pool's on-demand elastic shape
    # but not its spot shape (policy/pods.py `on_demand_only`: on-demand asked for by node selector or required
    # affinity, or the spot taint not tolerated), and every pod of a gang with such a pod. A subset of
    # pending_pod_gpus; None = unknown (they are then counted with the rest, as before this was read), () = none.
    on_demand_only_pod_gpus: tuple[int, ...] | None = ()
    # A Capacity Block floor's dates as EC2 reports them this tick; None = not read (the configured window rules,
    # as in the simulator), BlockDates(state=BLOCK_UNREAD) = the read failed (policy/capacity_blocks.py).
    block_dates: BlockDates | None = None
    # A lend-ahead pool's floor flavor as Kueue has it this tick (policy/decide/lend_ahead.py); None = not read.
    lending: Lending | None = None

    def group(self, name: str | None) -> Group | None:
        for g in self.groups:
            if g.name == name:
                return g
        return None


@dataclass(frozen=True)
class Observation:
    pools: tuple[PoolObservation, ...]
    environment_spend: Spend | None = None
    # With shards (docs/policy.md, "Shards"): the hourly rate the environment's other shards hold reserved in the
    # state table (policy/shard_budget.py), part of the environment scope's rate like this tick's own pools.
    environment_others_usd_per_hour: float = 0.0

    def pool(self, name: str) -> PoolObservation | None:
        for p in self.pools:
            if p.name == name:
                return p
        return None


# --- plan ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """One change (or a hold) with its reason. set_desired: desired_from -> desired_to on `group`.
    terminate: `instance_id` in `group`, desired drops by one. hold: nothing changes."""

    pool: str
    kind: str
    reason: Reason
    group: str | None = None
    desired_from: int | None = None
    desired_to: int | None = None
    instance_id: str | None = None
    detail: str = ""

    @property
    def changes(self) -> bool:
        return self.kind != ACTION_HOLD

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "reason": self.reason.value}
        for key in ("group", "desired_from", "desired_to", "instance_id"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True)
class PoolDecision:
    """The engine's verdict for one pool, with the figures the handler logs and publishes."""

    pool: str
    actions: tuple[Action, ...]
    desired_after: dict[str, int] = field(default_factory=dict)  # elastic group -> desired size after the plan
    pending_gpus: int | None = None
    elastic_usd_per_hour: float = 0.0  # spend rate of the elastic nodes after the plan (for the running estimate)
    month_to_date_usd: float | None = None
    projected_month_usd: float | None = None
    fallback_active: bool = False
    utilization_pct: dict[str, float] = field(default_factory=dict)  # "guaranteed"/"elastic" -> mean avg util
    # On-demand fallback nodes that should take no new pods now that spot is back (policy/back_to_spot.py): the tick
    # taints exactly these and removes its taint from the pool's other on-demand nodes (so turning back_to_spot off,
    # or spot going short again, reopens them). None: the pool has no spot group with an on-demand fallback.
    closed_to_new_pods: tuple[str, ...] | None = None

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return tuple(a.reason for a in self.actions)

    @property
    def changes(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.changes)


# A rule whose condition is `now - t <= d` still holds at t + d and flips at any moment after it: it reports
# t + d + JUST_AFTER (a caller that decides on whole minutes rounds it up to the next one).
JUST_AFTER = timedelta(microseconds=1)


class Timers:
    """The moments after `now` at which one of the engine's rules, by its own clock, could decide differently with
    the observation unchanged. Each rule reports its timers where the rule lives (policy/decide/ and the rule
    modules): `at(t)` when its condition changes at `t`, nothing when only a change of the observation can
    change its verdict. `earliest` is the plan's next_decision_at."""

    __slots__ = ("now", "earliest")

    def __init__(self, now: datetime):
        self.now = now
        self.earliest: datetime | None = None

    def at(self, when: datetime | None) -> None:
        if when is not None and when > self.now and (self.earliest is None or when < self.earliest):
            self.earliest = when

    def next_minute(self) -> None:
        """The rule reads the clock continuously (the budget projection's hours left): decide again next minute."""
        self.at(self.now + timedelta(minutes=1))


@dataclass(frozen=True)
class Plan:
    decisions: tuple[PoolDecision, ...]
    dry_run: bool = False
    decided_at: datetime | None = None
    # The earliest moment after decided_at at which one of the rules' own timers (cooldowns, idle and empty
    # windows, the spot fallback's wait, arrivals leaving the keep-warm window, a gang's wait, a Capacity Block's
    # dates, the budget projection, ...) could change this plan with the observation unchanged; None when only
    # a change of the observation can (Timers). Deciding at any moment before it, on the same observation, gives
    # the same actions: a caller that knows its observation is unchanged may skip to it (sim/controllers/gpuloan.py).
    next_decision_at: datetime | None = None

    @property
    def actions(self) -> tuple[Action, ...]:
        return tuple(a for d in self.decisions for a in d.actions)

    @property
    def changes(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.changes)

    def decision(self, pool: str) -> PoolDecision:
        for d in self.decisions:
            if d.pool == pool:
                return d
        raise KeyError(pool)
