"""Prices as a committed, versioned input (issue 25, item 1): the project's gpuloan-prices.json beside Pulumi.yaml is
found without any variable, `--prices` / $GPULOAN_PRICE_FILE still win, `prices refresh` writes it keeping other
regions, the base and head of a cost diff are priced by the head's file, and a cost diff without any price file
says so and fails (exit 4) instead of reporting "unknown" quietly.

The prices here are test rates written by the test (labelled so), not AWS's: these tests need no ../shared."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from gpuloan import cli
from offline import diff as cost_diff
from gpuloan.commands import cost_diff as cmd_cost_diff, prices as cmd_prices
from pricing.sources import pricebook

SKIP = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    "tests",
    "*.egg-info",
    "venv",
    "out",
    "build",
    "dist",
    pricebook.PROJECT_PRICE_FILE,
)


@pytest.fixture(autouse=True)
def no_price_variable(monkeypatch, tmp_path):
    """As a user's shell: no GPULOAN_PRICE_FILE (conftest sets one when ../shared is there), an empty cache."""
    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.delenv(pricebook.ENV_PROJECT_PRICES, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    # nor the snapshot shipped in the package (tests/pricing/test_price_snapshot.py): these tests are about the files
    monkeypatch.setenv(pricebook.ENV_SNAPSHOT, "0")
    yield


def made_up_rates(stack: str, usd_per_hour: float = 1.0) -> pricebook.PriceBook:
    """A book pricing every GPU type of the shipped stack at a made-up rate (test data, not AWS's prices)."""
    region, types, _ = cmd_prices.stack_targets(yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text()))
    body = pricebook.RegionPrices(region, "test rates", "2026-11-30T08:00:00+00:00")
    for t in types:
        body.prices[t] = pricebook.Price(
            t, region, usd_per_hour, usd_per_hour / 2, "observed-median", "<5%", source="test rates", as_of="2026-11-30"
        )
    return pricebook.PriceBook(origin=None, regions={region: body})


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(REPO, project, ignore=SKIP)
    return project


def test_the_project_price_file_is_found_from_a_subfolder_without_any_variable(tmp_path):
    project = tmp_path / "p"
    (project / "docs").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: gpuloan\nruntime: python\n")
    written = pricebook.write_project_file(made_up_rates("dev"), project / pricebook.PROJECT_PRICE_FILE)
    region = next(iter(made_up_rates("dev").regions))
    book = pricebook.resolve(environ={}, cwd=project / "docs")
    assert book.origin == str(written) and book.covers(region)
    assert "as of 2026-11-30" in book.describe(region)
    # outside a project: nothing found, nothing invented
    no_snapshot = {pricebook.ENV_SNAPSHOT: "0"}
    assert pricebook.resolve(environ=no_snapshot, cwd=tmp_path).origin is None
    # the variable and the option still win over the committed file
    other = tmp_path / "other.json"
    pricebook.write_project_file(
        pricebook.PriceBook(None, {"eu-west-1": pricebook.RegionPrices("eu-west-1", "t", "2026-01-01")}), other
    )
    assert pricebook.resolve(environ={pricebook.ENV_PRICE_FILE: str(other)}, cwd=project).covers("eu-west-1")
    assert pricebook.resolve(explicit=other, environ={}, cwd=project).origin == str(other)
    # cost-diff's base side: never its own file
    assert pricebook.resolve(environ={**no_snapshot, pricebook.ENV_PROJECT_PRICES: "0"}, cwd=project).origin is None


def test_writing_the_project_file_keeps_the_other_regions_and_records_when(tmp_path):
    path = tmp_path / pricebook.PROJECT_PRICE_FILE
    pricebook.write_project_file(
        pricebook.PriceBook(None, {"eu-west-1": pricebook.RegionPrices("eu-west-1", "t", "2026-01-01")}), path
    )
    pricebook.write_project_file(made_up_rates("dev"), path)
    doc = json.loads(path.read_text())
    assert "eu-west-1" in doc["regions"] and len(doc["regions"]) == 2
    assert doc["written_at"].endswith("Z") and "gpuloan prices refresh" in doc["written_by"]


def test_preview_reads_the_committed_price_file_with_no_variable(tmp_path, monkeypatch, capsys):
    project = _project(tmp_path)
    pricebook.write_project_file(made_up_rates("dev"), project / pricebook.PROJECT_PRICE_FILE)
    monkeypatch.chdir(project)
    assert cli.main(["preview", "dev", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert cost["guaranteed_monthly_usd"] is not None and cost["has_price_source"]
    assert "as of 2026-11-30" in cost["price_source"] and pricebook.PROJECT_PRICE_FILE in cost["price_source"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_a_cost_diff_prices_base_and_head_with_the_heads_file(tmp_path, monkeypatch):
    """A price update alone (the scheduled refresh's pull request) changes no figure: both sides read the head's
    file, so the diff shows what the change does, not what AWS did."""
    repo = _project(tmp_path)
    _git(repo, "init", "--quiet", "--initial-branch=main")
    pricebook.write_project_file(made_up_rates("dev", 1.0), repo / pricebook.PROJECT_PRICE_FILE)
    _git(repo, "add", "-A"), _git(repo, "commit", "--quiet", "-m", "prices at $1")
    pricebook.write_project_file(made_up_rates("dev", 2.0), repo / pricebook.PROJECT_PRICE_FILE)
    _git(repo, "add", "-A"), _git(repo, "commit", "--quiet", "-m", "prices at $2")
    monkeypatch.chdir(repo)
    (d,) = cost_diff.cost_diff(repo, "HEAD~1", ["dev"])
    base, head = d.totals["base"], d.totals["head"]
    assert isinstance(head["guaranteed_monthly_usd"], float) and head["guaranteed_monthly_usd"] > 0
    assert base["guaranteed_monthly_usd"] == head["guaranteed_monthly_usd"]
    assert "as of 2026-11-30" in d.head.doc["cost"]["price_source"]


def test_a_cost_diff_without_any_price_file_says_so_loudly_and_exits_4(tmp_path, monkeypatch, capsys):
    repo = _project(tmp_path)
    _git(repo, "init", "--quiet", "--initial-branch=main")
    _git(repo, "add", "-A"), _git(repo, "commit", "--quiet", "-m", "base")
    monkeypatch.chdir(repo)
    assert cli.main(["cost-diff", "--base", "HEAD", "-s", "dev", "--markdown"]) == cmd_cost_diff.EXIT_NO_PRICES
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == cost_diff.MARKER  # the workflow still finds and updates its comment
    assert lines[1] == "> [!WARNING]" and "No price file: no cost was compared" in lines[2]
    assert "gpuloan prices refresh -s STACK" in lines[2] and "No price file" in err
