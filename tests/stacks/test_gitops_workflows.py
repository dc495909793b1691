"""The GitHub workflows: schema, zizmor's security audit, and the properties the setup relies on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from pricing import checks

import pytest
import yaml
from conftest import GPULOAN, REPO, stack_config, resolved_prices

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
    out = subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *files],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("persona", ["pedantic", "auditor"])
def test_zizmor_finds_nothing_even_as_auditor(persona):
    out = subprocess.run(
        [str(BIN / "zizmor"), "--offline", f"--persona={persona}", str(WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "No findings to report" in out.stdout + out.stderr


def test_every_zizmor_suppression_says_why():
    found = 0
    for path in WORKFLOWS.glob("*.yml"):
        for line in path.read_text().splitlines():
            if "zizmor: ignore[" in line:
                found += 1
                reason = line.split("zizmor: ignore[", 1)[1].split("]", 1)[1].strip()
                assert len(reason.split()) >= 5, f"{path.name}: suppression without a reason: {line.strip()}"
    assert found == 0  # anything new needs a reason and a look


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml", "prices.yml"])
def test_every_action_is_pinned_to_a_commit_with_its_version_noted(name):
    text = (WORKFLOWS / name).read_text()
    uses = re.findall(r"uses:\s*(\S+)(.*)", text)
    assert uses
    for ref, rest in uses:
        assert PINNED.match(ref), f"{ref} is not pinned to a full commit SHA"
        assert re.search(r"#\s*v\d+\.\d+\.\d+", rest), f"{ref} has no version comment"


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml", "prices.yml"])
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
    assert sorted(stacks) == sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))
    (pulumi,) = steps_using(jobs["preview"], "pulumi/actions")
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["comment-on-pr"] is True
    assert pulumi["with"]["policyPacks"] == "guardrails"
    # No Pulumi token in a job that runs pull-request code: the S3 backend, through the preview role.
    assert "PULUMI_ACCESS_TOKEN" not in pulumi["env"]
    assert pulumi["env"] == {"PULUMI_BACKEND_URL": "${{ vars.PULUMI_BACKEND_URL }}"}
    (check,) = [s for s in jobs["preview"]["steps"] if s.get("name") == "check the state backend"]
    assert jobs["preview"]["steps"].index(check) < jobs["preview"]["steps"].index(pulumi)
    (creds,) = steps_using(jobs["preview"], "aws-actions/configure-aws-credentials")
    assert set(creds["with"]) >= {"role-to-assume", "aws-region"}
    assert not {"aws-access-key-id", "aws-secret-access-key"} & set(creds["with"])  # OIDC only
    assert "PREVIEW_ROLE" in str(jobs["preview"]["strategy"]["matrix"]["include"])


def test_preview_posts_one_cost_diff_comment_updated_in_place():
    job = load("preview.yml")["jobs"]["cost-diff"]
    script = next(s["run"] for s in job["steps"] if "cost-diff" in s.get("run", ""))
    assert 'gpuloan cost-diff --base "$BASE_SHA" --markdown' in script
    assert "--method PATCH" in script and "--method POST" in script  # edit the existing comment, else create one
    assert "github-actions[bot]" in script
    from offline.diff import MARKER

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
        assert pulumi["with"] == {
            "command": "up",
            "stack-name": stack,
            "policyPacks": "guardrails",
            # the rollout gate's blockers, for the guardrails' rollout-blockers rule
            "policyPackConfigs": "${{ runner.temp }}/guardrails-config.json",
        }
    assert groups["dev"] != groups["prod"] and all(stack in g for stack, g in groups.items())
    assert jobs["dev"]["needs"] == ["test", "runners"] and jobs["prod"]["needs"] == ["dev", "runners"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_each_deploy_runs_in_the_environment_its_deploy_role_trusts(stack):
    # dev deploys without reviewers, prod after approval; both are environments so the deploy token can be an
    # environment secret, and the role trust must agree with the workflow or the job could not assume its role.
    job = load("deploy.yml")["jobs"][stack]
    assert job["environment"] == stack
    assert stack_config(stack)["gpuloan:github"]["deploy_environment"] == job["environment"]


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml"])
def test_the_deploy_token_only_reaches_environment_jobs(name):
    for job_name, job in load(name)["jobs"].items():
        text = yaml.safe_dump(job)
        for secret in re.findall(r"secrets\.(\w+)", text):
            assert secret == "PULUMI_ACCESS_TOKEN", f"{name}:{job_name} reads {secret}"
            assert "environment" in job, f"{name}:{job_name} reads the deploy token outside an environment"


def test_no_pull_request_job_gets_any_pulumi_token_or_secret():
    """Pull-request jobs run the PR's code (and the PR's copy of this file): no secret, no Pulumi token at all."""
    doc = load("preview.yml")
    text = (WORKFLOWS / "preview.yml").read_text()
    assert "secrets." not in text
    assert "PULUMI_ACCESS_TOKEN" not in text
    for job in doc["jobs"].values():
        assert "environment" not in job  # the preview role trusts the pull_request subject only


def _ci_runner(*stacks: str, cwd=REPO) -> dict:
    out = subprocess.run([*GPULOAN, "ci-runner", *stacks], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return {k: json.loads(v) for k, v in (line.split("=", 1) for line in out.stdout.splitlines())}


def test_pulumi_jobs_run_where_each_stack_config_says_ci_reaches_the_cluster():
    assert _ci_runner("dev", "prod") == {  # self_hosted: runners in each stack's VPC
        "dev": ["self-hosted", "linux", "x64", "gpuloan-dev"],
        "prod": ["self-hosted", "linux", "x64", "gpuloan-prod"],
    }
    deploy = load("deploy.yml")["jobs"]
    for stack in ("dev", "prod"):
        assert deploy[stack]["runs-on"] == f"${{{{ fromJSON(needs.runners.outputs.{stack}) }}}}"
        assert "runners" in deploy[stack]["needs"]
    preview = load("preview.yml")["jobs"]["preview"]
    assert preview["runs-on"] == "${{ fromJSON(matrix.runs_on) }}" and "runners" in preview["needs"]
    for entry in preview["strategy"]["matrix"]["include"]:
        assert entry["runs_on"] == f"${{{{ needs.runners.outputs.{entry['stack']} }}}}"
    for doc in (load("preview.yml"), load("deploy.yml")):
        (step,) = [s for s in doc["jobs"]["runners"]["steps"] if "ci-runner" in s.get("run", "")]
        assert step["run"] == '.venv/bin/gpuloan ci-runner dev prod >> "$GITHUB_OUTPUT"'
        assert set(doc["jobs"]["runners"]["outputs"]) == {"dev", "prod"}


def test_ci_runner_follows_a_changed_config(tmp_path):
    config = stack_config("dev")
    config["gpuloan:github"] = {"repository": "o/r", "cluster_access": "runner_cidrs", "runner_cidrs": ["192.0.2.0/28"]}
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    assert _ci_runner(str(path)) == {"dev": "ubuntu-24.04"}  # hosted runners whose egress the endpoint allows
    config["gpuloan:github"].update(runner_labels=["gpu-larger-runner"])
    path.write_text(yaml.safe_dump({"config": config}))
    assert _ci_runner(str(path)) == {"dev": ["gpu-larger-runner"]}


def test_the_scheduled_price_refresh_opens_a_pull_request_through_the_preview_roles():
    """Issue 25: prices are a committed input; a schedule refreshes them as a pull request, reading AWS only through
    OIDC into each stack's read-only preview role, which trusts exactly this job's environment."""
    from gpuloan.commands import prices as cmd_prices  # noqa: F401  (the command the job runs)
    from stacks.gitops import github_oidc
    from pricing.sources import pricebook

    doc = load("prices.yml")
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"} and doc["permissions"] == {}
    (job,) = doc["jobs"].values()
    assert job["environment"] == github_oidc.PRICES_ENVIRONMENT
    assert job["permissions"] == {"contents": "write", "pull-requests": "write", "id-token": "write"}
    assert all(s["with"]["persist-credentials"] is False for s in steps_using(job, "actions/checkout"))
    creds = steps_using(job, "aws-actions/configure-aws-credentials")
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in REPO.glob("Pulumi.*.yaml"))
    assert [c["with"]["role-to-assume"] for c in creds] == [
        f"${{{{ vars.GPULOAN_PREVIEW_ROLE_ARN_{s.upper()} }}}}" for s in stacks
    ]
    assert not any({"aws-access-key-id", "aws-secret-access-key"} & set(c["with"]) for c in creds)  # OIDC only
    runs = [s.get("run", "") for s in job["steps"]]
    assert [r for r in runs if r.startswith(".venv/bin/gpuloan prices refresh")] == [
        f".venv/bin/gpuloan prices refresh -s {s}" for s in stacks
    ]
    script = runs[-1]
    assert f"file={pricebook.PROJECT_PRICE_FILE}" in script and "gh pr create" in script
    cfg = config_mod_parse_prod()
    assert (
        f"repo:{cfg.github.repository}:environment:{github_oidc.PRICES_ENVIRONMENT}"
        in github_oidc.trust_subjects(cfg)["preview"]
    )


def config_mod_parse_prod():

    return checks.parse(
        {k.split(":", 1)[1]: v for k, v in stack_config("prod").items() if k.startswith("gpuloan:")},
        prices=resolved_prices(),
    )


# --- the cost-diff job in a repository that commits no price file (a fresh fork; this repository) ------------

FAKE_GH = """#!/usr/bin/env bash
# GitHub's API as the job reaches it: no earlier comment; a posted or edited body is kept in posted.md.
echo "$*" >> "$GH_CALLS"
for a in "$@"; do case "$a" in body=@*) cp "${a#body=@}" "$GH_POSTED" ;; esac; done
"""


def _run_cost_diff_step(repo: Path, tmp_path: Path, base: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The job's cost-diff step, run as a Linux runner runs a `run:` step without `shell:` (`bash -e {0}`, GitHub's
    workflow syntax, jobs.<job_id>.steps[*].shell, github/docs#27583) in `repo`, with the real gpuloan and a
    stand-in for `gh` (GitHub's API is not reachable here)."""
    import os

    script = next(
        s["run"] for s in load("preview.yml")["jobs"]["cost-diff"]["steps"] if "cost-diff" in s.get("run", "")
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "gh").write_text(FAKE_GH)
    (bin_dir / "gh").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "GPULOAN_PRICE_FILE"}  # as on a runner: no price variable
    # and the package's snapshot turned off (docs/prices.md): the job then has no price at all
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        BASE_SHA=base,
        GPULOAN_PRICE_SNAPSHOT="0",
        PR_NUMBER="7",
        REPOSITORY="example-org/ml-infra",
        GH_TOKEN="not-a-token",
        GH_CALLS=str(tmp_path / "calls"),
        GH_POSTED=str(tmp_path / "posted.md"),
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"),
        XDG_CACHE_HOME=str(tmp_path / "no-cache"),
    )
    result = subprocess.run(
        ["bash", "-e", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )
    return result, tmp_path / "posted.md"


def test_cost_diff_job_without_a_price_file_comments_how_to_get_one_and_passes_with_a_notice(tmp_path):
    from test_cost_diff import _commit, _copy_project, _git

    from offline.diff import MARKER

    repo = _copy_project(tmp_path / "repo")
    (repo / "Pulumi.prod.yaml").unlink()  # one stack keeps the run short
    _commit(repo, "base")
    (repo / ".venv").symlink_to(REPO / ".venv")  # what `make install` leaves, untracked
    assert not (repo / "gpuloan-prices.json").exists()
    result, posted = _run_cost_diff_step(repo, tmp_path, _git(repo, "rev-parse", "HEAD").strip())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "::notice title=GPU cost diff without prices::" in result.stdout
    assert "gpuloan prices refresh -s STACK" in result.stdout and "docs/prices.md" in result.stdout
    assert "GPU cost diff without prices" in (tmp_path / "summary.md").read_text()
    comment = posted.read_text()  # the comment still shows the resource changes, and says why no cost
    assert comment.startswith(MARKER) and "No price file: no cost was compared" in comment
    assert "Resources: 0 to add, 0 to change, 0 to remove" in comment

    # Any other failure still fails the check, with the error as the comment: an unknown base.
    posted.unlink()
    result, posted = _run_cost_diff_step(repo, tmp_path, "0" * 40)
    assert result.returncode == 2 and "::notice" not in result.stdout
    assert "gpuloan cost-diff could not run:" in posted.read_text()
