"""`gpuloan ci-runner STACK...`: the `runs-on` of each stack's pulumi jobs, one `<stack>=<JSON>` line each.

The lines are GitHub step outputs (appended to $GITHUB_OUTPUT); a job reads one with
`runs-on: ${{ fromJSON(needs.runners.outputs.<stack>) }}`.

The workflows read it (a `runners` job) so the jobs that reach the cluster API run where the stack's config says
they can (github.cluster_access, docs/gitops.md): self-hosted runners inside the VPC by label, or hosted runners
whose egress CIDRs the endpoint allows.
"""

from __future__ import annotations

import json
import sys

from gpuloan import exit_codes, stackfile
from gpuloan.commands.validate import EXIT_INVALID, load_config
from config import config
from pricing.sources import catalog
from stacks.gitops.github_oidc import runs_on


def register(sub) -> None:
    p = sub.add_parser("ci-runner", help="print each stack's CI runs-on (<stack>=<JSON>) from its github config")
    p.add_argument("stacks", nargs="+", metavar="STACK_OR_FILE")
    exit_codes.document(
        p,
        {
            0: "one line per stack printed",
            2: "bad input: the stack, its config or an option (every problem named on stderr)",
        },
        ".venv/bin/gpuloan ci-runner dev prod",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    # The money rules validate with the prices in force ($GPULOAN_PRICE_FILE, the project's file, the cache, the
    # snapshot), read once for every stack.
    prices = catalog.Prices.resolve()
    out = {}
    for name in args.stacks:
        try:
            stack, cfg = load_config(prices, name)
        except (stackfile.StackFileError, config.ConfigError) as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_INVALID
        if cfg.github is None:
            print(f"error: {stack} has no gpuloan:github block (docs/gitops.md)", file=sys.stderr)
            return EXIT_INVALID
        out[stack] = runs_on(cfg)
    for stack, value in out.items():
        print(f"{stack}={json.dumps(value, separators=(',', ':'))}")
    return 0
