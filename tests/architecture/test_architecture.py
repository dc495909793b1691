"""The import graph has no cycles (issue 26): a module never imports itself through others.

The layers themselves are import-linter contracts in pyproject.toml (`lint-imports`, run by `make test`); this
test finds cycles anywhere, also inside one layer, where the layers contract allows imports both ways.
Imports under `if TYPE_CHECKING:` are left out (annotations only: nothing runs them).
"""

from __future__ import annotations

import grimp

PACKAGES = ("advise", "config", "gpuloan", "offline", "policy", "pricing", "sim", "stacks")


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """The groups of modules that import each other round a cycle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def test_finds_a_cycle_when_there_is_one():
    graph = grimp.ImportGraph()
    for a, b in (("x.a", "x.b"), ("x.b", "x.c"), ("x.c", "x.a"), ("x.c", "x.d")):
        graph.add_import(importer=a, imported=b)
    assert strongly_connected(graph) == [["x.a", "x.b", "x.c"]]


def test_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    assert strongly_connected(graph) == []
