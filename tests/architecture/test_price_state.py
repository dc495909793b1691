"""pricing/ holds no state of its own (issue 34): prices are a `Prices` each entry point builds and passes down.

Two checks: the source of every module under pricing/ neither rebinds a module-level name at runtime (`global`,
`globals()`) nor fills a module-level dict, list or set from inside a function (what the old price globals of
pricing/sources/catalog.py did: `_book`, `_config_prices`); and parsing configs with different price overrides,
one after the other, leaves every module under pricing/ as it was and the first config's figures where they were.
"""

from __future__ import annotations

import ast
import copy
import importlib
import pkgutil

import pricing
from conftest import REPO, resolved_prices, stack_config

from pricing import checks
from pricing.cost_model import costs

PRICING = REPO / "pricing"
MUTATORS = {
    "append",
    "add",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "setdefault",
    "update",
    "__setitem__",
}


def _module_containers(tree: ast.Module) -> set[str]:
    """Module-level names bound to a mutable container (a dict, list or set display, or dict()/list()/set())."""
    names = set()
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in ("dict", "list", "set", "defaultdict", "OrderedDict")
        )
        if mutable:
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def state_writes(source: str, filename: str = "<source>") -> list[str]:
    """Where a module's functions write module state: `global` and `globals()`, and a module-level container
    changed in place from inside a function (a container the function binds itself is its own)."""
    tree = ast.parse(source, filename)
    containers = _module_containers(tree)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        shared = containers - local
        for node in ast.walk(fn):
            where = f"{filename}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Global):
                found.append(f"{where}: global {', '.join(node.names)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "globals":
                found.append(f"{where}: globals()")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in shared
                and node.func.attr in MUTATORS
            ):
                found.append(f"{where}: {node.func.value.id}.{node.func.attr}(...)")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)) and any(
                isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in shared
                for t in (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target])
            ):
                found.append(f"{where}: a module-level container written by subscript")
    return found


def test_the_check_finds_the_old_price_globals():
    old = """
_book = None
_config_prices: dict = {}

def book():
    global _book
    return _book

def use_config_prices(region, prices):
    _config_prices.clear()
    for t, p in prices.items():
        _config_prices[(t, region)] = p

def fine(prices):
    own = {}
    own["x"] = 1
    return prices.price("x", "y")
"""
    found = state_writes(old)
    assert [f.split(": ", 1)[1] for f in found] == [
        "global _book",
        "_config_prices.clear(...)",
        "a module-level container written by subscript",
    ]


def test_no_module_under_pricing_writes_module_state():
    found = [
        w for path in sorted(PRICING.rglob("*.py")) for w in state_writes(path.read_text(), str(path.relative_to(REPO)))
    ]
    assert found == []


def _pricing_state() -> dict:
    """Every module-level name of every module under pricing/: containers by value, anything else by identity."""
    modules = [importlib.import_module(info.name) for info in pkgutil.walk_packages(pricing.__path__, "pricing.")]
    state = {}
    for module in modules:  # all imported first: importing a module binds its name in its package
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            try:
                state[(module.__name__, name)] = (
                    copy.deepcopy(value) if isinstance(value, (dict, list, set)) else id(value)
                )
            except TypeError:  # a container of something that cannot be copied: its identity, at least
                state[(module.__name__, name)] = id(value)
    return state


def _overridden(usd_per_hour: float) -> dict:
    """The dev stack pricing every instance type itself (`instance_prices`), at one made-up on-demand rate."""
    cfg = stack_config("dev")
    pool = cfg["gpuloan:pools"][0]
    types = {pool["guaranteed"]["instance_type"], *pool["elastic"]["instance_types"]}
    cfg["gpuloan:instance_prices"] = {
        t: {"ondemand_usd_per_hour": usd_per_hour, "source": "test input"} for t in sorted(types)
    }
    return {"config": cfg}


def test_parsing_configs_with_other_price_overrides_changes_nothing_in_pricing(no_prices):
    prices = resolved_prices()  # no price source at all: a config's own prices are the only ones
    before = _pricing_state()
    one = checks.from_stack_yaml(_overridden(1.0), "one", prices=prices)
    one_cost = costs.stack_cost(prices.with_config(one), one).to_json()
    assert _pricing_state() == before
    other = checks.from_stack_yaml(_overridden(3.0), "other", prices=prices)
    other_cost = costs.stack_cost(prices.with_config(other), other).to_json()
    assert _pricing_state() == before
    # interleaved: the first config's figures do not move when another is parsed after it
    assert costs.stack_cost(prices.with_config(one), one).to_json() == one_cost
    assert one_cost["guaranteed_monthly_usd"] is not None  # its own prices priced it ...
    assert other_cost["guaranteed_monthly_usd"] == 3 * one_cost["guaranteed_monthly_usd"]  # ... and the other's
    assert prices.price(one.pools[0].guaranteed.instance_type, one.region) is None  # the book itself: untouched
