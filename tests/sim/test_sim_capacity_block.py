"""The Capacity Block simulation (sim/capacity_block.py, `make bench-capacity-block`): figures checked by hand on
blocks with one job per node, and the real policy driving the `after` mode."""

from __future__ import annotations

import pytest

from sim import capacity_block as cbsim

# One job longer than any block: each node's work is one job from its ready minute to EKS's eviction.
ONE_JOB = dict(
    mean_job_hours=1e9, nodes=2, gpus_per_node=8, provisioning_delay_minutes=6, checkpoint_interval_minutes=30
)


def block(**kw) -> cbsim.BlockScenario:
    # Starts Tuesday 03:00, lasts 2 days 8 h 30 min (ends Thursday 11:30 UTC).
    return cbsim.BlockScenario(
        **{"start_minute": 24 * 60 + 3 * 60, "duration_minutes": (2 * 24 + 8) * 60 + 30, **ONE_JOB, **kw}
    )


def test_after_the_policy_raises_the_group_at_the_start_and_nothing_is_lost():
    s = block()
    r = cbsim.run(s, cbsim.AFTER)
    assert r.decisions[0] == (s.start_minute, "CAPACITY_BLOCK_START")  # the real policy, at the first tick
    assert r.idle_start_node_minutes == 2 * 6  # only the boot
    assert r.lost_gpu_minutes == 0
    # The job saved by D: from its ready minute to D - 5 min (its save), 8 GPUs, 2 nodes.
    ready = s.start_minute + 6
    assert r.handed_over_gpu_minutes == 2 * 8 * (s.scale_down_minute - 5 - ready)
    assert r.idle_end_node_minutes == 2 * 40  # EKS's 40 minutes, as before


def test_before_the_block_idles_until_the_next_deploy_and_the_end_cuts_the_work():
    s = block(deploy_delay_minutes=6 * 60)
    r = cbsim.run(s, cbsim.BEFORE)
    assert r.decisions == []
    assert r.idle_start_node_minutes == 2 * (6 * 60 + 6)
    ready = s.start_minute + 6 * 60 + 6
    since_checkpoint = (s.scale_down_minute - ready) % 30
    assert since_checkpoint  # this block's numbers do not hide the loss behind a checkpoint at D
    assert r.lost_gpu_minutes == 2 * 8 * since_checkpoint
    assert r.idle_end_node_minutes == 2 * 40


def test_a_deploy_after_ekss_scale_down_never_raises_the_block():
    s = block(deploy_delay_minutes=3 * 24 * 60)
    r = cbsim.run(s, cbsim.BEFORE)
    assert r.idle_node_minutes == 2 * s.duration_minutes and r.lost_gpu_minutes == 0


@pytest.mark.parametrize("lead,write,lost", [(0, 5, True), (30, 5, False), (3, 5, True), (10, 10, False)])
def test_the_drain_saves_the_work_only_when_the_save_fits_before_the_scale_down(lead, write, lost):
    s = block(checkpoint_lead_minutes=lead, checkpoint_write_minutes=write, start_minute=24 * 60 + 3 * 60 + 7)
    r = cbsim.run(s, cbsim.AFTER)
    assert (r.lost_gpu_minutes > 0) == lost


def test_compare_reports_after_once_and_before_per_deploy_delay():
    rows = cbsim.compare(blocks=6, seed=3, deploy_delays_minutes=(60, 360))
    assert [(m, d) for m, d, _ in rows] == [("after", None), ("before", 60), ("before", 360)]
    after, one_hour, six_hours = (s for _, _, s in rows)
    assert after.lost_gpu_hours == 0 < one_hour.lost_gpu_hours
    assert after.idle_start_node_minutes == 6 * 2 * 6  # 6 blocks x 2 nodes x the boot
    assert one_hour.idle_start_node_minutes == 6 * 2 * (60 + 6)
    assert six_hours.idle_start_node_minutes > one_hour.idle_start_node_minutes
    assert cbsim.compare(blocks=6, seed=3, deploy_delays_minutes=(60,)) == rows[:2]  # same seed, same figures
