"""`gpuloan cost-diff --base REF [-s STACK ...] [--format markdown|table|json] [--fail-above $N|N%]`: resources and
monthly cost, base vs working tree, with an Infracost-style headline (gpuloan/render/cost_comment.py).

Exit 0 when the diff was made (a base whose config fails validation is reported, not an error), 2 when the
working tree's config of a stack fails validation or the diff cannot be made (unknown ref, not a git repo),
3 when the fixed monthly cost of all stacks rises above `--fail-above` (a required check fails on it), 4 when there
is no price file at all (no `--prices`, no $GPULOAN_PRICE_FILE, no committed gpuloan-prices.json, no cache): the
diff is still printed, opening with a warning that no cost was compared, and the check fails so that nobody
mistakes "unknown" for "no change" (docs/gitops.md), 5 with `--fail-on-blockers` when the change has a rollout blocker
(offline/rollout.py) that `--accept-blockers` does not accept (the deploy workflow's gate). Both sides are priced
with the working tree's price file.
With `--format markdown` and nothing changed (no resource, no money figure), nothing is printed on stdout (the
workflow then leaves the PR comment alone) and stderr says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuloan import exit_codes, price_args
from gpuloan.commands.validate import EXIT_INVALID
from pricing.sources import catalog

EXIT_ABOVE_THRESHOLD = 3
EXIT_NO_PRICES = 4
EXIT_BLOCKERS = 5
NO_PRICES = (
    "No price file: no cost was compared. This repository commits no gpuloan-prices.json beside Pulumi.yaml "
    "(and no --prices / GPULOAN_PRICE_FILE was given), so every money figure below is unknown, not "
    "unchanged. Run `gpuloan prices refresh -s STACK` with AWS credentials and commit gpuloan-prices.json, "
    "or let the scheduled price-refresh workflow open that pull request (docs/prices.md)."
)


def no_prices_banner(fmt: str, text: str) -> str:
    """The rendered diff with the no-price warning where a reader sees it first."""
    if fmt == "markdown":
        first, _, rest = text.partition("\n")  # the marker line stays first: the workflow finds its comment by it
        return f"{first}\n> [!WARNING]\n> **{NO_PRICES}**\n\n{rest}"
    if fmt == "json":
        import json

        from gpuloan.render import json_doc

        doc = json.loads(text)
        doc["no_price_file"] = NO_PRICES
        return json_doc.dumps(doc, sort_keys=True) + "\n"
    return f"WARNING: {NO_PRICES}\n\n{text}"


def register(sub) -> None:
    p = sub.add_parser("cost-diff", help="resources added/changed/removed and the monthly cost change vs a git ref")
    p.add_argument("--base", required=True, metavar="REF", help="git ref to compare against (branch, tag, commit)")
    p.add_argument("-s", "--stack", action="append", metavar="S", help="a stack to compare (repeatable); default: all")
    p.add_argument(
        "--format",
        choices=("markdown", "table", "json"),
        default=None,
        help="markdown: the PR comment; table: plain text (default); json: one document",
    )
    p.add_argument("--markdown", action="store_true", help="same as --format markdown")
    p.add_argument(
        "--fail-above",
        metavar="$N|N%",
        default=None,
        help="exit 3 when the fixed monthly cost of all stacks rises by more than $N (or N percent)",
    )
    p.add_argument(
        "--fail-on-blockers",
        action="store_true",
        help='exit 5 when the change has a rollout blocker (docs/gitops.md, "Rollout blockers")',
    )
    p.add_argument(
        "--accept-blockers",
        metavar="WHY",
        default=None,
        help="the blockers are meant (the Rollout-Blockers-Accepted commit trailer); never accepts one "
        "CI's deploy role cannot apply",
    )
    p.add_argument(
        "--guardrail-config",
        metavar="PATH",
        default=None,
        help="write the guardrails pack's rollout-blockers config (pulumi up --policy-pack-config)",
    )
    price_args.add(p)
    exit_codes.document(
        p,
        {
            0: "the diff was made (a base that fails validation is reported, not an error)",
            2: "the working tree's config fails validation, the ref is unknown, or a -s stack exists on neither side",
            3: "the fixed monthly cost rose above --fail-above",
            4: "no price at all (no price file, no cache, the snapshot turned off): no cost was compared",
        },
        ".venv/bin/gpuloan cost-diff --base main --markdown",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from gpuloan.render import cost_comment
    from offline import diff as cost_diff

    fmt = args.format or ("markdown" if args.markdown else "table")
    threshold = None
    if args.fail_above is not None:
        try:
            threshold = cost_comment.parse_threshold(args.fail_above)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_INVALID
    try:
        prices = price_args.apply(args)
        print(
            f"previewing {', '.join(args.stack) if args.stack else 'every stack'} at {args.base} and in the "
            "working tree ...",
            file=sys.stderr,
        )
        diffs = cost_diff.cost_diff(Path.cwd(), args.base, args.stack, price_file=args.price_file)
    except (cost_diff.CostDiffError, catalog.PriceSourceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    # Replace/roll warnings of the change, where the rollout module supplies them (one line each).
    warnings = [w for d in diffs for w in getattr(d, "warnings", None) or []]
    no_prices = prices.origin is None
    if fmt == "markdown" and not cost_comment.changed(diffs) and not no_prices:
        print("no resource and no cost changed: nothing to comment", file=sys.stderr)
    else:
        text = cost_comment.RENDERERS[fmt](diffs, args.base, warnings)
        sys.stdout.write(no_prices_banner(fmt, text) if no_prices else text)
    invalid = [d.stack for d in diffs if d.head_invalid]
    if invalid:
        print(f"the working tree's config of {', '.join(invalid)} does not validate", file=sys.stderr)
        return EXIT_INVALID
    if args.guardrail_config:
        import json

        config = cost_comment.guardrail_config(diffs, args.accept_blockers)
        Path(args.guardrail_config).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if args.fail_on_blockers:
        refused = cost_comment.refused_blockers(diffs, args.accept_blockers)
        import textwrap

        def say(text: str) -> None:  # 80 columns, continuation lines indented
            print(
                "\n".join(textwrap.wrap(text, width=80, subsequent_indent="  ", break_on_hyphens=False)),
                file=sys.stderr,
            )

        for sentence in refused:
            say(f"error: rollout blocker: {sentence}")
        if refused:
            say(
                f"error: to apply them on purpose, add the trailer '{cost_comment.ACCEPT_TRAILER}: <why>' to the "
                "commit (not for a change CI cannot apply: an administrator applies it; docs/gitops.md)"
            )
            return EXIT_BLOCKERS
        if args.accept_blockers and any(cost_comment.blockers(d) for d in diffs):
            print(f"rollout blockers accepted: {args.accept_blockers.strip()}", file=sys.stderr)
    if threshold is not None:
        why = cost_comment.exceeds(diffs, threshold)
        if why:
            print(f"error: {why}", file=sys.stderr)
            return EXIT_ABOVE_THRESHOLD
    if no_prices:
        print(f"error: {NO_PRICES}", file=sys.stderr)
        return EXIT_NO_PRICES
    return 0
