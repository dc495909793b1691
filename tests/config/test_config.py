"""The typed config: named invalid cases (each asserts exit code, path and message), the shipped stacks, the schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, requires_shared_prices, stack_config, resolved_prices

from pricing import checks
from config import config


def _set(cfg: dict, dotted: str, value) -> None:
    """Set gpuloan config by path: 'pools[0].elastic.max_nodes'. value=DELETE removes the key."""
    head, _, rest = dotted.partition(".")
    key = "gpuloan:" + head.split("[")[0]
    node = cfg
    parts = [key + head[len(head.split("[")[0]) :]] + (rest.split(".") if rest else [])
    tokens: list = []
    for part in parts:
        name, *idx = part.replace("]", "").split("[")
        tokens.append(name)
        tokens.extend(int(i) for i in idx)
    for t in tokens[:-1]:
        node = node[t]
    if value is DELETE:
        del node[tokens[-1]]
    else:
        node[tokens[-1]] = value


DELETE = object()

# (name, stack, {path: value}, expected problem path, expected message fragment)
INVALID = [
    (
        "unknown instance type suggests",
        "dev",
        {"pools[0].guaranteed.instance_type": "g6.xlarg"},
        "pools.0.guaranteed.instance_type",
        "did you mean g6.xlarge",
    ),
    (
        "unknown elastic type",
        "dev",
        {"pools[0].elastic.instance_types": ["g6.xlarge", "p9.48xlarge"]},
        "pools.0.elastic.instance_types",
        "unknown GPU instance type 'p9.48xlarge'",
    ),
    (
        "non-NVIDIA accelerator",
        "dev",
        {"pools[0].elastic.instance_types": ["g4ad.xlarge"]},
        "pools.0.elastic.instance_types",
        "NVIDIA GPUs only",
    ),
    (
        "sizes of mixed GPU models",
        "dev",
        {"pools[0].elastic.instance_types": ["g6.xlarge", "g6e.12xlarge"]},
        "pools[0].elastic.instance_types",
        "several GPU models",
    ),
    (
        "floor and elastic differ in GPUs per node",
        "dev",
        {"pools[0].elastic.instance_types": ["g6.12xlarge"]},
        "pools[0].elastic.instance_types",
        "GPUs per node",
    ),
    (
        "guaranteed AZ outside cluster AZs",
        "prod",
        {"pools[0].guaranteed.availability_zone": "us-east-1d"},
        "pools[0].guaranteed.availability_zone",
        "not one of the cluster AZs",
    ),
    (
        "guaranteed AZ in another region",
        "prod",
        {"pools[0].guaranteed.availability_zone": "us-west-2a"},
        "pools[0].guaranteed.availability_zone",
        "not in region us-east-1",
    ),
    (
        "capacity block without id",
        "prod",
        {"pools[0].guaranteed.reservation": "capacity_block"},
        "pools[0].guaranteed.reservation_id",
        "never buys one",
    ),
    (
        "reservation id without reservation",
        "dev",
        {"pools[0].guaranteed.reservation_id": "cr-0123456789abcdef0"},
        "pools[0].guaranteed.reservation_id",
        "set reservation",
    ),
    (
        "malformed reservation id",
        "prod",
        {"pools[0].guaranteed.reservation_id": "reservation-1"},
        "pools.0.guaranteed.reservation_id",
        "should match pattern",
    ),
    (
        "reservation without AZ",
        "prod",
        {"pools[0].guaranteed.availability_zone": DELETE},
        "pools[0].guaranteed.availability_zone",
        "lives in one AZ",
    ),
    (
        "idle above scale-up",
        "dev",
        {"pools[0].elastic.idle_utilization_pct": 90},
        "pools[0].elastic.idle_utilization_pct",
        "below scale_up_utilization_pct",
    ),
    (
        "utilization over 100",
        "dev",
        {"pools[0].elastic.scale_up_utilization_pct": 150},
        "pools.0.elastic.scale_up_utilization_pct",
        "less than or equal to 100",
    ),
    ("duplicate pool names", "prod", {"pools[1].name": "training"}, "pools[1].name", "names must be unique"),
    ("invalid email", "dev", {"budget.alert_emails": ["not-an-email"]}, "budget.alert_emails.0", "email"),
    (
        "floor costs more than pool budget",
        "prod",
        {"pools[0].budget.monthly_usd": 10000},
        "pools[0].budget.monthly_usd",
        "the guaranteed floor alone costs",
    ),
    (
        "floor costs more than env budget",
        "dev",
        {"budget.monthly_usd": 100},
        "budget.monthly_usd",
        "the guaranteed floors alone cost",
    ),
    (
        "pool budgets exceed env budget",
        "prod",
        {"budget.monthly_usd": 65000},
        "budget.monthly_usd",
        "below the sum of the pool budgets",
    ),
    ("unknown key", "dev", {"pools[0].elastic.max_node": 3}, "pools.0.elastic.max_node", "unknown key"),
    ("unknown top-level key", "dev", {"budgets": {"monthly_usd": 1}}, "budgets", "unknown key"),
    ("missing pools", "dev", {"pools": DELETE}, "pools", "Field required"),
    ("empty pools", "dev", {"pools": []}, "pools", "at least 1 item"),
    ("bad tier", "dev", {"pools[0].tier": "gold"}, "pools.0.tier", "'production', 'experiment' or 'learning'"),
    (
        "bad capacity",
        "dev",
        {"pools[0].elastic.capacity": "spot_only"},
        "pools.0.elastic.capacity",
        "spot_then_on_demand",
    ),
    (
        "zero max nodes",
        "dev",
        {"pools[0].elastic.max_nodes": 0},
        "pools.0.elastic.max_nodes",
        "greater than or equal to 1",
    ),
    (
        "pool with nothing",
        "dev",
        {"pools[0].guaranteed": DELETE, "pools[0].elastic": DELETE},
        "pools[0]",
        "needs a guaranteed floor, elastic capacity, or both",
    ),
    (
        "AZ not in region",
        "dev",
        {"cluster.availability_zones": ["us-east-1a", "eu-west-1b"]},
        "cluster.availability_zones[1]",
        "not in region us-east-1",
    ),
    (
        "single AZ cluster",
        "dev",
        {"cluster.availability_zones": ["us-east-1a"]},
        "cluster.availability_zones",
        "at least 2 items",
    ),
    ("bad cluster mode", "dev", {"cluster.mode": "managed"}, "cluster", "'new' or 'existing'"),
    ("existing cluster without name", "dev", {"cluster": {"mode": "existing"}}, "cluster.name", "Field required"),
    (
        "open endpoint",
        "dev",
        {"cluster.public_endpoint_cidrs": ["0.0.0.0/0"]},
        "cluster.public_endpoint_cidrs[0]",
        "opens the API endpoint",
    ),
    ("bad CIDR", "dev", {"cluster.vpc_cidr": "10.0.0.0/8"}, "cluster.vpc_cidr", "between /16 and /20"),
    (
        "too many notifications",
        "dev",
        {"budget.actual_thresholds_pct": [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]},
        "budget.actual_thresholds_pct",
        "AWS Budgets allows 10",
    ),
    (
        "too many emails",
        "dev",
        {"budget.alert_emails": [f"a{i}@example.com" for i in range(11)]},
        "budget.alert_emails",
        "at most 10 items",
    ),
    ("no budget email", "dev", {"budget.alert_emails": []}, "budget.alert_emails", "at least one address"),
    (
        "cap without 100 pct",
        "dev",
        {"budget.actual_thresholds_pct": [50, 80]},
        "budget.actual_thresholds_pct",
        "include 100",
    ),
    (
        "threshold out of range",
        "dev",
        {"budget.actual_thresholds_pct": [0, 100]},
        "budget.actual_thresholds_pct.0",
        "greater than 0",
    ),
    ("region mismatch", "dev", {"region": "us-west-2"}, "region", "aws:region is us-east-1"),
    ("bad region", "dev", {"region": "useast1"}, "region", "should match pattern"),
    (
        "no price in region",
        "dev",
        {"region": "af-south-1", "cluster.availability_zones": ["af-south-1a", "af-south-1b"]},
        "pools[0].guaranteed.instance_type",
        "no price for g6.xlarge in af-south-1",
    ),
    ("unpinned package", "prod", {"images[0].packages": ["transformers>=4"]}, "images.0.packages", "is not pinned"),
    ("reserved tag prefix", "dev", {"default_tags": {"aws:owner": "x"}}, "default_tags", "reserved aws: prefix"),
    (
        "on-demand max without fallback",
        "dev",
        {"pools[0].elastic.on_demand_max_nodes": 2},
        "pools[0].elastic.on_demand_max_nodes",
        "only applies to capacity: spot_then_on_demand",
    ),
    (
        "mixed CPU architectures",
        "dev",
        {"pools[0].elastic.instance_types": ["g6.xlarge", "g5g.xlarge"]},
        "pools[0].elastic.instance_types",
        "mixes x86_64 and arm64",
    ),
    ("bad pool name", "dev", {"pools[0].name": "Research Pool"}, "pools.0.name", "should match pattern"),
    (
        "schedule out of range",
        "dev",
        {"policy.schedule_minutes": 0},
        "policy.schedule_minutes",
        "greater than or equal to 1",
    ),
    (
        "budget refresh too often",
        "dev",
        {"policy.budget_refresh_minutes": 5},
        "policy.budget_refresh_minutes",
        "greater than or equal to 60",
    ),
    ("IAM role name too long", "dev", {"environment": "e" * 30}, "environment", "IAM allows 64"),
    ("node group prefix too long", "dev", {"pools[0].name": "a" * 26}, "pools[0].name", "leaves 37"),
    (
        "AZ without a subnet slot",
        "dev",
        {"cluster.availability_zones": ["us-east-1a", "us-east-1g"]},
        "cluster.availability_zones",
        "lettered a-f",
    ),
]


def _normalize(path: str) -> str:
    """pydantic paths print as pools[0].x; accept the dotted spelling used in the table too."""
    import re

    return re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)


def _write_stack(tmp_path: Path, stack: str, changes: dict) -> Path:
    cfg = stack_config(stack)
    if "region" in changes and stack == "dev" and changes["region"] != "us-west-2":
        cfg["aws:region"] = changes["region"]  # keep aws:region in step unless the case is about the mismatch
    for path, value in changes.items():
        _set(cfg, path, value)
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": cfg}, sort_keys=False))
    return path


def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuloan", "validate", str(path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_at_least_25_named_invalid_cases():
    assert len(INVALID) >= 25
    assert len({c[0] for c in INVALID}) == len(INVALID)
    assert NEEDS_PRICES <= {c[0] for c in INVALID}  # a renamed case keeps its skip marker


# These cases compare a floor or region with the price table; without one, costs are unknown and not an error.
NEEDS_PRICES = {"floor costs more than pool budget", "floor costs more than env budget", "no price in region"}


@pytest.mark.parametrize(
    "name,stack,changes,path,message",
    [pytest.param(*c, id=c[0], marks=requires_shared_prices if c[0] in NEEDS_PRICES else ()) for c in INVALID],
)
def test_invalid_config_is_rejected_with_path_and_message(tmp_path, name, stack, changes, path, message):
    stack_file = _write_stack(tmp_path, stack, changes)
    with pytest.raises(config.ConfigError) as err:
        checks.from_stack_yaml(yaml.safe_load(stack_file.read_text()), stack_file.name, prices=resolved_prices())
    problems = {(_normalize(p), m) for p, m in err.value.problems}
    wanted = _normalize(path)
    assert any(p == wanted and message in m for p, m in problems), problems


@pytest.mark.parametrize(
    "name,stack,changes,path,message",
    [INVALID[0], INVALID[5], INVALID[14], INVALID[18]],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_validate_command_exit_code_and_output(tmp_path, name, stack, changes, path, message):
    result = _validate(_write_stack(tmp_path, stack, changes))
    assert result.returncode == 2
    assert message in result.stderr
    assert _normalize(path) in result.stderr or path in result.stderr


def test_all_problems_are_reported_at_once(tmp_path):
    stack_file = _write_stack(
        tmp_path,
        "prod",
        {
            "pools[0].guaranteed.availability_zone": "us-east-1d",
            "pools[1].elastic.idle_utilization_pct": 95,
            "pools[1].name": "training",
        },
    )
    result = _validate(stack_file)
    assert result.returncode == 2
    # The rename also leaves scheduling.kueue.production_spot_pools naming a pool that no longer exists.
    assert "4 problem(s)" in result.stderr
    for fragment in (
        "pools[0].guaranteed.availability_zone",
        "pools[1].elastic.idle_utilization_pct",
        "pools[1].name",
        "scheduling.kueue.production_spot_pools[1]: no pool named 'inference'",
    ):
        assert fragment in result.stderr


def test_shape_errors_and_cross_field_errors_come_in_one_run(tmp_path):
    """A typo in pools[0] does not hide a rule broken by pools[1]: the broken pool is set aside, the rules check
    the rest, and paths keep the original indices."""
    stack_file = _write_stack(
        tmp_path,
        "prod",
        {
            "pools[0].elastic.max_node": 3,
            "pools[1].elastic.idle_utilization_pct": 95,
        },
    )
    result = _validate(stack_file)
    assert result.returncode == 2
    assert "2 problem(s)" in result.stderr
    assert "pools[0].elastic.max_node: unknown key" in result.stderr
    assert "pools[1].elastic.idle_utilization_pct: must be below scale_up_utilization_pct" in result.stderr


def test_a_broken_section_postpones_the_cross_field_rules_instead_of_guessing(tmp_path):
    stack_file = _write_stack(
        tmp_path, "prod", {"budget.monthly_usd": "lots", "pools[1].elastic.idle_utilization_pct": 95}
    )
    result = _validate(stack_file)
    assert result.returncode == 2
    assert "budget.monthly_usd" in result.stderr and "idle_utilization_pct" not in result.stderr


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_shipped_stacks_are_valid(stack):
    result = _validate(REPO / f"Pulumi.{stack}.yaml")
    assert result.returncode == 0, result.stderr
    assert f"{stack}: valid" in result.stdout


def test_validate_by_stack_name_reads_the_stack_file():
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "validate", "prod"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "3 pool(s)" in result.stdout


def test_bad_yaml_names_the_line(tmp_path):
    bad = tmp_path / "Pulumi.broken.yaml"
    bad.write_text("config:\n  gpuloan:environment: dev\n  gpuloan:pools: [\n    - name: x\n")
    result = _validate(bad)
    assert result.returncode == 2
    assert "Pulumi.broken.yaml:4:5: invalid YAML" in result.stderr


def test_missing_stack_file_lists_available_stacks(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gpuloan", "validate", "staging"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "Pulumi.staging.yaml" in result.stderr and "dev" in result.stderr


def test_schema_file_is_current():
    from gpuloan.commands.schema import stack_file_schema

    on_disk = json.loads((REPO / "docs" / "config.schema.json").read_text())
    assert on_disk == json.loads(json.dumps(stack_file_schema())), (
        "run `make schema` to regenerate docs/config.schema.json"
    )


def test_schema_accepts_shipped_stacks_and_rejects_unknown_keys(tmp_path):
    schema = str(REPO / "docs" / "config.schema.json")
    checker = str(Path(sys.executable).parent / "check-jsonschema")
    ok = subprocess.run(
        [checker, "--schemafile", schema, str(REPO / "Pulumi.dev.yaml"), str(REPO / "Pulumi.prod.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text((REPO / "Pulumi.dev.yaml").read_text().replace("gpuloan:pools:", "gpuloan:poolz:"))
    rejected = subprocess.run([checker, "--schemafile", schema, str(bad)], capture_output=True, text=True, timeout=120)
    assert rejected.returncode != 0 and "gpuloan:poolz" in rejected.stdout


def test_config_errors_stop_the_program_before_any_resource(tmp_path):
    """__main__.py validates first: a bad config registers nothing (only the root stack exists)."""
    from offline import runner as offline

    cfg = stack_config("dev")
    _set(cfg, "pools[0].elastic.idle_utilization_pct", 99)
    records: list = []
    with pytest.raises(Exception) as err:
        offline.run_program("dev", cfg, records=records)
    assert "idle_utilization_pct" in str(err.value)
    assert records == []
    # The same run with the valid config does register resources, so the empty list above means something.
    offline.run_program("dev", stack_config("dev"), records=records)
    assert records
