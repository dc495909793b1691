"""Which jobs of a trace are production: the one classifier (stdlib only).

Floor sizing and the fluid bound (sim/org_demand.py `hourly_profile`, read by sim/fluid.py and advise/org_advisor.py),
the environment simulator (sim/environment.py) and the advisors built on both call `production_flags`, so a "p90"
floor is sized on exactly the jobs the simulator then runs as production. Before issue 36 the profiles hashed
`seed:job_id` and the simulator `seed/pool/job_id/index`: two different 30 % of the jobs.

A job is production with probability `share` by a seeded hash of (seed, pool, job id, position in the trace): the
same job is production for every setup, floor size, policy and term of one seed; the pool and the position keep
two pools' (or one trace's repeated) job ids independent.
"""

from __future__ import annotations

import hashlib
from typing import Protocol, Sequence


class _Job(Protocol):
    @property
    def job_id(self) -> str: ...


class _JobsTrace(Protocol):
    @property
    def jobs(self) -> Sequence[_Job]: ...


def is_production(seed: int, pool: str, job_id: str, position: int, share: float) -> bool:
    """One job's class: production with probability `share` (0..1), the same answer in every run of one seed."""
    digest = hashlib.blake2b(f"{seed}/{pool}/{job_id}/{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < share * 2**64


def production_flags(trace: _JobsTrace, share: float, seed: int, pool: str) -> list[bool] | None:
    """Which jobs of the pool's trace are production (`share` 0..1 of them, `is_production` per job); None when no
    job is (share 0), all True at share 1."""
    if not 0 <= share <= 1:
        raise ValueError(f"production share must be between 0 and 1, got {share}")
    if share <= 0:
        return None
    if share >= 1:
        return [True] * len(trace.jobs)
    return [is_production(seed, pool, j.job_id, k, share) for k, j in enumerate(trace.jobs)]


def series_is_production(share: float) -> bool:
    """A demand series' class in the environment simulator (a `minute,gpus_demanded` file: GPUs per minute, no
    jobs): there is no job to class, so the simulator runs the series whole, production at share 1 and
    interruptible below it. sim/environment.py and the organization's shared layouts (advise/org_advisor.py) call
    it. The fluid profiles (sim/org_demand.py) split each minute by the share instead, so at a share strictly
    between 0 and 1 the bound and the simulated rows run a series as different work (issue 36, docs/floor.md)."""
    if not 0 <= share <= 1:
        raise ValueError(f"production share must be between 0 and 1, got {share}")
    return share >= 1
