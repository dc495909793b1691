"""`gpuloan cost-diff` on a temporary git repository: a copy of this project with two commits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, requires_shared_prices, resolved_prices

from gpuloan import cli
from offline import diff as cost_diff
from pricing.sources import floor_pricing

SKIP = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    "traces",
    "tests",
    "*.egg-info",
    "venv",
    "out",
    "build",
    "dist",
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _copy_project(dst: Path) -> Path:
    shutil.copytree(REPO, dst, ignore=SKIP)
    _git(dst, "init", "--quiet", "--initial-branch=main")
    return dst


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", message)


def _set(repo: Path, stack: str, old: str, new: str) -> None:
    path = repo / f"Pulumi.{stack}.yaml"
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


TRAINING_FLOOR = "        instance_type: p4d.24xlarge\n        nodes: 2\n"


TRAINING_RIS = "      count: 2\n"  # prod's p4d-ri-1yr commitment (gpuloan:commitments)


@pytest.fixture(scope="module")
def floor_raised(tmp_path_factory):
    """Commit 1: prod's training floor is 2 p4d.24xlarge covered by 2 RIs; commit 2 raises both to 3. Diff
    HEAD~1 -> HEAD."""
    repo = _copy_project(tmp_path_factory.mktemp("proj") / "repo")
    _commit(repo, "floor of 2")
    _set(repo, "prod", TRAINING_FLOOR, TRAINING_FLOOR.replace("nodes: 2", "nodes: 3"))
    _set(repo, "prod", TRAINING_RIS, TRAINING_RIS.replace("2", "3"))
    _commit(repo, "floor of 3, and a third RI")
    return repo, cost_diff.cost_diff(repo, "HEAD~1", ["prod"])


# The total headroom counts the platform rows too; the shared data has no platform prices, so it is an upper bound.
EXPECTED_TABLE = """\
| pool | guaranteed (fixed) | elastic max | fallback max | budget | budget headroom |
|---|---:|---:|---:|---:|---:|
| training | $19,735 → $29,602 (+$9,867) | $65,678 | $80,358 | $60,000 | $40,265 → $30,398 (−$9,867) |
| inference | $2,717 | $4,869 | $13,094 | $8,000 | $5,283 |
| research | $0 | $6,675 | $0 | $7,000 | $7,000 |
| commitments (unused) | $0 | — | — | — | — |
| **total** | **$22,452 → $32,320 (+$9,867)** | **$77,222** | **$93,452** | **$75,000** | **≤$52,548 → ≤$42,680 (−$9,867)** |
"""


@requires_shared_prices
def test_raising_the_floor_shows_the_added_cost_per_month(floor_raised):
    _, (diff,) = floor_raised
    md = cost_diff.render_markdown([diff], "HEAD~1")
    assert md.startswith(cost_diff.MARKER)
    assert EXPECTED_TABLE in md
    # The added cost is one p4d.24xlarge at the rate of the RI that now covers it (reserved_1yr) for 730 hours.
    one_node = (
        floor_pricing.floor_rate(resolved_prices(), "p4d.24xlarge", "us-east-1", "reserved_1yr").usd_per_hour * 730
    )
    row = next(r for r in diff.pools if r["pool"] == "training")
    assert row["head"]["guaranteed_monthly_usd"] - row["base"]["guaranteed_monthly_usd"] == pytest.approx(
        one_node, abs=0.02
    )
    assert f"+${one_node:,.0f}" == "+$9,867"


def test_raising_the_floor_changes_the_floor_resources_only(floor_raised):
    _, (diff,) = floor_raised
    assert diff.added == [] and diff.removed == []
    changed = {r["name"]: keys for r, keys in diff.changed}
    assert changed["training-guaranteed-ng"] == ["scalingConfig"]
    reservation = [
        name
        for name, r in [(r["name"], r) for r, _ in diff.changed]
        if r["type"] == "aws:ec2/capacityReservation:CapacityReservation"
    ]
    assert len(reservation) == 1 and changed[reservation[0]] == ["instanceCount"]
    assert not any("inference" in name for name in changed)  # the other pool is untouched
    assert "Resources: 0 to add" in cost_diff.render_markdown([diff], "HEAD~1")


@requires_shared_prices
def test_plain_text_output(floor_raised):
    _, (diff,) = floor_raised
    from gpuloan.render import cost_comment

    out = cost_comment.render_text([diff], "HEAD~1", width=200)  # wide enough that no cell folds
    assert "stack prod" in out and "resources: 0 to add" in out
    assert "~ training-guaranteed-ng (aws:eks/nodeGroup:NodeGroup): scalingConfig" in out
    training = next(line for line in out.splitlines() if line.strip().startswith("training"))
    assert "$19,735 → $29,602 (+$9,867)" in training


def test_invalid_config_on_either_side_is_reported_not_crashed_on(tmp_path, monkeypatch, capsys):
    repo = _copy_project(tmp_path / "repo")
    _set(repo, "prod", TRAINING_FLOOR, TRAINING_FLOOR.replace("nodes: 2", "nodes: 0"))
    _commit(repo, "a floor of zero nodes")
    _set(repo, "prod", "  gpuloan:region: us-east-1\n", "  gpuloan:region: mars-north-1\n")
    monkeypatch.chdir(repo)
    assert cli.main(["cost-diff", "--base", "HEAD", "--stack", "prod", "--markdown"]) == 2
    captured = capsys.readouterr()
    assert "**base: config fails validation:**" in captured.out
    assert "> - pools[0].guaranteed.nodes: Input should be greater than or equal to 1" in captured.out
    assert "**head: config fails validation:**" in captured.out and "> - region:" in captured.out
    assert "does not validate" in captured.err


@requires_shared_prices
def test_invalid_base_with_valid_head_shows_head_figures(floor_raised):
    _, (good,) = floor_raised
    diff = cost_diff.diff_stack("prod", cost_diff.Side(problems=["pools[0].guaranteed.nodes: must be >= 1"]), good.head)
    md = cost_diff.render_markdown([diff], "main")
    assert "> **base: config fails validation:**" in md and "> - pools[0].guaranteed.nodes: must be >= 1" in md
    assert "| training | $29,602 | $65,678 | $80,358 | $60,000 | $30,398 |" in md
    assert "Resources:" not in md  # no resource diff against an unknown base
    assert not diff.head_invalid


@requires_shared_prices
def test_new_stack_lists_every_resource_as_added(floor_raised):
    _, (good,) = floor_raised
    diff = cost_diff.diff_stack("prod", cost_diff.Side(missing=True), good.head)
    assert len(diff.added) == len(good.head.doc["resources"]) and diff.changed == diff.removed == []
    md = cost_diff.render_markdown([diff], "main")
    assert "no Pulumi.prod.yaml (new stack)" in md
    assert "| training (new) | — → $29,602 (+$29,602) |" in md


def test_unknown_ref_and_non_repository_are_clear_errors(floor_raised, tmp_path, monkeypatch, capsys):
    repo, _ = floor_raised
    monkeypatch.chdir(repo)
    assert cli.main(["cost-diff", "--base", "no-such-branch"]) == 2
    assert "unknown git ref 'no-such-branch'" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert cli.main(["cost-diff", "--base", "HEAD"]) == 2
    assert "not inside a git repository" in capsys.readouterr().err


def test_a_stack_on_neither_side_is_an_error_not_no_change(floor_raised, monkeypatch, capsys):
    repo, _ = floor_raised
    monkeypatch.chdir(repo)
    assert cli.main(["cost-diff", "--base", "HEAD", "-s", "nosuch"]) == 2  # a typo must not pass a required check
    err = capsys.readouterr().err
    assert "no stack nosuch in the working tree or at HEAD (stacks: dev, prod)" in err


def test_worktree_is_removed_afterwards(floor_raised):
    repo, _ = floor_raised
    assert _git(repo, "worktree", "list").count("\n") == 1


@requires_shared_prices
def test_the_gitops_example_shows_the_real_headline_and_table(floor_raised):
    """docs/gitops.md's floor 2 -> 3 example is the comment the command really prints."""
    from gpuloan.render import cost_comment

    _, (diff,) = floor_raised
    md = cost_comment.render_markdown([diff], "main")
    headline = "## 💰 Monthly cost will increase by $9,867 (+44 %)"
    assert headline in md.splitlines()
    assert "### stack `prod`: Monthly cost will increase by $9,867 (+44 %)" in md
    assert EXPECTED_TABLE in md
    docs = (REPO / "docs" / "gitops.md").read_text()
    assert headline in docs.splitlines() and EXPECTED_TABLE in docs
