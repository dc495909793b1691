"""`gpuloan validate STACK_OR_FILE`: check a stack config without the Pulumi engine. Exit 0 valid, 2 invalid.

A valid config can still carry advisories (pricing/cost_model/spot_spread.py: a spot type dearer per GPU and interrupted more
often than another listed type): they go to stderr as `warning: <path>: ...` lines and leave the exit code 0."""

from __future__ import annotations

import sys

from gpuloan import price_args, stack_arg, stackfile
from gpuloan.config_json import ConfigJsonError
from config import config
from pricing.sources import catalog
from pricing.cost_model import spot_spread

EXIT_INVALID = 2


def register(sub) -> None:
    p = sub.add_parser("validate", help="validate Pulumi.<stack>.yaml (every problem, with its path)")
    stack_arg.add(p, positional=True)
    add_config_json(p)
    price_args.add(p)
    p.set_defaults(func=run)


def add_config_json(p) -> None:
    p.add_argument("--config-json", metavar="FILE",
                   help="read the config from `pulumi config --show-secrets --json` output instead of the stack "
                        "file (secrets and keys from an imported ESC environment)")


def stack_document(stack_or_file: str, config_json: str | None = None) -> tuple[str, dict, str]:
    """(stack, a stack-file document, its name for messages): the stack file, or the `--config-json` dump."""
    from gpuloan import config_json as dump

    if config_json:
        stack = stackfile.resolve(stack_or_file)[0] if stack_or_file else "stack"
        return stack, {"config": dump.load(config_json)}, f"{config_json} (pulumi config --json)"
    stack, path = stackfile.resolve(stack_or_file)
    return stack, stackfile.load(path), path.name


def load_config(stack_or_file: str, config_json: str | None = None) -> tuple[str, config.GpuLoanConfig]:
    """Resolve, read and validate; raises StackFileError, ConfigJsonError or ConfigError."""
    stack, doc, source = stack_document(stack_or_file, config_json)
    return stack, config.from_stack_yaml(doc, source)


def run(args) -> int:
    try:
        price_args.apply(args)
        stack, doc, source = stack_document(stack_arg.resolve(args), getattr(args, "config_json", None))
        cfg = config.from_stack_yaml(doc, source)
    except (stackfile.StackFileError, catalog.PriceSourceError, stack_arg.NoStackError, ConfigJsonError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except config.ConfigError as err:
        print(err, file=sys.stderr)
        return EXIT_INVALID
    from config import secret_values

    _, unchecked = config.with_secret_placeholders(doc.get("config") or {}, source)
    gpus = sum((p.guaranteed.nodes if p.guaranteed else 0) for p in cfg.pools)
    budget = ("budget secret" if any(secret_values.budget_secret(p) is None for p in unchecked)
              else f"budget ${cfg.budget.monthly_usd:,.0f}/month")
    print(f"{stack}: valid ({len(cfg.pools)} pool(s), {gpus} guaranteed node(s), {budget}, region {cfg.region})"
          + (" except the secrets below" if unchecked else ""))
    for path in unchecked:
        print(f"  not checked: {path}: a Pulumi secret (`secure:`), opaque offline; everything else was validated "
              f"with a placeholder in its place; {config.CONFIG_JSON_HINT}")
    for advisory in spot_spread.advisories(cfg):
        print(f"warning: {advisory}", file=sys.stderr)
    for path, message in config.deprecations(cfg):
        print(f"warning: {path}: {message}", file=sys.stderr)
    return 0
