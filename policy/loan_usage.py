"""The loan's usage per pool, each tick, from the status Kueue publishes on the environment's ClusterQueues.

Per pool and flavor: GPUs in use on its own floor, lent to other pools, borrowed from other pools' floors, and on
its own elastic flavors (spot, on-demand), published as the `LoanGpus` metric (policy/emf.py, dimensions
Environment, Pool, Use, Flavor). `gpuloan cost-report` turns the month's samples into the loan's dollars.

Where the figures come from (Kueue v0.19.2, apis/kueue/v1beta2/clusterqueue_types.go, ClusterQueueStatus):
`status.flavorsUsage[]` lists, for every flavor of every resource group of the queue, each covered resource's
`total` ("the total quantity of used quota, including the amount borrowed from the cohort") and `borrowed` ("the
used quota that is over the nominalQuota"); pkg/cache/scheduler/cache.go `getUsage` writes an entry for each flavor
and resource, zero included. gpuloan's plan gives each pool's floor flavor nominal quota in its own queue only
(config/scheduling.py), so:

- own floor: the owner queue's `total` of its floor flavor;
- borrowed: a queue's `total` of another pool's floor flavor (its nominal quota there is 0: all of it borrowed);
- lent: the sum of the other queues' `total` of the pool's floor flavor;
- elastic: the owner queue's `total` of its spot / on-demand flavor (the spot flavor's work runs on the on-demand
  fallback too while spot is short: Kueue cannot tell them apart, the node groups' metrics can).

Safety: a queue that cannot be read, or whose status lacks a flavor or its GPU `total`, publishes nothing for the
figures that depend on it (the owner's `lent` too, when a borrower's queue is the one missing): nothing is charged
from a guess. Such a problem is reported once (kept in the tick state until it clears), not every minute. The reads
are skipped, and the skip logged, when less than READ_MIN_SECONDS of the tick's deadline is left.

RBAC: `get` on the environment's ClusterQueues by name (config/tenancy.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Protocol

from policy import emf
from policy import metric_names as M
from policy.deadline import Deadline
from policy.errors import DeadlineExceeded, PolicyError
from policy.model import Settings

GPU_RESOURCE = "nvidia.com/gpu"
USE_OWN_FLOOR, USE_LENT, USE_BORROWED = "own_floor", "lent", "borrowed"
USE_ELASTIC_SPOT, USE_ELASTIC_ON_DEMAND = "elastic_spot", "elastic_on_demand"
KIND_FLOOR, KIND_SPOT, KIND_ON_DEMAND = "floor", "spot", "on-demand"  # config/scheduling.py's flavor kinds
ELASTIC_USE = {KIND_SPOT: USE_ELASTIC_SPOT, KIND_ON_DEMAND: USE_ELASTIC_ON_DEMAND}
# One ClusterQueue GET is one small JSON document; with fewer seconds left the tick's own work goes first.
READ_MIN_SECONDS = 5.0
STATE_KEY = "loan_reported"  # tick state: problem -> when it was first reported (ISO 8601)


class ClusterQueuePort(Protocol):
    def cluster_queue(self, api_version: str, queue: str) -> dict: ...


@dataclass(frozen=True)
class Usage:
    pool: str
    use: str  # USE_*
    flavor: str  # the Kueue flavor: for own_floor / lent the pool's floor, for borrowed the lender's
    gpus: float


def _queue_usage(cq: dict, flavors: list[str]) -> tuple[dict[str, float], list[str]]:
    """GPUs in use per flavor from a ClusterQueue's status.flavorsUsage, and what is missing (one line each)."""
    name = (cq.get("metadata") or {}).get("name", "?")
    status = cq.get("status")
    rows = status.get("flavorsUsage") if isinstance(status, dict) else None
    if not isinstance(rows, list):
        return {}, [f"ClusterQueue {name}: status.flavorsUsage absent"]
    found: dict[str, float] = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        for r in row.get("resources") or []:
            if isinstance(r, dict) and r.get("name") == GPU_RESOURCE and "total" in r:
                try:
                    found[str(row.get("name"))] = _quantity(r["total"])
                except ValueError:
                    pass  # reported below as absent: never a guessed figure
    missing = [
        f"ClusterQueue {name}: status.flavorsUsage has no {GPU_RESOURCE} total for flavor {f}"
        for f in flavors
        if f not in found
    ]
    return {f: found[f] for f in flavors if f in found}, missing


def _quantity(value) -> float:
    """A Kubernetes quantity of GPUs (whole numbers; "1k"-style suffixes are not GPU counts)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        number = float(str(value).strip())
    if number < 0 or number != number:
        raise ValueError(value)
    return number


def usage(settings: Settings, queues: ClusterQueuePort) -> tuple[list[Usage], list[str], int]:
    """Every pool's loan figures this minute, the problems that kept some of them out, and how many queues were
    not read because the tick's deadline passed."""
    pools = [p for p in settings.pools if p.loan_queue]
    owner = {f: p.name for p in pools for f, own, kind in p.loan_flavors if own == p.name and kind == KIND_FLOOR}
    read: dict[str, dict[str, float]] = {}
    problems: list[str] = []
    unreadable: set[str] = set()  # pools whose queue status is not (wholly) known
    not_read = 0
    for k, p in enumerate(pools):
        try:
            cq = queues.cluster_queue(p.loan_queue_api, p.loan_queue or "")
        except DeadlineExceeded:
            # out of time mid-way: the queues not read publish nothing this tick; not a problem of theirs to report
            unreadable.update(q.name for q in pools[k:])
            not_read = len(pools) - k
            break
        except PolicyError as err:
            problems.append(f"ClusterQueue {p.loan_queue}: {type(err).__name__}: {err}")
            unreadable.add(p.name)
            continue
        got, missing = _queue_usage(cq, [f for f, _, _ in p.loan_flavors])
        read[p.name] = got
        problems += missing
        if missing:
            unreadable.add(p.name)
    out: list[Usage] = []
    lent: dict[str, float] = {}
    lent_unknown: set[str] = set()  # floor flavors a queue that may borrow them could not be read for
    for p in pools:
        got = read.get(p.name, {})
        for flavor, own, kind in p.loan_flavors:
            if own != p.name and p.name in unreadable and flavor not in got:
                lent_unknown.add(flavor)
            if flavor not in got:
                continue
            gpus = got[flavor]
            if own == p.name and kind == KIND_FLOOR:
                out.append(Usage(p.name, USE_OWN_FLOOR, flavor, gpus))
            elif own == p.name and kind in ELASTIC_USE:
                out.append(Usage(p.name, ELASTIC_USE[kind], flavor, gpus))
            elif flavor in owner:
                out.append(Usage(p.name, USE_BORROWED, flavor, gpus))
                lent[flavor] = lent.get(flavor, 0.0) + gpus
    for flavor, pool in sorted(owner.items()):
        if flavor not in lent_unknown:
            out.append(Usage(pool, USE_LENT, flavor, lent.get(flavor, 0.0)))
    return out, problems, not_read


def tick_lines(
    settings: Settings,
    queues: ClusterQueuePort | None,
    state: dict,
    now: datetime,
    deadline: Deadline | None,
    errors: list[str],
    log: Callable[[str], None],
) -> list[str]:
    """The tick's LoanGpus EMF lines. Problems new since the last tick go to `errors` (once: the tick state keeps
    them until they clear); a skip for lack of time is logged, every time, and publishes nothing."""
    if queues is None or not any(p.loan_queue for p in settings.pools):
        return []
    if deadline is not None and deadline.remaining_s() < READ_MIN_SECONDS:
        log(
            json.dumps(
                {
                    "level": "WARNING",
                    "message": "loan usage not read: the tick's deadline is near",
                    "environment": settings.environment,
                    "seconds_left": round(deadline.remaining_s(), 1),
                }
            )
        )
        return []
    figures, problems, not_read = usage(settings, queues)
    if not_read:
        log(
            json.dumps(
                {
                    "level": "WARNING",
                    "message": "loan usage partly read: the tick's deadline passed",
                    "environment": settings.environment,
                    "queues_not_read": not_read,
                }
            )
        )
    reported = state.get(STATE_KEY)
    reported = {k: v for k, v in reported.items() if isinstance(v, str)} if isinstance(reported, dict) else {}
    for problem in problems:
        if problem not in reported:
            errors.append(f"LoanUsageUnavailable: {problem}; reported once, nothing charged from it until it clears")
            reported[problem] = now.isoformat()
    state[STATE_KEY] = {k: v for k, v in reported.items() if k in problems}
    return [
        emf.line(
            {M.DIM_ENVIRONMENT: settings.environment, M.DIM_POOL: u.pool, M.DIM_USE: u.use, M.DIM_FLAVOR: u.flavor},
            {M.LOAN_GPUS: (u.gpus, "Count")},
            now,
        )
        for u in figures
    ]
