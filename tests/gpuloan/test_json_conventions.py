"""Conventions a script reading gpuloan's output relies on (issue 37, item 4): every JSON document carries
`schema_version`; an unknown amount is null, money is in cents, numbers carry no float noise; no row for what the
stack does not have."""

from __future__ import annotations

import json
import re

from conftest import REPO, stack_config, resolved_prices

from gpuloan import cli
from offline import diff as cost_diff
from gpuloan.render import cost_comment, json_doc
from pricing.cost_model import costs
from pricing import checks


def test_money_is_in_cents_unknown_is_null_and_numbers_carry_no_noise():
    doc = json_doc.document(
        {
            "total_cost_usd": 4.550305000000001,
            "spot_usd_per_hour": 4.550305000000001,
            "monthly_usd": {"reserved_1yr": 19734.967},
            "guaranteed_monthly_usd": "unknown",
            "estimated_savings_usd_over_window": 12.3456,
            "p95_wait_minutes": 0.1 + 0.2,
            "note": "unknown",
            "resources": [{"inputs": {"x": 0.1 + 0.2}}],
        }
    )
    assert list(doc)[0] == "schema_version" and doc["schema_version"] == json_doc.SCHEMA_VERSION
    assert doc["total_cost_usd"] == 4.55 and doc["spot_usd_per_hour"] == 4.550305
    assert doc["monthly_usd"] == {"reserved_1yr": 19734.97} and doc["estimated_savings_usd_over_window"] == 12.35
    assert doc["guaranteed_monthly_usd"] is None and doc["note"] == "unknown"  # only amounts become null
    assert doc["p95_wait_minutes"] == 0.3
    assert doc["resources"][0]["inputs"]["x"] == 0.1 + 0.2  # the program's inputs, as given


def test_every_command_prints_json_through_the_one_convention():
    """A command that prints a JSON document does it with json_doc (schema_version, cents, null); the config
    schema (a JSON Schema of the stack file) and ci-runner's GitHub output lines are not such documents."""
    printers = re.compile(r"json\.dumps?\(")
    offenders = [
        p.relative_to(REPO / "gpuloan").as_posix()
        for p in sorted((REPO / "gpuloan").rglob("*.py"))
        if p.relative_to(REPO / "gpuloan").as_posix()
        not in (
            "render/json_doc.py",
            "commands/schema.py",
            "commands/ci_runner.py",
            "config_json.py",
            "stackfile.py",
            "preview.py",
            "stack_arg.py",
        )
        and any(printers.search(line) and "print" in line for line in p.read_text().splitlines())
    ]
    assert offenders == []


def test_preview_json_has_the_version_and_nulls_without_prices(no_prices, capsys):
    assert cli.main(["preview", "-s", "dev", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == json_doc.SCHEMA_VERSION
    pool = doc["cost"]["pools"][0]
    assert pool["guaranteed_monthly_usd"] is None and pool["elastic_max_monthly_usd"] is None


def test_cost_diff_json_has_the_version_and_null_for_an_unknown_amount():
    head = {
        "cost": {
            "pools": [
                {
                    "pool": "p",
                    "guaranteed_monthly_usd": None,
                    "elastic_max_monthly_usd": 1.005,
                    "fallback_max_monthly_usd": None,
                    "budget_monthly_usd": 100.0,
                }
            ],
            "guaranteed_monthly_usd": None,
            "budget_monthly_usd": 100.0,
        }
    }
    d = cost_diff.StackDiff("dev", cost_diff.Side(missing=True), cost_diff.Side(doc=head))
    d.pools, d.totals = cost_diff.diff_costs(None, head)
    doc = json.loads(cost_comment.render_json([d], "HEAD"))
    assert doc["schema_version"] == json_doc.SCHEMA_VERSION
    figures = doc["stacks"][0]["pools"][0]["head"]
    assert figures["guaranteed_monthly_usd"] is None and figures["headroom_monthly_usd"] is None
    assert "unknown" not in json.dumps(doc["stacks"][0]["pools"])


def test_no_commitments_row_for_a_stack_without_commitments_even_without_prices(no_prices, capsys):
    cost = costs.stack_cost(
        resolved_prices(), checks.from_stack_yaml({"config": stack_config("dev")}, "dev", prices=resolved_prices())
    ).to_json()
    assert cost["unused_commitment_monthly_usd"] == 0.0 and not cost["commitments"]
    assert cost_diff._commitment_figures({"cost": cost}) is None
    assert cli.main(["preview", "-s", "dev", "--summary"]) == 0
    assert "commitments" not in capsys.readouterr().out
