"""One tick of the policy function over injected ports: read the world, decide, apply, report.

Every read failure is recorded and turned into missing data (which never shrinks capacity); every write
failure is recorded and left for the next tick (level-triggered). Nothing here raises for an AWS or
Kubernetes failure, so a bad minute never becomes a crash-and-retry loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from policy import emf, notifications
from policy.engine import decide
from policy.errors import PolicyError
from policy.kube import PendingPodsPort
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    LIFECYCLE_IN_SERVICE,
    Action,
    Node,
    Observation,
    Plan,
    PoolObservation,
    Settings,
)
from policy.nodegroups import NodeGroupPort
from policy.spend import BudgetReader, accrue, observe_spend
from policy.state import StatePort
from policy.utilization import NodeRef, UtilizationSource

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


@dataclass
class TickResult:
    plan: Plan
    applied: list[Action] = field(default_factory=list)
    failed: list[tuple[Action, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notified: list[str] = field(default_factory=list)  # subjects

    def summary(self) -> dict:
        return {"dry_run": self.plan.dry_run, "applied": len(self.applied), "failed": len(self.failed),
                "errors": self.errors, "notified": self.notified,
                "changes": [{"pool": a.pool, **a.to_dict()} for a in self.plan.changes]}


def observe(settings: Settings, ports: Ports, state: dict, now: datetime, errors: list[str]) -> Observation:
    def record(err: Exception) -> None:
        errors.append(f"{type(err).__name__}: {err}")

    names, spot_groups = [], set()
    for ps in settings.pools:
        names += list(ps.elastic_groups) + ([ps.guaranteed_group] if ps.guaranteed_group else [])
        if ps.spot_group:
            spot_groups.add(ps.spot_group)
    try:
        read = ports.groups.read(names, now, spot_groups)
    except PolicyError as err:
        record(err)
        read = {}
    refs = [NodeRef(i.instance_id, i.node_name) for gs in read.values() for i in gs.instances
            if i.lifecycle == LIFECYCLE_IN_SERVICE]
    window = max(max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes)
                 for ps in settings.pools)
    series = {}
    if refs:
        try:
            series = ports.utilization.read(refs, now, window)
        except PolicyError as err:
            record(err)
    pending: dict[str, tuple[int, ...]] | None = None
    if ports.pods is not None:
        try:
            pending = ports.pods.pending_gpus([ps.name for ps in settings.pools])
        except PolicyError as err:
            record(err)
    scopes: dict[str, str | None] = {}
    if settings.budget_monthly_usd is not None:
        scopes[ENV_SCOPE] = settings.budget_name
    for ps in settings.pools:  # every pool, budget or not: the running estimate feeds the spend metrics
        scopes[pool_scope(ps.name)] = ps.budget_name if ps.budget_monthly_usd is not None else None
    spends = observe_spend(state, scopes, ports.budgets, now, settings.budget_refresh_minutes, record)

    pools = []
    for ps in settings.pools:
        groups, nodes = [], []
        for gname in ps.elastic_groups + ((ps.guaranteed_group,) if ps.guaranteed_group else ()):
            gs = read.get(gname)
            if gs is None:
                continue
            if gname in ps.elastic_groups:
                groups.append(gs.group)
            for inst in gs.instances:
                s = series.get(inst.instance_id)
                nodes.append(Node(
                    inst.instance_id, gname,
                    inst.launched_at or now,  # unknown launch time = just launched: never idle on a guess
                    inst.lifecycle,
                    s.max_over(now, ps.idle_timeout_minutes) if s else None,
                    s.avg_over(now, ps.scale_up_window_minutes) if s else None,
                    s.reserved_max_over(now, ps.empty_timeout_minutes) if s else None,
                ))
        pools.append(PoolObservation(ps.name, tuple(groups), tuple(nodes),
                                     None if pending is None else pending.get(ps.name, ()),
                                     spends.get(pool_scope(ps.name))))
    return Observation(tuple(pools), spends.get(ENV_SCOPE))


def _apply(settings: Settings, plan: Plan, obs: Observation, ports: Ports, result: TickResult) -> None:
    for a in plan.changes:
        ps = settings.pool(a.pool)
        # Defence in depth behind IAM: only this pool's elastic groups, only instances observed in them.
        if a.group not in ps.elastic_groups:
            result.failed.append((a, f"refused: {a.group} is not an elastic group of {a.pool}"))
            continue
        if a.kind == ACTION_TERMINATE:
            po = obs.pool(a.pool)
            if not any(n.instance_id == a.instance_id and n.group == a.group for n in po.nodes):
                result.failed.append((a, f"refused: {a.instance_id} is not in {a.group}"))
                continue
        try:
            if a.kind == ACTION_SET_DESIRED:
                ports.groups.set_desired(a.group, a.desired_to)
            elif a.kind == ACTION_TERMINATE:
                ports.groups.terminate(a.instance_id)
            result.applied.append(a)
        except PolicyError as err:
            result.failed.append((a, f"{type(err).__name__}: {err}"))
            result.errors.append(f"{type(err).__name__}: {err}")


def run_tick(settings: Settings, ports: Ports, now: datetime, log: Callable[[str], None] = print) -> TickResult:
    errors: list[str] = []
    state, version = {}, 0
    if ports.state is not None:
        try:
            state, version = ports.state.load(STATE_KEY)
        except PolicyError as err:
            errors.append(f"{type(err).__name__}: {err}")
            ports = Ports(**{**ports.__dict__, "state": None})  # never overwrite state we could not read
    obs = observe(settings, ports, state, now, errors)
    plan = decide(settings, obs, now)
    result = TickResult(plan, errors=errors)
    if not plan.dry_run:
        _apply(settings, plan, obs, ports, result)

    rates = {}
    total_env = elastic_env = 0.0
    for d in plan.decisions:
        ps = settings.pool(d.pool)
        total = ps.guaranteed_usd_per_hour + d.elastic_usd_per_hour
        rates[pool_scope(d.pool)] = (total, d.elastic_usd_per_hour)
        total_env += total
        elastic_env += d.elastic_usd_per_hour
    rates[ENV_SCOPE] = (total_env, elastic_env)
    accrue(state, rates, now)

    for d in plan.decisions:
        ps = settings.pool(d.pool)
        for kind in notifications.kinds_of(d):
            if ports.publisher is None or not notifications.due(state, f"{d.pool}:{kind}", now,
                                                                settings.notify_min_interval_minutes):
                continue
            budget = ps.budget_monthly_usd if ps.budget_monthly_usd is not None else settings.budget_monthly_usd
            msg = notifications.render(kind, settings.environment, d, budget, plan.dry_run)
            try:
                ports.publisher.publish(msg.subject, msg.body)
                result.notified.append(msg.subject)
            except PolicyError as err:
                result.errors.append(f"{type(err).__name__}: {err}")
    if result.errors and ports.publisher is not None and notifications.due(
            state, "all:error", now, settings.notify_min_interval_minutes):
        msg = notifications.render_error(settings.environment, "; ".join(result.errors)[:1000])
        try:
            ports.publisher.publish(msg.subject, msg.body)
            result.notified.append(msg.subject)
        except PolicyError:
            pass  # already counted in PolicyErrors; SNS itself is down

    if ports.state is not None:
        try:
            ports.state.save(STATE_KEY, state, version)
        except PolicyError as err:
            result.errors.append(f"{type(err).__name__}: {err}")

    failed = {id(a): why for a, why in result.failed}
    for d in plan.decisions:
        ps = settings.pool(d.pool)
        spend_state = (state.get("spend") or {}).get(pool_scope(d.pool)) or {}
        log(json.dumps({
            "level": "INFO", "message": "pool decision", "environment": settings.environment, "pool": d.pool,
            "dry_run": plan.dry_run, "decided_at": now.isoformat(),
            "actions": [{**a.to_dict(), **({"failed": failed[id(a)]} if id(a) in failed else {})} for a in d.actions],
            "desired_after": d.desired_after, "pending_gpus": d.pending_gpus,
            "elastic_usd_per_hour": round(d.elastic_usd_per_hour, 4),
            "month_to_date_usd": d.month_to_date_usd, "projected_month_usd": d.projected_month_usd,
            "fallback_active": d.fallback_active, "utilization_pct": d.utilization_pct,
        }, sort_keys=True, default=str))
        capacity_of = {g: ps.capacity_of(g) for g in ps.elastic_groups}
        for line in emf.pool_lines(settings.environment, d, capacity_of, ps.elastic_max_nodes,
                                   spend_state.get("elastic_month_usd"), now):
            log(line)
    log(emf.error_line(settings.environment, len(result.errors), now))
    if result.errors:
        log(json.dumps({"level": "ERROR", "message": "tick errors", "errors": result.errors}, sort_keys=True))
    return result
