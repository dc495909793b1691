"""The `gpuloan` command: validate, preview and the other subcommands.

Each subcommand lives in its own module `gpuloan/commands/<name>.py` exposing `register(subparsers)`; the module
registers its parser and sets `func` (args -> exit code). Add new ones to COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = [
    "gpuloan.commands.validate",
    "gpuloan.commands.preview",
    "gpuloan.commands.schema",
    "gpuloan.commands.cost_report",
    "gpuloan.commands.cost_diff",
    "gpuloan.commands.simulate",
    "gpuloan.commands.prices",
    "gpuloan.commands.ci_runner",
    "gpuloan.commands.advise",
]


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("gpuloan")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed; `make install`)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuloan",
        description="GPUs on loan: a guaranteed floor, plus elastic spot/on-demand GPUs in a budget.",
    )
    parser.add_argument("--version", action="version", version=f"gpuloan {version()}")
    parser.add_argument(
        "-C",
        "--cwd",
        metavar="DIR",
        default=None,
        help="run as if started in DIR (like `pulumi --cwd`); without it the project is the nearest "
        "directory at or above the current one holding Pulumi.yaml",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(sub)
    from gpuloan import exit_codes

    exit_codes.document(
        parser,
        {
            0: "done",
            1: "done in part (prices refresh; advise --demand: advice withheld)",
            2: "bad input, or no AWS credentials for a command that needs them",
            3: "AWS refused or could not be reached; cost-diff: above --fail-above",
            4: "cost-diff: no price at all",
        },
        ".venv/bin/gpuloan validate -s prod",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cwd:
        try:
            os.chdir(args.cwd)
        except OSError as err:
            parser.error(f"-C/--cwd {args.cwd}: {err.strerror}")
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # `gpuloan preview -s dev | head`: the reader has all it wanted. Point stdout at /dev/null so the
        # interpreter's final flush does not raise again, and end quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
