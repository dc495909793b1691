"""Our policy on the simulated pool: the Lambda's own tick (policy.tick.run_tick) over the in-memory ports of
sim/controllers/ports.py, with the policy settings of the simulated pool."""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timedelta
from typing import Any

from policy import capacity_blocks
from policy import decide as rules
from policy import tick
from policy.decide.lend_ahead import lend_ahead_on
from policy.decide import next_month_start
from policy.model import (
    ACTION_SET_DESIRED,
    ACTION_SET_LENDING_LIMIT,
    ACTION_TERMINATE,
    NodeSize,
    Observation,
    PoolSettings,
    Settings,
)
from policy.terms import Enforcement, Reason, Workload
from policy.rhythm import SLOT_MINUTES
from policy.spend import MAX_ACCRUAL_GAP, accrue
from pricing import policy_settings
from sim.cloud import size_group
from sim.engine import GUARANTEED, ON_DEMAND, SPOT, Simulation
from sim.pool import PoolSpec
from sim.controllers.ports import at_minute, minute_at_or_after, sim_ports
from sim.controllers.base import Controller


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
        # the pool's other node sizes, each its own pair of simulated groups (sim/cloud.py size_group)
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
    spend and warm-up bookkeeping in its state) over in-memory ports on the simulated pool (sim/controllers/ports.py)."""

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
            # the floor's queue as the rule's settings name it, read and patched through sim/controllers/ports.py
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
        self._version_before = -1  # sim.version when the last tick began
        self._seen = -1  # the last minute the tick ran or was proven to repeat (_repeats_now)
        self._wake_proof = (-1, 0)  # (minute, the first minute after it the tick's reading changes): wake()'s last
        self._nodes_proof = (-1, 0, 0)  # (minute, cap, the first node change after it): _node_changes_kept's last
        self._busy_read: tuple[int, frozenset[str], bool] = (-1, frozenset(), True)  # _busy_now's, by sim.version
        # Whether a rule reads a floor node's CloudWatch figures: a service pool's mean utilization (policy/decide/
        # scale.py `_mean_utilization`) and a Capacity Block's own group do; otherwise the rules read elastic nodes
        # only (idle, drain, reclaim, gangs, warm-up), and a floor node's figures are only reported (the pool's
        # utilization by tier, PoolDecision.utilization_pct), so their changes wake no tick.
        self._floor_figures_read = ps.workload == Workload.service or capacity_blocks.is_block(ps)
        # the pod and group views the last quiet tick read, and its arrivals (None: no quiet tick to repeat)
        self._views_read: tuple | None = None
        self._arrivals_read: tuple | None = None
        # _repeats_now applies to a pool whose tick reads nothing else of the pods: no warm-up or lend-ahead (they
        # record arrivals in the tick's state), no Capacity Block (its floor quota is read from Kueue)
        self._may_repeat = not ps.warm_up and not lend_ahead_on(ps) and not capacity_blocks.is_block(ps)
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
        if self._repeats_now(sim):
            # the Lambda's tick would decide its last plan again (see _repeats_now): accounted as a repeat
            self._repeat_minute(sim)
            return
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
        self._version_before = sim.version
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
        self._seen = sim.now
        # what this quiet tick read, for _repeats_now (a plan that changed something is decided again anyway)
        self._views_read = self._views(sim) if quiet and sim.version == self._version_before else None
        self._arrivals_read = self._arrivals(sim) if self._views_read is not None else None
        self._version = sim.version

    def _repeats_now(self, sim: Simulation) -> bool:
        """Whether the tick at this minute would decide the last quiet tick's plan again, so that it need not run:
        the pool was processed for an event (a job arrived, finished or bound, another pool's pod came or went on
        its floor) that changed nothing the engine reads. The rules (policy/decide/) read of the pods their
        pending lists (all pods, off spot, gangs), whether a node holds a GPU pod (policy/decide/idle.py,
        policy/gangs.py: never the count) and the recent arrivals (policy/decide/keep_warm.py, only for an
        elastic node without a GPU pod); of the nodes, the groups and instances and the CloudWatch figures. So the
        tick repeats when, since the last quiet tick:
        - the pending lists, the groups and their instances, and the set of nodes holding a GPU pod are the same,
          no node is under a spot notice and no rebalance recommendation waits;
        - the arrivals are the same, or every elastic node holds a GPU pod (no node the release-on-cost rule
          could keep warm: the rule reads no arrival);
        - no rule's timer (the plan's next_decision_at) and no timed change of what the tick reads
          (_observation_changes: CloudWatch figures, spend, an arrival leaving its window) fell since: an event
          this minute is read in CloudWatch only metric_delay_minutes later (at least one).
        The every-minute run (settings.skip_quiet_ticks off) never takes this path; scripts/compare_skip.py and
        tests/sim/test_sim_speed.py compare the two."""
        now = sim.now
        if (
            self._views_read is None
            or not self._quiet_plan
            or not self._may_repeat
            or not sim.settings.skip_quiet_ticks
            or sim.settings.metric_delay_minutes < 1
            or sim.recommendations
            or now >= self._decide_again
            or self._seen >= now
        ):
            return False
        read = self._views_read
        if any(view() != was for view, was in zip(self._view_readers(sim), read)):
            return False
        for n in sim.nodes.values():
            if n.warned:
                return False
        if not self._every_elastic_node_busy(sim) and self._arrivals(sim) != self._arrivals_read:
            return False
        if self._wake_proof[0] == self._seen:  # wake() looked for the changes after that minute already
            return self._wake_proof[1] > now
        return self._observation_changes(sim, now + 1, since=self._seen) > now

    def _view_readers(self, sim: Simulation) -> tuple:
        """What the tick reads of the pods (bar the arrivals) and of the groups now, each view a call (_repeats_now
        compares them in this order, cheapest and likeliest to differ first): the elastic nodes holding a GPU pod,
        the pending lists (all pods, off spot, gangs), the groups with their instances."""
        pods: Any = self.ports.pods
        groups: Any = self.ports.groups
        ps, name = self.ps, [self.ps.name]
        names = list(ps.elastic_groups) + ([ps.guaranteed_group] if ps.guaranteed_group else [])
        return (
            lambda: self._elastic_busy(sim),
            lambda: pods.pending_gpus(name),
            lambda: pods.pending_on_demand_only(name),
            lambda: pods.pending_gangs(name),
            lambda: tuple(groups.read(names, at_minute(sim.now), set(ps.spot_groups), _never).items()),
        )

    def _views(self, sim: Simulation) -> tuple:
        return tuple(view() for view in self._view_readers(sim))

    def _elastic_busy(self, sim: Simulation) -> frozenset[str]:
        """The elastic nodes holding a GPU pod. The rules read a node's pods only for elastic nodes (whether one
        holds any: policy/decide/idle.py, drain.py, policy/gangs.py); a floor node's pods are never read."""
        return self._busy_now(sim)[0]

    def _every_elastic_node_busy(self, sim: Simulation) -> bool:
        """Whether every elastic node holds a GPU pod (then no rule reads the arrivals: _repeats_now)."""
        return self._busy_now(sim)[1]

    def _busy_now(self, sim: Simulation) -> tuple[frozenset[str], bool]:
        """(_elastic_busy, _every_elastic_node_busy), built once per sim.version: a pod binding or leaving and a
        node added or removed bump it (as SimPods.gpu_pods_by_node relies on too)."""
        kept = self._busy_read
        if kept[0] != sim.version:
            pods_on = sim.workload.pods_on  # as SimPods.gpu_pods_by_node reads them, elastic nodes only
            elastic = [n for n in sim.nodes.values() if n.group != GUARANTEED]
            busy = frozenset(n.id for n in elastic if pods_on(n))
            every = len(busy) == len(elastic)
            kept = self._busy_read = (sim.version, busy, every)
        return kept[1], kept[2]

    def _arrivals(self, sim: Simulation) -> tuple:
        if not self.keep_for_next_job:
            return ()
        return tuple(self.ports.pods.arrival_minutes(sim.now - self.ps.arrival_window_minutes))  # type: ignore[union-attr]

    def _repeat_minute(self, sim: Simulation) -> None:
        """This minute's tick repeated the last plan: its reasons counted, its spend accrued as the tick does
        (policy.spend.accrue at the plan's rates up to this minute)."""
        for r in self._last_reasons:
            self.reasons[r] += 1
        if self._last_held:
            self._hold_minutes(sim.now, 1)
        accrue(self.state, self._rates, at_minute(sim.now))
        self._seen = sim.now
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

    def decision_figures(self) -> dict:
        return {
            "decide_calls": self.calls,
            "decisions_by_reason": dict(sorted(self.reasons.items())),
            # minutes in which the budget cap held a wanted scale-up, and when ([start, end) simulated minutes)
            "budget_cap_held_minutes": self.cap_held_minutes,
            "budget_cap_held": [list(r) for r in self.cap_held],
        }

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
        wake = self._observation_changes(sim, min(sim.horizon, self._decide_again))
        self._wake_proof = (sim.now, wake)  # for _repeats_now at the pool's next minute
        return max(nxt, wake)

    def _observation_changes(self, sim: Simulation, until: int, since: int | None = None) -> int:
        """The first minute after now (at most `until`) at which the Observation of the tick changes in what the
        engine reads, with no event in between (an event bumps sim.version):
        - a node's CloudWatch figures (a floor node's only where a rule reads them: _floor_figures_read): a change
          of its busy GPUs at minute t is read from t + delay on (its first
          datapoint a minute after launch, delayed) and has left a window of w minutes from t + delay + w - 1 on;
          in between, the first minute its figures read differently to the engine (policy.decide node_reading: a
          utilization figure on the other side of the idle threshold, or another value below it; the reserved
          figure zero or not; a service pool's mean at all);
        - with a budget, the tick's next AWS Budgets read (the policy's state says when), the calendar month's
          start, and the month-to-date spend (the policy's own figure) reaching a capped budget;
        - an arrival leaving the arrival window; the warm-up history's slot of the day.
        `since` (default now): the minute the changes are looked for after, at most now (_repeats_now: the last
        minute the tick was known to read what it read then; an event after it counts in CloudWatch only from
        metric_delay_minutes on, so the figures read up to now are the same whatever happened at now)."""
        now, ps = sim.now if since is None else since, self.ps
        nxt = now + 1
        if since is None:
            wake = self._node_changes_kept(sim, until, now)
        else:
            wake = self._node_changes(sim, sim.nodes.values(), until, now)
        if ps.budget_monthly_usd is not None:
            wake = min(wake, self._spend_changes(sim, now))
        pods: Any = self.ports.pods  # sim/controllers/ports.py SimPods
        # the arrivals are read only for an elastic node without a GPU pod (policy/decide/keep_warm.py, by the
        # release-on-cost rule); until an event gives one, an arrival leaving the window changes no decision
        first_arrival = (
            pods.first_arrival_minute(now - ps.arrival_window_minutes)
            if self.keep_for_next_job and not self._every_elastic_node_busy(sim)
            else None
        )
        if first_arrival is not None:
            wake = min(wake, first_arrival + ps.arrival_window_minutes)
        if ps.warm_up:
            # the warm-up rate reads whole slots of the day (SIM_EPOCH is a midnight)
            wake = min(wake, (now // SLOT_MINUTES + 1) * SLOT_MINUTES)
        return max(nxt, wake)

    def _node_changes(self, sim: Simulation, nodes, until: int, now: int) -> int:
        """The first minute after `now` (at most `until`) at which one of `nodes` reads differently to the engine:
        its first datapoint, or its CloudWatch figures (see _observation_changes)."""
        ps = self.ps
        wake = until
        delay = sim.settings.metric_delay_minutes
        longest = max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes)
        moving: list = []  # (node, the last minute its windows move)
        floors_read = self._floor_figures_read
        for n in nodes:
            if n.warned or n.ready_at > now:
                continue  # leaving or booting: nothing read of it changes before an event
            if n.group == GUARANTEED and not floors_read:
                continue  # a floor node's figures are reported, never decided on (_floor_figures_read)
            first = n.launched + 1 + delay
            if first > now:
                wake = min(wake, first)  # its first datapoint
                continue
            t = n.hist[-1][0] + delay if len(n.hist) > 1 else None
            if t is None or t + longest - 1 <= now:
                continue  # its newest change has left every window: it reads the same until an event
            moving.append((n, t + longest - 1))  # read from t on (not yet when t > now), settled from t + w - 1
        if moving and wake > now + 1:
            wake = self._reading_changes(sim, moving, wake, now)
        return wake

    def _node_changes_kept(self, sim: Simulation, until: int, now: int) -> int:
        """_node_changes over every node, from the last answer where it still holds. That answer (minute k, cap u,
        first change w) says that no node of then reads differently in (k, w). A node that has not changed since
        k (no pod came or went, not launched, not come into service: none of them since the start of minute k,
        as events at k may have come after that answer) reads at `now` as it read at k, so its first change after
        now is at w or later: only the others are looked at again, bounded by w. Kept while now < w and, when w
        is the cap u (no change found before it), only up to u. A node gone since k may leave w earlier than
        needed, never later: the pool is then processed at w and decides what it would have decided anyway (the
        every-minute run is the reference: tests/sim/test_sim_speed.py, scripts/compare_skip.py)."""
        k, cap, first = self._nodes_proof
        if 0 <= k <= now < first and (first < cap or until <= cap):
            changed = [n for n in sim.nodes.values() if max(n.hist[-1][0], n.launched, n.ready_at) >= k]
            wake = self._node_changes(sim, changed, min(until, first), now) if changed else min(until, first)
        else:
            wake = self._node_changes(sim, sim.nodes.values(), until, now)
        self._nodes_proof = (now, until, wake)
        return wake

    def _spend_changes(self, sim: Simulation, now: int) -> int:
        """With a budget: the first minute at which the tick's spend reads differently to the rules: its next AWS
        Budgets read, the next calendar month, and (capped) the minute the policy's month-to-date reaches the
        budget at the plan's rate (one minute early at least)."""
        ps = self.ps
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
        if ps.budget_enforcement == Enforcement.cap_elastic:
            budget = ps.budget_monthly_usd or 0.0  # not None: checked by the caller
            left = budget - (spend.get("actual_usd") or 0.0) - float(spend.get("estimated_since_usd", 0.0))
            if left <= 0:
                return nxt
            usd_per_minute = self._rates.get(tick.pool_scope(ps.name), (0.0, 0.0))[0] / 60
            if usd_per_minute > 0:
                wake = min(wake, now + int(left / usd_per_minute))
        return max(nxt, wake)

    def _reading_changes(self, sim: Simulation, moving: list, until: int, now: int) -> int:
        """The first minute after `now`, before `until`, at which one of the `moving` nodes (each with the last
        minute its windows move) reads differently to the engine than at `now`; else `until`."""
        ps = self.ps
        read = now - sim.settings.metric_delay_minutes
        longest = max(ps.idle_timeout_minutes, ps.empty_timeout_minutes, ps.scale_up_window_minutes)
        busiest = rules.node_reading(ps, 100.0, 100.0, 100.0, 100.0)
        windows = (ps.idle_timeout_minutes, ps.scale_up_window_minutes, ps.empty_timeout_minutes)
        distinct = tuple(sorted(set(windows)))
        at = tuple(distinct.index(w) for w in windows)

        def reading(n, m: int) -> tuple:
            # as sim/controllers/ports.py SimUtilization serves them to the tick (policy/tick.py _pool_groups_and_nodes)
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


def _never(err: Exception) -> None:
    raise err  # the simulated groups are always read


_LEASE = ("simulator", 60.0)  # (holder, seconds): the tick takes the state's lease as the Lambda's does


# Plans held for the budget (counted as the minutes the cap held a wanted scale-up).
_CAP_HELD = {Reason.BUDGET_CAP.value, Reason.BUDGET_UNKNOWN.value}


WARM_UP_NAME = "gpuloan-warm-up"
# The what-if rows of scripts/benchmark.py --what-if (GpuLoan's instant_idle / keep_for_next_job).
INSTANT_IDLE_NAME = "gpuloan-instant-idle"
INSTANT_IDLE_NO_KEEP_NAME = "gpuloan-instant-idle-no-keep"
WHAT_IF_NAMES = (INSTANT_IDLE_NAME, INSTANT_IDLE_NO_KEEP_NAME)
