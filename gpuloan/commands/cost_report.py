"""`gpuloan cost-report --month YYYY-MM [-s STACK] [--csv FILE] [--json]`: per-pool chargeback from Cost Explorer.

Exit codes (gpuloan/exit_codes.py): 0 report printed (also for an empty month, with a message saying so), 2 bad
input (month, stack file, config) or no AWS credentials, 3 Cost Explorer refused or could not be reached.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuloan import cost_report, exit_codes, stack_arg, stackfile
from gpuloan.render import json_doc
from config import config

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


def run(args, ce=None) -> int:
    try:
        _, path = stackfile.resolve(stack_arg.resolve(args))
        cfg = config.from_stack_yaml(stackfile.load(path), path.name)
        period = cost_report.parse_month(args.month)
    except (stackfile.StackFileError, cost_report.CostReportError, stack_arg.NoStackError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except config.ConfigError as err:
        print(err, file=sys.stderr)
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
    report = cost_report.build_report(cfg, period, fetched, cost_report.tag_status(ce))
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
    return 0
