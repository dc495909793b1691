"""The Lambda's decision core stays pure (issue 34): the import-linter contracts in pyproject.toml keep
policy.decide, policy.model and policy.terms off the adapters (policy.io, boto3, botocore), and the adapters off the
decision core. `make lint` runs them on the repository; this test shows that each one fails on a copy of policy/
with one forbidden import added, so a contract that stopped matching anything would be noticed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_IDS = ("policy-decide-pure", "policy-io-not-decide")


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return [c for c in config["contracts"] if c.get("id") in CONTRACT_IDS]


def _lint(tmp_path: Path) -> subprocess.CompletedProcess:
    """lint-imports with only the policy contracts, over the copy of policy/ in `tmp_path`."""
    lines = ["[tool.importlinter]", 'root_packages = ["policy"]', "include_external_packages = true", ""]
    for contract in _contracts():
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{key} = {value!r}".replace("'", '"') for key, value in contract.items()]
        lines.append("")
    (tmp_path / "pyproject.toml").write_text("\n".join(lines), encoding="utf-8")
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
def policy_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "policy", tmp_path / "policy", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_the_policy_contracts_are_declared():
    found = {c["id"]: c for c in _contracts()}
    assert set(found) == set(CONTRACT_IDS)
    assert set(found["policy-decide-pure"]["source_modules"]) == {"policy.decide", "policy.model", "policy.terms"}
    assert set(found["policy-decide-pure"]["forbidden_modules"]) == {"policy.io", "boto3", "botocore"}
    assert found["policy-io-not-decide"]["source_modules"] == ["policy.io"]
    assert found["policy-io-not-decide"]["forbidden_modules"] == ["policy.decide"]
    assert not any(c.get("ignore_imports") or c.get("allow_indirect_imports") for c in found.values())


@pytest.mark.parametrize(
    "module, forbidden, named",
    [
        ("policy/decide/scale.py", "from policy.io import kube", "policy.io"),  # the core reading the cluster itself
        ("policy/model.py", "import botocore.exceptions", "botocore"),
        ("policy/terms.py", "import boto3", "boto3"),
        ("policy/io/sns.py", "from policy.decide import decide", "policy.decide"),  # an adapter deciding
    ],
)
def test_each_contract_fails_on_one_forbidden_import(policy_copy: Path, module: str, forbidden: str, named: str):
    kept = _lint(policy_copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    path = policy_copy / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{forbidden}  # noqa: E402, F401\n", encoding="utf-8")
    broken = _lint(policy_copy)
    assert broken.returncode != 0
    assert "BROKEN" in broken.stdout and f"is not allowed to import {named}" in broken.stdout, broken.stdout
