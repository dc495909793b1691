"""How one environment simulation grows with the organization (`make bench-scale`, simulator part; issue 41 item 1).

Organizations of 16, 32 and 64 pools over 31 days, and of 16 pools over 90 days (with --full: 32, 64 and 128 pools
over 90 days too, and 128 pools over 31 days; 128 pools lend only 60 floors, MAX_LENDERS says why), built from the ITP traces (../shared/data/traces/itp, see its SOURCE.md; never copied into
the repository): pool i replays bench-environment's month i mod 16 (a cluster from a first day,
scripts/bench_environment.py MONTHS) within that cluster's steady days 1-56, the k-th copy (k = i // 16) shifted
17k days further and the 56 days tiled to the horizon: doubling the pools doubles the demand, and no two pools see
the same demand at the same minute.
Each pool is sized from its own trace and the pools are configured as `make bench-environment` does
(scripts/bench_environment.py `pools_config`: p4d.24xlarge, tiers rotating production / experiment / learning,
every floor lendable in the environment's one Kueue cohort, a budget that never binds).

Each simulation runs alone in a fresh process (gpuloan, then karpenter), so its peak memory is its own. Prints
CPU seconds, wall seconds and peak memory (max RSS) per simulation, the ratio of each step to the previous one
(pools x2 at the same days; days 31 -> 90, x2.9, at the same pools), and last the largest of each:

    pools x2 ratio: R
    days x3 ratio: R

(CPU seconds, the larger of the two policies). The tick part (`tick 200 pools: S s, C calls`) is
scripts/bench_scale_tick.py, which `make bench-scale` runs after this one. Default: about 5 minutes of CPU, one
simulation at a time (so about 5 minutes on the 2-core development machine when nobody else uses it);
`--full` (`make bench-scale FULL=1`) adds 32, 64 and 128 pools over 90 days (well past 10 minutes) and prints how
128 pools over 90 days compare with the 16-pool month (`--runs 16:31,128:90` runs just those two).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PERIOD_DAYS = (1, 56)  # the traces' steady state (SOURCE.md: demand ramps up on day 0 and down after day 57)
DEFAULT_RUNS = [(16, 31), (32, 31), (64, 31), (16, 90)]
FULL_RUNS = [(16, 31), (32, 31), (64, 31), (128, 31), (16, 90), (32, 90), (64, 90), (128, 90)]
# A Kueue ClusterQueue lists at most 64 flavors (config/scheduling.py MAX_FLAVORS_PER_GROUP): its own floor, its
# elastic flavors and every floor it may borrow. 128 pools have about 76 floors, so, as the validation error tells a
# user, only the first 60 pools with a floor lend it (the others' teams: lending_limit_pct 0); up to 64 pools every
# floor lends (they have fewer than 60).
MAX_LENDERS = 60
LARGEST, MONTH = (128, 90), (16, 31)  # the goal: LARGEST within 25x MONTH's CPU, under 4 GB
POLICIES = ("gpuloan", "karpenter")


def month(i: int) -> tuple[int, int]:
    """Pool i's (cluster, shift in days from the period's first day): bench-environment's month i mod 16, its k-th
    copy 17k days later (17 is prime to 56: up to 56 copies of a month all differ)."""
    from scripts.bench_environment import MONTHS

    k, m = divmod(i, len(MONTHS))
    cluster, first, _ = MONTHS[m]
    return cluster, (first - PERIOD_DAYS[0] + 17 * k) % (PERIOD_DAYS[1] - PERIOD_DAYS[0] + 1)


def tiled(trace, shift: int, days: int):
    """The trace's period shifted `shift` days earlier (the days before wrap to the end) and repeated to `days`."""
    from sim.traces import Job, JobsTrace

    period_s = (PERIOD_DAYS[1] - PERIOD_DAYS[0] + 1) * 86400
    base = [((j.submit_s - shift * 86400) % period_s, j) for j in trace.jobs]
    jobs = []
    for r in range(math.ceil(days * 86400 / period_s)):
        for submit, j in base:
            t = submit + r * period_s
            if t < days * 86400:
                jobs.append(Job(f"{j.job_id}-{r}", t, j.duration_s, j.gpus))
    jobs.sort(key=lambda j: j.submit_s)
    return JobsTrace(f"{trace.name}[shift {shift} d, {days} d]", trace.fmt, tuple(jobs))


def organization(prices, traces_dir: Path, pools: int, days: int):
    """(config, demands, horizon minutes) of an organization of `pools` pools over `days` days."""
    from scripts.bench_environment import pools_config
    from sim import traces

    read: dict = {}
    named = {}
    for i in range(pools):
        cluster, shift = month(i)
        if cluster not in read:
            read[cluster] = traces.read_trace(traces_dir / f"cluster{cluster:02d}.csv").window(*PERIOD_DAYS)
        named[f"c{cluster:02d}-s{shift}"] = tiled(read[cluster], shift, days)
    horizon = days * 1440
    # floors on 3-year RIs: on-demand, the floors alone of 64 pools ($11M a month) would pass the largest budget the
    # config takes ($10M); the figures here are times, and the payment changes the bill, not the work
    return (
        pools_config(prices, named, horizon, name="bench-scale", floor_payment="reserved_3yr", max_lenders=MAX_LENDERS),
        named,
        horizon,
    )


def one(traces_dir: Path, pools: int, days: int, policy: str, seed: int) -> dict:
    """One simulation, in this process (a child of main): its CPU and wall seconds, and this process's peak RSS."""
    import resource

    from pricing.sources import catalog
    from sim.engine import SimSettings
    from sim.environment import simulate_environment
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.karpenter import Karpenter

    prices = catalog.Prices.resolve()  # this child's prices, read once
    cfg, demands, horizon = organization(prices, traces_dir, pools, days)
    factory = (lambda spec: GpuLoan()) if policy == "gpuloan" else (lambda spec: Karpenter())
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate_environment(prices, cfg, demands, factory, SimSettings(seed=seed), horizon)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    e = res.environment
    return {
        "pools": pools,
        "days": days,
        "policy": policy,
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "jobs": sum(len(t.jobs) for t in demands.values()),
        "cost_usd": round(e["total_cost_usd"]),
        "served_gpu_h": round(e["gpu_hours_served"]),
        "demand_gpu_h": round(e["demand_gpu_hours"]),
    }


def _child(traces_dir: Path, pools: int, days: int, policy: str, seed: int) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--traces",
            str(traces_dir),
            "--seed",
            str(seed),
            "--one",
            str(pools),
            str(days),
            policy,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"bench-scale: {pools} pools x {days} days, {policy}: exit {done.returncode}\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def shorter_days(results: dict, pools: int, days: int, policy: str) -> int | None:
    """The longest run shorter than `days` of the same pools and policy (the days step's start), if any."""
    return max((d for (p, d, pol) in results if p == pools and pol == policy and d < days), default=None)


def ratios(results: dict[tuple[int, int, str], dict]) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(step, CPU ratio) for each pools x2 step at the same days and each days step at the same pools."""
    pools_steps, days_steps = [], []
    for (p, d, pol), r in sorted(results.items()):
        prev = results.get((p // 2, d, pol)) if p % 2 == 0 else None
        if prev:
            pools_steps.append((f"{pol} {p // 2}->{p} pools, {d} d", _ratio(r, prev)))
        shorter = shorter_days(results, p, d, pol)
        if shorter:
            days_steps.append((f"{pol} {p} pools, {shorter}->{d} d", _ratio(r, results[(p, shorter, pol)])))
    return pools_steps, days_steps


def _ratio(r: dict, prev: dict) -> float:
    return r["cpu_s"] / max(prev["cpu_s"], 0.01)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "traces" / "itp")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--full", action="store_true", help="also 32, 64 and 128 pools over 90 days (long)")
    parser.add_argument("--runs", metavar="P:D,...", help="the organizations to run instead, e.g. 16:31,32:31")
    parser.add_argument("--one", nargs=3, metavar=("POOLS", "DAYS", "POLICY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.traces, int(args.one[0]), int(args.one[1]), args.one[2], args.seed)))
        return 0
    runs = FULL_RUNS if args.full else DEFAULT_RUNS
    if args.runs:
        runs = [(int(p), int(d)) for p, d in (r.split(":") for r in args.runs.split(","))]
    t0 = time.perf_counter()
    print("bench-scale: one environment simulation per line, each in its own process")
    print(f"{'pools':>5} {'days':>4} {'policy':9} {'jobs':>8} {'CPU s':>7} {'wall s':>7} {'peak MB':>7} {'x prev':>6}")
    results: dict[tuple[int, int, str], dict] = {}
    for pools, days in runs:
        for policy in POLICIES:
            r = _child(args.traces, pools, days, policy, args.seed)
            results[(pools, days, policy)] = r
            # the step to this run: from half the pools over the same days, else from the same pools over fewer
            shorter = shorter_days(results, pools, days, policy)
            prev = results.get((pools // 2, days, policy)) or (results[(pools, shorter, policy)] if shorter else None)
            step = f"{_ratio(r, prev):6.2f}" if prev else "     -"
            print(
                f"{pools:5d} {days:4d} {policy:9} {r['jobs']:8,d} {r['cpu_s']:7.1f} {r['wall_s']:7.1f} "
                f"{r['peak_mb']:7,d} {step}",
                flush=True,
            )
    pools_steps, days_steps = ratios(results)
    print("\nsteps (CPU seconds of the larger organization / the smaller):")
    for name, x in pools_steps + days_steps:
        print(f"  {name}: {x:.2f}")
    worst_mem = max(results.values(), key=lambda r: r["peak_mb"])
    print(
        f"largest peak memory: {worst_mem['peak_mb']:,d} MB ({worst_mem['pools']} pools x {worst_mem['days']} "
        f"days, {worst_mem['policy']}); {time.perf_counter() - t0:.0f} s wall in all"
    )
    for pol in POLICIES:
        big, month = results.get((*LARGEST, pol)), results.get((*MONTH, pol))
        if big and month:
            print(
                f"{pol}: {LARGEST[0]} pools x {LARGEST[1]} days: {_ratio(big, month):.1f}x the {MONTH[0]}-pool "
                f"month's CPU (goal 25), peak {big['peak_mb']:,d} MB (goal 4,096)"
            )
    print(f"pools x2 ratio: {max((x for _, x in pools_steps), default=float('nan')):.2f}")
    print(f"days x3 ratio: {max((x for _, x in days_steps), default=float('nan')):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
