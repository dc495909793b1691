"""`gpuloan advise --demand DIR` on minute series, and the demand inputs it refuses before any run (issue 36:
the crash to fix first and its "Bad input" paragraph)."""

from __future__ import annotations

import pytest
from conftest import requires_shared_prices, stack_config, resolved_prices
from pricing import checks

from gpuloan import cli


def _series(path, values):
    path.write_text("minute,gpus_demanded\n" + "".join(f"{m},{v}\n" for m, v in enumerate(values)))


def _prod_demand(tmp_path, days=4, research_days=None):
    _series(tmp_path / "training.csv", [16] * (days * 1440))
    _series(tmp_path / "inference.csv", [1] * (days * 1440))
    _series(tmp_path / "research.csv", [0] * ((research_days or days) * 1440))


@requires_shared_prices
def test_a_series_pool_reclaimed_before_it_served_as_much_keeps_whole_gpus():
    """The cause of `TypeError: can't multiply sequence by non-int of type 'float'` (sim/controllers/gpuloan.py `_pod_list`):
    a reclaimed node's lost work, capped by the float served counter, made a series pool's backlog, width and
    pending pods floats. They stay whole numbers, and the policy's view of them is built."""
    from sim import engine, pool as simpool, traces
    from sim.controllers.gpuloan import pool_settings
    from sim.controllers.ports import SimPods

    cfg = checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=resolved_prices())
    spec = simpool.spec_from_config(resolved_prices(), cfg, "research")
    sim = engine.Simulation(
        spec,
        traces.SeriesTrace("s", (spec.gpus_per_node,) * 120),
        None,
        engine.SimSettings(spot_unavailable_episodes_per_week=0),
    )
    assert sim.launch(engine.SPOT, 1) == 1
    (node,) = sim.nodes.values()
    node.ready_at = 0
    work = sim.workload
    work.schedule(0)
    assert node.busy == spec.gpus_per_node
    sim.now = 10  # 10 minutes of 8 GPUs since the last checkpoint, but the counter holds less (as in the crash)
    sim.c.served_gpu_minutes = 7.0
    work.evict(node)
    assert work.backlog == 7 and isinstance(work.backlog, int)  # the 7 GPU-minutes served, back to the backlog
    sim.set_busy(node, 0)
    del sim.nodes[node.id]
    work.schedule(10)  # no capacity: this minute's 8 GPUs wait beside the lost work
    assert work.backlog == 15 and isinstance(work.backlog, int)
    counts = work.pending_counts()
    assert counts and all(isinstance(n, int) for n in counts.values()), counts
    # the pod list the policy's tick reads (sim/controllers/ports.py, the simulated pending-pods port)
    ps = pool_settings(spec)
    (pods,) = SimPods(sim, ps).pending_gpus([ps.name]).values()
    assert all(isinstance(g, int) for g in pods) and sum(pods) == sum(s * n for s, n in counts.items())


@requires_shared_prices
def test_simulated_advice_on_minute_series_with_spot_reclaims_runs(tmp_path, capsys):
    """The reported crash end to end: minute series, with the spot shortages that reclaim nodes early."""
    import random

    draw = random.Random(2)  # a level held 7 minutes at a time; this seed reproduced the crash
    for pool in ("training", "inference", "research"):
        levels = [draw.choice([0, 1, 3, 5, 9, 13, 17, 24]) for _ in range(0, 4 * 1440, 7)]
        _series(tmp_path / f"{pool}.csv", [levels[m // 7] for m in range(4 * 1440)])
    rc = cli.main(
        [
            "advise",
            "-s",
            "prod",
            "--demand",
            str(tmp_path),
            "--sizing-days",
            "2",
            "--lookback-days",
            "7",
            "--model",
            "simulated",
            "--spot-episodes-per-week",
            "30",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err


@requires_shared_prices
@pytest.mark.parametrize("model", ["fluid", "simulated"])
@pytest.mark.parametrize(
    "case,extra,message",
    [
        ("a pool the config lacks", [], "typo.csv: no pool named 'typo' in this stack"),
        (
            "production share above 100",
            ["--production-share", "120"],
            "--production-share must be between 0 and 100, got 120",
        ),
        ("production share below 0", ["--production-share", "-5"], "--production-share must be between 0 and 100"),
        ("checkpoint interval 0", ["--checkpoint-interval", "0"], "--checkpoint-interval must be at least 1 minute"),
        (
            "checkpoint interval negative",
            ["--checkpoint-interval", "-30"],
            "--checkpoint-interval must be at least 1 minute, got -30",
        ),
        (
            "history shorter than the sizing window",
            ["--sizing-days", "4"],
            "--sizing-days 4: must be at least 1 and shorter than the history",
        ),
        (
            "one pool's trace shorter than the sizing window",
            ["--sizing-days", "2", "short"],
            "research.csv: 24 h of demand, shorter than the sizing window of 48 h (--sizing-days 2)",
        ),
    ],
)
def test_bad_demand_input_is_refused_naming_the_file_or_field_before_any_run(
    tmp_path, capsys, monkeypatch, model, case, extra, message
):
    from sim import fluid
    from advise import org_advisor

    short = "short" in extra
    extra = [e for e in extra if e != "short"]
    _prod_demand(tmp_path, research_days=1 if short else None)
    if case == "a pool the config lacks":
        _series(tmp_path / "typo.csv", [1] * (4 * 1440))

    def no_run(*args, **kwargs):
        raise AssertionError("a run started on bad input")

    monkeypatch.setattr(org_advisor, "environment_runner", no_run)
    monkeypatch.setattr(fluid, "run", no_run)
    rc = cli.main(["advise", "-s", "prod", "--demand", str(tmp_path), "--model", model, *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err


@requires_shared_prices
@pytest.mark.parametrize("model", ["fluid", "simulated"])
def test_a_floor_over_the_node_limit_is_refused_before_any_run_naming_pool_and_field(
    tmp_path, capsys, monkeypatch, model
):
    """Issue 36: a production pool whose p90 floor is over the stack's 64-node limit was refused only when the
    simulated setup's config was built, after minutes of simulations (and the fluid model printed the floor as
    advice). Every setup's config goes through the stack's own validation before anything runs."""
    from sim import fluid
    from advise import org_advisor

    _prod_demand(tmp_path)
    _series(tmp_path / "training.csv", [8 * 70] * (4 * 1440))  # p4d.24xlarge, 8 GPUs: a floor of 70 nodes

    def no_run(*args, **kwargs):
        raise AssertionError("a run started on a setup the stack refuses")

    monkeypatch.setattr(org_advisor, "environment_runner", no_run)
    monkeypatch.setattr(fluid, "run", no_run)
    rc = cli.main(["advise", "-s", "prod", "--demand", str(tmp_path), "--model", model])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "refused before any simulation" in err
    assert "pools[0].guaranteed.nodes (pool 'training'): Input should be less than or equal to 64" in err


@pytest.mark.parametrize("minutes", [0, -30])
def test_simulate_refuses_a_checkpoint_interval_below_a_minute_too(minutes):
    """`gpuloan simulate` and `advise` share the option (gpuloan/sim_args.py): the engine read 0 as "never" where a
    job stops and as "always" where a node is evicted, so 0 is refused like a negative value."""
    import argparse

    from gpuloan import sim_args

    parser = argparse.ArgumentParser()
    sim_args.add(parser)
    with pytest.raises(ValueError, match=f"--checkpoint-interval must be at least 1 minute, got {minutes}"):
        sim_args.settings(parser.parse_args(["--checkpoint-interval", str(minutes)]))
    assert sim_args.settings(parser.parse_args(["--checkpoint-interval", "1"])).checkpoint_interval_minutes == 1
