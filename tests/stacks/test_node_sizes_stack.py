"""A pool of several node sizes in the stack (config/node_sizes.py): a spot and an on-demand managed node group per
size, each of one shape; the first listed size keeps a one-size pool's names and URNs; the policy's IAM, settings and
Kueue quota cover every size; bad mixes fail before any resource."""

from __future__ import annotations

import fnmatch

import pytest

from capacity_helpers import ELASTIC, NODE_GROUP, dev_variant, under
from conftest import requires_shared_prices, run_stack, resolved_prices
from config.config import ConfigError
from pricing import checks

G6E = ["g6e.48xlarge", "g6e.12xlarge", "g6e.2xlarge"]


def _sized(**elastic) -> dict:
    # a floor of one of its sizes (1 L40S) and spot then on-demand, so every size has both groups
    return dev_variant(
        guaranteed={"instance_type": "g6e.2xlarge"},
        elastic={"instance_types": G6E, "capacity": "spot_then_on_demand", **elastic},
    )


@pytest.fixture(scope="module")
def sized():
    return run_stack("dev", _sized())


def _elastic_groups(rec) -> dict:
    return {r.urn.rsplit("::", 1)[1]: r for r in under(rec, ELASTIC) if r.type == NODE_GROUP}


@requires_shared_prices
def test_each_size_gets_a_spot_and_an_on_demand_group_of_its_own_shape(sized):
    groups = _elastic_groups(sized)
    types = {
        name: (r.inputs["capacityType"], tuple(r.inputs["instanceTypes"]), r.inputs["nodeGroupNamePrefix"])
        for name, r in groups.items()
    }
    assert types == {
        "research-elastic-spot": ("SPOT", ("g6e.48xlarge",), "dev-research-spot_"),
        "research-elastic-on-demand": ("ON_DEMAND", ("g6e.48xlarge",), "dev-research-on-demand_"),
        "research-elastic-spot-4gpu": ("SPOT", ("g6e.12xlarge",), "dev-research-spot-4gpu_"),
        "research-elastic-on-demand-4gpu": ("ON_DEMAND", ("g6e.12xlarge",), "dev-research-on-demand-4gpu_"),
        "research-elastic-spot-1gpu": ("SPOT", ("g6e.2xlarge",), "dev-research-spot-1gpu_"),
        "research-elastic-on-demand-1gpu": ("ON_DEMAND", ("g6e.2xlarge",), "dev-research-on-demand-1gpu_"),
    }
    for r in groups.values():
        assert r.ignore_changes == ["scalingConfig.desiredSize"]  # the policy owns every size's desired size


@requires_shared_prices
def test_the_policy_may_resize_every_size_and_its_settings_name_them(sized):
    from test_policy_function import _packaged_settings, _policy

    names = {r.outputs["nodeGroupName"] for r in _elastic_groups(sized).values()}
    doc = _policy(sized, "dev")
    resize = [st for st in doc["Statement"] if "eks:UpdateNodegroupConfig" in st["Action"]]
    patterns = [p.rsplit("/", 2)[-2] for st in resize for p in st["Resource"]]
    for name in names:
        assert any(fnmatch.fnmatchcase(name, p) for p in patterns), name
    fn = sized.of_type("aws:lambda/function:Function")[0].inputs
    ps = _packaged_settings("dev", fn).pool("research")
    assert set(ps.elastic_groups) == names
    assert ps.gpus_per_node == 8 and sorted(s.gpus_per_node for s in ps.other_sizes) == [1, 4]
    # each size is priced by its own type, from the price book (g6e.2xlarge's on-demand rate, not the 48xlarge's)

    one = next(s for s in ps.other_sizes if s.gpus_per_node == 1)
    assert one.on_demand_usd_per_hour == resolved_prices().price("g6e.2xlarge", "us-east-1").ondemand_usd_per_hour
    assert ps.on_demand_usd_per_hour == resolved_prices().price("g6e.48xlarge", "us-east-1").ondemand_usd_per_hour


@requires_shared_prices
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_one_size_pool_keeps_its_group_names_urns_and_inputs(recorded, stack):
    # An update from an earlier release must not replace running groups: a one-size pool's elastic groups keep the
    # Pulumi names (URNs), name prefixes and every instance type of the pool, in one group per capacity type.
    from pricing import checks
    from conftest import stack_config

    rec = recorded(stack)
    cfg = checks.from_stack_yaml({"config": stack_config(stack)}, stack, prices=resolved_prices())
    for pool in cfg.pools:
        if pool.elastic is None:
            continue
        groups = {
            r.urn.rsplit("::", 1)[1]: r
            for r in rec.of_type(NODE_GROUP)
            if r.inputs["labels"].get("gpuloan.io/tier") == "elastic"
            and r.inputs["labels"].get("gpuloan.io/pool") == pool.name
        }
        assert set(groups) <= {f"{pool.name}-elastic-spot", f"{pool.name}-elastic-on-demand"}
        for name, r in groups.items():
            kind = "spot" if name.endswith("-spot") else "on-demand"
            assert r.inputs["nodeGroupNamePrefix"] == f"{stack}-{pool.name}-{kind}_"
            assert sorted(r.inputs["instanceTypes"]) == sorted(pool.elastic.instance_types)


@requires_shared_prices
def test_kueue_elastic_quota_is_every_sizes_gpus_in_one_flavor():
    from config import scheduling

    cfg = checks.from_stack_yaml({"config": _sized(max_nodes=3)}, "dev", prices=resolved_prices())
    pool = cfg.pools[0]
    elastic = [f for f in scheduling.pool_flavors(cfg, pool) if f.kind != scheduling.FLOOR]
    assert len(elastic) == 1
    assert elastic[0].gpus == 3 * (8 + 4 + 1)
    assert "node.kubernetes.io/instance-type" not in elastic[0].node_labels


@requires_shared_prices
@pytest.mark.parametrize(
    "types, words",
    [
        (["g6e.48xlarge", "p5.4xlarge"], "several GPU models"),  # L40S x8 beside H100 x1
        (["g6e.48xlarge", "g6e.2xlarge", "g6e.2xlarge"], "listed twice"),
        (["g5g.xlarge", "g6e.2xlarge"], "x86_64 and arm64"),
    ],
)
def test_bad_size_mixes_name_the_field_before_any_resource(types, words):
    config = _sized(instance_types=types)
    config["gpuloan:pools"][0].pop("guaranteed")
    with pytest.raises(ConfigError) as err:
        checks.from_stack_yaml({"config": config}, "dev", prices=resolved_prices())
    problems = [(p, m) for p, m in err.value.problems if words in m]
    assert problems and problems[0][0].startswith("pools[0].elastic.instance_types"), err.value.problems


@requires_shared_prices
def test_the_previews_elastic_ceiling_counts_every_sizes_groups_at_their_max():
    from pricing.cost_model.costs import pool_cost

    cfg = checks.from_stack_yaml({"config": _sized(max_nodes=3)}, "dev", prices=resolved_prices())
    cost = pool_cost(resolved_prices(), cfg, cfg.pools[0])
    spot = sum(resolved_prices().price(t, "us-east-1").spot_or_ondemand_usd_per_hour for t in G6E)
    assert cost.elastic_max_gpus == 3 * (8 + 4 + 1)
    assert cost.elastic_max_monthly_usd == pytest.approx(3 * spot * 730, rel=1e-6)
    one = checks.from_stack_yaml(
        {"config": _sized(max_nodes=3, instance_types=["g6e.2xlarge"])}, "dev", prices=resolved_prices()
    )
    assert pool_cost(resolved_prices(), one, one.pools[0]).elastic_max_gpus == 3 * 1


# --- issue 35 item 4: names keyed to a size, never to list order ---------------------------------------------


def _sized_doc(types: list[str], **elastic) -> dict:
    from gpuloan import preview

    config = dev_variant(
        guaranteed={"instance_type": "g6e.2xlarge"},
        elastic={"instance_types": types, "capacity": "spot_then_on_demand", **elastic},
    )
    return preview.preview_document(resolved_prices(), "dev", config)


def _prefixes(doc) -> dict[str, tuple[str, ...]]:
    return {
        r["inputs"]["nodeGroupNamePrefix"]: tuple(r["inputs"]["instanceTypes"])
        for r in doc["resources"]
        if r["type"] == NODE_GROUP
        and r["inputs"].get("instanceTypes")
        and "-research-" in r["inputs"]["nodeGroupNamePrefix"]
    }


@requires_shared_prices
def test_reordering_a_multi_size_pools_types_renames_and_replaces_nothing():
    from offline import rollout

    listed = _sized_doc(G6E)
    reordered = _sized_doc(list(reversed(G6E)))
    assert _prefixes(listed) == _prefixes(reordered)
    assert {r["urn"] for r in listed["resources"]} == {r["urn"] for r in reordered["resources"]}
    assert rollout.group_changes(listed, reordered) == []
    assert rollout.blockers(listed, reordered) == []
    # the plain names go to the largest size wherever it is listed
    assert _prefixes(reordered)["dev-research-spot_"] == ("g6e.48xlarge",)


@requires_shared_prices
def test_an_earlier_release_stack_whose_first_type_was_not_the_largest_keeps_its_groups_with_plain_names_gpus():
    from offline import rollout

    # An earlier release named the first listed type's size plainly: here g6e.2xlarge (1 GPU). plain_names_gpus: 1
    # gives this release's program exactly those names, URNs and types.
    earlier = _sized_doc(list(reversed(G6E)), plain_names_gpus=1)
    assert _prefixes(earlier)["dev-research-spot_"] == ("g6e.2xlarge",)
    assert _prefixes(earlier)["dev-research-spot-8gpu_"] == ("g6e.48xlarge",)
    assert rollout.group_changes(earlier, _sized_doc(G6E, plain_names_gpus=1)) == []
    # Without it, the default (the largest size) would move the plain names: the cost diff shows the groups
    # replaced, and a replaced elastic group is a blocker.
    found = rollout.blockers(earlier, _sized_doc(list(reversed(G6E))))
    assert found and all(b.what == "elastic group" and b.action in ("replaces", "deletes") for b in found)
    assert any(b.name == "dev-research-spot" and "instanceTypes" in b.reasons for b in found)
    assert all(rollout.ELASTIC_NODES_UP in b.reasons for b in found)


def test_plain_names_gpus_must_name_one_of_the_pools_sizes():
    config = _sized(plain_names_gpus=2)
    with pytest.raises(ConfigError) as err:
        checks.from_stack_yaml({"config": config}, "dev", prices=resolved_prices())
    assert "pools[0].elastic" in str(err.value)
    assert "plain_names_gpus: 2 GPUs per node is none of this pool's sizes (1, 4, 8)" in str(err.value)
