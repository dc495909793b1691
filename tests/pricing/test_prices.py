"""Prices: the price file and cache, where the book in force comes from, the AWS adapters (botocore Stubber for
the APIs moto lacks, the moto server for spot history), and what the product shows without any price.

The rates in the stubbed answers are test inputs shaped like the examples in AWS's API documentation; the
product never ships a price.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from types import SimpleNamespace

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from conftest import REPO, requires_prices, requires_shared_prices, stack_config, resolved_prices

from gpuloan.commands import prices as cmd_prices
from pricing.sources import aws_prices
from pricing.sources import catalog, pricebook
from config.config import ConfigError
from pricing import checks
from stacks.policy_function.function import BUILD_DIR
from stacks.policy_function.package import SETTINGS_ENTRY, source_code_hash

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)


def _client(service: str, region: str = "us-east-1"):
    return boto3.client(
        service, region_name=region, aws_access_key_id="x", aws_secret_access_key="x", aws_session_token="x"
    )


@pytest.fixture
def book_file(tmp_path):
    """A one-region price file in the cache format, and a way to make it the book in force."""

    def make(region="us-east-1", read_at="2026-11-30T08:00:00+00:00", prices=None, **extra):
        prices = prices or {
            "g6.xlarge": {
                "ondemand_usd_per_hour": 1.0,
                "spot_usd_per_hour": 0.5,
                "spot_basis": "observed-median",
                "source": "test",
                "as_of": "2026-11-30",
            },
            "g5.xlarge": {"ondemand_usd_per_hour": 2.0, "source": "test", "as_of": "2026-11-30"},
        }
        doc = {
            "format": pricebook.FORMAT,
            "regions": {region: {"source": "test rates", "read_at": read_at, "instance_types": prices, **extra}},
        }
        path = tmp_path / f"prices-{region}.json"
        path.write_text(json.dumps(doc))
        return path

    yield make


# --- the price file, the cache and the book in force -------------------------------------------------------


def test_cache_round_trip_keeps_prices_commitments_gaps_and_facts(tmp_path):
    body = pricebook.RegionPrices("us-east-1", "AWS APIs", "2026-12-01T12:00:00+00:00")
    body.prices["g6.xlarge"] = pricebook.Price(
        "g6.xlarge", "us-east-1", 0.8, 0.4, "observed-median", None, "pl", "2026-11-01"
    )
    body.not_offered["p5.48xlarge"] = "not listed"
    body.commitments["g6.xlarge"] = [
        pricebook.CommitmentRate("g6.xlarge", "us-east-1", "reserved_1yr_no_upfront", 0.5, "pl", "2026-11-01")
    ]
    body.platform["eks_cluster"] = pricebook.Rate(0.1, "user: AWS pricing page", "2026-11-01")
    book = pricebook.PriceBook(origin="AWS", regions={"us-east-1": body})
    book.instance_facts["g9.xlarge"] = catalog.InstanceType("g9.xlarge", 1, "X1", 32.0, "x86_64")
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    [path] = pricebook.write_cache(book, env)
    assert path == tmp_path / "gpuloan" / "prices-us-east-1.json"
    again = pricebook.load_cache(env)
    assert again.price("g6.xlarge", "us-east-1") == body.prices["g6.xlarge"]
    assert again.commitments("g6.xlarge", "us-east-1") == body.commitments["g6.xlarge"]
    assert again.regions["us-east-1"].platform["eks_cluster"].source == "user: AWS pricing page"
    assert again.instance_facts["g9.xlarge"].gpus == 1
    assert "not offered in us-east-1" in again.why_missing("p5.48xlarge", "us-east-1")
    assert again.describe("us-east-1", today=dt.date(2026, 12, 2)).startswith("prices: AWS APIs, as of 2026-12-01")


def test_an_old_cache_says_so_with_the_fix(tmp_path):
    body = pricebook.RegionPrices("us-east-1", "AWS APIs", "2026-09-01T00:00:00+00:00")
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    pricebook.write_cache(pricebook.PriceBook(origin="AWS", regions={"us-east-1": body}), env)
    line = pricebook.load_cache(env).describe("us-east-1", today=dt.date(2026, 12, 1))
    assert "91 days old" in line and "gpuloan prices refresh" in line


def test_price_file_wins_over_env_which_wins_over_cache(tmp_path, book_file):
    cached = pricebook.PriceBook(
        origin="AWS", regions={"eu-west-1": pricebook.RegionPrices("eu-west-1", "c", "2026-11-01")}
    )
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    pricebook.write_cache(cached, env)
    assert pricebook.resolve(environ=env).covers("eu-west-1")  # the cache
    env_file = book_file(region="us-west-2")
    env[pricebook.ENV_PRICE_FILE] = str(env_file)
    assert pricebook.resolve(environ=env).covers("us-west-2")  # the env var beats the cache
    flag_file = book_file(region="us-east-2")
    assert pricebook.resolve(flag_file, environ=env).covers("us-east-2")  # the flag beats both
    # the cache beats the snapshot shipped in the package, which is the last resort
    assert pricebook.resolve(environ={"XDG_CACHE_HOME": str(tmp_path / "cache")}).kind == pricebook.KIND_CACHE
    assert pricebook.resolve(environ={"HOME": str(tmp_path / "empty")}).kind == pricebook.KIND_SNAPSHOT
    no_snapshot = {"HOME": str(tmp_path / "empty"), pricebook.ENV_SNAPSHOT: "0"}
    assert pricebook.resolve(environ=no_snapshot).origin is None  # no source at all


@pytest.mark.parametrize(
    "content,needle",
    [
        ("{", "not readable as JSON"),
        ('{"format": "other"}', "not a gpuloan price file"),
        (
            json.dumps(
                {
                    "format": pricebook.FORMAT,
                    "regions": {
                        "us-east-1": {
                            "source": "s",
                            "read_at": "2026-01-01",
                            "instance_types": {"g6.xlarge": {"ondemand_usd_per_hour": -1}},
                        }
                    },
                }
            ),
            "regions.us-east-1.instance_types.g6.xlarge.ondemand_usd_per_hour: a price must be above zero",
        ),
        (
            json.dumps({"format": pricebook.FORMAT, "regions": {"us-east-1": {"read_at": "2026-01-01"}}}),
            "regions.us-east-1: missing key 'source'",
        ),
    ],
)
def test_a_bad_price_file_is_an_error_naming_the_place(tmp_path, content, needle):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(pricebook.PriceSourceError) as err:
        pricebook.load(path)
    assert needle in str(err.value)


def test_a_missing_env_price_file_names_the_variable(tmp_path):
    with pytest.raises(pricebook.PriceSourceError) as err:
        pricebook.resolve(environ={pricebook.ENV_PRICE_FILE: str(tmp_path / "nope.json")})
    assert str(err.value).startswith("GPULOAN_PRICE_FILE: price file") and "does not exist" in str(err.value)


@requires_shared_prices
def test_the_public_table_reads_from_the_csv_or_its_folder():
    from conftest import SHARED_PRICES

    folder, one_file = pricebook.load(SHARED_PRICES), pricebook.load(SHARED_PRICES / "aws_gpu_prices.csv")
    assert folder.price("p4d.24xlarge", "us-east-1") == one_file.price("p4d.24xlarge", "us-east-1")
    assert folder.commitments("p4d.24xlarge", "us-east-1") and not one_file.commitments("p4d.24xlarge", "us-east-1")
    # the simulator's interruption rate: the Spot Instance Advisor bucket survives the offline file
    assert folder.price("p4d.24xlarge", "us-east-1").interruption_bucket in {"<5%", "5-10%", "10-15%", "15-20%", ">20%"}


# --- config validation and costs with and without prices ---------------------------------------------------


def test_config_is_valid_without_any_price_and_costs_are_unknown(book_file, tmp_path, monkeypatch):
    from pricing.cost_model import costs

    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv(pricebook.ENV_SNAPSHOT, "0")  # nor the snapshot shipped in the package
    cfg = checks.from_stack_yaml({"config": stack_config("dev")}, "dev", prices=resolved_prices())
    cost = costs.stack_cost(resolved_prices(), cfg).to_json()
    assert cost["guaranteed_monthly_usd"] is None and cost["elastic_max_monthly_usd"] is None
    assert cost["budget_headroom_monthly_usd"] is None and cost["has_price_source"] is False
    assert "prices: unknown (no price source)" in cost["price_source"] and "prices refresh" in cost["price_source"]


def test_a_region_the_source_covers_but_without_the_type_fails_validation_with_its_path(book_file, monkeypatch):
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(book_file(prices={"g6.xlarge": {"ondemand_usd_per_hour": 1.0}})))
    with pytest.raises(ConfigError) as err:
        checks.from_stack_yaml({"config": stack_config("dev")}, "dev", prices=resolved_prices())
    assert "pools[0].elastic.instance_types[1]" in str(err.value)
    assert "no price for g5.xlarge in us-east-1" in str(err.value)


def test_costs_come_from_the_price_file_and_name_it(book_file, monkeypatch):
    from pricing.cost_model import costs

    path = book_file()
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(path))
    cost = costs.stack_cost(
        resolved_prices(), checks.from_stack_yaml({"config": stack_config("dev")}, "dev", prices=resolved_prices())
    ).to_json()
    pool = cost["pools"][0]
    assert pool["guaranteed_monthly_usd"] == 730.0  # 1 x g6.xlarge at 1.0 $/h
    assert pool["elastic_max_monthly_usd"] == 4 * 2.0 * 730  # g5.xlarge has no spot price: its on-demand rate
    # named without the machine's absolute path (the same line on every machine), in under 80 columns
    assert cost["price_source"] == f"prices: test rates, as of 2026-11-30 ({path.name})"


def _clean_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != pricebook.ENV_PRICE_FILE}
    # no price source at all: not even the snapshot shipped in the package (tests/pricing/test_price_snapshot.py)
    env.update(
        HOME=str(tmp_path),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        AWS_EC2_METADATA_DISABLED="true",
        GPULOAN_PRICE_SNAPSHOT="0",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
    )
    return env


def test_preview_without_prices_or_credentials_prints_the_plan_with_costs_unknown(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "preview", "dev"],
        cwd=REPO,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "stack dev" in result.stdout and "dev-research" in result.stdout  # the whole plan
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("research "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    row = " ".join(lines[start:end])  # the pool's row, folded over lines to fit the terminal
    assert row.count("unknown") == 2 and "$" not in row  # floor and elastic ceiling: unknown, no figure
    fix = [line for line in result.stdout.splitlines() if "prices: unknown" in line]
    assert len(fix) == 1 and "gpuloan prices refresh -s STACK" in fix[0] and "GPULOAN_PRICE_FILE" in fix[0]


def test_preview_json_without_prices_has_null_costs_and_null_lambda_prices(tmp_path):
    # A copy of the project: the preview writes the package into its build/, which no other test rewrites meanwhile.
    project = tmp_path / "project"
    shutil.copytree(REPO, project, ignore=shutil.ignore_patterns(".git", ".venv", "build", "tests", "__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "preview", "dev", "--json"],
        cwd=project,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["cost"]["pools"][0]["guaranteed_monthly_usd"] is None
    fn = next(r for r in doc["resources"] if r["type"] == "aws:lambda/function:Function")
    # The settings travel in the package (stacks/policy_function/package.py), not the environment: read the zip this
    # preview wrote (files are named by content), the one whose hash the function was given.
    digest = base64.b64decode(fn["inputs"]["sourceCodeHash"]).hex()[:16]
    data = (project / BUILD_DIR.relative_to(REPO) / f"policy-function-dev-{digest}.zip").read_bytes()
    assert source_code_hash(data) == fn["inputs"]["sourceCodeHash"]
    settings = json.loads(zipfile.ZipFile(io.BytesIO(data)).read(SETTINGS_ENTRY))
    assert settings["pools"][0]["spot_usd_per_hour"] is None  # never a made-up number


def test_a_deployment_without_prices_stops_with_the_fix(book_file):
    from pricing.policy_settings import PriceUnknown, settings_for

    prices = resolved_prices(book_file(region="eu-west-1"))  # a source, but not for the stack's region
    cfg = checks.from_stack_yaml({"config": stack_config("dev")}, "dev", prices=prices)
    with pytest.raises(PriceUnknown) as err:
        settings_for(prices, cfg, "c", {}, budget_names={})
    assert "g6.xlarge in us-east-1" in str(err.value) and "prices refresh" in str(err.value)


def test_a_deployment_without_prices_registers_nothing(book_file, monkeypatch):
    """Run the program as a deployment (not the offline preview) with a price source lacking the stack's region:
    it stops before the first resource with one line per missing price."""
    import contextlib

    from offline import runner as offline
    from stacks.policy_function import preview_mode

    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(book_file(region="eu-west-1")))
    monkeypatch.setattr(preview_mode, "offline_preview", contextlib.nullcontext)
    records: list = []
    with pytest.raises(Exception) as err:
        offline.run_program("dev", stack_config("dev"), records=records)
    assert "prices needed to deploy are missing" in str(err.value) and "g6.xlarge: " in str(err.value)
    assert records == []


def test_simulate_without_prices_says_how_to_get_them(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("submit_s,duration_s,gpus\n0,3600,1\n")
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "simulate", "--trace", str(trace), "--stack", "dev"],
        cwd=REPO,
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "cannot simulate without prices" in result.stderr and "GPULOAN_PRICE_FILE" in result.stderr


# --- AWS adapters: Price List (Stubber) --------------------------------------------------------------------


def _product(
    instance_type="p4d.24xlarge", region="us-east-1", ondemand="21.9576000000", marketoption="OnDemand", reserved=True
) -> str:
    """One Price List entry in the shape of the GetProducts example in AWS's Price List Query API docs."""
    sku = "ABCDEFGHIJKLMNOP"
    terms = {
        "OnDemand": {
            f"{sku}.JRTCKXETXF": {
                "priceDimensions": {
                    f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "endRange": "Inf",
                        "description": f"$ per On Demand Linux {instance_type} Instance Hour",
                        "appliesTo": [],
                        "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                        "beginRange": "0",
                        "pricePerUnit": {"USD": ondemand},
                    }
                },
                "sku": sku,
                "effectiveDate": "2026-11-01T00:00:00Z",
                "offerTermCode": "JRTCKXETXF",
                "termAttributes": {},
            }
        }
    }
    if ondemand is None:
        terms = {}
    if reserved:
        terms["Reserved"] = {
            f"{sku}.4NA7Y494T4": {
                "priceDimensions": {
                    f"{sku}.4NA7Y494T4.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "pricePerUnit": {"USD": "13.6000000000"},
                        "description": "Linux/UNIX (Amazon VPC)",
                        "beginRange": "0",
                        "endRange": "Inf",
                        "appliesTo": [],
                        "rateCode": "x",
                    }
                },
                "sku": sku,
                "effectiveDate": "2026-11-01T00:00:00Z",
                "offerTermCode": "4NA7Y494T4",
                "termAttributes": {
                    "LeaseContractLength": "1yr",
                    "OfferingClass": "standard",
                    "PurchaseOption": "No Upfront",
                },
            },
            f"{sku}.38NPMPTW36": {
                "priceDimensions": {
                    f"{sku}.38NPMPTW36.2TG2D8R56U": {
                        "unit": "Quantity",
                        "pricePerUnit": {"USD": "87600"},
                        "description": "Upfront Fee",
                        "appliesTo": [],
                        "rateCode": "y",
                    },
                    f"{sku}.38NPMPTW36.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "pricePerUnit": {"USD": "2.0000000000"},
                        "description": "Linux",
                        "beginRange": "0",
                        "endRange": "Inf",
                        "appliesTo": [],
                        "rateCode": "z",
                    },
                },
                "sku": sku,
                "effectiveDate": "2026-11-01T00:00:00Z",
                "offerTermCode": "38NPMPTW36",
                "termAttributes": {
                    "LeaseContractLength": "3yr",
                    "OfferingClass": "standard",
                    "PurchaseOption": "Partial Upfront",
                },
            },
        }
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "sku": sku,
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": region,
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                    "marketoption": marketoption,
                    "licenseModel": "No License required",
                    "gpu": "8",
                    "servicecode": "AmazonEC2",
                },
            },
            "serviceCode": "AmazonEC2",
            "terms": terms,
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z",
        }
    )


def _stub_products(stub: Stubber, price_list: list[str], instance_type="p4d.24xlarge", region="us-east-1"):
    stub.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": price_list},
        {
            "ServiceCode": "AmazonEC2",
            "Filters": aws_prices.price_list_filters(instance_type, region),
            "FormatVersion": "aws_v1",
            "MaxResults": 100,
        },
    )


def test_price_list_reads_on_demand_and_reserved_terms():
    pricing = _client("pricing")
    with Stubber(pricing) as stub:
        _stub_products(stub, [_product(), _product(marketoption="CapacityBlock", reserved=False)])
        listed = aws_prices.PriceListReader(pricing).price("p4d.24xlarge", "us-east-1")
    assert listed.ondemand_usd_per_hour == pytest.approx(21.9576) and listed.as_of == "2026-11-01"
    ri = {r.offer: r.usd_per_hour for r in listed.reserved}
    assert ri["reserved_1yr_no_upfront"] == pytest.approx(13.6)
    assert ri["reserved_3yr_partial_upfront"] == pytest.approx(2.0 + 87600 / (3 * 8760))  # upfront amortised


def test_the_filters_select_linux_shared_no_software_used_capacity():
    filters = {f["Field"]: f["Value"] for f in aws_prices.price_list_filters("g6.xlarge", "eu-west-1")}
    assert filters == {
        "instanceType": "g6.xlarge",
        "regionCode": "eu-west-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }


@pytest.mark.parametrize(
    "price_list,error,needle",
    [
        ([], aws_prices.NoPrice, "no Linux/shared-tenancy SKU for p4d.24xlarge in us-east-1 (empty answer)"),
        (
            [_product(ondemand=None, reserved=False)],
            aws_prices.NoPrice,
            "has no on-demand USD hourly price (missing price)",
        ),
        ([_product(), _product()], aws_prices.NoPrice, "2 SKUs"),
    ],
)
def test_price_list_gaps_have_their_own_message(price_list, error, needle):
    pricing = _client("pricing")
    with Stubber(pricing) as stub:
        _stub_products(stub, price_list)
        with pytest.raises(error) as err:
            aws_prices.PriceListReader(pricing).price("p4d.24xlarge", "us-east-1")
    assert needle in str(err.value)


def test_a_throttled_call_says_wait_and_retry():
    pricing = _client("pricing")
    with Stubber(pricing) as stub:
        stub.add_client_error(
            "get_products",
            service_error_code="ThrottlingException",
            service_message="Rate exceeded",
            http_status_code=400,
        )
        with pytest.raises(aws_prices.Throttled) as err:
            aws_prices.PriceListReader(pricing).price("p4d.24xlarge", "us-east-1")
    assert "throttled" in str(err.value) and "prices refresh" in str(err.value)


# --- Savings Plans and Capacity Blocks (Stubber) -----------------------------------------------------------


def test_savings_plans_rates_keep_shared_tenancy_box_usage_only():
    sp = _client("savingsplans")

    def result(plan, usage, rate, oid):
        return {
            "savingsPlanOffering": {
                "offeringId": oid,
                "paymentOption": "No Upfront",
                "planType": plan,
                "durationSeconds": 31536000,
                "currency": "USD",
                "planDescription": "1 year",
            },
            "rate": rate,
            "unit": "Hrs",
            "productType": "EC2",
            "serviceCode": "AmazonEC2",
            "usageType": usage,
            "operation": "RunInstances",
            "properties": [
                {"name": "region", "value": "us-east-1"},
                {"name": "instanceType", "value": "p5.48xlarge"},
                {"name": "productDescription", "value": "Linux/UNIX"},
                {"name": "tenancy", "value": "shared"},
            ],
        }

    with Stubber(sp) as stub:
        stub.add_response(
            "describe_savings_plans_offering_rates",
            {
                "searchResults": [
                    result("Compute", "USE1-BoxUsage:p5.48xlarge", "40.0", "o-1"),
                    result("EC2Instance", "USE1-BoxUsage:p5.48xlarge", "35.0", "o-2"),
                    result("EC2Instance", "USE1-DedicatedUsage:p5.48xlarge", "50.0", "o-3"),
                ]
            },
        )
        rates = aws_prices.SavingsPlansReader(sp).rates("p5.48xlarge", "us-east-1", "2026-12-01")
    assert {r.offer: r.usd_per_hour for r in rates} == {
        "savings_plan_compute_1yr_no_upfront": 40.0,
        "savings_plan_ec2_instance_1yr_no_upfront": 35.0,
    }


def test_capacity_block_rate_is_the_upfront_fee_per_instance_hour():
    ec2 = _client("ec2")
    offer = {
        "CapacityBlockOfferingId": "cbr-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "InstanceCount": 1,
        "StartDate": NOW,
        "EndDate": NOW,
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "755.04",
        "CurrencyCode": "USD",
        "Tenancy": "default",
    }
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_capacity_block_offerings",
            {"CapacityBlockOfferings": [offer, {**offer, "UpfrontFee": "999.00"}]},
            {"InstanceType": "p5.48xlarge", "InstanceCount": 1, "CapacityDurationHours": 24},
        )
        rate = aws_prices.CapacityBlockReader(ec2).cheapest("p5.48xlarge", "us-east-1", "2026-12-01")
        stub.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": []})
        assert aws_prices.CapacityBlockReader(ec2).cheapest("g6.xlarge", "us-east-1", "2026-12-01") is None
    assert rate.offer == "capacity_block" and rate.usd_per_hour == pytest.approx(755.04 / 24)


# --- spot history and the whole refresh on the moto server -------------------------------------------------


def test_spot_history_median_over_the_pools_zones(aws_env):
    """moto's spot history is synthetic (one fixed price per zone); this checks the call and the reduction."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    quote = aws_prices.SpotHistoryReader(ec2).quote("g6.xlarge", ["us-east-1a", "us-east-1b"], NOW)
    assert quote is not None and quote.zones == ("us-east-1a", "us-east-1b")
    assert quote.min_usd_per_hour <= quote.median_usd_per_hour <= quote.max_usd_per_hour
    assert aws_prices.SpotHistoryReader(ec2).quote("g6.xlarge", ["us-east-1z"], NOW) is None


def test_refresh_writes_the_project_price_file_and_says_which_type_the_region_lacks(aws_env, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ec2 = boto3.client("ec2", region_name="us-east-1")  # the moto server: offerings, spot history
    pricing = _client("pricing")
    stack = tmp_path / "Pulumi.dev.yaml"
    cfg = stack_config("dev")
    cfg["gpuloan:pools"][0]["elastic"]["instance_types"] = ["g6.xlarge", "p4d.24xlarge", "p9.huge"]
    stack.write_text(yaml.safe_dump({"config": cfg}))
    with Stubber(pricing) as stub:
        _stub_products(stub, [_product("g6.xlarge", ondemand="0.8048")], "g6.xlarge")
        _stub_products(stub, [], "p4d.24xlarge")
        _stub_platform(
            stub,
            {"eks_cluster": [_platform_product("AmazonEKS", "USE1-AmazonEKS-Hours:perCluster", "Hrs", "0.1000000000")]},
            system_types=["m7i.large"],
        )
        rc = cmd_prices.run_refresh(
            SimpleNamespace(stack_option=str(stack), instance_type=[], profile=None), clients=(pricing, ec2, None)
        )
    assert rc == cmd_prices.EXIT_PARTIAL  # two types could not be priced; the third is written
    assert pricebook.load_cache() is None  # the project's file, not the per-user cache
    written = tmp_path / pricebook.PROJECT_PRICE_FILE  # beside the stack file (no Pulumi.yaml above tmp_path)
    assert "written_at" in json.loads(written.read_text())
    cached = pricebook.load(written)
    g6 = cached.price("g6.xlarge", "us-east-1")
    assert g6.ondemand_usd_per_hour == pytest.approx(0.8048) and g6.spot_basis == "observed-median"
    assert "not offered in us-east-1" in cached.why_missing("p9.huge", "us-east-1")
    assert cached.price("p4d.24xlarge", "us-east-1") is None  # empty Price List answer: nothing invented
    assert cached.describe("us-east-1").startswith("prices: AWS APIs")
    # platform rates are cached beside the GPU prices; the ones AWS did not answer stay absent (unknown)
    eks = cached.platform_rate("eks_cluster", "us-east-1")
    assert eks.usd_per_unit == pytest.approx(0.1) and eks.unit == "hour" and "AmazonEKS" in eks.source
    assert cached.platform_rate("nat_gateway", "us-east-1") is None


def test_refresh_without_credentials_points_at_the_offline_file(tmp_path, monkeypatch, capsys):
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.chdir(REPO)
    rc = cmd_prices.run_refresh(SimpleNamespace(stack_option="dev", instance_type=[], profile=None))
    assert rc == cmd_prices.EXIT_BAD_INPUT
    assert "no AWS credentials" in capsys.readouterr().err


def test_cost_diff_shows_unknown_prices_as_unknown_never_as_zero():
    from offline import diff as cost_diff

    def doc(guaranteed):
        pool = {
            "pool": "research",
            "guaranteed_monthly_usd": guaranteed,
            "elastic_max_monthly_usd": None,
            "fallback_max_monthly_usd": None,
            "budget_monthly_usd": None,
        }
        return {
            "resources": [],
            "cost": {
                "pools": [pool],
                "guaranteed_monthly_usd": guaranteed,
                "elastic_max_monthly_usd": None,
                "fallback_max_monthly_usd": None,
                "budget_monthly_usd": 2500.0,
            },
        }

    both_unknown = cost_diff.diff_stack("dev", cost_diff.Side(doc(None)), cost_diff.Side(doc(None)))
    rows = cost_diff.cost_rows(both_unknown)
    assert rows[0] == ["research", "unknown", "unknown", "unknown", "—", "—"]
    assert rows[1] == ["total", "unknown", "unknown", "unknown", "$2,500", "unknown"]
    newly_priced = cost_diff.diff_stack("dev", cost_diff.Side(doc(None)), cost_diff.Side(doc(730.0)))
    assert cost_diff.cost_rows(newly_priced)[0][1] == "unknown → $730"  # no made-up delta


def test_instance_facts_of_a_type_missing_from_the_table_come_from_ec2_and_are_cached(aws_env, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    pricing = _client("pricing")
    with Stubber(pricing) as stub:
        _stub_products(stub, [_product("g6.xlarge", ondemand="0.8048")], "g6.xlarge")
        result = aws_prices.refresh(
            "us-east-1", ["g6.xlarge"], pricing_client=pricing, ec2_client=ec2, known_facts={}, now=NOW
        )  # as if g6 were newer than the table
    facts = result.book.instance_facts["g6.xlarge"]
    assert (facts.gpus, facts.gpu_model, facts.cpu_architecture) == (1, "L4", "x86_64")
    pricebook.write_cache(result.book)
    assert pricebook.load_cache().instance_facts["g6.xlarge"] == facts


def test_a_cached_type_whose_gpu_gpuloan_cannot_classify_is_refused_clearly(book_file, tmp_path, monkeypatch):
    path = book_file()
    doc = json.loads(path.read_text())
    doc["instance_facts"] = {
        "g99.xlarge": {"gpus": 1, "gpu_model": "X9", "gpu_memory_gib": 64, "cpu_architecture": "x86_64"}
    }
    path.write_text(json.dumps(doc))
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(path))
    assert resolved_prices().lookup("g99.xlarge").gpus == 1
    cfg = stack_config("dev")
    cfg["gpuloan:pools"][0]["elastic"]["instance_types"] = ["g99.xlarge"]
    with pytest.raises(ConfigError) as err:
        checks.from_stack_yaml({"config": cfg}, "dev", prices=resolved_prices())
    assert "pools[0].elastic.instance_types" in str(err.value) and "no CUDA support rules" in str(err.value)


@requires_prices
def test_the_simulator_reads_the_interruption_bucket_from_the_offline_file():
    from sim import pool as simpool

    spec = simpool.spec_from_config(
        resolved_prices(),
        checks.from_stack_yaml({"config": stack_config("prod")}, "prod", prices=resolved_prices()),
        "training",
    )
    assert spec.spot_interruption_bucket == resolved_prices().price(spec.spot_type, "us-east-1").interruption_bucket
    assert spec.spot_interruption_bucket is not None
    assert spec.spot_interruptions_per_month == simpool.ADVISOR_BUCKET_PER_MONTH[spec.spot_interruption_bucket]


# --- platform rates from the Price List (Stubber) ----------------------------------------------------------


def _platform_product(service: str, usage_type: str, unit: str, *tiers: str, sku: str = "PLATFORMSKU0001") -> str:
    """One Price List entry shaped like AWS's GetProducts example, with one OnDemand term of `tiers` (USD per unit,
    beginning at 0, 1000, 2000 ...)."""
    dims = {
        f"{sku}.JRTCKXETXF.{i}": {
            "unit": unit,
            "beginRange": str(i * 1000),
            "endRange": "Inf",
            "description": f"tier {i}",
            "appliesTo": [],
            "rateCode": f"{sku}.{i}",
            "pricePerUnit": {"USD": usd},
        }
        for i, usd in enumerate(tiers)
    }
    return json.dumps(
        {
            "product": {
                "productFamily": "x",
                "sku": sku,
                "attributes": {"usagetype": usage_type, "servicecode": service, "regionCode": "us-east-1"},
            },
            "serviceCode": service,
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": dims,
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                }
            },
        }
    )


def _stub_platform(stub: Stubber, answers: dict[str, list[str]], region="us-east-1", system_types=()):
    """Every platform query refresh makes, in order; keys not in `answers` get an empty answer."""
    for key, (service, *_rest) in aws_prices.PLATFORM_QUERIES.items():
        stub.add_response(
            "get_products",
            {"FormatVersion": "aws_v1", "PriceList": answers.get(key, [])},
            {
                "ServiceCode": service,
                "Filters": aws_prices.platform_filters(key, region),
                "FormatVersion": "aws_v1",
                "MaxResults": 100,
            },
        )
    for t in system_types:
        _stub_products(stub, answers.get(f"ec2:{t}", []), t, region)


def test_platform_filters_narrow_by_region_and_usage_type():
    filters = aws_prices.platform_filters("ebs_gp3_storage", "eu-west-1")
    assert {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "eu-west-1"} in filters
    assert {"Type": "TERM_MATCH", "Field": "volumeApiName", "Value": "gp3"} in filters
    assert {"Type": "CONTAINS", "Field": "usagetype", "Value": "EBS:VolumeUsage.gp3"} in filters


def test_platform_rates_are_read_per_unit_with_their_source():
    pricing = _client("pricing")
    answers = {
        "eks_cluster": [_platform_product("AmazonEKS", "USE1-AmazonEKS-Hours:perCluster", "Hrs", "0.1000000000")],
        # the zonal gateway's product; the regional one (RegionalNatGateway-Hours) is another product, set aside
        "nat_gateway": [
            _platform_product("AmazonEC2", "NatGateway-Hours", "Hrs", "0.0450000000"),
            _platform_product(
                "AmazonEC2", "USE1-RegionalNatGateway-Hours", "Hrs", "0.0900000000", sku="REGIONALNAT0001"
            ),
        ],
        # tiered, with a free first tier: the first paid tier is used (free tiers are not subtracted)
        "cloudwatch_logs_ingest": [
            _platform_product(
                "AmazonCloudWatch", "USE1-DataProcessing-Bytes", "GB", "0.0000000000", "0.5000000000", "0.2500000000"
            )
        ],
        # x86 and arm64 duration share "Lambda-GB-Second" in their usage types; the suffix tells them apart
        "lambda_gb_second_x86_64": [
            _platform_product("AWSLambda", "USE1-Lambda-GB-Second", "Lambda-GB-Second", "0.0000166667"),
            _platform_product(
                "AWSLambda", "USE1-Lambda-GB-Second-ARM", "Lambda-GB-Second", "0.0000133334", sku="ARMSKU000000001"
            ),
        ],
        "ec2:m7i.large": [_product("m7i.large", ondemand="0.1008", reserved=False)],
    }
    with Stubber(pricing) as stub:
        _stub_platform(stub, answers, system_types=["m7i.large"])
        rates, problems = aws_prices.refresh_platform("us-east-1", ["m7i.large"], pricing_client=pricing)
    assert rates["eks_cluster"].usd_per_unit == pytest.approx(0.1) and rates["eks_cluster"].unit == "hour"
    assert rates["eks_cluster"].as_of == "2026-11-01" and "pricing:GetProducts" in rates["eks_cluster"].source
    assert rates["nat_gateway"].usd_per_unit == pytest.approx(0.045)
    assert (
        rates["cloudwatch_logs_ingest"].usd_per_unit == pytest.approx(0.5)
        and rates["cloudwatch_logs_ingest"].unit == "GB"
    )
    assert rates["lambda_gb_second_x86_64"].usd_per_unit == pytest.approx(0.0000166667)
    assert rates["ec2:m7i.large"].usd_per_unit == pytest.approx(0.1008)
    # what AWS did not answer is a problem line, never a made-up rate
    assert "kms_key" not in rates and any(p.startswith("platform kms_key:") and "empty answer" in p for p in problems)


def test_two_platform_skus_for_one_item_are_refused():
    pricing = _client("pricing")
    two = [
        _platform_product("awskms", "USE1-KMS-Keys", "Keys", "1.0"),
        _platform_product("awskms", "KMS-Keys", "Keys", "1.0", sku="OTHERSKU0000001"),
    ]
    with Stubber(pricing) as stub:
        stub.add_response(
            "get_products",
            {"FormatVersion": "aws_v1", "PriceList": two},
            {
                "ServiceCode": "awskms",
                "Filters": aws_prices.platform_filters("kms_key", "us-east-1"),
                "FormatVersion": "aws_v1",
                "MaxResults": 100,
            },
        )
        with pytest.raises(aws_prices.NoPrice, match="2 SKUs"):
            aws_prices.PlatformPriceReader(pricing).rate("kms_key", "us-east-1")


def test_capacity_block_offers_and_type_offerings_are_read_from_every_page():
    # Both calls are paged (NextToken): the cheapest offer and an offered type may sit on a later page.
    ec2 = _client("ec2")
    offer = {
        "CapacityBlockOfferingId": "cbr-0123456789abcdef0",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
        "InstanceCount": 1,
        "StartDate": NOW,
        "EndDate": NOW,
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "999.00",
        "CurrencyCode": "USD",
        "Tenancy": "default",
    }
    args = {"InstanceType": "p5.48xlarge", "InstanceCount": 1, "CapacityDurationHours": 24}
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_capacity_block_offerings", {"CapacityBlockOfferings": [offer], "NextToken": "page-2"}, args
        )
        stub.add_response(
            "describe_capacity_block_offerings",
            {"CapacityBlockOfferings": [{**offer, "UpfrontFee": "755.04"}]},
            {**args, "NextToken": "page-2"},
        )
        rate = aws_prices.CapacityBlockReader(ec2).cheapest("p5.48xlarge", "us-east-1", "2026-12-01")
        filters = [{"Name": "instance-type", "Values": ["g6.xlarge", "p5.48xlarge"]}]
        stub.add_response(
            "describe_instance_type_offerings",
            {
                "InstanceTypeOfferings": [
                    {"InstanceType": "g6.xlarge", "LocationType": "region", "Location": "us-east-1"}
                ],
                "NextToken": "t2",
            },
            {"LocationType": "region", "Filters": filters},
        )
        stub.add_response(
            "describe_instance_type_offerings",
            {
                "InstanceTypeOfferings": [
                    {"InstanceType": "p5.48xlarge", "LocationType": "region", "Location": "us-east-1"}
                ]
            },
            {"LocationType": "region", "Filters": filters, "NextToken": "t2"},
        )
        offered = aws_prices.InstanceTypeReader(ec2).offered(["g6.xlarge", "p5.48xlarge"], "us-east-1")
    assert rate.usd_per_hour == pytest.approx(755.04 / 24)
    assert offered == {"g6.xlarge", "p5.48xlarge"}
