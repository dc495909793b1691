"""Exit codes, one meaning each across the commands, and the `--help` text that lists them with an example
(issue 37, item 4). A command uses the codes that apply to it; a script can rely on:

- 0: done;
- 1: done in part (`prices refresh`: the prices it could read were written, the others were not; `advise
  --demand`: the figures printed, the recommendation withheld because they failed the sanity check);
- 2: nothing could start: bad input (stack, config, file, option) or no AWS credentials for a command that needs
  them (`prices refresh`, `cost-report`, `advise` from the stack's history);
- 3: AWS refused or could not be reached with the credentials given (`cost-report`, `advise`); `cost-diff`: the
  cost rose above `--fail-above`;
- 4: `cost-diff` only: no price at all, so no cost was compared."""

from __future__ import annotations

import argparse
import textwrap

OK, PARTIAL, BAD_INPUT, AWS_FAILED = 0, 1, 2, 3
NO_CREDENTIALS = (
    "no AWS credentials; configure them (aws configure, AWS_PROFILE or AWS_ACCESS_KEY_ID) or give the input offline"
)
HELP_WIDTH = 79


def credentials_missing() -> bool:
    """True when the usual AWS credential chain finds nothing (checked before a command calls AWS, so that "no
    credentials" is bad input, exit 2, everywhere, and never an AWS failure)."""
    import boto3

    return boto3.Session().get_credentials() is None


def document(parser: argparse.ArgumentParser, codes: dict[int, str], example: str) -> None:
    """Append the command's exit codes and one example to its --help, folded to 80 columns."""
    lines = ["exit codes:"]
    for code, meaning in sorted(codes.items()):
        lines += textwrap.wrap(meaning, HELP_WIDTH, initial_indent=f"  {code}  ", subsequent_indent="     ")
    lines += ["", "example:"]
    lines += textwrap.wrap(
        example,
        HELP_WIDTH,
        initial_indent="  ",
        subsequent_indent="      ",
        break_on_hyphens=False,
        break_long_words=False,
    )
    parser.epilog = "\n".join(lines)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
