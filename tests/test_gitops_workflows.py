"""The GitHub workflows: schema, zizmor's security audit, and the properties the setup relies on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, stack_config

WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def load(name: str) -> dict:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the bare key `on` as true
    return doc


def steps_using(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(action + "@")]


def test_workflows_match_the_github_schema():
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) >= 2
    out = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *files],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_zizmor_finds_nothing_even_pedantic():
    out = subprocess.run([str(BIN / "zizmor"), "--offline", "--persona=pedantic", str(WORKFLOWS)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "No findings to report" in out.stdout + out.stderr


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_every_action_is_pinned_to_a_commit_with_its_version_noted(name):
    text = (WORKFLOWS / name).read_text()
    uses = re.findall(r"uses:\s*(\S+)(.*)", text)
    assert uses
    for ref, rest in uses:
        assert PINNED.match(ref), f"{ref} is not pinned to a full commit SHA"
        assert re.search(r"#\s*v\d+\.\d+\.\d+", rest), f"{ref} has no version comment"


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_no_expression_is_expanded_inside_a_shell_script(name):
    # Template injection: values reach scripts through env:, never as ${{ }} pasted into the script text.
    for job in load(name)["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), step.get("name") or step["run"][:40]


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_least_privilege_permissions(name):
    doc = load(name)
    assert doc["permissions"] == {}, "workflow-level default must grant nothing"
    for job_name, job in doc["jobs"].items():
        perms = job["permissions"]
        assumes_role = bool(steps_using(job, "aws-actions/configure-aws-credentials"))
        # id-token: write exactly where a job assumes an AWS role, nowhere else
        assert (perms.get("id-token") == "write") == assumes_role, job_name
        assert perms.get("contents") == "read", job_name
        assert set(perms.values()) <= {"read", "write"}
        assert not {k for k, v in perms.items() if v == "write"} - {"id-token", "pull-requests"}, job_name
        for step in steps_using(job, "actions/checkout"):
            assert step["with"]["persist-credentials"] is False


def test_preview_runs_on_pull_requests_over_every_stack():
    doc = load("preview.yml")
    assert set(doc["on"]) == {"pull_request"}  # never pull_request_target: PR code never sees write tokens
    jobs = doc["jobs"]
    assert "make test" in [s.get("run") for s in jobs["test"]["steps"]]
    stacks = [m["stack"] for m in jobs["preview"]["strategy"]["matrix"]["include"]]
    assert sorted(stacks) == sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))
    (pulumi,) = steps_using(jobs["preview"], "pulumi/actions")
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["comment-on-pr"] is True
    assert pulumi["with"]["policyPacks"] == "guardrails"
    assert "PULUMI_ACCESS_TOKEN" in pulumi["env"]
    (creds,) = steps_using(jobs["preview"], "aws-actions/configure-aws-credentials")
    assert set(creds["with"]) >= {"role-to-assume", "aws-region"}
    assert not {"aws-access-key-id", "aws-secret-access-key"} & set(creds["with"])  # OIDC only
    assert "PREVIEW_ROLE" in str(jobs["preview"]["strategy"]["matrix"]["include"])


def test_preview_posts_one_cost_diff_comment_updated_in_place():
    job = load("preview.yml")["jobs"]["cost-diff"]
    script = next(s["run"] for s in job["steps"] if "cost-diff" in s.get("run", ""))
    assert "gpuloan cost-diff --base \"$BASE_SHA\" --markdown" in script
    assert "--method PATCH" in script and "--method POST" in script  # edit the existing comment, else create one
    assert "github-actions[bot]" in script
    from gpuloan.cost_diff import MARKER

    assert f"marker='{MARKER}'" in script  # the workflow finds the comment by the marker cost-diff prints
    checkout = steps_using(job, "actions/checkout")[0]
    assert checkout["with"]["fetch-depth"] == 0  # the base commit must be present for the worktree


def test_deploy_runs_on_main_with_a_concurrency_group_per_stack():
    doc = load("deploy.yml")
    assert doc["on"] == {"push": {"branches": ["main"]}}
    jobs = doc["jobs"]
    groups = {}
    for stack in ("dev", "prod"):
        job = jobs[stack]
        assert job["concurrency"]["cancel-in-progress"] is False  # never kill an `up` half-way
        groups[stack] = job["concurrency"]["group"]
        (pulumi,) = steps_using(job, "pulumi/actions")
        assert pulumi["with"] == {"command": "up", "stack-name": stack, "policyPacks": "guardrails"}
    assert groups["dev"] != groups["prod"] and all(stack in g for stack, g in groups.items())
    assert jobs["dev"]["needs"] == "test" and jobs["prod"]["needs"] == "dev"


def test_prod_is_gated_by_the_environment_its_deploy_role_trusts():
    jobs = load("deploy.yml")["jobs"]
    assert "environment" not in jobs["dev"]  # dev deploys automatically
    assert jobs["prod"]["environment"] == "prod"
    # The role trust must agree with the workflow, or the prod job could not assume its role.
    assert stack_config("prod")["gpuloan:github"]["deploy_environment"] == jobs["prod"]["environment"]
    assert "deploy_environment" not in stack_config("dev")["gpuloan:github"]
