"""The one bound of every scale-up (rule 3: `scale.scale_up`, `on_demand_only.scale_on_demand_only`): how many of
the nodes a rule wants it may add to a group, under the group's effective max, the step (max_step_nodes, never
splitting a gang) and each capped budget scope's projection (BUDGET_CAP, BUDGET_UNKNOWN). One function, so the
rules cannot drift apart (issue 34: the budget cap and the group max were written out in each rule)."""

from __future__ import annotations

import math
from collections.abc import Callable

from policy.decide.budget import Scope
from policy.decide.common import hold, step_limit
from policy.model import Action, Group, PoolSettings, Timers
from policy.terms import Reason


def group_max(ps: PoolSettings, name: str, group: Group | None) -> int:
    """A group's effective max: the configured maximum, and the node group's own when it reports one (above 0)."""
    limit = ps.max_nodes(name)
    return limit if group is None or group.max_nodes <= 0 else min(limit, group.max_nodes)


def bound(
    ps: PoolSettings,
    target: Group,
    base: int,
    want: int,
    added_this_tick: int,
    scopes: list[Scope],
    timers: Timers,
    why: str,
    whole: Callable[[int, int], int] | None = None,
    largest_gang: int = 0,
) -> tuple[int, list[Action]]:
    """(nodes `target` may grow by from `base`, the holds that say what cut `want`).

    `added_this_tick`: nodes already added to the pool this tick, which count against the step. `whole(add, want)`
    (policy/gangs.py GangView.whole): the most of `add` that buys no part of a gang; with it the step never
    splits a gang (`largest_gang` nodes come in one step) and every cut drops whole gangs. Each capped scope's
    headroom is consumed by what is added, so the next scale-up of the tick sees what is left."""
    name = ps.name
    holds: list[Action] = []
    limit = group_max(ps, target.name, target)
    room = max(0, limit - base)
    step = max(0, step_limit(ps) - added_this_tick)
    add = min(want, step if whole is None else max(step, largest_gang), room)
    if whole is not None:
        add = whole(add, want)
    if add < want and room < want:
        holds.append(hold(name, Reason.AT_MAX, f"{why}; {target.name} is at {base}/{limit}", group=target.name))
    price = ps.usd_per_hour(target.name)
    for s in scopes:
        if not s.capped:
            continue
        if not s.known:
            # Unknown spend is not zero: without an actual figure from AWS Budgets (unreadable now and none kept in
            # the state) the month so far could already be at the budget, so a capped scope buys nothing.
            holds.append(
                hold(
                    name,
                    Reason.BUDGET_UNKNOWN,
                    f"{why}; {s.name} month-to-date spend is unknown "
                    f"(no AWS Budgets figure read this month), so cap_elastic refuses the scale-up",
                    group=target.name,
                )
            )
            add = 0
            break
        affordable = max(0, math.floor(s.headroom_usd_per_hour / price + 1e-9)) if price > 0 else add
        s.read_headroom(timers, affordable, add)
        if affordable < add:
            holds.append(
                hold(
                    name,
                    Reason.BUDGET_CAP,
                    f"{why}; {s.name} budget ${s.budget_usd:,.0f} affords "
                    f"{affordable} more node(s) (month-to-date ${s.month_to_date_usd:,.0f} + projection)",
                    group=target.name,
                )
            )
            add = affordable if whole is None else whole(affordable, want)
    if add > 0:
        for s in scopes:
            s.headroom_usd_per_hour -= add * price
    return add, holds
