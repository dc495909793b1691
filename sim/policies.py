"""The policies compared on the same simulated pool: ours (the real policy.engine.decide) and the baselines.

Each controller has `start(sim)` (capacity at minute 0) and `tick(sim)` (once per simulated minute). They see
the simulated world only through what a real controller could see: nodes, their utilization, pending pods,
and the answer to a launch request.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

from policy import engine
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_PENDING,
    Group,
    Node,
    Observation,
    PoolObservation,
    PoolSettings,
    Settings,
    Spend,
)
from sim.engine import GUARANTEED, ON_DEMAND, SPOT, Simulation
from sim.pool import PoolSpec

# The ITP traces start on 2021-03-04; any fixed UTC origin works (it only places the month boundaries).
SIM_EPOCH = datetime(2021, 3, 4, tzinfo=timezone.utc)


class Controller:
    name = "base"
    uses_spot = False

    def start(self, sim: Simulation) -> None:
        pass

    def tick(self, sim: Simulation) -> None:
        pass


class FloorOnly(Controller):
    """Only the guaranteed floor; demand above it waits."""

    name = "floor-only"


class StaticPeak(Controller):
    """Floor plus the pool's whole elastic maximum on on-demand, always on: no waiting beyond the peak, no spot."""

    name = "static-peak"

    def start(self, sim: Simulation) -> None:
        sim.start_static(ON_DEMAND, sim.spec.elastic_max_nodes)


class Karpenter(Controller):
    """What Karpenter does with a NodePool of the pool's types and capacity types, done well:
    - provisioning: pending pods are bin-packed (first fit decreasing) onto free GPUs of existing nodes and
      nodes in flight; the rest get new nodes at once (no cooldown, no step limit), within the NodePool limit;
    - capacity type: spot first (price-capacity-optimized); an insufficient-capacity error falls back to
      on-demand within the same provisioning round when the NodePool allows on-demand;
    - disruption: consolidationPolicy WhenEmpty, consolidateAfter 15m (empty nodes only: running training pods
      are not evicted to consolidate; a node that never received a pod counts as empty from when it is ready);
    - interruption handling: at the 2-minute notice the node is cordoned and "the NodePool will start a new node
      as soon as it sees the Spot interruption warning" (karpenter.sh docs, Disruption > Interruption): the pods
      on a warned node are provisioned for like pending pods.
    """

    name = "karpenter"

    def __init__(self, consolidate_after_minutes: int = 15):
        self.consolidate_after = consolidate_after_minutes
        self.uses_spot = True

    def tick(self, sim: Simulation) -> None:
        spec = sim.spec
        now = sim.now
        gpn = spec.gpus_per_node
        pending = sim.workload.pending_list() + self._displaced(sim)
        if pending:
            # free GPUs that pending pods may land on: ready, not cordoned; nodes in flight count as empty
            free = sorted((n.gpus - n.busy for n in sim.nodes.values() if not n.warned and n.gpus > n.busy),
                          reverse=True)
            whole = sum(1 for f in free if f == gpn)
            new_nodes = 0
            bins: list[int] = []
            for need in sorted(pending, reverse=True):
                if need > gpn:
                    k = -(-need // gpn)
                    use = min(k, whole)
                    whole -= use
                    new_nodes += k - use
                    continue
                for i, f in enumerate(free):
                    if f >= need:
                        if f == gpn:
                            whole -= 1
                        free[i] = f - need
                        break
                else:
                    for i, f in enumerate(bins):
                        if f >= need:
                            bins[i] = f - need
                            break
                    else:
                        bins.append(gpn - need)
            new_nodes += len(bins)
            if new_nodes:
                self._provision(sim, new_nodes)
        for node in list(sim.nodes.values()):
            if node.group != GUARANTEED and node.ready_at <= now and node.busy == 0:
                empty_since = node.ready_at if node.empty_since is None else max(node.empty_since, node.ready_at)
                if now - empty_since >= self.consolidate_after:
                    sim.terminate(node.id)

    @staticmethod
    def _displaced(sim: Simulation) -> list[int]:
        """GPU requests of the pods on nodes under an interruption notice (one pod per node and job)."""
        warned = [n for n in sim.nodes.values() if n.warned and n.busy]
        if not warned:
            return []
        on_nodes = getattr(sim.workload, "on_nodes", None)
        if on_nodes is None:  # series mode: fluid GPUs
            return [1] * sum(n.busy for n in warned)
        return [used for n in warned for i in n.jobs for node, used in on_nodes[i] if node is n]

    def _provision(self, sim: Simulation, count: int) -> None:
        spec = sim.spec
        if spec.has_spot:
            room = spec.spot_max_nodes - sim.count(SPOT)
            if spec.has_on_demand:  # one NodePool limit over both capacity types
                room = min(room, spec.elastic_max_nodes - sim.count(SPOT) - sim.count(ON_DEMAND))
            launched = sim.launch(SPOT, max(0, min(count, room)))
            count -= launched
            if launched or not spec.has_on_demand:
                return
        if spec.has_on_demand:
            room = spec.elastic_max_nodes - sim.count(SPOT) - sim.count(ON_DEMAND)
            room = min(room, spec.on_demand_max_nodes - sim.count(ON_DEMAND))
            sim.launch(ON_DEMAND, max(0, min(count, room)))


class ThresholdScript(Controller):
    """The utilization script of the original design notes, with GPU utilization in place of its CPU metric:
    every 5 minutes (its cron), if the average GPU utilization of the pool's nodes is above 80 % it launches one
    on-demand instance (`aws ec2 run-instances`); an elastic instance whose average utilization over the last hour
    is below 10 % is terminated, whatever runs on it. Instances younger than the hour have no datapoint and stay.
    Capped at the pool's elastic maximum (the script has no cap; the same pool config for every policy). With no
    ready node there is nothing to measure (the script runs nvidia-smi on a GPU machine) and nothing is launched.
    Deviations from the script, all in its favour, are listed in docs/simulator.md."""

    name = "threshold-script"

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
            _, mean = sim.window_utilization(n, self.window)
            if mean is not None and mean < self.idle:
                sim.terminate(n.id)


# --- our policy ---------------------------------------------------------------------------------------------


def pool_settings(spec: PoolSpec) -> PoolSettings:
    """The policy settings of the simulated pool: stacks/policy_settings.py's mapping of the stack's pool (the
    knobs and prices the Lambda gets), with the simulated sizes (auto-size and floor sweeps change them)."""
    from types import SimpleNamespace

    from stacks import policy_settings

    base = policy_settings.pool_settings(SimpleNamespace(region=spec.region), spec.pool,
                                         policy_settings.GroupNames(SPOT, ON_DEMAND, GUARANTEED))
    budget = {}
    if spec.budget_monthly_usd is None:
        budget = dict(budget_monthly_usd=None)
    return dataclasses.replace(
        base, gpus_per_node=spec.gpus_per_node,
        spot_group=SPOT if spec.has_spot else None, on_demand_group=ON_DEMAND if spec.has_on_demand else None,
        spot_max_nodes=spec.spot_max_nodes if spec.has_spot else 0,
        on_demand_max_nodes=spec.on_demand_max_nodes if spec.has_on_demand else 0,
        spot_usd_per_hour=base.spot_usd_per_hour or spec.spot_usd_per_hour,
        on_demand_usd_per_hour=base.on_demand_usd_per_hour or spec.on_demand_usd_per_hour,
        guaranteed_group=GUARANTEED if spec.floor_nodes else None, guaranteed_nodes=spec.floor_nodes,
        guaranteed_usd_per_hour=spec.floor_nodes * spec.floor_usd_per_hour, **budget,
    )


class GpuLoan(Controller):
    """Our policy: every minute, build the Observation the Lambda would build and call policy.engine.decide."""

    uses_spot = True

    def __init__(self, name: str = "gpuloan", settings: PoolSettings | None = None, defaults: bool = False):
        self.name = name
        self._given = settings
        self.defaults = defaults
        self.decide = engine.decide  # the real one; tests check the identity
        self.calls = 0
        self.reasons: dict[str, int] = {}

    def start(self, sim: Simulation) -> None:
        ps = self._given or pool_settings(sim.spec)
        if self.defaults:
            base = PoolSettings(name="x", team="x", tier="x", gpus_per_node=1, spot_group=None, on_demand_group=None,
                                spot_max_nodes=0, on_demand_max_nodes=0, spot_usd_per_hour=0,
                                on_demand_usd_per_hour=0)
            knobs = ("scale_up_utilization_pct", "scale_up_window_minutes", "idle_utilization_pct",
                     "idle_timeout_minutes", "empty_timeout_minutes", "cooldown_minutes", "max_step_nodes",
                     "fallback_after_minutes")
            ps = dataclasses.replace(ps, **{k: getattr(base, k) for k in knobs})
        self.ps = ps
        self.settings = Settings(environment="sim", region=sim.spec.region, cluster_name="sim", pools=(ps,))
        sim.hist_keep = max(sim.hist_keep, ps.idle_timeout_minutes, ps.empty_timeout_minutes,
                            ps.scale_up_window_minutes) + 1
        self._node_cache: dict = {}
        self._group_cache: dict = {}
        self._last_obs = None
        self._month_spend_at_refresh = 0.0

    def observe(self, sim: Simulation, now_dt: datetime) -> Observation:
        """The Observation the Lambda would build this minute. Unchanged parts reuse last minute's objects
        (frozen dataclasses are slow to build and the engine does not care about identity)."""
        ps = self.ps
        now = sim.now
        nodes = []
        cache = self._node_cache
        used: dict = {}
        idle_w, up_w, empty_w = ps.idle_timeout_minutes, ps.scale_up_window_minutes, ps.empty_timeout_minutes
        windows = (idle_w, up_w, empty_w)
        window_start = now - max(windows) + 1
        for n in sim.nodes.values():
            if n.ready_at > now:
                key = (n.id, None, None, None)
            elif n.group == GUARANTEED:
                _, avg = sim.window_utilization(n, up_w)
                key = (n.id, avg, avg, None)
            elif now > n.launched and n.hist[-1][0] <= (n.launched if n.launched > window_start else window_start):
                # unchanged over every window (most nodes, most minutes): window_stats' answer without the call
                pct = 100.0 * n.busy / n.gpus
                key = (n.id, pct, pct, pct)
            else:
                # In the simulator a GPU is requested exactly while a job runs on it, so the reserved capacity
                # Container Insights would report equals the busy share the utilization is computed from.
                (mx, _), (_, avg), (reserved, _) = sim.window_stats(n, windows)
                key = (n.id, mx, avg, reserved)
            node = cache.get(key)
            if node is None:
                launched = SIM_EPOCH + timedelta(minutes=n.launched)
                if n.ready_at > now:
                    node = Node(n.id, n.group, launched, LIFECYCLE_PENDING)
                else:
                    # utilization over the empty window = the busy share = the reserved figure in the simulator
                    node = Node(n.id, n.group, launched, LIFECYCLE_IN_SERVICE, key[1], key[2], key[3], key[3])
            used[key] = node
            nodes.append(node)
        self._node_cache = used  # only this minute's nodes can repeat next minute
        groups = []
        for g in ps.elastic_groups:
            key = (g, sim.desired[g], sim.last_change[g], g == SPOT and sim.short_since[g] is not None)
            group = self._group_cache.get(key)
            if group is None:
                last = key[2]
                group = Group(g, key[1], 0, ps.max_nodes(g),
                              last_change_at=None if last is None else SIM_EPOCH + timedelta(minutes=last),
                              capacity_shortage=key[3])
                self._group_cache = {key: group, **{k: v for k, v in self._group_cache.items() if k[0] != g}}
            groups.append(group)
        gpn = ps.gpus_per_node
        pods = []
        for g in sim.workload.pending_list():
            while g > gpn:  # a multi-node job is one pod per node
                pods.append(gpn)
                g -= gpn
            pods.append(g)
        spend = self._spend(sim, now) if ps.budget_monthly_usd is not None else None
        key = (tuple(nodes), tuple(groups), tuple(pods), spend)
        if self._last_obs is not None and self._last_obs[0] == key:
            return self._last_obs[1]
        obs = Observation((PoolObservation(ps.name, key[1], key[0], key[2], spend),))
        self._last_obs = (key, obs)
        return obs

    def _spend(self, sim: Simulation, now: int) -> Spend:
        """Budgets' actual figure refreshed hourly (it lags), plus the running estimate since."""
        month = now // (730 * 60)
        total = sim.c.monthly_usd.get(month, 0.0)
        if now % 60 == 0:
            self._month_spend_at_refresh = total
        return Spend(self._month_spend_at_refresh, max(0.0, total - self._month_spend_at_refresh))

    def tick(self, sim: Simulation) -> None:
        now_dt = SIM_EPOCH + timedelta(minutes=sim.now)
        plan = self.decide(self.settings, self.observe(sim, now_dt), now_dt)
        self.calls += 1
        for action in plan.actions:
            self.reasons[action.reason.value] = self.reasons.get(action.reason.value, 0) + 1
            if action.kind == ACTION_SET_DESIRED:
                sim.set_desired(action.group, action.desired_to)
            elif action.kind == ACTION_TERMINATE:
                sim.terminate(action.instance_id, decrement=True)


def all_policies(spec: PoolSpec) -> list[Controller]:
    out: list[Controller] = [GpuLoan("gpuloan"), GpuLoan("gpuloan-defaults", defaults=True), StaticPeak(), FloorOnly()]
    if spec.has_spot or spec.has_on_demand:
        out += [Karpenter(), ThresholdScript()]
    return out
