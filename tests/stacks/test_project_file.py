"""Pulumi.yaml: what a real `pulumi up` depends on, beyond what the mocks can show."""

from __future__ import annotations

import yaml
from conftest import REPO


def _project() -> dict:
    return yaml.safe_load((REPO / "Pulumi.yaml").read_text())


def test_python_runtime_with_the_makefile_virtualenv():
    project = _project()
    assert project["name"] == "gpuloan"
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["virtualenv"] == ".venv"  # the venv `make install` builds


def test_every_operation_refreshes_first_so_ignored_desired_sizes_are_live():
    # Elastic node groups ignore changes to scalingConfig.desiredSize. An update of their scaling config (a new
    # max) sends the desired size held in state; only a refresh makes that the live size instead of the 0 from
    # creation, which would drain every elastic node the policy function had added.
    assert _project()["options"]["refresh"] == "always"


def test_default_providers_are_disabled():
    value = _project()["config"]["pulumi:disable-default-providers"]["value"]
    assert set(value) == {"aws", "kubernetes"}
