"""Pulumi secrets offline (issue 25, item 3): a `secure:` value is opaque, not fatal. validate and preview check and
show everything that does not depend on it (a typed placeholder stands in) and list what was not checked;
cost-diff never reports a change it did not see ("not compared: secret", never removed/changed).

Two stacks: dev with a secure alert email, dev with a secure budget amount."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from conftest import REPO, stack_config
from test_project_prices import SKIP, _git, made_up_rates

from gpuloan import cli
from offline import diff as cost_diff
from pricing.sources import pricebook

CIPHERTEXT = "v1:AAABAJx0Y2lwaGVydGV4dA=="  # the shape Pulumi writes; nothing decrypts it here


def secure_email() -> dict:
    cfg = stack_config("dev")
    cfg["gpuloan:budget"]["alert_emails"] = [{"secure": CIPHERTEXT}]
    return cfg


def secure_budget() -> dict:
    cfg = stack_config("dev")
    cfg["gpuloan:budget"]["monthly_usd"] = {"secure": CIPHERTEXT}
    return cfg


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project with its own price file (made-up rates: no ../shared needed), as the current folder."""
    root = tmp_path / "project"
    shutil.copytree(REPO, root, ignore=SKIP)
    pricebook.write_project_file(made_up_rates("dev"), root / pricebook.PROJECT_PRICE_FILE)
    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.chdir(root)
    yield root


def _stack(root, cfg: dict) -> None:
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": cfg}))


@pytest.mark.parametrize(
    "make, path", [(secure_email, "budget.alert_emails[0]"), (secure_budget, "budget.monthly_usd")]
)
def test_validate_checks_everything_else_and_lists_the_secret(project, capsys, make, path):
    _stack(project, make())
    assert cli.main(["validate", "dev"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("dev: valid") and f"not checked: {path}: a Pulumi secret" in out
    assert "--config-json" in out and CIPHERTEXT not in out + err
    assert "1,000,000" not in out  # the placeholder is never shown as the stack's value


def test_validate_still_reports_a_real_problem_beside_a_secret(project, capsys):
    cfg = secure_email()
    cfg["gpuloan:budget"]["actual_thresholds_pct"] = [50, 50]
    _stack(project, cfg)
    assert cli.main(["validate", "dev"]) == 2
    err = capsys.readouterr().err
    assert "budget.actual_thresholds_pct" in err and "alert_emails" not in err


def test_preview_of_a_secret_email_shows_every_figure(project, capsys):
    _stack(project, secure_email())
    assert cli.main(["preview", "dev", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unchecked_secrets"] == ["budget.alert_emails[0]"]
    assert doc["cost"]["budget_monthly_usd"] == stack_config("dev")["gpuloan:budget"]["monthly_usd"]
    assert doc["cost"]["secret_figures"] == {} and doc["cost"]["guaranteed_monthly_usd"] is not None


def test_preview_of_a_secret_budget_hides_what_it_feeds(project, capsys):
    _stack(project, secure_budget())
    assert cli.main(["preview", "dev", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cost = doc["cost"]
    assert doc["unchecked_secrets"] == ["budget.monthly_usd"]
    assert cost["budget_monthly_usd"] is None and cost["budget_headroom_monthly_usd"] is None
    assert "budget_monthly_usd" in cost["secret_figures"]["total"]
    assert cost["guaranteed_monthly_usd"] is not None  # the floor does not depend on the budget
    assert cli.main(["preview", "dev", "--summary"]) == 0
    out = capsys.readouterr().out
    assert "not checked" in out and "budget.monthly_usd" in out and "1,000,000" not in out


@pytest.mark.parametrize("make", [secure_email, secure_budget])
def test_cost_diff_never_reports_a_secret_as_removed_or_changed(project, capsys, make):
    _git(project, "init", "--quiet", "--initial-branch=main")
    _git(project, "add", "-A"), _git(project, "commit", "--quiet", "-m", "plain values")
    _stack(project, make())
    rc = cli.main(["cost-diff", "--base", "HEAD", "-s", "dev", "--markdown"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "(removed)" not in out and "nothing was previewed" not in out + err
    assert "not compared: secret" in out
    budget = stack_config("dev")["gpuloan:budget"]["monthly_usd"]
    if make is secure_budget:
        (total,) = [line for line in out.splitlines() if line.startswith("| **total**")]
        assert total.count("not compared: secret") == 2  # budget and headroom
        assert f"−${budget:,.0f}" not in out and "—" not in total
        assert "limitAmount [secret]" in out  # the budget's amount changed into a secret: its value is not shown
    else:
        assert f"${budget:,.0f}" in out  # the budget is read and shown as it is


def test_a_secret_on_the_base_side_only_is_not_compared_either(project):
    _stack(project, secure_budget())
    _git(project, "init", "--quiet", "--initial-branch=main")
    _git(project, "add", "-A"), _git(project, "commit", "--quiet", "-m", "secret budget")
    _stack(project, stack_config("dev"))
    (d,) = cost_diff.cost_diff(project, "HEAD", ["dev"])
    assert d.totals["base"]["budget_monthly_usd"] == d.totals["head"]["budget_monthly_usd"] == cost_diff.SECRET
