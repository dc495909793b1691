"""Find and read a Pulumi stack file (Pulumi.<stack>.yaml) without the Pulumi engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class StackFileError(Exception):
    """The stack file is missing or is not valid YAML; the message says which and where."""


def resolve(stack_or_file: str, cwd: Path | None = None) -> tuple[str, Path]:
    """'dev' -> ('dev', ./Pulumi.dev.yaml); 'path/Pulumi.prod.yaml' -> ('prod', that path)."""
    cwd = cwd or Path.cwd()
    candidate = Path(stack_or_file)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        path = candidate if candidate.is_absolute() else cwd / candidate
        name = path.name
        stack = name[len("Pulumi."):].rsplit(".", 1)[0] if name.startswith("Pulumi.") else path.stem
    else:
        stack, path = stack_or_file, cwd / f"Pulumi.{stack_or_file}.yaml"
    if not path.is_file():
        available = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        hint = f" (stacks here: {', '.join(available)})" if available else ""
        raise StackFileError(f"no stack file {path}{hint}")
    return stack, path


def load(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise StackFileError(f"{path.name}: invalid YAML{where}: {problem}") from None
    if doc is None:
        raise StackFileError(f"{path.name}: the file is empty; it needs a 'config:' map")
    if not isinstance(doc, dict):
        raise StackFileError(f"{path.name}: the top level must be a mapping with a 'config:' key")
    return doc
