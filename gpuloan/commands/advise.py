"""`gpuloan advise -s STACK`: how big each pool's floor should be, and how to pay it (docs/floor.md).

Demand comes from one of: `--trace FILE` (ITP jobs, generic jobs, or a minute,gpus_demanded series),
`--series FILE` (a minute,gpus_demanded series), or, by default, the stack's own history: the metrics its policy
function published to CloudWatch over the last `--history-days` days (needs AWS credentials).

Exit codes (gpuloan/exit_codes.py): 0 done, 2 bad input (stack, pool, demand, options, prices) or no AWS
credentials, 3 AWS refused or could not be reached.
"""

from __future__ import annotations

import sys

from gpuloan.commands import advise_org
from gpuloan import exit_codes, price_args, sim_args, stack_arg
from gpuloan.render import json_doc
from pricing.sources import catalog

EXIT_BAD_INPUT = 2
EXIT_AWS = 3


def register(sub) -> None:
    p = sub.add_parser("advise", help="recommend each pool's floor size and payment from its demand (simulated)")
    stack_arg.add(p)
    p.add_argument("--pool", action="append", help="pool to advise on (repeatable; default: every pool)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", help="demand: a job trace (ITP or submit_s,duration_s,gpus) or a series CSV")
    src.add_argument("--series", help="demand: a minute,gpus_demanded CSV")
    src.add_argument(
        "--demand",
        metavar="DIR",
        help="the whole environment's demand: one <pool>.csv per pool (job trace or minute,gpus_demanded); "
        "advises every pool's floor and one organization commitment together",
    )
    p.add_argument(
        "--history-days",
        type=int,
        default=30,
        metavar="N",
        help="without --trace/--series: read the stack's own CloudWatch metrics of the last N days (default 30)",
    )
    p.add_argument("--days", help="A:B, days of the trace to use, counted from 0, both included")
    p.add_argument("--target-p95-wait", type=float, metavar="MINUTES", help="overrides service_target.p95_wait_minutes")
    p.add_argument("--target-unmet-pct", type=float, metavar="PCT", help="overrides service_target.unmet_pct")
    p.add_argument(
        "--target-production-interruptions",
        type=float,
        metavar="N",
        help="overrides service_target.production_interruptions_per_month",
    )
    p.add_argument(
        "--production-share",
        type=float,
        metavar="PCT",
        help="share of the demand that is production work (default: the pool's service target, else "
        "100 for tier production, 0 otherwise)",
    )
    p.add_argument(
        "--peak-from-demand",
        action="store_true",
        help="size the pool's peak (floor + elastic max) to the demand's peak instead of the stack's",
    )
    p.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="simulate N floor sizes (with --demand --model simulated: N setups) at once in separate "
        "processes (default 1; with --demand, the CPUs; results do not change)",
    )
    sim_args.add(p)
    p.add_argument("--json", action="store_true", help="print one JSON document with every point")
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="cost vs floor size per payment (one file per pool: POOL- prefix when several pools)",
    )
    price_args.add(p)
    advise_org.add_arguments(p)
    exit_codes.document(
        p,
        {
            0: "advice printed",
            1: "--demand/--org: figures printed, advice withheld (they failed the sanity check)",
            2: "bad input: the stack, its config or an option (every problem named on stderr), the demand, prices, or no AWS credentials for the stack's history",
            3: "AWS refused or could not be reached (CloudWatch, reading the history)",
        },
        ".venv/bin/gpuloan advise -s prod --demand docs/examples/org-demand --sizing-days 3 "
        "--lookback-days 7 --production-share 30",
    )
    p.set_defaults(func=run)


def _target(args, base):
    changes = {}
    for opt, field in (
        ("target_p95_wait", "p95_wait_minutes"),
        ("target_unmet_pct", "unmet_pct"),
        ("target_production_interruptions", "production_interruptions_per_month"),
    ):
        value = getattr(args, opt)
        if value is not None:
            if value < 0:
                raise ValueError(f"--{opt.replace('_', '-')} must be >= 0")
            changes[field] = value
    return base.model_copy(update=changes) if changes else base


def _demand(args, prices, cfg, pool_name):
    from sim import traces

    if args.trace or args.series:
        trace = traces.read_trace(args.trace or args.series)
        if args.series and getattr(trace, "fmt", "") != "series":
            raise ValueError(f"--series {args.series}: not a minute,gpus_demanded file (use --trace for job traces)")
    else:
        from advise import demand_history

        if args.history_days < 1:
            raise ValueError("--history-days must be at least 1")
        trace = demand_history.read(prices, cfg, pool_name, args.history_days)
    if args.days:
        trace = trace.window(*traces.parse_days(args.days))
    return trace


def run(args) -> int:
    from gpuloan import stackfile
    from advise import advisor
    from sim import parallel
    from sim import traces
    from advise.org_advisor import OrgAdviceError
    from config import config
    from pricing import checks

    try:
        prices = price_args.apply(args)
        stack, path = stackfile.resolve(stack_arg.resolve(args))
        cfg = checks.from_stack_yaml(stackfile.load(path), path.name, prices=prices)
        prices = prices.with_config(cfg)
        if args.jobs is not None and args.jobs < 1:
            raise ValueError("--jobs must be at least 1")
        if getattr(args, "org", False) and not args.demand and exit_codes.credentials_missing():
            raise ValueError(f"{exit_codes.NO_CREDENTIALS} (--demand DIR; --org reads every pool's CloudWatch history)")
        if advise_org.wanted(args):
            return _run_org(args, prices, cfg, stack)
        names = [p.name for p in cfg.pools]
        pools = args.pool or names
        for name in pools:
            if name not in names:
                raise ValueError(f"no pool '{name}' in this stack; pools: {', '.join(names)}")
        if not (args.trace or args.series) and exit_codes.credentials_missing():
            raise ValueError(
                f"{exit_codes.NO_CREDENTIALS} (--trace/--series/--demand; without them advise "
                f"reads the stack's own CloudWatch history)"
            )
        docs = []
        for name in pools:
            trace = _demand(args, prices, cfg, name)
            target = _target(args, cfg.pool(name).service_target)
            docs.append(
                advisor.advise(
                    prices,
                    cfg,
                    name,
                    trace,
                    target=target,
                    production_share_pct=args.production_share,
                    settings=sim_args.settings(args),
                    peak_from_demand=args.peak_from_demand,
                    jobs=args.jobs or 1,
                    progress=_progress(name),
                )
            )
    except (
        stackfile.StackFileError,
        config.ConfigError,
        traces.TraceError,
        advisor.AdviceError,
        OrgAdviceError,
        catalog.PriceSourceError,
        stack_arg.NoStackError,
        ValueError,
        parallel.ParallelError,
    ) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except _aws_errors() as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_AWS
    if args.plot:
        for doc in docs:
            doc["plot"] = args.plot if len(docs) == 1 else _prefixed(args.plot, doc["pool"])
    if args.json:
        print(json_doc.dumps({"stack": stack, "price_source": prices.price_source(cfg.region), "pools": docs}))
    else:
        for doc in docs:
            render(doc)
        print(prices.price_source(cfg.region))
    if args.plot:  # after the table, as `simulate` does, and named on stderr: stdout stays the result
        from advise.advisor_plot import plot

        sys.stdout.flush()
        for doc in docs:
            plot(doc, doc["plot"])
            print(f"wrote the plot to {doc['plot']}", file=sys.stderr)
    return 0


def _run_org(args, prices, cfg, stack) -> int:
    """The organization mode: errors are raised to run()'s handlers, the document printed here."""
    if args.plot:
        raise ValueError(
            "--plot is not available with --demand/--org (make bench-org draws the organization's picture)"
        )
    doc = advise_org.run(args, prices, cfg)
    if args.json:
        print(json_doc.dumps({"stack": stack, "price_source": prices.price_source(cfg.region), **doc}))
    else:
        advise_org.render(doc)
        print(prices.price_source(cfg.region))
    if doc["recommendation"].get("withheld"):  # the figures contradict each other (advise/sanity.py)
        print(f"error: {doc['recommendation']['withheld']}", file=sys.stderr)
        return exit_codes.PARTIAL
    return 0


def _progress(pool: str):
    """Progress on stderr (a sweep takes seconds to minutes; stdout stays the result): one line per floor size."""
    import time

    t0 = time.perf_counter()

    def report(done: int, total: int) -> None:
        print(
            f"advise: pool {pool}: floor size {done}/{total} simulated ({time.perf_counter() - t0:,.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    return report


def _aws_errors():
    from advise.demand_history import HistoryError

    return (HistoryError,)


def _prefixed(path: str, pool: str) -> str:
    from pathlib import Path

    p = Path(path)
    return str(p.with_name(f"{pool}-{p.name}"))


def render(doc: dict) -> None:
    from gpuloan.render import tables

    console = tables.console()
    payments = list(doc["rates"])
    t = doc["target"]
    floor_gpus = doc.get("floor_gpus_per_node", doc["gpus_per_node"])  # the floor's own size
    title = (
        f"pool {doc['pool']}: monthly cost vs floor size ({doc['floor_instance_type']}, {floor_gpus} "
        f"GPUs/node) on {doc['demand']}; target p95 wait <= {t['p95_wait_minutes']:g} min, unmet <= "
        f"{t['unmet_pct']:g} %, production interruptions <= {t['production_interruptions_per_month']:g}/month "
        f"(production share {100 * doc['production_share']:.0f} %)"
    )
    paid = [f"{p}\n$/mo" for p in payments]
    cols = ["floor\nnodes", "elastic\n$/mo", *paid, "p95 wait\nmin", "unmet\n%", "prod. int.\n/mo", "meets"]
    # On a narrow terminal the service columns a reader checks against the target stay, the elastic share goes
    # first, then the payments from the last (the recommended one is named in the summary line below).
    table = tables.table(title, cols, drop=("elastic\n$/mo", "prod. int.\n/mo", *reversed(paid[1:]), "unmet\n%"))
    rec = doc["recommendation"] or {}
    for pt in doc["points"]:
        cells = [str(pt["floor_nodes"]), f"{pt['elastic_monthly_usd']:,.0f}"]
        for p in payments:
            text = f"{pt['monthly_usd'][p]:,.0f}"
            if rec.get("floor_nodes") == pt["floor_nodes"] and rec.get("payment") == p:
                text = f"[bold green]{text} *[/]"
            cells.append(text)
        cells += [
            "-" if pt["p95_wait_minutes"] is None else f"{pt['p95_wait_minutes']:g}",
            f"{pt['unmet_pct']:.2f}",
            f"{pt['production_interruptions_per_month']:.1f}",
            "yes" if pt["meets_target"] else "no",
        ]
        table.add_row(*cells)
    tables.print_table(console, table)
    # Prose wraps between words at the terminal's width (a figure is one word, so it stays whole).
    console.print(f"[bold]{doc['summary']}[/]")
    for line in doc.get("budget_lines", ()):
        # a recommendation over a budget: its own line, marked (the JSON has over_pool_budget and
        # over_environment_budget)
        console.print(f"[bold red]{line['text']}[/]" if line["over"] else f"  {line['text']}")
    big = doc["jobs_larger_than_pool"]
    if big["count"]:
        from sim.runner import larger_jobs_words

        console.print(
            f"[yellow]{larger_jobs_words(big)}: they never run; raise elastic.max_nodes or use --peak-from-demand[/]"
        )
    if not doc["production_on_spot"] and doc["production_share"] > 0:
        console.print(
            "  production work stays off spot (pool not in scheduling.kueue.production_spot_pools): "
            "spot reclaims interrupt none of it"
        )
    if doc.get("verdict"):
        console.print(doc["verdict"])
    for p, words in doc["break_even"].items():
        console.print(f"  {words}")
    for p, r in doc["rates"].items():
        console.print(f"  [dim]{p}: ${r['usd_per_hour']:,.4f}/h — {r['source']}[/]")
    for p, why in doc["no_rate"].items():
        console.print(f"  [yellow]{p}: not priced[/] — {why}")
