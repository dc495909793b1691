"""Warm-up ahead of the daily rhythm (issue 17): the history (policy/rhythm.py), the engine rule
(policy/decide/warm_up.py:warm_up_nodes), the tick's state, and the simulator running the same code."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pricing import checks

import pytest

from policy.decide import decide, warm_up_nodes
from policy.model import Observation, PoolObservation
from policy.terms import Reason
from policy.rhythm import DAYS, MIN_DAYS, SLOTS_PER_DAY, DailyArrivals
from policy_cases import NOW, OD, SPOT, group, idle, node, observe, pool_settings, settings, spend
from conftest import requires_shared_prices, resolved_prices

R = Reason
MIDNIGHT = datetime(2026, 3, 10, tzinfo=timezone.utc)


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return MIDNIGHT + timedelta(days=day, hours=hour, minutes=minute)


def history_with(days: int, gpus_at_nine: int) -> DailyArrivals:
    """`days` recorded days before day 0, each with `gpus_at_nine` GPUs arriving at 09:00."""
    h = DailyArrivals()
    for d in range(-days, 0):
        h.record(at(d, 23, 59), [(at(d, 9), gpus_at_nine)])
    return h


# --- the history ---------------------------------------------------------------------------------------------


def test_an_arrival_seen_by_several_ticks_counts_once():
    h = DailyArrivals()
    pods = [(at(-1, 9, 0), 4), (at(-1, 9, 3), 2)]
    h.record(at(-1, 9, 5), pods)
    h.record(at(-1, 9, 6), pods + [(at(-1, 9, 6), 1)])  # the same pods again, one new
    row = h.rows[min(h.rows)]
    assert sum(row) == 7
    assert row[9 * 6] == 7  # the 09:00-09:10 slot


def test_unknown_until_enough_days_are_on_record():
    assert history_with(MIN_DAYS - 1, 8).expected_rate_nodes_per_minute(at(0, 9), 12, 8) is None
    assert history_with(MIN_DAYS, 8).expected_rate_nodes_per_minute(at(0, 9), 12, 8) is not None


def test_rate_is_the_mean_of_earlier_days_over_whole_slots_and_ignores_today():
    h = history_with(4, 40)  # 40 GPUs at 09:00 on each of 4 days
    h.record(at(0, 9, 1), [(at(0, 9), 800)])  # today's burst is not history yet
    # window 12 min from 09:05 -> the 09:00 and 09:10 slots (20 min): 40 GPUs / 20 min / 8 per node
    assert h.expected_rate_nodes_per_minute(at(0, 9, 5), 12, 8) == pytest.approx(40 / 20 / 8)
    # the rate is fixed inside a slot, and 08:50 already sees 09:00 coming
    assert h.expected_rate_nodes_per_minute(at(0, 9, 9), 12, 8) == h.expected_rate_nodes_per_minute(at(0, 9), 12, 8)
    assert h.expected_rate_nodes_per_minute(at(0, 8, 50), 12, 8) == pytest.approx(40 / 20 / 8)
    assert h.expected_rate_nodes_per_minute(at(0, 12), 12, 8) == 0.0


def test_days_older_than_a_week_are_dropped_and_a_day_without_ticks_is_no_evidence():
    h = history_with(DAYS + 3, 8)
    h.record(at(0, 0, 1), [])
    assert len(h.rows) == DAYS and min(h.rows) == max(h.rows) - DAYS + 1
    sparse = DailyArrivals()
    sparse.record(at(-10, 12), [])
    sparse.record(at(-1, 12), [])
    assert sparse.expected_rate_nodes_per_minute(at(0, 9), 12, 8) is None  # 1 day on record within the week


def test_state_round_trip_is_small_and_malformed_state_starts_empty():
    h = history_with(DAYS, 8)
    raw = json.loads(json.dumps(h.to_state()))
    back = DailyArrivals.from_state(raw)
    assert back.rows == h.rows and back.last == h.last
    assert len(json.dumps(raw)) < 4_000  # a week of one pool in the DynamoDB state item (400 KB a item)
    for bad in (
        None,
        "x",
        {"rows": {"1": [1] * 3}},
        {"rows": {"x": [0] * SLOTS_PER_DAY}},
        {"rows": {"5": [-1] + [0] * (SLOTS_PER_DAY - 1)}},
        {"rows": {"5": [float("nan")] * SLOTS_PER_DAY}},
        {"rows": [], "last": "yesterday"},
    ):
        assert DailyArrivals.from_state(bad).rows == {}


# --- the engine rule -----------------------------------------------------------------------------------------

# 1-GPU nodes, launch 6 min: a spare pays while k / rate < 12 min; at 0.25 node/min: k < 3, so 2 spares
WARM = settings(pool_settings(warm_up=True, max_step_nodes=None, spot_max_nodes=6))


def _with_rhythm(obs: Observation, rate: float | None) -> Observation:
    po = obs.pools[0]
    return Observation((dataclasses.replace(po, rhythm_rate_nodes_per_minute=rate),), obs.environment_spend)


def test_spares_follow_the_release_on_cost_rule():
    ps = WARM.pools[0]
    assert [
        warm_up_nodes(ps, PoolObservation("research", rhythm_rate_nodes_per_minute=r))
        for r in (None, 0.0, 1 / 12, 0.1, 0.25, 1.0)
    ] == [0, 0, 0, 1, 2, 11]
    off = dataclasses.replace(ps, warm_up=False)
    assert warm_up_nodes(off, PoolObservation("research", rhythm_rate_nodes_per_minute=1.0)) == 0


def test_warm_up_launches_the_spares_ahead_of_the_rhythm():
    plan = decide(WARM, _with_rhythm(observe(), 0.25), NOW)
    [a] = plan.changes
    assert (a.group, a.desired_to, a.reason) == (SPOT, 2, R.WARM_UP)
    assert "daily rhythm" in a.detail


def test_warm_up_is_off_by_default_and_off_without_history():
    assert decide(settings(pool_settings(max_step_nodes=None)), _with_rhythm(observe(), 1.0), NOW).changes == ()
    assert decide(WARM, _with_rhythm(observe(), None), NOW).changes == ()


def test_empty_and_launching_nodes_count_as_spares():
    obs = observe(
        groups=[group(SPOT, 2), group(OD, 0)],
        nodes=[node("i-empty", max_util=0.0, reserved=0.0, age=3), node("i-busy", reserved=100.0)],
    )
    [a] = decide(WARM, _with_rhythm(obs, 0.25), NOW).changes
    assert (a.desired_from, a.desired_to, a.reason) == (2, 3, R.WARM_UP)  # one spare up, one more wanted
    booting = observe(groups=[group(SPOT, 2, changed=1), group(OD, 0)])  # 2 asked for, none up yet
    assert decide(WARM, _with_rhythm(booting, 0.25), NOW).changes == ()


def test_no_warm_up_launch_while_a_node_cannot_be_read():
    obs = observe(nodes=[node("i-unknown", reserved=None, max_util=None)])
    plan = decide(WARM, _with_rhythm(obs, 1.0), NOW)
    assert not [a for a in plan.changes if a.reason == R.WARM_UP]


def test_a_node_a_pod_just_landed_on_is_no_spare():
    """Its CloudWatch figures (minutes old) still say no GPU requested; the tick's pod list says a job runs on
    it: the spares the rhythm asks for are launched as if it were not there."""
    from dataclasses import replace

    landed = [replace(idle(f"i-{k}"), gpu_pods=1) for k in range(2)]
    [a] = decide(WARM, _with_rhythm(observe(nodes=landed), 0.25), NOW).changes
    assert (a.reason, a.desired_to - a.desired_from) == (R.WARM_UP, 2)
    assert decide(WARM, _with_rhythm(observe(nodes=[idle("i-0"), idle("i-1")]), 0.25), NOW).changes == ()


def test_warm_up_rides_on_a_pending_scale_up():
    [a] = decide(WARM, _with_rhythm(observe(pending=(1,)), 0.25), NOW).changes
    assert (a.desired_to, a.reason) == (3, R.SCALE_UP_PENDING)  # 1 for the pod + 2 spares
    assert "ahead of the daily rhythm" in a.detail


def test_warm_up_never_spends_past_the_budget_cap():
    capped = settings(pool_settings(warm_up=True, max_step_nodes=None, budget_monthly_usd=2000.0))
    plan = decide(capped, _with_rhythm(observe(spend=spend(1950.0)), 1.0), NOW)
    assert plan.changes == ()
    assert R.BUDGET_CAP in plan.decision("research").reasons


def test_warm_up_keeps_a_spare_that_never_got_a_pod_and_releases_the_rest():
    # three idle nodes launched 14 min ago (never used: the release-on-cost rule alone would drop them all)
    nodes = [idle("i-a", age=14), idle("i-b", age=14), idle("i-c", age=14)]
    plan = decide(WARM, _with_rhythm(observe(nodes=nodes), 0.25), NOW)
    assert [a.instance_id for a in plan.changes] == ["i-a"]
    assert R.WARM_UP in plan.decision("research").reasons
    assert [a.instance_id for a in decide(WARM, _with_rhythm(observe(nodes=nodes), None), NOW).changes] == [
        "i-a",
        "i-b",
        "i-c",
    ]


# --- the tick keeps the history in its state ------------------------------------------------------------------


def test_the_tick_records_arrivals_and_reads_the_rate(monkeypatch):
    from policy import tick

    ps = pool_settings(warm_up=True)
    s = settings(ps)
    state: dict = {"rhythm": {"research": history_with(MIN_DAYS, 12).to_state()}}
    now = at(0, 9, 2)
    rates = tick._rhythm_rates(s, state, {"research": ((at(0, 9, 1), 3),)}, now)
    assert rates["research"] == pytest.approx(12 / 20 / 1)  # 1-GPU nodes
    stored = DailyArrivals.from_state(state["rhythm"]["research"])
    assert sum(stored.rows[max(stored.rows)]) == 3
    # pods unreadable: nothing recorded (the day is no evidence), the rate is still read
    before = json.dumps(state, sort_keys=True)
    assert tick._rhythm_rates(s, state, None, now + timedelta(minutes=1))["research"] == rates["research"]
    assert json.dumps(state, sort_keys=True) == before
    # warm-up off: no history kept at all
    assert tick._rhythm_rates(settings(pool_settings()), {}, {"research": ()}, now) == {}


def test_the_packaged_settings_carry_warm_up():
    from policy.model import Settings

    s = settings(pool_settings(warm_up=True))
    assert Settings.from_json(s.to_json()).pools[0].warm_up is True


# --- the simulator runs the same rule --------------------------------------------------------------------------


def _rhythm_trace(tmp_path, days=14):
    """Every day at 09:00 six 8-GPU jobs, one every 2 minutes, an hour each."""
    from sim import traces

    rows = [(d * 86400 + 9 * 3600 + k * 120, 3600, 8) for d in range(days) for k in range(6)]
    path = tmp_path / "rhythm.csv"
    path.write_text("submit_s,duration_s,gpus\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    return traces.read_trace(path)


@requires_shared_prices
def test_warm_up_serves_a_daily_rhythm_without_the_boot_wait_and_the_fast_path_agrees(tmp_path):
    import yaml

    from sim import pool as simpool
    from sim import runner
    from sim.engine import SimSettings
    from sim.controllers.gpuloan import GpuLoan, pool_settings as sim_pool_settings
    from conftest import REPO

    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "prod", prices=resolved_prices()
    )
    trace = _rhythm_trace(tmp_path)
    horizon = 14 * 1440
    spec = simpool.auto_size(
        simpool.spec_from_config(resolved_prices(), cfg, "training"), trace, horizon_minutes=horizon
    )
    calm = SimSettings(spot_interruptions_per_month=0.0, spot_unavailable_episodes_per_week=0.0)
    out = {}
    for warm in (False, True):
        for skip in (True, False):
            ps = dataclasses.replace(sim_pool_settings(spec), warm_up=warm)
            sim, m = runner.run_one(
                spec,
                trace,
                GpuLoan("g", settings=ps),
                dataclasses.replace(calm, skip_quiet_ticks=skip),
                horizon=horizon,
            )
            w = sim.workload
            waits = [
                w.first_start[i] - w._arrival_minute[i]
                for i in range(len(w.gpus))
                if w._arrival_minute[i] >= MIN_DAYS * 1440
            ]  # once the history knows the rhythm
            out[warm, skip] = (m["total_cost_usd"], m["node_launches"], sorted(waits), m.get("decisions_by_reason"))
    assert out[True, True] == out[True, False] and out[False, True] == out[False, False]  # fast path = every minute
    cost_off, _, wait_off, _ = out[False, True]
    cost_on, _, wait_on, reasons = out[True, True]
    # once the history knows the rhythm, every job starts before a boot could have finished, most at once
    assert min(wait_off) >= 6 and max(wait_on) < 6
    assert sum(wait_on) < sum(wait_off) / 3
    assert cost_on > cost_off  # it is not free: the spares wait for their jobs
    assert reasons.get("WARM_UP", 0) > 0
