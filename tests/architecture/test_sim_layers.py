"""The simulated world (cloud, cluster, Kueue, the environment, the figures) never imports the controllers, and
Kueue's decisions never import the environment that applies them (issue 34's sim layout): the import-linter
contracts `sim-world-not-controllers` and `sim-kueue-not-environment` in pyproject.toml. `make lint` runs them on
the repository; this test shows each failing on a copy of sim/ with one forbidden import added, so a contract
that stopped matching would be noticed (as tests/architecture/test_policy_io.py does for the policy's contracts).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_ID = "sim-world-not-controllers"
KUEUE_CONTRACT_ID = "sim-kueue-not-environment"


def _contract(contract_id: str = CONTRACT_ID) -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c.get("id") == contract_id)


def _lint(tmp_path: Path, contract_id: str = CONTRACT_ID) -> subprocess.CompletedProcess:
    """lint-imports with only that sim contract, over the copy of sim/ in `tmp_path` (what sim imports from the
    other packages is outside the copy: not followed)."""
    lines = ["[tool.importlinter]", 'root_packages = ["sim"]', "", "[[tool.importlinter.contracts]]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in _contract(contract_id).items()]  # str, [str]: TOML
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    lint_imports = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint_imports), "--config", "pyproject.toml", "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": str(lint_imports.parent), "PYTHONPATH": str(tmp_path)},
    )


@pytest.fixture()
def sim_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "sim", tmp_path / "sim", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_sim_contract_is_declared():
    contract = _contract()
    assert contract["type"] == "forbidden"
    assert contract["forbidden_modules"] == ["sim.controllers"]
    assert {"sim.engine", "sim.cluster", "sim.kueue", "sim.environment", "sim.metrics"} <= set(
        contract["source_modules"]
    )
    assert not (contract.get("ignore_imports") or contract.get("allow_indirect_imports"))
    kueue = _contract(KUEUE_CONTRACT_ID)
    assert (kueue["type"], kueue["source_modules"], kueue["forbidden_modules"]) == (
        "forbidden",
        ["sim.kueue"],
        ["sim.environment"],
    )
    assert not (kueue.get("ignore_imports") or kueue.get("allow_indirect_imports"))


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("sim/cluster.py", "from sim.controllers.base import Controller"),
        ("sim/engine.py", "from sim.controllers import karpenter"),
        # the environment and the figures joined the contract once metrics_of stopped asking isinstance(GpuLoan)
        ("sim/environment.py", "from sim.controllers.gpuloan import GpuLoan"),
        ("sim/metrics.py", "from sim.controllers.base import Controller"),
    ],
)
def test_the_contract_fails_on_one_forbidden_import(sim_copy: Path, module: str, forbidden: str):
    kept = _lint(sim_copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    path = sim_copy / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{forbidden}  # noqa: E402, F401\n", encoding="utf-8")
    broken = _lint(sim_copy)
    assert broken.returncode != 0
    assert "BROKEN" in broken.stdout and "is not allowed to import sim.controllers" in broken.stdout, broken.stdout


def test_the_kueue_contract_fails_on_an_import_of_the_environment(sim_copy: Path):
    kept = _lint(sim_copy, KUEUE_CONTRACT_ID)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    path = sim_copy / "sim" / "kueue.py"
    path.write_text(path.read_text(encoding="utf-8") + "\nfrom sim import environment  # noqa: E402, F401\n")
    broken = _lint(sim_copy, KUEUE_CONTRACT_ID)
    assert broken.returncode != 0
    assert "BROKEN" in broken.stdout and "is not allowed to import sim.environment" in broken.stdout, broken.stdout
