"""The interface every simulated controller has.

Each controller has `start(sim)` (capacity at minute 0) and `tick(sim)` (once per simulated minute). They see
the simulated world only through what a real controller could see: nodes, their utilization, pending pods,
and the answer to a launch request.
"""

from __future__ import annotations


from sim.engine import Simulation


class Controller:
    """A policy under test. `wake(sim)` is the first minute after now at which its tick could act differently
    when nothing else happens (no node event, arrival, completion or demand change): the simulator skips the
    minutes before it, and calls `repeat(sim, k)` for the k skipped ticks."""

    name = "base"
    uses_spot = False
    node_groups = True  # capacity through Auto Scaling groups that converge to a desired size

    def start(self, sim: Simulation) -> None:
        pass

    def tick(self, sim: Simulation) -> None:
        pass

    def wake(self, sim: Simulation) -> int:
        return sim.horizon

    def repeat(self, sim: Simulation, ticks: int) -> None:
        pass

    def decision_figures(self) -> dict:
        """The controller's own account of its decisions, added to the pool's figures (sim/metrics.py
        `metrics_of`): none here; gpuloan's (its decide calls, their reasons, the budget cap's held minutes)."""
        return {}
