"""`gpuloan preview`: runs both shipped stacks offline; the JSON has the documented shape; costs come from the prices."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import GPULOAN, REPO, SHARED_PRICES, STACKS, requires_prices, requires_shared_prices, stack_config


def _preview_json(stack_or_file: str, cwd=REPO) -> tuple[int, dict | None, str]:
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "preview", stack_or_file, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads(result.stdout) if result.returncode == 0 else None
    return result.returncode, doc, result.stderr


@pytest.fixture(scope="module")
def previews():
    return {stack: _preview_json(stack) for stack in STACKS}


@pytest.mark.parametrize("stack", STACKS)
def test_preview_json_has_the_documented_shape(previews, stack):
    rc, doc, err = previews[stack]
    assert rc == 0, err
    assert set(doc) == {"schema_version", "stack", "resources", "outputs", "cost", "unchecked_secrets"}
    assert {"platform", "fixed_monthly_usd", "budget_headroom_monthly_usd", "fallback_max_monthly_usd"} <= set(
        doc["cost"]
    )
    assert doc["stack"] == stack
    assert doc["resources"], "the program declared no resources"
    for r in doc["resources"]:
        assert set(r) == {"urn", "type", "name", "parent", "inputs", "ignore_changes", "protect"}
        assert r["urn"].startswith(f"urn:pulumi:{stack}::gpuloan::")
    assert {"pools", "guaranteed_monthly_usd", "elastic_max_monthly_usd"} <= set(doc["cost"])
    names = [p["pool"] for p in doc["cost"]["pools"]]
    assert names == [p["name"] for p in stack_config(stack)["gpuloan:pools"]]
    assert doc["outputs"]["environment"] == stack


def _csv_rows(instance_type: str, region: str) -> list[dict]:
    import csv

    with (SHARED_PRICES / "aws_gpu_prices.csv").open() as f:
        return [r for r in csv.DictReader(f) if r["instance_type"] == instance_type and r["region"] == region]


@requires_shared_prices
def test_dev_pool_cost_matches_a_hand_computation(previews):
    """dev: 1 x g6.xlarge on demand; up to 4 spot nodes of g6.xlarge / g5.xlarge (priced at the dearer one)."""
    _, doc, _ = previews["dev"]
    pool = doc["cost"]["pools"][0]

    def current_od(t):  # the 2026 on-demand row (Karpenter's table for us-east-1)
        return float(
            next(r for r in _csv_rows(t, "us-east-1") if r["source"].startswith("aws/karpenter"))[
                "ondemand_usd_per_hour"
            ]
        )

    def spot(t):  # current on-demand x the snapshot's observed spot/on-demand ratio
        snap = next(r for r in _csv_rows(t, "us-east-1") if r["source"].startswith("skypilot"))
        return current_od(t) * float(snap["spot_usd_per_hour"]) / float(snap["ondemand_usd_per_hour"])

    assert pool["guaranteed_monthly_usd"] == pytest.approx(current_od("g6.xlarge") * 1 * 730, abs=0.01)
    assert pool["guaranteed_monthly_usd"] == pytest.approx(587.50, abs=0.01)
    expected_spot = max(spot("g6.xlarge"), spot("g5.xlarge"))
    assert pool["elastic_max_monthly_usd"] == pytest.approx(expected_spot * 4 * 730, abs=0.05)
    assert pool["fallback_max_monthly_usd"] == 0  # capacity: spot, no fallback group
    assert doc["cost"]["budget_monthly_usd"] == 2500


@requires_prices
def test_prod_totals_add_up(previews):
    _, doc, _ = previews["prod"]
    cost = doc["cost"]
    assert cost["guaranteed_monthly_usd"] == pytest.approx(
        sum(p["guaranteed_monthly_usd"] for p in cost["pools"]), abs=0.05
    )
    training = next(p for p in cost["pools"] if p["pool"] == "training")
    assert training["guaranteed_nodes"] == 2 and training["guaranteed_gpus"] == 16
    assert training["fallback_max_nodes"] == 2  # on_demand_max_nodes
    assert "capacity reservation" in training["guaranteed_note"]


@requires_shared_prices
def test_preview_text_shows_tree_and_costs():
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "preview", "prod"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "stack prod" in result.stdout
    assert "Estimated monthly cost" in result.stdout
    assert "training" in result.stdout and "p4d.24xlarge" in result.stdout
    # the cost table says where its prices come from and their date
    assert "prices: public table aws_gpu_prices.csv" in result.stdout and "as of 2026-" in result.stdout


def test_preview_stops_on_bad_config_before_running(tmp_path):
    cfg = stack_config("dev")
    cfg["gpuloan:pools"][0]["elastic"]["max_nodes"] = -1
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": cfg}))
    rc, doc, err = _preview_json(str(tmp_path / "Pulumi.dev.yaml"))
    assert rc == 2 and doc is None
    assert "pools[0].elastic.max_nodes" in err
    assert "nothing was previewed" in err


def test_preview_json_is_byte_identical_across_runs():
    """Same tree, same bytes: assets by content hash, resources in URN order, money rounded (cost-diff relies on it)."""
    runs = [
        subprocess.run(
            [sys.executable, "-m", "gpuloan", "preview", "-s", "prod", "--json"],
            cwd=REPO,
            capture_output=True,
            timeout=300,
        )
        for _ in range(2)
    ]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    doc = json.loads(runs[0].stdout)
    code = next(r for r in doc["resources"] if r["type"] == "aws:lambda/function:Function")["inputs"]["code"]
    assert code["asset"] == "FileArchive" and len(code["sha256"]) == 64  # not `<... object at 0x...>`
    assert b" object at 0x" not in runs[0].stdout


def test_without_prices_the_fixed_cost_line_says_unknown_not_a_bound(tmp_path):
    """No price at all (the shipped snapshot turned off): the summary line says "unknown", never "unknown + unknown
    platform items" or "at most unknown", which read as figures."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "GPULOAN_PRICE_FILE"}
    env.update(XDG_CACHE_HOME=str(tmp_path), GPULOAN_PRICE_SNAPSHOT="0")
    out = subprocess.run(
        [*GPULOAN, "preview", "-s", "dev"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    ).stdout
    line = " ".join(out.split("fixed monthly (floor + platform):", 1)[1].split("platform cost unknown", 1)[0].split())
    assert line == "unknown; budget headroom: unknown", line
