"""`-s/--stack` the way Pulumi names a stack, for every command that works on one.

The stack is, first that applies: `-s/--stack NAME_OR_FILE`; the positional form some commands always had (an
alias); `$PULUMI_STACK`; the stack `pulumi stack select` chose for this project, read offline from Pulumi's
workspace file (`$PULUMI_HOME` or `~/.pulumi`, `workspaces/<project>-<sha1 of the Pulumi.yaml path>-workspace.json`,
the file the Pulumi CLI itself keeps); else an error listing the stacks of the project.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import yaml

ENV_STACK = "PULUMI_STACK"


class NoStackError(Exception):
    """No stack was named and none can be found; the message lists the stacks in the project."""


def add(
    parser, positional: bool = False, help_text: str = "stack name (reads ./Pulumi.<stack>.yaml) or a stack file"
) -> None:
    parser.add_argument(
        "-s",
        "--stack",
        dest="stack_option",
        metavar="STACK",
        help=f"{help_text}; default ${ENV_STACK}, else the stack `pulumi stack select` chose",
    )
    if positional:
        parser.add_argument("stack_positional", nargs="?", metavar="STACK", help="same as -s STACK (kept as an alias)")


def _stacks_in(cwd: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in cwd.glob("Pulumi.*.yaml"))


def selected_stack(cwd: Path, environ: dict[str, str] | None = None) -> str | None:
    """The stack `pulumi stack select` recorded for the project in `cwd`, or None."""
    env = os.environ if environ is None else environ
    project_file = cwd / "Pulumi.yaml"
    if not project_file.is_file():
        return None
    try:
        name = str((yaml.safe_load(project_file.read_text()) or {}).get("name") or "")
    except (OSError, yaml.YAMLError):
        return None
    home = Path(env.get("PULUMI_HOME") or Path(env.get("HOME") or Path.home()) / ".pulumi")
    digest = hashlib.sha1(str(project_file.resolve()).encode()).hexdigest()  # noqa: S324 (Pulumi's own key)
    path = home / "workspaces" / f"{name}-{digest}-workspace.json"
    try:
        stack = str(json.loads(path.read_text()).get("stack") or "")
    except (OSError, ValueError, AttributeError):
        return None
    return stack.rsplit("/", 1)[-1] or None  # "org/project/dev" or "dev"


def resolve(args, cwd: Path | None = None, environ: dict[str, str] | None = None) -> str:
    """The stack (name or file) this command works on. Raises NoStackError naming the project's stacks."""
    from gpuloan.stackfile import project_dir

    env = os.environ if environ is None else environ
    cwd = project_dir(cwd or Path.cwd())  # run from a subdirectory, the project is the nearest Pulumi.yaml above
    option, positional = getattr(args, "stack_option", None), getattr(args, "stack_positional", None)
    if option and positional and option != positional:
        raise NoStackError(f"two stacks named: -s {option} and {positional}; give one")
    chosen = option or positional or env.get(ENV_STACK) or selected_stack(cwd, env)
    if chosen:
        return chosen
    stacks = _stacks_in(cwd)
    listed = f"stacks in this project: {', '.join(stacks)}" if stacks else f"no Pulumi.<stack>.yaml in {cwd}"
    raise NoStackError(f"no stack given: pass -s STACK, set ${ENV_STACK}, or `pulumi stack select` one ({listed})")
