"""`gpuloan simulate --trace FILE --stack S`: replay a demand trace through our policy and the baselines.

Exit codes: 0 done, 2 bad input (trace, stack, pool, options).
"""

from __future__ import annotations

import sys

from gpuloan import exit_codes, price_args, sim_args, stack_arg
from gpuloan.render import json_doc

EXIT_BAD_INPUT = 2


def register(sub) -> None:
    p = sub.add_parser("simulate", help="replay a GPU demand trace: our policy vs baselines vs the oracle")
    p.add_argument(
        "--trace", required=True, help="CSV: ITP jobs, generic submit_s,duration_s,gpus, or minute,gpus_demanded"
    )
    stack_arg.add(p)
    p.add_argument("--pool", help="pool name (default: the stack's first pool)")
    p.add_argument("--days", help="A:B, days counted from 0, both included (e.g. 1:57)")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="write demand vs capacity and cumulative cost to FILE "
        "(.png, .svg, or .html: one self-contained page), after the results table",
    )
    p.add_argument(
        "--auto-size",
        action="store_true",
        help="size the pool from the trace: floor at the 25th percentile of demand (0 nodes when demand is "
        "below one node a quarter of the time), elastic max at the peak",
    )
    p.add_argument("--sweep-floor", action="store_true", help="run our policy with floors from 0 to the peak")
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="N",
        help="run seeds SEED .. SEED+N-1 (the same events for every policy in each) and report the mean "
        "and spread per policy, with a verdict saying when a difference is within the noise",
    )
    p.add_argument(
        "--warm-up",
        action="store_true",
        help="add a row: our policy with the stack's settings and elastic.warm_up on (docs/policy.md, "
        '"Warm-up"); compare it with the gpuloan row before turning warm-up on',
    )
    p.add_argument(
        "--what-if",
        action="store_true",
        help="add two rows that are not product settings: our policy reading a node idle from the minute "
        "its last pod ends (instant idle signal), with and without the nodes release-on-cost keeps "
        '(docs/benchmarks.md, "What-if")',
    )
    sim_args.add(p)
    price_args.add(p)
    exit_codes.document(
        p,
        {
            0: "the table (or JSON) was printed",
            2: "bad input: the stack, its config or an option (every problem named on stderr), the trace, or no price for a type the pool uses",
        },
        ".venv/bin/gpuloan simulate -s prod --pool training --trace "
        "docs/examples/org-demand/training.csv --days 0:6 --auto-size",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from gpuloan import stackfile
    from sim import pool as simpool
    from sim import runner, traces
    from sim.controllers.lineup import all_policies
    from config import config
    from pricing import checks

    from gpuloan import plot_args

    problem = plot_args.check(args.plot) if args.plot else None
    if problem:  # before the run: a bad path must not cost a long simulation
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        prices = price_args.apply(args)
        trace = traces.read_trace(args.trace)
        if args.days:
            trace = trace.window(*traces.parse_days(args.days))
        _, path = stackfile.resolve(stack_arg.resolve(args))
        cfg = checks.from_stack_yaml(stackfile.load(path), path.name, prices=prices)
        spec = simpool.spec_from_config(prices, cfg, args.pool)
        horizon = None
        if args.auto_size or args.sweep_floor:
            from sim.engine import default_horizon

            horizon = default_horizon(trace)
            if args.auto_size:
                spec = simpool.auto_size(spec, trace, horizon_minutes=horizon)
        settings = sim_args.settings(args)
        if args.seeds < 1:
            raise ValueError("--seeds must be >= 1")
        if args.seeds > 1 and (args.sweep_floor or args.plot):
            raise ValueError("--seeds runs the comparison table; use one seed with --sweep-floor or --plot")
    except (traces.TraceError, config.ConfigError, simpool.PoolError, ValueError, stack_arg.NoStackError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except stackfile.StackFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not getattr(trace, "jobs", None) and not getattr(trace, "gpus_demanded", None):
        print(f"error: trace {trace.name} has no demand in the chosen days", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.sweep_floor:
        return _sweep(args, spec, trace, settings)
    if args.seeds > 1:
        doc = _with_progress(
            lambda progress: runner.compare_seeds(
                spec,
                trace,
                settings,
                args.seeds,
                progress=progress,
                policies=lambda: all_policies(spec, warm_up=args.warm_up, what_if=args.what_if),
            ),
            args.json,
        )
        if args.json:
            print(json_doc.dumps(doc))
        else:
            _seeds_table(doc)
        return 0
    policies = all_policies(spec, warm_up=args.warm_up, what_if=args.what_if)
    doc = _with_progress(
        lambda progress: runner.compare(spec, trace, settings, progress=progress, policies=policies), args.json
    )
    series = doc.pop("_series")
    doc["dominated_by"] = runner.dominated_by(doc)
    doc["verdict"] = runner.single_verdict(doc)
    peak_gpus = spec.peak_gpus
    big = runner.jobs_larger_than(trace, peak_gpus)
    doc["jobs_larger_than_pool"] = big["count"]
    doc["jobs_larger_than_pool_sizes"] = big["sizes"]  # GPUs -> jobs
    doc["price_source"] = spec.prices.price_source(spec.region)
    if args.json:
        print(json_doc.dumps(doc))
    else:
        _table(doc, big)
        print(doc["price_source"])
    if args.plot:  # after the table: the figures are worth reading while the plot is drawn
        from gpuloan import plot_args
        from sim.plot import plot

        sys.stdout.flush()
        written = plot_args.write(plot, {**doc, "_series": series}, args.plot)
        print(f"wrote the plot to {written}", file=sys.stderr)
    return 0


def _with_progress(fn, quiet: bool):
    """A rich progress bar on stderr for long runs (not when printing JSON to a pipe)."""
    if quiet or not sys.stderr.isatty():
        return fn(None)
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("simulating", total=100)

        def progress(done, total, name):
            bar.update(task, completed=100 * done / max(1, total), description=f"simulating {name}")

        return fn(progress)


def _table(doc: dict, big: dict | None = None) -> None:
    from gpuloan.render import tables
    from sim import runner

    p = doc["pool"]
    title = (
        f"{doc['trace']} on pool {p['name']}: floor {p['floor_nodes']} x {p['floor_type']}, elastic "
        f"{p['capacity']} up to {max(p['spot_max_nodes'], p['on_demand_max_nodes'])} x "
        f"{p['spot_type'] or p['on_demand_type']}; oracle ${doc['oracle_cost_usd']:,.0f}"
    )
    jobs = doc["policies"][0].get("p95_wait_minutes") is not None
    wait = "wait min\np50/p95/p99"
    cols = ["policy", "total\n$", "guaranteed\n$", "spot\n$", "on-demand\n$", "cost/\noracle", "GPU-h\nserved"]
    cols += [wait] if jobs else []
    cols += ["unmet\nGPU-h", "interrup-\ntions", "lost\nGPU-h", "cap held\nmin"]
    # On a narrow terminal the breakdowns go first; the total, cost/oracle and the waits stay longest (the
    # cap-held minutes are also in the verdict line below the table).
    table = tables.table(
        title,
        cols,
        whole=("policy",),
        drop=(
            "lost\nGPU-h",
            "GPU-h\nserved",
            "guaranteed\n$",
            "on-demand\n$",
            "spot\n$",
            "interrup-\ntions",
            "cap held\nmin",
            "unmet\nGPU-h",
            wait,
            "cost/\noracle",
        ),
    )
    for r in doc["policies"]:
        name = r["name"] if r["floor_nodes"] == p["floor_nodes"] else f"{r['name']} (floor {r['floor_nodes']})"
        row = [
            name,
            f"{r['total_cost_usd']:,.0f}",
            f"{r['guaranteed_cost_usd']:,.0f}",
            f"{r['elastic_spot_cost_usd']:,.0f}",
            f"{r['elastic_on_demand_cost_usd']:,.0f}",
            f"{r['cost_over_oracle']:.2f}" if r["cost_over_oracle"] is not None else "-",
            f"{r['gpu_hours_served']:,.0f}",
        ]
        if jobs:
            row.append(f"{r['p50_wait_minutes']:g}/{r['p95_wait_minutes']:g}/{r['p99_wait_minutes']:g}")
        row += [
            f"{r['unmet_gpu_hours']:,.1f}",
            str(r["interruptions"]),
            f"{r['lost_gpu_hours']:,.1f}",
            "-" if r.get("budget_cap_held_minutes") is None else f"{r['budget_cap_held_minutes']:,}",
        ]
        table.add_row(*row)
    console = tables.console()
    if big and big["count"]:
        console.print(
            f"[yellow]warning: {runner.larger_jobs_words(big)}: they never run; use --auto-size or a "
            "larger pool[/yellow]"
        )
    tables.print_table(console, table)
    console.print(doc["verdict"])


def _sweep(args, spec, trace, settings) -> int:
    from sim import pool as simpool
    from sim import runner
    from sim.engine import default_horizon
    from sim.controllers.gpuloan import GpuLoan

    horizon = default_horizon(trace)
    peak = spec.floor_peak_nodes  # in floor nodes, which may be of a smaller size than the elastic ones
    step = max(1, peak // 12)
    floors = sorted(set(list(range(0, peak + 1, step)) + [peak]))
    print(f"sweeping {len(floors)} floors from 0 to {peak} node(s) ...", file=sys.stderr)  # progress: stderr
    rows = []
    for floor in floors:
        s = simpool.with_floor(spec, floor)
        _, m = runner.run_one(s, trace, GpuLoan(), settings, horizon)
        rows.append(
            {
                "floor_nodes": floor,
                "floor_gpus": floor * spec.floor_node_gpus,
                **{
                    k: m[k]
                    for k in (
                        "total_cost_usd",
                        "cost_over_oracle",
                        "p95_wait_minutes",
                        "unmet_gpu_hours",
                        "interruptions",
                    )
                },
            }
        )
    doc = {
        "trace": trace.name,
        "pool": spec.name,
        "sweep_floor": rows,
        "price_source": spec.prices.price_source(spec.region),
    }
    if args.json:
        print(json_doc.dumps(doc))
        if args.plot:
            _plot_sweep(args, doc, spec, trace, settings, horizon)
        return 0
    from gpuloan.render import tables

    table = tables.table(
        f"floor sweep: {trace.name} on pool {spec.name} (our policy)",
        ("floor nodes", "floor GPUs", "total $", "cost/oracle", "p95 wait min", "unmet GPU-h", "interruptions"),
        left=("floor nodes",),
    )  # figures never split; columns drop instead
    for r in rows:
        table.add_row(
            str(r["floor_nodes"]),
            str(r["floor_gpus"]),
            f"{r['total_cost_usd']:,.0f}",
            f"{r['cost_over_oracle']:.2f}",
            str(r["p95_wait_minutes"]),
            f"{r['unmet_gpu_hours']:,.1f}",
            str(r["interruptions"]),
        )
    tables.print_table(tables.console(), table)
    print(spec.prices.price_source(spec.region))
    if args.plot:  # after the table, as for the comparison
        _plot_sweep(args, doc, spec, trace, settings, horizon)
    return 0


def _plot_sweep(args, doc, spec, trace, settings, horizon) -> None:
    """The cost vs p95 wait frontier of the sweep, with the baselines on the stack's pool as reference points (run
    only for the plot: the sweep's table and JSON stay our policy's)."""
    from gpuloan import plot_args
    from sim import runner
    from sim.plot import plot_frontier
    from sim.controllers.gpuloan import GpuLoan
    from sim.controllers.lineup import all_policies

    sys.stdout.flush()
    baselines = [c for c in all_policies(spec) if not isinstance(c, GpuLoan)]
    print(f"running {len(baselines)} baseline(s) for the plot ...", file=sys.stderr)
    ref = runner.compare(spec, trace, settings, policies=baselines, horizon=horizon)["policies"]
    written = plot_args.write(plot_frontier, {**doc, "baselines": ref}, args.plot)
    print(f"wrote the plot to {written}", file=sys.stderr)


def _seeds_table(doc: dict) -> None:
    from gpuloan.render import tables

    p = doc["pool"]
    seeds = doc["seeds"]
    title = (
        f"{doc['trace']} on pool {p['name']} (floor {p['floor_nodes']}), seeds {seeds[0]}-{seeds[-1]}: "
        f"mean ± sd; oracle ${doc['oracle_cost_usd']:,.0f}"
    )
    jobs = doc["summary"][0].get("p95_wait_minutes") is not None
    cols = ["policy", "total $\nmean ± sd", "cost/\noracle", "elastic\ncost/oracle"]
    cols += ["wait p50\nmin", "wait p95\nmin"] if jobs else []
    cols += ["unmet\nGPU-h", "interrup-\ntions", "node\nlaunches"]
    # A "1,103 ± 12" cell and its header never split (a spread on the next line reads as another row's figure):
    # at 80 columns whole columns are left out instead, the least read first, and named under the table.
    table = tables.table(
        title,
        cols,
        whole=("policy",),
        drop=(
            "node\nlaunches",
            "interrup-\ntions",
            "elastic\ncost/oracle",
            "wait p50\nmin",
            "unmet\nGPU-h",
            "wait p95\nmin",
            "cost/\noracle",
        ),
    )

    def pm(r, key, fmt):
        if r[key] is None:
            return "-"
        return f"{format(r[key], fmt)} ± {format(r[key + '_sd'], fmt)}"

    for r in doc["summary"]:
        name = r["name"] if r["floor_nodes"] == p["floor_nodes"] else f"{r['name']} (floor {r['floor_nodes']})"
        row = [
            name,
            pm(r, "total_cost_usd", ",.0f"),
            pm(r, "cost_over_oracle", ".2f"),
            pm(r, "elastic_cost_over_oracle", ".2f"),
        ]
        if jobs:
            row += [pm(r, "p50_wait_minutes", ".1f"), pm(r, "p95_wait_minutes", ".1f")]
        row += [pm(r, "unmet_gpu_hours", ",.1f"), pm(r, "interruptions", ".1f"), pm(r, "node_launches", ".0f")]
        table.add_row(*row)
    console = tables.console()
    tables.print_table(console, table)
    for i, r in enumerate(doc["summary"]):
        held = [run[i].get("budget_cap_held_minutes") or 0 for run in doc["runs"]]
        if any(held):  # named whenever the cap held anything, per seed
            console.print(
                f"the budget cap held {r['name']}'s scale-ups for {', '.join(f'{h:,}' for h in held)} "
                f"minutes (seeds {doc['seeds'][0]}-{doc['seeds'][-1]})"
            )
    for v in doc["verdicts"]:
        console.print(
            f"{v['ours']} vs {v['baseline']}: {v['verdict']} (cost {v['cost_diff_pct']:+.1f} % "
            f"± ${v['cost_noise_usd'] or 0:,.0f}, {v['service_metric']} {v['service_diff']:+.2f} "
            f"± {v['service_noise'] or 0:.2f})"
            if v["cost_diff_pct"] is not None
            else f"{v['ours']} vs {v['baseline']}: {v['verdict']} (cost {v['cost_diff_usd']:+,.0f} $, "
            f"{v['service_metric']} {v['service_diff']:+.2f})"
        )
