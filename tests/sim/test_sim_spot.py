"""The simulator's side of issue 28: back to spot after a fallback, Karpenter's consolidation that replaces
on-demand with spot, and EC2's rebalance recommendation with and without gpuloan's early checkpoint."""

from __future__ import annotations

from dataclasses import replace

from conftest import requires_shared_prices
from sim.engine import SPOT, Simulation
from sim.controllers.gpuloan import GpuLoan
from sim.controllers.karpenter import Karpenter
from test_sim_model import CALM, jobs, pending_only, prod_spec


def _shortage_run(tmp_path, controller, rows, episode=(0, 60), horizon=900):
    """Spot cannot be launched during `episode`; 8-GPU prod training nodes, no floor."""
    spec = replace(prod_spec(), floor_nodes=0)
    sim = Simulation(spec, jobs(tmp_path, rows), controller, replace(CALM, skip_quiet_ticks=False), horizon)
    sim.episodes = [episode]
    return sim.run()


# job A (1 GPU, 3 h) arrives while spot is out and runs on an on-demand fallback node; job B (1 GPU, 10 h) arrives
# at minute 120, once spot is back
_ROWS = [(0, 3 * 3600, 1), (120 * 60, 10 * 3600, 1)]


def _gpuloan(back: bool):
    spec = replace(prod_spec(), floor_nodes=0)
    return GpuLoan("gpuloan", settings=replace(pending_only(spec), back_to_spot=back))


@requires_shared_prices
def test_once_spot_is_back_new_work_goes_to_spot_and_the_fallback_node_goes_with_its_last_job(tmp_path):
    on = _shortage_run(tmp_path, _gpuloan(True), _ROWS)
    off = _shortage_run(tmp_path, _gpuloan(False), _ROWS)
    for sim in (on, off):
        assert sim.c.on_demand_node_minutes > 0  # the fallback served job A
    # without the rule job B lands on the fallback node's free GPUs and keeps it for 10 hours at the on-demand price
    assert off.c.on_demand_node_minutes_spot_available >= 10 * 60
    # with it, B waits for a spot node; the fallback node goes once A ends (3 h after it started)
    assert on.c.on_demand_node_minutes_spot_available <= 3 * 60
    assert on.workload.first_start[1] > off.workload.first_start[1]  # the price: B waits for a spot boot
    assert on.c.spot_usd + on.c.on_demand_usd < off.c.spot_usd + off.c.on_demand_usd
    assert on.c.lost_gpu_minutes == off.c.lost_gpu_minutes == 0  # nothing running is disturbed


@requires_shared_prices
def test_karpenter_when_empty_keeps_the_fallback_node_and_underutilized_replaces_it_by_evicting(tmp_path):
    when_empty = _shortage_run(tmp_path, Karpenter(), _ROWS)
    underutilized = _shortage_run(tmp_path, Karpenter(name="k", replace_on_demand=True), _ROWS, episode=(0, 75))
    assert when_empty.c.on_demand_node_minutes_spot_available >= 10 * 60  # B joined A on the on-demand node
    assert when_empty.c.busy_terminations == 0
    # consolidation launches a spot node and, once it is ready, disrupts the on-demand one: its job is evicted and
    # loses its work since the last checkpoint
    assert underutilized.c.on_demand_node_minutes_spot_available < 60
    assert underutilized.c.busy_terminations >= 1 and underutilized.c.lost_gpu_minutes > 0


def _rebalance_run(tmp_path, controller, early: bool):
    """One 1-GPU job on a spot node; the node is interrupted at minute 200, its rebalance recommendation at 170."""
    spec = replace(prod_spec(), floor_nodes=0)
    sim = Simulation(spec, jobs(tmp_path, [(0, 8 * 3600, 1)]), controller, replace(CALM, skip_quiet_ticks=False), 400)
    tick = controller.tick

    def forced(s):
        if s.now == 1:
            node = next(n for n in s.nodes.values() if n.group == SPOT)
            s.set_reclaim(node, 200, 170 if early else None)
        tick(s)

    controller.tick = forced
    return sim.run()


@requires_shared_prices
def test_an_early_recommendation_lets_the_job_checkpoint_before_eks_drains_the_node(tmp_path):
    spec = replace(prod_spec(), floor_nodes=0)
    with_ = _rebalance_run(
        tmp_path, GpuLoan("g", settings=replace(pending_only(spec), rebalance_checkpoint=True)), early=True
    )
    without = _rebalance_run(tmp_path, GpuLoan("g", settings=pending_only(spec)), early=True)
    start = without.workload.first_start[0]
    # EKS replaced the node at the recommendation (170) and drained it once the replacement was ready (176)
    for sim in (with_, without):
        assert sim.c.spot_interruptions == 1 and sim.c.jobs_interrupted == 1
    drain = 170 + with_.settings.provisioning_delay_minutes
    last_periodic = start + (drain - start) // 30 * 30
    assert without.c.lost_gpu_minutes == drain - last_periodic  # since the last 30-minute checkpoint
    assert with_.c.lost_gpu_minutes == drain - 170  # since the checkpoint it wrote on the recommendation
    assert with_.c.lost_gpu_minutes < without.c.lost_gpu_minutes


@requires_shared_prices
def test_a_recommendation_with_the_notice_changes_nothing_and_karpenter_does_not_listen(tmp_path):
    spec = replace(prod_spec(), floor_nodes=0)
    late = _rebalance_run(
        tmp_path, GpuLoan("g", settings=replace(pending_only(spec), rebalance_checkpoint=True)), early=False
    )
    plain = _rebalance_run(tmp_path, GpuLoan("g", settings=pending_only(spec)), early=False)
    assert late.c.lost_gpu_minutes == plain.c.lost_gpu_minutes > 0  # no early signal: nothing to gain
    karpenter = _rebalance_run(tmp_path, Karpenter(), early=True)
    start = karpenter.workload.first_start[0]
    assert karpenter.c.lost_gpu_minutes == 200 - (start + (200 - start) // 30 * 30)  # reclaimed at 200, as before


@requires_shared_prices
def test_the_early_share_is_drawn_from_the_seed_slot_and_minute_alone():
    from sim.engine import SimSettings as S

    spec = replace(prod_spec(), floor_nodes=0)
    a = Simulation(spec, jobs_none(), GpuLoan("g"), S(seed=3, rebalance_early_share=0.5), 100)
    b = Simulation(spec, jobs_none(), Karpenter(), S(seed=3, rebalance_early_share=0.5), 100)
    draws = [a._rebalance_minute(k, 5000 + k) for k in range(40)]
    assert draws == [b._rebalance_minute(k, 5000 + k) for k in range(40)]
    early = [d for d in draws if d is not None]
    assert 5 < len(early) < 35 and all(10 <= 5000 + k - d <= 20 for k, d in enumerate(draws) if d is not None)
    assert all(
        Simulation(spec, jobs_none(), GpuLoan("g"), S(seed=3), 100)._rebalance_minute(k, 5000) is None
        for k in range(10)
    )


def jobs_none():
    from sim.traces import JobsTrace

    return JobsTrace("empty", "generic", ())
