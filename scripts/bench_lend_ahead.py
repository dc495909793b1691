"""Lending ahead of the owner (issue 38 item 2; docs/scheduling.md, "Lending ahead of the owner"): the ITP
example environment of bench_org.py (ten clusters as ten pools, p90 floors sized on the first 30 days and lent,
bench_fair_share.py's unit), one tier rotation and one seed, simulated with `scheduling.kueue.lend_ahead` off and
on (reclaim_lookahead_minutes as given). Prints reclaim preemptions, GPU-hours lost to reclaims, the bill,
production p95/p99 wait and production interruptions, off / on / change. `--days N` cuts the run (the test uses 3).

The reclaims are split by cause: an owner taking its floor back (Kueue's reclaimWithinCohort, the floor's
guarantee) and a borrower evicting another borrower of higher share (fair sharing, only while it borrows).
`--cache DIR` keeps the "off" side's figures in DIR, keyed by rotation, seed, days and a digest of the code and
data the off side runs (the lend-ahead rule itself is not run when off), so that a variant of the rule costs only
its "on" run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_org  # noqa: E402  (the environment as bench-org builds it)


def with_lend_ahead(cfg, on: bool, lookahead: int):
    kueue = cfg.scheduling.kueue.model_copy(update={"lend_ahead": on, "reclaim_lookahead_minutes": lookahead})
    return cfg.model_copy(update={"scheduling": cfg.scheduling.model_copy(update={"kueue": kueue})})


def figures(res) -> dict[str, float | None]:
    from sim.environment import EnvJobsWorkload
    from sim.metrics import pending_summary

    production_waits: list[float] = []
    for sim in res.sims.values():
        w = sim.workload
        if isinstance(w, EnvJobsWorkload) and w.production is not None:
            waits, _ = w.waits_minutes(res.environment["horizon_minutes"])
            production_waits += [x for k, x in enumerate(waits) if w.production[k]]
    env = res.environment
    summary = pending_summary(production_waits)
    by_borrowers = sum(getattr(sim.workload, "fair_share_reclaims", 0) for sim in res.sims.values())
    by_borrowers_lost = (
        sum(getattr(sim.workload, "fair_share_reclaim_lost_gpu_minutes", 0.0) for sim in res.sims.values()) / 60
    )
    return {
        "reclaim preemptions": env["reclaim_preemptions"],
        "reclaims by owners": env["reclaim_preemptions"] - by_borrowers,
        "reclaims by borrowers": by_borrowers,
        "reclaim lost GPU-h": env["reclaim_lost_gpu_hours"],
        "lost GPU-h to owners": round(env["reclaim_lost_gpu_hours"] - by_borrowers_lost, 1),
        "lost GPU-h to borrowers": round(by_borrowers_lost, 1),
        "lent floor GPU-h": env["floor_lent_gpu_hours"],
        "cost USD": env["total_cost_usd"],
        "prod p95 wait min": summary["p95_pending_minutes"],
        "prod p99 wait min": summary["p99_pending_minutes"],
        "prod interruptions": env["production_interruptions"],
    }


def off_side_key(rotation: int, seed: int, days: int | None) -> str:
    """What the "off" side's figures depend on: the arguments and every tracked Python file and the traces'
    listing, less the lend-ahead rule (not run when off) and this script's printing."""
    digest = hashlib.sha256(f"{rotation}/{seed}/{days}".encode())
    skip = {"policy/decide/lend_ahead.py", "scripts/bench_lend_ahead.py"}
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for rel in sorted(listed):
        if rel.startswith("tests/") or rel in skip or not (REPO / rel).exists():
            continue
        digest.update(rel.encode() + b"\0" + (REPO / rel).read_bytes())
    return digest.hexdigest()[:16]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(bench_org.DEFAULT_TRACES), metavar="DIR")
    parser.add_argument("--rotation", type=int, default=1, help="tier rotation 1-3 (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=int, default=None, help="simulate only the first N days")
    parser.add_argument("--lookahead", type=int, default=60, help="reclaim_lookahead_minutes (default 60)")
    parser.add_argument("--cache", metavar="DIR", help='keep the "off" side\'s figures here and reuse them')
    args = parser.parse_args(argv)

    from advise import org_advisor as oa
    from pricing.sources import catalog
    from sim import demand as simdemand
    from sim.engine import SimSettings
    from sim.environment import simulate_environment

    days = simdemand.ITP_DAYS
    last = days[1] - days[0] + 1 if args.days is None else args.days
    sizing_hours = min(bench_org.SIZING_DAYS, max(1, last - 1)) * 24
    price_book = catalog.Prices.resolve()  # read once, passed down
    p = price_book.price(bench_org.INSTANCE_TYPE, bench_org.REGION)
    if p is None or p.spot_usd_per_hour is None:
        raise SystemExit(
            f"bench-lend-ahead: no on-demand and spot price of {bench_org.INSTANCE_TYPE} in "
            f"{bench_org.REGION} in the price file"
        )
    traces = simdemand.itp_traces(args.traces, days)
    rotation = args.rotation - 1
    demands, runner = bench_org._sim_unit(
        price_book, rotation, args.seed, traces, days, sizing_hours, bench_org.DEFAULT_CHECKPOINT_MINUTES
    )
    hours = min(max(d.hours for d in demands.values()), last * 24)
    heads = {n: d.head(sizing_hours) for n, d in demands.items()}
    floors = oa.size_floors(heads, runner.prices, bench_org.GOAL_LEVEL)
    base = oa.setup_config(runner.cfg, floors, lend=True)
    cut = {n: oa._cut(t, hours) for n, t in runner.traces.items()}
    print(
        f"Lending ahead of the owner: rotation {args.rotation}, seed {args.seed}, days 1-{hours // 24}, "
        f"lookahead {args.lookahead} min"
    )
    rows = {}
    cached = None
    if args.cache:
        cached = (
            Path(args.cache)
            / f"off-r{args.rotation}-s{args.seed}-{off_side_key(args.rotation, args.seed, args.days)}.json"
        )
        if cached.exists():
            rows["off"] = json.loads(cached.read_text())
            print(f"  off: from {cached}", file=sys.stderr)
    for label, on in (("off", False), ("on", True)):
        if label in rows:
            continue
        cfg = with_lend_ahead(base, on, args.lookahead)
        t0 = time.perf_counter()
        res = simulate_environment(
            price_book, cfg, cut, oa._factory(oa.CONTROLLER_GPULOAN), SimSettings(seed=args.seed), hours * 60
        )
        rows[label] = figures(res)
        print(f"  {label}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        if label == "off" and cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(rows["off"]))
    print("\n| figure | off | on | change |")
    print("|---|---:|---:|---:|")
    for key, off in rows["off"].items():
        on_value = rows["on"][key]
        if off is None or on_value is None:
            change = ""
        elif off:
            change = f"{100 * (on_value - off) / off:+.1f}%"
        else:
            change = f"{on_value - off:+g}"
        print(f"| {key} | {off if off is not None else '-'} | {on_value if on_value is not None else '-'} | {change} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
