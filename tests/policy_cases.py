"""Builders shared by the policy engine tests (table cases, properties, handler tests)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from policy.model import LIFECYCLE_IN_SERVICE, Group, Node, Observation, PoolObservation, PoolSettings, Settings, Spend

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)
SPOT, OD, FLOOR = "research-spot", "research-od", "research-floor"


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def pool_settings(name: str = "research", **kw) -> PoolSettings:
    base = dict(
        name=name,
        team="research",
        tier="experiment",
        gpus_per_node=1,
        spot_group=SPOT if name == "research" else f"{name}-spot",
        on_demand_group=OD if name == "research" else f"{name}-od",
        guaranteed_group=FLOOR if name == "research" else f"{name}-floor",
        spot_max_nodes=4,
        on_demand_max_nodes=2,
        spot_usd_per_hour=0.41,
        on_demand_usd_per_hour=1.0,
        guaranteed_nodes=1,
        guaranteed_usd_per_hour=0.80,
        scale_up_utilization_pct=80,
        scale_up_window_minutes=10,
        idle_utilization_pct=5,
        idle_timeout_minutes=30,
        cooldown_minutes=5,
        max_step_nodes=4,
        fallback_after_minutes=10,
    )
    base.update(kw)
    return PoolSettings(**base)


def settings(
    *pools: PoolSettings, env_budget: float | None = None, enforcement: str = "cap_elastic", dry_run: bool = False
) -> Settings:
    return Settings(
        environment="dev",
        region="us-east-1",
        cluster_name="gpuloan-dev",
        pools=pools or (pool_settings(),),
        budget_monthly_usd=env_budget,
        budget_enforcement=enforcement,
        dry_run=dry_run,
    )


def node(
    iid: str,
    group: str = SPOT,
    age: float = 120,
    max_util: float | None = 50.0,
    avg_util: float | None = None,
    lifecycle: str = LIFECYCLE_IN_SERVICE,
    reserved: float | None = None,
    recent_util: float | None = None,
) -> Node:
    """An elastic node; `recent_util` (max over the empty window) defaults to `max_util` (the longer window's
    max bounds it from above, so the default never makes a node look idler than its max)."""
    return Node(
        iid,
        group,
        ago(age),
        lifecycle,
        max_util,
        max_util if avg_util is None else avg_util,
        reserved,
        max_util if recent_util is None else recent_util,
    )


def idle(iid: str, group: str = SPOT, max_util: float = 0.0, age: float = 120) -> Node:
    """A node every signal calls idle: low utilization over every window and no GPU requested by a pod."""
    return node(iid, group, age, max_util, reserved=0.0)


def group(
    name: str = SPOT,
    desired: int = 0,
    changed: float | None = 60,
    status: str = "ACTIVE",
    shortage: bool = False,
    max_nodes: int = 0,
) -> Group:
    return Group(name, desired, 0, max_nodes, status, None if changed is None else ago(changed), shortage)


def observe(groups=None, nodes=(), pending=(), spend=None, env_spend=None, name="research") -> Observation:
    if groups is None:
        groups = (
            group(SPOT, sum(1 for n in nodes if n.group == SPOT)),
            group(OD, sum(1 for n in nodes if n.group == OD)),
        )
    return Observation((PoolObservation(name, tuple(groups), tuple(nodes), pending, spend),), env_spend)


def spend(actual: float | None, since: float = 0.0) -> Spend:
    return Spend(actual, since, ago(90))


SHARDINGS = (0, 1, 2)  # how the property and fault suites run a tick: no shards, one shard of all, two shards


def sharded(s: Settings, shards: int) -> tuple[Settings, str | None]:
    """`s` run as `shards` shards (docs/policy.md, "Shards"), and the shard its first pool is in (None: no shards).
    Two shards: a second pool "teamb", which has no groups in the test's world, in a shard of its own."""
    import dataclasses

    from policy.model import ShardSettings

    if shards == 0:
        return s, None
    if shards == 1:
        return dataclasses.replace(s, shards=(ShardSettings("all", tuple(p.name for p in s.pools)),)), "all"
    other = pool_settings("teamb")
    return dataclasses.replace(
        s,
        pools=(*s.pools, other),
        shards=(ShardSettings("one", tuple(p.name for p in s.pools)), ShardSettings("two", ("teamb",))),
    ), "one"


def tick_key(shard: str | None) -> str:
    """The tick state item of `shard` (policy/shard_budget.py), "tick" without shards."""
    from policy import shard_budget
    from policy.tick import STATE_KEY

    return STATE_KEY if shard is None else shard_budget.tick_key(shard)
