"""The decision core: `decide(settings, observation, now) -> Plan`. Pure: no I/O, no clock, no randomness.

One rule per module, run in this order by `pool.decide_pool` (each module says its rule):
  pool.py            rule 1 (missing data holds the pool), the one pass over the nodes, the spot shortfall, the
                     order below; a pool of several node sizes one size at a time (policy/sizes.py)
  drain.py           rule 2, the budget drain (budget.py: the budget scopes, month-to-date and headroom)
  on_demand_only.py  rule 3 for the pods that may not run on spot (policy/off_spot.py)
  scale.py           rule 3, the scale-up, spot fallback, gangs (policy/gangs.py)
  bound.py           the one bound of every scale-up: the group's effective max, the step, the budget cap
  reclaim.py         rule 4, idle reclaim (idle.py: when a node is idle; keep_warm.py: release on cost)
  warm_up.py         rule 5, warm-up ahead of the daily rhythm
  lend_ahead.py      rule 7, a floor's Kueue lendingLimit ahead of its owner's forecast return
  common.py          what they share: packing, a group's price, a hold, the step
then rule 6 (policy/capacity_blocks.py) and rule 7 (lend_ahead.py) on the pool's decision.

The same function runs in the Lambda every tick and in the simulator every simulated minute, so it is kept
cheap (one pass over each pool's nodes, no copies of the observation). The plan says when the rules' own clocks
could change it (`Plan.next_decision_at`): each rule reports its timer to a `Timers` where the rule lives.

Rules per pool, in order (docs/policy.md explains each with its reason code):
1. A configured elastic group that could not be read holds the whole pool (HOLD_MISSING_DATA).
2. Budget drain: with cap_elastic, once month-to-date spend reaches a budget (pool or environment; the running
   estimate alone counts when no actual figure could be read), launches still in flight are cancelled and idle
   in-service elastic nodes are terminated by instance id, max_step_nodes per tick (BUDGET_DRAIN). A node with
   GPU work is never drained: it goes once it is idle.
3. Scale-up: pending pods targeting the pool are packed (first fit, decreasing) onto nodes of gpus_per_node (a
   pool of several node sizes: each size is decided by these rules for the pods policy/sizes.py gives it);
   the nodes they need beyond those already launching are added (SCALE_UP_PENDING). For a `service` pool only,
   sustained mean GPU utilization at or above the threshold adds one node when nothing is launching and no group
   is in cooldown (SCALE_UP_UTILIZATION); a `batch` pool scales to what is pending, exactly. Additions go to
   spot; while spot stays short of its desired size for fallback_after_minutes, or its activities report
   insufficient capacity, they go to on-demand (SPOT_FALLBACK), and the spot shortfall no longer counts as
   capacity. Once spot is back, the on-demand nodes are closed to new pods (back_to_spot, policy/back_to_spot.py:
   PoolDecision.closed_to_new_pods, SPOT_RECOVERED): no room for pending pods, never kept idle. Bounded by group
   max, max_step_nodes when set, and the budget projection (BUDGET_CAP). Pending gangs (pods that start only
   together, policy/gangs.py) are bought whole and in one step, and their wait is bounded by gang_wait_minutes:
   then on-demand, or their idle nodes released (GANG_RELEASED). Pending pods that may not run on spot
   (policy/off_spot.py) are packed onto the on-demand group directly, under the same bounds (ON_DEMAND_ONLY); the
   rules above and below see only the rest as pending, so no spot node is added or kept for them.
4. Idle reclaim (groups not resized this tick): in-service elastic nodes on which EVERY signal says idle (no
   GPU requested by a pod over the empty window, and GPU utilization below the idle threshold over the window
   the node is judged on: the empty window, or the idle window without a figure for it) are terminated by
   instance id, on-demand first (RECLAIM_IDLE), except those kept for pending pods that would fill them and
   those that pay for themselves at the pool's recent arrival rate (KEEP_WARM, `keep_warm_nodes`). A missing
   signal is busy; unknown pending pods hold.
5. Warm-up (opt-in, `warm_up`): spare nodes for the arrivals this time of day brought on earlier days are kept
   and, short of them, launched with the scale-up (WARM_UP, `warm_up_nodes`); the same cost rule as keeping an
   idle node, the same budget cap. Unknown history or node data: no warm-up.

6. Capacity Block floors: the window's rules on the block's own group (policy/capacity_blocks.py).

7. Lending ahead of the owner (opt-in, `lend_ahead`): the floor flavor's Kueue lendingLimit is lowered to what the
   owner's use, waiting work and daily rhythm leave idle over reclaim_lookahead_minutes, and raised again after
   (LEND_AHEAD, LEND_RESTORED); never its nominalQuota. Unknown rhythm: the configured limit.

Safety rules every plan keeps (tests/policy/test_policy_properties.py): the floor is never touched, except a Capacity
Block's group inside its window's rules (policy/capacity_blocks.py); a group gets one
kind of change per tick (set_desired or terminate, never both: UpdateNodegroupConfig is asynchronous, so an
absolute size could land after the terminations and relaunch them); no node with any sign of GPU work is
terminated. The tick adds the last check the engine cannot make: the node's pods, read just before terminating.
"""

from __future__ import annotations

from datetime import datetime

from policy.capacity_blocks import with_block_actions
from policy.decide.budget import Scope, hours_left_in_month, next_month_start
from policy.decide.common import group_usd_per_hour, pack_pods
from policy.decide.idle import ABOVE_IDLE, node_idle_threshold_pct, node_reading
from policy.decide.keep_warm import arrival_rate_nodes_per_minute, keep_warm_nodes, never_got_a_pod
from policy.decide.lend_ahead import with_lending_actions
from policy.decide.pool import decide_pool, decide_sizes, elastic_rate
from policy.decide.warm_up import warm_up_nodes
from policy.model import Observation, Plan, Settings, Timers


def decide(settings: Settings, observation: Observation, now: datetime) -> Plan:
    """Decide one tick for every pool of `settings`. Same inputs, same plan."""
    hours = hours_left_in_month(now)
    timers = Timers(now)
    rates = {}
    for ps in settings.pools:
        po = observation.pool(ps.name)
        rates[ps.name] = ps.guaranteed_usd_per_hour + (elastic_rate(ps, po) if po is not None else 0.0)
    env_scope = None
    if settings.budget_monthly_usd is not None:
        env_scope = Scope(
            "environment",
            settings.budget_monthly_usd,
            observation.environment_spend,
            sum(rates.values()) + settings.commitment_unused_usd_per_hour + observation.environment_others_usd_per_hour,
            hours,
            settings.budget_enforcement,
            settings.budget_refresh_minutes,
        )
    decisions = []
    for ps in settings.pools:
        po = observation.pool(ps.name)
        scopes = []
        if ps.budget_monthly_usd is not None:
            scopes.append(
                Scope(
                    f"pool {ps.name}",
                    ps.budget_monthly_usd,
                    po.spend if po else None,
                    rates[ps.name],
                    hours,
                    ps.budget_enforcement,
                    settings.budget_refresh_minutes,
                )
            )
        if env_scope is not None:
            scopes.append(env_scope)
        # A pool of several node sizes is decided one size at a time (policy/sizes.py). A floor on a Capacity
        # Block also gets its window's actions (policy/capacity_blocks.py).
        decision = (
            decide_sizes(ps, po, scopes, now, hours, timers)
            if ps.other_sizes and po is not None
            else decide_pool(ps, po, scopes, now, hours, timers)
        )
        decision = with_block_actions(ps, po, decision, now, timers)
        decisions.append(with_lending_actions(ps, po, decision, now, timers))
    return Plan(tuple(decisions), dry_run=settings.dry_run, decided_at=now, next_decision_at=timers.earliest)


__all__ = [
    "ABOVE_IDLE",
    "arrival_rate_nodes_per_minute",
    "decide",
    "group_usd_per_hour",
    "hours_left_in_month",
    "keep_warm_nodes",
    "never_got_a_pod",
    "next_month_start",
    "node_idle_threshold_pct",
    "node_reading",
    "pack_pods",
    "warm_up_nodes",
]
