"""`gpuloan advise -s STACK --demand DIR` (or `--org`): every pool's floor and the organization's commitment
together, with the price of each guarantee (advise/org_advisor.py; docs/floor.md, "The loan for an organization").

Demand: `--demand DIR` (one `<pool>.csv` per pool: a job trace or a `minute,gpus_demanded` series), or without it
each pool's own CloudWatch history (advise/demand_history.py, `--history-days`). The history is split at
`--sizing-days`: the advice is computed on the days before, every figure reported on the days after.
"""

from __future__ import annotations

from pathlib import Path

from advise.org_advisor import OrgAdviceError
from policy.terms import Tier

TERMS = ("reserved_1yr", "reserved_3yr")
MODELS = ("fluid", "simulated")


def add_arguments(p) -> None:
    g = p.add_argument_group("organization mode (every pool and one commitment: --demand DIR or --org)")
    g.add_argument(
        "--org",
        action="store_true",
        help="advise the whole environment at once (implied by --demand); without --demand, from each "
        "pool's CloudWatch history of the last --history-days days",
    )
    g.add_argument(
        "--sizing-days",
        type=int,
        metavar="N",
        help="days at the start of the history the advice is sized on; the rest is the report window "
        "(default: the lookback, 30, when the history is longer, else half the history)",
    )
    g.add_argument(
        "--lookback-days",
        type=int,
        default=30,
        choices=(7, 30, 60),
        help="Cost Explorer's lookback for the commitment, ending at the end of the sizing window (default 30)",
    )
    g.add_argument(
        "--term",
        choices=TERMS,
        default="reserved_1yr",
        help="the commitment: regional Standard RIs, no upfront, of this term (default reserved_1yr)",
    )
    g.add_argument(
        "--guarantee-percentile",
        type=float,
        default=90.0,
        metavar="PCT",
        help="each production pool's floor covers this percentile of its hourly production GPUs over "
        "the sizing window, in whole nodes (default 90)",
    )
    g.add_argument(
        "--model",
        choices=MODELS,
        default="fluid",
        help="how each setup is run: fluid (free repacking, no boots: fast, a bound) or simulated (the "
        "environment simulator: whole nodes, boots, lending and reclaim, the shortage scenarios "
        "as shortage windows; one run per distinct setup)",
    )
    g.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="--model simulated: run the setups on the Ray cluster at ADDRESS (HOST:PORT, ray://HOST:PORT, "
        "auto, or local) instead of local processes (default: $RAY_ADDRESS when set; needs "
        "pip install 'gpuloan[ray]')",
    )


def wanted(args) -> bool:
    return bool(getattr(args, "demand", None) or getattr(args, "org", False))


def _inputs(args, price_book, cfg):
    from pricing.sources import floor_pricing
    from sim import demand as simdemand
    from sim import traces
    from advise.advisor import production_share
    from advise.org_advisor import OrgInputs, pool_prices

    names = [p.name for p in cfg.pools]
    if args.pool:
        raise ValueError("--pool does not apply with --demand/--org: the organization is advised as a whole")
    if args.demand:
        demand = simdemand.read_demand_dir(args.demand, names)
    else:
        from advise import demand_history

        if args.history_days < 2:
            raise ValueError("--history-days must be at least 2 with --org (a sizing and a report window)")
        demand = {n: demand_history.read(price_book, cfg, n, args.history_days) for n in names}
    if args.days:
        demand = {n: t.window(*traces.parse_days(args.days)) for n, t in demand.items()}
    # the bound's inputs as every benchmark builds them: the same deployment as the simulated rows (node limits)
    prices = pool_prices(price_book, cfg)
    rates, sources = {}, {}
    for n in names:
        itype = prices[n].instance_type
        g = cfg.pool(n).guaranteed
        user = g.rate if (g is not None and g.instance_type == itype and g.price_model == args.term) else None
        r = floor_pricing.floor_rate(
            price_book, itype, cfg.region, args.term, user.usd_per_hour if user else None, user.source if user else None
        )
        if r is not None:
            rates[(itype, cfg.region)] = r.usd_per_hour
            sources[f"{itype}@{cfg.region}"] = f"${r.usd_per_hour:,.4f}/h: {r.source}"
        else:
            sources[f"{itype}@{cfg.region}"] = "not priced: " + floor_pricing.missing_rate_reason(
                price_book, itype, cfg.region, args.term
            )
    if not rates:
        raise OrgAdviceError(f"no {args.term} rate for any pool's instance type: " + "; ".join(sources.values()))
    hours = simdemand.horizon_hours(demand)
    days = hours // 24
    sizing_days = (
        args.sizing_days
        if args.sizing_days is not None
        else (args.lookback_days if days > args.lookback_days else max(1, days // 2))
    )
    if sizing_days < 1 or sizing_days * 24 >= hours:
        raise ValueError(
            f"--sizing-days {sizing_days}: must be at least 1 and shorter than the history "
            f"({hours} h = {hours / 24:.1f} days)"
        )
    window = sizing_days * 24 * 60
    short = [
        (
            str(Path(args.demand) / f"{n}.csv") if args.demand else f"pool '{n}' (CloudWatch history)",
            f"{t.span_minutes / 60:g} h of demand, shorter than the sizing window of {window // 60} h "
            f"(--sizing-days {sizing_days})",
        )
        for n, t in demand.items()
        if t.span_minutes < window
    ]
    if short:
        raise simdemand.OrgDemandError(short)
    share = {
        n: (args.production_share if args.production_share is not None else 100 * production_share(cfg, n)) / 100
        for n in names
    }
    for n, s in share.items():
        if not 0 <= s <= 1:
            raise ValueError(f"--production-share must be between 0 and 100, got {100 * s:g}")
    tiers = {n: str(cfg.pool(n).tier) for n in names}
    demands = simdemand.profiles(demand, tiers, hours, share, args.seed)
    inputs = OrgInputs(
        demands, prices, rates, args.term, sizing_days * 24, args.lookback_days, args.guarantee_percentile, sources
    )
    return inputs, demand, share


def run(args, price_book, cfg) -> dict:
    """The advice document (JSON-ready) by the command's prices (`price_book`). Raises the usual input errors
    (ValueError and kin)."""
    from advise import org_advisor

    if not 0 <= args.guarantee_percentile <= 100:
        raise ValueError(f"--guarantee-percentile must be between 0 and 100, got {args.guarantee_percentile}")
    from gpuloan import sim_args

    settings = sim_args.settings(args)  # its options are refused before any input is read, whatever the model
    engine = None
    if args.model == "simulated":  # Ray connected (or refused) before any input is read or anything computed
        from sim import parallel

        engine = parallel.engine_for(args.jobs, args.ray)
    price_book = price_book.with_config(cfg)  # the config's own instance_prices for the types the book lacks
    inputs, demand, share = _inputs(args, price_book, cfg)
    _refuse_unbuildable_setups(args, price_book, cfg, inputs, demand)
    if args.model == "fluid":
        doc = org_advisor.evaluate(inputs, org_advisor.fluid_runner(inputs.prices), seed=args.seed)
    else:  # every scenario through the environment simulator, identical runs once (EnvironmentRunner's cache)
        from dataclasses import replace

        from sim.cloud import ElasticLatency

        # the elastic path's latency per side, from documented figures (sim/cloud.py, SimSettings.latency)
        settings = replace(settings, latency=ElasticLatency())
        runner = org_advisor.environment_runner(
            price_book, cfg, demand, settings, inputs.prices, production_share=share
        )
        runner.progress = _progress()
        org_advisor.prefill(runner, inputs, engine, seed=args.seed)  # the independent setups at once
        doc = org_advisor.evaluate(inputs, runner, seed=args.seed)
        doc["simulations"] = {"runs": runner.runs, "cache_hits": runner.hits}
    # what every figure of lost work, reclaim and pending time depends on (issue 36); the fluid model loses none
    doc["checkpoint_interval_minutes"] = settings.checkpoint_interval_minutes if args.model != "fluid" else None
    return {"environment": cfg.environment, "demand": {n: t.name for n, t in demand.items()}, **doc}


def _refuse_unbuildable_setups(args, price_book, cfg, inputs, demand) -> None:
    """Every setup the advice runs (its floors sized on the sizing window) checked against the stack's own
    validation before the first simulation, in either model: a floor over the node limit, a Kueue limit or quota
    the setup breaks is refused now, naming the pool and field, not after minutes of simulations (issue 36)."""
    from advise import org_advisor

    # the stack as its user wrote it, with the advised floors: --production-share is a what-if of the advice,
    # checked on its own (0-100, _inputs), not a change the user would deploy
    problems = org_advisor.setup_problems(
        price_book, cfg, demand, inputs, seed=args.seed, instance_facts=price_book.book.instance_facts
    )
    if problems:
        lines = "\n".join(f" - {path}: {msg}" for path, msg in problems)
        raise OrgAdviceError(
            f"{len(problems)} problem(s) in the setups the advice would run, refused before any simulation (the "
            f"floors are p{inputs.guarantee_percentile:g} of each production pool's hourly production GPUs over "
            f"the sizing window, in whole nodes; split such a pool, or lower --guarantee-percentile or "
            f"--production-share):\n{lines}"
        )


def _progress():
    """Progress on stderr (the simulated mode takes a minute or more; stdout stays the result)."""
    import sys
    import time

    t0 = time.perf_counter()
    print("advise: simulating every setup in the environment simulator ...", file=sys.stderr, flush=True)

    def report(runs: int) -> None:
        print(
            f"advise: {runs} environment simulation(s) done ({time.perf_counter() - t0:,.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    return report


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1f} %"


def _pending(row: dict) -> str:
    """The production tier's p95 / p99 total pending minutes per job; "-" where not measured (the fluid model)."""
    p = (row.get("pending_by_tier") or {}).get(Tier.production) or {}
    if p.get("p95_pending_minutes") is None:
        return "-"
    return f"{p['p95_pending_minutes']:,.0f}/{p['p99_pending_minutes']:,.0f}"


def _util(u) -> str:
    return "-" if u is None else f"{100 * u['owned']:.0f} / {100 * u['lent']:.0f} %"


def render(doc: dict) -> None:
    from gpuloan.render import tables

    console = tables.console()
    rec = doc["recommendation"]
    console.print(f"[bold]{doc['model_note']}[/]")
    title = (
        f"the organization's loan, {doc['term']}: sized on the first {doc['sizing_window_hours'] // 24} days, "
        f"reported on the {doc['report_window_hours'] / 24:g} days after (Cost Explorer lookback "
        f"{doc['lookback_days']} days; floors at p{doc['guarantee_percentile']:g} of production demand)"
    )
    _setups(console, title, [rec["report"], *doc["baselines"]])
    floors = ", ".join(f"{n} {f['nodes']} x {f['instance_type']}" for n, f in rec["floors"].items() if f["nodes"])
    ris = (
        ", ".join(
            f"{c['count']} x {c['instance_type']} RI ({c['region']})" for c in rec["commitment"]["reserved_instances"]
        )
        or "none"
    )
    checked = doc.get("sanity_check") or {}
    for note in checked.get("notes", []):
        console.print(f"  [yellow]note: {note}[/]")
    if rec.get("withheld"):
        console.print(
            "[bold red]no recommendation: the figures above contradict each other, so they are not advice:[/]"
        )
        for failure in checked.get("failures", []):
            console.print(f"  [red]- {failure}[/]")
        return
    console.print(
        f"[bold]recommended: floors {floors or 'none'}; organization commitment {ris}, bought at the end "
        f"of the sizing window; the guarantee costs {_pct(rec['price_of_guarantee_pct'])} "
        f"(${rec['price_of_guarantee_usd']:,.0f} over the report window) over karpenter+savings-plan, "
        f"{_pct(rec['price_over_shared_pct'])} (${rec['price_over_shared_usd']:,.0f}) over "
        "karpenter-shared+savings-plan[/]"
    )
    for n, g in rec.get("price_of_each_guarantee", {}).items():
        console.print(f"  {n}'s floor of {g['floor_nodes']} nodes: ${g['usd']:,.0f} ({_pct(g['pct_of_total'])})")
    for t in rec["commitment"]["unpriced"]:
        console.print(f"  [yellow]{t}: no {doc['term']} rate, its usage is not committed[/]")
    for t, src in doc["rate_sources"].items():
        console.print(f"  [dim]{t} {doc['term']}: {src}[/]")
    ksp = next(b for b in doc["baselines"] if b["name"] == "karpenter+savings-plan")
    if ksp.get("plan_not_bought"):
        nb = ksp["plan_not_bought"]
        console.print(
            f"  karpenter+savings-plan buys no plan: the {nb['reserved_instances']} RI(s) Cost Explorer "
            f"sizes on the sizing window would cost ${nb['would_cost_usd_more']:,.0f} more over the "
            "report window"
        )
    console.print(f"cheaper layout for this demand: {rec['cheaper_layout']}")
    if doc.get("checkpoint_interval_minutes") is not None:
        console.print(
            f"every job checkpoints every {doc['checkpoint_interval_minutes']} min "
            "(--checkpoint-interval): the lost work, reclaims and pending times above depend on it"
        )
    console.print(f"[bold]verdict: {rec['verdict']}[/]")
    for name, sc in doc["scenarios"].items():
        if not sc["shortage_hours"]:
            # no shortage hour in the report window: every figure is the table above's
            console.print(f"scenario {name}: no shortage hours in the report window, the same as the table above")
            continue
        _setups(
            console,
            f"scenario {name} ({sc['shortage_hours']} shortage hours in the report window)",
            [sc["recommendation_report"], *sc["baselines"]],
        )


def _setups(console, title, rows) -> None:
    from gpuloan.render import tables

    cols = [
        "setup",
        "cost $",
        "price of\nguarantee",
        "floor used\nowned/lent",
        "commitment\nused",
        "unmet\nGPU-h",
        "unmet prod.\nGPU-h",
        "prod.\ninterr.",
        "prod. pending\np95/p99 min",
    ]
    t = tables.table(title, cols, left=("setup",))
    for r in rows:
        cu = r["commitment_utilization"]
        t.add_row(
            r["name"],
            f"{r['total_cost_usd']:,.0f}",
            _pct(r.get("price_of_guarantee_pct")),
            _util(r["floor_utilization"]),
            "-" if cu is None else f"{100 * cu:.0f} %",
            f"{r['unmet_gpu_hours']:,.0f}",
            f"{r['unmet_production_gpu_hours']:,.0f}",
            str(r["production_interruptions"]),
            _pending(r),
        )
    tables.print_table(console, t)
