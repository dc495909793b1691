"""Find and read a Pulumi stack file (Pulumi.<stack>.yaml) without the Pulumi engine, strictly (see `load`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from offline import document_limits


class StackFileError(Exception):
    """The stack file is missing or is not valid YAML; the message says which and where."""


PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")


def project_dir(start: Path | None = None) -> Path:
    """The project a command works on, found as the Pulumi CLI finds it: the nearest directory at or above `start`
    (the working directory) that holds Pulumi.yaml; `start` itself when none does (the error then names it)."""
    start = (start or Path.cwd()).resolve()
    for d in (start, *start.parents):
        if any((d / name).is_file() for name in PROJECT_FILES):
            return d
    return start


def resolve(stack_or_file: str, cwd: Path | None = None) -> tuple[str, Path]:
    """'dev' -> ('dev', <project>/Pulumi.dev.yaml, the project found from `cwd` as `project_dir` does);
    'path/Pulumi.prod.yaml' -> ('prod', that path, relative to `cwd`)."""
    cwd = cwd or Path.cwd()
    candidate = Path(stack_or_file)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        path = candidate if candidate.is_absolute() else cwd / candidate
        name = path.name
        stack = name[len("Pulumi.") :].rsplit(".", 1)[0] if name.startswith("Pulumi.") else path.stem
    else:
        stack, path = stack_or_file, project_dir(cwd) / f"Pulumi.{stack_or_file}.yaml"
    if not path.is_file():
        available = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        hint = f" (stacks here: {', '.join(available)})" if available else ""
        raise StackFileError(f"no stack file {path}{hint}")
    return stack, path


# Limits on what a stack file may be, shared with the program run in process (offline/document_limits.py).
MAX_DEPTH = document_limits.MAX_DEPTH
MAX_EXPANDED_NODES = document_limits.MAX_EXPANDED_NODES
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"


def load(path: Path) -> dict[str, Any]:
    """Read a stack file strictly: valid UTF-8, bounded nesting and alias expansion, string keys, no duplicate
    keys (a later duplicate silently wins in plain YAML: `dry_run: true` then `dry_run: false`). Every problem is
    a StackFileError naming the key path and line, checked before anything is built from the document."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise StackFileError(
            f"{path.name}: not valid UTF-8 (byte 0x{err.object[err.start]:02x} at offset "
            f"{err.start}); save the file as UTF-8"
        ) from None
    return loads(text, path.name)


def loads(text: str, name: str = "stack file") -> dict[str, Any]:
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as err:
        # The reader checks characters first: a NUL or another control character YAML does not allow.
        raise StackFileError(
            f"{name}: character {err.character!r} at offset {err.position} is not allowed in YAML "
            "(a NUL or control character: the file is damaged or not a text file)"
        ) from None
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise StackFileError(f"{name}: nested too deeply (more than {MAX_DEPTH} levels)") from None
        except yaml.YAMLError as err:
            raise StackFileError(_syntax_error(err, text, name)) from None
        if node is None:
            raise StackFileError(f"{name}: the file is empty; it needs a 'config:' map")
        _check_size(node, name)
        _check_keys(node, name)
        try:
            doc = loader.construct_document(node)
        except yaml.YAMLError as err:
            raise StackFileError(f"{name}: invalid YAML: {err}") from None
    finally:
        loader.dispose()
    if not isinstance(doc, dict):
        raise StackFileError(f"{name}: the top level must be a mapping with a 'config:' key")
    return doc


def _syntax_error(err: yaml.YAMLError, text: str, name: str) -> str:
    """'Pulumi.dev.yaml:3:9: <problem>', then the offending line and a caret under the column, as Helm prints a
    template's YAML error: the parser's own words name the problem, the line shows where."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    if context and getattr(err, "context_mark", None) is not None:
        problem = f"{problem} ({context} at line {err.context_mark.line + 1})"
    if mark is None:
        return f"{name}: invalid YAML: {problem}"
    lines = text.splitlines()
    shown = lines[mark.line] if mark.line < len(lines) else ""
    pointer = "".join("\t" if c == "\t" else " " for c in shown[: mark.column]) + "^"
    where = f"{name}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {problem}\n"
    context_mark = getattr(err, "context_mark", None)
    if context_mark is not None and context_mark.line < mark.line and context_mark.line < len(lines):
        # e.g. an unclosed quote or bracket: the line that opened it is the one to fix
        where += f"  {context_mark.line + 1:>4} | {lines[context_mark.line]}\n"
    return where + f"  {mark.line + 1:>4} | {shown}\n       | {pointer}"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _line(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}"


def _check_size(root: yaml.Node, name: str) -> None:
    """Expanded size and depth of the node graph, each shared (aliased) node computed once; refuses cycles."""
    try:
        document_limits.check_graph(root, name, _children, lambda node: f"at {_line(node)}", "the alias")
    except document_limits.DocumentTooLarge as err:
        raise StackFileError(str(err)) from None


def _key_text(node: yaml.Node) -> str:
    return node.value if isinstance(node, yaml.ScalarNode) else f"<{type(node).__name__}>"


def _check_keys(root: yaml.Node, name: str) -> None:
    """Every mapping key is a plain string and appears once (each shared node visited once)."""
    seen_nodes: set[int] = set()
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_line: dict[str, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG:
                    todo.append((value_node, path))
                    continue
                text = _key_text(key_node)
                where = f"{path}.{text}" if path else text
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != STR_TAG:
                    raise StackFileError(
                        f"{name}: {where}: key at {_line(key_node)} is not a string "
                        f"({key_node.tag.rsplit(':', 1)[-1]}); quote it"
                    )
                if text in first_line:
                    raise StackFileError(
                        f"{name}: {where}: duplicate key (lines {first_line[text]} and "
                        f"{key_node.start_mark.line + 1}); YAML would silently keep the last one"
                    )
                first_line[text] = key_node.start_mark.line + 1
                todo.append((value_node, where))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
