"""Table-driven cases for policy.decide.decide: one named case per rule and edge (STYLE.md 9)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from policy.decide import decide, hours_left_in_month, pack_pods
from policy.model import LIFECYCLE_IN_SERVICE, LIFECYCLE_PENDING, Node, Observation, PoolObservation, Settings
from policy.terms import Reason
from policy_cases import FLOOR, NOW, OD, SPOT, ago, group, idle, node, observe, pool_settings, settings, spend

R = Reason


@dataclass
class Case:
    name: str
    obs: Observation
    changes: list[tuple]  # ("set", group, desired_to, reason) | ("term", instance_id, reason)
    reasons: set[Reason] = field(default_factory=set)  # must appear among the pool's actions
    settings: Settings = field(default_factory=settings)


def _busy(n: int, group_name: str = SPOT, util: float = 50.0):
    return [node(f"i-{group_name}-{k}", group_name, max_util=util) for k in range(n)]


_SERVICE = settings(pool_settings(workload="service"))


def _arrivals(obs: Observation, minutes_ago_gpus) -> Observation:
    """The observation with the pool's recent GPU pod arrivals, given as (minutes ago, GPUs)."""
    po = obs.pools[0]
    arr = tuple(sorted((ago(m), g) for m, g in minutes_ago_gpus))
    return Observation(
        (PoolObservation(po.name, po.groups, po.nodes, po.pending_pod_gpus, po.spend, arr),), obs.environment_spend
    )


def _node_reserved(iid: str, age: float, reserved: float | None, recent_util: float | None = None):
    """An elastic node too young for the idle rule (utilization data not yet covering 30 min)."""
    return Node(iid, SPOT, ago(age), LIFECYCLE_IN_SERVICE, None, 0.0, reserved, recent_util)


CASES = [
    Case("steady_without_demand", observe(), [], {R.STEADY}),
    Case("pending_one_gpu_adds_one_spot_node", observe(pending=(1,)), [("set", SPOT, 1, R.SCALE_UP_PENDING)]),
    Case(
        "pending_pods_are_packed_onto_multi_gpu_nodes",
        observe(pending=(4, 4, 2, 6)),
        [("set", "research-spot", 2, R.SCALE_UP_PENDING)],
        settings=settings(pool_settings(gpus_per_node=8)),
    ),
    Case(
        "launching_nodes_count_as_capacity",
        observe(
            groups=[group(SPOT, 2), group(OD, 0)],
            nodes=[node("i-a", lifecycle=LIFECYCLE_PENDING), node("i-b", lifecycle="Pending:Wait")],
            pending=(1, 1),
        ),
        [],
        {R.STEADY},
    ),
    Case(
        "desired_without_instances_yet_counts_as_capacity",
        observe(groups=[group(SPOT, 2, changed=1), group(OD, 0)], pending=(1, 1)),
        [],
    ),
    Case(
        "pending_beyond_launching_adds_the_difference",
        observe(groups=[group(SPOT, 1, changed=1), group(OD, 0)], pending=(1, 1, 1)),
        [("set", SPOT, 3, R.SCALE_UP_PENDING)],
    ),
    Case(
        "scale_up_limited_by_max_step",
        observe(pending=(1,) * 10),
        [("set", SPOT, 2, R.SCALE_UP_PENDING)],
        settings=settings(pool_settings(max_step_nodes=2, spot_max_nodes=10)),
    ),
    Case(
        "scale_up_limited_by_group_max",
        observe(groups=[group(SPOT, 3), group(OD, 0)], nodes=_busy(3), pending=(1, 1, 1)),
        [("set", SPOT, 4, R.SCALE_UP_PENDING)],
        {R.AT_MAX},
    ),
    Case("at_max_holds", observe(groups=[group(SPOT, 4), group(OD, 0)], nodes=_busy(4), pending=(1,)), [], {R.AT_MAX}),
    Case(
        "aws_group_max_below_configured_max_wins",
        observe(groups=[group(SPOT, 1, max_nodes=2), group(OD, 0)], nodes=_busy(1), pending=(1, 1, 1)),
        [("set", SPOT, 2, R.SCALE_UP_PENDING)],
        {R.AT_MAX},
    ),
    Case("pod_bigger_than_a_node_is_reported_not_scaled", observe(pending=(2,)), [], {R.HOLD_MISSING_DATA}),
    Case(
        "unknown_pending_neither_scales_nor_reclaims",
        observe(nodes=[node("i-idle", max_util=0.0)], pending=None),
        [],
        {R.HOLD_MISSING_DATA},
    ),
    Case(
        "high_utilization_adds_one_node_to_a_service_pool",
        observe(nodes=_busy(2, util=90)),
        [("set", SPOT, 3, R.SCALE_UP_UTILIZATION)],
        settings=_SERVICE,
    ),
    Case("high_utilization_adds_nothing_to_a_batch_pool", observe(nodes=_busy(2, util=95)), [], {R.STEADY}),
    Case(
        "high_utilization_waits_for_launching_nodes",
        observe(groups=[group(SPOT, 3, changed=1), group(OD, 0)], nodes=_busy(2, util=95)),
        [],
        settings=_SERVICE,
    ),
    Case(
        "high_utilization_in_cooldown_holds",
        observe(groups=[group(SPOT, 2, changed=2), group(OD, 0)], nodes=_busy(2, util=95)),
        [],
        {R.COOLDOWN},
        settings=_SERVICE,
    ),
    Case("utilization_below_threshold_is_steady", observe(nodes=_busy(2, util=60)), [], {R.STEADY}),
    Case("missing_utilization_never_scales_on_a_guess", observe(nodes=_busy(2, util=None)), []),
    Case(
        "busy_floor_drives_utilization_scale_up",
        observe(nodes=_busy(2, FLOOR, util=92)),
        [("set", SPOT, 1, R.SCALE_UP_UTILIZATION)],
        settings=_SERVICE,
    ),
    Case(
        "idle_node_is_terminated_by_instance_id",
        observe(nodes=[idle("i-idle", max_util=1.0), node("i-busy")]),
        [("term", "i-idle", R.RECLAIM_IDLE)],
    ),
    Case("busy_node_is_never_reclaimed", observe(nodes=[node("i-busy", max_util=40.0)]), [], {R.STEADY}),
    Case("young_idle_node_is_kept", observe(nodes=[node("i-new", age=10, max_util=0.0)]), []),
    Case(
        "node_without_metrics_counts_as_busy",
        observe(nodes=[node("i-quiet", max_util=None)]),
        [],
        {R.HOLD_MISSING_DATA},
    ),
    Case(
        "idle_on_demand_goes_before_idle_spot",
        observe(nodes=[idle("i-spot", SPOT, max_util=0.0), idle("i-od", OD, max_util=2.0)]),
        [("term", "i-od", R.RECLAIM_IDLE)],
        settings=settings(pool_settings(max_step_nodes=1)),
    ),
    Case(
        "reclaim_limited_by_max_step",
        observe(nodes=[idle(f"i-{k}") for k in range(4)]),
        [("term", "i-0", R.RECLAIM_IDLE), ("term", "i-1", R.RECLAIM_IDLE)],
        settings=settings(pool_settings(max_step_nodes=2)),
    ),
    # issue 17: the cooldown is for utilization-driven scale-ups (config.md); it never keeps an idle node
    Case(
        "reclaim_ignores_cooldown",
        observe(groups=[group(SPOT, 1, changed=2), group(OD, 0)], nodes=[idle("i-idle")]),
        [("term", "i-idle", R.RECLAIM_IDLE)],
    ),
    Case(
        "no_step_limit_by_default",
        observe(pending=(1,) * 10),
        [("set", SPOT, 10, R.SCALE_UP_PENDING)],
        settings=settings(pool_settings(max_step_nodes=None, spot_max_nodes=10)),
    ),
    Case(
        "pending_pods_keep_only_the_idle_nodes_they_fill",
        observe(
            groups=[group(SPOT, 4), group(OD, 0)],
            nodes=[idle("i-a"), idle("i-b"), idle("i-c"), node("i-boot", lifecycle=LIFECYCLE_PENDING)],
            pending=(1,),
        ),
        [("term", "i-a", R.RECLAIM_IDLE), ("term", "i-b", R.RECLAIM_IDLE)],
        {R.STEADY},
    ),
    # release on cost: 1-GPU nodes, launch 6 min -> a relaunch costs 12 node-minutes
    Case(
        "idle_nodes_kept_warm_while_jobs_arrive_faster_than_a_relaunch_costs",
        # 60 one-GPU pods in the last hour: 1 node/min; the k-th idle node waits k min < 12: all 3 kept
        _arrivals(observe(nodes=[idle("i-a"), idle("i-b"), idle("i-c")]), [(m, 1) for m in range(60)]),
        [],
        {R.KEEP_WARM},
    ),
    Case(
        "keep_warm_keeps_only_the_nodes_that_pay",
        # 6 pods in the hour: 0.1 node/min; the 1st idle node waits 10 min < 12 (kept), the 2nd 20 (released)
        _arrivals(observe(nodes=[idle("i-a"), idle("i-b"), idle("i-c", OD)]), [(m, 1) for m in range(0, 60, 10)]),
        [("term", "i-c", R.RECLAIM_IDLE), ("term", "i-a", R.RECLAIM_IDLE)],
        {R.KEEP_WARM},
    ),
    Case(
        "a_node_that_never_got_a_pod_is_not_kept_warm",
        # launched 7 min ago: its 2-minute empty window reaches into its 6-minute boot; the older one is kept
        _arrivals(observe(nodes=[idle("i-new", age=7), idle("i-old")]), [(m, 1) for m in range(0, 60, 10)]),
        [("term", "i-new", R.RECLAIM_IDLE)],
        {R.KEEP_WARM},
    ),
    Case(
        "arrivals_older_than_the_window_keep_nothing",
        _arrivals(observe(nodes=[idle("i-a")]), [(m, 1) for m in range(60, 200)]),
        [("term", "i-a", R.RECLAIM_IDLE)],
    ),
    Case("unknown_arrivals_keep_nothing_warm", observe(nodes=[idle("i-a")]), [("term", "i-a", R.RECLAIM_IDLE)]),
    Case(
        "keep_warm_never_keeps_a_node_with_gpu_work",
        _arrivals(observe(nodes=[node("i-busy", max_util=0.0, reserved=12.5)]), [(m, 1) for m in range(60)]),
        [],
        {R.STEADY},
    ),
    Case(
        "pending_pods_keep_idle_nodes",
        observe(
            groups=[group(SPOT, 3), group(OD, 0)],
            nodes=[idle("i-idle"), node("i-b"), node("i-c", lifecycle=LIFECYCLE_PENDING)],
            pending=(1,),
        ),
        [],
        {R.STEADY},
    ),
    Case(
        "idle_guaranteed_node_is_never_touched", observe(nodes=[node("i-floor", FLOOR, max_util=0.0)]), [], {R.STEADY}
    ),
    Case(
        "update_in_progress_blocks_scale_up",
        observe(groups=[group(SPOT, 0, status="UPDATING"), group(OD, 0)], pending=(1,)),
        [],
        {R.UPDATE_IN_PROGRESS},
    ),
    Case(
        "update_in_progress_blocks_reclaim",
        observe(groups=[group(SPOT, 1, status="UPDATING"), group(OD, 0)], nodes=[idle("i-idle")]),
        [],
        {R.UPDATE_IN_PROGRESS},
    ),
    Case(
        "unreadable_group_holds_the_pool",
        observe(groups=[group(SPOT, 1)], nodes=[node("i-idle", max_util=0.0)]),
        [],
        {R.HOLD_MISSING_DATA},
    ),
    Case("missing_pool_observation_holds", Observation(()), [], {R.HOLD_MISSING_DATA}),
    Case(
        "spot_short_within_fallback_delay_waits",
        observe(groups=[group(SPOT, 2, changed=5), group(OD, 0)], pending=(1, 1)),
        [],
    ),
    Case(
        "spot_short_past_fallback_delay_uses_on_demand",
        observe(groups=[group(SPOT, 2, changed=20), group(OD, 0)], pending=(1, 1)),
        [("set", OD, 2, R.SPOT_FALLBACK)],
    ),
    Case(
        "spot_insufficient_capacity_activity_falls_back_at_once",
        observe(groups=[group(SPOT, 2, changed=1, shortage=True), group(OD, 0)], pending=(1,)),
        [("set", OD, 1, R.SPOT_FALLBACK)],
    ),
    Case(
        "spot_only_pool_short_of_spot_holds",
        observe(groups=[group(SPOT, 2, changed=30)], pending=(1, 1)),
        [],
        settings=settings(pool_settings(on_demand_group=None)),
    ),
    Case(
        "spot_recovered_sends_new_demand_to_spot",
        observe(groups=[group(SPOT, 1), group(OD, 1)], nodes=[node("i-s"), node("i-o", OD)], pending=(1,)),
        [("set", SPOT, 2, R.SCALE_UP_PENDING)],
        {R.SPOT_RECOVERED},
    ),
    Case(
        "on_demand_only_pool_scales_on_demand",
        observe(groups=[group(OD, 0)], pending=(1,)),
        [("set", OD, 1, R.SCALE_UP_PENDING)],
        settings=settings(pool_settings(spot_group=None)),
    ),
    Case(
        "pool_budget_refuses_scale_up",
        observe(pending=(1,), spend=spend(1950.0)),
        [],
        {R.BUDGET_CAP},
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "pool_budget_affords_part_of_the_scale_up",
        # 2000 - 1000 = 1000 over 516 h -> 1.94 $/h; floor 0.80 leaves room for 2 spot nodes at 0.41
        observe(pending=(1, 1, 1, 1), spend=spend(900.0, since=100.0)),
        [("set", SPOT, 2, R.SCALE_UP_PENDING)],
        {R.BUDGET_CAP},
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "alert_only_budget_does_not_cap",
        observe(pending=(1,), spend=spend(5000.0)),
        [("set", SPOT, 1, R.SCALE_UP_PENDING)],
        settings=settings(pool_settings(budget_monthly_usd=2000.0, budget_enforcement="alert_only")),
    ),
    Case(
        "exhausted_budget_drains_idle_first",
        observe(
            nodes=[
                node("i-busy", max_util=90),
                idle("i-idle2", max_util=1.0),
                idle("i-idle"),
                node("i-nodata", max_util=None),
            ],
            spend=spend(1990.0, since=20.0),
        ),
        [("term", "i-idle", R.BUDGET_DRAIN)],
        settings=settings(pool_settings(budget_monthly_usd=2000.0, max_step_nodes=1)),
    ),
    Case(
        "budget_drain_never_takes_a_working_gpu",
        # issue 14: a drain terminates idle nodes only; the busy one and the one without data are kept
        observe(
            nodes=[
                node("i-busy", max_util=90, reserved=100.0),
                idle("i-idle"),
                node("i-nodata", max_util=None),
                node("i-requested", max_util=0.0, reserved=12.5),
            ],
            spend=spend(1990.0, since=20.0),
        ),
        [("term", "i-idle", R.BUDGET_DRAIN)],
        {R.BUDGET_DRAIN},
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "exhausted_budget_cancels_launches_first",
        observe(groups=[group(SPOT, 3, changed=1), group(OD, 0)], nodes=[node("i-a")], spend=spend(2100.0)),
        [("set", SPOT, 1, R.BUDGET_DRAIN)],
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "exhausted_budget_cancels_booting_instances_by_id_never_by_desired",
        # desired 4: one in service, two booting, one not launched yet. Lowering desired to 1 would let the ASG
        # choose which instances die (possibly i-a, the busy one); instead the booting ones go by id.
        observe(
            groups=[group(SPOT, 4, changed=1), group(OD, 0)],
            nodes=[
                node("i-a", max_util=90),
                node("i-b", lifecycle=LIFECYCLE_PENDING, max_util=None),
                node("i-c", lifecycle="Pending:Wait", max_util=None),
            ],
            spend=spend(2100.0),
        ),
        # One kind of change per group per tick (issue 14): the launch not started is cancelled through desired
        # now; the booting instances go by id next tick.
        [("set", SPOT, 3, R.BUDGET_DRAIN)],
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "a_booting_instance_a_gpu_pod_is_bound_to_is_not_cancelled",
        # registered while its Auto Scaling lifecycle still says Pending:Wait, and a job already landed on it
        observe(
            groups=[group(SPOT, 3, changed=1), group(OD, 0)],
            nodes=[
                node("i-a", max_util=90),
                node("i-b", lifecycle=LIFECYCLE_PENDING, max_util=None),
                replace(node("i-c", lifecycle="Pending:Wait", max_util=None), gpu_pods=1),
            ],
            spend=spend(2100.0),
        ),
        # i-c is kept and is a live instance: desired 3 = 1 up + 2 booting, nothing to cut through desired (a cut
        # to 2 would let the group pick i-c or i-a, issue 24 item 11); the idle booting i-b goes by id
        [("term", "i-b", R.BUDGET_DRAIN)],
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "exhausted_budget_cancels_booting_instances_by_id",
        observe(
            groups=[group(SPOT, 3, changed=1), group(OD, 0)],
            nodes=[
                node("i-a", max_util=90),
                node("i-b", lifecycle=LIFECYCLE_PENDING, max_util=None),
                node("i-c", lifecycle="Pending:Wait", max_util=None),
            ],
            spend=spend(2100.0),
        ),
        [("term", "i-b", R.BUDGET_DRAIN), ("term", "i-c", R.BUDGET_DRAIN)],
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "empty_node_is_reclaimed_before_the_idle_timeout",
        # up 15 min: too young for the 30-min idle rule, but no pod has requested a GPU on it for 10 min and
        # its GPUs were idle over those 10 min
        observe(nodes=[_node_reserved("i-empty", age=15, reserved=0.0, recent_util=0.5)], pending=()),
        [("term", "i-empty", R.RECLAIM_IDLE)],
    ),
    Case(
        "busy_gpus_with_no_reserved_gpu_are_not_reclaimed",
        # issue 14 item 1: 0 GPUs requested (the pod's request is not visible to the metric, or it just left)
        # but the GPUs are busy: one signal says idle, another says busy, so the node stays
        observe(
            nodes=[
                _node_reserved("i-busy-empty", age=15, reserved=0.0, recent_util=60.0),
                node("i-old-busy-empty", max_util=70.0, reserved=0.0),
            ],
            pending=(),
        ),
        [],
        {R.STEADY},
    ),
    Case(
        "empty_node_without_recent_utilization_is_kept",
        observe(nodes=[_node_reserved("i-empty-nodata", age=15, reserved=0.0, recent_util=None)], pending=()),
        [],
    ),
    Case(
        "idle_node_with_a_requested_gpu_is_not_reclaimed",
        # utilization idle for 30 min, but a pod holds one of its GPUs: the reserved signal says "in use"
        observe(nodes=[node("i-held", max_util=0.0, reserved=12.5)], pending=()),
        [],
        {R.STEADY},
    ),
    Case(
        "idle_node_without_reserved_data_counts_as_busy",
        observe(nodes=[node("i-idle-noreserved", max_util=0.0, reserved=None)], pending=()),
        [],
        {R.HOLD_MISSING_DATA},
    ),
    Case(
        "high_average_utilization_keeps_an_otherwise_idle_node",
        # the scale-up window's mean lies within the 2-minute empty window the node is judged on
        observe(nodes=[node("i-avg", max_util=0.0, avg_util=50.0, reserved=0.0)], pending=()),
        [],
        settings=settings(pool_settings(scale_up_window_minutes=2)),
    ),
    Case(
        "work_that_ended_before_the_empty_window_does_not_keep_an_empty_node",
        # busy over the last 30 and 10 minutes, but no pod and no utilization over the last 2: the job finished
        observe(nodes=[node("i-done", max_util=90.0, avg_util=50.0, reserved=0.0, recent_util=0.0)], pending=()),
        [("term", "i-done", R.RECLAIM_IDLE)],
    ),
    Case(
        "work_within_the_empty_window_keeps_the_node",
        observe(nodes=[node("i-working", max_util=90.0, reserved=0.0, recent_util=40.0)], pending=()),
        [],
    ),
    Case(
        "a_gpu_pod_in_the_pod_list_keeps_a_node_the_metrics_call_idle",
        # CloudWatch's newest datapoints predate the pod that landed on it; the tick's pod list does not
        observe(nodes=[replace(idle("i-landed"), gpu_pods=1)], pending=()),
        [],
        {R.STEADY},
    ),
    Case(
        "no_gpu_pod_in_the_pod_list_and_idle_metrics_reclaims",
        observe(nodes=[replace(idle("i-gone"), gpu_pods=0)], pending=()),
        [("term", "i-gone", R.RECLAIM_IDLE)],
    ),
    Case(
        "unknown_pods_per_node_leave_the_metrics_rule_as_it_was",
        observe(nodes=[idle("i-unknown-pods")], pending=()),
        [("term", "i-unknown-pods", R.RECLAIM_IDLE)],
    ),
    Case(
        "a_gpu_pod_in_the_pod_list_keeps_a_node_out_of_the_budget_drain",
        observe(nodes=[replace(idle("i-landed2"), gpu_pods=2)], pending=(), env_spend=spend(10_000.0)),
        [],
        {R.BUDGET_DRAIN},
        settings=settings(env_budget=10_000.0),
    ),
    Case(
        "node_with_a_gpu_pod_is_not_empty",
        observe(nodes=[_node_reserved("i-holding", age=15, reserved=12.5)], pending=()),
        [],
    ),
    Case(
        "node_without_reserved_data_is_not_empty",
        observe(nodes=[_node_reserved("i-unknown", age=15, reserved=None)], pending=()),
        [],
    ),
    Case(
        "empty_but_younger_than_the_empty_timeout_is_kept",
        observe(nodes=[_node_reserved("i-new", age=8, reserved=0.0)], pending=()),
        [],
    ),
    Case(
        "empty_node_is_not_reclaimed_in_a_tick_that_adds",
        observe(
            groups=[group(SPOT, 2), group(OD, 0)],
            nodes=[_node_reserved("i-empty", age=15, reserved=0.0), node("i-b", max_util=90)],
            pending=(1,),
        ),
        [("set", SPOT, 3, R.SCALE_UP_PENDING)],
    ),
    Case(
        "multi_gpu_node_with_one_busy_gpu_is_not_idle",
        # 8 GPUs, one at 24 %: the node-average metric reads 3 %, under the 5 % threshold, yet a job is running.
        observe(nodes=[node("i-one-gpu-busy", max_util=3.0)], pending=()),
        [],
        {R.STEADY},
        settings=settings(pool_settings(gpus_per_node=8)),
    ),
    Case(
        "multi_gpu_node_with_all_gpus_idle_is_reclaimed",
        observe(nodes=[idle("i-idle8", max_util=0.2)], pending=()),
        [("term", "i-idle8", R.RECLAIM_IDLE)],
        settings=settings(pool_settings(gpus_per_node=8)),
    ),
    Case(
        "exhausted_budget_with_nothing_to_drain_says_so",
        observe(pending=(1,), env_spend=spend(10_000.0)),
        [],
        {R.BUDGET_DRAIN},
        settings=settings(env_budget=10_000.0),
    ),
    Case(
        "spot_instance_still_booting_is_not_a_shortage",
        observe(
            groups=[group(SPOT, 1, changed=30), group(OD, 0)],
            nodes=[node("i-a", lifecycle=LIFECYCLE_PENDING)],
            pending=(1,),
        ),
        [],
    ),
    Case(
        "unknown_actual_spend_drains_on_the_running_estimate",
        # issue 14 item 6: Budgets unreadable (e.g. AccessDenied) must not disable the drain
        observe(nodes=[node("i-busy", max_util=90), idle("i-idle")], spend=spend(None, since=5000.0)),
        [("term", "i-idle", R.BUDGET_DRAIN)],
        {R.BUDGET_DRAIN},
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "unknown_actual_spend_refuses_a_capped_scale_up",
        # issue 24 item 10: Budgets and the state both unreadable leave only a running estimate (here $0 at
        # $2,400 of $2,500 really spent): unknown spend is not zero, so a capped scope buys nothing
        observe(pending=(8, 8), spend=spend(None, since=0.0)),
        [],
        {R.BUDGET_UNKNOWN},
        settings=settings(pool_settings(budget_monthly_usd=2500.0, gpus_per_node=8)),
    ),
    Case(
        "unknown_environment_spend_refuses_a_capped_scale_up",
        observe(pending=(1,), env_spend=spend(None, since=0.0)),
        [],
        {R.BUDGET_UNKNOWN},
        settings=settings(env_budget=10_000.0),
    ),
    Case(
        "unknown_spend_under_alert_only_still_scales",
        observe(pending=(1,), spend=spend(None, since=0.0)),
        [("set", SPOT, 1, R.SCALE_UP_PENDING)],
        settings=settings(pool_settings(budget_monthly_usd=2500.0, budget_enforcement="alert_only")),
    ),
    Case(
        "no_spend_at_all_never_drains",
        observe(nodes=[idle("i-idle")], spend=None),
        [("term", "i-idle", R.RECLAIM_IDLE)],
        settings=settings(pool_settings(budget_monthly_usd=2000.0)),
    ),
    Case(
        "environment_budget_caps_too",
        observe(pending=(1,), env_spend=spend(9_800.0)),
        [],
        {R.BUDGET_CAP},
        settings=settings(env_budget=10_000.0),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case):
    plan = decide(case.settings, case.obs, NOW)
    got = []
    for a in plan.changes:
        if a.kind == "set_desired":
            got.append(("set", a.group, a.desired_to, a.reason))
        else:
            assert a.kind == "terminate"
            got.append(("term", a.instance_id, a.reason))
    assert got == case.changes, [a.to_dict() for a in plan.actions]
    reasons = set(plan.decisions[0].reasons)
    assert case.reasons <= reasons, [a.to_dict() for a in plan.actions]
    assert all(a.detail for a in plan.actions), "every action explains itself"


def test_at_least_thirty_named_cases():
    assert len(CASES) >= 30 and len({c.name for c in CASES}) == len(CASES)


def test_environment_budget_is_shared_across_pools_in_order():
    a, b = pool_settings("alpha"), pool_settings("beta")
    # A budget whose headroom over the two floors (2 x 0.80 $/h) is 1.5 spot nodes: alpha gets one, beta none.
    hours = hours_left_in_month(NOW)
    budget = 500.0 + hours * (1.60 + 0.41 * 1.5)
    obs = Observation(
        (
            PoolObservation("alpha", (group("alpha-spot"), group("alpha-od")), (), (1, 1)),
            PoolObservation("beta", (group("beta-spot"), group("beta-od")), (), (1,)),
        ),
        spend(500.0),
    )
    plan = decide(settings(a, b, env_budget=budget), obs, NOW)
    assert [(x.pool, x.desired_to) for x in plan.changes] == [("alpha", 1)]
    assert Reason.BUDGET_CAP in plan.decision("alpha").reasons and Reason.BUDGET_CAP in plan.decision("beta").reasons


def test_dry_run_is_carried_on_the_plan_and_decisions_are_the_same():
    obs = observe(pending=(1,))
    live, dry = decide(settings(), obs, NOW), decide(settings(dry_run=True), obs, NOW)
    assert dry.dry_run and not live.dry_run and dry.decisions == live.decisions


def test_decision_figures():
    obs = observe(
        nodes=[node("i-1", max_util=30, avg_util=20), node("i-f", FLOOR, avg_util=60)],
        pending=(1,),
        spend=spend(100.0, since=10.0),
    )
    d = decide(settings(pool_settings(budget_monthly_usd=5000.0)), obs, NOW).decision("research")
    assert d.desired_after == {SPOT: 2, OD: 0}
    assert d.pending_gpus == 1
    assert d.elastic_usd_per_hour == pytest.approx(0.82)
    assert d.month_to_date_usd == pytest.approx(110.0)
    assert d.projected_month_usd == pytest.approx(110.0 + (0.82 + 0.80) * hours_left_in_month(NOW))
    assert d.utilization_pct == {"elastic": 20.0, "guaranteed": 60.0}


@pytest.mark.parametrize(
    "pods,gpn,expected",
    [
        ((), 8, (0, 0)),
        ((8, 8), 8, (2, 0)),
        ((5, 3, 4, 4), 8, (2, 0)),
        ((9, 1), 8, (1, 1)),
        ((0, 1), 1, (1, 0)),
        ((2, 2, 2, 2, 2), 4, (3, 0)),
    ],
)
def test_pack_pods(pods, gpn, expected):
    assert pack_pods(pods, gpn) == expected


def test_hours_left_in_month_crosses_december():
    from datetime import datetime, timezone

    assert hours_left_in_month(datetime(2026, 12, 31, 23, 0, tzinfo=timezone.utc)) == pytest.approx(1.0)
    assert hours_left_in_month(datetime(2026, 2, 1, tzinfo=timezone.utc)) == pytest.approx(28 * 24)
    assert ago(0) == NOW
