"""When an elastic node is idle: every signal says so (no GPU requested over the empty window, utilization below
the per-GPU threshold over the window it is judged on); a missing signal is busy. The reclaim (rule 4) and the
budget drain (rule 2) read a node through these, and the simulator reads `node_reading` to skip the minutes in
which nothing the rules read changes."""

from __future__ import annotations

from datetime import datetime, timedelta

from policy.model import Node, PoolSettings, Timers
from policy.terms import Workload


def shows_work(ps: PoolSettings, node: Node) -> bool:
    """Any known signal of GPU work: a GPU pod on it now, a utilization figure at or above the idle threshold, or
    a GPU requested."""
    if node.gpu_pods:
        return True
    threshold = node_idle_threshold_pct(ps)
    for v in (node.max_utilization_pct, node.recent_max_utilization_pct, node.avg_utilization_pct):
        if v is not None and v >= threshold:
            return True
    return node.max_reserved_pct is not None and node.max_reserved_pct > 0


def idle_verdict(ps: PoolSettings, node: Node, now: datetime, timers: Timers | None = None) -> tuple[bool | None, str]:
    """(True, why) when every signal agrees the node is idle; (False, "") when one says it works or the node is
    too young to judge; (None, what is missing) when a signal is missing (missing counts as busy).

    Signals: GPU reserved capacity (a pod requested a GPU) over the empty window, and GPU utilization over the
    window the node is judged on. A node no pod requested a GPU of over the empty window is judged on that same
    window (nothing requested, nothing running: it goes after empty_timeout_minutes); without a utilization
    figure for it, on the idle window. Every utilization figure of that judgement must be below the per-GPU idle
    threshold; work that ended before the window (a job that finished) does not keep the node, work within it
    does. The tick reads the node's pods once more before terminating it (policy/tick.py).
    """
    if node.gpu_pods:
        # a GPU pod on it in this tick's pod list: busy, whatever the minutes-old metrics say (a pod that landed
        # after their newest datapoint); the tick would refuse the termination anyway, after cordoning it
        return False, ""
    threshold = node_idle_threshold_pct(ps)
    reserved = node.max_reserved_pct
    recent, longer, mean = node.recent_max_utilization_pct, node.max_utilization_pct, node.avg_utilization_pct
    # The window the node is judged on: the empty window when there is a figure for it, else the idle window.
    judged = ps.empty_timeout_minutes if recent is not None else ps.idle_timeout_minutes
    figures: list[float | None] = [recent] if recent is not None else [longer]
    if ps.scale_up_window_minutes <= judged:
        figures.append(mean)  # the scale-up window's mean lies within the judged window: work seen there counts
    if (reserved is not None and reserved > 0) or any(v is not None and v >= threshold for v in figures):
        return False, ""
    up = now - node.launched_at
    empty_w, idle_w = timedelta(minutes=ps.empty_timeout_minutes), timedelta(minutes=ps.idle_timeout_minutes)
    if timers is not None:  # no sign of work: the verdict moves as the node's age passes each window
        timers.at(node.launched_at + empty_w)
        timers.at(node.launched_at + idle_w)
    if up < min(empty_w, idle_w):
        return False, ""
    if reserved is None:
        return None, "no GPU reserved-capacity data"
    if up >= empty_w and recent is not None:
        return True, (
            f"no pod requested its GPUs and max GPU utilization {recent:.2f}% < {threshold:.2f}% for "
            f"{ps.empty_timeout_minutes} min"
        )
    if up >= idle_w and recent is None and longer is not None:
        return True, (
            f"max GPU utilization {longer:.2f}% < {threshold:.2f}% for {ps.idle_timeout_minutes} min and "
            "no pod requested its GPUs"
        )
    if up >= idle_w and recent is None:
        return None, "no GPU utilization data"
    return False, ""


ABOVE_IDLE = "above the idle threshold"


def node_reading(
    ps: PoolSettings,
    max_pct: float | None,
    avg_pct: float | None,
    reserved_pct: float | None,
    recent_max_pct: float | None,
) -> tuple:
    """What the rules read of a node's CloudWatch figures (Node.max_utilization_pct, avg_utilization_pct,
    max_reserved_pct, recent_max_utilization_pct): two nodes whose readings are equal get the same actions (the
    reported figures, PoolDecision.utilization_pct, may differ). A utilization figure is compared with the idle
    threshold, and a max's value counts only below it (the idle nodes' order, the reasons' details); a batch
    pool's mean only on which side of it it is, a service pool's mean whole (the pool's mean against the
    scale-up threshold); the reserved figure is unknown, zero or not. The simulator skips the minutes in which a window's figures move without changing this (sim/controllers/gpuloan.py)."""
    threshold = node_idle_threshold_pct(ps)

    def level(v: float | None) -> float | str | None:
        return v if v is None or v < threshold else ABOVE_IDLE

    # a batch pool reads a node's mean only against the idle threshold (`_shows_work`, `_idle_verdict`)
    mean = avg_pct if ps.workload == Workload.service or avg_pct is None else avg_pct >= threshold
    return level(max_pct), mean, None if reserved_pct is None else reserved_pct > 0, level(recent_max_pct)


def node_idle_threshold_pct(ps: PoolSettings) -> float:
    """The node-level utilization under which a node is idle.

    `idle_utilization_pct` is meant per GPU, but the per-node metric averages the node's GPUs: on an 8-GPU node
    one job keeping one GPU at 30 % reads 3.75 %. Dividing by the GPUs per node keeps such a node busy, so a
    node is reclaimed only when even a single GPU at the threshold would have shown up in its average.
    """
    return ps.idle_utilization_pct / max(ps.gpus_per_node, 1)
