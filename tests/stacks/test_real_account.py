"""What a real AWS account refuses or does differently, that Pulumi's mocks accept (issue 12): each test names the
AWS/provider rule (docs/aws-rules.md) and checks the program's inputs/options that honour it."""

from __future__ import annotations

import fnmatch

import pytest

from capacity_helpers import DESIRED, ELASTIC, GUARANTEED, NODE_GROUP, ODCR, RESERVATION_ID, dev_variant, under
from conftest import run_stack, stack_config
from offline import runner as offline
from config import names
from stacks.capacity import elastic, live_sizes

# A Capacity Block's price is its quote, which the user states (docs/floor.md); the figure only stands in for one.
BLOCK_RATE = {"usd_per_hour": 1.0, "source": "test value standing in for the block's quote"}

CLUSTER = "aws:eks/cluster:Cluster"
TABLE = "aws:dynamodb/table:Table"


def groups(rec, component_type):
    return [r for r in under(rec, component_type) if r.type == NODE_GROUP]


# --- 2. reservation-backed floors cannot surge: MINIMAL update strategy ------------------------------------------


@pytest.mark.parametrize(
    "guaranteed",
    [
        {},
        {"reservation": "odcr", "availability_zone": "us-east-1a"},
        # The price book has no Capacity Block rate for g6.xlarge: the block's buyer states its price (docs/floor.md).
        {
            "reservation": "capacity_block",
            "reservation_id": RESERVATION_ID,
            "availability_zone": "us-east-1a",
            "rate": BLOCK_RATE,
            "capacity_block_start": "2099-01-01T11:30:00Z",
            "capacity_block_end": "2099-01-08T11:30:00Z",
        },
    ],
    ids=["on-demand", "odcr", "capacity-block"],
)
def test_every_gpu_group_replaces_nodes_without_surge(guaranteed):
    # EKS's DEFAULT update strategy launches the new node first; a reservation sized to the floor has no room
    # for it (NodeCreationFailure). MINIMAL terminates first.
    rec = run_stack("dev", dev_variant(guaranteed=guaranteed))
    gpu = groups(rec, GUARANTEED) + groups(rec, ELASTIC)
    assert len(gpu) == 2
    for ng in gpu:
        assert ng.inputs["updateConfig"]["updateStrategy"] == "MINIMAL", ng.name
    [floor] = groups(rec, GUARANTEED)
    assert floor.inputs["updateConfig"]["maxUnavailable"] == 1
    # The system nodes are cheap, CPU-only and carry CoreDNS: they keep the surge-first default.
    system = [r for r in rec.of_type(NODE_GROUP) if r not in gpu]
    assert system and all("updateStrategy" not in r.inputs.get("updateConfig", {}) for r in system)


# --- 3. replacements create before they delete; reorders change nothing; critical resources protected -----------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_gpu_node_groups_are_auto_named_from_a_prefix_that_fits_eks(recorded, stack):
    rec = recorded(stack)
    for ng in rec.of_type(NODE_GROUP):
        if "nodeGroupNamePrefix" not in ng.inputs:
            continue
        # A fixed name forces delete-before-replace; a prefix lets the replacement exist first.
        assert "nodeGroupName" not in ng.inputs
        assert len(ng.inputs["nodeGroupNamePrefix"]) <= names.NODE_GROUP_PREFIX_MAX
        assert len(ng.outputs["nodeGroupName"]) <= names.NODE_GROUP_NAME_MAX
    gpu = groups(rec, GUARANTEED) + groups(rec, ELASTIC)
    assert gpu and all("nodeGroupNamePrefix" in ng.inputs for ng in gpu)


def test_a_group_prefix_never_matches_another_pools_groups():
    # With "-" as the end of the prefix, pool "a"'s spot pattern would match pool "a-spot-x"'s floor.
    spot_a = names.node_group_name_pattern("dev", "a", names.GROUP_SPOT)
    others = [
        names.node_group_name_prefix("dev", "a-spot-x", g) + "0" * 26
        for g in (names.GROUP_GUARANTEED, names.GROUP_SPOT, names.GROUP_ON_DEMAND)
    ]
    assert not any(fnmatch.fnmatchcase(name, spot_a) for name in others)
    assert fnmatch.fnmatchcase(names.node_group_name_prefix("dev", "a", names.GROUP_SPOT) + "1" * 26, spot_a)


def test_reordering_instance_types_or_azs_changes_no_spot_group_input():
    base = run_stack("dev", dev_variant(elastic={"instance_types": ["g6.xlarge", "g5.xlarge"]}))
    reordered = run_stack("dev", dev_variant(elastic={"instance_types": ["g5.xlarge", "g6.xlarge"]}))
    [a], [b] = groups(base, ELASTIC), groups(reordered, ELASTIC)
    assert a.inputs == b.inputs  # instance_types forces a replacement: a reorder must not
    assert a.inputs["subnetIds"] == sorted(a.inputs["subnetIds"])


def test_on_demand_groups_keep_the_configured_preference_order():
    # EKS launches an ON_DEMAND group's types in list order (prioritized): the order is meaningful there.
    rec = run_stack("dev", dev_variant(elastic={"capacity": "on_demand", "instance_types": ["g6.xlarge", "g5.xlarge"]}))
    [od] = groups(rec, ELASTIC)
    assert od.inputs["instanceTypes"] == ["g6.xlarge", "g5.xlarge"]


def _critical(rec):
    return (
        groups(rec, GUARANTEED)
        + rec.of_type(ODCR)
        + rec.of_type(CLUSTER)
        + [t for t in rec.of_type(TABLE) if t.name.endswith("-policy-state")]
    )


def test_floor_reservation_cluster_and_state_table_are_protected_by_default():
    rec = run_stack("dev", dev_variant(guaranteed={"reservation": "odcr", "availability_zone": "us-east-1a"}))
    critical = _critical(rec)
    assert {r.type for r in critical} == {NODE_GROUP, ODCR, CLUSTER, TABLE}
    assert all(r.protect for r in critical), [r.name for r in critical if not r.protect]
    # Elastic groups are meant to be replaceable (create-before-delete now makes that safe).
    assert not any(r.protect for r in groups(rec, ELASTIC))


def test_protect_critical_false_unprotects_them():
    config = dev_variant(guaranteed={"reservation": "odcr", "availability_zone": "us-east-1a"})
    config["gpuloan:protect_critical"] = False
    rec = run_stack("dev", config)
    assert _critical(rec) and not any(r.protect for r in _critical(rec))
    # The state table's DynamoDB deletion protection follows the same switch (docs/capacity.md, "Protection").
    assert [t.inputs.get("deletionProtectionEnabled") for t in rec.of_type(TABLE)] == [False]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_state_table_has_dynamodb_deletion_protection(stack):
    """Issue 42 item 3: Pulumi's `protect` refuses only Pulumi's own delete; DynamoDB's deletion protection refuses
    every DeleteTable (a console click, a script, another tool), until it is turned off."""
    (table,) = run_stack(stack).of_type(TABLE)
    assert table.inputs.get("deletionProtectionEnabled") is True
    assert table.protect


def test_a_protected_state_table_refuses_delete_until_protection_is_turned_off(aws_env):
    """What DynamoDB does with the plan's table (the moto server): DeleteTable fails while deletion protection is
    on; the UpdateTable that `protect_critical: false` (or the command in docs/capacity.md) sends lets it through."""
    import boto3
    from botocore.exceptions import ClientError

    (table,) = run_stack("dev").of_type(TABLE)
    inputs = table.inputs
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    name = inputs["name"]
    ddb.create_table(
        TableName=name,
        BillingMode=inputs["billingMode"],
        AttributeDefinitions=[{"AttributeName": a["name"], "AttributeType": a["type"]} for a in inputs["attributes"]],
        KeySchema=[{"AttributeName": inputs["hashKey"], "KeyType": "HASH"}],
        DeletionProtectionEnabled=inputs["deletionProtectionEnabled"],
    )
    with pytest.raises(ClientError, match="DeletionProtectionEnabled"):
        ddb.delete_table(TableName=name)
    ddb.update_table(TableName=name, DeletionProtectionEnabled=False)
    ddb.delete_table(TableName=name)


# --- 5. lowering elastic.max_nodes below the live size ------------------------------------------------------------


def _live(monkeypatch, sizes: dict[str, int]):
    """Pretend the dev cluster runs these node groups (name -> live desired size)."""
    monkeypatch.setattr(offline, "LIVE_NODE_GROUPS", {("gpuloan-dev", n): s for n, s in sizes.items()})


def _spot_name(kind="spot"):
    return names.node_group_name_prefix("dev", "research", kind) + "20261203073232123400000001"


def test_max_below_the_live_size_sends_the_new_max_as_desired(monkeypatch):
    # EKS rejects desired > max; with ignore_changes the update would send the live 6 against a max of 2.
    _live(monkeypatch, {_spot_name(): 6})
    rec = run_stack("dev", dev_variant(elastic={"max_nodes": 2}))
    [spot] = groups(rec, ELASTIC)
    assert spot.inputs["scalingConfig"] == {"minSize": 0, "desiredSize": 2, "maxSize": 2}
    assert spot.ignore_changes == []
    assert spot.inputs["scalingConfig"]["desiredSize"] <= spot.inputs["scalingConfig"]["maxSize"]


@pytest.mark.parametrize("live", [{}, {"_spot": 2}, {"_spot": 4}], ids=["first-deploy", "below-max", "at-max"])
def test_live_size_within_max_leaves_the_size_to_the_policy(monkeypatch, live):
    _live(monkeypatch, {_spot_name(): size for size in live.values()})
    rec = run_stack("dev")  # max_nodes 4
    [spot] = groups(rec, ELASTIC)
    assert spot.ignore_changes == [DESIRED]
    assert spot.inputs["scalingConfig"]["desiredSize"] == 0


def test_an_unreadable_cluster_changes_nothing(monkeypatch):
    def fail(args, mocks):  # the engine's shape of a failed invoke: (outputs, [(property, reason)])
        return {}, [("clusterName", "AccessDeniedException: not authorized to perform eks:ListNodegroups")]

    monkeypatch.setitem(offline.INVOKES, "aws:eks/getNodeGroups:getNodeGroups", fail)
    rec = run_stack("dev", dev_variant(elastic={"max_nodes": 2}))
    [spot] = groups(rec, ELASTIC)
    assert spot.ignore_changes == [DESIRED]


def test_scaling_rule_and_prefix_matching_are_pure():
    assert elastic.scaling(4, None) == (0, [DESIRED])
    assert elastic.scaling(4, 4) == (0, [DESIRED])
    assert elastic.scaling(4, 9) == (4, [])
    sizes = {"dev-a-spot_1": 3, "dev-a-spot_2": 7, "dev-a-spot-x-spot_1": 50, "dev-a-on-demand_1": 1}
    assert live_sizes.sizes_by_prefix(sizes, {"spot": "dev-a-spot_", "od": "dev-a-on-demand_", "none": "x_"}) == {
        "spot": 7,
        "od": 1,
    }


def test_other_stacks_are_unaffected_by_live_groups_of_this_one(monkeypatch):
    # Another stack's group in the same cluster with a similar name is not ours.
    _live(monkeypatch, {"dev-research-spot-2_20261203073232123400000001": 40})
    rec = run_stack("dev", stack_config("dev"))
    [spot] = groups(rec, ELASTIC)
    assert spot.ignore_changes == [DESIRED]
