"""`gpuloan validate STACK_OR_FILE`: check a stack config without the Pulumi engine. Exit 0 valid, 2 invalid.

A valid config can still carry advisories (pricing/cost_model/spot_spread.py: a spot type dearer per GPU and interrupted more
often than another listed type): they go to stderr as `warning: <path>: ...` lines and leave the exit code 0."""

from __future__ import annotations

import sys
import textwrap

from gpuloan import exit_codes, price_args, stack_arg, stackfile
from gpuloan.config_json import ConfigJsonError
from config import config
from pricing import checks
from pricing.cost_model import floor_bill
from pricing.sources import catalog, pricebook
from pricing.cost_model import spot_spread

EXIT_INVALID = 2


def register(sub) -> None:
    p = sub.add_parser("validate", help="validate Pulumi.<stack>.yaml (every problem, with its path)")
    stack_arg.add(p, positional=True)
    add_config_json(p)
    price_args.add(p)
    exit_codes.document(
        p,
        {
            0: "valid (advisories and unchecked rules are printed, not errors)",
            2: "invalid: every problem with its path, or an unreadable stack or price file",
        },
        ".venv/bin/gpuloan validate -s prod",
    )
    p.set_defaults(func=run)


def add_config_json(p) -> None:
    p.add_argument(
        "--config-json",
        metavar="FILE",
        help="read the config from `pulumi config --show-secrets --json` output instead of the stack "
        "file (secrets and keys from an imported ESC environment)",
    )


def stack_document(stack_or_file: str, config_json: str | None = None) -> tuple[str, dict, str]:
    """(stack, a stack-file document, its name for messages): the stack file, or the `--config-json` dump."""
    from gpuloan import config_json as dump

    if config_json:
        stack = stackfile.resolve(stack_or_file)[0] if stack_or_file else "stack"
        return stack, {"config": dump.load(config_json)}, f"{config_json} (pulumi config --json)"
    stack, path = stackfile.resolve(stack_or_file)
    return stack, stackfile.load(path), path.name


def load_config(
    prices: catalog.Prices, stack_or_file: str, config_json: str | None = None
) -> tuple[str, config.GpuLoanConfig]:
    """Resolve, read and validate; raises StackFileError, ConfigJsonError or ConfigError."""
    stack, doc, source = stack_document(stack_or_file, config_json)
    return stack, checks.from_stack_yaml(doc, source, prices=prices)


def price_rules_not_checked(prices: catalog.Prices, cfg: config.GpuLoanConfig) -> list[str]:
    """The rules that need a price the source lacks, each with why: validate never skips one silently."""
    book = prices.book
    why = "no price source" if book.origin is None else f"no {cfg.region} prices in {book.where()}"
    out = []
    if not prices.prices_cover(cfg.region):
        out.append(f"every instance type has a price in {cfg.region} ({why})")
    bill = floor_bill.floor_bill(prices.with_config(cfg), cfg)
    unpriced = [
        f"pools[{i}] ({p.name})"
        for i, p in enumerate(cfg.pools)
        if p.guaranteed is not None and bill.pool_usd(floor_bill.billing_key(cfg, i)) is None
    ]
    if unpriced:
        cause = why if not prices.prices_cover(cfg.region) else "; ".join(bill.unknown)
        out.append(
            f"the floors' cost against the pool and environment budgets, for {', '.join(unpriced)} "
            f"({cause}); {pricebook.FIX}"
        )
    return out


def off_spot_notes(cfg: config.GpuLoanConfig) -> list[str]:
    """Production pools whose elastic capacity lists spot their work may not use (Kueue keeps it off spot)."""
    from config.config import ElasticCapacity, Tier
    from config.scheduling import spot_allowed

    return [
        f"pools[{i}] ({p.name}): production work stays off spot (not in "
        "scheduling.kueue.production_spot_pools): it runs on the on-demand group, priced at on-demand"
        for i, p in enumerate(cfg.pools)
        if p.tier == Tier.production
        and p.elastic is not None
        and p.elastic.capacity != ElasticCapacity.on_demand
        and not spot_allowed(cfg, p)
    ]


def run(args) -> int:
    try:
        prices = price_args.apply(args)
        stack, doc, source = stack_document(stack_arg.resolve(args), getattr(args, "config_json", None))
        cfg = checks.from_stack_yaml(doc, source, prices=prices)
        prices = prices.with_config(cfg)
    except (stackfile.StackFileError, catalog.PriceSourceError, stack_arg.NoStackError, ConfigJsonError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except config.ConfigError as err:
        print(err, file=sys.stderr)
        return EXIT_INVALID
    from config import secret_values

    _, unchecked = config.with_secret_placeholders(doc.get("config") or {}, source)
    gpus = sum((p.guaranteed.nodes if p.guaranteed else 0) for p in cfg.pools)
    budget = (
        "budget secret"
        if any(secret_values.budget_secret(p) is None for p in unchecked)
        else f"budget ${cfg.budget.monthly_usd:,.0f}/month"
    )
    print(
        f"{stack}: valid ({len(cfg.pools)} pool(s), {gpus} guaranteed node(s), {budget}, region {cfg.region})"
        + (" except the secrets below" if unchecked else "")
    )
    for path in unchecked:
        print(
            f"  not checked: {path}: a Pulumi secret (`secure:`), opaque offline; everything else was validated "
            f"with a placeholder in its place; {config.CONFIG_JSON_HINT}"
        )
    for rule in price_rules_not_checked(prices, cfg):
        print(f"  not checked: {rule}")
    for note in off_spot_notes(cfg):
        print(f"  {note}")
    for advisory in spot_spread.advisories(prices, cfg):
        _warn(f"warning: {advisory}")
    for path, message in config.deprecations(cfg):
        _warn(f"warning: {path}: {message}")
    return 0


def _warn(text: str) -> None:
    """A warning on stderr, folded at 80 columns (continuation lines indented), never split inside a word."""
    print(
        "\n".join(
            textwrap.wrap(text, width=80, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
        ),
        file=sys.stderr,
    )
