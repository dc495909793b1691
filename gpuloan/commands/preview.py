"""`gpuloan preview STACK [--json]`: the offline plan (Pulumi mocks) and the monthly cost estimate."""

from __future__ import annotations

import sys

from gpuloan import exit_codes, price_args, stack_arg, stackfile
from gpuloan.render import json_doc
from gpuloan.commands import validate as cmd_validate
from gpuloan.commands.validate import EXIT_INVALID
from gpuloan.config_json import ConfigJsonError
from config import config
from pricing import checks
from pricing.sources import catalog


def register(sub) -> None:
    p = sub.add_parser("preview", help="offline preview: resources the program declares and their monthly cost")
    stack_arg.add(p, positional=True)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the tree")
    p.add_argument("--summary", action="store_true", help="the count line and the cost tables, without the tree")
    cmd_validate.add_config_json(p)
    price_args.add(p)
    exit_codes.document(
        p,
        {
            0: "the plan and its cost were printed (unknown costs say so)",
            2: "bad input: the stack, its config or an option (every problem named on stderr); nothing is previewed",
        },
        ".venv/bin/gpuloan preview -s prod --summary",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from gpuloan.preview import preview_document, render

    try:
        prices = price_args.apply(args)
        stack, path = stackfile.resolve(stack_arg.resolve(args))
        _, doc, _ = cmd_validate.stack_document(str(path), args.config_json)
        # The program next to the stack file is the one previewed (a git worktree previews its own code).
        program = path.parent / "__main__.py"
        print(f"running the {stack} program offline (Pulumi mocks) ...", file=sys.stderr)
        result = preview_document(prices, stack, doc.get("config") or {}, program if program.is_file() else None)
    except (stackfile.StackFileError, catalog.PriceSourceError, stack_arg.NoStackError, ConfigJsonError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except config.ConfigError as err:
        print(err, file=sys.stderr)
        print("nothing was previewed: fix the config first", file=sys.stderr)
        return EXIT_INVALID
    # Deprecated settings in use (the config validated above): warnings on stderr, the JSON on stdout unchanged.
    for at, message in config.deprecations(checks.from_stack_yaml(doc, path.name, prices=prices)):
        print(f"warning: {at}: {message}", file=sys.stderr)
    if args.json:
        print(json_doc.dumps(result, sort_keys=True, default=str))
    else:
        from gpuloan.render import tables

        render(result, tables.console(), summary=args.summary)
    return 0
