"""Limits on a config document before anything expands it: the stack file the CLI reads (gpuloan/stackfile.py, on
YAML's node graph) and the config dict a caller hands the program in process (offline/runner.py run_program), where
YAML aliases became shared objects. A "billion laughs" document is a few lines that expand to billions of values,
which json.dumps (the offline preview, the Pulumi config wire format) would try to build; a cycle never ends.
"""

from __future__ import annotations

from typing import Any, Callable

# A real stack file is a few hundred nodes, nested about 6 deep.
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 100_000


class DocumentTooLarge(ValueError):
    """The document expands past the limits or contains itself; the message names the document and where."""


def check_value(value: Any, name: str) -> None:
    """The limits for a document already built (dicts, lists, scalars); raises DocumentTooLarge."""

    def children(v: Any) -> list[Any]:
        if isinstance(v, dict):
            return [x for pair in v.items() for x in pair]
        return list(v) if isinstance(v, (list, tuple)) else []

    check_graph(value, name, children, lambda v: "in the config", "a value")


def check_graph(
    root: Any, name: str, children: Callable[[Any], list[Any]], where: Callable[[Any], str], cycle: str
) -> None:
    """Expanded size and depth of a graph whose shared nodes are one object each, each computed once; refuses
    cycles. Iterative, so a deep document cannot exhaust the stack either."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    open_: set[int] = set()
    keep: list[Any] = []  # ids are only unique while their objects live: hold every visited one
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            open_.discard(key)
            if size[key] > MAX_EXPANDED_NODES:
                raise DocumentTooLarge(
                    f"{name}: the value {where(node)} expands to more than {MAX_EXPANDED_NODES:,} "
                    "values through YAML aliases (*name); a stack file needs far fewer, so it "
                    "is refused before anything expands it"
                )
            if depth[key] > MAX_DEPTH:
                raise DocumentTooLarge(f"{name}: nested too deeply {where(node)} (more than {MAX_DEPTH} levels)")
            continue
        if key in size:
            continue
        if key in open_:
            raise DocumentTooLarge(f"{name}: {cycle} {where(node)} refers to a value that contains itself")
        open_.add(key)
        keep.append(node)
        stack.append((node, True))
        stack.extend((k, False) for k in children(node) if id(k) not in size)
