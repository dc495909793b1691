"""How a pool's spot launches are spread over its instance types and AZs (docs/capacity.md, "How spot launches are
spread"): the spot node group of every shipped pool, the per-GPU figures gpuloan shows, and the advisory for a type
another listed type beats on both price per GPU and interruptions.

A pool may list types of several sizes (GPUs per node) of one GPU model: it then has one spot group per size
(config/node_sizes.py), so a type is compared only with the types of its own size, and the spread says that the
policy, not EC2, picks the size (the multi-size tests below).

Prices in the tables below are test inputs (the rule is what is under test); the shipped-stack cases read the
public price table, like every other cost test.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from capacity_helpers import ELASTIC, NODE_GROUP, dev_variant, private_subnet_azs, under
from conftest import REPO, SHARED_PRICES, STACKS, requires_shared_prices, stack_config, resolved_prices
from rich.console import Console

from gpuloan import cli, preview
from config import tags
from pricing.sources import pricebook
from pricing.cost_model import spot_spread
from pricing import checks

# --- the node groups: every type, every AZ ------------------------------------------------------------------


def _spot_groups(rec) -> dict[str, object]:
    return {
        ng.inputs["labels"][tags.LABEL_POOL]: ng
        for ng in under(rec, ELASTIC)
        if ng.type == NODE_GROUP and ng.inputs["capacityType"] == "SPOT"
    }


@pytest.mark.parametrize("stack", STACKS)
def test_every_spot_group_has_every_elastic_type_and_a_subnet_in_every_az(recorded, stack):
    rec = recorded(stack)
    cfg = checks.from_stack_yaml({"config": stack_config(stack)}, stack, prices=resolved_prices())
    azs = list(cfg.cluster.availability_zones)
    private = private_subnet_azs(rec)
    assert sorted(set(private.values())) == sorted(azs), "the network has one private subnet per cluster AZ"
    groups = _spot_groups(rec)
    spot_pools = [p for p in cfg.pools if spot_spread.launches_spot(p)]
    assert spot_pools and sorted(groups) == sorted(p.name for p in spot_pools)
    for pool in spot_pools:
        ng = groups[pool.name]
        # One group over all the types: price-capacity-optimized chooses among all of them at every launch.
        assert ng.inputs["instanceTypes"] == sorted(pool.elastic.instance_types)
        subnets = ng.inputs["subnetIds"]
        assert all(s in private for s in subnets), f"{pool.name}: spot nodes only in private subnets"
        # The Auto Scaling group balances over the AZs of its subnets: all of them, not the floor's alone.
        assert sorted(private[s] for s in subnets) == sorted(azs), pool.name
        floor = pool.guaranteed
        if floor is not None and floor.availability_zone:
            assert {private[s] for s in subnets} > {floor.availability_zone}


def test_prod_training_spot_spans_all_three_azs_although_its_floor_is_pinned_to_one(recorded):
    # The one shipped pool whose floor sits in a single AZ (its reservation's): its spot group must not follow.
    rec = recorded("prod")
    private = private_subnet_azs(rec)
    spot = _spot_groups(rec)["training"]
    assert sorted(private[s] for s in spot.inputs["subnetIds"]) == ["us-east-1a", "us-east-1b", "us-east-1c"]


def test_an_on_demand_only_pool_has_no_spot_spread():
    cfg = checks.from_stack_yaml(
        {"config": dev_variant(elastic={"capacity": "on_demand"})}, "dev", prices=resolved_prices()
    )
    assert not spot_spread.launches_spot(cfg.pools[0])
    assert (
        spot_spread.pool_figures(resolved_prices(), cfg, cfg.pools[0]) == []
        and spot_spread.advisories(resolved_prices(), cfg) == []
    )
    assert preview.spread_document(resolved_prices(), cfg) == {"pools": [], "advisories": []}


# --- the rule: dominated types ------------------------------------------------------------------------------


def row(
    instance_type: str, spot_per_gpu: float | None, bucket: str | None, gpu_model: str = "L4", gpus: int = 1
) -> spot_spread.SpotFigures:
    return spot_spread.SpotFigures(
        instance_type,
        gpus,
        gpu_model,
        spot_per_gpu,
        None if spot_per_gpu is None else 1.0,
        "observed-median" if spot_per_gpu is not None else "none",
        bucket,
        "test",
        "",
    )


# name: (rows, {index of a dominated row: the type named as better})
DOMINANCE = {
    "dearer and riskier -> warned": ([row("a", 1.0, ">20%"), row("b", 0.5, "10-15%")], {0: "b"}),
    "cheaper but riskier (a real trade-off) -> not warned": ([row("a", 0.5, ">20%"), row("b", 1.0, "<5%")], {}),
    "unknown spot price -> not warned": ([row("a", None, ">20%"), row("b", 0.5, "<5%")], {}),
    "unknown spot price never judges another": ([row("a", 1.0, ">20%"), row("b", None, "<5%")], {}),
    "unknown bucket -> not warned": ([row("a", 1.0, None), row("b", 0.5, "<5%")], {}),
    "equal price, worse bucket -> not warned": ([row("a", 0.5, ">20%"), row("b", 0.5, "<5%")], {}),
    "same bucket, dearer -> not warned": ([row("a", 1.0, "5-10%"), row("b", 0.5, "5-10%")], {}),
    "the cheapest better type is named": (
        [row("a", 2.0, ">20%"), row("b", 1.0, "15-20%"), row("c", 0.5, "10-15%")],
        {0: "c", 1: "c"},
    ),
    "position is the config's, not sorted": ([row("z", 0.5, "<5%"), row("a", 1.0, "5-10%")], {1: "z"}),
    "a single type -> nothing to compare": ([row("a", 1.0, ">20%")], {}),
    # several sizes: one spot group each (config/node_sizes.py); EC2 never chooses between them, the policy does
    "another size's cheaper, safer type -> not warned": (
        [row("big", 2.0, ">20%", gpus=4), row("small", 1.0, "<5%")],
        {},
    ),
    "dominated within its own size -> warned, named by its size's type": (
        [row("s1", 0.5, "<5%"), row("b1", 2.0, ">20%", gpus=4), row("b2", 1.5, "5-10%", gpus=4)],
        {1: "b2"},
    ),
}


@pytest.mark.parametrize("case", DOMINANCE)
def test_dominated_types(case):
    rows, want = DOMINANCE[case]
    got = spot_spread.dominated(rows)
    assert {d.index: d.better.instance_type for d in got} == want
    for d in got:
        assert d.figures is rows[d.index]


def test_a_bucket_label_gpuloan_does_not_know_counts_as_unknown():
    assert spot_spread.bucket_rank("<5%") == 0 and spot_spread.bucket_rank(">20%") == 4
    assert spot_spread.bucket_rank("n/a") is None and spot_spread.bucket_rank(None) is None


def test_the_reason_gives_both_figures_and_names_different_gpu_models():
    [d] = spot_spread.dominated(
        [row("p5.48xlarge", 1.8744, ">20%", "H100"), row("p4d.24xlarge", 0.5688, "10-15%", "A100")]
    )
    text = d.reason()
    assert "$1.8744/GPU-h" in text and ">20%" in text and "$0.5688/GPU-h" in text and "10-15%" in text
    assert "price-capacity-optimized" in text and "H100 vs A100" in text


def test_a_multi_size_reason_names_its_size_group_and_the_summary_splits_by_size():
    rows = [row("s1", 0.5, "<5%"), row("b1", 2.0, ">20%", gpus=4), row("b2", 1.5, "5-10%", gpus=4)]
    [d] = spot_spread.dominated(rows)
    assert "in the pool's 4-GPU spot group, price-capacity-optimized" in d.reason()
    assert spot_spread.summary(rows) == (
        "1-GPU group: s1 $0.50/GPU-h, interruptions <5% | 4-GPU group: "
        "b2 $1.50/GPU-h, interruptions 5-10%; b1 $2.00/GPU-h, interruptions >20%"
    )
    [one_size] = spot_spread.dominated([row("a", 1.0, ">20%"), row("b", 0.5, "10-15%")])
    assert "in its spot group, price-capacity-optimized" in one_size.reason()


# --- figures from the price book in force, and where the advisory shows -------------------------------------

# Test rates, low enough that prod's floors fit its budgets (validation checks that too).
PROD_ONDEMAND = {
    "p4d.24xlarge": 10.0,
    "p5.48xlarge": 10.0,
    "g6e.xlarge": 1.0,
    "g6e.2xlarge": 1.0,
    "p4de.24xlarge": 12.0,
}
PROD_TYPES = tuple(PROD_ONDEMAND)


@pytest.fixture
def prod_price_file(tmp_path):
    """A price file (test rates) for the prod stack's types; `spot` maps a type to (spot $/h, bucket)."""

    def make(spot: dict[str, tuple[float | None, str | None]]) -> str:
        types = {}
        for t in PROD_TYPES:
            usd, bucket = spot.get(t, (None, None))
            types[t] = {
                "ondemand_usd_per_hour": PROD_ONDEMAND[t],
                "source": "test",
                "as_of": "2026-11-30",
                **({"spot_usd_per_hour": usd, "spot_basis": "observed-median"} if usd else {}),
                **({"interruption_bucket": bucket} if bucket else {}),
            }
        # prod's commitments hold 1-year RIs for the training floor's type: validation needs that rate (docs/floor.md)
        types["p4d.24xlarge"]["commitments"] = [
            {"offer": "reserved_1yr_no_upfront", "usd_per_hour": 6.0, "source": "test", "as_of": "2026-11-30"}
        ]
        path = tmp_path / "prices.json"
        path.write_text(
            json.dumps(
                {
                    "format": pricebook.FORMAT,
                    "regions": {
                        "us-east-1": {"source": "test rates", "read_at": "2026-11-30", "instance_types": types}
                    },
                }
            )
        )
        return str(path)

    yield make


def _validate(monkeypatch, capsys, price_file: str) -> tuple[int, str, str]:
    monkeypatch.chdir(REPO)
    rc = cli.main(["validate", "prod", "--price-file", price_file])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _warnings(err: str) -> list[str]:
    """validate's warnings, each unfolded: a warning starts `warning: `, its continuation lines are indented."""
    out: list[str] = []
    for line in err.splitlines():
        if line.startswith("warning: "):
            out.append(line)
        elif line.startswith("  ") and out:
            out[-1] += " " + line.strip()
    return out


def test_validate_warns_about_a_dominated_type_and_still_passes(prod_price_file, monkeypatch, capsys):
    # p5 (8 GPUs): $16/h = $2/GPU-h at >20%; p4d (8 GPUs): $8/h = $1/GPU-h at 10-15%.
    path = prod_price_file(
        {
            "p4d.24xlarge": (8.0, "10-15%"),
            "p5.48xlarge": (16.0, ">20%"),
            "g6e.xlarge": (0.5, ">20%"),
            "g6e.2xlarge": (1.0, "<5%"),
        }
    )
    rc, out, err = _validate(monkeypatch, capsys, path)
    assert rc == 0 and out.startswith("prod: valid")
    warnings = _warnings(err)
    assert len(warnings) == 1, err  # g6e.xlarge is cheaper but riskier: a trade-off, not a warning
    assert warnings[0].startswith("warning: pools[0].elastic.instance_types[1]: p5.48xlarge spot costs $2.0000/GPU-h")
    assert "p4d.24xlarge $1.0000/GPU-h at 10-15%" in warnings[0]


def test_validate_says_nothing_when_a_price_or_bucket_is_unknown(prod_price_file, monkeypatch, capsys):
    path = prod_price_file(
        {
            "p4d.24xlarge": (8.0, "10-15%"),
            "p5.48xlarge": (None, ">20%"),
            "g6e.xlarge": (0.5, None),
            "g6e.2xlarge": (1.0, ">20%"),
        }
    )
    rc, out, err = _validate(monkeypatch, capsys, path)
    assert rc == 0 and "warning" not in err


def test_figures_are_per_gpu_with_their_basis_and_unknowns_stay_unknown(prod_price_file, monkeypatch):
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(prod_price_file({"p4d.24xlarge": (8.0, "10-15%")})))
    p4d, p5 = spot_spread.figures(resolved_prices(), ["p4d.24xlarge", "p5.48xlarge"], "us-east-1")
    assert (p4d.gpus, p4d.spot_usd_per_gpu_hour, p4d.ondemand_usd_per_gpu_hour) == (8, 1.0, 1.25)
    assert (p4d.interruption_bucket, p4d.spot_basis, p4d.source) == ("10-15%", "observed-median", "test")
    assert (p5.spot_usd_per_gpu_hour, p5.interruption_bucket, p5.spot_basis) == (None, None, "none")
    assert p5.ondemand_usd_per_gpu_hour == 1.25
    [unpriced] = spot_spread.figures(resolved_prices(), ["g6.xlarge"], "us-east-1")
    assert unpriced.spot_usd_per_gpu_hour is None and unpriced.ondemand_usd_per_gpu_hour is None


def test_prices_show_lists_each_spot_pool_per_gpu_and_the_advisory(prod_price_file, monkeypatch, capsys):
    path = prod_price_file(
        {"p4d.24xlarge": (8.0, "10-15%"), "p5.48xlarge": (16.0, ">20%"), "g6e.xlarge": (0.5, "5-10%")}
    )
    monkeypatch.chdir(REPO)
    assert cli.main(["prices", "show", "-s", "prod", "--price-file", path]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # records fold to the terminal (80 columns here)
    assert "spot spread of pool training (price-capacity-optimized over 2 type(s) x 3 AZ(s))" in flat
    assert "spot spread of pool inference" in flat
    lines = out.splitlines()
    # the spread table's row, not the price lines above it (those end in "/h"), and its basis on the line below
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("p5.48xlarge") and "/h" not in line)
    assert lines[i].split() == ["p5.48xlarge", "8", "$2.0000", "$1.2500", ">20%"]
    assert lines[i + 1].split() == ["spot", "price", "basis:", "observed-median"]
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("g6e.2xlarge") and "/h" not in line)
    assert lines[i].split() == ["g6e.2xlarge", "1", "unknown", "$1.0000", "unknown"]
    assert lines[i + 1].split() == ["spot", "price", "basis:", "none"]
    assert all(len(line) <= 80 for line in lines if not line.startswith("prices:"))
    advisories = [line for line in lines if line.strip().startswith("advisory:")]
    assert len(advisories) == 1 and "p5.48xlarge spot costs $2.0000/GPU-h" in flat


# --- the shipped stacks with the public price table ---------------------------------------------------------


@requires_shared_prices
def test_preview_shows_a_spread_line_per_spot_pool_and_the_advisories_of_prod(monkeypatch):
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(SHARED_PRICES))
    try:
        config = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]
        cfg = checks.from_stack_yaml({"config": config}, "prod", prices=resolved_prices())
        doc = preview.spread_document(resolved_prices(), cfg)
        assert [p["pool"] for p in doc["pools"]] == ["training", "inference", "research"]
        for p in doc["pools"]:
            assert [t["instance_type"] for t in p["types"]] == list(cfg.pool(p["pool"]).elastic.instance_types)
            assert all(t["spot_usd_per_gpu_hour"] and t["interruption_bucket"] for t in p["types"])
        # docs/capacity.md says the shipped prod stack gets these two with the public table.
        assert [a["path"] for a in doc["advisories"]] == [
            "pools[0].elastic.instance_types[1]",
            "pools[1].elastic.instance_types[1]",
        ]
        # Read from the table, not asserted as a fact about AWS: each flagged type is dearer per GPU and in a
        # worse bucket than another type of its pool.
        for a in doc["advisories"]:
            i, j = map(int, re.fullmatch(r"pools\[(\d+)\]\.elastic\.instance_types\[(\d+)\]", a["path"]).groups())
            rows = doc["pools"][i]["types"]
            worse = rows[j]
            rank = spot_spread.bucket_rank
            assert any(
                r["spot_usd_per_gpu_hour"] < worse["spot_usd_per_gpu_hour"]
                and rank(r["interruption_bucket"]) < rank(worse["interruption_bucket"])
                for r in rows
            )
        console = Console(record=True, width=400)
        preview.render_spread({"spot_spread": doc}, console)
        text = console.export_text()
        assert text.count("spot, spread by price and capacity over:") == 3
        assert text.count("spot advisory") == len(doc["advisories"])
    finally:
        monkeypatch.undo()


# --- a pool of several sizes: one spot group per size ---------------------------------------------------------

G6E_SIZES = ["g6e.12xlarge", "g6e.48xlarge", "g6e.2xlarge", "g6e.xlarge"]  # 4, 8, 1, 1 L40S


@pytest.fixture
def sized_price_file(tmp_path):
    """Test rates: g6e.xlarge (1 GPU) is cheapest and safest per GPU of all; g6e.2xlarge is dominated within the
    1-GPU group; the 4- and 8-GPU types are dearer and riskier than g6e.xlarge but the only types of their size."""
    spot = {
        "g6.xlarge": (0.4, "5-10%"),
        "g5.xlarge": (0.4, "5-10%"),
        "g6e.xlarge": (0.5, "<5%"),
        "g6e.2xlarge": (0.9, "10-15%"),
        "g6e.12xlarge": (4.8, ">20%"),
        "g6e.48xlarge": (12.0, ">20%"),
    }
    ondemand = {
        "g6.xlarge": 0.8,
        "g5.xlarge": 1.0,
        "g6e.xlarge": 1.8,
        "g6e.2xlarge": 2.2,
        "g6e.12xlarge": 10.0,
        "g6e.48xlarge": 30.0,
    }
    types = {
        t: {
            "ondemand_usd_per_hour": ondemand[t],
            "source": "test",
            "as_of": "2026-11-30",
            "spot_usd_per_hour": usd,
            "spot_basis": "observed-median",
            "interruption_bucket": bucket,
        }
        for t, (usd, bucket) in spot.items()
    }
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "format": pricebook.FORMAT,
                "regions": {"us-east-1": {"source": "test rates", "read_at": "2026-11-30", "instance_types": types}},
            }
        )
    )
    yield str(path)


def _sized_config() -> dict:
    return dev_variant(
        guaranteed={"instance_type": "g6e.2xlarge"},
        elastic={"instance_types": G6E_SIZES, "capacity": "spot_then_on_demand"},
    )


def test_a_multi_size_pool_is_advised_per_size_group_in_validate_and_preview(sized_price_file, monkeypatch):
    monkeypatch.setenv(pricebook.ENV_PRICE_FILE, str(sized_price_file))
    cfg = checks.from_stack_yaml({"config": _sized_config()}, "dev", prices=resolved_prices())
    # only g6e.2xlarge (index 2), against g6e.xlarge of its own 1-GPU group; the 4- and 8-GPU types are dearer and
    # riskier per GPU than g6e.xlarge, but EC2 never chooses between sizes, so they get no advisory
    [advisory] = spot_spread.advisories(resolved_prices(), cfg)
    assert advisory.path == "pools[0].elastic.instance_types[2]"
    assert "g6e.2xlarge spot costs $0.9000/GPU-h" in advisory.message and "g6e.xlarge $0.5000/GPU-h" in advisory.message
    assert "the pool's 1-GPU spot group" in advisory.message
    doc = preview.spread_document(resolved_prices(), cfg)
    [pool] = doc["pools"]
    assert pool["spot_groups"] == [
        {"gpus_per_node": 1, "instance_types": ["g6e.2xlarge", "g6e.xlarge"]},
        {"gpus_per_node": 4, "instance_types": ["g6e.12xlarge"]},
        {"gpus_per_node": 8, "instance_types": ["g6e.48xlarge"]},
    ]
    assert pool["size_choice"] == spot_spread.SIZE_CHOICE and "lowest price per GPU" in pool["size_choice"]
    console = Console(record=True, width=400)
    preview.render_spread({"spot_spread": doc}, console)
    text = console.export_text()
    assert "research spot, one spot group per node size" in text
    assert "spread by price and capacity over: 1-GPU group: g6e.xlarge $0.50/GPU-h" in text
    assert "| 4-GPU group: g6e.12xlarge" in text and "| 8-GPU group: g6e.48xlarge" in text
    assert text.count("spot advisory") == 1


def test_validate_warns_once_for_a_multi_size_pool(sized_price_file, tmp_path, monkeypatch, capsys):
    stack = tmp_path / "Pulumi.sized.yaml"
    stack.write_text(yaml.safe_dump({"config": _sized_config()}))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    rc = cli.main(["validate", "sized", "--price-file", sized_price_file])
    err = capsys.readouterr().err
    warnings = _warnings(err)
    assert rc == 0 and len(warnings) == 1, err
    assert warnings[0].startswith("warning: pools[0].elastic.instance_types[2]: g6e.2xlarge spot costs")


def test_prices_show_a_multi_size_pool_per_size_group(sized_price_file, tmp_path, monkeypatch, capsys):
    (tmp_path / "Pulumi.sized.yaml").write_text(yaml.safe_dump({"config": _sized_config()}))
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert cli.main(["prices", "show", "-s", "sized", "--price-file", sized_price_file]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    for size, count in (("1-GPU", 2), ("4-GPU", 1), ("8-GPU", 1)):
        assert f"spot spread of pool research, {size} group (price-capacity-optimized over {count} type(s)" in flat
    assert "spot spread of pool research (" not in flat  # no one mixed group
    assert f"across sizes: {spot_spread.SIZE_CHOICE}" in flat
    advisories = [line for line in out.splitlines() if line.strip().startswith("advisory:")]
    assert len(advisories) == 1 and "g6e.2xlarge spot costs $0.9000/GPU-h" in flat
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("prices:"))
