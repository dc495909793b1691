"""The elastic path's latency per side at second resolution (sim/cloud.py, issue 36): hand-computed Ready minutes
for gpuloan's node group path and Karpenter's CreateFleet path, through the real simulator and controllers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim import cloud, traces
from sim.engine import Simulation
from sim.controllers.base import Controller
from sim.controllers.gpuloan import GpuLoan
from sim.controllers.karpenter import Karpenter
from test_sim import CALM, dev_spec

LAT = cloud.ElasticLatency()  # R 11.8 s, update 30 s, ASG 5 s; batch 1 s idle / 10 s max, CreateFleet 2 s
BOOT_S = CALM.provisioning_delay_minutes * 60  # 360 s, the same on both sides


def _trace(tmp_path, seconds):
    path = tmp_path / "t.csv"
    path.write_text("submit_s,duration_s,gpus\n" + "".join(f"{s},600,1\n" for s in seconds))
    return traces.read_trace(path)


def _starts(tmp_path, seconds, controller, lat=LAT):
    spec = replace(dev_spec(), floor_nodes=0)  # no floor: every pod needs an elastic node (1 GPU, spot)
    sim = Simulation(spec, _trace(tmp_path, seconds), controller, replace(CALM, latency=lat), 40).run()
    return sim.workload.first_start


def test_ready_minute_rounds_up_only_past_the_minute():
    assert cloud.ready_minute(59) == 1 and cloud.ready_minute(60) == 1 and cloud.ready_minute(61) == 2


def test_karpenter_batch_window_closes_one_second_after_a_burst_and_ten_after_its_first_pod():
    assert cloud.karpenter_batch_close([185], LAT) == 186
    assert cloud.karpenter_batch_close([230, 185], LAT) == 231  # 45 s apart: two windows, the last closes at 231
    burst = [100 + 0.5 * k for k in range(30)]  # a pod every 0.5 s for 15 s: the window stops at 10 s
    assert cloud.karpenter_batch_close(burst, LAT) == pytest.approx(114.5 + 1)  # the later window's close
    assert cloud.karpenter_batch_close(burst[:15], LAT) == 107 + 1  # within 10 s: 1 s after the last pod


# Hand-computed, pod at second 50 of minute 3 (230 s) or at second 5 (185 s):
# gpuloan: the function sees it at its run at 240 s, writes at 240 + 11.8 = 251.8 s, EKS applies the update at
#   281.8 s, the ASG launches at 286.8 s, the node is Ready at 646.8 s: minute 11 (10.78 rounded up), either pod.
# Karpenter: 230 s -> window closes 231 s, CreateFleet 233 s, Ready 593 s: minute 10 (9.88).
#            185 s -> 186 s, 188 s, Ready 548 s: minute 10 (9.13).
#            238 s -> 239 s, 241 s, Ready 601 s: minute 11 (10.02): a path 1 s past the minute costs a minute.
@pytest.mark.parametrize(
    "seconds,gpuloan_ready,karpenter_ready", [([230], 11, 10), ([185], 11, 10), ([185, 230], 11, 10), ([238], 11, 11)]
)
def test_each_sides_node_is_ready_at_the_hand_computed_minute(tmp_path, seconds, gpuloan_ready, karpenter_ready):
    assert cloud.nodegroup_ready_minute(cloud.nodegroup_applied_second(3, LAT), LAT, BOOT_S) == gpuloan_ready
    assert cloud.karpenter_ready_minute(cloud.karpenter_batch_close(seconds, LAT), LAT, BOOT_S) == karpenter_ready
    # through the simulator: each pod starts the minute its node is Ready
    assert _starts(tmp_path, seconds, GpuLoan()) == [gpuloan_ready] * len(seconds)
    assert _starts(tmp_path, seconds, Karpenter()) == [karpenter_ready] * len(seconds)


def test_without_the_latency_model_both_sides_are_ready_a_provisioning_delay_after_the_minute(tmp_path):
    assert _starts(tmp_path, [230], GpuLoan(), lat=None) == [9]
    assert _starts(tmp_path, [230], Karpenter(), lat=None) == [9]


def test_a_path_61_seconds_past_the_minute_costs_two_minutes_one_of_59_costs_one():
    quick = cloud.ElasticLatency(function_run_s=0, nodegroup_update_s=0, asg_launch_s=0)
    # the update is written at 240 s; the ASG acts at once; boot chosen so the path ends 59 s or 61 s past 600 s
    assert cloud.nodegroup_ready_minute(cloud.nodegroup_applied_second(3, quick), quick, 360 + 59) == 11
    assert cloud.nodegroup_ready_minute(cloud.nodegroup_applied_second(3, quick), quick, 360 + 61) == 12


class _AskAt(Controller):
    """Sets the spot group's desired size at given minutes (a node group controller without a policy)."""

    name = "ask"

    def __init__(self, sizes):
        self.sizes = sizes

    def tick(self, sim):
        if sim.now in self.sizes:
            sim.set_desired("spot", self.sizes[sim.now])

    def wake(self, sim):
        return sim.now + 1

    def repeat(self, sim, minutes):
        pass


@pytest.mark.parametrize(
    "update_s,launched,ready,conflicts",
    [
        # tick 2's update: written at 191.8 s, applied at 221.8 s, Ready 586.8 s (minute 10); tick 3's: 646.8 s (11)
        (30.0, [3, 4], [10, 11], 0),  # done before the next run: the second update is taken
        # applied at 281.8 s: still UPDATING at tick 3's run (the second update fails), Ready 646.8 s (minute 11)
        (90.0, [4], [11], 1),
    ],
)  # still UPDATING at the next run: the second update fails (ResourceInUseException)
def test_the_update_is_asynchronous_in_seconds(update_s, launched, ready, conflicts):
    lat = replace(LAT, nodegroup_update_s=update_s)
    spec = replace(dev_spec(), floor_nodes=0)
    sim = Simulation(spec, traces.SeriesTrace("s", (0,) * 30), _AskAt({2: 1, 3: 2}), replace(CALM, latency=lat), 30)
    sim.run()
    assert sorted(n.launched for n in sim.nodes.values()) == launched
    assert sorted(n.ready_at for n in sim.nodes.values()) == ready
    assert sim.c.nodegroup_update_conflicts == conflicts


def test_a_minute_series_draws_its_arrival_second_from_the_stream():
    a = cloud.drawn_arrival_second("1:exp", 7)
    assert 0 <= a < 60 and a == cloud.drawn_arrival_second("1:exp", 7) != cloud.drawn_arrival_second("1:exp", 8)


@pytest.mark.parametrize("field", ["function_run_s", "nodegroup_update_s", "create_fleet_s"])
def test_a_negative_figure_is_refused_naming_it(field):
    with pytest.raises(ValueError, match=field):
        cloud.ElasticLatency(**{field: -1.0})
