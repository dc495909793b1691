"""`gpuloan cost-diff --base REF [--stack S ...] [--markdown]`: resources and monthly GPU cost, base vs working tree.

Exit 0 when the diff was made (a base whose config fails validation is reported, not an error), 2 when the
working tree's config of a stack fails validation or the diff cannot be made (unknown ref, not a git repo).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuloan import price_args
from gpuloan.cmd_validate import EXIT_INVALID
from stacks import catalog


def register(sub) -> None:
    p = sub.add_parser("cost-diff", help="resources added/changed/removed and the monthly cost change vs a git ref")
    p.add_argument("--base", required=True, metavar="REF", help="git ref to compare against (branch, tag, commit)")
    p.add_argument("--stack", action="append", metavar="S", help="a stack to compare (repeatable); default: all")
    p.add_argument("--markdown", action="store_true", help="print a Markdown PR comment instead of plain text")
    price_args.add(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from gpuloan import cost_diff

    try:
        price_args.apply(args)
        diffs = cost_diff.cost_diff(Path.cwd(), args.base, args.stack)
    except (cost_diff.CostDiffError, catalog.PriceSourceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    render = cost_diff.render_markdown if args.markdown else cost_diff.render_text
    sys.stdout.write(render(diffs, args.base))
    invalid = [d.stack for d in diffs if d.head_invalid]
    if invalid:
        print(f"the working tree's config of {', '.join(invalid)} does not validate", file=sys.stderr)
        return EXIT_INVALID
    return 0
