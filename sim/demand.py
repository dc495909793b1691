"""The demand of an environment: every pool's demand on one clock, split into production and interruptible work.

Two sources:
- `read_demand_dir(DIR, pools)`: one file per pool, named `<pool>.csv` (a job trace or a `minute,gpus_demanded`
  series, read with sim/traces.py). A pool without a file, a CSV that names no pool and every bad line are reported
  together, each with its file (and line), before anything is simulated. Other files (a README, a LICENSE) are
  left alone.
- `itp_environment(TRACES, rotation)`: the example environment of docs/benchmarks.md ("The organization's loan"):
  the ten public ITP clusters as ten pools on their common clock, days 1-57, each cluster read by path (never
  copied). Which pools are production, experiment or learning is `ROTATIONS[rotation]` (below, with why).

Production work: a job is production with probability `production_share` by the seeded hash below, the
one the environment simulator uses too (the same job is production for every setup, every term, every floor size
and both models of one seed); a series, which has no jobs, splits each minute's GPUs in that share, rounded to
whole GPUs (`split_gpus`), in both models. Production work is never interruptible: it runs on its pool's
floor or on on-demand, never on spot or on another pool's lent floor.

The hourly profile (`PoolDemand`): the mean GPUs each kind of work demands in each hour, as if every job ran from
its submission (an instant, infinite cluster: the fluid model's demand, sim/fluid.py). Stdlib only.

Which jobs of a trace are production, the one classifier (`production_flags`, `is_production`,
`split_gpus` for a series, at the end of this module; sim/job_class.py before issue 34's split): floor sizing and the
fluid bound (`hourly_profile`, read by sim/fluid.py and advise/org_advisor.py), the environment simulator
(sim/environment.py) and the advisors built on both call `production_flags`, so a "p90" floor is sized on exactly
the jobs the simulator then runs as production. Before issue 36 the profiles hashed `seed:job_id` and the simulator
`seed/pool/job_id/index`: two different 30 % of the jobs.

A job is production with probability `share` by a seeded hash of (seed, pool, job id, position in the trace): the
same job is production for every setup, floor size, policy and term of one seed; the pool and the position keep
two pools' (or one trace's repeated) job ids independent.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from policy.terms import Tier
from sim.traces import JobsTrace, SeriesTrace, Trace, TraceError, read_trace

SECONDS_PER_HOUR = 3600
HOURS_PER_DAY = 24
PRODUCTION, EXPERIMENT, LEARNING = Tier.production, Tier.experiment, Tier.learning
TIERS = (PRODUCTION, EXPERIMENT, LEARNING)
PRODUCTION_SHARE = 0.30  # the example: 30 % of each pool's jobs are production

ITP_CLUSTERS = tuple(f"cluster{i:02d}" for i in range(1, 11))
ITP_DAYS = (1, 57)  # the traces' steady state (SOURCE.md: ramp-up on day 0, ramp-down over the last 2-3 days)

# Tiers of the ITP example, rotated. Why these (docs/benchmarks.md, "The organization's loan", from SOURCE.md's
# mean GPUs busy): a production team is one whose work is big and steady enough that a floor is a sound purchase
# for it, so each rotation gives the production tier one of the three largest clusters (04 ~490 GPUs, 07 ~255,
# 03 ~115) and two mid-size ones (02 ~86, 06 ~86, 08 ~47); learning takes three of the smallest (01 ~16, 05 ~10,
# 09 ~27, 10 ~3), whose work is small and least urgent; experiment the rest. Rotating moves every large and
# mid-size cluster through the production tier once, so no result rests on one lucky choice of teams.
ROTATIONS: tuple[dict[str, tuple[str, ...]], ...] = (
    {
        PRODUCTION: ("cluster04", "cluster02", "cluster08"),
        EXPERIMENT: ("cluster07", "cluster03", "cluster06", "cluster01"),
        LEARNING: ("cluster05", "cluster09", "cluster10"),
    },
    {
        PRODUCTION: ("cluster07", "cluster06", "cluster02"),
        EXPERIMENT: ("cluster04", "cluster03", "cluster08", "cluster09"),
        LEARNING: ("cluster01", "cluster05", "cluster10"),
    },
    {
        PRODUCTION: ("cluster03", "cluster08", "cluster06"),
        EXPERIMENT: ("cluster04", "cluster07", "cluster02", "cluster05"),
        LEARNING: ("cluster01", "cluster09", "cluster10"),
    },
)


class OrgDemandError(ValueError):
    """The environment's demand cannot be read; `problems` lists (where, message) pairs, each naming its file."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        lines = "\n".join(f" - {where}: {msg}" for where, msg in problems)
        super().__init__(f"{len(problems)} problem(s) in the environment's demand:\n{lines}")


@dataclass(frozen=True)
class PoolDemand:
    """One pool's demand per hour, in mean GPUs over the hour."""

    name: str
    tier: str
    production_gpus: tuple[float, ...]  # never interruptible
    interruptible_gpus: tuple[float, ...]

    @property
    def hours(self) -> int:
        return len(self.production_gpus)

    def head(self, hours: int) -> "PoolDemand":
        """The first `hours` hours only: what a sizing step may look at."""
        return PoolDemand(self.name, self.tier, self.production_gpus[:hours], self.interruptible_gpus[:hours])


def read_demand_dir(directory: str | Path, pools: list[str]) -> dict[str, Trace]:
    """pool -> its trace, from `<directory>/<pool>.csv`; raises OrgDemandError naming every problem."""
    d = Path(directory)
    if not d.is_dir():
        raise OrgDemandError([(str(d), "no such directory (--demand takes a directory with one <pool>.csv per pool)")])
    problems: list[tuple[str, str]] = []
    csvs = {p.stem: p for p in sorted(d.iterdir()) if p.is_file() and p.suffix.lower() == ".csv"}
    for name in pools:
        if name not in csvs:
            problems.append((str(d / f"{name}.csv"), f"missing: pool '{name}' needs a demand file"))
    for stem, path in csvs.items():
        if stem not in pools:
            problems.append(
                (
                    str(path),
                    f"no pool named '{stem}' in this stack (pools: {', '.join(pools)}); rename or remove the file",
                )
            )
    out: dict[str, Trace] = {}
    for name in pools:
        if name not in csvs:
            continue
        try:
            out[name] = read_trace(csvs[name])
        except TraceError as err:
            problems.extend(err.problems)
    if problems:
        raise OrgDemandError(problems)
    return out


def hourly_profile(
    name: str, tier: str, trace: Trace, hours: int, production_share: float = PRODUCTION_SHARE, seed: int = 1
) -> PoolDemand:
    """The pool's mean GPUs per hour over `hours` hours from the trace's time 0, production and interruptible."""
    if not 0 <= production_share <= 1:
        raise ValueError(f"production share must be between 0 and 1, got {production_share}")
    prod = [0.0] * hours
    other = [0.0] * hours
    if isinstance(trace, SeriesTrace):
        for minute, gpus in enumerate(trace.gpus_demanded[: hours * 60]):
            h = minute // 60
            prod_gpus, other_gpus = split_gpus(gpus, production_share)  # as the simulator splits it
            prod[h] += prod_gpus / 60
            other[h] += other_gpus / 60
    else:
        end_s = hours * SECONDS_PER_HOUR
        production = production_flags(trace, production_share, seed, name) or [False] * len(trace.jobs)
        for j, is_prod in zip(trace.jobs, production):
            start, stop = j.submit_s, min(j.submit_s + j.duration_s, end_s)
            if start >= end_s or stop <= start:
                continue
            into = prod if is_prod else other
            h = int(start // SECONDS_PER_HOUR)
            while h * SECONDS_PER_HOUR < stop:
                lo, hi = max(start, h * SECONDS_PER_HOUR), min(stop, (h + 1) * SECONDS_PER_HOUR)
                into[h] += j.gpus * (hi - lo) / SECONDS_PER_HOUR
                h += 1
    return PoolDemand(name, tier, tuple(prod), tuple(other))


def horizon_hours(traces: dict[str, Trace]) -> int:
    """Whole hours covering every pool's demand (jobs: up to the last submission's hour)."""
    minutes = max((t.span_minutes for t in traces.values()), default=0)
    return max(1, math.ceil(minutes / 60))


def profiles(
    traces: dict[str, Trace],
    tiers: dict[str, str],
    hours: int,
    production_share: dict[str, float] | float,
    seed: int = 1,
) -> dict[str, PoolDemand]:
    share = production_share if isinstance(production_share, dict) else {n: production_share for n in traces}
    return {n: hourly_profile(n, tiers[n], t, hours, share[n], seed) for n, t in traces.items()}


def rotation_tiers(rotation: int) -> dict[str, str]:
    """cluster -> tier for one rotation of the ITP example."""
    if not 0 <= rotation < len(ROTATIONS):
        raise ValueError(f"rotation must be 0..{len(ROTATIONS) - 1}, got {rotation}")
    out = {c: t for t, cs in ROTATIONS[rotation].items() for c in cs}
    assert sorted(out) == sorted(ITP_CLUSTERS), "a rotation names every cluster once"
    return out


def itp_traces(traces_dir: str | Path, days: tuple[int, int] = ITP_DAYS) -> dict[str, JobsTrace]:
    """The ten ITP clusters, read by path, windowed to `days` (re-based so the first day starts at 0)."""
    d = Path(traces_dir)
    missing = [c for c in ITP_CLUSTERS if not (d / f"{c}.csv").is_file()]
    if missing:
        raise OrgDemandError([(str(d / f"{c}.csv"), "missing ITP cluster trace") for c in missing])
    return {c: read_trace(d / f"{c}.csv").window(*days) for c in ITP_CLUSTERS}


def itp_environment(
    traces: dict[str, JobsTrace], rotation: int, seed: int, days: tuple[int, int] = ITP_DAYS
) -> dict[str, PoolDemand]:
    """The example environment's hourly demand for one rotation and seed."""
    hours = (days[1] - days[0] + 1) * HOURS_PER_DAY
    return profiles(traces, rotation_tiers(rotation), hours, PRODUCTION_SHARE, seed)


# --- the one production classification ---------------------------------------------------------------------


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


def split_gpus(gpus: int, share: float) -> tuple[int, int]:
    """One minute of a demand series (a `minute,gpus_demanded` file: GPUs per minute, no jobs to class) split into
    (production, interruptible) whole GPUs: production is `gpus * share` rounded to the nearest GPU, halves up,
    the rest interruptible. Whole GPUs because the simulator runs GPUs as 1-GPU pods (a pod is production or not,
    never 0.3 of one); to the nearest so that each minute is within half a GPU of the share, neither class
    favoured (rounding up would make a 1-GPU series all production at any share); and a function of the minute's
    GPUs alone, so a minute like the one before splits like it (the simulator's quiet minutes stay quiet). The one
    split of a series: the fluid profiles (`hourly_profile`), the environment simulator (sim/environment.py
    EnvSeriesWorkload) and the organization's shared layouts (advise/org_advisor.py) call it (issue 36)."""
    if not 0 <= share <= 1:
        raise ValueError(f"production share must be between 0 and 1, got {share}")
    # round(.., 9) first: 5 * 0.3 is 1.4999999999999998 in binary floating point, a half that must round up
    production = min(gpus, math.floor(round(gpus * share, 9) + 0.5))
    return production, gpus - production


def split_series(gpus_demanded: Sequence[int], share: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A whole series split minute by minute (`split_gpus`): (production GPUs, interruptible GPUs) per minute."""
    pairs = [split_gpus(g, share) for g in gpus_demanded]
    return tuple(p for p, _ in pairs), tuple(r for _, r in pairs)
