"""The discrete-time (1-minute) simulated cloud and cluster for one pool.

Each tick, in order: spot reclaims and 2-minute notices, nodes finishing their boot, jobs finishing, arrivals,
scheduling (what kube-scheduler does: any pending pod that fits is placed, a gang only with all its pods), the
policy's tick (it may set group sizes, launch or terminate nodes), the node groups converging to their desired
size, billing. A controller (sim/controllers/) sees the simulated state; the `gpuloan` controller runs the Lambda's
own tick (policy.tick.run_tick, and in it policy.decide.decide) over in-memory ports on it (sim/controllers/ports.py).

Modelled: a provisioning delay for every new node; spot interruptions with common random numbers (each spot
*slot* -- the k-th spot node running at once -- has its own Poisson stream of interruption times at the Spot
Advisor rate, drawn from the seed alone, so every policy meets the same events at the same times in the same
slots); a 2-minute notice during which the node takes no new work and, in a node group, the Auto Scaling group
launches its replacement (EKS managed node groups enable Capacity Rebalancing for spot); optional
spot-unavailable episodes (an explicit scenario, off by default: no public source gives their rate); checkpoints
(an interrupted job loses the work since its last checkpoint and requeues in its original submission order);
multi-node jobs (gangs of whole free nodes). Not modelled: AZs, per-type spot pools, partial GPU use.

Speed: a tick costs work only where something happens. Quiet runs of minutes -- no node event, no arrival or
completion, no change of demand, and a controller that proves its decision cannot change before a known minute
(`Controller.wake`) -- are skipped in one step; billing and served work are settled lazily at the same points in
both paths, so the fast path gives exactly the tick-by-tick result (tests/sim/test_sim_speed.py compares them).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass
from typing import Any

from sim.cluster import GangHoldMeter
from sim.cloud import (
    Counters,
    ElasticLatency,
    SimNode,
    SlotInterruptions,
    drawn_arrival_second,
    karpenter_ready_minute,
    nodegroup_applied_second,
    nodegroup_ready_minute,
    nodegroup_update_ticks,
    kind_of,
    merge_windows,
    size_group,
    spot_episodes,
)
from pricing.cost_model.billing import HOURS_PER_MONTH
from sim.pool import PoolSpec
from sim.traces import JobsTrace, SeriesTrace

GUARANTEED, SPOT, ON_DEMAND = "guaranteed", "spot", "on_demand"
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60


class _FillRank(dict):
    def __missing__(self, group: str) -> int:
        return self.setdefault(group, self[kind_of(group)])


# Fill order of the scheduler: the cheaper capacity first, as preferred node affinities (weight per capacity
# type) make kube-scheduler do: the floor (paid anyway), then spot, then on-demand. A group of another size fills
# as its capacity does.
FILL_RANK = _FillRank({GUARANTEED: 0, SPOT: 1, ON_DEMAND: 2})
LEAST_ALLOCATED, MOST_ALLOCATED = "least_allocated", "most_allocated"
PLACEMENTS = (LEAST_ALLOCATED, MOST_ALLOCATED)
# A node's id is shaped like an EC2 instance id ("i-" and hex digits, policy.model.INSTANCE_ID: the tick records a
# spot warning only for such an id); its first digit stands for the group, in the groups' order (g < o < s).
_ID_LETTER = {"g": "a", "o": "b", "s": "c"}
LEAVING = "Terminating"  # a node under a spot notice, as the policy sees it (neither capacity nor launching)

# The spot-shortage scenario: spot launches fail for episodes of this mean length at this rate. No public source
# gives GPU spot availability history, so it is a named scenario reported beside the default, never inside it.
# Typed Any: the dicts are SimSettings keyword arguments (**SPOT_SHORTAGE), whose fields are not all floats.
SPOT_SHORTAGE: dict[str, Any] = {"spot_unavailable_episodes_per_week": 1.0, "spot_unavailable_mean_hours": 3.0}
# The same episodes, but spot is scarce rather than gone: a launch request gets half the nodes it asks for (rounded
# down), so a multi-node job's nodes arrive in part (kubernetes-sigs/karpenter#3138: "3 of 4 nodes Ready and
# billing while the last pod sits Pending"). A named scenario too, for scripts/bench_gangs.py.
SPOT_PARTIAL: dict[str, Any] = {**SPOT_SHORTAGE, "spot_unavailable_fill_share": 0.5}


# A checkpoint interval longer than any run: no job ever writes a checkpoint, an interrupted job loses all its work
# so far (`make bench-org`'s table without checkpoints, issue 36: arbitrary jobs need not checkpoint).
NO_CHECKPOINTS = 10**9


@dataclass(frozen=True)
class SimSettings:
    # Request to schedulable GPU node. Public figures: ~70-80 s instance launch to node registration on EKS
    # (aws/karpenter-provider-aws#6128), "GPU instance types often take much longer to boot"
    # (awslabs/amazon-eks-ami#1099), then the NVIDIA device plugin / GPU Operator validation and a multi-GB CUDA
    # image pull (several minutes; docs/simulator.md). 6 minutes is the default; --provisioning-delay changes it.
    provisioning_delay_minutes: int = 6
    checkpoint_interval_minutes: int = 30
    spot_warning_minutes: int = 2
    spot_interruptions_per_month: float | None = None  # None: the Spot Advisor bucket of the pool's spot type
    spot_unavailable_episodes_per_week: float = 0.0  # SPOT_SHORTAGE is the scenario with episodes
    spot_unavailable_mean_hours: float = 3.0
    spot_unavailable_fill_share: float = 0.0  # share of a spot launch request granted during an episode (0: none)
    # Named shortage windows, [start, end) minutes, on top of the drawn episodes (the organization advisor's
    # scenarios, advise/org_advisor.py): spot cannot be launched in `spot_unavailable_windows`; no elastic capacity
    # of the pool's type at all (InsufficientInstanceCapacity for on-demand, and spot with it) in
    # `on_demand_unavailable_windows`. Nodes already running keep running; a floor is never affected.
    spot_unavailable_windows: tuple[tuple[int, int], ...] = ()
    on_demand_unavailable_windows: tuple[tuple[int, int], ...] = ()
    sample_every_minutes: int = 10  # time series for the plot
    seed: int = 1  # the same default in `gpuloan simulate`, scripts/benchmark.py and the docs
    skip_quiet_ticks: bool = True  # False: decide every minute (the reference the fast path is tested against)
    # Which node a pod that fits several goes to, after the tier (docs/simulator.md): "least_allocated" (the
    # emptiest: kube-scheduler's default scoring) or "most_allocated" (the fullest: the stack's
    # cluster.bin_packing). None: what the simulated stack's cluster runs (PoolSpec.placement).
    placement: str | None = None
    # Minutes from a CloudWatch datapoint's minute to the tick that can read it: the policy function's windows end
    # at the newest datapoint (policy/io/cloudwatch.py), so at minute t it reads minutes up to t - delay. "If you
    # receive 1-minute metrics with CloudWatch, then their availability delay is about 2 minutes" (Datadog,
    # https://docs.datadoghq.com/integrations/guide/cloud-metric-delay/). Karpenter reads the API server (no
    # delay); the pods the function lists are read fresh too. 0: the reading of this very minute.
    metric_delay_minutes: int = 2
    # EC2's rebalance recommendation (docs/simulator.md, "Early spot warnings"). "It is not always possible for
    # Amazon EC2 to send the rebalance recommendation signal before the two-minute Spot Instance interruption notice"
    # (EC2 User Guide); "Generally, Rebalance Recommendations are sent 10-20 minutes before an interruption"
    # (aws/karpenter-provider-aws designs/interruption-handling.md). No public source gives how often it comes
    # early, so that share is a scenario parameter: 0 (the default) = always with the notice, which is what the
    # simulator modelled before; otherwise an interruption's recommendation comes, with this probability, a
    # uniform 10-20 minutes before it (drawn from the seed, the spot slot and the interruption minute alone).
    rebalance_early_share: float = 0.0
    rebalance_lead_minutes: tuple[int, int] = (10, 20)
    # Minutes a job takes to write a checkpoint it was asked for (an early one, on the recommendation): it counts
    # only if written before the job is stopped. An assumption, not a measured figure (docs/simulator.md).
    checkpoint_write_minutes: int = 2
    # Minutes an EKS managed node group's UpdateNodegroupConfig (a new desired size) takes before its Auto Scaling
    # group acts on it. The update is asynchronous ("The response output includes an update ID that you can use to
    # track the status of your node group update with the DescribeUpdate API operation", EKS API Reference), and
    # the node group is UPDATING meanwhile: a second update then fails (ResourceInUseException; docs/aws-rules.md).
    # No public source gives its duration. 0: the group acts on a new size the minute it is set (the other
    # benchmarks); the organization's runs set `latency` below, which takes the update's duration in seconds.
    nodegroup_update_minutes: int = 0
    # The elastic path's latency per side at second resolution (sim/cloud.py, issue 36): the function's schedule
    # and run time, the update's asynchrony and the Auto Scaling group's launch for node groups; Karpenter's batch
    # window and CreateFleet; rounded up to the minute only where a node becomes Ready. It replaces
    # nodegroup_update_minutes (the update's ticks come from its seconds). None: a node is Ready
    # provisioning_delay_minutes after the minute it is asked for (the other benchmarks). The organization's runs
    # (advise/org_advisor.py, `make bench-org`) set ElasticLatency().
    latency: ElasticLatency | None = None


class Simulation:
    def __init__(
        self,
        spec: PoolSpec,
        trace: JobsTrace | SeriesTrace,
        controller,
        settings: SimSettings = SimSettings(),
        horizon_minutes: int | None = None,
        stream: str | None = None,
    ):
        """`stream`: what the spot interruption and shortage streams are drawn from (default: the seed). An
        environment gives each pool its own (sim/environment.py: the seed and the pool's name)."""
        self.spec = spec
        self.trace = trace
        self.controller = controller
        self.settings = settings
        self.now = 0
        self.horizon = horizon_minutes if horizon_minutes is not None else default_horizon(trace)
        rate = settings.spot_interruptions_per_month
        if rate is None:
            rate = spec.spot_interruptions_per_month
        self.spot_interrupt_rate_per_minute = rate / MINUTES_PER_MONTH
        self.placement = settings.placement or spec.placement
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r}: one of {', '.join(PLACEMENTS)}")
        if settings.metric_delay_minutes < 0:
            raise ValueError(f"metric_delay_minutes {settings.metric_delay_minutes}: must be >= 0")
        if not 0.0 <= settings.spot_unavailable_fill_share <= 1.0:
            raise ValueError(f"spot_unavailable_fill_share {settings.spot_unavailable_fill_share}: a share, 0 to 1")
        stream = settings.seed if stream is None else stream
        self.stream = stream  # the seed of this pool's random draws (sim/environment.py: seed + pool name)
        self.interruptions = SlotInterruptions(stream, self.spot_interrupt_rate_per_minute)
        self._free_slots: list[int] = []  # heap of released spot slots; the lowest is taken first
        self._next_slot = 0
        self.episodes = (
            spot_episodes(
                stream, self.horizon, settings.spot_unavailable_episodes_per_week, settings.spot_unavailable_mean_hours
            )
            if spec.has_spot
            else []
        )
        self.od_episodes: list[tuple[int, int]] = []
        self.add_shortage_windows(settings.spot_unavailable_windows, settings.on_demand_unavailable_windows)
        self.recommendations: list[SimNode] = []  # rebalance recommendations not yet read by the controller
        self._replaced: set[str] = set()  # recommended nodes whose replacement launched
        self.nodes: dict[str, SimNode] = {}
        self._serial = 0
        # Every elastic group: the largest size's SPOT and ON_DEMAND, then each other size's (size_group).
        self.elastic_groups = (SPOT, ON_DEMAND) + tuple(
            size_group(k, z.gpus_per_node) for z in spec.sizes for k in (SPOT, ON_DEMAND)
        )
        self.spot_groups = tuple(g for g in self.elastic_groups if kind_of(g) == SPOT)
        self.on_demand_groups = tuple(g for g in self.elastic_groups if kind_of(g) == ON_DEMAND)
        self.group_gpus = {GUARANTEED: spec.floor_node_gpus, SPOT: spec.gpus_per_node, ON_DEMAND: spec.gpus_per_node}
        self.group_usd_per_hour = {
            GUARANTEED: spec.floor_usd_per_hour,
            SPOT: spec.spot_usd_per_hour,
            ON_DEMAND: spec.on_demand_usd_per_hour,
        }
        for z in spec.sizes:
            for k, price in ((SPOT, z.spot_usd_per_hour), (ON_DEMAND, z.on_demand_usd_per_hour)):
                self.group_gpus[size_group(k, z.gpus_per_node)] = z.gpus_per_node
                self.group_usd_per_hour[size_group(k, z.gpus_per_node)] = price
        self.desired = dict.fromkeys(self.elastic_groups, 0)
        self.last_change = dict.fromkeys(self.elastic_groups)  # minute of the last size change (cooldown)
        # minute each group's last UpdateNodegroupConfig completes (SimSettings.nodegroup_update_minutes)
        self.update_done_at = dict.fromkeys(self.elastic_groups, 0)
        # second at which EKS has applied each group's last update to its Auto Scaling group (SimSettings.latency)
        self.update_applied_s = dict.fromkeys(self.elastic_groups, 0.0)
        self.short_since = dict.fromkeys(self.elastic_groups)
        # Node groups (Auto Scaling groups) converge to their desired size; a controller that launches instances
        # itself (Karpenter, run-instances) has no group to converge, and a reclaimed node is not replaced for it.
        self.node_groups = getattr(controller, "node_groups", True)
        self.c = Counters()
        self.hist_keep = 60 + settings.metric_delay_minutes  # the longest window read (an hour), delayed
        self.workload = JobsWorkload(self) if isinstance(trace, JobsTrace) else SeriesWorkload(self)
        self.samples: list[tuple] = []  # (minute, demand_gpus, guaranteed_gpus, spot_gpus, on_demand_gpus, cost)
        self.changed = True
        self.version = 0  # bumped by every change a controller could observe (the quiet-tick proof reads it)
        self.nodes_version = 0  # bumped when a node is added or removed (sim/ports.py caches the groups' instances)
        self.counts = dict.fromkeys((GUARANTEED,) + self.elastic_groups, 0)
        self.leaving = dict.fromkeys((GUARANTEED,) + self.elastic_groups, 0)  # nodes under a spot notice
        self.rates = dict.fromkeys((GUARANTEED,) + self.elastic_groups, 0.0)
        self._billed_to = 0  # minutes before this one are billed
        self._next_event = 0  # earliest ready / notice / reclaim minute among the nodes
        self.ticks_skipped = 0
        self.gang_hold = GangHoldMeter(self, GUARANTEED)  # GPU-minutes of nodes held for waiting gangs (sim/cluster.py)
        for _ in range(spec.floor_nodes):
            self._new_node(GUARANTEED, ready_at=0)

    # --- capacity --------------------------------------------------------------------------------------------

    @property
    def spot_available(self) -> bool:
        """False during a spot-unavailable episode. Only what a launch attempt would tell a real controller."""
        while self._episode_i < len(self.episodes) and self.episodes[self._episode_i][1] <= self.now:
            self._episode_i += 1
        return not (self._episode_i < len(self.episodes) and self.episodes[self._episode_i][0] <= self.now)

    def add_shortage_windows(self, spot_windows=(), on_demand_windows=()) -> None:
        """Add named shortage windows ([start, end) minutes; SimSettings.spot_unavailable_windows,
        on_demand_unavailable_windows): spot launches fail in both kinds, on-demand launches in the second."""
        od = merge_windows(on_demand_windows)
        if self.spec.has_spot and (spot_windows or od):
            self.episodes = merge_windows([*self.episodes, *spot_windows, *od])
        if self.spec.has_on_demand and od:
            self.od_episodes = merge_windows([*self.od_episodes, *od])
        self._episode_i = self._od_episode_i = 0  # the properties step past the windows already over

    @property
    def on_demand_available(self) -> bool:
        """False inside an on-demand shortage window (InsufficientInstanceCapacity: only a launch attempt says so)."""
        eps = self.od_episodes
        while self._od_episode_i < len(eps) and eps[self._od_episode_i][1] <= self.now:
            self._od_episode_i += 1
        return not (self._od_episode_i < len(eps) and eps[self._od_episode_i][0] <= self.now)

    def _new_node(self, group: str, ready_at: int) -> SimNode:
        self._settle(self.now)
        self._serial += 1
        price = self.group_usd_per_hour[group]
        reclaim = slot = None
        if group in self.spot_groups:
            if self._free_slots:
                slot = heapq.heappop(self._free_slots)
            else:
                slot = self._next_slot
                self._next_slot += 1
            reclaim = self.interruptions.next_after(slot, self.now)
        rebalance = self._rebalance_minute(slot, reclaim) if reclaim is not None else None
        node = SimNode(
            f"i-{_ID_LETTER[group[0]]}{self._serial:07d}",
            self._serial,
            group,
            self.group_gpus[group],
            price,
            self.now,
            ready_at,
            reclaim,
            False,
            0,
            set(),
            [(self.now, 0)],
            None,
            slot,
            0,
            0,
            False,
            rebalance,
            False,
        )
        self.nodes[node.id] = node
        self.nodes_version += 1
        self.counts[group] += 1
        self.rates[group] += price
        self._next_event = min(
            self._next_event,
            ready_at,
            reclaim - self.settings.spot_warning_minutes if reclaim is not None else ready_at,
            rebalance if rebalance is not None else ready_at,
        )
        if group != GUARANTEED:
            self.c.node_launches += 1
        self.changed = True
        self.version += 1
        return node

    def set_reclaim(self, node: SimNode, minute: int, rebalance_at: int | None = None) -> None:
        """Force a node's interruption minute, and its rebalance recommendation's (tests)."""
        node.reclaim_at = minute
        node.rebalance_at = rebalance_at
        self._next_event = min(
            self._next_event,
            minute - self.settings.spot_warning_minutes,
            rebalance_at if rebalance_at is not None else minute,
        )

    def _rebalance_minute(self, slot: int, reclaim: int) -> int | None:
        """When EC2's rebalance recommendation for the interruption at `reclaim` comes, if before the 2-minute
        notice (else None: with it). Common random numbers: drawn from the seed, the slot and the minute alone."""
        st = self.settings
        if st.rebalance_early_share <= 0:
            return None
        rng = random.Random(f"rebalance-{self.stream}-{slot}-{reclaim}")
        if rng.random() >= st.rebalance_early_share:
            return None
        lo, hi = st.rebalance_lead_minutes
        at = reclaim - rng.randint(lo, hi)
        return at if at < reclaim - st.spot_warning_minutes and at > self.now else None

    def signal_rebalance(self, node: SimNode) -> None:
        """What gpuloan's rebalance_checkpoint does (policy/rebalance.py): a NoSchedule taint on the node, and its
        jobs start a checkpoint now (written checkpoint_write_minutes later)."""
        if node.closed:
            return
        node.closed = True
        self.workload.early_checkpoint(node, self.now, self.now + self.settings.checkpoint_write_minutes)
        self.changed = True
        self.version += 1

    def launch(self, group: str, count: int, request_s: float | None = None) -> int:
        """Launch nodes directly (Karpenter-style); returns how many launched (spot fails during an episode).
        `request_s`: the second of the launch request (SimSettings.latency; default: this minute's start)."""
        if count <= 0:
            return 0
        if group in self.spot_groups and not self.spot_available:
            self.c.spot_launch_failures += 1
            count = int(count * self.settings.spot_unavailable_fill_share)
            if not count:
                return 0
        if group == ON_DEMAND and not self.on_demand_available:
            self.c.on_demand_launch_failures += 1
            return 0
        ready_at = self._fleet_ready_at(request_s)
        for _ in range(count):
            self._new_node(group, ready_at=ready_at)
        self.desired[group] = self.count(group)
        self.last_change[group] = self.now
        return count

    def _fleet_ready_at(self, request_s: float | None) -> int:
        """Minute a node launched directly (CreateFleet) is Ready."""
        lat = self.settings.latency
        if lat is None:
            return self.now + self.settings.provisioning_delay_minutes
        request_s = 60.0 * self.now if request_s is None else request_s
        return max(self.now + 1, karpenter_ready_minute(request_s, lat, self.settings.provisioning_delay_minutes * 60))

    def _group_ready_at(self, group: str) -> int:
        """Minute a node the group's Auto Scaling group launches now is Ready: from the later of this minute's start
        (the group acting on its own: a replacement, a retry) and the second EKS applied the last update."""
        lat = self.settings.latency
        if lat is None:
            return self.now + self.settings.provisioning_delay_minutes
        acts_s = max(60.0 * self.now, self.update_applied_s[group])
        return max(self.now + 1, nodegroup_ready_minute(acts_s, lat, self.settings.provisioning_delay_minutes * 60))

    def start_static(self, group: str, count: int) -> None:
        """Capacity that is there from minute 0 (the static baseline's always-on fleet)."""
        for _ in range(count):
            self._new_node(group, ready_at=0)
        self.desired[group] = self.count(group)

    def set_desired(self, group: str, desired: int) -> None:
        """ASG-style: the group converges to `desired` (launches after the provisioning delay; removes launching
        nodes first, then the emptiest, newest nodes)."""
        desired = max(0, desired)
        if desired != self.desired[group]:
            lat = self.settings.latency
            wait = self.settings.nodegroup_update_minutes if lat is None else nodegroup_update_ticks(lat)
            if wait and self.now < self.update_done_at[group]:
                # UpdateNodegroupConfig while the node group is UPDATING fails; the caller asks again later
                self.c.nodegroup_update_conflicts += 1
                return
            if wait and self.update_done_at[group] == self.now and self.desired[group] != self.group_size(group):
                self._reconcile(group)  # the previous update completes this minute: its Auto Scaling group acts
            self.desired[group] = desired
            self.last_change[group] = self.now
            self.update_done_at[group] = self.now + wait
            if lat is not None:
                self.update_applied_s[group] = nodegroup_applied_second(self.now, lat)
            self.version += 1

    def set_closed(self, group: str, closed: frozenset) -> bool:
        """A NoSchedule taint on exactly the nodes of `group` named in `closed` (back to spot): no new pod lands on a
        closed node, the pods on it run on. True when a node changed."""
        changed = False
        for n in self.nodes.values():
            if n.group == group and (n.id in closed) != n.closed:
                n.closed = n.id in closed
                changed = True
        if changed:
            self.changed = True
            self.version += 1
        return changed

    def terminate(self, node_id: str, decrement: bool = True) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.group == GUARANTEED:
            return
        if node.busy:
            self.c.busy_terminations += 1
        self._remove(node, spot_reclaim=False)
        if decrement:
            self.desired[node.group] = max(0, self.desired[node.group] - 1)
            self.last_change[node.group] = self.now

    def _close(self, node: SimNode, end: int, c: Counters) -> None:
        """Add an elastic node's GPU-minutes up to `end` to `c`, by what they did."""
        if node.group == GUARANTEED:
            return
        g = node.gpus
        t, busy = node.hist[-1]
        c.elastic_paid += (end - node.launched) * g
        c.elastic_booting += (min(end, node.ready_at) - node.launched) * g
        c.elastic_busy += node.busy_minutes + (end - t) * busy
        empty = node.empty_minutes
        if busy == 0:
            empty += max(0, end - max(t, node.ready_at))
        c.elastic_empty += empty * g

    def elastic_gpu_minutes(self) -> dict[str, int]:
        """Elastic GPU-minutes paid so far: booting, ready with no pod, busy, and free on a node with a pod."""
        c = Counters(
            elastic_paid=self.c.elastic_paid,
            elastic_booting=self.c.elastic_booting,
            elastic_empty=self.c.elastic_empty,
            elastic_busy=self.c.elastic_busy,
        )
        for node in self.nodes.values():
            self._close(node, self.now, c)
        return {
            "paid": c.elastic_paid,
            "booting": c.elastic_booting,
            "empty": c.elastic_empty,
            "busy": c.elastic_busy,
            "free_on_busy_nodes": c.elastic_paid - c.elastic_booting - c.elastic_empty - c.elastic_busy,
        }

    def _remove(self, node: SimNode, spot_reclaim: bool) -> None:
        self._settle(self.now)
        self.workload.evict(node)
        self._close(node, self.now, self.c)
        del self.nodes[node.id]
        self.nodes_version += 1
        self.counts[node.group] -= 1
        if node.warned or node.recommended:
            self.leaving[node.group] -= 1
        if node.slot is not None:
            heapq.heappush(self._free_slots, node.slot)
        self.rates[node.group] -= node.usd_per_hour
        if not self.counts[node.group]:
            self.rates[node.group] = 0.0  # no float drift once a group is empty
        if spot_reclaim:
            self.c.spot_interruptions += 1
        self.changed = True
        self.version += 1

    def count(self, group: str) -> int:
        return self.counts[group]

    def group_size(self, group: str) -> int:
        """What the Auto Scaling group counts towards its desired size: a node under a spot notice is already
        being replaced (Capacity Rebalancing), so it no longer counts."""
        return self.counts[group] - self.leaving[group]

    def group_nodes(self, group: str) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.group == group]

    def _reconcile(self, group: str) -> None:
        nodes = [n for n in self.nodes.values() if n.group == group and not (n.warned or n.recommended)]
        have, want = len(nodes), self.desired[group]
        if have < want:
            if group in self.spot_groups and not self.spot_available:
                self.c.spot_launch_failures += 1
                if self.short_since[group] is None:
                    self.short_since[group] = self.now
                    self.version += 1
                for _ in range(int((want - have) * self.settings.spot_unavailable_fill_share)):  # scarce, not gone
                    self._new_node(group, ready_at=self._group_ready_at(group))
                return
            if group == ON_DEMAND and not self.on_demand_available:
                self.c.on_demand_launch_failures += 1
                if self.short_since[group] is None:
                    self.short_since[group] = self.now
                    self.version += 1
                return
            ready_at = self._group_ready_at(group)
            for _ in range(want - have):
                self._new_node(group, ready_at=ready_at)
        elif have > want:
            now = self.now
            nodes.sort(key=lambda n: (n.ready(now), n.busy, -n.serial))
            for n in nodes[: have - want]:
                if n.busy:
                    self.c.busy_terminations += 1
                self._remove(n, spot_reclaim=False)
        if self.short_since[group] is not None:
            self.short_since[group] = None
            self.version += 1

    # --- time --------------------------------------------------------------------------------------------------

    def run(self, progress=None) -> "Simulation":
        self.controller.start(self)
        horizon = self.horizon
        step = max(1, horizon // 100)
        warn = self.settings.spot_warning_minutes
        sample_every = self.settings.sample_every_minutes
        skip = self.settings.skip_quiet_ticks
        workload, controller = self.workload, self.controller
        now = 0
        while now < horizon:
            self.now = now
            if now >= self._next_event:
                self._node_events(now, warn)
            workload.tick(now)
            if self.changed:
                workload.schedule(now)
            controller.tick(self)
            self.recommendations.clear()  # EventBridge delivers each once: a controller that did not listen missed it
            if self.node_groups:
                for group in self.elastic_groups:
                    if self.desired[group] != self.group_size(group) and now >= self.update_done_at[group]:
                        self._reconcile(group)
            if self.changed:
                workload.schedule(now)
            self.gang_hold.tick(now)
            if now % sample_every == 0:
                self._sample(now)
            if progress is not None and now % step == 0:
                progress(now, horizon)
            nxt = now + 1
            if skip and nxt < horizon:
                nxt = self._quiet_until(now)
                if nxt > now + 1:
                    self._skip(now, nxt, sample_every)
            now = nxt
        self.now = horizon
        self._settle(horizon)
        workload.finish(horizon)
        return self

    def _quiet_until(self, now: int) -> int:
        """The next minute at which anything can differ from a repeat of minute `now`."""
        nxt = min(self.horizon, self._next_event, self.workload.next_event(now))
        if nxt <= now + 1:
            return now + 1
        if self.node_groups and any(self.desired[g] != self.group_size(g) for g in self.elastic_groups):
            return now + 1  # a group still converging (e.g. spot launches failing each minute)
        return min(nxt, max(now + 1, self.controller.wake(self)))

    def _skip(self, now: int, nxt: int, sample_every: int) -> None:
        """Minutes now+1 .. nxt-1 repeat minute `now`: account them in one step."""
        k = nxt - now - 1
        self.ticks_skipped += k
        self.workload.repeat(k)
        self.gang_hold.repeat(k)
        if getattr(self.controller, "reads_spend_each_minute", False):
            # the controller reads billed spend every minute: replay the minutes in order, samples between
            for m in range(now + 1, nxt):
                self.now = m
                self.controller.repeat(self, 1)
                if m % sample_every == 0:
                    self._sample(m)
            return
        self.controller.repeat(self, k)
        first = -(-(now + 1) // sample_every) * sample_every
        for m in range(first, nxt, sample_every):
            self.now = m
            self._sample(m)

    def _node_events(self, now: int, warn: int) -> None:
        upcoming = self.horizon + 1
        noticed = False
        for node in list(self.nodes.values()):
            if node.reclaim_at is not None:
                if now >= node.reclaim_at:
                    self._remove(node, spot_reclaim=True)
                    continue
                if node.rebalance_at is not None and not node.warned:
                    if not node.recommended and now >= node.rebalance_at:
                        # EC2's rebalance recommendation, ahead of the notice: a node group's Capacity Rebalancing
                        # launches a replacement (the node no longer counts towards desired), EventBridge tells
                        # whoever listens (sim/controllers/); the node itself runs on.
                        node.recommended = True
                        noticed = True
                        self.recommendations.append(node)
                        self.leaving[node.group] += 1
                        self.changed = True
                        self.version += 1
                    if node.recommended and self.node_groups and node.id in self._replaced:
                        # EKS drains the node once its replacement is Ready, if that comes before the notice
                        # (Amazon EKS User Guide, managed node groups, Spot): its pods are evicted, the instance goes.
                        drain = node.rebalance_at + self.settings.provisioning_delay_minutes
                        if drain < node.reclaim_at - warn:
                            if now >= drain:
                                self._remove(node, spot_reclaim=True)
                                continue
                            upcoming = min(upcoming, drain)
                    elif not node.recommended:
                        upcoming = min(upcoming, node.rebalance_at)
                if not node.warned:
                    if now >= node.reclaim_at - warn:
                        # The 2-minute notice: the node is cordoned (no new work lands), its Auto Scaling group
                        # starts a replacement, and EventBridge tells whoever listens (sim/controllers/).
                        node.warned = True
                        noticed = True
                        if not node.recommended:
                            self.leaving[node.group] += 1
                        self.changed = True
                        self.version += 1
                    else:
                        upcoming = min(upcoming, node.reclaim_at - warn)
                if node.warned:
                    upcoming = min(upcoming, node.reclaim_at)
            if node.ready_at == now and now > 0:
                self.changed = True
                self.version += 1
            elif node.ready_at > now:
                upcoming = min(upcoming, node.ready_at)
        self._next_event = upcoming
        for spot in self.spot_groups if noticed and self.node_groups else ():
            if self.desired[spot] <= self.group_size(spot):
                continue
            # Capacity Rebalancing acts on EC2's signal itself (the rebalance recommendation comes at the latest
            # with the notice), before the policy's next tick reads the group: the replacement is already launching.
            before = self.counts[spot]
            self._reconcile(spot)
            if self.counts[spot] > before:
                # the replacements launched: the nodes recommended this minute are drained once they are Ready
                for n in self.nodes.values():
                    if n.recommended and n.rebalance_at == now and n.group == spot:
                        self._replaced.add(n.id)
            self._next_event = min(self._next_event, now + 1)

    def _settle(self, upto: int) -> None:
        """Bill minutes [billed_to, upto) at the current rates (the rates a minute ends with), split by month.
        Billing is settled only when a rate changes, a sample or a budget figure is read, and at the end: the
        same points whether quiet minutes are skipped or not, so both paths add the same floats."""
        start = self._billed_to
        if upto <= start:
            return
        r = self.rates
        g, s, o = r[GUARANTEED], r[SPOT], r[ON_DEMAND]
        od_nodes = self.counts[ON_DEMAND]  # constant since the last settle: every launch and removal settles first
        for group in self.elastic_groups[2:]:  # other node sizes (none in a one-size pool: its sums unchanged)
            if kind_of(group) == SPOT:
                s += r[group]
            else:
                o += r[group]
                od_nodes += self.counts[group]
        c = self.c
        if od_nodes:
            c.on_demand_node_minutes += od_nodes * (upto - start)
            c.on_demand_node_minutes_spot_available += od_nodes * (upto - start - self._unavailable_within(start, upto))
        while start < upto:
            month = start // MINUTES_PER_MONTH
            end = min(upto, (month + 1) * MINUTES_PER_MONTH)
            minutes = end - start
            c.guaranteed_usd += g * minutes / 60
            c.spot_usd += s * minutes / 60
            c.on_demand_usd += o * minutes / 60
            c.monthly_usd[month] = c.monthly_usd.get(month, 0.0) + (g + s + o) * minutes / 60
            start = end
        self._billed_to = upto

    def _unavailable_within(self, start: int, end: int) -> int:
        """Minutes of [start, end) inside a spot-unavailable episode."""
        total = 0
        for a, b in self.episodes:
            if a >= end:
                break
            total += max(0, min(b, end) - max(a, start))
        return total

    def month_usd(self, month: int) -> float:
        """Spend of a 730-hour month billed before the current minute."""
        self._settle(self.now)
        return self.c.monthly_usd.get(month, 0.0)

    def _sample(self, now: int) -> None:
        self._settle(now + 1)
        gpus = {GUARANTEED: 0, SPOT: 0, ON_DEMAND: 0}
        for n in self.nodes.values():
            if n.ready(now):
                gpus[kind_of(n.group)] += n.gpus
        c = self.c
        self.samples.append(
            (
                now,
                self.workload.demand_gpus(),
                gpus[GUARANTEED],
                gpus[SPOT],
                gpus[ON_DEMAND],
                c.guaranteed_usd + c.spot_usd + c.on_demand_usd,
            )
        )

    # --- utilization as CloudWatch would report it -------------------------------------------------------------

    def set_busy(self, node: SimNode, busy: int) -> None:
        if busy == node.busy:
            return
        hist = node.hist
        t, before = hist[-1]
        node.busy_minutes += (self.now - t) * before
        if before == 0:
            node.empty_minutes += max(0, self.now - max(t, node.ready_at))
        node.busy = busy
        self.version += 1
        if hist[-1][0] == self.now:
            hist[-1] = (self.now, busy)
        else:
            hist.append((self.now, busy))
        cutoff = self.now - self.hist_keep
        while len(hist) > 2 and hist[1][0] <= cutoff:
            hist.pop(0)
        node.empty_since = self.now if busy == 0 else None

    def window_utilization(
        self, node: SimNode, minutes: int, at: int | None = None
    ) -> tuple[float | None, float | None]:
        """(max %, mean %) of the node's GPUs busy over the last `minutes` (including this minute); None when the
        node has been up for less than one full minute (no datapoint yet). `at`: another minute, as the node reads
        then: a later one if nothing changes before it, or an earlier one (a delayed CloudWatch reading)."""
        now = self.now if at is None else at
        start = max(node.launched, now - minutes + 1)
        if start > now or now <= node.launched:
            return None, None
        hist = node.hist
        j = len(hist)
        while j > 1 and hist[j - 1][0] > now:  # changes after the minute read do not count
            j -= 1
        if hist[j - 1][0] <= start:  # unchanged over the whole window
            pct = 100.0 * hist[j - 1][1] / node.gpus
            return pct, pct
        peak = 0
        area = 0
        for i in range(j - 1, -1, -1):
            t, busy = hist[i]
            seg_end = hist[i + 1][0] if i + 1 < j else now + 1
            seg_start = max(t, start)
            if seg_end > seg_start:
                area += busy * (seg_end - seg_start)
                if busy > peak:
                    peak = busy
            if t <= start:
                break
        span = now + 1 - start
        return 100.0 * peak / node.gpus, 100.0 * area / (span * node.gpus)

    def window_stats(
        self, node: SimNode, windows: tuple[int, ...], at: int | None = None
    ) -> list[tuple[float | None, float | None]]:
        """window_utilization for several windows in one walk over the node's history (the simulator's hot path:
        the policy reads three windows per node every minute); `at` as there."""
        now = self.now if at is None else at
        launched = node.launched
        if now <= launched:
            return [(None, None)] * len(windows)
        hist = node.hist
        j = len(hist)
        while j > 1 and hist[j - 1][0] > now:  # changes after the minute read do not count
            j -= 1
        earliest = now - max(windows) + 1
        if earliest < launched:
            earliest = launched
        if hist[j - 1][0] <= earliest:  # unchanged over every window (the common case: check it first, cheaply)
            pct = 100.0 * hist[j - 1][1] / node.gpus
            return [(pct, pct)] * len(windows)
        starts = [max(launched, now - w + 1) for w in windows]
        peaks = [0] * len(windows)
        areas = [0] * len(windows)
        seg_end = now + 1
        for i in range(j - 1, -1, -1):
            t, busy = hist[i]
            for k, start in enumerate(starts):
                seg_start = t if t > start else start
                if seg_end > seg_start:
                    areas[k] += busy * (seg_end - seg_start)
                    if busy > peaks[k]:
                        peaks[k] = busy
            if t <= earliest:
                break
            seg_end = t
        g = node.gpus
        return [(100.0 * peaks[k] / g, 100.0 * areas[k] / ((now + 1 - starts[k]) * g)) for k in range(len(windows))]


def default_horizon(trace) -> int:
    if isinstance(trace, SeriesTrace):
        return len(trace.gpus_demanded)
    if "[days " in trace.name:
        a, b = trace.name.rsplit("[days ", 1)[1].rstrip("]").split(":")
        return (int(b) - int(a) + 1) * 1440
    return max((int(math.ceil((j.submit_s + j.duration_s) / 60)) for j in trace.jobs), default=0) + 1


# --- workloads ---------------------------------------------------------------------------------------------


class JobsWorkload:
    """What kube-scheduler does with the pods of the trace's jobs. Pending pods are tried in submission order
    (the scheduling queue orders pods of equal priority by creation time) and every pod that fits is placed: a
    pod that does not fit goes back to wait and the next one is tried, nothing is reserved. A job no larger than a
    node is one pod on one node: the cheaper capacity first (preferred node affinity: floor, then spot, then
    on-demand), then the fullest node that fits (MostAllocated, the bin-packing score GPU clusters configure),
    then the oldest. A larger job is a gang of ceil(gpus / gpus_per_node) pods that starts only with all of them
    placed, each on a whole free node (coscheduling / Kueue's all-or-nothing admission).

    Pending work is kept as one queue per job size, so a pass costs work per size and per placement, not per
    pending pod: once a size does not fit, no later pod of that size or larger can fit in the same pass."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        jobs = sim.trace.jobs
        n = len(jobs)
        self.submit_s = [j.submit_s for j in jobs]
        self.gpus = [j.gpus for j in jobs]
        self.remaining_s = [j.duration_s for j in jobs]
        self.first_start = [None] * n
        self.run_start = [None] * n
        # Total pending time per job (issue 36): the first wait plus every re-wait after an interruption, a
        # reclaim or a preemption. `waiting_since` is the minute the job's current wait began (its submission,
        # then the minute it was stopped); None while it runs or once done.
        self.waiting_since: list = [j.submit_s / 60 for j in jobs]
        self.pending_minutes_so_far = [0.0] * n
        self.run_id = [0] * n
        self.on_nodes: list[list] = [[] for _ in range(n)]
        self.early: dict[int, tuple[int, int]] = {}  # job -> (minute of an asked-for checkpoint, minute it is written)
        self.done = [False] * n
        self._next = 0
        self.queues: dict[int, list] = {}  # gpus -> heap of job index (index order = submission order)
        self.pending_gpus = 0
        self.running_gpus = 0
        self.ends: list = []  # heap (end minute, job, run id)
        self.demand_gpu_minutes = sum(j.gpus * j.duration_s for j in jobs) / 60
        # A job larger than the whole pool (floor + elastic max) can never start. It is reported (never started,
        # its work unmet, its wait censored at the horizon) but never pending: no policy could serve it.
        self.pool_gpus = sim.spec.peak_gpus
        self.larger_than_pool = sum(1 for g in self.gpus if g > self.pool_gpus)
        self._arrival_minute = [int(s // 60) for s in self.submit_s]

    def demand_gpus(self) -> int:
        return self.running_gpus + self.pending_gpus

    def pending_counts(self) -> dict[int, int]:
        """GPUs requested by a pending job -> number of such jobs."""
        return {size: len(q) for size, q in self.queues.items() if q}

    def pods_on(self, node: SimNode) -> int:
        """GPU pods bound to the node, as the API server's pod list shows them: one pod per job on it."""
        return len(node.jobs)

    def next_event(self, now: int) -> int:
        nxt = self.ends[0][0] if self.ends else self.sim.horizon
        if self._next < len(self._arrival_minute):
            nxt = min(nxt, self._arrival_minute[self._next])
        return nxt

    def repeat(self, minutes: int) -> None:
        pass  # running jobs are accounted when they stop

    def arrival_seconds(self, minute: int) -> list[float]:
        """Submission seconds of the jobs submitted in `minute` (the trace's own seconds: sim/cloud.py)."""
        lo = bisect.bisect_left(self.submit_s, 60 * minute)
        hi = bisect.bisect_left(self.submit_s, 60 * (minute + 1), lo)
        return self.submit_s[lo:hi]

    def tick(self, now: int) -> None:
        sim = self.sim
        ends = self.ends
        while ends and ends[0][0] <= now:
            _, i, rid = heapq.heappop(ends)
            if rid != self.run_id[i] or self.done[i]:
                continue
            self._stop(i, now, finished=True)
        limit = (now + 1) * 60
        jobs_submit = self.submit_s
        while self._next < len(jobs_submit) and jobs_submit[self._next] < limit:
            i = self._next
            self._next += 1
            if self.gpus[i] > self.pool_gpus:
                continue
            self._enqueue(i)
            self.pending_gpus += self.gpus[i]
            sim.changed = True
            sim.version += 1

    def _stop(self, i: int, now: int, finished: bool) -> None:
        sim = self.sim
        elapsed_s = (now - self.run_start[i]) * 60
        gpus = self.gpus[i]
        if finished:
            sim.c.served_gpu_minutes += gpus * self.remaining_s[i] / 60
            self.remaining_s[i] = 0
            self.done[i] = True
        else:
            interval = sim.settings.checkpoint_interval_minutes * 60
            saved = min(self.remaining_s[i], (elapsed_s // interval) * interval if interval > 0 else 0)
            early = self.early.get(i)
            if early is not None and early[1] <= now:  # an early checkpoint (rebalance recommendation), written
                saved = max(saved, min(self.remaining_s[i], (early[0] - self.run_start[i]) * 60))
            lost = min(elapsed_s, self.remaining_s[i]) - saved
            sim.c.served_gpu_minutes += gpus * saved / 60
            sim.c.lost_gpu_minutes += gpus * lost / 60
            sim.c.jobs_interrupted += 1
            self.remaining_s[i] -= saved
            self._enqueue(i)
            self.pending_gpus += gpus
            self.waiting_since[i] = now
        self.early.pop(i, None)
        self.running_gpus -= gpus
        self.run_id[i] += 1
        for node, used in self.on_nodes[i]:
            self._unbind(node, i, used)
        self.on_nodes[i] = []
        self.run_start[i] = None
        sim.changed = True
        sim.version += 1

    def _enqueue(self, i: int) -> None:
        """Job i waits (again): into its size's queue, in submission order."""
        heapq.heappush(self.queues.setdefault(self.gpus[i], []), i)

    def _bind(self, node: SimNode, i: int, used: int) -> None:
        """A pod of job i takes `used` GPUs of the node (sim/environment.py binds to other pools' floors too)."""
        node.jobs.add(i)
        self.sim.set_busy(node, node.busy + used)

    def _unbind(self, node: SimNode, i: int, used: int) -> None:
        node.jobs.discard(i)
        self.sim.set_busy(node, node.busy - used)

    def evict(self, node: SimNode) -> None:
        for i in list(node.jobs):
            self._stop(i, self.sim.now, finished=False)

    def early_checkpoint(self, node: SimNode, at: int, written: int) -> None:
        """The jobs on `node` start a checkpoint at `at`, written at `written` (a job on several nodes checkpoints
        once, as a whole)."""
        for i in node.jobs:
            if i not in self.early:
                self.early[i] = (at, written)

    def schedule(self, now: int) -> None:
        sim = self.sim
        sim.changed = False
        if not self.pending_gpus:
            return
        gpn = sim.spec.gpus_per_node
        nodes = [
            n for n in sim.nodes.values() if n.ready_at <= now and not n.warned and not n.closed and n.busy < n.gpus
        ]
        if not nodes:
            return
        nodes.sort(key=lambda n: (FILL_RANK[n.group], n.serial))
        single_fits_below = gpn + 1  # single-node sizes >= this no longer fit in this pass
        gang_fits_below = math.inf  # gangs of this many nodes or more no longer fit
        heads = [(q[0], size) for size, q in self.queues.items() if q]
        heapq.heapify(heads)
        while heads:
            i, size = heapq.heappop(heads)
            if size <= gpn:
                if size >= single_fits_below:
                    continue
                placed = self._place_single(i, nodes, now)
                if not placed:
                    single_fits_below = size
                    if size == gpn or not any(n.busy == 0 for n in nodes):
                        gang_fits_below = 0
            else:
                k = -(-size // gpn)
                if k >= gang_fits_below:
                    continue
                placed = self._place_gang(i, k, nodes, now)
                if not placed:
                    gang_fits_below = k
            if placed:
                q = self.queues[size]
                heapq.heappop(q)
                if q:
                    heapq.heappush(heads, (q[0], size))
                nodes = [n for n in nodes if n.busy < n.gpus]
                if not nodes:
                    break
            if single_fits_below == 1 and gang_fits_below == 0:
                break

    def _place_single(self, i: int, nodes: list, now: int) -> bool:
        g = self.gpus[i]
        best = None
        best_key = None
        sign = 1 if self.sim.placement == MOST_ALLOCATED else -1
        shares = bool(self.sim.spec.sizes)
        for n in nodes:
            free = n.gpus - n.busy
            if free >= g:
                # cheaper tier, then the fullest (most_allocated) or the emptiest (least_allocated) node that
                # fits; ties: the oldest. Nodes of several sizes compare by the share left free once the pod is
                # placed, as kube-scheduler's NodeResourcesFit scores do ((requested + pod) / allocatable): a 1-GPU
                # pod fills an empty 1-GPU node under most_allocated, and goes to the emptiest large node under
                # least_allocated. One size: the same order as free GPUs.
                key = (FILL_RANK[n.group], sign * ((free - g) / n.gpus if shares else free))
                if best is None or key < best_key:
                    best, best_key = n, key
        if best is None:
            return False
        self._start(i, [(best, g)], now)
        return True

    def _place_gang(self, i: int, k: int, nodes: list, now: int) -> bool:
        gpn = self.sim.spec.gpus_per_node
        whole = [n for n in nodes if n.busy == 0 and n.gpus == gpn]  # already in fill order
        if len(whole) < k:
            return False
        g = self.gpus[i]
        self._start(i, [(n, gpn) for n in whole[: k - 1]] + [(whole[k - 1], g - gpn * (k - 1))], now)
        return True

    def _start(self, i: int, chosen: list, now: int) -> None:
        for n, used in chosen:
            self._bind(n, i, used)
        self.on_nodes[i] = chosen
        self.run_start[i] = now
        if self.first_start[i] is None:
            self.first_start[i] = now
        self.pending_minutes_so_far[i] += max(0.0, now - self.waiting_since[i])
        self.waiting_since[i] = None
        g = self.gpus[i]
        self.pending_gpus -= g
        self.running_gpus += g
        end = now + max(1, math.ceil(self.remaining_s[i] / 60))
        heapq.heappush(self.ends, (end, i, self.run_id[i]))

    def finish(self, horizon: int) -> None:
        """Account work still running at the horizon (done so far counts as served, the rest as unmet)."""
        for i, start in enumerate(self.run_start):
            if start is not None and not self.done[i]:
                done_s = min(self.remaining_s[i], (horizon - start) * 60)
                self.sim.c.served_gpu_minutes += self.gpus[i] * done_s / 60
                self.remaining_s[i] -= done_s

    def waits_minutes(self, horizon: int) -> tuple[list[float], int]:
        """Wait to first start of every job; a job never started counts with its wait so far (censored)."""
        out = []
        never = 0
        for i, s in enumerate(self.submit_s):
            start = self.first_start[i]
            if start is None:
                never += 1
                start = horizon
            out.append(max(0.0, start - s / 60))
        return out, never

    def pending_minutes(self, horizon: int) -> list[float]:
        """Total pending time of every job: its first wait plus every re-wait after it was stopped unfinished; a
        job waiting at the horizon counts with its wait so far (censored, as `waits_minutes`)."""
        return [
            total + (max(0.0, horizon - since) if since is not None else 0.0)
            for total, since in zip(self.pending_minutes_so_far, self.waiting_since)
        ]

    @property
    def unmet_gpu_minutes(self) -> float:
        return sum(g * r for g, r in zip(self.gpus, self.remaining_s)) / 60


class SeriesWorkload:
    """Fluid demand: minute t asks for gpus_demanded[t] GPUs. Capacity serves the level first and the backlog
    (GPU-minutes delayed earlier) with what is left, filling the cheaper capacity first (floor, spot, on-demand;
    a node under a spot notice last). A reclaimed node loses the work its GPUs did since the last checkpoint
    boundary (it returns to the backlog).

    What the cluster shows as pending 1-GPU pods: the delayed work at the width it was delayed at. Delayed work is
    pods that run later (a job that waited for a boot, or restarts from its checkpoint, finishes later and whatever
    queues behind it starts later), so it stays pending -- as wide as it was, not one pod per GPU-minute (showing
    the backlog of GPU-minutes as pods made the policy order up to 6x the real shortfall during each boot) --
    until spare capacity has worked it off. Showing only what waits *now* hid the backlog from a policy that
    scales to pending pods: with the level matching capacity it was never served (a steady 16 GPUs on a stormy
    spot market left 3.4 % unmet, every checkpoint loss kept for good)."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.series = sim.trace.gpus_demanded
        n = len(self.series)
        # next_change[t]: the first minute after t whose level differs (n when none): quiet minutes are skipped
        self._next_change = [n] * (n + 1)
        for t in range(n - 2, -1, -1):
            self._next_change[t] = t + 1 if self.series[t + 1] != self.series[t] else self._next_change[t + 1]
        self.backlog = 0
        self._early: dict[str, tuple[int, int]] = {}  # node -> early checkpoint (at, written)
        self.demand_gpu_minutes = float(sum(self.series[: sim.horizon]))
        self.level = 0  # GPUs demanded this minute
        self.waiting = 0  # of them, GPUs that found no capacity
        self.width = 0  # GPUs the delayed work occupies: the most that waited, or lost work, since backlog was 0
        self.pending = 0  # GPUs shown as pending pods: the backlog at its width
        self._minute = -1
        self._served_now = 0
        self._backlog_before = 0
        self._backlog_after = 0

    def _level(self, now: int) -> int:
        return self.series[now] if now < len(self.series) else 0

    def demand_gpus(self) -> int:
        return self.level + self.backlog

    def pending_counts(self) -> dict[int, int]:
        return {1: self.pending} if self.pending else {}

    def pods_on(self, node: SimNode) -> int:
        """GPU pods bound to the node: the fill's work is 1-GPU pods (as pending and displaced ones are), so a node
        the fill uses on `busy` GPUs runs that many. Not `len(node.jobs)`: the fill binds no jobs, and a busy node
        shown without pods (its utilization datapoints still minutes old) was reclaimed as idle."""
        return node.busy

    def next_event(self, now: int) -> int:
        if self.backlog or self.waiting or self._backlog_before:  # see tick: the minute after a drain re-fills
            return now + 1
        return self._next_change[now] if now < len(self.series) else self.sim.horizon

    def tick(self, now: int) -> None:
        d = self._level(now)
        if now == 0 or d != self.level or self.backlog or self.waiting or self._backlog_before:
            # The fill changes this minute; also the minute after the last of the backlog was worked off (that
            # fill served backlog + level: repeated, it would count work that does not exist and keep the nodes
            # that served the backlog busy for good).
            self.sim.changed = True
            return
        # Same level, nothing delayed, same capacity (a change would have set `changed`): the fill repeats.
        self.repeat(1)
        self._minute = now
        self._backlog_before = self._backlog_after = 0

    def repeat(self, minutes: int) -> None:
        self.sim.c.served_gpu_minutes += self._served_now * minutes

    def arrival_seconds(self, minute: int) -> list[float]:
        """The second new pods appear in `minute` where the level rises: a minute series has no seconds, so one is
        drawn from the pool's stream and the minute (sim/cloud.py)."""
        if self._level(minute) <= (self._level(minute - 1) if minute > 0 else 0):
            return []
        return [60.0 * minute + drawn_arrival_second(self.sim.stream, minute)]

    def schedule(self, now: int) -> None:
        sim = self.sim
        sim.changed = False
        d = self._level(now)
        if self._minute == now:  # capacity changed within the minute: re-fill from the same starting point
            sim.c.served_gpu_minutes -= self._served_now
            self.backlog = self._backlog_before + (self.backlog - self._backlog_after)
        self._minute = now
        self._backlog_before = self.backlog
        work = self.backlog + d
        # fill order without a sort: the nodes dict is in launch (serial) order already
        tiers: list[list[SimNode]] = [[], [], [], []]
        for n in sim.nodes.values():
            if n.ready_at <= now:
                # fluid demand has no pods to keep off a closed node: it serves last, as a warned one
                tiers[3 if (n.warned or n.closed) else FILL_RANK[n.group]].append(n)
        served = 0
        for n in (n for tier in tiers for n in tier):
            lent = self.lent_on(n)  # GPUs of the node other pools' pods hold (a lent floor, sim/environment.py)
            use = min(n.gpus - lent, work - served)
            sim.set_busy(n, lent + use)
            served += use
        sim.c.served_gpu_minutes += served
        self._served_now = served
        self.backlog = work - served
        self._backlog_after = self.backlog
        self.level = d
        self.waiting = max(0, d - served)
        self.width = max(self.width, self.waiting) if self.backlog else 0
        pending = min(math.ceil(self.backlog), self.width)
        if pending != self.pending:
            self.pending = pending
            sim.version += 1

    def early_checkpoint(self, node: SimNode, at: int, written: int) -> None:
        self._early[node.id] = (at, written)

    def lent_on(self, node: SimNode) -> int:
        """GPUs of `node` that other pools' pods hold: none in a pool alone."""
        return 0

    def evict(self, node: SimNode) -> None:
        interval = self.sim.settings.checkpoint_interval_minutes
        since = self.sim.now % interval if interval > 0 else 0
        early = self._early.pop(node.id, None)
        if early is not None and early[1] <= self.sim.now:
            since = min(since, self.sim.now - early[0])
        lost = node.busy * since
        # Whole GPU-minutes: the counter is a float, and a float here made the backlog, the width and the pending
        # pods the policy reads floats (a TypeError in the controller's pod list, issue 36).
        lost = min(lost, math.floor(self.sim.c.served_gpu_minutes))
        self.sim.c.served_gpu_minutes -= lost
        self.sim.c.lost_gpu_minutes += lost
        self.backlog += lost
        if lost:
            self.width = max(self.width, node.busy)  # the lost work reruns on as many GPUs as it ran on
        if node.busy:
            self.sim.c.jobs_interrupted += 1

    def finish(self, horizon: int) -> None:
        pass

    @property
    def unmet_gpu_minutes(self) -> float:
        return self.backlog
