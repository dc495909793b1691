"""`gpuloan validate STACK_OR_FILE`: check a stack config without the Pulumi engine. Exit 0 valid, 2 invalid."""

from __future__ import annotations

import sys

from gpuloan import price_args, stack_arg, stackfile
from stacks import catalog, config

EXIT_INVALID = 2


def register(sub) -> None:
    p = sub.add_parser("validate", help="validate Pulumi.<stack>.yaml (every problem, with its path)")
    stack_arg.add(p, positional=True)
    price_args.add(p)
    p.set_defaults(func=run)


def load_config(stack_or_file: str) -> tuple[str, config.GpuLoanConfig]:
    """Resolve, read and validate; raises StackFileError or ConfigError."""
    stack, path = stackfile.resolve(stack_or_file)
    return stack, config.from_stack_yaml(stackfile.load(path), path.name)


def run(args) -> int:
    try:
        price_args.apply(args)
        stack, cfg = load_config(stack_arg.resolve(args))
    except (stackfile.StackFileError, catalog.PriceSourceError, stack_arg.NoStackError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except config.ConfigError as err:
        print(err, file=sys.stderr)
        return EXIT_INVALID
    gpus = sum((p.guaranteed.nodes if p.guaranteed else 0) for p in cfg.pools)
    print(f"{stack}: valid ({len(cfg.pools)} pool(s), {gpus} guaranteed node(s), "
          f"budget ${cfg.budget.monthly_usd:,.0f}/month, region {cfg.region})")
    return 0
