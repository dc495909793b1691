"""scripts/bench_scale.py (`make bench-scale`, simulator part; issue 41 item 1): the organizations it builds from
the ITP traces differ pool by pool and cover the horizon, and a tiny run prints the lines the issue names."""

from __future__ import annotations

import pytest
from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces, resolved_prices

from scripts import bench_scale
from sim.traces import Job, JobsTrace


def _trace() -> JobsTrace:
    return JobsTrace("t", "generic", tuple(Job(f"j{d}", d * 86400 + 60, 3600, 1) for d in range(56)))


def test_a_tiled_trace_is_shifted_and_repeated_to_the_horizon():
    out = bench_scale.tiled(_trace(), shift=10, days=90)
    submits = [j.submit_s for j in out.jobs]
    assert submits == sorted(submits) and max(submits) < 90 * 86400
    assert len(out.jobs) == 90  # one job a day, the 56 days and then 34 of them again
    assert out.jobs[0].job_id == "j10-0"  # day 10 of the trace is day 0 of the pool
    assert len({j.job_id for j in out.jobs}) == len(out.jobs)


def test_no_two_of_128_pools_replay_the_same_days_and_16_are_bench_environments_months():
    from scripts.bench_environment import MONTHS

    assert len({bench_scale.month(i) for i in range(128)}) == 128
    assert [bench_scale.month(i) for i in range(16)] == [(c, first - 1) for c, first, _ in MONTHS]
    # doubling the pools doubles every month: pools 16-31 are the same months, 17 days later
    assert [bench_scale.month(i + 16) for i in range(16)] == [
        (c, (s + 17) % 56) for c, s in (bench_scale.month(i) for i in range(16))
    ]


@requires_shared_traces
@requires_shared_prices
def test_an_organization_names_each_pool_by_cluster_and_shift_and_sizes_it():
    cfg, demands, horizon = bench_scale.organization(resolved_prices(), SHARED_TRACES / "itp", 12, 31)
    assert horizon == 31 * 1440 and len(cfg.pools) == 12 == len(demands)
    assert list(demands)[:2] == ["c01-s0", "c02-s0"] and list(demands)[9:11] == ["c02-s31", "c03-s31"]
    assert demands["c02-s0"].jobs != demands["c02-s31"].jobs  # the same cluster, other days
    assert cfg.scheduling.kueue.enabled  # every floor lendable in the environment's cohort


@requires_shared_traces
@requires_shared_prices
def test_128_pools_validate_as_shipped_with_60_floors_lent():
    """The largest organization is one a user could deploy: every Kueue queue lists at most 64 flavors, because
    only the first 60 floors lend (the others' teams lend 0 %, what the validation error tells a user to do)."""
    from config.scheduling import MAX_FLAVORS_PER_GROUP, pool_queue

    cfg, _, _ = bench_scale.organization(resolved_prices(), SHARED_TRACES / "itp", 128, 3)
    floors = [p for p in cfg.pools if p.guaranteed]
    lending = [p for p in floors if cfg.scheduling.kueue.sharing(p.team).lending_limit_pct > 0]
    assert len(cfg.pools) == 128 and len(floors) > bench_scale.MAX_LENDERS
    assert lending == floors[: bench_scale.MAX_LENDERS]
    assert max(len(pool_queue(cfg, p).flavors) for p in cfg.pools) <= MAX_FLAVORS_PER_GROUP


@requires_shared_traces
@requires_shared_prices
def test_a_tiny_run_prints_each_simulation_and_the_two_ratio_lines(capsys):
    rc = bench_scale.main(["--traces", str(SHARED_TRACES / "itp"), "--runs", "2:3,4:3,2:9"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    rows = [line.split() for line in out if line[:5].strip().isdigit()]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (p, d, pol) for p, d in (("2", "3"), ("4", "3"), ("2", "9")) for pol in ("gpuloan", "karpenter")
    ]
    assert all(float(r[4]) >= 0 and int(r[6].replace(",", "")) > 0 for r in rows)  # CPU s, peak MB
    assert out[-2].startswith("pools x2 ratio: ") and out[-1].startswith("days x3 ratio: ")
    assert float(out[-2].split(": ")[1]) > 0 and float(out[-1].split(": ")[1]) > 0


def test_the_make_target_runs_it_and_leaves_the_tick_line_last():
    recipe = (REPO / "Makefile").read_text().split("\nbench-scale:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/bench_scale.py" in recipe and "scripts/bench_scale_tick.py" in recipe
    assert recipe.index("bench_scale.py") < recipe.index("bench_scale_tick.py")


@pytest.mark.parametrize("runs", [bench_scale.DEFAULT_RUNS, bench_scale.FULL_RUNS])
def test_each_size_has_its_smaller_step_measured(runs):
    for pools, days in runs:
        assert pools == 16 or (pools // 2, days) in runs
        assert days == 31 or (pools, 31) in runs
