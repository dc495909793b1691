"""The policies compared on the same simulated pool: ours (the Lambda's own tick, policy.tick.run_tick, over the
in-memory ports of sim/ports.py) and the baselines.

Each controller has `start(sim)` (capacity at minute 0) and `tick(sim)` (once per simulated minute). They see
the simulated world only through what a real controller could see: nodes, their utilization, pending pods,
and the answer to a launch request.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timedelta
from typing import Any

from policy import decide as rules
from policy import tick
from policy.decide import next_month_start
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_SET_LENDING_LIMIT,
    ACTION_TERMINATE,
    ENFORCEMENT_CAP,
    NodeSize,
    Observation,
    PoolSettings,
    Reason,
    Settings,
)
from policy.rhythm import SLOT_MINUTES
from policy.spend import MAX_ACCRUAL_GAP, accrue
from pricing import policy_settings
from sim.engine import GUARANTEED, ON_DEMAND, SPOT, Simulation, size_group
from sim.latency import karpenter_batch_close
from sim.packing import new_claims, new_nodes_needed
from sim.pool import PoolSpec
from sim.ports import at_minute, minute_at_or_after, node_pod_gpus, sim_ports


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


class FloorOnly(Controller):
    """Only the guaranteed floor; demand above it waits."""

    name = "floor-only"


class StaticPeak(Controller):
    """Floor plus the pool's whole elastic maximum on on-demand, always on: no waiting beyond the peak, no spot."""

    name = "static-peak"

    def start(self, sim: Simulation) -> None:
        sim.start_static(ON_DEMAND, sim.spec.elastic_max_nodes)


def displaced_pods(sim: Simulation) -> dict[int, int]:
    """GPU requests of the pods on nodes under a spot interruption notice (one pod per node and job), as counts
    per size. In series mode every busy GPU of such a node is one 1-GPU pod."""
    out: dict[int, int] = {}
    for n in sim.nodes.values():
        if n.warned and n.busy:
            for used in node_pod_gpus(sim, n):
                out[used] = out.get(used, 0) + 1
    return out


class Karpenter(Controller):
    """What Karpenter does with a NodePool of the pool's types and capacity types, done well:
    - provisioning: pending pods are bin-packed (first fit decreasing) onto free GPUs of existing nodes and
      nodes in flight; the rest get new nodes at once (no cooldown, no step limit), within the NodePool limit;
    - capacity type: spot first (price-capacity-optimized); an insufficient-capacity error falls back to
      on-demand within the same provisioning round when the NodePool allows on-demand;
    - disruption: consolidationPolicy WhenEmpty, consolidateAfter 0s, the NodePool default
      (`+kubebuilder:default:={consolidateAfter: "0s"}` on NodePoolSpec.Disruption, kubernetes-sigs/karpenter
      pkg/apis/v1/nodepool.go): empty nodes only (running training pods are not evicted to consolidate), a node
      goes in the simulated minute it empties, and one that never received a pod counts as empty from when it
      is ready. 0s is also karpenter's cheapest setting on the ITP traces at the same p95 wait
      (docs/benchmarks.md: 5 minutes cost 0.5-1.6 % more, 15 minutes 1.6-4.7 %);
    - interruption handling: at the 2-minute notice the node is cordoned and "the NodePool will start a new node
      as soon as it sees the Spot interruption warning" (karpenter.sh docs, Disruption > Interruption): the pods
      on a warned node are provisioned for like pending pods.
    - gangs: no gang awareness. It launches a node per NodeClaim (kubernetes-sigs/karpenter#3138: "a separate
      CreateFleet{Type: instant, TotalTargetCapacity: 1} per NodeClaim"), so scarce spot (SPOT_PARTIAL) leaves
      part of a multi-node job's nodes up and billing; the empty ones its pending pods are nominated to are kept
      (above), for as long as the job waits; there is no all-or-nothing launch and no bound on the wait.
    Karpenter launches instances itself (no Auto Scaling group): a reclaimed node is replaced only by this
    provisioning, never a second time by a group converging to a desired size.
    """

    name = "karpenter"
    node_groups = False

    def __init__(
        self,
        consolidate_after_minutes: int = 0,
        name: str = "karpenter",
        replace_on_demand: bool = False,
        claim_per_pod: bool = False,
    ):
        self.consolidate_after = consolidate_after_minutes
        # Pools of several node sizes: the simulator hands Karpenter a minute's pending pods as one batch; its own
        # batch window is 1 s idle, 10 s at most (karpenter.sh settings BATCH_IDLE_DURATION / BATCH_MAX_DURATION),
        # so pods seconds apart get claims of their own. `claim_per_pod` bounds that the other way: every pod that
        # fits no existing node gets its own claim (and the cheapest type that holds it). The window's timing (when
        # the launch is asked for) is modelled in seconds with SimSettings.latency (`_batch_close`, sim/latency.py).
        self.claim_per_pod = claim_per_pod
        self.uses_spot = True
        self.name = name
        # consolidationPolicy WhenEmptyOrUnderutilized, as far as on-demand nodes go: single-node consolidation may
        # replace a node with a cheaper one (a spot offering of the same type is cheaper), launching the
        # replacement first and disrupting the node once it is ready, its pods evicted (kubernetes-sigs/karpenter
        # pkg/controllers/disruption: computeConsolidation filters replacement options by price; spot-to-spot is
        # behind a feature gate, on-demand to spot is not). Only for pods that may be evicted (no
        # karpenter.sh/do-not-disrupt): a training job evicted loses its work since the last checkpoint.
        self.replace_on_demand = replace_on_demand
        self._replacing: dict[str, str] = {}  # on-demand node -> the spot node launched to replace it
        self._request_s: float | None = None  # this tick's launch request second (_batch_close)

    def _demand(self, sim: Simulation) -> dict[int, int]:
        pending = sim.workload.pending_counts()
        displaced = displaced_pods(sim)
        for size, count in displaced.items():
            pending[size] = pending.get(size, 0) + count
        return pending

    def _batch_close(self, sim: Simulation) -> float | None:
        """Second of this minute's launch request (SimSettings.latency, sim/latency.py): the close of the batch
        window holding the minute's last pod arrival; with no arrival this minute (pods still pending, pods of a
        node under a notice), a window opened at the minute's start."""
        lat = sim.settings.latency
        if lat is None:
            return None
        arrivals = sim.workload.arrival_seconds(sim.now)
        return karpenter_batch_close(arrivals, lat) if arrivals else 60.0 * sim.now + lat.batch_idle_s

    def tick(self, sim: Simulation) -> None:
        now = sim.now
        self._request_s = self._batch_close(sim)
        if self.replace_on_demand:
            self._replace_on_demand(sim)
        pending = self._demand(sim)
        # Empty nodes the pending pods are nominated to are not consolidated: Karpenter's emptiness check clears a
        # node's Empty condition while it is nominated for pods to schedule to it (cluster.IsNodeNominated in
        # kubernetes-sigs/karpenter's emptiness controller). A gang waiting for its last nodes keeps the ones up.
        sized = bool(sim.spec.sizes)
        if sized:
            nominated = sum(new_claims(pending, sim.spec.gpus_per_node).values()) if pending else 0
        else:
            nominated = new_nodes_needed(pending, sim.spec.gpus_per_node) if pending else 0
        if pending and sized:
            # Several node sizes: each new NodeClaim launches the cheapest type that fits its pods (right-sizing).
            free = [n.gpus - n.busy for n in sim.nodes.values() if not n.warned and n.gpus > n.busy]
            self._provision_sized(sim, new_claims(pending, sim.spec.gpus_per_node, free, self.claim_per_pod))
        elif pending:
            # free GPUs that pending pods may land on: not cordoned; nodes in flight count as empty
            free = [n.gpus - n.busy for n in sim.nodes.values() if not n.warned and n.gpus > n.busy]
            new_nodes = new_nodes_needed(pending, sim.spec.gpus_per_node, free)
            # Pods that may not run on spot (production work in an environment, sim/environment.py) require
            # karpenter.sh/capacity-type: on-demand: Karpenter launches on-demand nodes for them, spot for the rest.
            on_demand_only = getattr(sim.workload, "on_demand_only_pending", None)
            wants = on_demand_only() if on_demand_only is not None else None
            if wants:
                free_not_spot = [
                    n.gpus - n.busy for n in sim.nodes.values() if not n.warned and n.gpus > n.busy and n.group != SPOT
                ]
                od_nodes = new_nodes_needed(wants, sim.spec.gpus_per_node, free_not_spot)
                if od_nodes:
                    self._provision_on_demand(sim, od_nodes)
                new_nodes = max(0, new_nodes - od_nodes)
            if new_nodes:
                self._provision(sim, new_nodes)
        for node in list(sim.nodes.values()):
            if node.group != GUARANTEED and node.ready_at <= now and node.busy == 0 and not node.warned:
                if now - self._empty_since(node) >= self.consolidate_after:
                    if nominated > 0:
                        nominated -= 1
                        continue
                    sim.terminate(node.id)

    def _replace_on_demand(self, sim: Simulation) -> None:
        """Each busy on-demand node gets one spot replacement (when spot can be launched); once that is ready the
        on-demand node is disrupted: its pods are evicted (they requeue and land on the ready spot node) and it
        goes. A replacement that never became ready (reclaimed first) is tried again."""
        now = sim.now
        for node in [n for n in sim.nodes.values() if n.group == ON_DEMAND]:
            if node.ready_at > now or node.warned:
                continue
            spare = self._replacing.get(node.id)
            if spare is not None and spare not in sim.nodes:
                spare = None  # the replacement is gone (reclaimed): try again
                self._replacing.pop(node.id)
            if node.busy == 0:
                continue  # empty: the WhenEmpty rule below deletes it
            if spare is None:
                room = sim.spec.spot_max_nodes - sim.count(SPOT)
                if room > 0 and sim.launch(SPOT, 1, self._request_s):
                    newest = max((n for n in sim.nodes.values() if n.group == SPOT), key=lambda n: n.serial)
                    self._replacing[node.id] = newest.id
            elif sim.nodes[spare].ready_at <= now:
                self._replacing.pop(node.id)
                sim.terminate(node.id)  # evicts its pods (sim.c.busy_terminations counts the disruption)

    @staticmethod
    def _empty_since(node) -> int:
        return node.ready_at if node.empty_since is None else max(node.empty_since, node.ready_at)

    def wake(self, sim: Simulation) -> int:
        if self.replace_on_demand and any(n.group == ON_DEMAND for n in sim.nodes.values()):
            return sim.now + 1
        if sim.workload.pending_counts() or any(n.warned and n.busy for n in sim.nodes.values()):
            return sim.now + 1  # it provisions (or retries a failed spot launch) every minute something waits
        wake = sim.horizon
        for node in sim.nodes.values():
            if node.group != GUARANTEED and node.busy == 0 and not node.warned:
                wake = min(wake, self._empty_since(node) + self.consolidate_after)
        return wake

    @staticmethod
    def cheapest_fit(spec, used_gpus: int) -> int:
        """GPUs per node of the cheapest size that holds `used_gpus` (spot prices where the pool has spot; ties:
        the smaller size): Karpenter launches the cheapest instance type that fits a NodeClaim's pods."""
        options = [(spec.spot_usd_per_hour if spec.has_spot else spec.on_demand_usd_per_hour, spec.gpus_per_node)]
        options += [
            (z.spot_usd_per_hour if spec.has_spot else z.on_demand_usd_per_hour, z.gpus_per_node) for z in spec.sizes
        ]
        return min(o for o in options if o[1] >= used_gpus)[1]

    def _provision_sized(self, sim: Simulation, claims: dict[int, int]) -> None:
        spec = sim.spec
        by_size: dict[int, int] = {}
        for used, count in claims.items():
            size = self.cheapest_fit(spec, used)
            by_size[size] = by_size.get(size, 0) + count
        maxima = {spec.gpus_per_node: (spec.spot_max_nodes, spec.on_demand_max_nodes)}
        maxima.update({z.gpus_per_node: (z.spot_max_nodes, z.on_demand_max_nodes) for z in spec.sizes})
        for size, count in sorted(by_size.items()):
            spot = SPOT if size == spec.gpus_per_node else size_group(SPOT, size)
            od = ON_DEMAND if size == spec.gpus_per_node else size_group(ON_DEMAND, size)
            spot_max, od_max = maxima[size]
            if spec.has_spot:
                launched = sim.launch(spot, max(0, min(count, spot_max - sim.count(spot))), self._request_s)
                count -= launched
                if launched or not spec.has_on_demand:
                    continue
            if spec.has_on_demand:
                sim.launch(od, max(0, min(count, od_max - sim.count(od))), self._request_s)

    def _provision(self, sim: Simulation, count: int) -> None:
        spec = sim.spec
        if spec.has_spot:
            room = spec.spot_max_nodes - sim.count(SPOT)
            if spec.has_on_demand:  # one NodePool limit over both capacity types
                room = min(room, spec.elastic_max_nodes - sim.count(SPOT) - sim.count(ON_DEMAND))
            launched = sim.launch(SPOT, max(0, min(count, room)), self._request_s)
            count -= launched
            if launched or not spec.has_on_demand:
                return
        if spec.has_on_demand:
            self._provision_on_demand(sim, count)

    def _provision_on_demand(self, sim: Simulation, count: int) -> None:
        spec = sim.spec
        if not spec.has_on_demand:
            return
        room = spec.elastic_max_nodes - sim.count(SPOT) - sim.count(ON_DEMAND)
        room = min(room, spec.on_demand_max_nodes - sim.count(ON_DEMAND))
        sim.launch(ON_DEMAND, max(0, min(count, room)), self._request_s)


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


# --- our policy ---------------------------------------------------------------------------------------------


def pool_settings(spec: PoolSpec) -> PoolSettings:
    """The policy settings of the simulated pool: pricing/policy_settings.py's mapping of the stack's pool (the
    knobs and prices the Lambda gets), with the simulated sizes (auto-size and floor sweeps change them)."""
    from types import SimpleNamespace

    base = policy_settings.pool_settings(
        spec.prices,
        SimpleNamespace(region=spec.region),
        spec.pool,
        policy_settings.GroupNames(SPOT, ON_DEMAND, GUARANTEED),
    )
    budget = {}
    if spec.budget_monthly_usd is None:
        budget = dict(budget_monthly_usd=None)
    return dataclasses.replace(
        base,
        gpus_per_node=spec.gpus_per_node,
        spot_group=SPOT if spec.has_spot else None,
        on_demand_group=ON_DEMAND if spec.has_on_demand else None,
        spot_max_nodes=spec.spot_max_nodes if spec.has_spot else 0,
        on_demand_max_nodes=spec.on_demand_max_nodes if spec.has_on_demand else 0,
        # The budget cap prices what the simulated groups launch (sim/pool.py: the spot group its cheapest type, the
        # on-demand group its first listed, as EKS allocates them); every simulated node is of that type, so one
        # price per group (no per-type rows) is the price of each running node too.
        spot_usd_per_hour=spec.spot_usd_per_hour,
        on_demand_usd_per_hour=spec.on_demand_usd_per_hour,
        instance_usd_per_hour=(),
        guaranteed_group=GUARANTEED if spec.floor_nodes else None,
        guaranteed_nodes=spec.floor_nodes,
        guaranteed_usd_per_hour=spec.floor_nodes * spec.floor_usd_per_hour,
        **budget,
        # the pool's other node sizes, each its own pair of simulated groups (sim/engine.py size_group)
        other_sizes=tuple(
            NodeSize(
                z.gpus_per_node,
                size_group(SPOT, z.gpus_per_node) if spec.has_spot else None,
                size_group(ON_DEMAND, z.gpus_per_node) if spec.has_on_demand else None,
                z.spot_max_nodes if spec.has_spot else 0,
                z.on_demand_max_nodes if spec.has_on_demand else 0,
                z.spot_usd_per_hour,
                z.on_demand_usd_per_hour,
            )
            for z in spec.sizes
        ),
    )


class GpuLoan(Controller):
    """Our policy: the Lambda's own tick (policy.tick.run_tick: observe, decide, the checks before a change, apply,
    spend and warm-up bookkeeping in its state) over in-memory ports on the simulated pool (sim/ports.py)."""

    uses_spot = True

    def __init__(
        self,
        name: str = "gpuloan",
        settings: PoolSettings | None = None,
        defaults: bool = False,
        instant_idle: bool = False,
        keep_for_next_job: bool = True,
        gangs: bool = True,
    ):
        self.name = name
        # `gangs=False` shows the engine no pod groups (the Lambda before it read them: every pending pod on its
        # own), the "before" of scripts/bench_gangs.py.
        self.gangs = gangs
        self._given = settings
        self.defaults = defaults
        # What-ifs (scripts/benchmark.py --what-if), not product settings: `instant_idle` reads a node's GPUs and
        # pods idle from the minute its last pod ends, as if a signal as fresh as Karpenter's pod list also saw
        # the GPUs (no CloudWatch window); `keep_for_next_job=False` shows the engine no recent arrivals, so the
        # release-on-cost rule keeps no empty node. Together they bound what a faster release signal could buy.
        self.instant_idle = instant_idle
        self.keep_for_next_job = keep_for_next_job
        self.run_tick = tick.run_tick  # the Lambda's own; tests check the identity
        self.calls = 0
        self.reasons: dict[str, int] = {}
        # Minutes in which the budget cap held a wanted scale-up (BUDGET_CAP / BUDGET_UNKNOWN), as [start, end)
        # runs of simulated minutes: counted in the simulate table, named in its verdict, marked on the plot.
        self.cap_held: list[list[int]] = []

    def start(self, sim: Simulation) -> None:
        ps = self._given or pool_settings(sim.spec)
        if self.defaults:
            base = PoolSettings(
                name="x",
                team="x",
                tier="x",
                gpus_per_node=1,
                spot_group=None,
                on_demand_group=None,
                spot_max_nodes=0,
                on_demand_max_nodes=0,
                spot_usd_per_hour=0,
                on_demand_usd_per_hour=0,
            )
            knobs = (
                "scale_up_utilization_pct",
                "scale_up_window_minutes",
                "idle_utilization_pct",
                "idle_timeout_minutes",
                "empty_timeout_minutes",
                "cooldown_minutes",
                "max_step_nodes",
                "fallback_after_minutes",
                "workload",
                "launch_minutes",
                "arrival_window_minutes",
                "warm_up",
            )
            ps = dataclasses.replace(ps, **{k: getattr(base, k) for k in knobs})
        lend = getattr(sim, "lend_ahead", None)  # (configured lendingLimit, lookahead): sim/environment.py PoolSim
        if lend is not None:
            # Lending ahead of the owner (policy/decide/lend_ahead.py) where the environment's config turns it on:
            # the floor's queue as the rule's settings name it, read and patched through sim/ports.py
            ps = dataclasses.replace(
                ps,
                lend_ahead_queue="sim",
                lend_ahead_flavor=GUARANTEED,
                lend_ahead_limit_gpus=lend[0],
                reclaim_lookahead_minutes=lend[1],
            )
        if ps.budget_monthly_usd is not None and not ps.budget_name:
            # the stack names the pool's AWS Budget (stacks/spend); the tick reads the budget by its name
            ps = dataclasses.replace(ps, budget_name=f"sim-{ps.name}")
        self.ps = ps
        # One AWS call at a time: the simulated tick runs in order, with no threads, so a simulation is reproducible.
        self.settings = Settings(
            environment="sim", region=sim.spec.region, cluster_name="sim", pools=(ps,), aws_calls_in_flight=1
        )
        sim.hist_keep = max(
            sim.hist_keep,
            max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes)
            + sim.settings.metric_delay_minutes
            + 1,
        )
        self.ports = sim_ports(
            sim, ps, instant_idle=self.instant_idle, keep_for_next_job=self.keep_for_next_job, gangs=self.gangs
        )
        self._warned: set[str] = set()  # nodes whose spot warning the function has been invoked with
        self._last_reasons: list[str] = []
        self._last_held = False  # the last plan held a scale-up for the budget (BUDGET_CAP / BUDGET_UNKNOWN)
        self._quiet_plan = False
        self._version = -1
        self._decide_again = 0  # the minute of the last plan's next_decision_at (policy/decide/)
        self._rates: dict[str, tuple[float, float]] = {}  # the last plan's spend rates (policy.tick.spend_rates)

    @property
    def state(self) -> dict:
        """The policy's own tick state (spend, warm-up history, its last changes), as the Lambda keeps it."""
        return self.ports.state.load(tick.STATE_KEY)[0]  # type: ignore[union-attr]

    def _new_warnings(self, sim: Simulation) -> tuple[str, ...]:
        """EventBridge's "EC2 Spot Instance Interruption Warning" invokes the function with the instance (once)."""
        warned = [n.id for n in sim.nodes.values() if n.warned and n.id not in self._warned]
        self._warned = {i for i in self._warned if i in sim.nodes} | set(warned)
        return tuple(warned)

    def observe(self, sim: Simulation, now_dt: datetime | None = None) -> Observation:
        """The Observation the tick would build now (policy.tick.observe over the same ports and a copy of the
        state; nothing is written): for tests."""
        now_dt = now_dt or at_minute(sim.now)
        leaving = frozenset(n.id for n in sim.nodes.values() if n.warned)
        return tick.observe(self.settings, self.ports, copy.deepcopy(self.state), now_dt, [], leaving=leaving)

    def tick(self, sim: Simulation) -> None:
        now_dt = at_minute(sim.now)
        if sim.recommendations:
            # EventBridge's rebalance recommendation invokes the function at once (policy/rebalance.py): with
            # rebalance_checkpoint on, the node is tainted and its jobs checkpoint; otherwise it is not listened to
            if self.ps.rebalance_checkpoint:
                for node in sim.recommendations:
                    if node.id in sim.nodes:
                        sim.signal_rebalance(node)
            sim.recommendations.clear()
        guard = self.ports.nodes
        guard.changed = False  # type: ignore[union-attr]
        result = self.run_tick(
            self.settings, self.ports, now_dt, log=tick.no_log, lease=_LEASE, leaving=self._new_warnings(sim)
        )
        plan = result.plan
        self.calls += 1
        self._decide_again = sim.horizon if plan.next_decision_at is None else minute_at_or_after(plan.next_decision_at)
        self._rates = tick.spend_rates(self.settings, plan)
        reasons = []
        quiet = not guard.changed  # type: ignore[union-attr]  # a back-to-spot taint moved
        for action in plan.actions:
            reasons.append(action.reason.value)
            self.reasons[action.reason.value] = self.reasons.get(action.reason.value, 0) + 1
            if action.kind in (ACTION_SET_DESIRED, ACTION_TERMINATE, ACTION_SET_LENDING_LIMIT):
                quiet = False
        self._last_reasons = reasons
        self._quiet_plan = quiet
        self._last_held = not _CAP_HELD.isdisjoint(reasons)
        if self._last_held:
            self._hold_minutes(sim.now, 1)
        self._version = sim.version

    def _hold_minutes(self, start: int, minutes: int) -> None:
        runs = self.cap_held
        if runs and runs[-1][1] >= start:
            runs[-1][1] = max(runs[-1][1], start + minutes)
        else:
            runs.append([start, start + minutes])

    @property
    def cap_held_minutes(self) -> int:
        return sum(b - a for a, b in self.cap_held)

    def repeat(self, sim: Simulation, ticks: int) -> None:
        """The skipped ticks would have decided the same plan (see wake): count its reasons for each, and account
        their spend in the policy's state as they would have (policy.spend.accrue at the plan's rates, at most
        MAX_ACCRUAL_GAP at a time, as ticks that ran would have)."""
        for r in self._last_reasons:
            self.reasons[r] += ticks
        if self._last_held:
            self._hold_minutes(sim.now + 1, ticks)
        state = self.state
        minute, last = sim.now, sim.now + ticks
        step = int(MAX_ACCRUAL_GAP / timedelta(minutes=1))
        while minute < last:
            minute = min(minute + step, last)
            accrue(state, self._rates, at_minute(minute))

    def wake(self, sim: Simulation) -> int:
        """The first minute after now at which the tick could act differently if nothing else happens (no node
        event, arrival, completion or demand change: those bump sim.version): the earlier of the plan's own
        next_decision_at (policy/decide/, every rule's timer: the engine owns them, nothing here repeats one)
        and the first minute at which the Observation the tick builds changes (`_observation_changes`).
        tests/sim/test_sim_speed.py compares the result with deciding every minute."""
        nxt = sim.now + 1
        if not self._quiet_plan or sim.version != self._version:
            return nxt
        return max(nxt, self._observation_changes(sim, min(sim.horizon, self._decide_again)))

    def _observation_changes(self, sim: Simulation, until: int) -> int:
        """The first minute after now (at most `until`) at which the Observation of the tick changes in what the
        engine reads, with no event in between (an event bumps sim.version):
        - a node's CloudWatch figures: a change of its busy GPUs at minute t is read from t + delay on (its first
          datapoint a minute after launch, delayed) and has left a window of w minutes from t + delay + w - 1 on;
          in between, the first minute its figures read differently to the engine (policy.decide node_reading: a
          utilization figure on the other side of the idle threshold, or another value below it; the reserved
          figure zero or not; a service pool's mean at all);
        - with a budget, the tick's next AWS Budgets read (the policy's state says when), the calendar month's
          start, and the month-to-date spend (the policy's own figure) reaching a capped budget;
        - an arrival leaving the arrival window; the warm-up history's slot of the day."""
        now, ps = sim.now, self.ps
        nxt = now + 1
        wake = until
        delay = sim.settings.metric_delay_minutes
        longest = max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes)
        moving: list = []  # (node, the last minute its windows move)
        for n in sim.nodes.values():
            if n.warned or n.ready_at > now:
                continue  # leaving or booting: nothing read of it changes before an event
            first = n.launched + 1 + delay
            if first > now:
                wake = min(wake, first)  # its first datapoint
                continue
            t = n.hist[-1][0] + delay if len(n.hist) > 1 else None
            if t is None or t + longest - 1 <= now:
                continue  # its newest change has left every window: it reads the same until an event
            moving.append((n, t + longest - 1))  # read from t on (not yet when t > now), settled from t + w - 1
        if moving and wake > nxt:
            wake = self._reading_changes(sim, moving, wake)
        if ps.budget_monthly_usd is not None:
            wake = min(wake, self._spend_changes(sim))
        pods: Any = self.ports.pods  # sim/ports.py SimPods
        arrivals = pods.arrival_minutes(now - ps.arrival_window_minutes) if self.keep_for_next_job else ()
        if arrivals:
            wake = min(wake, arrivals[0][0] + ps.arrival_window_minutes)
        if ps.warm_up:
            # the warm-up rate reads whole slots of the day (SIM_EPOCH is a midnight)
            wake = min(wake, (now // SLOT_MINUTES + 1) * SLOT_MINUTES)
        return max(nxt, wake)

    def _spend_changes(self, sim: Simulation) -> int:
        """With a budget: the first minute at which the tick's spend reads differently to the rules: its next AWS
        Budgets read, the next calendar month, and (capped) the minute the policy's month-to-date reaches the
        budget at the plan's rate (one minute early at least)."""
        now, ps = sim.now, self.ps
        nxt = now + 1
        wake = minute_at_or_after(next_month_start(at_minute(now)))
        spend = (self.state.get("spend") or {}).get(tick.pool_scope(ps.name)) or {}
        as_of = spend.get("actual_as_of")
        if not as_of:
            return nxt  # Budgets not read yet: the next tick asks
        wake = min(
            wake,
            minute_at_or_after(datetime.fromisoformat(as_of) + timedelta(minutes=self.settings.budget_refresh_minutes)),
        )
        if ps.budget_enforcement == ENFORCEMENT_CAP:
            budget = ps.budget_monthly_usd or 0.0  # not None: checked by the caller
            left = budget - (spend.get("actual_usd") or 0.0) - float(spend.get("estimated_since_usd", 0.0))
            if left <= 0:
                return nxt
            usd_per_minute = self._rates.get(tick.pool_scope(ps.name), (0.0, 0.0))[0] / 60
            if usd_per_minute > 0:
                wake = min(wake, now + int(left / usd_per_minute))
        return max(nxt, wake)

    def _reading_changes(self, sim: Simulation, moving: list, until: int) -> int:
        """The first minute after now, before `until`, at which one of the `moving` nodes (each with the last
        minute its windows move) reads differently to the engine than now; else `until`."""
        now, ps = sim.now, self.ps
        read = now - sim.settings.metric_delay_minutes
        longest = max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes)
        busiest = rules.node_reading(ps, 100.0, 100.0, 100.0, 100.0)
        windows = (ps.idle_timeout_minutes, ps.scale_up_window_minutes, ps.empty_timeout_minutes)
        distinct = tuple(sorted(set(windows)))
        at = tuple(distinct.index(w) for w in windows)

        def reading(n, m: int) -> tuple:
            # as sim/ports.py SimUtilization serves them to the tick (policy/tick.py _pool_groups_and_nodes)
            stats = sim.window_stats(n, distinct, at=m)
            (mx, _), (_, avg), (reserved, _) = stats[at[0]], stats[at[1]], stats[at[2]]
            return rules.node_reading(ps, mx, avg, reserved, reserved)

        for n, settled in moving:
            # Every figure of every window read until it settles lies between the lowest and the highest level
            # over them: when even the lowest reads as the busiest, the node reads the same throughout.
            hist, start = n.hist, read - longest + 1
            k = len(hist) - 1
            while k > 0 and hist[k][0] > start:
                k -= 1
            lowest = min(busy for _, busy in hist[k:]) * 100.0 / n.gpus
            if lowest > 0 and rules.node_reading(ps, lowest, lowest, lowest, lowest) == busiest:
                continue
            before = reading(n, read)
            for t in range(now + 1, min(until, settled + 1)):
                if reading(n, t - (now - read)) != before:
                    until = t
                    break
        return until


_LEASE = ("simulator", 60.0)  # (holder, seconds): the tick takes the state's lease as the Lambda's does


# Plans held for the budget (counted as the minutes the cap held a wanted scale-up).
_CAP_HELD = {Reason.BUDGET_CAP.value, Reason.BUDGET_UNKNOWN.value}


WARM_UP_NAME = "gpuloan-warm-up"
# The what-if rows of scripts/benchmark.py --what-if (GpuLoan's instant_idle / keep_for_next_job).
INSTANT_IDLE_NAME = "gpuloan-instant-idle"
INSTANT_IDLE_NO_KEEP_NAME = "gpuloan-instant-idle-no-keep"
WHAT_IF_NAMES = (INSTANT_IDLE_NAME, INSTANT_IDLE_NO_KEEP_NAME)


def what_if_policies() -> list[Controller]:
    """Our policy with the stack's settings, the two what-ifs that bound a faster release signal, and karpenter:
    the rows of scripts/benchmark.py --what-if."""
    return [
        GpuLoan("gpuloan"),
        GpuLoan(INSTANT_IDLE_NAME, instant_idle=True),
        GpuLoan(INSTANT_IDLE_NO_KEEP_NAME, instant_idle=True, keep_for_next_job=False),
        Karpenter(),
    ]


def all_policies(spec: PoolSpec, warm_up: bool = False, what_if: bool = False) -> list[Controller]:
    """Every policy on `spec`; `warm_up` adds our policy with the stack's settings and warm-up on (a row to
    measure whether warm-up pays on a trace before turning it on); `what_if` the two instant-idle what-ifs."""
    out: list[Controller] = [GpuLoan("gpuloan"), GpuLoan("gpuloan-defaults", defaults=True), StaticPeak(), FloorOnly()]
    if warm_up:
        out.insert(2, GpuLoan(WARM_UP_NAME, settings=dataclasses.replace(pool_settings(spec), warm_up=True)))
    if what_if:
        out[2:2] = what_if_policies()[1:3]
    if spec.has_spot or spec.has_on_demand:
        out += [Karpenter(), ThresholdScript()]
    return out
