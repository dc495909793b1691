"""The policies compared on the same simulated pool: ours (the real policy.decide.decide) and the baselines.

Each controller has `start(sim)` (capacity at minute 0) and `tick(sim)` (once per simulated minute). They see
the simulated world only through what a real controller could see: nodes, their utilization, pending pods,
and the answer to a launch request.
"""

from __future__ import annotations

import bisect
import dataclasses
from datetime import datetime, timedelta, timezone

from policy import decide as rules
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    ENFORCEMENT_CAP,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_PENDING,
    Group,
    Node,
    NodeSize,
    Observation,
    PendingGang,
    PoolObservation,
    PoolSettings,
    Reason,
    Settings,
    Spend,
)
from policy.rhythm import DAYS as RHYTHM_DAYS
from policy.rhythm import SLOT_MINUTES, SLOTS_PER_DAY, DailyArrivals, day_and_slot
from sim.engine import GUARANTEED, LEAVING, MINUTES_PER_MONTH, ON_DEMAND, SPOT, Simulation, size_group
from sim.packing import new_claims, new_nodes_needed
from sim.pool import PoolSpec

# The ITP traces start on 2021-03-04; any fixed UTC origin works (it only places the month boundaries).
SIM_EPOCH = datetime(2021, 3, 4, tzinfo=timezone.utc)


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
    on_nodes = getattr(sim.workload, "on_nodes", None)
    for n in sim.nodes.values():
        if not (n.warned and n.busy):
            continue
        if on_nodes is None:
            out[1] = out.get(1, 0) + n.busy
            continue
        for i in n.jobs:
            for node, used in on_nodes[i]:
                if node is n:
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

    def __init__(self, consolidate_after_minutes: int = 0, name: str = "karpenter",
                 replace_on_demand: bool = False, claim_per_pod: bool = False):
        self.consolidate_after = consolidate_after_minutes
        # Pools of several node sizes: the simulator hands Karpenter a minute's pending pods as one batch; its own
        # batch window is 1 s idle, 10 s at most (karpenter.sh settings BATCH_IDLE_DURATION / BATCH_MAX_DURATION),
        # so pods seconds apart get claims of their own. `claim_per_pod` bounds that the other way: every pod that
        # fits no existing node gets its own claim (and the cheapest type that holds it).
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

    def _demand(self, sim: Simulation) -> dict[int, int]:
        pending = sim.workload.pending_counts()
        displaced = displaced_pods(sim)
        for size, count in displaced.items():
            pending[size] = pending.get(size, 0) + count
        return pending

    def tick(self, sim: Simulation) -> None:
        now = sim.now
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
                free_not_spot = [n.gpus - n.busy for n in sim.nodes.values()
                                 if not n.warned and n.gpus > n.busy and n.group != SPOT]
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
                if room > 0 and sim.launch(SPOT, 1):
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
        options += [(z.spot_usd_per_hour if spec.has_spot else z.on_demand_usd_per_hour, z.gpus_per_node)
                    for z in spec.sizes]
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
                launched = sim.launch(spot, max(0, min(count, spot_max - sim.count(spot))))
                count -= launched
                if launched or not spec.has_on_demand:
                    continue
            if spec.has_on_demand:
                sim.launch(od, max(0, min(count, od_max - sim.count(od))))

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
            self._provision_on_demand(sim, count)

    @staticmethod
    def _provision_on_demand(sim: Simulation, count: int) -> None:
        spec = sim.spec
        if not spec.has_on_demand:
            return
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
    """The policy settings of the simulated pool: stacks/policy_function/settings.py's mapping of the stack's pool (the
    knobs and prices the Lambda gets), with the simulated sizes (auto-size and floor sweeps change them)."""
    from types import SimpleNamespace

    from stacks.policy_function import settings as policy_settings

    base = policy_settings.pool_settings(spec.prices, SimpleNamespace(region=spec.region), spec.pool,
                                         policy_settings.GroupNames(SPOT, ON_DEMAND, GUARANTEED))
    budget = {}
    if spec.budget_monthly_usd is None:
        budget = dict(budget_monthly_usd=None)
    return dataclasses.replace(
        base, gpus_per_node=spec.gpus_per_node,
        spot_group=SPOT if spec.has_spot else None, on_demand_group=ON_DEMAND if spec.has_on_demand else None,
        spot_max_nodes=spec.spot_max_nodes if spec.has_spot else 0,
        on_demand_max_nodes=spec.on_demand_max_nodes if spec.has_on_demand else 0,
        # The budget cap prices what the simulated groups launch (sim/pool.py: the spot group its cheapest type, the
        # on-demand group its first listed, as EKS allocates them); every simulated node is of that type, so one
        # price per group (no per-type rows) is the price of each running node too.
        spot_usd_per_hour=spec.spot_usd_per_hour, on_demand_usd_per_hour=spec.on_demand_usd_per_hour,
        instance_usd_per_hour=(),
        guaranteed_group=GUARANTEED if spec.floor_nodes else None, guaranteed_nodes=spec.floor_nodes,
        guaranteed_usd_per_hour=spec.floor_nodes * spec.floor_usd_per_hour, **budget,
        # the pool's other node sizes, each its own pair of simulated groups (sim/engine.py size_group)
        other_sizes=tuple(NodeSize(
            z.gpus_per_node, size_group(SPOT, z.gpus_per_node) if spec.has_spot else None,
            size_group(ON_DEMAND, z.gpus_per_node) if spec.has_on_demand else None,
            z.spot_max_nodes if spec.has_spot else 0, z.on_demand_max_nodes if spec.has_on_demand else 0,
            z.spot_usd_per_hour, z.on_demand_usd_per_hour) for z in spec.sizes),
    )


def _minute_at_or_after(when: datetime) -> int:
    """The first whole simulated minute at or after `when` (a rule that flips just after a minute flips by the
    next one)."""
    return -(-(when - SIM_EPOCH) // timedelta(minutes=1))


class GpuLoan(Controller):
    """Our policy: every minute, build the Observation the Lambda would build and call policy.decide.decide."""

    uses_spot = True

    def __init__(self, name: str = "gpuloan", settings: PoolSettings | None = None, defaults: bool = False,
                 instant_idle: bool = False, keep_for_next_job: bool = True, gangs: bool = True):
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
        self.decide = rules.decide  # the real one; tests check the identity
        self.calls = 0
        self.reasons: dict[str, int] = {}
        # Minutes in which the budget cap held a wanted scale-up (BUDGET_CAP / BUDGET_UNKNOWN), as [start, end)
        # runs of simulated minutes: counted in the simulate table, named in its verdict, marked on the plot.
        self.cap_held: list[list[int]] = []

    def start(self, sim: Simulation) -> None:
        ps = self._given or pool_settings(sim.spec)
        if self.defaults:
            base = PoolSettings(name="x", team="x", tier="x", gpus_per_node=1, spot_group=None, on_demand_group=None,
                                spot_max_nodes=0, on_demand_max_nodes=0, spot_usd_per_hour=0,
                                on_demand_usd_per_hour=0)
            knobs = ("scale_up_utilization_pct", "scale_up_window_minutes", "idle_utilization_pct",
                     "idle_timeout_minutes", "empty_timeout_minutes", "cooldown_minutes", "max_step_nodes",
                     "fallback_after_minutes", "workload", "launch_minutes", "arrival_window_minutes", "warm_up")
            ps = dataclasses.replace(ps, **{k: getattr(base, k) for k in knobs})
        self.ps = ps
        self.settings = Settings(environment="sim", region=sim.spec.region, cluster_name="sim", pools=(ps,))
        sim.hist_keep = max(sim.hist_keep, max(ps.idle_timeout_minutes, ps.empty_timeout_minutes,
                                               ps.scale_up_window_minutes) + sim.settings.metric_delay_minutes + 1)
        self._node_cache: dict = {}
        self._group_cache: dict = {}
        self._last_obs = None
        self._month_spend_at_refresh = 0.0
        self._pods_key, self._pods_value = None, ()
        self._last_reasons: list[str] = []
        self._last_held = False  # the last plan held a scale-up for the budget (BUDGET_CAP / BUDGET_UNKNOWN)
        self._quiet_plan = False
        self._version = -1
        self._decide_again = 0  # the minute of the last plan's next_decision_at (policy/decide/)
        self._arrivals_key, self._arrivals_value = None, ()
        self._gangs_key, self._gangs_value = None, ()
        self._off_spot_key, self._off_spot_value = None, ()
        self._gang_seen: dict[tuple[int, int], int] = {}  # (job, run) -> minute its pods were first pending
        self._when: dict[int, datetime] = {}
        # Warm-up's daily history, fed the trace's arrivals as they happen (policy/rhythm.py, as in the Lambda).
        self._rhythm = DailyArrivals() if ps.warm_up else None
        self._rhythm_fed = 0  # jobs (or series minutes) already fed
        self._rhythm_slot: tuple[int | None, float | None] = (None, None)  # (slot of the day's minute, its rate)
        series = getattr(sim.trace, "gpus_demanded", None)
        self._rises = None
        if series is not None:
            # A demand series has no pods: a rise of the level is that many 1-GPU pods created that minute.
            self._rises = [max(0, series[t] - (series[t - 1] if t else 0)) for t in range(len(series))]

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
        distinct = tuple(sorted(set(windows)))  # one walk per distinct window length (up and empty are often equal)
        at = tuple(distinct.index(w) for w in windows)
        # CloudWatch's windows end at the newest datapoint: this minute's reading is of minute `read`
        delay = sim.settings.metric_delay_minutes
        read = now - delay
        window_start = read - max(windows) + 1
        for n in sim.nodes.values():
            stable = n.obs_cache
            if stable is not None and now >= stable[0]:
                nodes.append(stable[1])  # ready, and every window past its last change: the same Node as before
                continue
            if n.warned:
                # EventBridge's "EC2 Spot Instance Interruption Warning" names the instance: the function treats
                # it as leaving (not capacity) and its pods as needing a place (added to the pending pods below).
                key = (n.id, LEAVING, None, None)
            elif n.ready_at > now:
                key = (n.id, None, None, None)
            elif n.group == GUARANTEED:
                _, avg = sim.window_utilization(n, up_w, at=read)
                key = (n.id, avg, avg, None)
            elif self.instant_idle and n.busy == 0:
                key = (n.id, 0.0, 0.0, 0.0)  # what-if: idle from the minute its last pod ended
            elif read > n.launched and n.hist[-1][0] <= (n.launched if n.launched > window_start else window_start):
                # unchanged over every window (most nodes, most minutes): window_stats' answer without the call
                pct = 100.0 * n.busy / n.gpus
                key = (n.id, pct, pct, pct)
            else:
                # In the simulator a GPU is requested exactly while a job runs on it, so the reserved capacity
                # Container Insights would report equals the busy share the utilization is computed from.
                stats = sim.window_stats(n, distinct, at=read)
                (mx, _), (_, avg), (reserved, _) = stats[at[0]], stats[at[1]], stats[at[2]]
                key = (n.id, mx, avg, reserved)
            if not n.warned and n.ready_at <= now:
                # the pods bound to it, from the tick's pod list (fresh, where the metrics are minutes old)
                key = key + (sim.workload.pods_on(n),)
            node = cache.get(key)
            if node is None:
                launched = SIM_EPOCH + timedelta(minutes=n.launched)
                if n.warned:
                    node = Node(n.id, n.group, launched, LEAVING)
                elif n.ready_at > now:
                    node = Node(n.id, n.group, launched, LIFECYCLE_PENDING)
                else:
                    # utilization over the empty window = the busy share = the reserved figure in the simulator
                    node = Node(n.id, n.group, launched, LIFECYCLE_IN_SERVICE, key[1], key[2], key[3], key[3],
                                key[4])
            if not n.warned and n.ready_at <= now:
                # From this minute on the node reads the same until it changes (set_busy and the spot notice
                # clear obs_cache).
                settled = n.hist[-1][0] + (up_w if n.group == GUARANTEED else max(windows)) - 1 + delay
                n.obs_cache = (max(now, n.launched + 1 + delay, settled), node) \
                    if now >= settled and read > n.launched else None
            used[key] = node
            nodes.append(node)
        self._node_cache = used  # only this minute's nodes can repeat next minute
        groups = []
        for g in ps.elastic_groups:
            key = (g, sim.desired[g], sim.last_change[g], g in ps.spot_groups and sim.short_since[g] is not None)
            group = self._group_cache.get(key)
            if group is None:
                last = key[2]
                group = Group(g, key[1], 0, ps.max_nodes(g),
                              last_change_at=None if last is None else SIM_EPOCH + timedelta(minutes=last),
                              capacity_shortage=key[3])
                self._group_cache = {key: group, **{k: v for k, v in self._group_cache.items() if k[0] != g}}
            groups.append(group)
        pods = self._pods(sim)
        spend = self._spend(sim, now) if ps.budget_monthly_usd is not None else None
        arrivals = self._arrivals(sim)
        rhythm = self._rhythm_rate(sim, now_dt) if self._rhythm is not None else None
        gangs = self._pending_gangs(sim)
        off_spot = self._on_demand_only(sim)
        key = (tuple(nodes), tuple(groups), tuple(pods), spend, arrivals, rhythm, gangs, off_spot)
        if self._last_obs is not None and self._last_obs[0] == key:
            return self._last_obs[1]
        obs = Observation((PoolObservation(ps.name, key[1], key[0], key[2], spend, arrivals, rhythm,
                                            pending_gangs=gangs, on_demand_only_pod_gpus=off_spot),))
        self._last_obs = (key, obs)
        return obs

    def _pods(self, sim: Simulation) -> tuple[int, ...]:
        """Pending pods (a multi-node job is one pod per node) plus the pods of nodes under a spot notice, as the
        sorted tuple the Observation carries; rebuilt only when the counts change."""
        counts = sim.workload.pending_counts()
        for size, n in displaced_pods(sim).items():
            counts[size] = counts.get(size, 0) + n
        key = tuple(sorted(counts.items()))
        if key == self._pods_key:
            return self._pods_value
        self._pods_key, self._pods_value = key, self._pod_list(key)
        return self._pods_value

    def _pod_list(self, counts) -> tuple[int, ...]:
        """(job size, jobs) pairs as pods: a multi-node job is one pod per node."""
        gpn = self.ps.gpus_per_node
        pods: list[int] = []
        for size, n in counts:
            whole, last = divmod(size, gpn) if size > gpn else (0, size)
            if size > gpn and last == 0:
                whole, last = whole - 1, gpn
            pods += [gpn] * (whole * n) + [last] * n
        return tuple(pods)

    def _on_demand_only(self, sim: Simulation) -> tuple[int, ...]:
        """The pending pods that may not run on spot (production work kept off spot in an environment,
        sim/environment.py `on_demand_only_pending`), as the Lambda reads them (policy/kube.py
        `pending_on_demand_only`): among the pending pods of `_pods`. () for a workload without job classes."""
        read = getattr(sim.workload, "on_demand_only_pending", None)
        counts = read() if read is not None else None
        if not counts:
            return ()
        key = tuple(sorted(counts.items()))
        if key != self._off_spot_key:
            self._off_spot_key, self._off_spot_value = key, self._pod_list(key)
        return self._off_spot_value

    def _gang_runs(self, sim: Simulation) -> list[tuple[int, int, int, bool]]:
        """(job, run, minute first pending, may not run on spot) of every pending multi-node job: its pods were
        created at that minute (at its arrival, or when an interruption sent it back to the queue), as the Lambda
        reads them. Production jobs kept off spot wait in their own queues (sim/environment.py) and are the gangs
        that may not run on spot."""
        queues = getattr(sim.workload, "queues", None)
        if not self.gangs or queues is None:  # (empty: production gangs may still wait in their own queues)
            return []
        gpn = self.ps.gpus_per_node
        w = sim.workload
        off_spot = bool(w.on_demand_only_pending()) if hasattr(w, "on_demand_only_pending") else False
        out = []
        seen = self._gang_seen
        for off, qs in ((False, queues), (off_spot, getattr(w, "prod_queues", {}) if off_spot else {})):
            for size, q in qs.items():
                if size <= gpn:
                    continue
                for i in q:
                    run = (i, w.run_id[i])
                    since = seen.get(run)
                    if since is None:
                        since = seen[run] = sim.now
                    out.append((i, run[1], since, off))
        if len(seen) > 4 * len(out) + 64:  # forget runs that started
            live = {(i, r) for i, r, _, _ in out}
            self._gang_seen = {k: v for k, v in seen.items() if k in live}
        return sorted(out)

    def _pending_gangs(self, sim: Simulation) -> tuple:
        runs = self._gang_runs(sim)
        key = tuple(runs)
        if key == self._gangs_key:
            return self._gangs_value
        gpn = self.ps.gpus_per_node
        gangs = []
        for i, run, since, off in runs:
            whole, last = divmod(sim.workload.gpus[i], gpn)
            if last == 0:
                whole, last = whole - 1, gpn
            gangs.append(PendingGang(f"job-{i}", (gpn,) * whole + (last,), SIM_EPOCH + timedelta(minutes=since),
                                     on_demand_only=off))
        self._gangs_key, self._gangs_value = key, tuple(gangs)
        return self._gangs_value

    def arrival_minutes(self, sim: Simulation) -> list[tuple[int, int]]:
        """(minute, GPUs) of the pods created within the arrival window that have not finished: what the
        Lambda's pod list shows (policy/kube.py `gpu_pod_arrivals`). Only the past: no look-ahead."""
        now, window = sim.now, self.ps.arrival_window_minutes
        lo = now - window + 1
        if self._rises is not None:
            rises = self._rises
            return [(t, rises[t]) for t in range(max(0, lo), min(now + 1, len(rises))) if rises[t]]
        w = sim.workload
        start = bisect.bisect_left(w._arrival_minute, lo, 0, w._next)
        out: dict[int, int] = {}
        for i in range(start, w._next):
            if not w.done[i] and w.gpus[i] <= w.pool_gpus:
                m = w._arrival_minute[i]
                out[m] = out.get(m, 0) + w.gpus[i]
        return sorted(out.items())

    def _arrivals(self, sim: Simulation) -> tuple:
        if not self.keep_for_next_job:
            return ()
        key = tuple(self.arrival_minutes(sim))
        if key != self._arrivals_key:
            when = self._when
            if len(when) > 4096:
                when.clear()
            out = []
            for m, g in key:
                t = when.get(m)
                if t is None:
                    t = when[m] = SIM_EPOCH + timedelta(minutes=m)
                out.append((t, g))
            self._arrivals_key, self._arrivals_value = key, tuple(out)
        return self._arrivals_value

    def _rhythm_rate(self, sim: Simulation, now_dt: datetime) -> float | None:
        """Feed the arrivals since the last call into the daily history and read the warm-up rate, as the
        Lambda's tick does (policy/tick.py:_rhythm_rates). The Lambda runs every minute, so every simulated day
        counts as recorded, quiet or not."""
        history, now = self._rhythm, sim.now
        slot = now // SLOT_MINUTES
        if slot == self._rhythm_slot[0]:
            # The rate reads earlier days only and changes when a slot begins; today's arrivals can wait until
            # then (record() files each under its own minute).
            return self._rhythm_slot[1]
        new: list[tuple[datetime, int]] = []
        if self._rises is not None:
            upto = min(now + 1, len(self._rises))
            new = [(SIM_EPOCH + timedelta(minutes=t), self._rises[t]) for t in range(self._rhythm_fed, upto)
                   if self._rises[t]]
            self._rhythm_fed = max(self._rhythm_fed, upto)
        else:
            w = sim.workload
            for i in range(self._rhythm_fed, w._next):
                if w.gpus[i] <= w.pool_gpus:
                    new.append((SIM_EPOCH + timedelta(minutes=w._arrival_minute[i]), w.gpus[i]))
            self._rhythm_fed = max(self._rhythm_fed, w._next)
        today, first = day_and_slot(now_dt)[0], day_and_slot(SIM_EPOCH)[0]
        for d in range(max(first, today - RHYTHM_DAYS + 1), today + 1):
            history.rows.setdefault(d, [0.0] * SLOTS_PER_DAY)
        history.record(now_dt, new)
        ps = self.ps
        rate = history.expected_rate_nodes_per_minute(now_dt, 2 * ps.launch_minutes, ps.gpus_per_node)
        self._rhythm_slot = (slot, rate)
        return rate

    def _spend(self, sim: Simulation, now: int) -> Spend:
        """Budgets' actual figure refreshed hourly (it lags), plus the running estimate since."""
        month = now // (730 * 60)
        total = sim.month_usd(month)
        if now % 60 == 0:
            self._month_spend_at_refresh = total
        return Spend(self._month_spend_at_refresh, max(0.0, total - self._month_spend_at_refresh))

    def tick(self, sim: Simulation) -> None:
        now_dt = SIM_EPOCH + timedelta(minutes=sim.now)
        if sim.recommendations:
            # EventBridge's rebalance recommendation invokes the function at once (policy/rebalance.py): with
            # rebalance_checkpoint on, the node is tainted and its jobs checkpoint; otherwise it is not listened to
            if self.ps.rebalance_checkpoint:
                for node in sim.recommendations:
                    if node.id in sim.nodes:
                        sim.signal_rebalance(node)
            sim.recommendations.clear()
        plan = self.decide(self.settings, self.observe(sim, now_dt), now_dt)
        self.calls += 1
        self._decide_again = sim.horizon if plan.next_decision_at is None else _minute_at_or_after(
            plan.next_decision_at)
        reasons = []
        quiet = True
        for action in plan.actions:
            reasons.append(action.reason.value)
            self.reasons[action.reason.value] = self.reasons.get(action.reason.value, 0) + 1
            if action.kind == ACTION_SET_DESIRED:
                quiet = False
                sim.set_desired(action.group, action.desired_to)
            elif action.kind == ACTION_TERMINATE:
                quiet = False
                sim.terminate(action.instance_id, decrement=True)
        for d in plan.decisions:
            # back to spot (policy/closing.py in the Lambda): the NoSchedule taint on exactly these on-demand nodes
            if d.closed_to_new_pods is not None:
                closed = frozenset(d.closed_to_new_pods)
                for group in self.ps.on_demand_groups:  # every size's on-demand group
                    quiet = not sim.set_closed(group, closed) and quiet
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

    @property
    def reads_spend_each_minute(self) -> bool:
        """With a budget the Lambda reads month-to-date spend every tick (the hourly Budgets refresh included):
        skipped minutes replay those reads one by one, so billing is settled at the same minutes either way."""
        return self.ps.budget_monthly_usd is not None

    def repeat(self, sim: Simulation, ticks: int) -> None:
        """The skipped ticks would have decided the same plan (see wake): count its reasons for each."""
        for r in self._last_reasons:
            self.reasons[r] += ticks
        if self._last_held:
            # sim/engine.py _skip: minute by minute (sim.now is the skipped minute) when spend is read each minute,
            # else in one step from the deciding minute (sim.now) on
            self._hold_minutes(sim.now if self.reads_spend_each_minute else sim.now + 1, ticks)
        if self.reads_spend_each_minute:
            for _ in range(ticks):
                self._spend(sim, sim.now)

    def wake(self, sim: Simulation) -> int:
        """The first minute after now at which the tick could act differently if nothing else happens (no node
        event, arrival, completion or demand change: those bump sim.version): the earlier of the plan's own
        next_decision_at (policy/decide/, every rule's timer: the engine owns them, nothing here repeats one)
        and the first minute at which the Observation this controller builds changes (`_observation_changes`).
        tests/sim/test_sim_speed.py compares the result with deciding every minute."""
        nxt = sim.now + 1
        if not self._quiet_plan or sim.version != self._version:
            return nxt
        return max(nxt, self._observation_changes(sim, min(sim.horizon, self._decide_again)))

    def _observation_changes(self, sim: Simulation, until: int) -> int:
        """The first minute after now (at most `until`) at which the Observation of `observe` changes in what the
        engine reads, with no event in between (an event bumps sim.version):
        - a node's CloudWatch figures: a change of its busy GPUs at minute t is read from t + delay on (its first
          datapoint a minute after launch, delayed) and has left a window of w minutes from t + delay + w - 1 on;
          in between, the first minute its figures read differently to the engine (policy.decide node_reading: a
          utilization figure on the other side of the idle threshold, or another value below it; the reserved
          figure zero or not; a service pool's mean at all);
        - the month-to-date spend reaching a capped budget, or starting again with the simulated month;
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
            w = ps.scale_up_window_minutes if n.group == GUARANTEED else longest  # a floor node's mean only
            t = n.hist[-1][0] + delay if len(n.hist) > 1 else None
            if t is None or t + w - 1 <= now:
                continue  # its newest change has left every window: it reads the same until an event
            moving.append((n, t + w - 1))  # read from t on (not yet when t > now), settled from t + w - 1
        if moving and wake > nxt:
            wake = self._reading_changes(sim, moving, wake)
        if ps.budget_monthly_usd is not None:
            month = now // MINUTES_PER_MONTH
            wake = min(wake, (month + 1) * MINUTES_PER_MONTH)  # the simulated month's spend starts again
            if ps.budget_enforcement == ENFORCEMENT_CAP:
                left = ps.budget_monthly_usd - sim.c.monthly_usd.get(month, 0.0)
                usd_per_minute = sum(sim.rates.values()) / 60
                if left <= 0:
                    return nxt
                if usd_per_minute > 0:
                    wake = min(wake, now + int(left / usd_per_minute))  # reaches the budget: one minute early at least
        arrivals = self.arrival_minutes(sim) if self.keep_for_next_job else ()
        if arrivals:
            wake = min(wake, arrivals[0][0] + ps.arrival_window_minutes)
        if self._rhythm is not None:
            # the warm-up rate reads whole slots of the day (SIM_EPOCH is a midnight)
            wake = min(wake, (now // SLOT_MINUTES + 1) * SLOT_MINUTES)
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
            if n.group == GUARANTEED:
                avg = sim.window_utilization(n, ps.scale_up_window_minutes, at=m)[1]
                return rules.node_reading(ps, avg, avg, None, None)
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
    return [GpuLoan("gpuloan"), GpuLoan(INSTANT_IDLE_NAME, instant_idle=True),
            GpuLoan(INSTANT_IDLE_NO_KEEP_NAME, instant_idle=True, keep_for_next_job=False), Karpenter()]


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
