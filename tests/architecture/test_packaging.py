"""The installable package (issue 41 item 4): pyproject.toml declares the runtime dependencies as compatible ranges
(the exact pins stay in requirements.txt), so `pip install .` / `pipx install` of a clone gives a working
`gpuloan` command; the built wheel installs into an empty virtual environment and validates an example stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib

from conftest import REPO
from packaging.requirements import Requirement


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _pins(name: str) -> dict[str, str]:
    """`name==version` lines of a requirements file (its own lines, not those it includes), by normalized name."""
    pins = {}
    for line in (REPO / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-"):
            req = Requirement(line)
            pins[_norm(req.name)] = next(iter(req.specifier)).version
    return pins


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def test_every_runtime_pin_lies_inside_its_declared_range():
    declared = {_norm(Requirement(d).name): Requirement(d) for d in _pyproject()["project"]["dependencies"]}
    pins = _pins("requirements.txt")
    assert set(declared) == set(pins), "pyproject.toml and requirements.txt name different runtime dependencies"
    for name, req in declared.items():
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {req.specifier}"
        assert not any(s.operator == "==" for s in req.specifier), f"{name}: a range here, the pin in requirements"


def test_the_ray_extra_is_pinned_and_the_tests_install_the_same():
    (ray,) = [Requirement(r) for r in _pyproject()["project"]["optional-dependencies"]["ray"]]
    assert ray.name == "ray" and [s.operator for s in ray.specifier] == ["=="]
    assert _pins("requirements-dev.txt")["ray"] == next(iter(ray.specifier)).version


def test_the_wheel_installs_into_an_empty_venv_and_validates_a_stack(tmp_path):
    """Built from a copy of the project (nothing written into the checkout), installed with its declared
    dependencies held to requirements.txt's pins (`-c`: the versions tested, from pip's cache when it has them;
    otherwise from the package index), then run outside the checkout."""
    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache"
        ),
    )
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "dist"), str(src)])
    (wheel,) = (tmp_path / "dist").glob("gpuloan-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    # the installed package alone: no repository on the path (a checkout's gpuloan.egg-info on PYTHONPATH would
    # make pip take the package for installed), prices from the snapshot shipped in the wheel
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPULOAN_PRICE_FILE", "VIRTUAL_ENV")}
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            str(wheel),
            "-c",
            str(REPO / "requirements.txt"),
        ],
        env=env,
    )
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(REPO / name, project / name)
    gpuloan = str(venv / "bin" / "gpuloan")
    version = _run([gpuloan, "--version"], cwd=project, env=env)
    assert version.stdout.strip() == f"gpuloan {_pyproject()['project']['version']}"
    valid = _run([gpuloan, "validate", "dev"], cwd=project, env=env)
    assert valid.stdout.startswith("dev: valid"), valid.stdout
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import sim, gpuloan; print(sim.__file__, gpuloan.__file__)"],
        cwd=project,
        env=env,
    )
    assert str(REPO) not in where.stdout and str(venv) in where.stdout


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert done.returncode == 0, f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done
