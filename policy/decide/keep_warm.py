"""Release on cost (rule 4, KEEP_WARM): how many idle nodes pay for themselves at the pool's recent arrival
rate, and which nodes never got a pod (not kept warm). docs/policy.md, "Release on cost"."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from policy.model import JUST_AFTER, Node, PoolSettings, Timers


def arrival_rate_nodes_per_minute(ps: PoolSettings, arrivals, now: datetime, timers: Timers | None = None) -> float:
    """The pool's recent demand in nodes per minute: GPUs of the pods created within arrival_window_minutes
    (and not finished), in nodes' worth, over the window. No look-ahead: only pods that exist at `now` count.
    `timers`: each arrival counts from its creation and leaves the window arrival_window_minutes later."""
    if not arrivals:
        return 0.0
    window = timedelta(minutes=ps.arrival_window_minutes)
    if timers is not None:
        for t, g in arrivals:
            if g > 0:
                timers.at(t)
                timers.at(t + window)
    gpus = sum(g for t, g in arrivals if g > 0 and timedelta(0) <= now - t < window)
    return gpus / max(ps.gpus_per_node, 1) / ps.arrival_window_minutes


def keep_warm_nodes(ps: PoolSettings, arrivals, now: datetime, timers: Timers | None = None) -> int:
    """How many idle elastic nodes are worth keeping (docs/policy.md, "Release on cost").

    Keeping the k-th idle node costs its price until the k-th next node's worth of demand arrives: k / rate
    minutes on average (arrivals as a Poisson process at the recent rate). Releasing it costs, when that demand
    comes, a relaunch: launch_minutes paid for a node that boots, plus launch_minutes that the job waits, a
    minute of waiting valued at the price of the capacity it waits for. So the k-th node is kept while
    k / rate < 2 x launch_minutes, i.e. k < 2 x launch_minutes x rate."""
    return nodes_that_pay(ps, arrival_rate_nodes_per_minute(ps, arrivals, now, timers))


def nodes_that_pay(ps: PoolSettings, rate: float | None) -> int:
    """The k-th spare node pays for itself while k / rate < 2 x launch_minutes (keep_warm_nodes)."""
    if rate is None or rate <= 0:
        return 0
    return max(0, math.ceil(2.0 * ps.launch_minutes * rate - 1e-9) - 1)


def never_got_a_pod(ps: PoolSettings, node: Node, now: datetime, timers: Timers | None = None) -> bool:
    """The node's empty window (no GPU requested over it) reaches back into its boot: it has had no GPU pod in
    its whole ready life. launch_minutes stands for the boot (the Lambda keeps no per-node history)."""
    until = node.launched_at + timedelta(minutes=ps.empty_timeout_minutes + ps.launch_minutes)
    if timers is not None:
        timers.at(until + JUST_AFTER)  # true up to and including `until`
    return now <= until


def rate_why(ps: PoolSettings, arrivals, now: datetime) -> str:
    rate = arrival_rate_nodes_per_minute(ps, arrivals, now)
    return (
        f"{rate * 60:.1f} node(s) of demand arrived per hour over the last {ps.arrival_window_minutes} min; "
        f"a relaunch costs {2 * ps.launch_minutes} node-minutes ({ps.launch_minutes} booting, paid, + "
        f"{ps.launch_minutes} a job waits)"
    )
