"""The deploy workflow's rollout gate and the guardrails' rollout-blockers rule (issue 35 item 6): a pushed change
with a rollout blocker (offline/rollout.py) is refused before `pulumi up` unless its commit carries the trailer
`Rollout-Blockers-Accepted: <why>`; one CI's deploy role cannot carry out is refused even then; the guardrails pack
reports the same blockers from the gate's config."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pulumi_policy import StackValidationArgs

from conftest import REPO, resolved_prices
from test_cost_diff import _commit, _copy_project, _git, _set
from test_gitops_workflows import load

from guardrails import policies as g

VERSION_LINE = '    kubernetes_version: "1.35"'


def _gate_script(stack: str) -> str:
    [step] = [s for s in load("deploy.yml")["jobs"][stack]["steps"] if s.get("name") == "rollout gate"]
    return step["run"]


def _run_gate(repo: Path, tmp_path: Path, before: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The dev job's gate step as a Linux runner runs a `run:` step (`bash -e {0}`), in `repo`."""
    env = dict(os.environ, BEFORE_SHA=before, RUNNER_TEMP=str(tmp_path))
    result = subprocess.run(
        ["bash", "-e", "-c", _gate_script("dev")], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )
    config_file = tmp_path / "guardrails-config.json"
    return result, json.loads(config_file.read_text()) if config_file.exists() else {}


@pytest.fixture(scope="module")
def dev_repo(tmp_path_factory):
    """dev at Kubernetes 1.33 (the base commit); the working copy is then edited per test."""
    repo = _copy_project(tmp_path_factory.mktemp("gate") / "repo")
    (repo / "Pulumi.prod.yaml").unlink()  # one stack keeps the runs short
    _set(repo, "dev", VERSION_LINE, VERSION_LINE.replace("1.35", "1.33"))
    _commit(repo, "dev at 1.33")
    (repo / ".venv").symlink_to(REPO / ".venv")  # what `make install` leaves, untracked
    with open(repo / ".git" / "info" / "exclude", "a") as exclude:  # a link is not the ignored `.venv/` folder
        exclude.write(".venv\n")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


def test_the_gate_runs_before_pulumi_up_and_feeds_the_guardrails_in_both_jobs():
    for stack in ("dev", "prod"):
        steps = load("deploy.yml")["jobs"][stack]["steps"]
        names = [s.get("name") or s.get("uses", "") for s in steps]
        gate = names.index("rollout gate")
        up = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("pulumi/actions@"))
        assert gate < up
        assert steps[up]["with"]["policyPackConfigs"] == "${{ runner.temp }}/guardrails-config.json"
        assert "--fail-on-blockers" in steps[gate]["run"] and f"-s {stack}" in steps[gate]["run"]
        checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
        assert checkout["with"]["fetch-depth"] == 0  # the base commit is previewed from a worktree


def test_a_two_minor_jump_is_refused_and_the_trailer_lets_an_accepted_blocker_through(dev_repo, tmp_path):
    repo, base = dev_repo
    _set(repo, "dev", VERSION_LINE.replace("1.35", "1.33"), VERSION_LINE)
    _commit(repo, "dev to 1.35")
    try:
        refused, config = _run_gate(repo, tmp_path, base)
        assert refused.returncode == 5, refused.stdout + refused.stderr
        said = " ".join(refused.stderr.split())  # folded to 80 columns
        assert all(len(line) <= 80 for line in refused.stderr.splitlines() if "rollout blocker" in line)
        assert (
            "error: rollout blocker: dev: this change upgrades the EKS cluster `gpuloan-dev` (Kubernetes 1.33 "
            "-> 1.35" in said
        )
        assert "Rollout-Blockers-Accepted: <why>" in said
        [blocker] = config["rollout-blockers"]["blockers"]
        assert blocker.startswith("dev: upgrades the EKS cluster") and config["rollout-blockers"]["accepted"] == ""

        _git(
            repo,
            "commit",
            "--amend",
            "--quiet",
            "-m",
            "dev to 1.35\n\nRollout-Blockers-Accepted: a test of the override",
        )
        accepted, config = _run_gate(repo, tmp_path, base)
        assert accepted.returncode == 0, accepted.stdout + accepted.stderr
        assert "rollout blockers accepted: a test of the override" in accepted.stderr
        assert config["rollout-blockers"]["accepted"] == "a test of the override"
    finally:
        _git(repo, "reset", "--quiet", "--hard", base)


def test_one_minor_step_passes_the_gate(dev_repo, tmp_path):
    repo, base = dev_repo
    _set(repo, "dev", VERSION_LINE.replace("1.35", "1.33"), VERSION_LINE.replace("1.35", "1.34"))
    _commit(repo, "dev to 1.34")
    try:
        result, config = _run_gate(repo, tmp_path, base)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "upgrade 1. control plane: Kubernetes 1.33 -> 1.34" in result.stdout
        assert config["rollout-blockers"] == {"accepted": "", "administrator_blockers": [], "blockers": []}
    finally:
        _git(repo, "reset", "--quiet", "--hard", base)


def test_the_override_never_accepts_what_ci_cannot_apply():
    from gpuloan.render import cost_comment
    from offline import diff as cost_diff
    from offline import rollout

    admin = rollout.Blocker(
        "floor",
        "prod-training-guaranteed",
        "replaces",
        ("delete first with the node role …",),
        needs_administrator=True,
    )
    other = rollout.Blocker("elastic group", "prod-training-spot", "replaces", ("instanceTypes",))
    d = cost_diff.StackDiff("prod", cost_diff.Side(doc={}), cost_diff.Side(doc={}))
    original = cost_comment.blockers
    cost_comment.blockers = lambda _d: [admin, other]
    try:
        assert cost_comment.refused_blockers([d], "meant") == [f"prod: this change {admin.sentence()}"]
        assert len(cost_comment.refused_blockers([d], None)) == 2
        config = cost_comment.guardrail_config([d], "meant")["rollout-blockers"]
        assert config["administrator_blockers"] == [f"prod: {admin.sentence()}"]
        assert config["blockers"] == [f"prod: {other.sentence()}"]
    finally:
        cost_comment.blockers = original
    # a base that could not be previewed hides its blockers: refused too, unless accepted
    unknown = cost_diff.StackDiff("dev", cost_diff.Side(problems=["region: unknown"]), cost_diff.Side(doc={}))
    assert cost_comment.refused_blockers([unknown], None) == [
        "dev: the base could not be previewed, so the rollout cannot be checked"
    ]
    assert cost_comment.refused_blockers([unknown], "meant") == []
    new_stack = cost_diff.StackDiff("dev", cost_diff.Side(missing=True), cost_diff.Side(doc={}))
    assert cost_comment.refused_blockers([new_stack], None) == []


# --- the guardrails pack ----------------------------------------------------------------------------------------


def _report(config: dict | None) -> list[str]:
    found: list[str] = []
    g.validate_rollout_blockers(StackValidationArgs([], config), lambda msg, urn=None: found.append(msg))
    return found


def test_the_guardrail_reports_the_gates_blockers_unless_accepted():
    assert _report(None) == []  # an administrator's `pulumi up`: no gate, nothing to report
    blockers = {
        "blockers": ["prod: replaces the floor `prod-training-guaranteed` (subnetIds)"],
        "administrator_blockers": [],
        "accepted": "",
    }
    [msg] = _report(blockers)
    assert msg.startswith("rollout blocker: prod: replaces the floor `prod-training-guaranteed`")
    assert "Rollout-Blockers-Accepted: <why>" in msg
    assert _report({**blockers, "accepted": "moving the floor to 1b in the maintenance window"}) == []
    admin = {
        **blockers,
        "administrator_blockers": ["prod: replaces the floor `x` (delete first with …)"],
        "accepted": "meant",
    }
    [msg] = _report(admin)
    assert "CI's deploy role cannot apply" in msg


def test_the_rule_is_mandatory_with_a_config_schema():
    [policy] = [p for p in g.policies(resolved_prices()) if p.name == "rollout-blockers"]
    assert policy.enforcement_level == g.MANDATORY
    assert set(policy.config_schema.properties) == {"blockers", "administrator_blockers", "accepted"}
    from gpuloan.render import cost_comment

    assert g.ACCEPT_TRAILER == cost_comment.ACCEPT_TRAILER  # the pack imports no command-line code: one name
