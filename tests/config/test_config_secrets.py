"""Secrets (`secure:`), keys from an imported Pulumi ESC environment, `--config-json`, and instance prices the user
gives in the config for types the price source lacks."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import stack_config, resolved_prices

from gpuloan import cli
from pricing import checks
from pricing.cost_model import costs
from config import config
from pricing.sources import pricebook

CIPHERTEXT = "v1:AAABAJx0Y2lwaGVydGV4dA=="  # the shape Pulumi writes; nothing decrypts it here


def _write(tmp_path, doc: dict, stack: str = "dev"):
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_secure_value_is_not_checked_says_so_and_how_to_validate_it(tmp_path, capsys):
    cfg = stack_config("dev")
    cfg["gpuloan:budget"]["alert_emails"] = [{"secure": CIPHERTEXT}]
    path = _write(tmp_path, {"config": cfg})
    assert cli.main(["validate", str(path)]) == 0  # everything else is valid (tests/config/test_secret_placeholders.py)
    out = capsys.readouterr().out
    assert "not checked: budget.alert_emails[0]: a Pulumi secret (`secure:`)" in out
    assert "pulumi config --show-secrets --json" in out and "--config-json" in out
    assert CIPHERTEXT not in out  # never echoed


def test_a_secret_no_placeholder_fits_is_still_reported(tmp_path, capsys):
    cfg = stack_config("dev")
    cfg["gpuloan:budget"] = {"secure": CIPHERTEXT}  # a whole required object: no placeholder passes its validation
    path = _write(tmp_path, {"config": cfg})
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "budget: a Pulumi secret (`secure:`)" in err and CIPHERTEXT not in err


def test_a_whole_secret_key_is_reported_once(tmp_path):
    cfg = stack_config("dev")
    cfg["gpuloan:github"] = {"secure": CIPHERTEXT}
    with pytest.raises(config.ConfigError) as err:
        checks.from_stack_yaml({"config": cfg}, "Pulumi.dev.yaml", prices=resolved_prices())
    assert [p for p, _ in err.value.problems] == ["github"]


def test_a_key_an_esc_environment_may_supply_is_not_just_field_required(tmp_path):
    cfg = stack_config("dev")
    del cfg["gpuloan:budget"]
    with pytest.raises(config.ConfigError) as err:
        checks.from_stack_yaml(
            {"environment": ["acme/gpu-budgets"], "config": cfg}, "Pulumi.dev.yaml", prices=resolved_prices()
        )
    ((path, msg),) = [p for p in err.value.problems if p[0] == "budget"]
    assert "the stack imports the ESC environment(s) acme/gpu-budgets" in msg and "--config-json" in msg


def test_config_json_validates_the_decrypted_values(tmp_path, capsys, monkeypatch):
    cfg = stack_config("dev")
    # `pulumi config --show-secrets --json`: structured keys carry objectValue, plain ones a string value
    dump = {
        k: (
            {"value": json.dumps(v), "objectValue": v, "secret": k == "gpuloan:budget"}
            if isinstance(v, (dict, list))
            else {"value": str(v), "secret": False}
        )
        for k, v in cfg.items()
    }
    (tmp_path / "cfg.json").write_text(json.dumps(dump))
    stack_file = dict(cfg)
    stack_file["gpuloan:budget"] = {"secure": CIPHERTEXT}
    _write(tmp_path, {"config": stack_file})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", "-s", "dev"]) == 2
    capsys.readouterr()
    assert cli.main(["validate", "-s", "dev", "--config-json", str(tmp_path / "cfg.json")]) == 0
    assert capsys.readouterr().out.startswith("dev: valid")


def test_config_json_without_show_secrets_says_so(tmp_path, capsys):
    (tmp_path / "cfg.json").write_text(json.dumps({"gpuloan:budget": {"value": "[secret]", "secret": True}}))
    _write(tmp_path, {"config": stack_config("dev")})
    assert cli.main(["validate", str(tmp_path / "Pulumi.dev.yaml"), "--config-json", str(tmp_path / "cfg.json")]) == 2
    assert "--show-secrets" in capsys.readouterr().err


# --- instance prices in the config ------------------------------------------------------------------------


@pytest.fixture
def g6_only(tmp_path, monkeypatch):
    """A price source that covers us-east-1 but prices g6.xlarge only (numbers are test inputs)."""
    doc = {
        "format": pricebook.FORMAT,
        "regions": {
            "us-east-1": {
                "source": "test fixture",
                "read_at": "2026-12-01",
                "instance_types": {
                    "g6.xlarge": {"ondemand_usd_per_hour": 1.0, "source": "test fixture", "as_of": "2026-12-01"}
                },
            }
        },
    }
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(path))
    yield


def test_a_type_without_a_price_can_be_priced_in_the_config(g6_only):
    cfg = stack_config("dev")
    assert "g5.xlarge" in cfg["gpuloan:pools"][0]["elastic"]["instance_types"]
    with pytest.raises(config.ConfigError) as err:
        checks.from_stack_yaml({"config": cfg}, "Pulumi.dev.yaml", prices=resolved_prices())
    assert any("g5.xlarge" in msg for _, msg in err.value.problems)  # without it: an error naming the path
    cfg["gpuloan:instance_prices"] = {
        "g5.xlarge": {"ondemand_usd_per_hour": 2.0, "spot_usd_per_hour": 1.5, "source": "test fixture: a quote"}
    }
    parsed = checks.from_stack_yaml({"config": cfg}, "Pulumi.dev.yaml", prices=resolved_prices())
    prices = resolved_prices().with_config(parsed)  # the book plus the config's own prices, as a command holds them
    p = prices.price("g5.xlarge", "us-east-1")
    assert p.ondemand_usd_per_hour == 2.0 and "gpuloan:instance_prices (test fixture: a quote)" in p.source
    pool = costs.pool_cost(prices, parsed, parsed.pools[0])
    assert pool.elastic_spot_usd_per_hour == 1.5  # the priciest spot of g6 (1.0, no spot) and g5 (1.5)
    assert prices.price("g6.xlarge", "us-east-1").source == "test fixture"  # the price source wins where it has one
    assert resolved_prices().price("g5.xlarge", "us-east-1") is None  # parsing wrote nothing: the book lacks it


def test_a_config_price_needs_a_source():
    cfg = stack_config("dev")
    cfg["gpuloan:instance_prices"] = {"g5.xlarge": {"ondemand_usd_per_hour": 2.0}}
    with pytest.raises(config.ConfigError) as err:
        checks.from_stack_yaml({"config": cfg}, "Pulumi.dev.yaml", prices=resolved_prices())
    assert ("instance_prices.g5.xlarge.source", "Field required") in err.value.problems
