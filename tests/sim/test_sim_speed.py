"""The simulator's fast paths give exactly the slow paths' results: packing by pod size equals packing pod by pod,
and skipping quiet ticks equals deciding every minute."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import yaml

from policy.decide import pack_pods
from sim import pool as simpool
from sim import runner, traces
from sim.engine import SPOT_SHORTAGE, SimSettings
from sim.cloud import ElasticLatency
from sim.cluster import new_nodes_needed
from sim.controllers.gpuloan import GpuLoan
from sim.controllers.ports import SIM_EPOCH
from sim.controllers.lineup import all_policies, what_if_policies
from pricing import checks
from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces, resolved_prices

ITP = SHARED_TRACES / "itp"


def naive_ffd(pods, gpn, free=()):
    """First fit decreasing one pod at a time (the definition)."""
    bins = sorted((f for f in free if f > 0), reverse=True)
    opened = 0
    unfittable = 0
    whole = [i for i, f in enumerate(bins) if f == gpn]
    for need in sorted(pods, reverse=True):
        if need <= 0:
            continue
        if need > gpn:
            if free == () and not bins:  # policy semantics: a pod larger than a node never fits
                unfittable += 1
                continue
            k = -(-need // gpn)
            for _ in range(k):
                idx = next((i for i, f in enumerate(bins) if f == gpn and i < len(free)), None)
                if idx is not None and bins[idx] == gpn and idx in whole:
                    whole.remove(idx)
                    bins[idx] = 0
                else:
                    opened += 1
                    bins.append(0)
            continue
        for i, f in enumerate(bins):
            if f >= need:
                bins[i] = f - need
                break
        else:
            bins.append(gpn - need)
            opened += 1
    return opened, unfittable


@pytest.mark.parametrize("seed", range(300))
def test_pack_pods_by_size_equals_pod_by_pod(seed):
    rng = random.Random(seed)
    gpn = rng.choice([1, 2, 4, 8])
    pods = tuple(rng.choice([0, 1, 1, 2, 3, 4, 5, 7, 8, 9, 16]) for _ in range(rng.randrange(0, 60)))
    assert pack_pods(pods, gpn) == naive_ffd(pods, gpn)
    counts = {}
    for p in pods:
        counts[p] = counts.get(p, 0) + 1
    assert pack_pods(counts, gpn) == naive_ffd(pods, gpn)


def test_pack_pods_work_does_not_grow_with_the_number_of_pods():
    pods = [1] * 3000 + [3] * 1001 + [8] * 7 + [5] * 40
    assert pack_pods({1: 3000, 3: 1001, 8: 7, 5: 40}, 8) == naive_ffd(pods, 8)
    # a billion pods of three sizes: one pass per size (pod by pod this would never finish)
    assert pack_pods({1: 10**9, 2: 10**9, 16: 5}, 8) == (375_000_000, 5)


@pytest.mark.parametrize("seed", range(300))
def test_karpenter_packing_by_size_equals_pod_by_pod(seed):
    rng = random.Random(seed)
    gpn = rng.choice([1, 2, 4, 8])
    free = [rng.randrange(0, gpn + 1) for _ in range(rng.randrange(0, 8))]
    pods = [rng.choice([1, 1, 2, 3, 4, 8, 12, 16]) for _ in range(rng.randrange(0, 40))]
    pods = [p for p in pods if p <= 2 * gpn]
    counts = {}
    for p in pods:
        counts[p] = counts.get(p, 0) + 1
    want, _ = naive_ffd(pods, gpn, tuple(free) if free else (0,))
    assert new_nodes_needed(counts, gpn, free) == want


# --- quiet ticks skipped == every tick decided ----------------------------------------------------------


def _strip(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.startswith("sim_") and k not in ("decide_calls", "ticks_skipped")}


def _dev():
    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text()), "dev", prices=resolved_prices()
    )
    return simpool.spec_from_config(resolved_prices(), cfg)


def _prod_training():
    cfg = checks.from_stack_yaml(
        yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text()), "prod", prices=resolved_prices()
    )
    return simpool.spec_from_config(resolved_prices(), cfg, "training")


def _series_from_jobs(trace, horizon):
    return traces.SeriesTrace(f"{trace.name}-series", tuple(simpool.demand_profile(trace, horizon)))


CASES = [
    ("cluster10", 20, 27, "jobs", {}),
    ("cluster05", 1, 4, "jobs", SPOT_SHORTAGE),
    ("cluster05", 1, 3, "series", {}),
    ("cluster09", 1, 2, "series", SPOT_SHORTAGE),
    # the elastic path's latency at second resolution (sim/cloud.py): Ready minutes from seconds, updates in ticks
    ("cluster05", 1, 4, "jobs", {**SPOT_SHORTAGE, "latency": ElasticLatency()}),
    ("cluster09", 1, 2, "series", {"latency": ElasticLatency()}),
]


@requires_shared_prices
@requires_shared_traces
def test_skipping_quiet_ticks_with_a_budget_gives_the_tick_by_tick_result():
    """The stack's own pool keeps its budget (no auto-size): the budget-aware part of the proof."""
    from sim.controllers.gpuloan import pool_settings

    trace = traces.read_trace(ITP / "cluster05.csv").window(1, 6)
    horizon = 6 * 1440
    settings = SimSettings(seed=3, spot_interruptions_per_month=8.0)
    spec = _prod_training()
    ps = pool_settings(spec)
    assert ps.budget_monthly_usd is not None
    # the stack's budget, and one small enough that the drain starts within the run
    for budget in (ps.budget_monthly_usd, 3000.0):
        fast_ctl = GpuLoan(settings=replace(ps, budget_monthly_usd=budget))
        slow_ctl = GpuLoan(settings=replace(ps, budget_monthly_usd=budget))
        fast_sim, fast = runner.run_one(spec, trace, fast_ctl, settings, horizon)
        slow_sim, slow = runner.run_one(spec, trace, slow_ctl, replace(settings, skip_quiet_ticks=False), horizon)
        assert _strip(fast) == _strip(slow), budget
        assert fast_sim.samples == slow_sim.samples
        assert fast["ticks_skipped"] > 0
        if budget == 3000.0:
            assert "BUDGET_DRAIN" in fast["decisions_by_reason"] or "BUDGET_CAP" in fast["decisions_by_reason"]


@requires_shared_prices
@requires_shared_traces
@pytest.mark.parametrize("cluster,a,b,mode,scenario", CASES)
def test_skipping_quiet_ticks_gives_the_tick_by_tick_result(cluster, a, b, mode, scenario):
    trace = traces.read_trace(ITP / f"{cluster}.csv").window(a, b)
    horizon = (b - a + 1) * 1440
    if mode == "series":
        trace = _series_from_jobs(trace, horizon)
    # a stormy seed, so that notices, reclaims, replacements and fallbacks happen within a few days
    settings = SimSettings(seed=3, spot_interruptions_per_month=8.0, **scenario)
    for base in (_prod_training(), _dev()):
        spec = simpool.auto_size(base, trace, horizon_minutes=horizon)
        policies = lambda: all_policies(spec, warm_up=True) + what_if_policies()[1:3]  # noqa: E731
        for fast_ctl, slow_ctl in zip(policies(), policies()):
            fast_sim, fast = runner.run_one(spec, trace, fast_ctl, settings, horizon)
            slow_sim, slow = runner.run_one(spec, trace, slow_ctl, replace(settings, skip_quiet_ticks=False), horizon)
            assert _strip(fast) == _strip(slow), (cluster, mode, spec.name, fast_ctl.name)
            assert fast_sim.samples == slow_sim.samples
            assert slow["ticks_skipped"] == 0
        assert fast["ticks_skipped"] >= 0


@requires_shared_prices
@requires_shared_traces
@pytest.mark.parametrize("idle,empty,up", [(5, 2, 10), (10, 5, 2), (5, 5, 5), (30, 2, 3)])
def test_skipping_quiet_ticks_with_other_windows_gives_the_tick_by_tick_result(idle, empty, up):
    """Windows of different lengths: the fast path must wake when each window a work signal is read over has
    passed (a node emptied at e is judged idle from e + window - 1 of each)."""
    from sim.controllers.gpuloan import pool_settings

    trace = traces.read_trace(ITP / "cluster10.csv").window(50, 57)
    horizon = 8 * 1440
    spec = simpool.auto_size(_prod_training(), trace, horizon_minutes=horizon)
    ps = replace(
        pool_settings(spec), idle_timeout_minutes=idle, empty_timeout_minutes=empty, scale_up_window_minutes=up
    )
    settings = SimSettings(seed=3, spot_interruptions_per_month=8.0)
    fast_sim, fast = runner.run_one(spec, trace, GpuLoan(settings=ps), settings, horizon)
    slow_sim, slow = runner.run_one(
        spec, trace, GpuLoan(settings=ps), replace(settings, skip_quiet_ticks=False), horizon
    )
    assert _strip(fast) == _strip(slow)
    assert fast_sim.samples == slow_sim.samples
    assert fast["ticks_skipped"] > 0 and "RECLAIM_IDLE" in fast["decisions_by_reason"]


@requires_shared_prices
@requires_shared_traces
@pytest.mark.parametrize("delay", [0, 1, 2, 5])
@pytest.mark.parametrize("workload", ["batch", "service"])
def test_skipping_quiet_ticks_with_delayed_metrics_gives_the_tick_by_tick_result(delay, workload):
    """CloudWatch's delay: a change at minute c is read from c + delay on; the fast path must wake then, and when
    each delayed window has passed (service pools: when the delayed mean crosses the threshold)."""
    from sim.controllers.gpuloan import pool_settings

    trace = traces.read_trace(ITP / "cluster10.csv").window(50, 55)
    horizon = 6 * 1440
    spec = simpool.auto_size(_prod_training(), trace, horizon_minutes=horizon)
    ps = replace(pool_settings(spec), workload=workload)
    settings = SimSettings(seed=3, spot_interruptions_per_month=8.0, metric_delay_minutes=delay)
    fast_ctl, slow_ctl = GpuLoan(settings=ps), GpuLoan(settings=ps)
    fast_sim, fast = runner.run_one(spec, trace, fast_ctl, settings, horizon)
    slow_sim, slow = runner.run_one(spec, trace, slow_ctl, replace(settings, skip_quiet_ticks=False), horizon)
    assert _strip(fast) == _strip(slow)
    assert fast_sim.samples == slow_sim.samples
    assert fast["ticks_skipped"] > 0 and "RECLAIM_IDLE" in fast["decisions_by_reason"]


@requires_shared_prices
def test_a_quiet_pool_still_starts_its_budget_drain_on_time(tmp_path):
    """Nothing happens after the first job; the floor's spend alone reaches the budget after ~11 hours: the skip
    must stop there (the drain's hold appears at the same minute as deciding every minute)."""
    from sim.controllers.gpuloan import pool_settings

    spec = _prod_training()  # floor 2 x p4d.24xlarge
    path = tmp_path / "t.csv"
    path.write_text("submit_s,duration_s,gpus\n0,600,8\n")
    trace = traces.read_trace(path)
    ps = replace(pool_settings(spec), budget_monthly_usd=500.0)
    calm = SimSettings(spot_interruptions_per_month=0.0)
    fast_ctl, slow_ctl = GpuLoan(settings=ps), GpuLoan(settings=ps)
    _, fast = runner.run_one(spec, trace, fast_ctl, calm, 1440)
    _, slow = runner.run_one(spec, trace, slow_ctl, replace(calm, skip_quiet_ticks=False), 1440)
    assert slow["decisions_by_reason"].get("BUDGET_DRAIN", 0) > 0
    assert _strip(fast) == _strip(slow) and fast["ticks_skipped"] > 600


@requires_shared_traces
def test_skipping_quiet_ticks_stays_exact_with_rebalance_recommendations_and_back_to_spot():
    """Issue 28's events (a rebalance recommendation, EKS's drain once the replacement would be ready, the taint
    back to spot puts on a fallback node, Karpenter's on-demand replacement) fall on minutes the fast path wakes
    for: the same result as deciding every minute."""
    from sim.controllers.karpenter import Karpenter
    from sim.controllers.gpuloan import pool_settings

    trace = traces.read_trace(ITP / "cluster05.csv").window(1, 8)
    horizon = 8 * 1440
    # a stormy market with frequent spot-unavailable episodes, so that the 8 days meet all of these events
    settings = SimSettings(
        seed=5, spot_interruptions_per_month=40.0, rebalance_early_share=1.0, spot_unavailable_episodes_per_week=14.0
    )
    spec = _prod_training()
    ps = replace(pool_settings(spec), rebalance_checkpoint=True, budget_monthly_usd=None)
    for make in (lambda: GpuLoan(settings=ps), lambda: Karpenter(name="k", replace_on_demand=True)):
        fast_sim, fast = runner.run_one(spec, trace, make(), settings, horizon)
        slow_sim, slow = runner.run_one(spec, trace, make(), replace(settings, skip_quiet_ticks=False), horizon)
        assert _strip(fast) == _strip(slow)
        assert fast_sim.samples == slow_sim.samples and fast["ticks_skipped"] > 0
        assert fast["interruptions"] > 0 and fast["on_demand_node_hours"] > 0 and fast["lost_gpu_hours"] > 0


def _tick_minutes(ctl: GpuLoan, minutes: list[int]) -> GpuLoan:
    """`ctl` with the Lambda's tick wrapped to note the simulated minute of each run."""
    lambda_tick = ctl.run_tick

    def noted(settings, ports, now, **kw):
        minutes.append(int((now - SIM_EPOCH).total_seconds() // 60))
        return lambda_tick(settings, ports, now, **kw)

    ctl.run_tick = noted
    return ctl


# (the jobs before the 1-GPU job arriving at `minute` for 30 minutes, where it lands, whether the tick runs then)
BINDINGS = [
    ("0,36000,8\n0,36000,7\n", 200, "a floor node holding a pod", False),
    ("0,36000,8\n", 200, "an empty floor node", False),
    ("0,36000,8\n0,36000,8\n0,30000,1\n", 191, "an elastic node holding a pod", False),
    ("0,36000,8\n0,36000,8\n0,11000,1\n", 191, "an empty elastic node", True),
]


@requires_shared_prices
@pytest.mark.parametrize("before,minute,lands_on,ticks", BINDINGS, ids=[b[2] for b in BINDINGS])
def test_a_pod_binding_where_no_rule_reads_it_repeats_the_tick(tmp_path, before, minute, lands_on, ticks):
    """The floor's two 8-GPU nodes, and for the last two cases a spot node launched for a 1-GPU job that runs long
    or ends at minute 190; a 1-GPU job arrives at `minute` and lands on `lands_on` for 30 minutes. The rules read
    whether an elastic node holds a GPU pod, never a floor node's pods, and the arrivals only for an elastic node
    without one: where it lands on a floor node or on an elastic node that keeps another pod, the engine reads
    nothing new and the Lambda's tick does not run when it arrives or ends; where an elastic node gets its first
    pod and loses it again, the tick runs at both minutes. Either way the result is the tick-by-tick one."""
    from sim.controllers.gpuloan import pool_settings

    spec = _prod_training()  # floor 2 x p4d.24xlarge
    assert spec.floor_nodes == 2 and spec.gpus_per_node == 8
    path = tmp_path / "t.csv"
    path.write_text(f"submit_s,duration_s,gpus\n{before}{minute * 60},1800,1\n")
    trace = traces.read_trace(path)
    ps = replace(pool_settings(spec), budget_monthly_usd=None)
    calm = SimSettings(spot_interruptions_per_month=0.0)
    fast_minutes: list[int] = []
    slow_minutes: list[int] = []
    _, fast = runner.run_one(spec, trace, _tick_minutes(GpuLoan(settings=ps), fast_minutes), calm, 600)
    _, slow = runner.run_one(
        spec, trace, _tick_minutes(GpuLoan(settings=ps), slow_minutes), replace(calm, skip_quiet_ticks=False), 600
    )
    assert _strip(fast) == _strip(slow)
    assert fast["node_launches"] == (1 if "elastic" in lands_on else 0)
    binds_and_ends = {minute, minute + 30}
    assert binds_and_ends <= set(slow_minutes)
    assert (binds_and_ends & set(fast_minutes)) == (binds_and_ends if ticks else set())


@requires_shared_prices
@pytest.mark.parametrize("workload", ["batch", "service"])
def test_a_floor_nodes_figures_wake_the_tick_only_where_a_rule_reads_them(tmp_path, workload):
    """A 1-GPU job runs 30 minutes from minute 200 on an empty floor node (the floor's two 8-GPU nodes, nothing
    else running). Its CloudWatch figures then move for the delay plus the longest window after it starts and
    ends. A batch pool's rules read no floor node's figures (they are only reported), so the tick does not run
    while they move; a service pool's scale-up reads the mean over every node, floor included, so it does. Either
    way the result is the tick-by-tick one."""
    from sim.controllers.gpuloan import pool_settings

    spec = _prod_training()  # floor 2 x p4d.24xlarge
    path = tmp_path / "t.csv"
    path.write_text(f"submit_s,duration_s,gpus\n0,36000,8\n{200 * 60},1800,1\n")
    trace = traces.read_trace(path)
    ps = replace(pool_settings(spec), budget_monthly_usd=None, workload=workload)
    calm = SimSettings(spot_interruptions_per_month=0.0)
    fast_minutes: list[int] = []
    _, fast = runner.run_one(spec, trace, _tick_minutes(GpuLoan(settings=ps), fast_minutes), calm, 600)
    _, slow = runner.run_one(spec, trace, GpuLoan(settings=ps), replace(calm, skip_quiet_ticks=False), 600)
    assert _strip(fast) == _strip(slow)
    assert fast["node_launches"] == 0  # the job ran on the floor
    longest = max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes)
    moving = set(range(201, 230 + calm.metric_delay_minutes + longest + 1)) - {230}  # bar its end's own minute
    woken = moving & set(fast_minutes)
    assert (woken == set()) if workload == "batch" else woken
