"""The baselines our policy is compared with: the floor alone, a static peak and the utilization script."""

from __future__ import annotations


from sim.engine import GUARANTEED, ON_DEMAND, Simulation
from sim.controllers.base import Controller


class FloorOnly(Controller):
    """Only the guaranteed floor; demand above it waits."""

    name = "floor-only"


class StaticPeak(Controller):
    """Floor plus the pool's whole elastic maximum on on-demand, always on: no waiting beyond the peak, no spot."""

    name = "static-peak"

    def start(self, sim: Simulation) -> None:
        sim.start_static(ON_DEMAND, sim.spec.elastic_max_nodes)


class ThresholdScript(Controller):
    """The utilization script of the original design notes, with GPU utilization in place of its CPU metric:
    every 5 minutes (its cron), if the average GPU utilization of the pool's nodes is above 80 % it launches one
    on-demand instance (`aws ec2 run-instances`); an elastic instance whose average utilization over the last hour
    is below 10 % is terminated, whatever runs on it. Instances younger than the hour have no datapoint and stay.
    Capped at the pool's elastic maximum (the script has no cap; the same pool config for every policy). With no
    ready node there is nothing to measure (the script runs nvidia-smi on a GPU machine) and nothing is launched.
    Its premise is 1-2 reserved cards to measure on: on a pool without a floor it runs with `floor_nodes_needed`
    (sim.runner.compare reports that row with its own floor). Deviations from the script, all in its favour, are
    listed in docs/simulator.md."""

    name = "threshold-script"
    node_groups = False  # run-instances / terminate-instances: no Auto Scaling group replaces anything
    floor_nodes_needed = 1

    def __init__(self, every_minutes: int = 5, up_pct: float = 80.0, idle_pct: float = 10.0, window_minutes: int = 60):
        self.every, self.up, self.idle, self.window = every_minutes, up_pct, idle_pct, window_minutes

    def tick(self, sim: Simulation) -> None:
        if sim.now % self.every:
            return
        nodes = [n for n in sim.nodes.values() if n.ready_at <= sim.now]
        if nodes:
            avg = 100.0 * sum(n.busy for n in nodes) / sum(n.gpus for n in nodes)
            if avg > self.up and sim.count(ON_DEMAND) < sim.spec.elastic_max_nodes:
                sim.launch(ON_DEMAND, 1)
        for n in list(sim.nodes.values()):
            if n.group == GUARANTEED or sim.now - n.launched < self.window:
                continue
            _, mean = sim.window_utilization(n, self.window, at=sim.now - sim.settings.metric_delay_minutes)
            if mean is not None and mean < self.idle:
                sim.terminate(n.id)

    def wake(self, sim: Simulation) -> int:
        return (sim.now // self.every + 1) * self.every  # its cron
