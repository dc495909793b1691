"""Issue 34's layers hold with no exceptions: no import-linter contract names an ignored import, and importing every
module of `config`, `pricing`, `sim` and `advise` loads no Pulumi module (what the no-Pulumi contract promises,
checked here by running the imports, not by reading the graph)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NO_PULUMI_PACKAGES = ("config", "pricing", "sim", "advise")
PULUMI_MODULES = ("pulumi", "pulumi_aws", "pulumi_docker_build", "pulumi_kubernetes", "pulumi_policy")


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_no_contract_has_exceptions():
    excepted = {c["id"]: c["ignore_imports"] for c in _contracts() if c.get("ignore_imports")}
    assert excepted == {}


def test_the_layers_are_the_pipeline_of_package_names():
    layers = next(c for c in _contracts() if c["id"] == "layers")
    assert layers["layers"] == ["gpuloan", "advise | offline", "sim | stacks", "pricing", "config", "policy"]
    no_pulumi = next(c for c in _contracts() if c["id"] == "no-pulumi-below-stacks")
    assert set(no_pulumi["source_modules"]) == set(NO_PULUMI_PACKAGES)
    assert set(no_pulumi["forbidden_modules"]) == set(PULUMI_MODULES)


IMPORT_ALL = """
import importlib, json, pkgutil, sys
names = []
for package in sys.argv[1:]:
    root = importlib.import_module(package)
    names.append(package)
    names += [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
for name in names:
    importlib.import_module(name)
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.stdin.read())))
print(json.dumps({"modules": len(names), "pulumi": loaded}))
"""


def test_importing_every_module_below_stacks_loads_no_pulumi():
    run = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *NO_PULUMI_PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=json.dumps(PULUMI_MODULES),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["modules"] > 40  # the walk did import the packages' modules
    assert found["pulumi"] == []
