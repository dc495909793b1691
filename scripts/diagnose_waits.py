"""Why a tier's jobs wait: the total pending time of its tail broken down by cause (issue 36, docs/benchmarks.md
"Why production waits miss").

One unit of `make bench-org` (a rotation and a seed of the ITP example, the p90 floors sized on days 1-30, the
report window days 31-57, checkpoints every 30 minutes, the default scenario), simulated for the setups named
(default gpuloan and karpenter-shared). For the jobs of each tier named (default production: every job of a
production team, its interruptible ones too, as `bench-org`'s pending columns count them) submitted in the
report window whose total pending time is at or above the tier's p95, the minutes pending are split by what the
job waited in:

- kueue: not admitted (suspended, no pods): no flavor of its ClusterQueue had quota for it;
- own floor / borrowed floor: admitted to a floor flavor by quota, its pods unschedulable there (no node of the
  floor with room and no lower-priority pods kube-scheduler could preempt to make it);
- elastic spot / elastic on-demand: admitted to an elastic flavor, its pods waiting for a node (the Lambda's tick,
  UpdateNodegroupConfig, the launch and boot; Karpenter's batch and CreateFleet; or nodes full);
- node: a pool the simulator schedules without Kueue (no lender, one class: a Karpenter pool of one class);

each for the job's first wait and for its re-waits after a reclaim (Kueue evicted it for the floor's owner or
another borrower), within (Kueue evicted it for a higher priority of its own queue), scheduler (kube-scheduler
preempted its pods) or interruption (its node went: spot reclaim, a node terminated).

    .venv/bin/python scripts/diagnose_waits.py --rotation 2 --seed 1 --tiers production,experiment

Also printed: the tier's p95 / p99 / max per job class; for the tail's jobs pinned to a floor, their sizes and
what held the floor when kube-scheduler found no victims for them; the tier's kube-scheduler preemptions and its
p95 / p99 were each a minute longer (victims slower to go than the 30 s the simulator charges).

The breakdown is read by observing the simulator's own transitions (admission, release, start, stop, the
victim search) of sim/environment.py EnvJobsWorkload: the simulation is the benchmark's, unchanged; each job's
segments must add up to its pending minutes (a CHECK line says when they do not). About 80 CPU-seconds for
gpuloan on the 57 days, 10 for karpenter-shared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SETUPS = ("gpuloan", "gpuloan-shared", "floors-not-lent", "karpenter", "karpenter-shared")
FIRST = "first"


class WaitRecorder:
    """Each job's transitions while the simulation runs: (minute, event, detail) per (workload, job)."""

    def __init__(self):
        self.events: dict[tuple[int, int], list] = defaultdict(list)
        self.workloads: dict[int, object] = {}
        # kube-scheduler on a floor, per (workload, job): how many times its pods preempted others there, and, the
        # first time it found no victims, (GPUs the job needs, GPUs of the floor, GPUs its pods of the same or
        # higher priority held)
        self.preempted_for: dict[tuple[int, int], int] = defaultdict(int)
        self.blocked: dict[tuple[int, int], tuple[int, int, int]] = {}

    def label(self, w, i) -> str:
        from sim.environment import ELASTIC_FLAVOR

        if w.plain:
            return "node"
        flavor = w.admitted_to[i]
        if flavor is None:
            return "kueue"
        if flavor == ELASTIC_FLAVOR:
            return f"elastic {w.elastic_flavor(w.is_production(i))[0].replace('_', '-')}"
        return "own floor" if flavor is w.sim else "borrowed floor"

    def install(self):
        """Wrap the transitions of EnvJobsWorkload and kube-scheduler's victim search (sim/cluster.py, which the
        environment calls through its module); returns the function that removes the wrappers."""
        from sim import cluster
        from sim.environment import EnvJobsWorkload

        rec = self
        names = ("_admit", "_release", "_start", "_stop")
        originals = {n: getattr(EnvJobsWorkload, n) for n in names}
        original_victims = cluster.scheduler_victims

        def note(w, i, event, detail=None, minute=None):
            rec.workloads[id(w)] = w
            rec.events[(id(w), i)].append((w.sim.now if minute is None else minute, event, detail))

        def _admit(w, i, flavor, now):
            originals["_admit"](w, i, flavor, now)
            note(w, i, "state", rec.label(w, i))

        def _release(w, i):
            was = w.admitted_to[i]
            originals["_release"](w, i)
            if was is not None:
                note(w, i, "state", "kueue")

        def _start(w, i, chosen, now):
            originals["_start"](w, i, chosen, now)
            note(w, i, "start", minute=now)  # a preemptor runs once its victims are gone, after the minute

        def _stop(w, i, now, finished):
            why = w._stopping_as or "interruption"
            originals["_stop"](w, i, now, finished)
            if not finished:
                note(w, i, "stop", (why, rec.label(w, i)))

        def _scheduler_victims(w, i, nodes):
            chosen = original_victims(w, i, nodes)
            key = (id(w), i)
            if chosen is not None:
                rec.preempted_for[key] += 1
            elif key not in rec.blocked:
                prio = w.job_priority(i)
                env = w.sim.env
                same = 0
                for n in nodes:
                    for k in n.jobs:
                        ow, j = (
                            (env.pools[k[0]].workload, k[1])
                            if isinstance(k, tuple)
                            else (env.floor_owner[id(n)].workload, k)
                        )
                        if ow.job_priority(j) >= prio:
                            same += next(u for m, u in ow.on_nodes[j] if m is n)
                rec.blocked[key] = (w.gpus[i], sum(n.gpus for n in nodes), same)
            return chosen

        wrappers = {
            "_admit": _admit,
            "_release": _release,
            "_start": _start,
            "_stop": _stop,
        }
        for n, f in wrappers.items():
            setattr(EnvJobsWorkload, n, f)
        cluster.scheduler_victims = _scheduler_victims

        def remove():
            for n, f in originals.items():
                setattr(EnvJobsWorkload, n, f)
            cluster.scheduler_victims = original_victims

        return remove

    def segments(self, w, i, horizon: int) -> list[tuple[str, str, float]]:
        """(phase, state, minutes) of job i's pending time: phase "first" or the reason of a re-wait."""
        out = []
        pending, since, ran_from = True, w.submit_s[i] / 60, 0
        phase, state = FIRST, ("node" if w.plain else "kueue")
        for minute, event, detail in self.events.get((id(w), i), ()):
            if event == "start":
                if pending:
                    out.append((phase, state, max(0.0, minute - since)))
                pending, ran_from = False, minute
            elif event == "stop":
                if out and not pending and minute < ran_from:  # stopped before it ran (a nominated preemptor)
                    out[-1] = (*out[-1][:2], out[-1][2] - (ran_from - minute))
                pending, since = True, minute
                phase, state = detail
            elif event == "state" and pending:
                out.append((phase, state, max(0.0, minute - since)))
                since, state = max(since, minute), detail  # a job submitted mid-minute waits from its second
        if pending:
            out.append((phase, state, max(0.0, horizon - since)))
        return [s for s in out if s[2] > 0]


def run_setup(setup: str, rotation: int, seed: int, traces, price_book, days, sizing_days: int):
    """Simulate one setup of one unit as bench-org does (default scenario); the result, the recorder and, per
    simulated pool, the tier of each of its jobs and whether it is production."""
    from advise import org_advisor as oa
    from scripts.bench_org import _sim_setups, _sim_unit
    from sim.environment import simulate_environment

    sizing_hours = sizing_days * 24
    demands, runner = _sim_unit(price_book, rotation, seed, traces, days, sizing_hours, 30)
    controller = {"floors-not-lent": oa.CONTROLLER_GPULOAN}.get(setup, setup)
    lend = setup != "floors-not-lent"
    floors = next(
        f
        for f, ld, c in _sim_setups(demands, runner.prices, sizing_hours)
        if c == controller and (ld == lend or c in oa.KARPENTER_CONTROLLERS)
    )
    hours = max(d.hours for d in demands.values())
    cfg, cut, sim_controller, reduce = runner._layout(floors, lend, controller, hours)
    rec = WaitRecorder()
    remove = rec.install()
    try:
        result = simulate_environment(
            price_book,
            cfg,
            cut,
            oa._factory(sim_controller),
            runner.settings,
            hours * 60,
            window_from_minute=sizing_hours * 60,
        )
    finally:
        remove()
    tiers = {p.name: str(p.tier) for p in cfg.pools}
    job_tiers = reduce.get("job_tiers") or {}
    return result, rec, tiers, job_tiers, floors


def tier_jobs(result, tiers, job_tiers, tier: str):
    """(workload, job) of every job of `tier` submitted in the report window, with its pending minutes."""
    horizon = result.environment["horizon_minutes"]
    start_s = result.environment["window"]["from_minute"] * 60
    out = []
    for name, sim in result.sims.items():
        w = sim.workload
        if not hasattr(w, "pending_minutes"):
            continue  # a demand series: no jobs
        own = job_tiers.get(name)
        pending = w.pending_minutes(horizon)
        for i, s in enumerate(w.submit_s):
            t = own[i] if own is not None else tiers[name]
            if t == tier and s >= start_s:
                out.append((w, i, pending[i]))
    return out


def breakdown(setup: str, result, rec: WaitRecorder, jobs, tail_pct: float) -> list[str]:
    """The report lines of one setup: the tier's p95 / p99 per class, then the tail's minutes per cause."""
    from sim.metrics import percentile

    horizon = result.environment["horizon_minutes"]
    lines = []
    pending = [m for _, _, m in jobs]
    prod = [m for w, i, m in jobs if w.is_production(i)]
    rest = [m for w, i, m in jobs if not w.is_production(i)]
    lines.append(f"{setup}: {len(jobs):,} jobs in the window")
    for label, v in (("all", pending), ("production jobs", prod), ("interruptible jobs", rest)):
        if v:
            lines.append(
                f"  {label:<19} p95 {percentile(v, 95):8.1f}  p99 {percentile(v, 99):8.1f}  "
                f"max {max(v):8.1f} min (n={len(v):,})"
            )
    cut = percentile(pending, tail_pct)
    tail = [(w, i, m) for w, i, m in jobs if m >= cut and m > 0]
    lines.append(
        f"  tail: {len(tail):,} jobs pending >= {cut:.1f} min (p{tail_pct:g}); "
        f"{sum(1 for w, i, _ in tail if w.is_production(i)):,} production, "
        f"{sum(1 for w, i, _ in tail if w.gpus[i] >= 8):,} of 8+ GPUs"
    )
    by: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0, 0.0, 0])
    worst = 0.0
    for w, i, m in tail:
        segs = rec.segments(w, i, horizon)
        worst = max(worst, abs(sum(s[2] for s in segs) - m))
        seen = set()
        for phase, state, minutes in segs:
            k = 2 if w.is_production(i) else 0
            cell = by[(phase, state)]
            cell[k] += minutes
            if (phase, state) not in seen:
                cell[k + 1] += 1
                seen.add((phase, state))
    total = sum(m for _, _, m in tail) or 1.0
    lines.append(f"  {'wait':<13} {'in':<18} {'intr. min':>10} {'jobs':>5} {'prod. min':>10} {'jobs':>5} {'%':>5}")
    for (phase, state), (rm, rj, pm, pj) in sorted(by.items(), key=lambda kv: -(kv[1][0] + kv[1][2])):
        lines.append(
            f"  {phase:<13} {state:<18} {rm:10,.0f} {rj:5,d} {pm:10,.0f} {pj:5,d} {100 * (rm + pm) / total:5.1f}"
        )
    lines.extend(_floor_lines(rec, tail, jobs))
    if worst > 0.01:
        lines.append(f"  CHECK: a job's segments differ from its pending minutes by {worst:.2f} min")
    return lines


def _floor_lines(rec: WaitRecorder, tail, jobs) -> list[str]:
    """What held the floor for the tail's jobs that waited on it, and how much a minute more per kube-scheduler
    preemption (victims that take up to 110 s to go, as docs/workloads/elastic-spot.yaml's; the simulator charges
    the default 30 s: a minute) would move the tier's p95 / p99."""
    from sim.metrics import percentile

    out = []
    for prod, label in ((True, "production"), (False, "interruptible")):
        held = [rec.blocked[(id(w), i)] for w, i, _ in tail if w.is_production(i) == prod and (id(w), i) in rec.blocked]
        if not held:
            continue
        sizes: dict[int, int] = defaultdict(int)
        for g, _, _ in held:
            sizes[g] += 1
        room = sum(1 for g, floor, same in held if floor - same >= g)
        out.append(f"  {label} jobs of the tail pinned to a floor, no victims: {len(held)}")
        out.append(f"    GPUs x jobs: {', '.join(f'{g} x{n}' for g, n in sorted(sizes.items()))}")
        out.append(
            f"    floor held by pods of their priority or higher: median "
            f"{100 * statistics.median(same / floor for _, floor, same in held):.0f} %"
        )
        out.append(f"    {room} of them: the GPUs were there in total, in pieces")
    rounds = sum(rec.preempted_for.get((id(w), i), 0) for w, i, _ in jobs)
    if rounds:
        late = [m + rec.preempted_for.get((id(w), i), 0) for w, i, m in jobs]
        out.append(f"  kube-scheduler preemptions by the tier's jobs: {rounds}")
        out.append(
            f"    a minute more each (110-s grace): p95 {percentile(late, 95):.1f}, p99 {percentile(late, 99):.1f}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from pricing.sources import catalog
    from scripts.bench_org import DEFAULT_TRACES, SIZING_DAYS
    from sim import demand as simdemand

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rotation", type=int, default=2, help="the tier rotation, 1-3 (default 2)")
    parser.add_argument("--seed", type=int, default=1, help="the simulation seed (default 1)")
    parser.add_argument(
        "--setups",
        default="gpuloan,karpenter-shared",
        metavar="NAMES",
        help=f"comma-separated, of {', '.join(SETUPS)} (default gpuloan,karpenter-shared)",
    )
    parser.add_argument(
        "--tiers",
        default="production",
        metavar="NAMES",
        help="team tiers, comma-separated, each from the same run (default production)",
    )
    parser.add_argument("--tail", type=float, default=95.0, help="the tail's percentile (default 95)")
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), metavar="DIR", help="the ITP traces folder")
    parser.add_argument(
        "--smoke", action="store_true", help="days 1-4, sized on the first 2 (the script's test; figures mean nothing)"
    )
    args = parser.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    bad = [s for s in setups if s not in SETUPS]
    if bad or not setups:
        parser.error(f"--setups {args.setups}: any of {', '.join(SETUPS)}")
    if not 1 <= args.rotation <= len(simdemand.ROTATIONS):
        parser.error(f"--rotation {args.rotation}: 1-{len(simdemand.ROTATIONS)}")
    wanted = [t.strip() for t in args.tiers.split(",") if t.strip()]
    known = ("production", "experiment", "learning")
    if not wanted or any(t not in known for t in wanted):
        parser.error(f"--tiers {args.tiers}: any of {', '.join(known)}")
    if not 0 < args.tail < 100:
        parser.error(f"--tail {args.tail}: a percentile between 0 and 100")
    price_book = catalog.Prices.resolve()
    days, sizing_days = ((1, 4), 2) if args.smoke else (simdemand.ITP_DAYS, SIZING_DAYS)
    traces = simdemand.itp_traces(args.traces, days)
    print(
        f"rotation {args.rotation}, seed {args.seed}, report window days "
        f"{sizing_days + 1}-{days[1] - days[0] + 1} of {days[0]}-{days[1]}"
    )
    for setup in setups:
        t0 = time.process_time()
        result, rec, tiers, job_tiers, floors = run_setup(
            setup, args.rotation - 1, args.seed, traces, price_book, days, sizing_days
        )
        for tier in wanted:
            jobs = tier_jobs(result, tiers, job_tiers, tier)
            for line in breakdown(f"{setup}, tier {tier}", result, rec, jobs, args.tail):
                print(line)
        held = ", ".join(f"{n} {k}" for n, k in floors.items() if k) or "none"
        print(textwrap.fill(f"floors (nodes): {held}", 78, initial_indent="  ", subsequent_indent="    "))
        print(f"  {time.process_time() - t0:.0f} CPU s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
