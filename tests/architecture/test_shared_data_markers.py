"""A test that reads the public data beside the project (../shared/data: prices, traces, Kueue CRDs) by path carries
a skip marker saying what is absent, so that `make test` passes where that folder is not (GitHub's runners).

Static check of the test sources: a test function that names one of the shared paths (or a module constant derived
from one) must be decorated with a `requires_shared_*` marker from conftest, `needs_crds`, or a `skipif`, unless
the use sits under an `if <path>.is_dir()/exists()` guard. What it cannot see: a dependency through the price file
conftest puts in the environment (costs, the simulator, the policy settings); those read the same rates from the
snapshot shipped in the package where ../shared is absent and carry `requires_prices`, which does not skip then and
so never stands for a `requires_shared_*` marker here; running the suite without ../shared is the check for them.
A test that calls a module-level helper or takes a fixture of its file that names a shared path counts as naming
it."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

TESTS = REPO / "tests"
# conftest's and kube_checks' names for the shared paths.
SHARED_NAMES = {"SHARED_DATA", "SHARED_PRICES", "SHARED_TRACES", "SHARED_KUEUE_CRDS", "KUEUE_CRDS"}
MARKERS = {"requires_shared_prices", "requires_shared_traces", "requires_shared_kueue_crds", "needs_crds", "skipif"}


def _decorator_names(fn: ast.FunctionDef) -> set[str]:
    names = set()
    for d in fn.decorator_list:
        for node in ast.walk(d):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
    return names


def _module_shared_names(tree: ast.Module) -> set[str]:
    """The shared names plus module constants built from them (ITP = SHARED_TRACES / "itp") or from '../shared'."""
    names = set(SHARED_NAMES)
    for node in tree.body:
        if isinstance(node, ast.Assign) and _reads_shared(node.value, names):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _shared_uses(node: ast.AST, names: set[str]) -> list[ast.AST]:
    """The nodes that name a shared path: a shared name, a '../shared/data' string, or `<x> / "shared"`."""
    uses = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load):
            uses.append(n)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and "shared/data" in n.value:
            uses.append(n)
        elif (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Div)
            and isinstance(n.right, ast.Constant)
            and n.right.value == "shared"
        ):
            uses.append(n)
    return uses


def _reads_shared(node: ast.AST, names: set[str]) -> bool:
    return bool(_shared_uses(node, names))


def _guarded(fn: ast.FunctionDef, names: set[str]) -> bool:
    """Every use sits under `if <shared path>.is_dir()` / `.exists()` (an optional extra check, not a dependency)."""
    guarded = set()
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.If)
            and _reads_shared(node.test, names)
            and isinstance(node.test, ast.Call)
            and isinstance(node.test.func, ast.Attribute)
            and node.test.func.attr in ("is_dir", "exists")
        ):
            guarded |= {id(n) for n in ast.walk(node)}
    return all(id(n) in guarded for n in _shared_uses(fn, names))


def _helpers_reading_shared(tree: ast.Module, names: set[str]) -> set[str]:
    """Module-level functions (helpers and fixtures) that name a shared path, directly or through another one: a
    test that calls one, or takes it as a fixture, reads the data as surely as if it named the path itself."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("test_")}
    # A piece of the data, not the root folder (passed on as a setting, e.g. to `make`), and not a docstring.
    pieces = names - {"SHARED_DATA"}
    found: set[str] = set()
    while True:
        more = set()
        for name, fn in functions.items():
            body = [n for n in fn.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            # by name only: a '../shared/data/...' text in a helper is a pattern to match (marks), not a read
            direct = [
                u
                for u in _shared_uses(ast.Module(body=body, type_ignores=[]), pieces)
                if not isinstance(u, ast.Constant)
            ]
            via = any(isinstance(n, ast.Name) and n.id in found for n in ast.walk(fn))
            if name not in found and ((direct and not _guarded(fn, pieces)) or via):
                more.add(name)
        if not more:
            return found
        found |= more


def _uses_helper(fn: ast.FunctionDef, helpers: set[str]) -> bool:
    """A fixture parameter or a call in the body (a decorator that builds marks from the paths is not a read)."""
    params = {a.arg for a in fn.args.args}
    body = ast.Module(body=fn.body, type_ignores=[])
    return bool(params & helpers) or any(isinstance(n, ast.Name) and n.id in helpers for n in ast.walk(body))


def unmarked_tests(sources: dict[str, str]) -> list[str]:
    found = []
    for file, text in sorted(sources.items()):
        tree = ast.parse(text)
        names = _module_shared_names(tree)
        helpers = _helpers_reading_shared(tree, names)
        module_marked = any(
            isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
            and _reads_marker(n.value)
            for n in tree.body
        )
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
            body = ast.Module(body=fn.body, type_ignores=[])
            if module_marked or _decorator_names(fn) & MARKERS:
                continue
            if _uses_helper(fn, helpers) or (_reads_shared(body, names) and not _guarded(fn, names)):
                found.append(f"{file}::{fn.name}")
    return found


def _reads_marker(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Name | ast.Attribute) and getattr(n, "id", getattr(n, "attr", "")) in MARKERS
        for n in ast.walk(node)
    )


def test_every_test_reading_shared_data_by_path_skips_without_it():
    # this file is left out: its example source names the shared paths on purpose
    sources = {p.name: p.read_text() for p in sorted(TESTS.rglob("test_*.py")) if p.name != Path(__file__).name}
    assert unmarked_tests(sources) == [], "add the conftest marker for the data the test reads (requires_shared_*)"


def test_the_check_finds_an_unmarked_test_and_accepts_a_marked_or_guarded_one():
    source = """
from conftest import SHARED_TRACES, requires_shared_traces
ITP = SHARED_TRACES / "itp"
HERE = "tests"

def test_unmarked():
    read(ITP / "cluster05.csv")

def test_literal_path():
    read("../shared/data/prices/aws_gpu_prices.csv")

@requires_shared_traces
def test_marked():
    read(ITP / "cluster05.csv")

def test_guarded():
    if SHARED_TRACES.is_dir():
        read(SHARED_TRACES / "itp")

def test_unrelated():
    read(HERE)

def table():
    return read(ITP / "cluster05.csv")

def test_through_a_helper():
    table()

@requires_prices
def test_prices_through_the_book_only_is_no_excuse(table):
    pass
"""
    assert unmarked_tests({"test_x.py": source}) == [
        "test_x.py::test_unmarked",
        "test_x.py::test_literal_path",
        "test_x.py::test_through_a_helper",
        "test_x.py::test_prices_through_the_book_only_is_no_excuse",
    ]
