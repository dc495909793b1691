"""A Capacity Block floor over its window, simulated minute by minute: who raises the block's group at its start,
and what the work on it loses at its end (issue 28, aws/karpenter-provider-aws#9001; docs/floor.md).

The block (S = start, E = end, D = E - 40 min) is paid for every node from S to E whether a node runs or not
(EC2 bills the block up front for its whole length). Both modes share what AWS does (docs/aws-rules.md):
- a launch into the block succeeds from S; a node takes `provisioning_delay_minutes` to be ready;
- at D EKS's scheduled action scales the group to 0 and drains its nodes; EC2 shuts the instances down from E - 30.
Modes:
- `before` (gpuloan before this change): the group goes to `nodes` at the next `pulumi up`, `deploy_delay_minutes`
  after S; nothing drains ahead of D.
- `after`: the real policy (policy.decide.decide, with the block's window in its settings) ticks every minute of
  the window's transitions; its set_desired raises the group, its checkpoint actions ask the jobs to save.
Work: each block node runs the pool's training jobs back to back (a block is bought for a backlog). A job saves a
checkpoint every `checkpoint_interval_minutes` from its own start (SimSettings' default, 30). A job asked to
checkpoint (`gpuloan.io/checkpoint-by: <D>`) trains on until D minus its `checkpoint_write_minutes`, writes its
checkpoint by D and leaves for the elastic groups, as the annotation's deadline asks; its node is cordoned from the
drain on, so no new job starts there (one that ends by itself meanwhile leaves the node idle). A job still running at D is evicted by EKS's drain and loses the
work since its last checkpoint: nothing in EKS's eviction gives it more than the pod's grace period to save.
Job lengths are exponential (mean `mean_job_hours`), drawn per node slot from the seed alone, so both modes meet
the same jobs in the same order (common random numbers).

Figures per block: paid node-minutes with no ready node (split: at the start, at the end) and GPU-hours of work
lost at D; the GPU-hours of work handed to the elastic groups by the drain.

The policy is called at every minute around S, the drain time and D (where its decision can change) and once an
hour between (nothing in this model moves the group there); the same decisions as a call every minute.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from policy import capacity_blocks as cb
from policy.decide import decide
from policy.model import (
    ACTION_SET_DESIRED,
    LIFECYCLE_IN_SERVICE,
    LIFECYCLE_PENDING,
    Group,
    Node,
    Observation,
    PoolObservation,
    PoolSettings,
    Settings,
)
from policy.terms import Tier

BEFORE, AFTER = "before", "after"
FLOOR, SPOT = "block-floor", "block-spot"
ORIGIN = datetime(2027, 1, 4, 0, 0, tzinfo=timezone.utc)  # minute 0 of the simulated clock (a Monday)


@dataclass(frozen=True)
class BlockScenario:
    start_minute: int  # S, minutes after ORIGIN
    duration_minutes: int  # E - S
    nodes: int = 2
    gpus_per_node: int = 8
    provisioning_delay_minutes: int = 6  # SimSettings' default: request to schedulable GPU node
    checkpoint_interval_minutes: int = 30  # SimSettings' default
    checkpoint_write_minutes: int = 5  # an assumption: saving a large model's state to shared storage
    mean_job_hours: float = 6.0
    deploy_delay_minutes: int = 6 * 60  # `before`: S to the next `pulumi up` (03:00 -> 09:00)
    checkpoint_lead_minutes: int = cb.DEFAULT_CHECKPOINT_LEAD_MINUTES
    seed: int = 1

    @property
    def end_minute(self) -> int:
        return self.start_minute + self.duration_minutes

    @property
    def scale_down_minute(self) -> int:
        return self.end_minute - int(cb.EKS_SCALEDOWN_BEFORE_END.total_seconds() // 60)


@dataclass
class BlockResult:
    idle_start_node_minutes: int = 0  # paid, from S until each node slot has a ready node
    idle_end_node_minutes: int = 0  # paid, from each node's removal to E (EKS's scale-down, or the drain's exit)
    lost_gpu_minutes: float = 0.0  # work since the last checkpoint of the jobs evicted at D
    handed_over_gpu_minutes: float = 0.0  # work the drain saved and moved to the elastic groups (not lost)
    decisions: list = field(default_factory=list)  # (minute, reason) of the policy's changes on the block

    @property
    def idle_node_minutes(self) -> int:
        return self.idle_start_node_minutes + self.idle_end_node_minutes


def _at(minute: int) -> datetime:
    return ORIGIN + timedelta(minutes=minute)


def _settings(s: BlockScenario) -> Settings:
    pool = PoolSettings(
        name="block",
        team="t",
        tier=Tier.production,
        gpus_per_node=s.gpus_per_node,
        spot_group=SPOT,
        on_demand_group=None,
        spot_max_nodes=8,
        on_demand_max_nodes=0,
        spot_usd_per_hour=0.0,
        on_demand_usd_per_hour=0.0,
        guaranteed_group=FLOOR,
        guaranteed_nodes=s.nodes,
        capacity_block_start=_at(s.start_minute).isoformat(),
        capacity_block_end=_at(s.end_minute).isoformat(),
        capacity_block_checkpoint_lead_minutes=s.checkpoint_lead_minutes,
    )
    return Settings(environment="sim", region="us-east-1", cluster_name="sim", pools=(pool,))


def _policy_minutes(s: BlockScenario) -> list[int]:
    """The minutes the policy is asked: every minute around its transitions, hourly between."""
    drain = s.scale_down_minute - s.checkpoint_lead_minutes
    around = set()
    for t in (s.start_minute, drain, s.scale_down_minute):
        around.update(range(t - 2, t + s.provisioning_delay_minutes + 3))
    hourly = set(range(s.start_minute - 60, s.end_minute + 60, 60))
    return sorted(m for m in around | hourly if s.start_minute - 60 <= m <= s.end_minute)


def _ready_minutes(s: BlockScenario, mode: str) -> tuple[int | None, int | None, list]:
    """(minute the group is raised, minute the drain asks for checkpoints, the policy's changes)."""
    if mode == BEFORE:
        raised = s.start_minute + s.deploy_delay_minutes
        return (raised if raised < s.scale_down_minute else None), None, []
    settings = _settings(s)
    desired, raised, drain, changes = 0, None, None, []
    ready_at: int | None = None
    for m in _policy_minutes(s):
        if m >= s.scale_down_minute:
            desired = 0  # EKS's own scheduled action at D, before the policy's tick of that minute
        nodes = ()
        if raised is not None and m < s.scale_down_minute:
            life = LIFECYCLE_IN_SERVICE if m >= ready_at else LIFECYCLE_PENDING
            nodes = tuple(Node(f"i-{k:08d}", FLOOR, _at(raised), life) for k in range(s.nodes))
        obs = Observation((PoolObservation("block", (Group(SPOT, 0), Group(FLOOR, desired, 0, s.nodes)), nodes, ()),))
        plan = decide(settings, obs, _at(m))
        for a in plan.changes:
            if a.group != FLOOR:
                continue
            changes.append((m, a.reason.value))
            if a.kind == ACTION_SET_DESIRED:
                desired = a.desired_to
                if desired > 0 and raised is None:
                    raised, ready_at = m, m + s.provisioning_delay_minutes
            elif a.kind == cb.ACTION_CHECKPOINT and drain is None:
                drain = m
    return raised, drain, changes


def _jobs(rng: random.Random, mean_minutes: float):
    while True:
        yield max(1, round(rng.expovariate(1.0 / mean_minutes)))


def run(s: BlockScenario, mode: str) -> BlockResult:
    """One block in one mode (module doc)."""
    raised, drain, changes = _ready_minutes(s, mode)
    res = BlockResult(decisions=changes)
    down = s.scale_down_minute
    for slot in range(s.nodes):
        if raised is None:  # never raised before EKS's scale-down: the whole block idles
            res.idle_start_node_minutes += s.duration_minutes
            continue
        ready = min(raised + s.provisioning_delay_minutes, down)
        res.idle_start_node_minutes += ready - s.start_minute
        stop = down  # when the node's work ends: EKS's eviction, or the drain's exit
        rng = random.Random(f"{s.seed}/{s.start_minute}/{slot}")
        lengths = _jobs(rng, s.mean_job_hours * 60)
        t = ready
        while t < down:
            length = next(lengths)
            end = t + length
            if drain is not None and drain < min(end, down):
                # Marked at `drain`, its annotation naming D: it trains on until D - write time, saves, and leaves
                # for the elastic groups; its node is cordoned, so no job starts there after it.
                save_at = max(drain, down - s.checkpoint_write_minutes)
                if end <= save_at:  # it finishes by itself first; nothing new lands on the cordoned node
                    stop = end
                elif save_at + s.checkpoint_write_minutes <= down:
                    res.handed_over_gpu_minutes += (save_at - t) * s.gpus_per_node
                    stop = save_at + s.checkpoint_write_minutes
                else:  # the save cannot finish before EKS evicts it: as if it had not been asked
                    res.lost_gpu_minutes += ((down - t) % s.checkpoint_interval_minutes) * s.gpus_per_node
                break
            if end >= down:
                # Evicted at D: the work since its last periodic checkpoint is lost.
                res.lost_gpu_minutes += ((down - t) % s.checkpoint_interval_minutes) * s.gpus_per_node
                break
            t = end
        res.idle_end_node_minutes += s.end_minute - stop
    return res


def scenarios(blocks: int = 40, seed: int = 1, **kw) -> list[BlockScenario]:
    """`blocks` Capacity Blocks as AWS sells them: 1 to 14 days long, ending at 11:30 UTC, starting at a random
    hour (an offering starts when capacity frees up); the same list for the same seed."""
    rng = random.Random(f"blocks/{seed}")
    out = []
    for _ in range(blocks):
        days = rng.randint(1, 14)
        start_hour = rng.randint(0, 23)
        end = (days + 1) * 24 * 60 + 11 * 60 + 30  # day `days + 1` at 11:30 UTC
        start = 24 * 60 + start_hour * 60  # day 1 at the start hour
        out.append(BlockScenario(start_minute=start, duration_minutes=end - start, seed=seed, **kw))
    return out


@dataclass
class Summary:
    blocks: int
    node_minutes_paid: int
    idle_start_node_minutes: int
    idle_end_node_minutes: int
    lost_gpu_hours: float
    handed_over_gpu_hours: float


def summarize(results: list[BlockResult], scens: list[BlockScenario]) -> Summary:
    return Summary(
        len(results),
        sum(s.duration_minutes * s.nodes for s in scens),
        sum(r.idle_start_node_minutes for r in results),
        sum(r.idle_end_node_minutes for r in results),
        sum(r.lost_gpu_minutes for r in results) / 60,
        sum(r.handed_over_gpu_minutes for r in results) / 60,
    )


def compare(blocks: int = 40, seed: int = 1, deploy_delays_minutes=(60, 6 * 60, 24 * 60), **kw) -> list[tuple]:
    """Rows (mode, deploy delay or None, Summary): `after` once, `before` per deploy delay."""
    base = scenarios(blocks, seed, **kw)
    rows = [(AFTER, None, summarize([run(s, AFTER) for s in base], base))]
    for delay in deploy_delays_minutes:
        scens = [replace(s, deploy_delay_minutes=delay) for s in base]
        rows.append((BEFORE, delay, summarize([run(s, BEFORE) for s in scens], scens)))
    return rows
