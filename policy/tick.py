"""One tick of the policy function over injected ports: read the world, decide, apply, report.

Every read failure is recorded (the tick's errors, the PolicyErrors metric) and turned into missing data (which
never shrinks capacity); every write failure is recorded and left for the next tick (level-triggered). Nothing
here raises for an AWS or Kubernetes failure, so a bad minute never becomes a crash-and-retry loop.

Before a node is terminated the tick makes the check the engine cannot: it cordons the node, then reads the
pods bound to it; a non-terminal pod that requests a GPU or carries a do-not-disrupt annotation keeps the node
(and it is uncordoned again). If the pods cannot be read, nothing more is terminated this tick.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

from policy import capacity_blocks, closing, emf, fanout, loan_usage, notifications, shard_budget, tick_state
from policy.deadline import MESSAGE as DEADLINE_MESSAGE
from policy.deadline import Deadline
from policy.decide import decide
from policy.decide.lend_ahead import lend_ahead_on, owner_forecast_gpus
from policy.lease import take as take_lease
from policy.errors import DeadlineExceeded, MalformedState, PolicyError
from policy.io.kube import lending_of
from policy.pods import elastic_shapes
from policy.ports import (
    LEASE_KEY,
    BlockDatesPort,
    FloorQuotaPort,
    GroupState,
    MALFORMED_VERSION,
    NodeGroupPort,
    NodeGuardPort,
    NodeRef,
    PendingPodsPort,
    StatePort,
    UtilizationSource,
)
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_SET_LENDING_LIMIT,
    ACTION_TERMINATE,
    BLOCK_UNREAD,
    INSTANCE_ID,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_LEAVING,
    Action,
    BlockDates,
    Lending,
    Node,
    Observation,
    Plan,
    PoolObservation,
    Settings,
)
from policy.rhythm import DailyArrivals
from policy.spend import BudgetReader, accrue, observe_spend

STATE_KEY = "tick"
ENV_SCOPE = "environment"


def pool_scope(pool: str) -> str:
    return f"pool:{pool}"


@dataclass
class Ports:
    groups: NodeGroupPort
    utilization: UtilizationSource
    pods: PendingPodsPort | None = None
    budgets: BudgetReader | None = None
    state: StatePort | None = None
    publisher: notifications.Publisher | None = None
    nodes: NodeGuardPort | None = None  # cordon + pods on a node; without it nothing is terminated
    # Kueue: a Capacity Block's floor quota (policy/capacity_blocks.py), a lending floor's lendingLimit
    # (policy/decide/lend_ahead.py), the queues' status (policy/loan_usage.py)
    queues: FloorQuotaPort | None = None
    blocks: BlockDatesPort | None = None  # EC2: the Capacity Blocks' real dates; without it the config's window rules


@dataclass
class TickResult:
    plan: Plan
    applied: list[Action] = field(default_factory=list)
    failed: list[tuple[Action, str]] = field(default_factory=list)
    blocked: list[tuple[Action, str]] = field(default_factory=list)  # terminations a pod on the node forbade
    errors: list[str] = field(default_factory=list)
    notified: list[str] = field(default_factory=list)  # subjects
    skipped: str = ""  # why the tick did nothing at all (another tick holds the lease)

    def summary(self) -> dict:
        return {
            "dry_run": self.plan.dry_run,
            "applied": len(self.applied),
            "failed": len(self.failed),
            "blocked": len(self.blocked),
            "skipped": self.skipped,
            "errors": self.errors,
            "notified": self.notified,
            "changes": [{"pool": a.pool, **a.to_dict()} for a in self.plan.changes],
        }


def _recorder(errors: list[str]) -> Callable[[Exception], None]:
    def record(err: Exception) -> None:
        line = f"{type(err).__name__}: {err}"
        if line not in errors:  # a passed deadline fails every later call with the same message
            errors.append(line)

    return record


def observe(
    settings: Settings,
    ports: Ports,
    state: dict,
    now: datetime,
    errors: list[str],
    deadline: Deadline | None = None,
    node_names: dict[str, str] | None = None,
    leaving: frozenset[str] = frozenset(),
    environment: bool = True,
) -> Observation:
    """What this tick can see. `node_names` (filled when given): instance id -> Kubernetes node name.
    `leaving`: spot instances under EC2's 2-minute interruption notice: seen as leaving (not capacity, never
    reclaimed), and the GPU pods on them as pending (they need a place before the instance goes).
    `environment`: read the environment budget's spend into this tick's state (False for a shard's tick, which
    shares it with the other shards instead: policy/shard_budget.py)."""
    record = _recorder(errors)

    def in_time() -> bool:
        if deadline is not None and deadline.expired:
            record(DeadlineExceeded(DEADLINE_MESSAGE))
            return False
        return True

    read = _with_own_changes(_read_groups(settings, ports, now, record, in_time), state, now)
    if node_names is not None:
        node_names.update({i.instance_id: i.node_name for gs in read.values() for i in gs.instances})
    series = _read_utilization(settings, ports, read, now, record, in_time)
    pods = _read_pods(settings, ports, now, record, in_time)
    rhythm = _rhythm_rates(settings, state, pods.arrivals, now)
    displaced = _displaced(settings, ports, read, pods.pending is not None, leaving, record, in_time)
    scopes: dict[str, str | None] = {}
    if settings.budget_monthly_usd is not None and environment:
        scopes[ENV_SCOPE] = settings.budget_name
    for ps in settings.pools:  # every pool, budget or not: the running estimate feeds the spend metrics
        scopes[pool_scope(ps.name)] = ps.budget_name if ps.budget_monthly_usd is not None else None
    spends = observe_spend(
        state,
        scopes,
        ports.budgets if in_time() else None,
        now,
        settings.budget_refresh_minutes,
        record,
        settings.aws_calls_in_flight,
    )
    block_dates = _block_dates(settings, ports, record, in_time)
    quotas = _floor_quotas(settings, ports, record, in_time)
    lendings = _lendings(settings, ports, _lend_forecasts(settings, state, now), record, in_time)
    pools = []
    for ps in settings.pools:
        groups, nodes = _pool_groups_and_nodes(ps, read, series, pods.bound, leaving, now)
        pools.append(
            PoolObservation(
                ps.name,
                groups,
                nodes,
                None if pods.pending is None else pods.pending.get(ps.name, ()) + tuple(displaced.get(ps.name, ())),
                spends.get(pool_scope(ps.name)),
                None if pods.arrivals is None else pods.arrivals.get(ps.name, ()),
                rhythm.get(ps.name),
                floor_quota_gpus=quotas.get(ps.name),
                pending_gangs=pods.gangs.get(ps.name, ()),
                on_demand_only_pod_gpus=None if pods.off_spot is None else pods.off_spot.get(ps.name, ()),
                block_dates=block_dates.get(ps.name),
                lending=lendings.get(ps.name),
            )
        )
    return Observation(tuple(pools), spends.get(ENV_SCOPE))


def _read_groups(settings: Settings, ports: Ports, now: datetime, record, in_time) -> dict[str, GroupState]:
    """Every pool's groups (elastic and floor) in one batched read; each group that fails is left out (its pool
    holds), the others are kept."""
    names, spot_groups = [], set[str]()
    for ps in settings.pools:
        names += list(ps.elastic_groups) + ([ps.guaranteed_group] if ps.guaranteed_group else [])
        spot_groups.update(ps.spot_groups)  # every size's (policy/sizes.py)
    if not in_time():
        return {}
    try:
        return ports.groups.read(names, now, spot_groups, record)
    except PolicyError as err:
        record(err)
        return {}


def _read_utilization(
    settings: Settings, ports: Ports, read: dict[str, GroupState], now: datetime, record, in_time
) -> dict:
    refs = [
        NodeRef(i.instance_id, i.node_name)
        for gs in read.values()
        for i in gs.instances
        if i.lifecycle == LIFECYCLE_IN_SERVICE
    ]
    window = max(
        max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes) for ps in settings.pools
    )
    if not refs or not in_time():
        return {}
    try:
        return ports.utilization.read(refs, now, window)
    except PolicyError as err:
        record(err)
        return {}


@dataclass
class _Pods:
    """What the tick knows of the pods (None: unknown)."""

    pending: dict[str, tuple[int, ...]] | None = None
    off_spot: dict[str, tuple[int, ...]] | None = None
    arrivals: dict[str, tuple] | None = None
    gangs: dict[str, tuple] = field(default_factory=dict)
    bound: dict[str, int] | None = None


def _read_pods(settings: Settings, ports: Ports, now: datetime, record, in_time) -> _Pods:
    """Pending demand, the pods that may not run on spot, recent arrivals, gangs and GPU pods per node: one pod list
    read (policy/io/kube.py), each view of it unknown on its own failure."""
    out = _Pods()
    names = [ps.name for ps in settings.pools]
    # Only pods that could run on a pool's elastic groups are demand for them (floor-pinned work is not).
    shapes = {
        ps.name: elastic_shapes(ps.name, ps.spot_group is not None, ps.on_demand_group is not None)
        for ps in settings.pools
    }
    # Pending demand also counts, in a pool with spot, the pods that may run on on-demand nodes only, whether the
    # pool has an on-demand group or not: the engine grows that group for them, or reports that none can, and
    # never buys spot for them (docs/policy.md, "Pods that may not run on spot").
    demand_shapes = {
        ps.name: elastic_shapes(
            ps.name, ps.spot_group is not None, ps.on_demand_group is not None or ps.spot_group is not None
        )
        for ps in settings.pools
    }
    if ports.pods is None:
        record(PolicyError("Kubernetes API not configured or its endpoint unknown: pending pods are unknown"))
        return out
    if not in_time():
        return out
    try:
        out.pending = ports.pods.pending_gpus(names, demand_shapes)
    except PolicyError as err:
        record(err)
        return out
    if in_time():
        try:  # the same pod list again: which pending pods may not run on spot
            out.off_spot = ports.pods.pending_on_demand_only(names, demand_shapes)
        except PolicyError as err:
            record(err)  # unknown: every pending pod counts spot-first, as before this was read
    if in_time():
        window = max(ps.arrival_window_minutes for ps in settings.pools)
        try:
            out.arrivals = ports.pods.gpu_pod_arrivals(names, now - timedelta(minutes=window), shapes)
        except PolicyError as err:
            record(err)  # unknown arrivals keep no idle node warm: they go as before, once idle
    if in_time():
        try:  # the same pod list again: which pending pods start only together (policy/gangs.py)
            out.gangs = ports.pods.pending_gangs(names, demand_shapes)
        except PolicyError as err:
            record(err)  # unknown gangs: every pending pod counts on its own, as before gangs were read
    try:  # the same pod list as the pending pods: no extra call
        out.bound = ports.pods.gpu_pods_by_node()
    except PolicyError as err:
        record(err)
    return out


def _displaced(
    settings: Settings,
    ports: Ports,
    read: dict[str, GroupState],
    pods_known: bool,
    leaving: frozenset[str],
    record,
    in_time,
) -> dict[str, list[int]]:
    """The GPU pods on instances under a spot notice, per pool: pending work from now on."""
    displaced: dict[str, list[int]] = {}
    if not leaving or not pods_known or ports.nodes is None:
        return displaced
    for ps in settings.pools:
        for gname in ps.elastic_groups:
            gs = read.get(gname)
            for inst in gs.instances if gs is not None else ():
                if inst.instance_id not in leaving or not inst.node_name or not in_time():
                    continue
                try:
                    displaced.setdefault(ps.name, []).extend(ports.nodes.node_pod_gpus(inst.node_name))
                except PolicyError as err:
                    record(err)  # its pods stay unseen: replaced when they come back pending
    return displaced


def _floor_quotas(settings: Settings, ports: Ports, record, in_time) -> dict[str, int]:
    """Capacity Block pools with Kueue: their floor flavor's quota now (unknown: left as it is this tick)."""
    quotas: dict[str, int] = {}
    for ps in settings.pools:
        if ps.capacity_block_queue and capacity_blocks.is_block(ps) and ports.queues is not None and in_time():
            try:
                quotas[ps.name] = ports.queues.floor_quota(
                    ps.capacity_block_queue_api, ps.capacity_block_queue, ps.capacity_block_flavor or ""
                )
            except PolicyError as err:
                record(err)
    return quotas


def _pool_groups_and_nodes(
    ps, read: dict[str, GroupState], series: dict, bound: dict[str, int] | None, leaving: frozenset[str], now: datetime
) -> tuple[tuple, tuple]:
    groups, nodes = [], []
    idle, scale_up, empty = ps.idle_timeout_minutes, ps.scale_up_window_minutes, ps.empty_timeout_minutes
    for gname in ps.elastic_groups + ((ps.guaranteed_group,) if ps.guaranteed_group else ()):
        gs = read.get(gname)
        if gs is None:
            continue
        if gname in ps.elastic_groups or (gname == ps.guaranteed_group and capacity_blocks.is_block(ps)):
            groups.append(gs.group)  # a Capacity Block's group too: the policy keeps its window
        for inst in gs.instances:
            iid, node_name = inst.instance_id, inst.node_name
            s = series.get(iid)
            nodes.append(
                Node(
                    iid,
                    gname,
                    inst.launched_at or now,  # unknown launch time = just launched: never idle on a guess
                    LIFECYCLE_LEAVING if iid in leaving else inst.lifecycle,
                    s.max_over(now, idle) if s else None,
                    s.avg_over(now, scale_up) if s else None,
                    s.reserved_max_over(now, empty) if s else None,
                    s.max_over(now, empty) if s else None,
                    bound.get(node_name, 0) if bound is not None and node_name else None,
                    instance_type=inst.instance_type,
                )
            )
    return tuple(groups), tuple(nodes)


def _block_dates(settings: Settings, ports: Ports, record, in_time) -> dict[str, BlockDates]:
    """Per Capacity Block pool with a reservation id: its dates and state from EC2 (one call for every block), or
    BlockDates(state=BLOCK_UNREAD) when they could not be read (each failure, a block EC2 did not return, and any
    mismatch with config are tick errors: PolicyErrors and the error email). Without the port: none (config)."""
    pools = {
        ps.name: ps.capacity_block_reservation_id
        for ps in settings.pools
        if capacity_blocks.is_block(ps) and ps.capacity_block_reservation_id
    }
    if not pools or ports.blocks is None:
        return {}
    read: dict[str, BlockDates] | None = None  # None: not answered
    if in_time():
        try:
            read = ports.blocks.read(sorted(set(pools.values())))
        except PolicyError as err:
            record(
                PolicyError(
                    f"Capacity Block dates unread ({type(err).__name__}: {err}); no block is drained or "
                    "scaled down on its configured dates alone this tick"
                )
            )
    out: dict[str, BlockDates] = {}
    for name, rid in pools.items():
        dates = (read or {}).get(rid)
        if dates is None:
            if read is not None:  # the call answered without this block
                record(
                    PolicyError(
                        f"Capacity Block {rid} of pool {name}: EC2 did not return it (another account's, "
                        "or a wrong guaranteed.reservation_id); no drain or scale-down on config alone"
                    )
                )
            out[name] = BlockDates(rid, BLOCK_UNREAD)
            continue
        try:
            problem = capacity_blocks.mismatch(settings.pool(name), dates)
        except ValueError:
            problem = None  # unreadable configured times: block_actions reports them
        if problem:
            record(PolicyError(f"Capacity Block {rid} of pool {name}: {problem}"))
        out[name] = dates
    return out


CHANGES_KEPT = timedelta(days=1)  # far longer than any cooldown or fallback wait the engine measures


def _with_own_changes(read: dict[str, GroupState], state: dict, now: datetime) -> dict[str, GroupState]:
    """Each group's last change: the later of its last scaling activity (spot groups, read by the adapter) and the
    last change this policy made to it (the tick state's "changed", written when a change is applied). The node
    group's own modifiedAt would need a DescribeNodegroup per group per tick; the policy is what changes an elastic
    group's size, so its own record is the figure that matters for the cooldown and the spot fallback's wait."""
    changed = state.get("changed") or {}
    out = dict(read)
    for name, gs in read.items():
        if name not in changed:
            continue
        mine = datetime.fromisoformat(changed[name])  # checked by tick_state.clean
        if mine > now:
            continue  # a time ahead of the clock (a hand edit, a restored item) would hold the cooldown forever
        last = gs.group.last_change_at
        if last is None or mine > last:
            out[name] = dataclasses.replace(gs, group=dataclasses.replace(gs.group, last_change_at=mine))
    return out


def _record_changes(state: dict, applied: list[Action], now: datetime) -> None:
    """Remember when this tick changed each group (a size or a termination), for the next ticks' cooldown and
    fallback wait; entries older than CHANGES_KEPT go."""
    changed = {
        g: t
        for g, t in (state.get("changed") or {}).items()
        if timedelta(0) <= now - datetime.fromisoformat(t) < CHANGES_KEPT
    }
    for a in applied:
        if a.kind in (ACTION_SET_DESIRED, ACTION_TERMINATE) and a.group:
            changed[a.group] = now.isoformat()
    if changed:
        state["changed"] = changed
    else:
        state.pop("changed", None)


def _rhythm_rates(
    settings: Settings, state: dict, arrivals: dict[str, tuple] | None, now: datetime
) -> dict[str, float | None]:
    """For each pool with warm_up or lend-ahead: count this tick's new arrivals into the pool's daily history (kept
    in the state, policy/rhythm.py); for warm_up, read the rate the same time of day brought on earlier days.
    Unknown arrivals (pods unreadable) record nothing, so that tick's day is no evidence of a quiet one."""
    rates: dict[str, float | None] = {}
    for ps in settings.pools:
        if not ps.warm_up and not lend_ahead_on(ps):
            continue
        history = DailyArrivals.from_state((state.get("rhythm") or {}).get(ps.name))
        if arrivals is not None:
            history.record(now, arrivals.get(ps.name, ()))
            state.setdefault("rhythm", {})[ps.name] = history.to_state()
        if ps.warm_up:
            rates[ps.name] = history.expected_rate_nodes_per_minute(now, 2 * ps.launch_minutes, ps.gpus_per_node)
    return rates


def _lend_forecasts(settings: Settings, state: dict, now: datetime) -> dict[str, float | None]:
    """For each lend-ahead pool: the GPUs its arrivals brought over the next reclaim_lookahead_minutes at this time
    of day on earlier days (the history _rhythm_rates keeps); None while unknown."""
    return {
        ps.name: owner_forecast_gpus(
            DailyArrivals.from_state((state.get("rhythm") or {}).get(ps.name)), now, ps.reclaim_lookahead_minutes
        )
        for ps in settings.pools
        if lend_ahead_on(ps)
    }


def _lendings(
    settings: Settings, ports: Ports, forecasts: dict[str, float | None], record, in_time
) -> dict[str, Lending]:
    """Lend-ahead pools: their floor flavor as its ClusterQueue has it now (policy/io/kube.py lending_of); a queue
    that cannot be read is left out (the rule then changes nothing, LEND_UNKNOWN)."""
    out: dict[str, Lending] = {}
    for ps in settings.pools:
        if not lend_ahead_on(ps) or ports.queues is None or not in_time():
            continue
        try:
            cq = ports.queues.cluster_queue(ps.loan_queue_api, ps.lend_ahead_queue or "")
            out[ps.name] = lending_of(cq, ps.lend_ahead_flavor or "", forecasts.get(ps.name))
        except PolicyError as err:
            record(err)
    return out


def _apply(
    settings: Settings,
    plan: Plan,
    obs: Observation,
    ports: Ports,
    result: TickResult,
    deadline: Deadline | None = None,
    node_names: dict[str, str] | None = None,
) -> None:
    """Carry out the plan's changes. Each is first checked here (behind IAM: only the pool's elastic groups, one
    kind of change per group, only instances observed in the group); the groups about to change are read again all
    at once (`_recheck_all`); then each group's changes are made in the plan's order, the groups side by side (at
    most `settings.aws_calls_in_flight` at once, policy/fanout.py). Outcomes are reported in the plan's order."""
    record = _recorder(result.errors)
    kinds: dict[str, str] = {}
    accepted: dict[str, list[Action]] = {}  # group -> its changes to make, in the plan's order
    outcomes: dict[int, tuple[str, str]] = {}  # id(action) -> ("applied" | "failed" | "blocked", why)
    for a in plan.changes:
        ps = settings.pool(a.pool)
        if a.kind == capacity_blocks.ACTION_SET_QUOTA:
            _apply_quota(a, ps, plan, obs, ports, result, record, deadline)
            continue
        if a.kind == ACTION_SET_LENDING_LIMIT:
            _apply_lending_limit(a, ps, ports, result, record, deadline)
            continue
        why = _refusal(a, ps, plan, obs, kinds)
        if why is not None:
            outcomes[id(a)] = ("failed", why)
            continue
        accepted.setdefault(a.group or "", []).append(a)
    fresh: dict[str, GroupState | None] = {}  # each group as read again before its first change (None: unreadable)
    to_recheck = [
        g for g, acts in accepted.items() if any(a.kind in (ACTION_SET_DESIRED, ACTION_TERMINATE) for a in acts)
    ]
    if to_recheck and not (deadline is not None and deadline.expired):
        _recheck_all(to_recheck, ports, fresh, record, settings.aws_calls_in_flight)
    run = _GroupRun(settings, obs, ports, deadline, node_names or {}, fresh)
    problems: list[Exception] = []
    for _, done, err in fanout.each(run.group, list(accepted.values()), settings.aws_calls_in_flight):
        if err is not None or done is None:  # a bug, not AWS: every change of that group counts as not applied
            problems.append(err or PolicyError("a group's changes ended without an outcome"))
            continue
        outcomes.update(done[0])
        problems.extend(done[1])
    for err in problems:
        record(err)
    for a in plan.changes:
        if a.kind in (capacity_blocks.ACTION_SET_QUOTA, ACTION_SET_LENDING_LIMIT):
            continue  # reported by _apply_quota / _apply_lending_limit
        what, why = outcomes.get(id(a), ("failed", "not applied: its group's changes were cut short"))
        if what == "applied":
            result.applied.append(a)
        elif what == "blocked":
            result.blocked.append((a, why))
        else:
            result.failed.append((a, why))


def _refusal(a: Action, ps, plan: Plan, obs: Observation, kinds: dict[str, str]) -> str | None:
    """Why `a` is refused before anything is read or written, or None. Defence in depth behind IAM: only this
    pool's elastic groups, only instances observed in them; a Capacity Block's group only for what its window
    allows now (policy/capacity_blocks.py)."""
    if a.group not in ps.elastic_groups and not (
        plan.decided_at is not None and capacity_blocks.may_touch(ps, a, plan.decided_at, _dates(obs, a.pool))
    ):
        return (
            f"refused: {a.group} is not an elastic group of {a.pool}, nor a Capacity Block group inside the "
            "window that allows this action"
        )
    if kinds.setdefault(a.group or "", a.kind) != a.kind:
        # The engine never plans this (a property test); refuse it here too: EKS applies a desired size
        # asynchronously, so it could land after the terminations and relaunch them.
        return f"refused: {a.group} already gets a {kinds[a.group or '']} this tick"
    if a.kind in (ACTION_TERMINATE, capacity_blocks.ACTION_CHECKPOINT):
        po = obs.pool(a.pool)
        if po is None or not any(n.instance_id == a.instance_id and n.group == a.group for n in po.nodes):
            return f"refused: {a.instance_id} is not in {a.group}"
    return None


def _recheck_all(groups: list[str], ports: Ports, fresh: dict[str, GroupState | None], record, in_flight: int) -> None:
    """Every group about to change, read again at once: the port's batched `recheck_many` where it has one (one
    DescribeNodegroup per group side by side, their Auto Scaling groups in one call per 50), else `recheck` per
    group. A group that could not be read is None: nothing is changed on it, and the failure is reported."""
    many = getattr(ports.groups, "recheck_many", None)
    if many is not None:
        try:
            got = many(groups)
        except PolicyError as err:
            got = {g: err for g in groups}
    else:
        got = {
            g: (value if err is None else err) for g, value, err in fanout.each(ports.groups.recheck, groups, in_flight)
        }
    for g in groups:
        value = got.get(g)
        if isinstance(value, GroupState):
            fresh[g] = value
        else:
            if isinstance(value, Exception):
                record(value if isinstance(value, PolicyError) else PolicyError(f"{type(value).__name__}: {value}"))
            fresh[g] = None


class _GroupRun:
    """The changes of one group, in order, against that group as read again (`fresh`), which each change moves on
    (so a second change to it is checked against what the first left). Groups run side by side: what they share
    is `blind` (once the pods of a node could not be read, no further termination starts in any group)."""

    def __init__(
        self,
        settings: Settings,
        obs: Observation,
        ports: Ports,
        deadline: Deadline | None,
        node_names: dict[str, str],
        fresh: dict[str, GroupState | None],
    ):
        self.settings, self.obs, self.ports, self.deadline = settings, obs, ports, deadline
        self.node_names, self.fresh = node_names, fresh
        self.blind = ""
        self._lock = threading.Lock()

    def group(self, acts: list[Action]) -> tuple[dict[int, tuple[str, str]], list[Exception]]:
        outcomes: dict[int, tuple[str, str]] = {}
        problems: list[Exception] = []
        for a in acts:
            outcomes[id(a)] = self._one(a, problems)
        return outcomes, problems

    def _one(self, a: Action, problems: list[Exception]) -> tuple[str, str]:
        if a.kind == ACTION_TERMINATE and self.blind:
            return "failed", f"not terminated: {self.blind}"
        if self.deadline is not None and self.deadline.expired:
            problems.append(DeadlineExceeded(DEADLINE_MESSAGE))
            return "failed", "not applied: tick deadline reached"
        if a.kind in (ACTION_SET_DESIRED, ACTION_TERMINATE):
            why = _verdict(a, self.fresh)
            if why is not None:
                return "failed", why
        ports = self.ports
        try:
            if a.kind == ACTION_SET_DESIRED:
                ports.groups.set_desired(a.group, a.desired_to)  # type: ignore[arg-type]  # _verdict: both set
                _after_change(
                    self.fresh,
                    a.group,
                    lambda gs: dataclasses.replace(gs, group=dataclasses.replace(gs.group, desired_nodes=a.desired_to)),
                )
            elif a.kind == capacity_blocks.ACTION_CHECKPOINT:
                why = _checkpoint(
                    a,
                    ports,
                    self.node_names.get(a.instance_id or "", ""),
                    self.settings.pool(a.pool),
                    _dates(self.obs, a.pool),
                )
                if why is not None:
                    return "failed", why
            elif a.kind == ACTION_TERMINATE:
                why = _guard_and_terminate(a, ports, self.node_names.get(a.instance_id or "", ""))
                if why is not None:
                    return "blocked", why
                _after_change(
                    self.fresh,
                    a.group,
                    lambda gs: GroupState(
                        dataclasses.replace(gs.group, desired_nodes=max(0, gs.group.desired_nodes - 1)),
                        tuple(i for i in gs.instances if i.instance_id != a.instance_id),
                    ),
                )
            return "applied", ""
        except _Blind as err:
            with self._lock:
                self.blind = self.blind or str(err)
            problems.append(err.cause)
            return "failed", f"not terminated: {err}"
        except PolicyError as err:
            problems.append(err)
            return "failed", f"{type(err).__name__}: {err}"


def _after_change(fresh: dict[str, GroupState | None], group: str | None, change) -> None:
    """The group as this tick left it, so a second change to it in the same tick is checked against that."""
    gs = fresh.get(group) if group is not None else None
    if group is not None and gs is not None:
        fresh[group] = change(gs)


def _verdict(a: Action, fresh: dict[str, GroupState | None]) -> str | None:
    """Why `a` may not be carried out on its group as read again just now (`_recheck_all`), or None. The tick's
    read is seconds old by then (metrics, pods, a cordon in between), and the batched read cannot see an EKS update
    in progress: the group's status and size are read again (once per group per tick) and the change is refused
    unless the group is ACTIVE and still has the size, or the instance, the decision was made on. The next tick
    decides again."""
    group = a.group
    if group is None:  # every resize and termination names its group (model.Action); refuse one that does not
        return "refused: the change names no node group"
    gs = fresh.get(group)
    if gs is None:
        return f"not applied: {a.group} could not be read again just before the change"
    if gs.group.status != "ACTIVE":
        return f"refused: {a.group} is {gs.group.status or 'of unknown status'} (read again before the change)"
    if a.kind == ACTION_SET_DESIRED:
        if a.desired_from is not None and gs.group.desired_nodes != a.desired_from:
            return (
                f"refused: {a.group}'s desired size is {gs.group.desired_nodes} now, not the {a.desired_from} "
                "this tick decided on; the next tick decides again"
            )
        return None
    if not any(i.instance_id == a.instance_id and not i.lifecycle.startswith(LEAVING_STATES) for i in gs.instances):
        return f"refused: {a.instance_id} is no longer in {a.group}, or is already leaving it (read again)"
    return None


LEAVING_STATES = ("Terminat", "Detach")  # Auto Scaling lifecycle states of an instance on its way out


def _apply_quota(
    a: Action, ps, plan: Plan, obs: Observation, ports: Ports, result: TickResult, record, deadline
) -> None:
    """A Capacity Block's Kueue floor quota, only to the value its window wants now (behind RBAC, which allows
    get/patch of the block pools' ClusterQueues only)."""
    if (
        plan.decided_at is None
        or a.desired_to is None
        or not capacity_blocks.may_touch(ps, a, plan.decided_at, _dates(obs, a.pool))
    ):
        result.failed.append(
            (
                a,
                f"refused: the floor quota of {a.pool} is not a Capacity Block's, or the window "
                "does not ask for this value now",
            )
        )
        return
    if ports.queues is None:
        result.failed.append((a, "not applied: no Kubernetes access"))
        return
    if deadline is not None and deadline.expired:
        record(DeadlineExceeded(DEADLINE_MESSAGE))
        result.failed.append((a, "not applied: tick deadline reached"))
        return
    try:
        ports.queues.set_floor_quota(
            ps.capacity_block_queue_api, ps.capacity_block_queue, ps.capacity_block_flavor, a.desired_to
        )
        result.applied.append(a)
    except PolicyError as err:
        result.failed.append((a, f"{type(err).__name__}: {err}"))
        record(err)


def _apply_lending_limit(a: Action, ps, ports: Ports, result: TickResult, record, deadline) -> None:
    """A lend-ahead floor's Kueue lendingLimit (policy/decide/lend_ahead.py), only on the pool's own floor queue
    and flavor and within [0, the configured limit] (behind RBAC, which allows patch of those queues only). The
    nominalQuota, the guarantee, is never written here."""
    if not lend_ahead_on(ps) or a.desired_to is None or not 0 <= a.desired_to <= ps.lend_ahead_limit_gpus:
        result.failed.append(
            (a, f"refused: {a.pool} does not lend ahead, or {a.desired_to} is outside [0, {ps.lend_ahead_limit_gpus}]")
        )
        return
    if ports.queues is None:
        result.failed.append((a, "not applied: no Kubernetes access"))
        return
    if deadline is not None and deadline.expired:
        record(DeadlineExceeded(DEADLINE_MESSAGE))
        result.failed.append((a, "not applied: tick deadline reached"))
        return
    try:
        ports.queues.set_lending_limit(
            ps.loan_queue_api, ps.lend_ahead_queue or "", ps.lend_ahead_flavor or "", a.desired_to
        )
        result.applied.append(a)
    except PolicyError as err:
        result.failed.append((a, f"{type(err).__name__}: {err}"))
        record(err)


class _Blind(Exception):
    """The pods of a node could not be read: terminate nothing more this tick."""

    def __init__(self, message: str, cause: PolicyError):
        super().__init__(message)
        self.cause = cause


def _guard_and_terminate(a: Action, ports: Ports, node_name: str) -> str | None:
    """Cordon the node, read its pods, terminate it if none forbids it. Returns why it was kept, or None when it
    was terminated. Raises _Blind when the pods could not be read (the node is uncordoned again, if we cordoned
    it), PolicyError when the termination itself failed."""
    if ports.nodes is None:
        raise _Blind(
            "the Kubernetes API is unavailable, so the node's pods cannot be checked",
            PolicyError("no Kubernetes access: terminations skipped"),
        )
    if not node_name:
        return f"{a.instance_id} has no known Kubernetes node name, so its pods cannot be checked"
    try:
        cordoned = ports.nodes.cordon(node_name)  # first, so no pod lands between the check and the termination
    except PolicyError as err:
        raise _Blind(f"{node_name} could not be cordoned ({type(err).__name__})", err) from err
    try:
        blockers = ports.nodes.blockers(node_name)
    except PolicyError as err:
        _uncordon(ports, node_name, cordoned)
        raise _Blind(f"the pods on {node_name} could not be read ({type(err).__name__})", err) from err
    if blockers:
        _uncordon(ports, node_name, cordoned)
        return f"kept: {'; '.join(blockers[:3])}{' ...' if len(blockers) > 3 else ''}"
    try:
        ports.groups.terminate(a.instance_id or "")  # named: _apply matched it to an observed node
    except PolicyError:
        _uncordon(ports, node_name, cordoned)
        raise
    return None


def _dates(obs: Observation, pool: str) -> BlockDates | None:
    po = obs.pool(pool)
    return po.block_dates if po is not None else None


def _checkpoint(a: Action, ports: Ports, node_name: str, ps, dates: BlockDates | None = None) -> str | None:
    """A Capacity Block node ahead of EKS's scale-down: cordon it (nothing new lands there; pending work goes to the
    elastic groups) and mark its GPU pods with the time to checkpoint by. Idempotent: every tick of the drain
    repeats it, so a pod that started meanwhile is marked too. Returns why it was not done, or None."""
    if ports.nodes is None:
        return "not drained: no Kubernetes access"
    if not node_name:
        return f"not drained: {a.instance_id} has no known Kubernetes node name"
    by = capacity_blocks.scale_down_at(capacity_blocks.window(ps, dates)[1])  # EC2's end when it was read
    ports.nodes.cordon(node_name)  # a PolicyError here is recorded by _apply; the next tick tries again
    ports.nodes.mark_checkpoint(
        node_name, capacity_blocks.CHECKPOINT_BY_ANNOTATION, by.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    return None


def _uncordon(ports: Ports, node_name: str, cordoned: bool) -> None:
    """Undo our own cordon only: a node someone else cordoned stays cordoned."""
    if cordoned and ports.nodes is not None:
        try:
            ports.nodes.uncordon(node_name)
        except PolicyError:
            pass  # the next tick's check cordons/reads again; a cordoned idle node is reclaimed anyway


def run_tick(
    settings: Settings,
    ports: Ports,
    now: datetime,
    log: Callable[[str], None] = print,
    deadline: Deadline | None = None,
    persist: bool = True,
    errors: list[str] | None = None,
    lease: tuple[str, float] | None = None,
    leaving: tuple[str, ...] = (),
    sleep: Callable[[float], None] = time.sleep,
    shard: str | None = None,
) -> TickResult:
    """One tick. `deadline`: when reads and writes stop (policy/deadline.py). `persist`: write the state back
    (False for a replay at an explicit time, which must not move spend or notification timestamps). `errors`:
    failures already met while building the ports (e.g. the cluster endpoint could not be read). `lease`:
    (holder, seconds): a live tick with a state table acts only while it holds the table's lease
    (policy/io/state.py), so two overlapping ticks never both change capacity. `leaving`: instance ids named by a
    spot interruption warning this invocation received. Such an invocation first records them in the state
    table (without the lease, so a held lease cannot lose them), then waits for the lease within its deadline
    (policy/lease.py); every tick merges the records, for the notice's length. `sleep`: the wait between tries.
    `shard`: decide only that shard's pools (settings.shards; KeyError for a name it lacks), under the shard's
    own lease and tick state, the environment budget shared with the other shards (policy/shard_budget.py)."""
    errors = list(errors or [])
    full = settings
    if shard is None and settings.shards:
        # Every pool at once beside the shards' own ticks would decide a pool twice under two leases.
        errors.append("BadSettings: a tick of an environment with shards must name its shard; nothing was done")
        log(emf.error_line(settings.environment, len(errors), now))
        log(json.dumps({"level": "ERROR", "message": "tick errors", "errors": errors}, sort_keys=True))
        return TickResult(Plan((), dry_run=settings.dry_run, decided_at=now), errors=errors, skipped="no shard")
    if shard is not None:
        settings = full.shard(shard)
    lease_key = shard_budget.lease_key(shard) if shard is not None else LEASE_KEY
    leaving = tuple(i for i in leaving if INSTANCE_ID.fullmatch(i))  # the handler checked; a caller may not have
    recorded = False
    if leaving and ports.state is not None and persist:
        recorded = _record_warning(settings, ports.state, leaving, now, errors, log)
    holder = None
    waited: float | None = 0.0
    if lease is not None and ports.state is not None and persist and not settings.dry_run:
        try:
            waited = take_lease(
                ports.state,
                lease[0],
                lease[1],
                now.timestamp(),
                deadline,
                patient=bool(leaving),
                sleep=sleep,
                key=lease_key,
            )
        except PolicyError as err:
            _recorder(errors)(err)
            log(emf.error_line(settings.environment, len(errors), now))
            log(json.dumps({"level": "ERROR", "message": "tick errors", "errors": errors}, sort_keys=True))
            return TickResult(Plan((), dry_run=False, decided_at=now), errors=errors, skipped="lease unreadable")
        if waited is None:
            if not leaving:
                log(
                    json.dumps(
                        {
                            "level": "WARNING",
                            "message": "another tick holds the lease: this one does nothing",
                            "environment": settings.environment,
                        }
                    )
                )
            else:
                log(
                    json.dumps(
                        {
                            "level": "WARNING" if recorded else "ERROR",
                            "environment": settings.environment,
                            "instances": list(leaving),
                            "message": (
                                "spot warning left to the next tick: another tick held the lease for as long as "
                                "this invocation could wait; the instance is recorded, so the next tick (within "
                                "a minute) treats it as leaving"
                            )
                            if recorded
                            else (
                                "spot warning not acted on and not recorded: another tick held the lease "
                                "and the record failed; the instance is seen only when its pods are evicted"
                            ),
                        }
                    )
                )
            if leaving and errors:  # e.g. the record failed: loud although this invocation does nothing else
                log(emf.error_line(settings.environment, len(errors), now))
                log(json.dumps({"level": "ERROR", "message": "tick errors", "errors": errors}, sort_keys=True))
            return TickResult(Plan((), dry_run=False, decided_at=now), errors=errors, skipped="lease held")
        holder = lease[0]
        now += timedelta(seconds=waited)  # the tick runs at the time it got the lease
    if leaving:
        log(
            json.dumps(
                {
                    "level": "INFO",
                    "message": "spot warning acted on by this invocation",
                    "environment": settings.environment,
                    "instances": list(leaving),
                    "waited_for_lease_s": round(waited or 0.0, 3),
                }
            )
        )
    result = None
    try:
        result = _run(
            settings, ports, now, log, deadline, persist, errors, leaving, (full, shard) if shard is not None else None
        )
        return result
    finally:
        if holder is not None and ports.state is not None:
            try:
                if shard is None:
                    ports.state.release_lease(holder)
                else:
                    ports.state.release_lease(holder, key=lease_key)
            except PolicyError as err:
                # It expires by itself (the function's timeout) and the next tick takes it over then; until then
                # ticks do nothing, which is worth a trace: a log line, and a PolicyErrors datapoint of its own.
                message = f"lease not released ({type(err).__name__}: {err}); ticks wait until it expires"
                if result is not None:
                    result.errors.append(message)
                log(json.dumps({"level": "ERROR", "message": "tick errors", "errors": [message]}, sort_keys=True))
                log(emf.error_line(settings.environment, 1, now))


SPOT_NOTICE_MINUTES = 2  # EC2 reclaims a spot instance 2 minutes after its interruption warning


def _notice_expiry(now: datetime) -> float:
    """Until when an instance warned at `now` counts as leaving: the notice plus a minute for clocks."""
    return now.timestamp() + (SPOT_NOTICE_MINUTES + 1) * 60


def _record_warning(
    settings: Settings,
    state: StatePort,
    leaving: tuple[str, ...],
    now: datetime,
    errors: list[str],
    log: Callable[[str], None],
) -> bool:
    """Record the warned instances before anything else; a failure is a tick error (PolicyErrors), never silent."""
    expires = _notice_expiry(now)
    try:
        state.record_leaving(dict.fromkeys(leaving, expires))
    except (PolicyError, ValueError) as err:
        _recorder(errors)(PolicyError(f"spot warning not recorded ({', '.join(leaving)}): {type(err).__name__}: {err}"))
        return False
    log(
        json.dumps(
            {
                "level": "INFO",
                "message": "spot warning recorded: every tick treats these instances as "
                "leaving until the notice runs out",
                "environment": settings.environment,
                "instances": list(leaving),
                "expires_at": datetime.fromtimestamp(expires, now.tzinfo).isoformat(),
            }
        )
    )
    return True


def record_spot_warning(
    settings: Settings,
    state: StatePort | None,
    leaving: tuple[str, ...],
    now: datetime,
    log: Callable[[str], None] = print,
) -> TickResult:
    """A spot warning whose instance no shard could be found for (policy/handler.py): recorded in the shared
    "leaving" item only, no tick. Every shard's next tick merges the record, and the shard that owns the instance
    treats it as leaving (within a schedule interval); a failed record is a tick error, never silent."""
    errors: list[str] = []
    leaving = tuple(i for i in leaving if INSTANCE_ID.fullmatch(i))
    if state is None:
        errors.append(f"spot warning not recorded ({', '.join(leaving)}): no state table")
    elif leaving:
        _record_warning(settings, state, leaving, now, errors, log)
    log(emf.error_line(settings.environment, len(errors), now))
    if errors:
        log(json.dumps({"level": "ERROR", "message": "tick errors", "errors": errors}, sort_keys=True))
    return TickResult(
        Plan((), dry_run=settings.dry_run, decided_at=now),
        errors=errors,
        skipped="spot warning recorded for the shard that owns the instance",
    )


def _leaving(
    state: dict, new: tuple[str, ...], now: datetime, recorded: dict[str, float] | None = None
) -> frozenset[str]:
    """Instances under a spot notice: those of this invocation, those earlier ticks stored in the tick state, and
    those warning invocations recorded in the "leaving" item (`recorded`, policy/io/state.py), until the notice (plus
    a minute for clocks) has run out; the tick state keeps them with their expiry (epoch seconds)."""
    kept = {
        i: t for i, t in (state.get("leaving") or {}).items() if isinstance(t, (int, float)) and t > now.timestamp()
    }
    for iid, t in (recorded or {}).items():
        if t > now.timestamp():
            kept[iid] = max(t, kept.get(iid, t))
    for iid in new:
        kept[iid] = _notice_expiry(now)
    if kept:
        state["leaving"] = kept
    else:
        state.pop("leaving", None)
    return frozenset(kept)


def _notify(settings: Settings, plan: Plan, ports: Ports, state: dict, now: datetime, result: TickResult) -> None:
    """Notify what was done (an action that failed or that a pod on the node forbade did not happen), every message
    of the tick in as few calls as the publisher allows (notifications.publish_all)."""
    if ports.publisher is None:
        return
    not_done = {id(a) for a, _ in result.failed} | {id(a) for a, _ in result.blocked}
    messages = []
    for d in plan.decisions:
        ps = settings.pool(d.pool)
        if not_done:
            d = dataclasses.replace(d, actions=tuple(a for a in d.actions if id(a) not in not_done))
        for kind in notifications.kinds_of(d):
            if not notifications.due(state, f"{d.pool}:{kind}", now, settings.notify_min_interval_minutes):
                continue
            budget = ps.budget_monthly_usd if ps.budget_monthly_usd is not None else settings.budget_monthly_usd
            messages.append(notifications.render(kind, settings.environment, d, budget, plan.dry_run))
    for msg, err in zip(messages, notifications.publish_all(ports.publisher, [(m.subject, m.body) for m in messages])):
        if err is None:
            result.notified.append(msg.subject)
        else:
            _recorder(result.errors)(err)


def no_log(line: str) -> None:
    """A tick's `log` that drops every line; given it, the tick does not build its decision and metric lines."""


def spend_rates(settings: Settings, plan: Plan) -> dict[str, tuple[float, float]]:
    """What each spend scope accrues per hour while `plan` holds: (total, elastic) USD/hour per pool (floor +
    elastic) and for the environment (with the commitments' unused fees, billed every hour, used or not). The
    simulator accounts the ticks it skips with it (sim/controllers/gpuloan.py)."""
    rates = {}
    total_env = elastic_env = 0.0
    for d in plan.decisions:
        ps = settings.pool(d.pool)
        total = ps.guaranteed_usd_per_hour + d.elastic_usd_per_hour
        rates[pool_scope(d.pool)] = (total, d.elastic_usd_per_hour)
        total_env += total
        elastic_env += d.elastic_usd_per_hour
    rates[ENV_SCOPE] = (total_env + settings.commitment_unused_usd_per_hour, elastic_env)
    return rates


def _run(
    settings: Settings,
    ports: Ports,
    now: datetime,
    log: Callable[[str], None],
    deadline: Deadline | None,
    persist: bool,
    errors: list[str],
    leaving: tuple[str, ...] = (),
    sharded: tuple[Settings, str] | None = None,
) -> TickResult:
    state: dict = {}
    state_key = STATE_KEY if sharded is None else shard_budget.tick_key(sharded[1])
    version = 0
    recorded: dict[str, float] = {}
    if ports.state is not None:
        try:
            recorded = ports.state.load_leaving()
        except PolicyError as err:  # warnings recorded by other invocations are unknown: their pods are seen
            errors.append(f"{type(err).__name__}: {err}")  # once evicted, as without the record
        try:
            state, version = ports.state.load(state_key)
        except MalformedState as err:  # read, but not ours to use: reported, and rewritten by this tick's save
            errors.append(f"{type(err).__name__}: {err}; the tick's bookkeeping starts afresh")
            state, version = {}, err.version if err.version is not None else MALFORMED_VERSION
        except PolicyError as err:
            errors.append(f"{type(err).__name__}: {err}")
            ports = Ports(**{**ports.__dict__, "state": None})  # never overwrite state we could not read
        state, problems = tick_state.clean(state)
        errors.extend(f"MalformedState: tick state {p}; dropped for this tick" for p in problems)
    expired = sorted(i for i, t in recorded.items() if t <= now.timestamp())
    if expired and ports.state is not None and persist:
        try:  # the expired records go; one that was recorded again meanwhile stays (a conditional remove)
            ports.state.prune_leaving(expired, now.timestamp())
        except PolicyError as err:
            errors.append(f"{type(err).__name__}: {err}")
    node_names: dict[str, str] = {}
    obs = observe(
        settings,
        ports,
        state,
        now,
        errors,
        deadline,
        node_names,
        _leaving(state, leaving, now, recorded),
        environment=sharded is None,
    )
    if sharded is None:
        plan = decide(settings, obs, now)
    else:  # the environment budget's headroom, reserved against the other shards' before anything changes
        plan = shard_budget.decide_and_reserve(
            sharded[0], sharded[1], settings, obs, ports.state, ports.budgets, now, _recorder(errors), persist=persist
        )
    result = TickResult(plan, errors=errors)
    if not plan.dry_run:
        _apply(settings, plan, obs, ports, result, deadline, node_names)
        _record_changes(state, result.applied, now)
        for name, closed in closing.apply(settings, plan, obs, ports.nodes, node_names, _recorder(result.errors)):
            log(
                json.dumps(
                    {
                        "level": "INFO",
                        "message": "back to spot: on-demand node closed to new pods"
                        if closed
                        else "back to spot: on-demand node open to new pods again",
                        "node": name,
                        "environment": settings.environment,
                    }
                )
            )

    accrue(state, spend_rates(settings, plan), now)
    # The loan's usage from Kueue's queue status: before the error mail (a new problem is in it, once: the state
    # keeps it until it clears).
    loan_lines = loan_usage.tick_lines(settings, ports.queues, state, now, deadline, result.errors, log)

    _notify(settings, plan, ports, state, now, result)
    if (
        result.errors
        and ports.publisher is not None
        and notifications.due(state, "all:error", now, settings.notify_min_interval_minutes)
    ):
        msg = notifications.render_error(settings.environment, "; ".join(result.errors)[:1000])
        try:
            ports.publisher.publish(msg.subject, msg.body)
            result.notified.append(msg.subject)
        except PolicyError:
            pass  # already counted in PolicyErrors; SNS itself is down

    if ports.state is not None and persist:
        try:
            ports.state.save(state_key, state, version)
        except PolicyError as err:
            result.errors.append(f"{type(err).__name__}: {err}")

    if log is no_log:
        return result  # nobody reads the lines: not built (the simulator's ticks, sim/controllers/gpuloan.py)
    failed = {id(a): why for a, why in result.failed}
    blocked = {id(a): why for a, why in result.blocked}
    for d in plan.decisions:
        ps = settings.pool(d.pool)
        spend_state = (state.get("spend") or {}).get(pool_scope(d.pool)) or {}
        log(
            json.dumps(
                {
                    "level": "INFO",
                    "message": "pool decision",
                    "environment": settings.environment,
                    "pool": d.pool,
                    "dry_run": plan.dry_run,
                    "decided_at": now.isoformat(),
                    "actions": [
                        {
                            **a.to_dict(),
                            **({"failed": failed[id(a)]} if id(a) in failed else {}),
                            **({"blocked": blocked[id(a)]} if id(a) in blocked else {}),
                        }
                        for a in d.actions
                    ],
                    "desired_after": d.desired_after,
                    "pending_gpus": d.pending_gpus,
                    "elastic_usd_per_hour": round(d.elastic_usd_per_hour, 4),
                    "month_to_date_usd": d.month_to_date_usd,
                    "projected_month_usd": d.projected_month_usd,
                    "fallback_active": d.fallback_active,
                    "utilization_pct": d.utilization_pct,
                },
                sort_keys=True,
                default=str,
            )
        )
        capacity_of = {g: ps.capacity_of(g) for g in ps.elastic_groups}
        for line in emf.pool_lines(
            settings.environment, d, capacity_of, ps.elastic_max_nodes, spend_state.get("elastic_month_usd"), now
        ):
            log(line)
    for line in loan_lines:
        log(line)
    log(emf.error_line(settings.environment, len(result.errors), now))
    if result.errors:
        log(json.dumps({"level": "ERROR", "message": "tick errors", "errors": result.errors}, sort_keys=True))
    return result
