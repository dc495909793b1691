"""The `gpuloan` command: validate, preview and the other subcommands.

Each subcommand lives in its own module `gpuloan/cmd_<name>.py` exposing `register(subparsers)`; the module
registers its parser and sets `func` (args -> exit code). Add new ones to COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = [
    "gpuloan.cmd_validate",
    "gpuloan.cmd_preview",
    "gpuloan.cmd_schema",
    "gpuloan.cmd_cost_report",
    "gpuloan.cmd_cost_diff",
    "gpuloan.cmd_simulate",
    "gpuloan.cmd_prices",
    "gpuloan.cmd_advise",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuloan",
        description="GPUs on loan: a guaranteed floor plus elastic spot/on-demand GPUs within a budget.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
