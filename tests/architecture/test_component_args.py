"""One Args style for every Pulumi component (issue 34): `X(name, XArgs.from_config(cfg, ...), opts)`.

Each ComponentResource under stacks/ takes `(name, args, opts)`, where `args` is a frozen `XArgs` dataclass defined
beside it, and `XArgs.from_config` builds it from the typed config plus the outputs of other components. The wiring
(stacks/platform.py, stacks/capacity/pools.py, stacks/kubernetes/layer.py) is then the same line for every
component, and what a component reads is written down in one place.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from types import ModuleType

import pulumi
import pytest

import stacks
from config.config import GpuLoanConfig

CONFIG_TYPES = ("GpuLoanConfig", "NewCluster")


def _stacks_modules() -> list[ModuleType]:
    names = [m.name for m in pkgutil.walk_packages(stacks.__path__, "stacks.")]
    return [importlib.import_module(name) for name in sorted(names)]


def components() -> list[tuple[ModuleType, type]]:
    """(module, class) of every ComponentResource defined under stacks/."""
    found = []
    for module in _stacks_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, pulumi.ComponentResource):
                found.append((module, cls))
    return found


def args_problems(module: ModuleType, component: type) -> list[str]:
    """What keeps `component` from the Args style; empty when it follows it."""
    name = component.__name__
    params = list(inspect.signature(component.__init__).parameters.values())
    shape = [(p.name, p.annotation) for p in params[1:]]
    problems = []
    # Annotations are strings (`from __future__ import annotations` everywhere in stacks/).
    expected = [("name", "str"), ("args", f"{name}Args"), ("opts", "pulumi.ResourceOptions | None")]
    if shape != expected:
        problems.append(f"{name}.__init__ takes {shape}, not {expected}")
    args_cls = getattr(module, f"{name}Args", None)
    if args_cls is None:
        return problems + [f"{module.__name__} defines no {name}Args"]
    if not dataclasses.is_dataclass(args_cls) or not args_cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        problems.append(f"{name}Args is not a frozen dataclass")
    from_config = inspect.getattr_static(args_cls, "from_config", None)
    if not isinstance(from_config, (staticmethod, classmethod)):
        problems.append(f"{name}Args has no from_config (a staticmethod or classmethod)")
    else:
        params = list(inspect.signature(from_config.__func__).parameters.values())
        if isinstance(from_config, classmethod):
            params = params[1:]
        # The typed config, or (Network) the one section of it the component reads.
        if not params or params[0].annotation not in CONFIG_TYPES:
            problems.append(f"{name}Args.from_config does not take the typed config first")
    return problems


def test_every_component_under_stacks_is_found():
    # All sixteen: a component that the walk missed would escape the check below.
    assert len(components()) == 16, sorted(c.__name__ for _, c in components())


@pytest.mark.parametrize("module, component", components(), ids=lambda v: getattr(v, "__name__", str(v)))
def test_component_takes_a_frozen_args_built_from_the_config(module, component):
    assert args_problems(module, component) == []


def test_a_component_without_its_args_fails_the_check():
    # The check itself must be able to fail: a component of the old style (config and values as parameters).
    module = ModuleType("stacks.example")

    class Example(pulumi.ComponentResource):
        def __init__(self, name: str, cfg: GpuLoanConfig, region: str, opts: pulumi.ResourceOptions | None = None):
            raise NotImplementedError

    problems = args_problems(module, Example)
    assert any("__init__ takes" in p for p in problems)
    assert any("defines no ExampleArgs" in p for p in problems)


def test_args_without_from_config_fails_the_check():
    module = ModuleType("stacks.example")

    @dataclasses.dataclass(frozen=True)
    class ExampleArgs:
        region: str

    class Example(pulumi.ComponentResource):
        def __init__(self, name: str, args: ExampleArgs, opts: pulumi.ResourceOptions | None = None):
            raise NotImplementedError

    module.ExampleArgs = ExampleArgs  # type: ignore[attr-defined]
    assert args_problems(module, Example) == ["ExampleArgs has no from_config (a staticmethod or classmethod)"]
