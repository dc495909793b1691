"""The simulator drives the Lambda's own tick (issue 34): sim.controllers.gpuloan.GpuLoan calls policy.tick.run_tick over the
in-memory ports of sim/controllers/ports.py, so the checks before a change, the spend estimate and the warm-up history are the
Lambda's, not a copy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policy import tick
from policy.model import ACTION_TERMINATE
from sim import runner
from sim.engine import SimSettings
from sim.controllers.gpuloan import GpuLoan
from sim.controllers.ports import SimBudgets, SimNodeGuard, SimNodeGroups, SimPods, SimState, SimUtilization
from conftest import requires_shared_prices
from test_sim_model import dev_spec, pending_only, series

CALM = SimSettings(spot_interruptions_per_month=0.0, spot_unavailable_episodes_per_week=0.0)


class Recording(GpuLoan):
    """Our controller, keeping every TickResult of the real tick with its simulated minute."""

    def start(self, sim):
        super().start(sim)
        self.results: list[tuple[int, tick.TickResult]] = []
        real = self.run_tick

        def run_tick(settings, ports, now, **kwargs):
            result = real(settings, ports, now, **kwargs)
            self.results.append((sim.now, result))
            return result

        self.run_tick = run_tick


@requires_shared_prices
def test_the_controller_runs_the_lambdas_tick_over_the_simulated_ports(tmp_path):
    controller = GpuLoan()
    assert controller.run_tick is tick.run_tick  # the function object the Lambda's handler calls
    spec = replace(dev_spec(), floor_nodes=0)
    sim, m = runner.run_one(spec, series(tmp_path, [2] * 60 + [0] * 120), controller, CALM, horizon=180)
    ports = controller.ports
    assert isinstance(ports.groups, SimNodeGroups) and isinstance(ports.utilization, SimUtilization)
    assert isinstance(ports.pods, SimPods) and isinstance(ports.budgets, SimBudgets)
    assert isinstance(ports.state, SimState) and isinstance(ports.nodes, SimNodeGuard)
    assert controller.settings.aws_calls_in_flight == 1  # no threads: deterministic
    # the policy's own bookkeeping is in its state, as in the Lambda's DynamoDB item
    state = controller.state
    assert "spend" in state and tick.pool_scope(controller.ps.name) in state["spend"]
    assert state["spend"][tick.pool_scope(controller.ps.name)]["elastic_month_usd"] > 0
    assert set(state["changed"]) <= set(controller.ps.elastic_groups) and state["changed"]
    assert ports.state.leases == {}  # taken and released by every tick
    assert m["elastic_spot_cost_usd"] > 0 and m["unmet_gpu_hours"] == 0


class RacingGuard(SimNodeGuard):
    """The race the guard exists for: a GPU pod lands on the node after the tick read it and before the cordon."""

    def __init__(self, sim):
        super().__init__(sim)
        self.raced: list[str] = []
        self.cordoned_after_check: set[str] | None = None

    def uncordon(self, node_name: str) -> None:
        super().uncordon(node_name)
        self.cordoned_after_check = set(self.cordoned)

    def cordon(self, node_name: str) -> bool:
        if not self.raced:
            self.raced.append(node_name)
            self.sim.set_busy(self.sim.nodes[node_name], 1)  # series mode: one busy GPU is one 1-GPU pod
        return super().cordon(node_name)


class Racing(Recording):
    def start(self, sim):
        super().start(sim)
        self.ports.nodes = RacingGuard(sim)


@requires_shared_prices
def test_a_termination_a_gpu_pod_forbids_is_blocked_in_the_simulator_as_on_a_cluster(tmp_path):
    # tests/policy/test_policy_safety.py: the tick cordons the node, reads its pods, and a GPU pod keeps it
    # (result.blocked, uncordoned again). The same tick, over the simulated pool.
    spec = replace(dev_spec(), floor_nodes=0)
    controller = Racing(settings=pending_only(spec))
    sim, m = runner.run_one(
        spec, series(tmp_path, [1] * 30 + [0] * 150), controller, replace(CALM, skip_quiet_ticks=False), horizon=180
    )
    guard = controller.ports.nodes
    assert guard.raced, "the policy reclaimed no idle node: the scenario did not reach the guard"
    [(minute, result)] = [(t, r) for t, r in controller.results if r.blocked]
    [(action, why)] = result.blocked
    assert action.kind == ACTION_TERMINATE and action.instance_id == guard.raced[0]
    assert why.startswith("kept: a pod on") and "requests 1 GPU(s)" in why
    assert action not in result.applied and guard.cordoned_after_check == set()  # our own cordon undone
    assert guard.blocked == 1
    # the node was not terminated then: no busy node was ever terminated in the run
    assert m["busy_node_terminations"] == 0
    later = [a for t, r in controller.results if t > minute for a in r.applied if a.kind == ACTION_TERMINATE]
    assert any(a.instance_id == guard.raced[0] for a in later) or guard.raced[0] in sim.nodes


@requires_shared_prices
@pytest.mark.parametrize("racing", [False, True])
def test_without_the_race_the_same_node_is_terminated(tmp_path, racing):
    spec = replace(dev_spec(), floor_nodes=0)
    controller = (Racing if racing else Recording)(settings=pending_only(spec))
    runner.run_one(
        spec, series(tmp_path, [1] * 30 + [0] * 150), controller, replace(CALM, skip_quiet_ticks=False), horizon=180
    )
    first = next((t, r) for t, r in controller.results if any(a.kind == ACTION_TERMINATE for a in r.plan.changes))
    assert bool(first[1].blocked) == racing and bool(first[1].applied) != racing


@requires_shared_prices
def test_the_simulated_budgets_figure_is_the_calendar_months(tmp_path):
    # AWS Budgets' MONTHLY actual spend starts again on the first of the month, 00:00 UTC (docs/aws-rules.md);
    # the simulation starts on 2021-03-04, so its first budget month ends after 28 days, not 730 hours.
    from sim.engine import Simulation
    from sim.controllers.baselines import FloorOnly
    from sim.controllers.ports import at_minute, minute_at_or_after

    spec = dev_spec()  # one floor node, billed every minute
    sim = Simulation(spec, series(tmp_path, [0] * 60), FloorOnly(), CALM, horizon_minutes=60 * 24 * 40)
    budgets = SimBudgets(sim)
    april = minute_at_or_after(at_minute(0).replace(month=4, day=1))
    assert april == 28 * 24 * 60
    sim.now = april - 60
    march = budgets.actual_usd("b")
    assert march == pytest.approx(spec.floor_usd_per_hour * (april - 60) / 60)
    sim.now = april
    assert budgets.actual_usd("b") == 0.0  # the first read of April: nothing billed in April yet
    sim.now = april + 120
    assert budgets.actual_usd("b") == pytest.approx(spec.floor_usd_per_hour * 2)


@requires_shared_prices
@pytest.mark.parametrize("trace_kind", ["jobs", "series"])
def test_the_first_arrival_minute_is_the_first_of_the_arrival_minutes(tmp_path, trace_kind):
    """The quiet-tick proof reads only the earliest arrival (SimPods.first_arrival_minute): at every minute and every
    window start it is the first of the full list the tick reads, or None when that is empty."""
    from test_sim_model import jobs

    if trace_kind == "jobs":  # submit_s, duration_s, gpus: some finish, one is larger than the pool (never counted)
        rows = [(60 * m, 60 * (5 + m % 7), 1 + m % 4) for m in range(0, 120, 3)] + [(600, 600, 10_000)]
        trace = jobs(tmp_path, rows)
    else:
        trace = series(tmp_path, [0, 2, 2, 0, 0, 5, 1, 1, 0, 3] * 12)
    checked = []

    class Checking(GpuLoan):
        def tick(self, sim):
            super().tick(sim)
            pods = self.ports.pods
            for since in range(sim.now - 30, sim.now + 1):
                full = pods.arrival_minutes(since)
                assert pods.first_arrival_minute(since) == (full[0][0] if full else None), (sim.now, since)
                checked.append(bool(full))

    runner.run_one(dev_spec(), trace, Checking(), replace(CALM, skip_quiet_ticks=False), horizon=150)
    assert any(checked) and not all(checked)  # both cases were seen
