"""The environment budget's cap across shards (docs/policy.md, "Shards"; issue 41).

A shard's tick decides only its own pools, but the environment budget caps all of them together: no shard may
spend headroom another already spent. The shards share one item of the state table, "budget#environment"
(policy/io/state.py: {"pk", "version", "data"}), holding
- `spend.environment`: the environment's month-to-date spend (the last AWS Budgets actual + the running estimate
  since, policy/spend.py), which every shard's tick adds its own pools' spend to;
- `shards.<name>`: the hourly rate each shard reserved at its last tick (`usd_per_hour`: its floors plus the larger
  of its elastic groups' rate before and after its plan) and when it last added its spend (`accrued_at`).

A tick reads the item, decides with the other shards' reservations counted in the environment's rate (so the
headroom it sees is what they left), and writes its own reservation back with DynamoDB's conditional PutItem on the
item's version BEFORE it changes anything. When another shard wrote in between, the write fails
(ConditionalCheckFailedException, ConflictingUpdate here) and the tick reads the item again and decides again against
the new reservations, RESERVE_ATTEMPTS times at most. A tick whose reservation is not stored, or that cannot read
the item, decides with the environment's spend unknown: a capped environment buys nothing (BUDGET_UNKNOWN), and an
unknown spend never drains anything. A shard that has never reserved (its first tick, or its entry lost) counts at
its worst case, every floor and every elastic group at its max: unknown spend is not zero. A shard that stopped
ticking keeps its last reservation, which still runs.

Not a lock: each shard still has its own lease and deadline (policy/lease.py), and a failing shard stops nobody;
the version condition only orders the shards' reservations.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Callable

from policy.decide import decide
from policy.decide.pool import elastic_rate
from policy.errors import ConflictingUpdate, DataUnavailable, MalformedState, PolicyError
from policy.model import Observation, Plan, PoolSettings, Settings
from policy.spend import MAX_ACCRUAL_GAP, BudgetReader, observe_spend
from policy.ports import MALFORMED_VERSION, StatePort

ENV_BUDGET_KEY = "budget#environment"
ENV_SCOPE = "environment"  # the scope name of policy/tick.py's spend state
RESERVE_ATTEMPTS = 3  # reads and decisions per tick when other shards keep writing in between


def tick_key(shard: str) -> str:
    """A shard's own tick state item (the unsharded tick's is "tick")."""
    return f"tick#{shard}"


def lease_key(shard: str) -> str:
    """A shard's own lease item (the unsharded tick's is "lease")."""
    return f"lease#{shard}"


def worst_case_usd_per_hour(ps: PoolSettings) -> float:
    """A pool's most spend per hour: its floor and every elastic group at its configured max."""
    return ps.guaranteed_usd_per_hour + sum(ps.max_nodes(g) * ps.usd_per_hour(g) for g in ps.elastic_groups)


def others_usd_per_hour(full: Settings, shard: str, shared: dict) -> float:
    """The hourly rate the other shards hold reserved; a shard without a usable entry at its worst case."""
    found = shared.get("shards")
    entries: dict = found if isinstance(found, dict) else {}
    total = 0.0
    for sh in full.shards:
        if sh.name == shard:
            continue
        rate = _rate(entries.get(sh.name))
        total += rate if rate is not None else sum(worst_case_usd_per_hour(full.pool(p)) for p in sh.pools)
    return total


def _rate(entry) -> float | None:
    if not isinstance(entry, dict):
        return None
    rate = entry.get("usd_per_hour")
    return float(rate) if isinstance(rate, (int, float)) and rate >= 0 else None


def reserved_usd_per_hour(settings: Settings, obs: Observation, plan: Plan) -> float:
    """What this shard reserves: per pool its floor and the larger of its elastic rate now and after the plan (a
    change that fails leaves the old rate running), and a group it could not read at its max (unknown is not
    zero)."""
    after = {d.pool: d.elastic_usd_per_hour for d in plan.decisions}
    total = 0.0
    for ps in settings.pools:
        po = obs.pool(ps.name)
        now_rate = elastic_rate(ps, po) if po is not None else 0.0
        unread = sum(
            ps.max_nodes(g) * ps.usd_per_hour(g) for g in ps.elastic_groups if po is None or po.group(g) is None
        )
        planned = after.get(ps.name, 0.0) if not plan.dry_run else 0.0  # a dry run changes nothing
        total += ps.guaranteed_usd_per_hour + max(now_rate, planned) + unread
    return total


def _accrue_and_reserve(shared: dict, full: Settings, shard: str, reserved: float, now: datetime) -> None:
    """Add this shard's spend since its last tick (at the rate it reserved then) to the environment's estimate, and
    store its new reservation. The first shard also carries the commitments' unused fees (environment spend)."""
    entries = shared.setdefault("shards", {})
    mine = entries.get(shard) if isinstance(entries.get(shard), dict) else {}
    last, rate = mine.get("accrued_at"), _rate(mine)
    env = (shared.get("spend") or {}).get(ENV_SCOPE)
    if isinstance(last, str) and rate is not None and env is not None:
        try:
            gap = min(now - datetime.fromisoformat(last), MAX_ACCRUAL_GAP)
        except (TypeError, ValueError):
            gap = None
        if gap is not None and gap.total_seconds() > 0:
            if full.shards and full.shards[0].name == shard:
                rate += full.commitment_unused_usd_per_hour
            env["estimated_since_usd"] = float(env.get("estimated_since_usd", 0.0)) + rate * gap.total_seconds() / 3600
    entries[shard] = {"usd_per_hour": round(reserved, 6), "accrued_at": now.isoformat()}


def decide_and_reserve(
    full: Settings,
    shard: str,
    settings: Settings,
    obs: Observation,
    state: StatePort | None,
    budgets: BudgetReader | None,
    now: datetime,
    record: Callable[[Exception], None],
    persist: bool = True,
) -> Plan:
    """The plan of one shard's tick (`settings`: the shard's pools; `full`: every pool, for the others' worst
    case), its environment scope counting what the other shards reserved, and this shard's reservation stored
    (conditionally) before the plan is returned. Without an environment budget there is nothing to share: the
    shard's pools' own budgets are in its own tick state."""
    if settings.budget_monthly_usd is None:
        return decide(settings, obs, now)
    unknown = dataclasses.replace(
        obs, environment_spend=None, environment_others_usd_per_hour=others_usd_per_hour(full, shard, {})
    )
    if state is None:
        record(
            DataUnavailable(
                "no state table: the other shards' spend is unknown, so the environment budget allows no scale-up"
            )
        )
        return decide(settings, unknown, now)
    for _ in range(RESERVE_ATTEMPTS):
        try:
            shared, version = state.load(ENV_BUDGET_KEY)
        except MalformedState as err:  # rewritten below; every other shard then counts at its worst case
            record(err)
            shared, version = {}, err.version if err.version is not None else MALFORMED_VERSION
        except PolicyError as err:
            record(err)
            return decide(settings, unknown, now)
        spend = observe_spend(
            shared,
            {ENV_SCOPE: settings.budget_name},
            budgets,
            now,
            settings.budget_refresh_minutes,
            record,
            settings.aws_calls_in_flight,
        )[ENV_SCOPE]
        plan = decide(
            settings,
            dataclasses.replace(
                obs, environment_spend=spend, environment_others_usd_per_hour=others_usd_per_hour(full, shard, shared)
            ),
            now,
        )
        if not persist:
            return plan  # a replay at an explicit time writes nothing (and changes nothing: a dry run)
        _accrue_and_reserve(shared, full, shard, reserved_usd_per_hour(settings, obs, plan), now)
        try:
            state.save(ENV_BUDGET_KEY, shared, version)
            return plan
        except ConflictingUpdate:
            continue  # another shard reserved in between: decide again against its reservation
        except PolicyError as err:
            record(err)
            break
    record(
        DataUnavailable(
            f"the environment budget's reservation ({ENV_BUDGET_KEY}) was not stored: no scale-up this tick"
        )
    )
    return decide(settings, unknown, now)
