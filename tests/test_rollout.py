"""What a change does to running nodes: gpuloan/rollout.py on two offline previews (base, head), and the PR
comment of `gpuloan cost-diff` that shows it (issue 12 item 4)."""

from __future__ import annotations

import copy

import pytest

from conftest import stack_config
from gpuloan import cost_diff, preview, rollout


def _doc(stack: str, config: dict) -> dict:
    return preview.preview_document(stack, config)


@pytest.fixture(scope="module")
def prod_base():
    return _doc("prod", stack_config("prod"))


def _changes(base_doc, edit) -> list[rollout.GroupChange]:
    config = stack_config("prod")
    edit(config)
    return rollout.group_changes(base_doc, _doc("prod", config))


def _by_group(changes):
    return {c.group: c for c in changes}


def test_no_change_rolls_nothing(prod_base):
    assert rollout.group_changes(prod_base, copy.deepcopy(prod_base)) == []


def test_raising_the_floor_rolls_nothing(prod_base):
    # Scaling config and the reservation's instance count are updated in place.
    changes = _changes(prod_base, lambda c: c["gpuloan:pools"][0]["guaranteed"].update(nodes=3))
    assert changes == []


def test_editing_elastic_instance_types_replaces_the_elastic_groups(prod_base):
    changes = _by_group(_changes(
        prod_base, lambda c: c["gpuloan:pools"][0]["elastic"].update(instance_types=["p5.48xlarge", "p4de.24xlarge"])))
    assert set(changes) == {"prod-training-spot", "prod-training-on-demand"}
    spot = changes["prod-training-spot"]
    assert spot.action == "replaces" and "instanceTypes" in spot.reasons and not spot.is_floor
    assert spot.size == "0–6× p4de.24xlarge, p5.48xlarge"


def test_reordering_spot_types_replaces_nothing_but_reordering_on_demand_preference_does(prod_base):
    changes = _by_group(_changes(
        prod_base, lambda c: c["gpuloan:pools"][0]["elastic"].update(instance_types=["p5.48xlarge", "p4d.24xlarge"])))
    # Spot types are sorted (order-free); the on-demand group's order is its launch preference.
    assert set(changes) == {"prod-training-on-demand"}


def test_moving_the_floor_to_another_az_replaces_it_and_its_reservation(prod_base):
    changes = _changes(prod_base, lambda c: c["gpuloan:pools"][0]["guaranteed"].update(availability_zone="us-east-1b"))
    floor = _by_group(changes)["prod-training-guaranteed"]
    assert floor.action == "replaces" and floor.is_floor
    assert "subnetIds" in floor.reasons
    assert any("new capacity reservation (availabilityZone)" in r for r in floor.reasons)
    assert floor.sentence().startswith("replaces `prod-training-guaranteed` (2× p4d.24xlarge)")
    assert changes[0] == floor, "floors come first"


def test_a_default_tags_edit_rolls_every_node(prod_base):
    changes = _changes(prod_base, lambda c: c["gpuloan:default_tags"].update({"cost-center": "research"}))
    groups = {r["inputs"].get("nodeGroupNamePrefix") or r["inputs"].get("nodeGroupName")
              for r in prod_base["resources"] if r["type"] == rollout.NODE_GROUP}
    assert len(changes) == len(groups) == 7  # 2 floors, 4 elastic, the system group
    for c in changes:
        assert c.action == "rolls"
        assert any(r.startswith("new launch template version (") and "tagSpecifications" in r for r in c.reasons)


def test_removing_a_pool_deletes_its_groups(prod_base):
    def remove_inference(c):
        c["gpuloan:pools"].pop(1)
        # Kueue's list of production pools allowed on spot must not name the removed pool (validation refuses it).
        kueue = c["gpuloan:scheduling"]["kueue"]
        kueue["production_spot_pools"] = [p for p in kueue["production_spot_pools"] if p != "inference"]
        return c["gpuloan:budget"]

    changes = _by_group(_changes(prod_base, remove_inference))
    assert {g for g, c in changes.items() if c.action == "deletes"} == {
        "prod-inference-guaranteed", "prod-inference-spot", "prod-inference-on-demand"}


def test_replace_forcing_table_treats_subnets_as_a_set():
    a = {"subnetIds": ["subnet-b", "subnet-a"]}
    assert not rollout._changed(a, {"subnetIds": ["subnet-a", "subnet-b"]}, "subnetIds")
    assert rollout._changed({"instanceTypes": ["a", "b"]}, {"instanceTypes": ["b", "a"]}, "instanceTypes")


def test_the_pr_comment_names_a_replaced_floor(prod_base):
    config = stack_config("prod")
    config["gpuloan:pools"][0]["guaranteed"]["availability_zone"] = "us-east-1b"
    head = _doc("prod", config)
    d = cost_diff.diff_stack("prod", cost_diff.Side(doc=prod_base), cost_diff.Side(doc=head))
    markdown = cost_diff.render_markdown([d], "main")
    assert "⚠️ **floor**: replaces `prod-training-guaranteed` (2× p4d.24xlarge)" in markdown
    assert "refuses this until protection is lifted" in markdown
    text = cost_diff.render_text([d], "main")
    assert "node group: FLOOR replaces `prod-training-guaranteed` (2× p4d.24xlarge)" in text
