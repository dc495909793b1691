"""The organization's loan on the ITP example environment (`make bench-org`; docs/benchmarks.md, "The
organization's loan"): ten ITP clusters as ten pools on their common clock (days 1-57), three tier rotations,
three seeds, 1- and 3-year RIs, floors at several guarantee levels; every setup of sim/org_advisor.py sized on
the first 30 days and measured on the 27 after. Prints the tables (markdown, pasted verbatim into the docs), the
issue's goals with by how much each is met or missed, and the run time; draws cost vs guarantee level per setup.

Two models (`--model fluid|simulated|both`, default both). The fluid tables run every setup through the fluid model
(sim/fluid.py: free repacking, no boots): a bound, not a simulation. The simulated tables run every setup (the
fluid bound excepted) through the environment simulator (sim/environment.py, as `gpuloan advise --model
simulated`: whole nodes, boots, Kueue lending and reclaim, spot events, the per-pool controllers) at the goal
level (p90) for each rotation and term, with `--sim-seeds` seeds (default 3) and the default and on-demand
shortage scenarios; each report window is measured inside one run over the 57 days, and identical simulations run
once (a setup's simulation serves both terms, karpenter and karpenter+savings-plan, team-floors and
floors-not-lent). `--smoke` runs a few days of one rotation (the test of this script).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_TRACES = REPO.parent / "shared" / "data" / "traces" / "itp"
DEFAULT_PRICES = REPO.parent / "shared" / "data" / "prices"
INSTANCE_TYPE, REGION = "p4d.24xlarge", "us-east-1"
TERMS = ("reserved_1yr", "reserved_3yr")
LEVELS = (50.0, 75.0, 90.0, 95.0)  # guarantee percentiles drawn; the goals are checked at 90
GOAL_LEVEL = 90.0
SIZING_DAYS, LOOKBACK_DAYS = 30, 30
SETUPS_DRAWN = ("gpuloan", "floors-not-lent", "team-floors", "fluid-bound")

# The goals (out of sample, every rotation and term)
GOAL_POINTS_ABOVE_BOUND = 5.0
GOAL_LENDING_CUT = 0.25
GOAL_CHEAPER_THAN_TEAM = 0.10


def _one(job):
    """One (term, rotation, seed, level): the advisor's document (run in a worker process)."""
    term, rotation, seed, level, demands, prices, rate, sizing_days, lookback_days = job
    from sim import org_advisor as oa

    inputs = oa.OrgInputs(demands, prices, {(INSTANCE_TYPE, REGION): rate}, term, sizing_days * 24, lookback_days,
                          level)
    scenarios = oa.SCENARIOS if level == GOAL_LEVEL else ("default",)
    doc = oa.evaluate(inputs, oa.fluid_runner(prices), scenarios=scenarios, seed=seed, per_pool_prices=False)
    return (term, rotation, seed, level), doc


# --- the simulated model -----------------------------------------------------------------------------------------

SIM_SCENARIOS = ("default", "on-demand-shortage")


def _sim_config(traces, demands, tiers):
    """The example environment as a stack: the prod stack's settings with one pool per cluster, each of p4d nodes
    (the shared price table's type of this benchmark), production pools on on-demand, the others spot first
    (spot, then on-demand while spot is short), elastic up to twice the cluster's peak hourly demand in nodes (at
    most 500); no commitment in the stack (the advisor chooses it); production work never on spot; a budget that
    never binds (the race is about the loan, not the cap)."""
    import math

    import yaml

    from config import config

    doc = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())
    c = doc["config"]
    pools = []
    for name in traces:
        d = demands[name]
        peak = max(d.production_gpus[h] + d.interruptible_gpus[h] for h in range(d.hours))
        prod = tiers[name] == "production"
        pools.append({"name": name, "team": name, "tier": tiers[name],
                      "elastic": {"instance_types": [INSTANCE_TYPE],
                                  "capacity": "on_demand" if prod else "spot_then_on_demand",
                                  "max_nodes": min(500, max(2, math.ceil(peak / 8) * 2))}})
    c["gpuloan:pools"] = pools
    c.pop("gpuloan:commitments", None)
    c["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": []}}
    c["gpuloan:budget"] = {"monthly_usd": 9_000_000, "alert_emails": ["platform@example.com"],
                           "enforcement": "alert_only"}
    return config.from_stack_yaml(doc, "prod")


def _sim_unit(rotation, seed, traces, prices, days, sizing_hours):
    """What one (rotation, seed) needs: its demands, its stack and an EnvironmentRunner (cache empty)."""
    from sim import org_advisor as oa
    from sim import org_demand
    from sim.engine import SimSettings

    demands = org_demand.itp_environment(traces, rotation, seed, days)
    tiers = org_demand.rotation_tiers(rotation)
    cfg = _sim_config(traces, demands, tiers)
    runner = oa.environment_runner(cfg, traces, SimSettings(seed=seed), prices,
                                   production_share=org_demand.PRODUCTION_SHARE)
    return demands, runner


def _sim_setups(demands, prices, sizing_hours):
    """The distinct simulated setups of one (rotation, seed): karpenter (no floors), the p90 floors lent and the
    same floors not lent, whatever the term (terms only change billing)."""
    from sim import org_advisor as oa

    heads = {n: d.head(sizing_hours) for n, d in demands.items()}
    floors = oa.size_floors(heads, prices, GOAL_LEVEL)
    return [({n: 0 for n in demands}, False, oa.CONTROLLER_KARPENTER), (floors, True, oa.CONTROLLER_GPULOAN),
            (floors, False, oa.CONTROLLER_GPULOAN)]


def _sim_run(shared, job):
    """One setup in every scenario (a worker of sim/parallel.py; `shared`: the traces and prices, sent to each
    worker once): one run up to the report window that branches there into the shortage scenarios
    (EnvironmentRunner.run_scenarios); the cache entries it made, with its wall seconds."""
    rotation, seed, setup, scenario_names, days, sizing_hours = job
    from sim import org_advisor as oa

    traces, prices = shared
    demands, runner = _sim_unit(rotation, seed, traces, prices, days, sizing_hours)
    hours = max(d.hours for d in demands.values())
    scenarios = [oa.scenario_for(n, hours, sizing_hours, seed) for n in scenario_names]
    floors, lend, controller = setup
    t0 = time.perf_counter()
    runner.run_scenarios(demands, floors, lend=lend, controller=controller, scenarios=scenarios,
                         report_from_hour=sizing_hours)
    return (rotation, seed), dict(runner.cache), runner.runs, time.perf_counter() - t0, controller


def _simulated(traces, prices, rates, rotations, seeds, scenarios, days, sizing_days, lookback_days, engine):
    """Every distinct setup on `engine` (sim/parallel.py: local processes or Ray; each one run, branched into the
    scenarios at the report window), then each (term, rotation, seed)'s advice from the filled caches (no
    simulation runs twice). Returns the documents and the timings."""
    from sim import org_advisor as oa
    from sim import parallel

    sizing_hours = sizing_days * 24
    units = {(r, s): _sim_unit(r, s, traces, prices, days, sizing_hours) for r in rotations for s in seeds}
    jobs = [(r, s, setup, scenarios, days, sizing_hours)
            for (r, s), (demands, _) in units.items() for setup in _sim_setups(demands, prices, sizing_hours)]
    timings = []
    for unit, cache, runs, seconds, controller in parallel.run_all(
            jobs, _sim_run, shared=(traces, prices), engine=engine, label="bench-org simulated",
            describe=lambda j: f"rotation {j[0] + 1} seed {j[1]} {oa.describe_setup((*j[2], []))}"):
        units[unit][1].cache.update(cache)
        timings.append((unit, controller, runs, seconds))
    docs = {}
    for (r, s), (demands, runner) in units.items():
        for term in TERMS:
            inputs = oa.OrgInputs(demands, prices, {(INSTANCE_TYPE, REGION): rates[term].usd_per_hour}, term,
                                  sizing_hours, lookback_days, GOAL_LEVEL)
            docs[(term, r, s, GOAL_LEVEL)] = oa.evaluate(inputs, runner, scenarios=scenarios, seed=s,
                                                         per_pool_prices=False)
        if runner.runs:
            raise RuntimeError(f"rotation {r + 1} seed {s}: {runner.runs} simulation(s) outside the prefilled cache")
    return docs, timings


def _sim_tables(docs, rotations, seeds, scenarios) -> bool:
    """The simulated tables: cost and price per setup, service figures, the goals (worst seed) with by how much
    each is met or missed; True when every goal is met."""
    names = ("gpuloan", "karpenter", "karpenter+savings-plan", "team-floors", "floors-not-lent", "fluid-bound")
    print(f"### Simulated: p{GOAL_LEVEL:g} guarantee for every production pool, default scenario (report window, "
          "mean of seeds)\n")
    print("| term | rotation | " + " | ".join(f"{n} $ (price)" for n in names) + " | floor used owned / lent |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for term in TERMS:
        for rotation in rotations:
            cells = [f"{_cell(docs, term, rotation, seeds, n):,.0f} "
                     f"({_cell(docs, term, rotation, seeds, n, 'price_of_guarantee_pct'):+.1f} %)" for n in names]
            fu = [docs[(term, rotation, s, GOAL_LEVEL)]["recommendation"]["report"]["floor_utilization"]
                  for s in seeds]
            print(f"| {term} | {rotation + 1} | " + " | ".join(cells) +
                  f" | {100 * _mean([f['owned'] for f in fu]):.0f} / {100 * _mean([f['lent'] for f in fu]):.0f} % |")
    print()
    print("### Simulated: service in the report window (default scenario, mean of seeds; the same in both terms)\n")
    print("| rotation | setup | production interruptions | reclaim preemptions (lost GPU-h) | unmet GPU-h | "
          "unmet production GPU-h | p95 wait min production / experiment / learning |")
    print("|---|---|---|---|---|---|---|")
    term = TERMS[0]
    for rotation in rotations:
        for n in ("gpuloan", "karpenter", "floors-not-lent"):
            rows = [_by_name(docs[(term, rotation, s, GOAL_LEVEL)])[n] for s in seeds]
            waits = " / ".join("-" if any(r["p95_wait_minutes_by_tier"].get(t) is None for r in rows) else
                               f"{_mean([r['p95_wait_minutes_by_tier'][t] for r in rows]):,.1f}"
                               for t in ("production", "experiment", "learning"))
            print(f"| {rotation + 1} | {n} | {_mean([r['production_interruptions'] for r in rows]):.1f} | "
                  f"{_mean([r['reclaim_preemptions'] for r in rows]):.1f} "
                  f"({_mean([r['reclaim_lost_gpu_hours'] for r in rows]):,.0f}) | "
                  f"{_mean([r['unmet_gpu_hours'] for r in rows]):,.0f} | "
                  f"{_mean([r['unmet_production_gpu_hours'] for r in rows]):,.0f} | {waits} |")
    print()
    for sc in scenarios:
        if sc == "default":
            continue
        print(f"### Simulated: scenario {sc}, p{GOAL_LEVEL:g} floors (report window, mean of seeds): cost $ / "
              "production GPU-h waiting (of them, within the pool's floor)\n")
        print("| term | rotation | shortage hours | " + " | ".join(names) + " |")
        print("|---|---|---|" + "---|" * len(names))
        for term in TERMS:
            for rotation in rotations:
                hours = _mean([docs[(term, rotation, s, GOAL_LEVEL)]["scenarios"][sc]["shortage_hours"] for s in seeds])
                cells = [f"{_cell(docs, term, rotation, seeds, n, scenario=sc):,.0f} / " + _waiting_cell(
                         docs, term, rotation, seeds, n, sc) for n in names]
                print(f"| {term} | {rotation + 1} | {hours:.1f} | " + " | ".join(cells) + " |")
        print()
    print(f"### The issue's goals at p{GOAL_LEVEL:g} on the simulated figures, worst seed\n")
    print("| term | rotation | price over the fluid bound (goal <= +5.0 points) | lending's cut of the price (goal >= "
          "25 %) | cheaper than team-floors (goal >= 10 %) | production interruptions (goal 0) | p95 wait per tier "
          "over karpenter's, worst tier (goal <= 0 min) | on-demand shortage: gpuloan's production GPU-h waiting "
          "within its floors (goal 0) / all production GPU-h waiting, gpuloan / karpenter |")
    print("|---|---|---|---|---|---|---|---|")
    all_met = True
    for term in TERMS:
        for rotation in rotations:
            over, cut, cheaper, interr, wait_over, unmet_ours, wait_ours, wait_k = [], [], [], 0, [], [], [], []
            for s in seeds:
                doc = docs[(term, rotation, s, GOAL_LEVEL)]
                d = _by_name(doc)
                ours, bound, nl, tf, k = (d["gpuloan"], d["fluid-bound"], d["floors-not-lent"], d["team-floors"],
                                          d["karpenter"])
                over.append(ours["price_of_guarantee_pct"] - bound["price_of_guarantee_pct"])
                nl_price = nl["price_of_guarantee_pct"]
                cut.append((nl_price - ours["price_of_guarantee_pct"]) / nl_price if nl_price > 0 else 0.0)
                cheaper.append(1 - ours["total_cost_usd"] / tf["total_cost_usd"])
                interr += ours["production_interruptions"]
                ow, kw = ours["p95_wait_minutes_by_tier"], k["p95_wait_minutes_by_tier"]
                wait_over.append(max((ow[t] or 0.0) - (kw.get(t) or 0.0) for t in ow))
                if "on-demand-shortage" in doc["scenarios"]:
                    od = _by_name(doc, "on-demand-shortage")
                    unmet_ours.append(od["gpuloan"]["unmet_guaranteed_production_gpu_hours"])
                    wait_ours.append(od["gpuloan"]["production_waiting_gpu_hours"])
                    wait_k.append(od["karpenter"]["production_waiting_gpu_hours"])
            w_over, w_cut, w_cheaper, w_wait = max(over), min(cut), min(cheaper), max(wait_over)
            met = [w_over <= GOAL_POINTS_ABOVE_BOUND, w_cut >= GOAL_LENDING_CUT, w_cheaper >= GOAL_CHEAPER_THAN_TEAM,
                   interr == 0, w_wait <= 0.0]
            od_cell = "not run"
            if unmet_ours:
                met.append(max(unmet_ours) <= 1e-9)
                od_cell = (f"{max(unmet_ours):,.1f} {'met' if met[-1] else 'MISSED'} / {max(wait_ours):,.0f} / "
                           f"{max(wait_k):,.0f}")
            all_met &= all(met)

            def mark(ok, text):
                return f"{text} {'met' if ok else 'MISSED'}"

            print(f"| {term} | {rotation + 1} | "
                  f"{mark(met[0], f'{w_over:+.1f} points ({GOAL_POINTS_ABOVE_BOUND - w_over:+.1f} of margin)')} | "
                  f"{mark(met[1], f'{100 * w_cut:.0f} % ({100 * (w_cut - GOAL_LENDING_CUT):+.0f} points)')} | "
                  f"{mark(met[2], f'{100 * w_cheaper:.1f} % ({100 * (w_cheaper - GOAL_CHEAPER_THAN_TEAM):+.1f} points)')} | "
                  f"{mark(met[3], str(interr))} | {mark(met[4], f'{w_wait:+,.1f} min')} | {od_cell} |")
    print("\nProduction GPU-h waiting: GPUs of queued production jobs, minute by minute over the report window; "
          "within its floor: the part its own floor had room for (ready floor GPUs not running the pool's production "
          "work: idle, lent, running its other work, or in pieces too small for the job), the simulator's "
          "`unmet_guaranteed_production_gpu_hours`. Work above the floors waits in a shortage by design; work "
          "within them must not.\n")
    return all_met


def _by_name(doc: dict, scenario: str = "default") -> dict[str, dict]:
    if scenario == "default":
        rows = [doc["recommendation"]["report"], *doc["baselines"]]
    else:
        sc = doc["scenarios"][scenario]
        rows = [sc["recommendation_report"], *sc["baselines"]]
    return {r["name"]: r for r in rows}


def _waiting_cell(docs, term, rotation, seeds, name, scenario) -> str:
    """A setup's production GPU-h waiting (and within its floors) in a scenario, mean of seeds; "-" where the
    model has no queue (the fluid bound)."""
    rows = [_by_name(docs[(term, rotation, s, GOAL_LEVEL)], scenario)[name] for s in seeds]
    waiting = [r.get("production_waiting_gpu_hours") for r in rows]
    within = [r.get("unmet_guaranteed_production_gpu_hours") for r in rows]
    if any(x is None for x in waiting):
        return "-"
    return f"{_mean(waiting):,.0f} ({_mean(within):,.1f})"


def _mean(xs) -> float:
    return statistics.fmean(xs)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), metavar="DIR", help="the ITP traces folder")
    parser.add_argument("--model", choices=("fluid", "simulated", "both"), default="both",
                        help="the fluid tables, the simulated tables, or both (default both)")
    parser.add_argument("--seeds", type=int, default=3, help="fluid model: seeds 1..N (default 3)")
    parser.add_argument("--sim-seeds", type=int, default=3,
                        help="simulated model: seeds 1..N (default 3, about 2 min each on 2 cores)")
    parser.add_argument("--sim-scenarios", default=",".join(SIM_SCENARIOS), metavar="NAMES",
                        help=f"simulated model: scenarios, comma-separated (default {','.join(SIM_SCENARIOS)}; "
                             "spot-shortage adds three simulations per rotation and seed)")
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--ray", metavar="ADDRESS", help="simulated model: run the setups on the Ray cluster at "
                        "ADDRESS (default: $RAY_ADDRESS when set; needs pip install 'gpuloan[ray]')")
    parser.add_argument("--plot", default=str(REPO / "docs" / "bench-org.png"), help="the picture (PNG)")
    parser.add_argument("--smoke", action="store_true",
                        help="a quick run (the script's test): days 1-3 of the traces, sized on the first, rotation "
                             "1, one seed, the p90 level only; its figures mean nothing")
    args = parser.parse_args(argv)
    os.environ.setdefault("GPULOAN_PRICE_FILE", str(DEFAULT_PRICES))
    from sim import parallel

    # Ray connected (or refused, naming the address) before any table is printed
    engine = parallel.engine_for(args.workers, args.ray) if args.model != "fluid" else parallel.Engine(parallel.SERIAL)
    t0 = time.perf_counter()

    from pricing.sources import catalog, floor_pricing
    from sim import fluid, org_advisor, org_demand

    days, sizing_days, lookback_days, levels = org_demand.ITP_DAYS, SIZING_DAYS, LOOKBACK_DAYS, LEVELS
    rotations = range(len(org_demand.ROTATIONS))
    seeds, sim_seeds = range(1, args.seeds + 1), range(1, args.sim_seeds + 1)
    if args.smoke:
        days, sizing_days, lookback_days, levels = (1, 3), 1, 7, (GOAL_LEVEL,)
        rotations, seeds, sim_seeds = range(1), range(1, 2), range(1, 2)
    scenarios = tuple(x.strip() for x in args.sim_scenarios.split(",") if x.strip())
    unknown = [x for x in scenarios if x not in org_advisor.SCENARIOS]
    if unknown or "default" not in scenarios:
        parser.error(f"--sim-scenarios {args.sim_scenarios}: 'default' and any of "
                     f"{', '.join(org_advisor.SCENARIOS)}")
    p = catalog.price(INSTANCE_TYPE, REGION)
    prices = {c: fluid.PoolPrices(INSTANCE_TYPE, REGION, 8, p.ondemand_usd_per_hour, p.spot_usd_per_hour)
              for c in org_demand.ITP_CLUSTERS}
    rates = {t: floor_pricing.floor_rate(INSTANCE_TYPE, REGION, t) for t in TERMS}
    traces = org_demand.itp_traces(args.traces, days)

    print(f"Prices: {INSTANCE_TYPE} {REGION} on-demand ${p.ondemand_usd_per_hour:,.4f}/h, spot "
          f"${p.spot_usd_per_hour:,.4f}/h ({p.source}); RIs no upfront: "
          + "; ".join(f"{t} ${r.usd_per_hour:,.4f}/h ({r.source})" for t, r in rates.items()) + ".")
    last_day = days[1] - days[0] + 1
    print(f"Sized on days 1-{sizing_days} (Cost Explorer lookback {lookback_days} days, bought at the end of day "
          f"{sizing_days}), reported on days {sizing_days + 1}-{last_day}; 30 % of each pool's jobs production "
          f"(seeded per job); figures are means over the seeds.\n")
    for rotation in rotations:
        r = org_demand.ROTATIONS[rotation]
        print(f"- rotation {rotation + 1}: production {', '.join(r['production'])}; experiment "
              f"{', '.join(r['experiment'])}; learning {', '.join(r['learning'])}")
    print()
    ok = True
    if args.model in ("fluid", "both"):
        tf = time.perf_counter()
        jobs = []
        for rotation in rotations:
            for seed in seeds:
                demands = org_demand.itp_environment(traces, rotation, seed, days)
                for term in TERMS:
                    for level in levels:
                        jobs.append((term, rotation, seed, level, demands, prices, rates[term].usd_per_hour,
                                     sizing_days, lookback_days))
        with ProcessPoolExecutor(max_workers=args.workers, mp_context=multiprocessing.get_context("fork")) as ex:
            docs = dict(ex.map(_one, jobs))
        wall = time.perf_counter() - tf
        print(f"Model: **fluid** (sim/fluid.py: free repacking, no boots, production never interrupted by "
              f"construction, waits not measured); seeds {seeds.start}-{seeds.stop - 1}.\n")
        _main_table(docs, rotations, seeds)
        ok &= _goals_table(docs, rotations, seeds)
        _scenario_tables(docs, rotations, seeds)
        if len(levels) > 1:
            _levels_table(docs, rotations, seeds, levels)
            _plot(docs, rotations, seeds, args.plot, levels)
        print(f"\nbench-org fluid: {len(jobs)} advisor runs ({len(TERMS)} terms x {len(rotations)} rotations x "
              f"{len(seeds)} seeds x {len(levels)} guarantee levels; the p{GOAL_LEVEL:g} runs with both scenarios) "
              f"in {wall:.1f} s wall on {args.workers} worker(s)"
              + (f"; picture {_shown(args.plot)}" if len(levels) > 1 else ""))
    if args.model in ("simulated", "both"):
        ts = time.perf_counter()
        sdocs, timings = _simulated(traces, prices, rates, rotations, sim_seeds, scenarios, days, sizing_days,
                                    lookback_days, engine)
        wall = time.perf_counter() - ts
        print(f"\nModel: **simulated** (sim/environment.py: whole nodes, boots, Kueue lending and reclaim, spot "
              f"events, the per-pool controllers; the fluid bound stays fluid); seeds {sim_seeds.start}-"
              f"{sim_seeds.stop - 1}; scenarios {', '.join(scenarios)}. "
              f"{org_advisor.REPORT_WINDOW_NOTE[0].upper()}{org_advisor.REPORT_WINDOW_NOTE[1:]}.\n")
        ok &= _sim_tables(sdocs, rotations, sim_seeds, scenarios)
        sims = sum(seconds for *_, seconds in timings)
        print(f"bench-org simulated: {sum(runs for *_, runs, _ in timings)} simulations ({len(rotations)} rotations "
              f"x {len(sim_seeds)} seed(s) x 3 distinct setups, each one run over the whole history branched at "
              f"the report window into {len(scenarios) - 1} shortage scenario(s); {len(TERMS) * 5 * len(scenarios)} "
              f"setup figures per rotation and seed billed from them) in {wall:.1f} s wall on "
              f"{engine.words() if engine.kind == parallel.RAY else f'{args.workers} worker(s)'} "
              f"({sims:.0f} s summed over the setups, {max(s for *_, s in timings):.0f} s the longest)")
    print(f"\nbench-org: {time.perf_counter() - t0:.1f} s wall in all")
    print("every goal met" if ok else "some goals missed: see the goals tables (the run itself succeeded)")
    return 0


def _shown(path: str) -> str:
    """The picture's path relative to the repository when it lies inside it (the docs quote this line)."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def _cell(docs, term, rotation, seeds, name, key="total_cost_usd", scenario="default", level=GOAL_LEVEL):
    return _mean([_by_name(docs[(term, rotation, s, level)], scenario)[name][key] for s in seeds])


def _main_table(docs, rotations, seeds) -> None:
    print(f"### p{GOAL_LEVEL:g} guarantee for every production pool, default scenario (report window, mean of seeds)\n")
    print("| term | rotation | karpenter $ | karpenter+savings-plan $ | gpuloan $ (price) | fluid bound, same floors "
          "(price) | floors-not-lent $ (price) | team-floors $ (price) | floor used owned / lent | RIs gpuloan / "
          "k+sp / bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for term in TERMS:
        for rotation in rotations:
            def c(name, key="total_cost_usd"):
                return _cell(docs, term, rotation, seeds, name, key)

            fu = [docs[(term, rotation, s, GOAL_LEVEL)]["recommendation"]["report"]["floor_utilization"]
                  for s in seeds]
            print(f"| {term} | {rotation + 1} | {c('karpenter'):,.0f} | {c('karpenter+savings-plan'):,.0f} | "
                  f"{c('gpuloan'):,.0f} ({c('gpuloan', 'price_of_guarantee_pct'):+.1f} %) | "
                  f"{c('fluid-bound'):,.0f} ({c('fluid-bound', 'price_of_guarantee_pct'):+.1f} %) | "
                  f"{c('floors-not-lent'):,.0f} ({c('floors-not-lent', 'price_of_guarantee_pct'):+.1f} %) | "
                  f"{c('team-floors'):,.0f} ({c('team-floors', 'price_of_guarantee_pct'):+.1f} %) | "
                  f"{100 * _mean([f['owned'] for f in fu]):.0f} / {100 * _mean([f['lent'] for f in fu]):.0f} % | "
                  f"{c('gpuloan', 'commitment_ri_count'):.0f} / {c('karpenter+savings-plan', 'commitment_ri_count'):.0f}"
                  f" / {c('fluid-bound', 'commitment_ri_count'):.0f} |")
    print()


def _goals_table(docs, rotations, seeds) -> bool:
    """Each goal per term and rotation, the worst seed; True when every one is met."""
    print(f"### The issue's goals at p{GOAL_LEVEL:g}, worst seed (fluid model for every setup)\n")
    print("| term | rotation | price over the fluid bound (goal <= +5.0 points) | lending's cut of the price (goal >= "
          "25 %) | cheaper than team-floors (goal >= 10 %) | production interruptions (goal 0) | unmet guaranteed "
          "production GPU-h, on-demand shortage (goal 0) |")
    print("|---|---|---|---|---|---|---|")
    all_met = True
    for term in TERMS:
        for rotation in rotations:
            over, cut, cheaper, interr, unmet_g = [], [], [], 0, 0.0
            for s in seeds:
                d = _by_name(docs[(term, rotation, s, GOAL_LEVEL)])
                ours, bound, nl, tf = d["gpuloan"], d["fluid-bound"], d["floors-not-lent"], d["team-floors"]
                over.append(ours["price_of_guarantee_pct"] - bound["price_of_guarantee_pct"])
                nl_price = nl["price_of_guarantee_pct"]
                cut.append((nl_price - ours["price_of_guarantee_pct"]) / nl_price if nl_price > 0 else 0.0)
                cheaper.append(1 - ours["total_cost_usd"] / tf["total_cost_usd"])
                interr += ours["production_interruptions"]
                od = _by_name(docs[(term, rotation, s, GOAL_LEVEL)], "on-demand-shortage")["gpuloan"]
                unmet_g += od["unmet_guaranteed_production_gpu_hours"]
            w_over, w_cut, w_cheaper = max(over), min(cut), min(cheaper)
            met = (w_over <= GOAL_POINTS_ABOVE_BOUND, w_cut >= GOAL_LENDING_CUT, w_cheaper >= GOAL_CHEAPER_THAN_TEAM,
                   interr == 0, unmet_g <= 1e-9)
            all_met &= all(met)

            def mark(ok, text):
                return f"{text} {'met' if ok else 'MISSED'}"

            print(f"| {term} | {rotation + 1} | "
                  f"{mark(met[0], f'{w_over:+.1f} points ({GOAL_POINTS_ABOVE_BOUND - w_over:+.1f} of margin)')} | "
                  f"{mark(met[1], f'{100 * w_cut:.0f} % ({100 * (w_cut - GOAL_LENDING_CUT):+.0f} points)')} | "
                  f"{mark(met[2], f'{100 * w_cheaper:.1f} % ({100 * (w_cheaper - GOAL_CHEAPER_THAN_TEAM):+.1f} points)')} | "
                  f"{mark(met[3], str(interr))} (fluid: 0 by construction) | {mark(met[4], f'{unmet_g:.0f}')} |")
    print("\np95 wait per tier (goal: no worse than karpenter's): not measured; the fluid model has no queue.\n")
    return all_met


def _scenario_tables(docs, rotations, seeds) -> None:
    names = ("gpuloan", "karpenter", "karpenter+savings-plan", "team-floors", "floors-not-lent", "fluid-bound")
    for sc in ("spot-shortage", "on-demand-shortage"):
        print(f"### Scenario {sc}, p{GOAL_LEVEL:g} floors (report window, mean of seeds): cost $ / unmet production "
              "GPU-h\n")
        print("| term | rotation | shortage hours | " + " | ".join(names) + " |")
        print("|---|---|---|" + "---|" * len(names))
        for term in TERMS:
            for rotation in rotations:
                hours = _mean([docs[(term, rotation, s, GOAL_LEVEL)]["scenarios"][sc]["shortage_hours"] for s in seeds])
                cells = [f"{_cell(docs, term, rotation, seeds, n, scenario=sc):,.0f} / "
                         f"{_cell(docs, term, rotation, seeds, n, 'unmet_production_gpu_hours', sc):,.0f}"
                         for n in names]
                print(f"| {term} | {rotation + 1} | {hours:.1f} | " + " | ".join(cells) + " |")
        print()


def _levels_table(docs, rotations, seeds, levels=LEVELS) -> None:
    print("### Price of the guarantee by level (mean over rotations and seeds; default scenario)\n")
    print("| term | setup | " + " | ".join(f"p{lv:g}" for lv in levels) + " |")
    print("|---|---|" + "---|" * len(levels))
    for term in TERMS:
        for name in SETUPS_DRAWN:
            cells = [_mean([_cell(docs, term, r, seeds, name, "price_of_guarantee_pct", level=lv) for r in rotations])
                     for lv in levels]
            print(f"| {term} | {name} | " + " | ".join(f"{x:+.1f} %" for x in cells) + " |")
    print()


def _plot(docs, rotations, seeds, path: str, levels=LEVELS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(TERMS), figsize=(11, 4.2), sharey=True)
    style = {"gpuloan": ("#2a7ab9", "-", "o"), "floors-not-lent": ("#dd8452", "--", "s"),
             "team-floors": ("#c44e52", ":", "^"), "fluid-bound": ("#55a868", "-.", "D")}
    for ax, term in zip(axes, TERMS):
        for name in SETUPS_DRAWN:
            ys = [_mean([_cell(docs, term, r, seeds, name, "price_of_guarantee_pct", level=lv) for r in rotations])
                  for lv in levels]
            color, ls, marker = style[name]
            ax.plot(levels, ys, ls, color=color, marker=marker, label=name)
        ax.axhline(0, color="#444", lw=0.8)
        ax.set_title(f"{term} (fluid model, mean of 3 rotations x {len(seeds)} seeds)", fontsize=9)
        ax.set_xlabel("guarantee: percentile of each production pool's hourly production GPUs")
        ax.set_xticks(levels)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cost over karpenter+savings-plan, % (report window)")
    axes[0].legend(fontsize=8)
    fig.suptitle("The price of a guarantee: ITP example environment, days 31-57", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
