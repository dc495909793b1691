"""The guaranteed floor and the elastic groups, as declared by the real program under the offline mocks.

Shipped stacks plus a table of config variants (reservation none / odcr / odcr-by-id / capacity_block;
elastic spot / on_demand / spot_then_on_demand; new vs existing cluster).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json

import pytest

from capacity_helpers import (
    DESIRED,
    ELASTIC,
    GUARANTEED,
    LAUNCH_TEMPLATE,
    NODE_GROUP,
    ODCR,
    RESERVATION_ID,
    dev_variant,
    is_taggable,
    parent_of,
    template_of,
    under,
)
from conftest import STACKS, run_stack, stack_config, resolved_prices
from offline import runner as offline
from config import names, tags, versions
from config.config import ConfigError
from pricing import checks
from stacks.capacity.guaranteed import gpu_ami_type

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
SPOT_TAINT = {"key": "gpuloan.io/spot", "value": "true", "effect": "NO_SCHEDULE"}


def groups(rec, component_type):
    return [r for r in under(rec, component_type) if r.type == NODE_GROUP]


# --- shipped stacks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_elastic_groups_ignore_desired_size_and_no_other_group_does(recorded, stack):
    rec = recorded(stack)
    elastic = groups(rec, ELASTIC)
    assert elastic, "every shipped stack has elastic capacity"
    for ng in elastic:
        assert ng.ignore_changes == [DESIRED], ng.name
        assert ng.inputs["scalingConfig"]["minSize"] == 0 and ng.inputs["scalingConfig"]["desiredSize"] == 0
    others = [r for r in rec.of_type(NODE_GROUP) if r not in elastic]
    assert others
    for ng in others:
        assert DESIRED not in ng.ignore_changes, f"{ng.name}: the floor must stay owned by Pulumi"


@pytest.mark.parametrize("stack", STACKS)
def test_floor_is_fixed_size_on_demand_and_tainted(recorded, stack):
    rec = recorded(stack)
    cfg = checks.from_stack_yaml({"config": stack_config(stack)}, stack, prices=resolved_prices())
    floors = groups(rec, GUARANTEED)
    assert len(floors) == sum(1 for p in cfg.pools if p.guaranteed)
    for ng in floors:
        pool = ng.inputs["labels"][tags.LABEL_POOL]
        nodes = cfg.pool(pool).guaranteed.nodes
        assert ng.inputs["scalingConfig"] == {"minSize": nodes, "desiredSize": nodes, "maxSize": nodes}
        assert ng.inputs["capacityType"] == "ON_DEMAND"
        assert ng.inputs["amiType"] == versions.GPU_AMI_TYPE
        # A prefix, not a name: a replacement is created before the old group is deleted.
        assert "nodeGroupName" not in ng.inputs
        assert ng.inputs["nodeGroupNamePrefix"] == f"{stack}-{pool}-guaranteed_"
        assert ng.inputs["labels"][tags.LABEL_TIER] == "guaranteed"
        assert ng.inputs["taints"] == [GPU_TAINT]
        assert "instanceTypes" not in ng.inputs  # the type is in the launch template
        assert template_of(rec, ng).inputs["instanceType"] == cfg.pool(pool).guaranteed.instance_type


def test_prod_training_floor_is_bound_to_its_reservation_in_its_az(recorded):
    rec = recorded("prod")
    [odcr] = rec.of_type(ODCR)
    assert odcr.inputs["instanceType"] == "p4d.24xlarge"
    assert odcr.inputs["instanceCount"] == 2
    assert odcr.inputs["availabilityZone"] == "us-east-1a"
    assert odcr.inputs["instanceMatchCriteria"] == "targeted"
    assert odcr.inputs["instancePlatform"] == "Linux/UNIX"
    odcr_id = offline.TYPE_OUTPUTS[ODCR](odcr.name, {}, "")["id"]
    [floor] = [ng for ng in groups(rec, GUARANTEED) if ng.inputs["labels"][tags.LABEL_POOL] == "training"]
    lt = template_of(rec, floor)
    target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": odcr_id}
    assert "instanceMarketOptions" not in lt.inputs
    private_1a = [
        s
        for s in rec.of_type("aws:ec2/subnet:Subnet")
        if s.inputs["availabilityZone"] == "us-east-1a" and "internal-elb" in str(s.inputs["tags"])
    ]
    assert floor.inputs["subnetIds"] == [_subnet_id(rec, private_1a[0])]
    assert rec.outputs["pools"]["training"]["reservation_id"] == odcr_id
    assert rec.outputs["pools"]["inference"]["reservation_id"] is None


def _subnet_id(rec, subnet) -> str:
    # The offline mocks' id for a resource: <name>-<hash(stack, type, name)>
    return f"{subnet.name}-{offline._short_hash(rec.stack, subnet.type, subnet.name)}"


@pytest.mark.parametrize("stack", STACKS)
def test_elastic_groups_labels_taints_and_types(recorded, stack):
    rec = recorded(stack)
    cfg = checks.from_stack_yaml({"config": stack_config(stack)}, stack, prices=resolved_prices())
    for ng in groups(rec, ELASTIC):
        pool = cfg.pool(ng.inputs["labels"][tags.LABEL_POOL])
        labels = ng.inputs["labels"]
        assert labels[tags.LABEL_TIER] == "elastic"
        # Spot: sorted (price-capacity-optimized ignores the order); on-demand: the config's preference order.
        want = (
            sorted(pool.elastic.instance_types) if ng.inputs["capacityType"] == "SPOT" else pool.elastic.instance_types
        )
        assert ng.inputs["instanceTypes"] == want
        assert "instanceType" not in template_of(rec, ng).inputs
        if ng.inputs["capacityType"] == "SPOT":
            assert labels[tags.LABEL_CAPACITY] == "spot"
            assert ng.inputs["taints"] == [GPU_TAINT, SPOT_TAINT]
            assert ng.inputs["nodeGroupNamePrefix"] == f"{stack}-{pool.name}-spot_"
            assert ng.inputs["scalingConfig"]["maxSize"] == pool.elastic.max_nodes
        else:
            assert ng.inputs["capacityType"] == "ON_DEMAND"
            assert labels[tags.LABEL_CAPACITY] == "on-demand"
            assert ng.inputs["taints"] == [GPU_TAINT]
            assert ng.inputs["nodeGroupNamePrefix"] == f"{stack}-{pool.name}-on-demand_"
            assert ng.inputs["scalingConfig"]["maxSize"] == (pool.elastic.on_demand_max_nodes or pool.elastic.max_nodes)


@pytest.mark.parametrize("stack", STACKS)
def test_every_launch_template_requires_imdsv2_and_encrypts_a_gp3_root(recorded, stack):
    lts = recorded(stack).of_type(LAUNCH_TEMPLATE)
    assert len(lts) == len(recorded(stack).of_type(NODE_GROUP))
    for lt in lts:
        meta = lt.inputs["metadataOptions"]
        assert meta["httpTokens"] == "required" and meta["httpPutResponseHopLimit"] == 2, lt.name
        assert meta["httpEndpoint"] == "enabled"
        [root] = lt.inputs["blockDeviceMappings"]
        assert root["deviceName"] == "/dev/xvda"
        assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"
        assert root["ebs"]["volumeSize"] >= 50
        assert "userData" not in lt.inputs and "imageId" not in lt.inputs  # EKS picks and bootstraps the AMI


@pytest.mark.parametrize("stack", STACKS)
def test_instances_volumes_and_enis_carry_the_cost_allocation_tags(recorded, stack):
    rec = recorded(stack)
    cfg = checks.from_stack_yaml({"config": stack_config(stack)}, stack, prices=resolved_prices())
    for component in (GUARANTEED, ELASTIC):
        for ng in groups(rec, component):
            pool = cfg.pool(ng.inputs["labels"][tags.LABEL_POOL])
            lt = template_of(rec, ng)
            specs = {s["resourceType"]: s["tags"] for s in lt.inputs["tagSpecifications"]}
            assert set(specs) == {"instance", "volume", "network-interface"}
            for resource_tags in specs.values():
                assert resource_tags[tags.TAG_ENVIRONMENT] == stack
                assert resource_tags[tags.TAG_POOL] == pool.name
                assert resource_tags[tags.TAG_TEAM] == pool.team
                assert resource_tags[tags.TAG_TIER] == ng.inputs["labels"][tags.LABEL_TIER]
                assert resource_tags[tags.TAG_CAPACITY] == ng.inputs["labels"][tags.LABEL_CAPACITY]
                # Provider default tags never reach ASG-launched instances: the user's tags must be copied.
                for key, value in cfg.default_tags.items():
                    assert resource_tags[key] == value


@pytest.mark.parametrize("stack", STACKS)
def test_every_taggable_pool_resource_has_pool_tags(recorded, stack):
    rec = recorded(stack)
    pool_resources = [r for r in under(rec, GUARANTEED) + under(rec, ELASTIC) if r.custom]
    assert pool_resources
    for r in pool_resources:
        assert is_taggable(r.type), r.type
        for key in tags.COST_ALLOCATION_KEYS:
            assert key in r.inputs.get("tags", {}), f"{r.type} {r.name} lacks {key}"


@pytest.mark.parametrize("stack", STACKS)
def test_every_aws_resource_goes_through_the_tagging_provider(recorded, stack):
    # The explicit provider's default tags carry gpuloan:environment to every taggable resource.
    rec = recorded(stack)
    [provider] = rec.of_type("pulumi:providers:aws")
    default_tags = provider.inputs["defaultTags"]
    default_tags = json.loads(default_tags) if isinstance(default_tags, str) else default_tags  # providers get JSON
    assert default_tags["tags"][tags.TAG_ENVIRONMENT] == stack
    for r in rec.resources:
        if r.type.startswith("aws:"):
            assert r.provider.startswith(provider.urn), f"{r.name} uses {r.provider or 'the default provider'}"


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs_name_every_group(recorded, stack):
    rec = recorded(stack)
    cfg = checks.from_stack_yaml({"config": stack_config(stack)}, stack, prices=resolved_prices())
    assert rec.outputs["cluster_name"] == f"gpuloan-{stack}"
    assert rec.outputs["cluster_endpoint"].startswith("https://")
    assert set(rec.outputs["pools"]) == {p.name for p in cfg.pools}
    for pool in cfg.pools:
        out = rec.outputs["pools"][pool.name]
        if pool.guaranteed:
            assert out["guaranteed_node_group_name"].startswith(f"{stack}-{pool.name}-guaranteed_")
        assert out["elastic_spot_node_group_name"].startswith(f"{stack}-{pool.name}-spot_")
        assert len(out["elastic_spot_node_group_name"]) <= names.NODE_GROUP_NAME_MAX
        # The ARN the policy's IAM pattern must match (EKS appends the group's UUID).
        pattern = names.node_group_arn_pattern(
            "us-east-1", offline.ACCOUNT_ID, f"gpuloan-{stack}", stack, pool.name, names.GROUP_SPOT
        )
        assert fnmatch.fnmatchcase(out["elastic_spot_node_group_arn"], pattern)


# --- config variants --------------------------------------------------------------------------------------

# A user's own rate, as a test value (the config path under test, not a price claim).
BLOCK_RATE = {"usd_per_hour": 1.0, "source": "test value standing in for the block's quote"}
# A window around the day the tests run (the program reads the clock): started yesterday, ends in 100 days (AWS
# sells blocks of at most 182 days); and one that starts in 100 days.
_TODAY = dt.datetime.now(dt.timezone.utc).replace(hour=11, minute=30, second=0, microsecond=0)
BLOCK_START = (_TODAY - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
BLOCK_END = (_TODAY + dt.timedelta(days=100)).strftime("%Y-%m-%dT%H:%M:%SZ")
LATER_START = (_TODAY + dt.timedelta(days=100)).strftime("%Y-%m-%dT%H:%M:%SZ")
LATER_END = (_TODAY + dt.timedelta(days=107)).strftime("%Y-%m-%dT%H:%M:%SZ")

VARIANTS = {
    # name: (guaranteed changes, elastic changes)
    "none+spot": ({}, {"capacity": "spot"}),
    "odcr+on_demand": ({"reservation": "odcr", "availability_zone": "us-east-1b"}, {"capacity": "on_demand"}),
    "odcr-by-id+spot_then_on_demand": (
        {"reservation": "odcr", "reservation_id": RESERVATION_ID, "availability_zone": "us-east-1a"},
        {"capacity": "spot_then_on_demand", "on_demand_max_nodes": 2},
    ),
    # The price book has no Capacity Block rate for g6.xlarge: the block's buyer states its price (docs/floor.md).
    # A Capacity Block's group: min 0, max `nodes`, the desired size owned by the policy function (ignore_changes);
    # the value sent is the one a new group starts at: the window's (policy/capacity_blocks.py, docs/floor.md).
    "capacity_block-before-start": (
        {
            "reservation": "capacity_block",
            "reservation_id": RESERVATION_ID,
            "availability_zone": "us-east-1a",
            "rate": BLOCK_RATE,
            "capacity_block_start": LATER_START,
            "capacity_block_end": LATER_END,
        },
        {},
    ),
    "capacity_block-in-window": (
        {
            "reservation": "capacity_block",
            "reservation_id": RESERVATION_ID,
            "availability_zone": "us-east-1a",
            "rate": BLOCK_RATE,
            "capacity_block_start": BLOCK_START,
            "capacity_block_end": BLOCK_END,
        },
        {},
    ),
    # Written before capacity_block_start existed, plus the start: `true` reads as the window.
    "capacity_block-active": (
        {
            "reservation": "capacity_block",
            "reservation_id": RESERVATION_ID,
            "availability_zone": "us-east-1a",
            "capacity_block_active": True,
            "rate": BLOCK_RATE,
            "capacity_block_start": BLOCK_START,
            "capacity_block_end": BLOCK_END,
        },
        {},
    ),
    # Past EKS's scale-down before the end: the program asks for 0 nodes even with capacity_block_active.
    "capacity_block-ended": (
        {
            "reservation": "capacity_block",
            "reservation_id": RESERVATION_ID,
            "availability_zone": "us-east-1a",
            "capacity_block_active": True,
            "rate": BLOCK_RATE,
            "capacity_block_start": "2025-12-01T11:30:00Z",
            "capacity_block_end": "2026-01-01T11:30:00Z",
        },
        {},
    ),
    # Held for a roll: the program takes the desired size over and sends 0.
    "capacity_block-held": (
        {
            "reservation": "capacity_block",
            "reservation_id": RESERVATION_ID,
            "availability_zone": "us-east-1a",
            "capacity_block_active": False,
            "rate": BLOCK_RATE,
            "capacity_block_start": BLOCK_START,
            "capacity_block_end": BLOCK_END,
        },
        {},
    ),
}


@pytest.fixture(scope="module")
def variant_runs():
    return {name: run_stack("dev", dev_variant(guaranteed=g, elastic=e)) for name, (g, e) in VARIANTS.items()}


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_floor(variant_runs, name):
    rec = variant_runs[name]
    g, _ = VARIANTS[name]
    reservation = g.get("reservation", "none")
    [floor] = groups(rec, GUARANTEED)
    lt = template_of(rec, floor)
    odcrs = rec.of_type(ODCR)
    assert not rec.of_type("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    target = (lt.inputs.get("capacityReservationSpecification") or {}).get("capacityReservationTarget")
    if reservation == "none":
        assert not odcrs and target is None
        assert floor.inputs["capacityType"] == "ON_DEMAND"
        assert len(floor.inputs["subnetIds"]) == 2  # any cluster AZ
        return
    # Reservation-bound: only subnets of the reservation's AZ.
    az = g["availability_zone"]
    [subnet_id] = floor.inputs["subnetIds"]
    assert subnet_id.startswith(f"dev-cluster-net-private-{az}-")
    if "reservation_id" in g:
        assert not odcrs, "an existing reservation is used, never created"
        assert target == {"capacityReservationId": RESERVATION_ID}
    else:
        [odcr] = odcrs
        assert odcr.inputs["availabilityZone"] == az and odcr.inputs["instanceMatchCriteria"] == "targeted"
        assert target == {"capacityReservationId": offline.TYPE_OUTPUTS[ODCR](odcr.name, {}, "")["id"]}
        assert parent_of(rec, odcr).type == GUARANTEED
    scaling = floor.inputs["scalingConfig"]
    if reservation == "capacity_block":
        assert floor.inputs["capacityType"] == "CAPACITY_BLOCK"
        assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
        assert lt.inputs["instanceType"] == "g6.xlarge"
        in_window = g["capacity_block_start"] == BLOCK_START and g["capacity_block_end"] == BLOCK_END
        held = g.get("capacity_block_active") is False
        expected = 1 if in_window and not held else 0
        assert scaling == {"minSize": 0, "desiredSize": expected, "maxSize": 1}
        assert floor.ignore_changes == ([] if held else [DESIRED])
        return
    assert floor.inputs["capacityType"] == "ON_DEMAND"
    assert "instanceMarketOptions" not in lt.inputs
    assert scaling == {"minSize": 1, "desiredSize": 1, "maxSize": 1}
    assert floor.ignore_changes == []


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_elastic_groups(variant_runs, name):
    rec = variant_runs[name]
    mode = VARIANTS[name][1].get("capacity", "spot")  # dev ships `spot`
    got = sorted(ng.inputs["capacityType"] for ng in groups(rec, ELASTIC))
    want = {"spot": ["SPOT"], "on_demand": ["ON_DEMAND"], "spot_then_on_demand": ["ON_DEMAND", "SPOT"]}[mode]
    assert got == want
    for ng in groups(rec, ELASTIC):
        assert ng.ignore_changes == [DESIRED]
        assert len(ng.inputs["subnetIds"]) == 2
        assert not (template_of(rec, ng).inputs.get("capacityReservationSpecification"))
    outputs = rec.outputs["pools"]["research"]
    assert ("elastic_on_demand_node_group_name" in outputs) == (mode != "spot")
    assert ("elastic_spot_node_group_name" in outputs) == (mode != "on_demand")


def test_pool_without_floor_or_without_elastic():
    only_elastic = run_stack("dev", dev_variant(drop=("guaranteed",)))
    assert not groups(only_elastic, GUARANTEED) and not only_elastic.of_type(GUARANTEED)
    assert len(groups(only_elastic, ELASTIC)) == 1
    assert "reservation_id" not in only_elastic.outputs["pools"]["research"]
    only_floor = run_stack("dev", dev_variant(drop=("elastic",)))
    assert not only_floor.of_type(ELASTIC) and len(groups(only_floor, GUARANTEED)) == 1


def test_graviton_pool_gets_the_arm_gpu_ami():
    rec = run_stack(
        "dev",
        dev_variant(
            guaranteed={"instance_type": "g5g.xlarge"}, elastic={"instance_types": ["g5g.xlarge", "g5g.2xlarge"]}
        ),
    )
    for ng in groups(rec, GUARANTEED) + groups(rec, ELASTIC):
        assert ng.inputs["amiType"] == versions.GPU_AMI_TYPE_ARM
    assert gpu_ami_type(["g6.xlarge", "g5.xlarge"]) == versions.GPU_AMI_TYPE


# --- invalid combinations never reach the engine -------------------------------------------------------------

INVALID = {
    "capacity_block without id": (
        dict(guaranteed={"reservation": "capacity_block", "availability_zone": "us-east-1a"}),
        "pools[0].guaranteed.reservation_id",
    ),
    "reservation without AZ": (dict(guaranteed={"reservation": "odcr"}), "pools[0].guaranteed.availability_zone"),
    "reservation AZ outside cluster": (
        dict(guaranteed={"reservation": "odcr", "availability_zone": "us-east-1d"}),
        "pools[0].guaranteed.availability_zone",
    ),
    "id without reservation": (
        dict(guaranteed={"reservation_id": RESERVATION_ID}),
        "pools[0].guaranteed.reservation_id",
    ),
    "active flag on odcr": (
        dict(guaranteed={"reservation": "odcr", "availability_zone": "us-east-1a", "capacity_block_active": True}),
        "pools[0].guaranteed.capacity_block_active",
    ),
    "capacity_block without end": (
        dict(
            guaranteed={
                "reservation": "capacity_block",
                "reservation_id": RESERVATION_ID,
                "availability_zone": "us-east-1a",
            }
        ),
        "pools[0].guaranteed.capacity_block_end",
    ),
    "capacity_block end without zone": (
        dict(
            guaranteed={
                "reservation": "capacity_block",
                "reservation_id": RESERVATION_ID,
                "availability_zone": "us-east-1a",
                "capacity_block_end": "2027-01-15T11:30:00",
            }
        ),
        "pools[0].guaranteed.capacity_block_end",
    ),
    "capacity_block without start": (
        dict(
            guaranteed={
                "reservation": "capacity_block",
                "reservation_id": RESERVATION_ID,
                "availability_zone": "us-east-1a",
                "capacity_block_active": True,
                "capacity_block_end": "2027-01-15T11:30:00Z",
            }
        ),
        "pools[0].guaranteed.capacity_block_start",
    ),
    "capacity_block start without zone": (
        dict(
            guaranteed={
                "reservation": "capacity_block",
                "reservation_id": RESERVATION_ID,
                "availability_zone": "us-east-1a",
                "capacity_block_start": "2027-01-08T11:30:00",
                "capacity_block_end": "2027-01-15T11:30:00Z",
            }
        ),
        "pools[0].guaranteed.capacity_block_start",
    ),
    "capacity_block ends before it starts": (
        dict(
            guaranteed={
                "reservation": "capacity_block",
                "reservation_id": RESERVATION_ID,
                "availability_zone": "us-east-1a",
                "capacity_block_start": "2027-01-15T11:30:00Z",
                "capacity_block_end": "2027-01-08T11:30:00Z",
            }
        ),
        "pools[0].guaranteed.capacity_block_end",
    ),
    "capacity_block longer than AWS sells": (
        dict(
            guaranteed={
                "reservation": "capacity_block",
                "reservation_id": RESERVATION_ID,
                "availability_zone": "us-east-1a",
                "capacity_block_start": "2027-01-08T11:30:00Z",
                "capacity_block_end": "2027-07-15T11:30:00Z",
            }
        ),
        "pools[0].guaranteed.capacity_block_end",
    ),
    "capacity_block drain before its start": (
        dict(
            guaranteed={
                "reservation": "capacity_block",
                "reservation_id": RESERVATION_ID,
                "availability_zone": "us-east-1a",
                "capacity_block_start": "2027-01-15T10:00:00Z",
                "capacity_block_end": "2027-01-15T11:30:00Z",
                "capacity_block_checkpoint_lead_minutes": 60,
            }
        ),
        "pools[0].guaranteed.capacity_block_checkpoint_lead_minutes",
    ),
    "block start on odcr": (
        dict(
            guaranteed={
                "reservation": "odcr",
                "availability_zone": "us-east-1a",
                "capacity_block_start": "2027-01-08T11:30:00Z",
            }
        ),
        "pools[0].guaranteed.capacity_block_start",
    ),
    "checkpoint lead on odcr": (
        dict(
            guaranteed={
                "reservation": "odcr",
                "availability_zone": "us-east-1a",
                "capacity_block_checkpoint_lead_minutes": 10,
            }
        ),
        "pools[0].guaranteed.capacity_block_checkpoint_lead_minutes",
    ),
    # several sizes are several groups (config/node_sizes.py), of one GPU model only (L4 x1 beside L40S x4: no)
    "sizes of mixed GPU models": (
        dict(elastic={"instance_types": ["g6.xlarge", "g6e.12xlarge"]}),
        "pools[0].elastic.instance_types",
    ),
    "mixed CPU architectures": (
        dict(elastic={"instance_types": ["g5g.xlarge", "g5.xlarge"]}),
        "pools[0].elastic.instance_types",
    ),
    "fallback max on spot-only": (dict(elastic={"on_demand_max_nodes": 2}), "pools[0].elastic.on_demand_max_nodes"),
    "no add-on pins for version": (
        dict(cluster={**stack_config("dev")["gpuloan:cluster"], "kubernetes_version": "1.29"}),
        "cluster.kubernetes_version",
    ),
    "group name too long": (dict(drop=()), "pools[0].name"),
}


@pytest.mark.parametrize("case", INVALID)
def test_invalid_combinations_fail_before_any_resource(case, monkeypatch):
    changes, path = INVALID[case]
    config = dev_variant(**changes)
    if case == "group name too long":
        config["gpuloan:pools"][0]["name"] = "a" * 32
        config["gpuloan:environment"] = "b" * 32
    registered = []
    original = offline.OfflineMocks.new_resource
    monkeypatch.setattr(
        offline.OfflineMocks, "new_resource", lambda self, args: registered.append(args.typ) or original(self, args)
    )
    with pytest.raises(Exception) as err:
        run_stack("dev", config)
    assert path in str(err.value)
    assert registered == [], "config errors must stop the program before the first resource"
    with pytest.raises(ConfigError) as direct:
        checks.from_stack_yaml({"config": config}, "dev", prices=resolved_prices())
    assert path in [p for p, _ in direct.value.problems]


def test_elastic_arn_patterns_match_elastic_groups_and_never_the_floor(recorded):
    # The policy's IAM is scoped with these patterns; EKS node group ARNs end in <name>/<uuid>.
    rec = recorded("prod")
    for pool, out in rec.outputs["pools"].items():
        spot, on_demand = (
            names.node_group_arn_pattern("us-east-1", offline.ACCOUNT_ID, "gpuloan-prod", "prod", pool, group)
            for group in (names.GROUP_SPOT, names.GROUP_ON_DEMAND)
        )
        # a pool has the groups its config asks for (prod's research pool: spot only, no floor)
        assert fnmatch.fnmatchcase(out["elastic_spot_node_group_arn"], spot)
        if "elastic_on_demand_node_group_arn" in out:
            assert fnmatch.fnmatchcase(out["elastic_on_demand_node_group_arn"], on_demand)
            assert not fnmatch.fnmatchcase(out["elastic_on_demand_node_group_arn"], spot)
        if "guaranteed_node_group_arn" in out:
            assert not fnmatch.fnmatchcase(out["guaranteed_node_group_arn"], spot)
            assert not fnmatch.fnmatchcase(out["guaranteed_node_group_arn"], on_demand)
