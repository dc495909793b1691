"""The organization advisor's simulated mode (issue 27): the report window is measured inside ONE run over the
whole history (not the whole run minus a run of the sizing window), identical simulations run once, and the
shortage scenarios run through the environment simulator (advise/org_advisor.py EnvironmentRunner,
sim/environment.py window_from_minute, sim/engine.py shortage windows)."""

from __future__ import annotations

import sys

import pytest
from conftest import requires_shared_prices, requires_shared_traces, stack_config, resolved_prices

from advise import org_advisor
from sim import demand as simdemand
from sim.engine import ON_DEMAND, SimSettings
from sim.environment import simulate_environment
from sim.fluid import PoolPrices, Scenario
from sim.controllers.gpuloan import GpuLoan
from sim.controllers.karpenter import Karpenter
from sim.metrics import percentile
from sim.traces import Job, JobsTrace
from pricing import checks
from config import config

pytestmark = requires_shared_prices

ITYPE, REGION = "g6.xlarge", "us-east-1"  # one GPU per node: a job of g GPUs needs g nodes' worth
CALM = SimSettings(spot_interruptions_per_month=0.0)
HOURS, SIZING = 48, 24
KARPENTER = {"karpenter": lambda spec: Karpenter(), "gpuloan": lambda spec: GpuLoan()}


def _cfg(prod_share_pct: float = 100.0) -> config.GpuLoanConfig:
    """Two pools: `prod` (production tier, on-demand elastic) and `exp` (experiment, spot), no floors yet (the
    runner sets them per setup)."""
    data = stack_config("dev")
    data["gpuloan:pools"] = [
        {
            "name": "prod",
            "team": "team-prod",
            "tier": "production",
            "elastic": {"instance_types": [ITYPE], "capacity": "on_demand", "max_nodes": 4},
            "service_target": {"production_share_pct": prod_share_pct},
        },
        {
            "name": "exp",
            "team": "team-exp",
            "tier": "experiment",
            "elastic": {"instance_types": [ITYPE], "capacity": "spot", "max_nodes": 2},
        },
    ]
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": []}}
    data["gpuloan:budget"]["monthly_usd"] = 1_000_000
    return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


def _jobs(name: str, rows) -> JobsTrace:
    """rows: (submit hour, duration hours, GPUs)."""
    return JobsTrace(
        name, "generic", tuple(Job(f"{name}-{k}", a * 3600, d * 3600, g) for k, (a, d, g) in enumerate(rows))
    )


def _traces() -> dict[str, JobsTrace]:
    # prod: a long job across the window's start (submitted at hour 20, 10 hours: served by the end of the run,
    # unfinished at hour 24), one in the window served, one submitted late and unfinished at the end.
    prod = _jobs("prod", [(2, 3, 1), (20, 10, 1), (30, 2, 1), (46, 5, 1)])
    # exp: a burst in the sizing window bigger than its 2 spot nodes (long waits), a few jobs in the window that
    # find room at once (waits of a boot)
    burst = [(1 + k / 60, 4, 1) for k in range(12)]
    exp = _jobs("exp", [*burst, (28, 1, 1), (33, 1, 1), (40, 1, 1)])
    return {"prod": prod, "exp": exp}


def _demands(traces):
    return simdemand.profiles(traces, {"prod": simdemand.PRODUCTION, "exp": simdemand.EXPERIMENT}, HOURS, 1.0)


def _runner(traces, **kw):

    p = resolved_prices().price(ITYPE, REGION)
    prices = {n: PoolPrices(ITYPE, REGION, 1, p.ondemand_usd_per_hour, p.spot_usd_per_hour) for n in traces}
    return org_advisor.environment_runner(resolved_prices(), _cfg(), traces, CALM, prices, **kw), prices


def _plain_run(traces, floors, controller, hours=HOURS, settings=CALM, lend=False):
    """The same setup through simulate_environment with no window: the figures read straight off the jobs."""
    cfg = org_advisor.setup_config(_cfg(), floors, lend=lend)
    cut = {n: org_advisor._cut(t, hours) for n, t in traces.items()}
    return simulate_environment(resolved_prices(), cfg, cut, KARPENTER[controller], settings, hours * 60)


def _unmet_submitted_from(res, pool: str, hour: int, end_hour: int = HOURS) -> float:
    """GPU-hours of the work of jobs submitted from `hour` on that was due by the end (from submission on) and not
    served by then."""
    sim = res.sims[pool]
    w = sim.workload
    out = 0.0
    for job, g, r in zip(sim.trace.jobs, w.gpus, w.remaining_s):
        if job.submit_s >= hour * 3600:
            due = min(job.duration_s, end_hour * 3600 - job.submit_s)
            out += g * max(0.0, due - (job.duration_s - r))
    return out / 3600


def test_unmet_work_of_the_report_window_is_measured_in_one_run_and_is_never_negative():
    traces = _traces()
    runner, _ = _runner(traces)
    no_floors = {"prod": 0, "exp": 0}
    run = runner(
        _demands(traces), no_floors, lend=False, controller="karpenter", scenario=Scenario(), report_from_hour=SIZING
    )
    whole = _plain_run(traces, no_floors, "karpenter")
    # the definition: work of jobs submitted in the window not served by the end of the run
    expected = _unmet_submitted_from(whole, "prod", SIZING)
    assert expected > 0  # the job submitted at hour 46 waits for a node: its first minutes are unmet
    assert run.pools["prod"].unmet_gpu_hours == pytest.approx(expected, abs=1e-3)
    assert run.pools["prod"].unmet_production_gpu_hours == pytest.approx(expected, abs=1e-3)
    # what the old measurement (the whole run minus a run of the sizing window alone) gave here: negative, as
    # the hour-20 job is unfinished at the end of the sizing run but served in the whole run
    sizing = _plain_run(traces, no_floors, "karpenter", hours=SIZING)
    old = whole.pools["prod"]["unmet_gpu_hours"] - sizing.pools["prod"]["unmet_gpu_hours"]
    assert old < 0 < run.pools["prod"].unmet_gpu_hours


def test_pending_time_is_over_the_jobs_submitted_in_the_report_window():
    traces = _traces()
    runner, _ = _runner(traces)
    no_floors = {"prod": 0, "exp": 0}
    run = runner(
        _demands(traces), no_floors, lend=False, controller="karpenter", scenario=Scenario(), report_from_hour=SIZING
    )
    whole = _plain_run(traces, no_floors, "karpenter")
    w = whole.sims["exp"].workload
    pending = w.pending_minutes(HOURS * 60)
    in_window = [x for x, s in zip(pending, w.submit_s) if s >= SIZING * 3600]
    exp = run.pending_by_tier["experiment"]
    assert exp["p95_pending_minutes"] == round(percentile(in_window, 95), 1)
    assert exp["p99_pending_minutes"] == round(percentile(in_window, 99), 1)
    assert exp["max_pending_minutes"] == round(max(in_window), 1)
    # the sizing window's burst waited for hours; the whole run's p95 is that burst's, not the window's
    assert whole.environment["p95_wait_minutes_by_tier"]["experiment"] > 10 * exp["p95_pending_minutes"]


def test_reclaims_and_lending_are_counted_only_where_they_happen():
    """Lending and reclaim in the sizing window only: the window's floor figures and reclaim count are the
    window's, not the run's (the floor is there from hour 0 of the run)."""
    # prod owns a 2-node floor; its jobs come back at hour 6 while exp borrows it (a reclaim), then prod uses its
    # floor alone in the window; exp's burst of hour 1 borrows the idle floor
    traces = {
        "prod": _jobs("prod", [(6, 1, 2), (26, 4, 1), (36, 4, 1)]),
        "exp": _jobs("exp", [(1 + k / 60, 8, 1) for k in range(6)]),
    }
    runner, _ = _runner(traces)
    floors = {"prod": 2, "exp": 0}
    run = runner(
        _demands(traces), floors, lend=True, controller="gpuloan", scenario=Scenario(), report_from_hour=SIZING
    )
    whole = _plain_run(traces, floors, "gpuloan", lend=True)
    assert whole.environment["reclaim_preemptions"] > 0 and whole.environment["floor_lent_gpu_hours"] > 0
    m = run.pools["prod"]
    assert run.pools["exp"].reclaim_preemptions == 0 and m.floor_lent_gpu_hours == 0
    assert m.floor_gpu_hours == 2 * (HOURS - SIZING)
    assert m.floor_owned_gpu_hours == pytest.approx(8, abs=0.5)  # the two 4-hour jobs of the window
    # a window from hour 0 is the whole run: the same figures as the run's own totals
    run0 = runner(_demands(traces), floors, lend=True, controller="gpuloan", scenario=Scenario(), report_from_hour=0)
    for n in traces:
        for k in (
            "floor_gpu_hours",
            "floor_owned_gpu_hours",
            "floor_lent_gpu_hours",
            "reclaim_preemptions",
            "reclaim_lost_gpu_hours",
            "production_interruptions",
        ):
            assert getattr(run0.pools[n], k) == pytest.approx(whole.pools[n][k], abs=1e-3), (n, k)


def test_identical_simulations_run_once_and_the_cache_gives_the_uncached_figures():
    traces = _traces()
    cached, prices = _runner(traces)
    uncached, _ = _runner(traces, use_cache=False)

    rate = resolved_prices().price(ITYPE, REGION).ondemand_usd_per_hour * 0.6  # a test rate, not a price claim
    inputs = org_advisor.OrgInputs(_demands(traces), prices, {(ITYPE, REGION): rate}, "t", SIZING, 7, 90.0)
    # a seed whose on-demand shortage falls in this short report window (a scenario run of its own)
    seed = next(
        s
        for s in range(1, 200)
        if org_advisor.scenario_for("on-demand-shortage", HOURS, SIZING, s).on_demand_short_hours
    )
    a = org_advisor.evaluate(
        inputs, cached, scenarios=("default", "on-demand-shortage"), seed=seed, per_pool_prices=False
    )
    b = org_advisor.evaluate(
        inputs, uncached, scenarios=("default", "on-demand-shortage"), seed=seed, per_pool_prices=False
    )
    assert a == b
    # five distinct simulations: karpenter (karpenter+savings-plan shares it), karpenter-shared (and its plan), the
    # floors lent (gpuloan, in a pool per team and in shared pools), the floors not lent (team-floors and
    # floors-not-lent share it), each branched at the report window into the shortage scenario; the commitments
    # read the default runs' sizing hours
    assert cached.runs == 5 and cached.hits > 0
    assert uncached.runs > cached.runs and uncached.hits == 0
    # another term bills the same simulations: no new run
    runs = cached.runs
    org_advisor.evaluate(
        inputs.__class__(**{**inputs.__dict__, "term": "other", "ri_rates": {(ITYPE, REGION): rate * 0.7}}),
        cached,
        scenarios=("default",),
        seed=seed,
        per_pool_prices=False,
    )
    assert cached.runs == runs


def test_on_demand_shortage_runs_through_the_simulator_and_reports_unmet_production():
    """No elastic capacity in the report window: karpenter's production work submitted there is left unmet; the
    floor (reserved capacity) keeps serving production within it."""
    traces = {
        "prod": _jobs("prod", [(2, 3, 1), (10, 2, 2), (30, 3, 1), (36, 2, 2), (42, 3, 1)]),
        "exp": _jobs("exp", [(3, 1, 1)]),
    }
    runner, _ = _runner(traces)
    short = Scenario("on-demand-shortage", on_demand_short_hours=frozenset(range(SIZING, HOURS)))
    d = _demands(traces)
    k = runner(d, {"prod": 0, "exp": 0}, lend=False, controller="karpenter", scenario=short, report_from_hour=SIZING)
    ours = runner(d, {"prod": 2, "exp": 0}, lend=True, controller="gpuloan", scenario=short, report_from_hour=SIZING)
    assert k.pools["prod"].unmet_production_gpu_hours == pytest.approx(3 + 4 + 3, abs=1e-6)  # nothing launched
    assert ours.pools["prod"].unmet_production_gpu_hours == 0
    # GPUs waiting, minute by minute: karpenter's jobs wait from submission to the end of the run (hours 30, 36
    # and 42: 18 x 1 + 12 x 2 + 6 x 1); the floor starts every one of ours at once, so none waited within it
    assert k.pools["prod"].production_waiting_gpu_hours == pytest.approx(18 + 24 + 6, abs=1e-6)
    assert k.pools["prod"].unmet_guaranteed_production_gpu_hours == 0  # no floor: nothing was guaranteed
    assert ours.pools["prod"].production_waiting_gpu_hours == 0
    assert ours.pools["prod"].unmet_guaranteed_production_gpu_hours == 0
    # the default scenario serves karpenter's production work (the shortage is what left it unmet)
    k0 = runner(
        d, {"prod": 0, "exp": 0}, lend=False, controller="karpenter", scenario=Scenario(), report_from_hour=SIZING
    )
    assert k0.pools["prod"].unmet_production_gpu_hours == 0
    # the scenario is a run of its own, the default one is not reused for it
    assert runner.runs == 3


def test_the_simulated_advice_reports_every_scenario():
    traces = _traces()
    runner, prices = _runner(traces)
    inputs = org_advisor.OrgInputs(_demands(traces), prices, {(ITYPE, REGION): 0.5}, "t", SIZING, 7, 90.0)
    doc = org_advisor.evaluate(inputs, runner, per_pool_prices=False)
    assert set(doc["scenarios"]) == {"spot-shortage", "on-demand-shortage"}
    for sc in doc["scenarios"].values():
        rows = [sc["recommendation_report"], *sc["baselines"]]
        assert all(r["model"] == "simulated" for r in rows if r["name"] != "fluid-bound")
        assert all(r["unmet_production_gpu_hours"] >= 0 for r in rows)
    assert "submitted in the window" in doc["report_window_note"]


def test_on_demand_launches_fail_inside_a_shortage_window():
    """sim/engine.py: on-demand launches are refused in `on_demand_unavailable_windows` and succeed after."""
    from sim.engine import Simulation
    from sim.pool import spec_from_config

    cfg = _cfg()
    settings = SimSettings(spot_interruptions_per_month=0.0, on_demand_unavailable_windows=((0, 120),))
    trace = _jobs("prod", [(0, 1, 1)])
    sim = Simulation(spec_from_config(resolved_prices(), cfg, "prod"), trace, Karpenter(), settings, 6 * 60).run()
    assert sim.c.on_demand_launch_failures > 0
    first = min((n.launched for n in sim.nodes.values() if n.group == ON_DEMAND), default=None)
    w = sim.workload
    assert w.first_start[0] >= 120 + settings.provisioning_delay_minutes
    assert first is None or first >= 120


@requires_shared_traces
def test_bench_org_smoke_runs_both_models_and_checks_the_goals_on_the_simulated_figures(capsys, monkeypatch):
    """`scripts/bench_org.py --smoke`: the fluid and the simulated tables of a few days of one rotation, every
    simulation once (the advice of both terms reads the prefilled caches: none runs again), the goals checked on
    the simulated figures with their margins, the run time printed."""
    import importlib.util

    from conftest import REPO, SHARED_TRACES

    spec = importlib.util.spec_from_file_location("bench_org", REPO / "scripts" / "bench_org.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_org", bench)  # its worker processes pickle its functions by name
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke", "--traces", str(SHARED_TRACES / "itp"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "Model: **fluid**" in out and "Model: **simulated**" in out
    assert "### The issue's goals at p90 on the simulated figures, checkpoints every 30 min, worst seed" in out
    assert "### The issue's goals at p90, no checkpoints, worst seed (reported, not required)" in out
    goals = [
        line
        for line in out.splitlines()
        if line.startswith("| reserved_") and ("met" in line or "MISSED" in line) and "min" in line
    ]
    # one row per term (one rotation) with checkpoints and one without, each goal met or missed with its margin
    assert len(goals) == 4
    for line in goals:
        assert line.count(" met") + line.count(" MISSED") == 6
    assert "gpuloan-shared $" in out
    # one per setup (gpuloan lent in both layouts and not lent, karpenter per team and shared) and checkpoint
    # setting, scenarios
    # branched
    assert "bench-org simulated: 10 simulations" in out and "s wall" in out
    for name in ("karpenter-shared $", "karpenter-shared+savings-plan $"):
        assert name in out


def test_scenarios_branched_from_one_run_give_the_figures_of_separate_runs():
    """The shortage scenarios share the run up to the report window (sim/environment.py simulate_branches: the
    run forks there, each branch adds its shortage windows): the same figures as a separate run per scenario."""
    traces = _traces()
    d = _demands(traces)
    scenarios = [
        Scenario("on-demand-shortage", on_demand_short_hours=frozenset(range(29, 37))),
        Scenario("spot-shortage", spot_short_hours=frozenset(range(26, 41))),
    ]
    setups = [
        ({"prod": 0, "exp": 0}, False, "karpenter"),
        ({"prod": 1, "exp": 0}, True, "gpuloan"),
        ({"prod": 1, "exp": 0}, False, "gpuloan"),
    ]
    for floors, lend, controller in setups:
        branched, _ = _runner(traces)
        separate, _ = _runner(traces, use_cache=False)
        got = branched.run_scenarios(
            d, floors, lend=lend, controller=controller, scenarios=scenarios, report_from_hour=SIZING
        )
        want = [
            separate(d, floors, lend=lend, controller=controller, scenario=sc, report_from_hour=SIZING)
            for sc in [Scenario(), *scenarios]
        ]
        assert branched.runs == 1 and separate.runs == 3
        assert got == want, controller
        if not lend:  # the scenarios do change these runs (exp's spot launches fail): different runs compared
            assert want[1] != want[0] and want[2] != want[0], controller


def test_production_waiting_within_its_floor_preempts_the_pools_own_interruptible_work():
    """sim/environment.py _track_production_wait: production GPUs waiting while the pool's own floor had room not
    running production. Here the pool's own interruptible job holds the one-node floor (half the pool's jobs are
    production, picked by job id: jobs 0 and 1 interruptible, job 2 production) and no elastic node launches
    (on-demand shortage over the window). In Kueue the production pool's ClusterQueue preempts lower priority
    (withinClusterQueue: LowerPriority) and its interruptible jobs run below production: the production job
    arriving at hour 26 preempts job 0 at once (it loses its work since the last checkpoint) and waits for
    nothing; karpenter, with no floor, waits to the end of the run and had nothing guaranteed."""
    from sim.environment import production_flags

    traces = {"prod": _jobs("prod", [(24.4, 10, 1), (25, 0.5, 1), (26, 2, 1)]), "exp": _jobs("exp", [(3, 1, 1)])}
    assert production_flags(traces["prod"], 0.5, CALM.seed, "prod") == [False, False, True]
    short = SimSettings(spot_interruptions_per_month=0.0, on_demand_unavailable_windows=((SIZING * 60, HOURS * 60),))
    figures, windows = {}, {}
    for controller, floors in (("gpuloan", {"prod": 1, "exp": 0}), ("karpenter", {"prod": 0, "exp": 0})):
        cfg = org_advisor.setup_config(_cfg(50), floors, lend=True)
        res = simulate_environment(
            resolved_prices(), cfg, traces, KARPENTER[controller], short, HOURS * 60, window_from_minute=SIZING * 60
        )
        w = windows[controller] = res.pools["prod"]["window"]
        figures[controller] = (w["production_waiting_gpu_hours"], w["unmet_guaranteed_production_gpu_hours"])
        if controller == "gpuloan":
            jobs = res.sims["prod"].workload
            assert jobs.first_start[2] == 26 * 60  # on the floor at once, in job 0's place
    assert figures["gpuloan"] == (0.0, 0.0)
    # job 0 was preempted once, 96 minutes into its run: the 6 minutes since its last checkpoint (every 30) are lost
    assert windows["gpuloan"]["priority_preemptions"] == 1
    assert windows["gpuloan"]["priority_lost_gpu_hours"] == pytest.approx(0.1)
    assert windows["gpuloan"]["reclaim_preemptions"] == 0  # nothing was borrowed: not a reclaim
    assert figures["karpenter"] == (pytest.approx(HOURS - 26.0), 0.0)
    assert windows["karpenter"]["priority_preemptions"] == 0


def test_production_pool_admits_by_quota_and_pins_each_job_to_its_flavor():
    """Kueue admits a ClusterQueue's workloads by priority, then creation time, each to the first flavor whose
    quota fits (issue 36: pkg/scheduler/flavorassigner/flavorassigner.go `findFlavorForPodSets`). In a production
    pool with a one-node floor (1 GPU), job 2 (production) holds the floor's quota; jobs 3-6 (interruptible, 1 GPU
    each) find the floor's quota used by production, which they may not preempt (withinClusterQueue: LowerPriority
    needs a lower priority; nothing is borrowed), so the flavor search goes on to the on-demand flavor, whose
    quota (4 nodes x 1 GPU) fits them: they are admitted there, and their pods, carrying its node selector, wait
    for on-demand nodes for the rest of the run (an on-demand shortage): Kueue never moves an admitted workload
    to another flavor, even when the floor frees. Job 7 (production) then finds both quotas used and stays
    suspended; when job 2 ends its floor quota is free and job 7 is admitted there and starts, without preempting
    anything."""
    from sim.environment import production_flags

    rows = [
        (1, 0.5, 1),
        (1.5, 0.5, 1),
        (24.5, 2, 1),
        (25, 3, 1),
        (25.1, 3, 1),
        (25.2, 3, 1),
        (25.3, 3, 1),
        (25.5, 1, 1),
    ]
    traces = {"prod": _jobs("prod", rows), "exp": _jobs("exp", [(3, 1, 1)])}
    assert production_flags(traces["prod"], 0.5, CALM.seed, "prod") == [False, False, True] + [False] * 4 + [True]
    short = SimSettings(spot_interruptions_per_month=0.0, on_demand_unavailable_windows=((SIZING * 60, HOURS * 60),))
    cfg = org_advisor.setup_config(_cfg(50), {"prod": 1, "exp": 0}, lend=True)
    res = simulate_environment(
        resolved_prices(), cfg, traces, KARPENTER["gpuloan"], short, HOURS * 60, window_from_minute=SIZING * 60
    )
    jobs = res.sims["prod"].workload
    assert jobs.first_start[2] == int(24.5 * 60)
    assert [jobs.admitted_to[k] for k in range(3, 7)] == ["elastic"] * 4
    assert [jobs.first_start[k] for k in range(3, 7)] == [None] * 4
    assert jobs.first_start[7] == int(26.5 * 60)  # as soon as job 2 ends, on the floor
    assert res.pools["prod"]["window"]["priority_preemptions"] == 0


def test_production_jobs_arriving_together_take_the_free_floor_node_and_preempt_for_the_other():
    """Two production jobs (2 and 7) arrive in the same minute at a two-node floor: one node is free, the pool's
    interruptible job 1 holds the other. The first takes the free node; the second preempts job 1 at once (it
    does not count on the node the first one takes) instead of waiting for the next change in the pool."""
    from sim.environment import production_flags

    rows = [(0.5, 0.5, 1), (24.2, 10, 1)] + [(25, 2, 1)] * 6
    traces = {"prod": _jobs("prod", rows), "exp": _jobs("exp", [(3, 1, 1)])}
    assert production_flags(traces["prod"], 0.5, CALM.seed, "prod") == [False, False, True] + [False] * 4 + [True]
    short = SimSettings(spot_interruptions_per_month=0.0, on_demand_unavailable_windows=((SIZING * 60, HOURS * 60),))
    cfg = org_advisor.setup_config(_cfg(50), {"prod": 2, "exp": 0}, lend=True)
    res = simulate_environment(
        resolved_prices(), cfg, traces, KARPENTER["gpuloan"], short, HOURS * 60, window_from_minute=SIZING * 60
    )
    jobs = res.sims["prod"].workload
    assert jobs.first_start[2] == jobs.first_start[7] == 25 * 60
    assert res.pools["prod"]["window"]["priority_preemptions"] == 1
    assert res.pools["prod"]["window"]["unmet_guaranteed_production_gpu_hours"] == 0.0


def test_pending_time_counts_every_re_wait_after_a_reclaim():
    """Total pending time per job (issue 36): a job reclaimed off a borrowed floor waits again, and that re-wait
    counts; a job never stopped waits once (its pending time is its first wait)."""
    traces = {"prod": _jobs("prod", [(6, 1, 2)]), "exp": _jobs("exp", [(1 + k / 60, 8, 1) for k in range(6)])}
    whole = _plain_run(traces, {"prod": 2, "exp": 0}, "gpuloan", lend=True)
    w = whole.sims["exp"].workload
    assert w.reclaim_preemptions > 0
    first, _ = w.waits_minutes(HOURS * 60)
    pending = w.pending_minutes(HOURS * 60)
    stopped = [k for k in range(len(first)) if pending[k] > first[k] + 1e-9]
    # every reclaimed job waited again (a boot at least, the floor being its owner's); no other job did
    assert len(stopped) == w.reclaim_preemptions
    for k in range(len(first)):
        assert pending[k] >= first[k] - 1e-9
    assert min(pending[k] - first[k] for k in stopped) >= CALM.provisioning_delay_minutes - 1
