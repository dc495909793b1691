"""`gpuloan cost-report --month YYYY-MM [-s STACK] [--csv FILE] [--json] [--daily-csv FILE] [--plot FILE]`: per-pool
chargeback from Cost Explorer, with the loan (floor hours other pools used, from the LoanGpus metric) moved from
the owner's bill to the borrower's.

Exit codes (gpuloan/exit_codes.py): 0 report printed (also for an empty month, with a message saying so), 2 bad
input (month, stack file, config) or no AWS credentials, 3 Cost Explorer refused or could not be reached.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from gpuloan import cost_report, exit_codes, loan_bill, plot_args, stack_arg, stackfile
from gpuloan.render import json_doc
from config import config
from pricing import checks
from pricing.sources import catalog

EXIT_INVALID = 2
EXIT_AWS = 3
# Cost Explorer's API has a single endpoint, in us-east-1, whatever region the stack runs in.
CE_REGION = "us-east-1"


def register(sub) -> None:
    p = sub.add_parser("cost-report", help="one month's spend per pool (guaranteed vs elastic) against the budgets")
    p.add_argument("--month", required=True, metavar="YYYY-MM", help="calendar month, e.g. 2026-07")
    stack_arg.add(p)
    p.add_argument("--csv", type=Path, metavar="FILE", help="also write the rows as CSV to FILE")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument(
        "--daily-csv",
        type=Path,
        metavar="FILE",
        help="write the loan per pool and day (borrowed / lent GPU-hours and dollars) as CSV to FILE",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="draw each pool's month stacked (floor kept, borrowed, elastic, "
        "other) against what Cost Explorer billed it; .png, .svg or .html",
    )
    exit_codes.document(
        p,
        {
            0: "report printed (an empty month says so)",
            2: "bad input: the stack, its config or an option (every problem named on stderr), the month, or no AWS credentials",
            3: "Cost Explorer refused the query or could not be reached",
        },
        ".venv/bin/gpuloan cost-report -s prod --month 2026-11",
    )
    p.set_defaults(func=run)


def run(args, ce=None, cloudwatch=None) -> int:
    try:
        _, path = stackfile.resolve(stack_arg.resolve(args))
        prices = catalog.Prices.resolve()  # the prices in force, read once here and passed down
        cfg = checks.from_stack_yaml(stackfile.load(path), path.name, prices=prices)
        prices = prices.with_config(cfg)  # the config's own instance_prices for the types the book lacks
        period = cost_report.parse_month(args.month)
    except (stackfile.StackFileError, cost_report.CostReportError, stack_arg.NoStackError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except config.ConfigError as err:
        print(err, file=sys.stderr)
        return EXIT_INVALID
    plot = getattr(args, "plot", None)
    if plot and plot_args.check(plot):
        print(f"error: {plot_args.check(plot)}", file=sys.stderr)
        return EXIT_INVALID
    if ce is None:
        import boto3

        if exit_codes.credentials_missing():  # as `prices refresh`: the user's setup, not an AWS failure
            print(f"error: {exit_codes.NO_CREDENTIALS}", file=sys.stderr)
            return EXIT_INVALID
        ce = boto3.client("ce", region_name=CE_REGION)
    try:
        print(f"reading {period.month} from Cost Explorer ...", file=sys.stderr)  # progress: stderr, never stdout
        fetched = cost_report.fetch(ce, cfg.environment, period)
    except cost_report.CostReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_AWS
    loan = None
    if loan_bill.series(cfg):  # Kueue on: the policy function publishes the loan's usage
        if cloudwatch is None:
            import boto3

            cloudwatch = boto3.client("cloudwatch", region_name=cfg.region)
        try:
            print("reading the loan's usage (LoanGpus) from CloudWatch ...", file=sys.stderr)
            used = loan_bill.read(cloudwatch, cfg, period.start, period.end)
            loan = loan_bill.build(
                prices,
                cfg,
                used,
                period.start,
                period.end,
                today=period.end - dt.timedelta(days=1) if period.partial else None,
            )
        except loan_bill.LoanBillError as err:  # the bill stands without the loan, saying why
            print(f"warning: the loan is left out: {err}", file=sys.stderr)
    report = cost_report.build_report(cfg, period, fetched, cost_report.tag_status(ce), loan)
    if args.json:
        print(json_doc.dumps(cost_report.to_json(report), sort_keys=True))
    else:
        print(cost_report.render_table(report))
    if args.csv:
        try:
            cost_report.write_csv(report, args.csv)
        except OSError as err:
            print(f"error: --csv {args.csv}: {err.strerror}", file=sys.stderr)
            return EXIT_INVALID
        print(f"wrote {len(report.all_rows)} rows to {args.csv}", file=sys.stderr if args.json else sys.stdout)
    daily = getattr(args, "daily_csv", None)
    if daily:
        try:
            n = cost_report.write_daily_csv(report, daily)
        except OSError as err:
            print(f"error: --daily-csv {daily}: {err.strerror}", file=sys.stderr)
            return EXIT_INVALID
        print(f"wrote {n} rows to {daily}", file=sys.stderr if args.json else sys.stdout)
    if plot:
        from gpuloan import loan_plot

        written = plot_args.write(loan_plot.plot, cost_report.to_json(report), plot)
        print(f"wrote the plot to {written}", file=sys.stderr)
    return 0
