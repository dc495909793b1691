"""What a change does to running nodes: offline/rollout.py on two offline previews (base, head), and the PR
comment of `gpuloan cost-diff` that shows it (issue 12 item 4)."""

from __future__ import annotations

import copy
from pricing import checks

import pytest

from conftest import stack_config, resolved_prices
from offline import diff as cost_diff
from gpuloan import preview
from offline import rollout


def _doc(stack: str, config: dict) -> dict:
    return preview.preview_document(resolved_prices(), stack, config)


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
    changes = _by_group(
        _changes(
            prod_base,
            lambda c: c["gpuloan:pools"][0]["elastic"].update(instance_types=["p5.48xlarge", "p4de.24xlarge"]),
        )
    )
    assert set(changes) == {"prod-training-spot", "prod-training-on-demand"}
    spot = changes["prod-training-spot"]
    assert spot.action == "replaces" and "instanceTypes" in spot.reasons and not spot.is_floor
    assert spot.size == "0–6× p4de.24xlarge, p5.48xlarge"


def test_reordering_spot_types_replaces_nothing_but_reordering_on_demand_preference_does(prod_base):
    changes = _by_group(
        _changes(
            prod_base, lambda c: c["gpuloan:pools"][0]["elastic"].update(instance_types=["p5.48xlarge", "p4d.24xlarge"])
        )
    )
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
    groups = {
        r["inputs"].get("nodeGroupNamePrefix") or r["inputs"].get("nodeGroupName")
        for r in prod_base["resources"]
        if r["type"] == rollout.NODE_GROUP
    }
    assert len(changes) == len(groups) == 8  # 2 floors, 5 elastic, the system group
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
        "prod-inference-guaranteed",
        "prod-inference-spot",
        "prod-inference-on-demand",
    }


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
    from gpuloan.render import cost_comment

    text = cost_comment.render_text([d], "main")
    assert "node group: FLOOR replaces `prod-training-guaranteed` (2× p4d.24xlarge)" in text


# --- blockers: the cluster, a floor, a reservation (issue 24 item 2) -------------------------------------------


def _without_role_paths(self, args):
    # The program as it was before every role got an IAM path (stacks/gitops/role_guard.py): types recorded, roles as
    # declared (no path, no boundary). A stack deployed then has these roles in its state.
    self.declared_types.add(args.type_)
    return None


def test_an_upgrade_that_adds_role_paths_replaces_neither_the_cluster_nor_any_group(monkeypatch, prod_base):
    from stacks.gitops import role_guard

    with monkeypatch.context() as m:
        m.setattr(role_guard.RoleGuard, "_transform", _without_role_paths)
        before_paths = _doc("prod", stack_config("prod"))
    roles = [r for r in prod_base["resources"] if r["type"] == rollout.IAM_ROLE]
    assert roles and all(r["inputs"].get("path") for r in roles), "today's plan puts every role under a path"
    assert all("path" in r["ignore_changes"] for r in roles)
    # The deployed roles keep their path (ignore_changes), so their ARNs, the cluster's roleArn and every node
    # group's nodeRoleArn stay as they are.
    assert rollout.blockers(before_paths, prod_base) == []
    assert rollout.group_changes(before_paths, prod_base) == []


def test_a_role_path_change_that_replaces_the_role_is_traced_to_the_cluster(monkeypatch):
    # The same upgrade without the path kept from the state: the path forces new roles, new ARNs, and the
    # cluster's roleArn (ForceNew) a new cluster; every node group's nodeRoleArn a new group.
    from stacks.gitops import role_guard

    with monkeypatch.context() as m:
        m.setattr(role_guard.RoleGuard, "_transform", _without_role_paths)
        before_paths = _doc("prod", stack_config("prod"))
    monkeypatch.setattr(role_guard, "KEPT_FROM_STATE", ())
    head = _doc("prod", stack_config("prod"))
    found = rollout.blockers(before_paths, head)
    assert found[0].sentence() == "replaces the EKS cluster `gpuloan-prod` (roleArn)"
    assert {b.name for b in found if b.what == "floor"} == {"prod-training-guaranteed", "prod-inference-guaranteed"}
    assert all(c.action == "replaces" and "nodeRoleArn" in c.reasons for c in rollout.group_changes(before_paths, head))


def test_renaming_the_environment_blocks_on_the_cluster(prod_base):
    config = stack_config("prod")
    config["gpuloan:environment"] = "production"
    head = _doc("prod", config)
    # Every resource name changes with the environment, so every URN is new: the old cluster is deleted.
    assert any(b.what == "EKS cluster" and b.action == "deletes" for b in rollout.blockers(prod_base, head))


def test_moving_the_floor_blocks_on_the_floor_and_its_reservation(prod_base):
    config = stack_config("prod")
    config["gpuloan:pools"][0]["guaranteed"]["availability_zone"] = "us-east-1b"
    found = rollout.blockers(prod_base, _doc("prod", config))
    assert [(b.what, b.action, b.name) for b in found] == [
        ("floor", "replaces", "prod-training-guaranteed"),
        ("capacity reservation", "replaces", "training-guaranteed-odcr"),
    ]


def test_raising_the_floor_blocks_nothing(prod_base):
    config = stack_config("prod")
    config["gpuloan:pools"][0]["guaranteed"]["nodes"] = 3
    assert rollout.blockers(prod_base, _doc("prod", config)) == []


def test_the_pr_comment_and_the_local_preview_show_blockers(prod_base):
    from gpuloan.render import cost_comment

    config = stack_config("prod")
    config["gpuloan:pools"][0]["guaranteed"]["availability_zone"] = "us-east-1b"
    d = cost_diff.diff_stack("prod", cost_diff.Side(doc=prod_base), cost_diff.Side(doc=_doc("prod", config)))
    markdown = cost_comment.render_markdown([d], "main")
    assert "> ⛔ **Blocker**: this change replaces the floor `prod-training-guaranteed`" in markdown
    assert (
        "> ⛔ **Blocker**: this change replaces the capacity reservation `training-guaranteed-odcr` "
        "(availabilityZone)" in markdown
    )
    table = cost_comment.render_table([d], "main")
    assert "BLOCKER prod: this change replaces the capacity reservation `training-guaranteed-odcr`" in table
    assert len(cost_comment.to_json([d], "main")["stacks"][0]["blockers"]) == 2
    quiet = cost_diff.diff_stack("prod", cost_diff.Side(doc=prod_base), cost_diff.Side(doc=copy.deepcopy(prod_base)))
    assert "Blocker" not in cost_comment.render_markdown([quiet], "main")


# --- issue 24 item 6: a floor replaced while its reservation stays --------------------------------------------


def _floor_group(doc, label):
    [g] = [r for r in doc["resources"] if r["type"] == rollout.NODE_GROUP and rollout.group_label(r["inputs"]) == label]
    return g


def test_a_floor_replaced_on_a_reservation_that_stays_is_delete_first_with_the_outage_stated(prod_base):
    head = copy.deepcopy(prod_base)
    # An input that forces a new group (e.g. an AMI type change) while the ODCR stays as it is.
    _floor_group(head, "prod-training-guaranteed")["inputs"]["amiType"] = "AL2023_ARM_64_NVIDIA"
    [floor] = [c for c in rollout.group_changes(prod_base, head) if c.group == "prod-training-guaranteed"]
    assert floor.action == "replaces"
    [why] = [r for r in floor.reasons if r.startswith("delete first")]
    assert "the old group holds all of it, so 2 floor node(s) are down until the new group is up" in why
    [blocker] = rollout.blockers(prod_base, head)
    assert "delete first" in blocker.sentence()


def test_moving_the_floor_with_its_reservation_is_not_held_by_the_old_group(prod_base):
    config = stack_config("prod")
    config["gpuloan:pools"][0]["guaranteed"]["availability_zone"] = "us-east-1b"
    changes = rollout.group_changes(prod_base, _doc("prod", config))
    [floor] = [c for c in changes if c.group == "prod-training-guaranteed"]
    assert not any(r.startswith("delete first") for r in floor.reasons)


def test_floors_on_a_reservation_are_replaced_delete_first_and_others_create_first():
    from conftest import run_stack

    rec = run_stack("prod", stack_config("prod"))
    groups = {rollout.group_label(r.inputs): r for r in rec.of_type(rollout.NODE_GROUP)}
    assert groups["prod-training-guaranteed"].delete_before_replace  # targets its ODCR
    assert not groups["prod-inference-guaranteed"].delete_before_replace  # no reservation: create first
    assert not any(g.delete_before_replace for label, g in groups.items() if not label.endswith("-guaranteed"))


# --- issue 24 item 7: Capacity Block floors: staged rolls, nothing asked of an ended block ---------------------


def _block_config(active: bool, end: str | None = None) -> dict:
    """A Capacity Block floor inside its window (started yesterday, ends in 100 days, or `end` with a 7-day block);
    `active` false holds it at 0 (a roll)."""
    import datetime as dt

    today = dt.datetime.now(dt.timezone.utc).replace(hour=11, minute=30, second=0, microsecond=0)
    end_t = dt.datetime.fromisoformat(end.replace("Z", "+00:00")) if end else today + dt.timedelta(days=100)
    start_t = end_t - dt.timedelta(days=7) if end else today - dt.timedelta(days=1)
    config = stack_config("dev")
    config["gpuloan:pools"][0]["guaranteed"].update(
        reservation="capacity_block",
        reservation_id="cr-0123456789abcdef0",
        availability_zone="us-east-1a",
        capacity_block_active=active,
        capacity_block_start=start_t.strftime("%Y-%m-%dT%H:%M:%SZ"),
        capacity_block_end=end_t.strftime("%Y-%m-%dT%H:%M:%SZ"),
        rate={"usd_per_hour": 1.0, "source": "test value standing in for the block's quote"},
    )
    return config


def test_rolling_an_active_capacity_block_floor_must_be_staged():
    base = _doc("dev", _block_config(active=True))
    config = _block_config(active=True)
    config["gpuloan:default_tags"]["cost-center"] = "research"  # a new launch template version: a roll
    head = _doc("dev", config)
    [floor] = [c for c in rollout.group_changes(base, head) if c.is_floor]
    assert floor.action == "rolls" and rollout.CAPACITY_BLOCK_STAGED in floor.reasons
    assert [b.name for b in rollout.blockers(base, head)] == ["dev-research-guaranteed"]
    # At desired 0 (capacity_block_active: false) the same roll is what EKS accepts: no staging, no blocker.
    idle = _block_config(active=False)
    idle_head = copy.deepcopy(idle)
    idle_head["gpuloan:default_tags"]["cost-center"] = "research"
    [floor] = [c for c in rollout.group_changes(_doc("dev", idle), _doc("dev", idle_head)) if c.is_floor]
    assert rollout.CAPACITY_BLOCK_STAGED not in floor.reasons


def test_an_ended_capacity_block_is_asked_for_no_nodes():
    import datetime as dt

    g = (
        checks.from_stack_yaml(
            {"config": _block_config(active=True, end="2027-01-15T11:30:00Z")}, "dev", prices=resolved_prices()
        )
        .pools[0]
        .guaranteed
    )
    end = dt.datetime(2027, 1, 15, 11, 30, tzinfo=dt.timezone.utc)
    assert g.floor_up(end - dt.timedelta(minutes=41))
    # From EKS's own scale-down, 40 minutes before the end, the program stops asking for the floor.
    assert not g.floor_up(end - dt.timedelta(minutes=40))
    assert not g.floor_up(end + dt.timedelta(days=3))
    from stacks.capacity.guaranteed import floor_scaling

    assert floor_scaling(g, end + dt.timedelta(days=3)) == (0, 0, g.nodes)
    assert floor_scaling(g, end - dt.timedelta(hours=2)) == (g.nodes, g.nodes, g.nodes)


def test_a_kubernetes_jump_of_two_minor_versions_is_a_blocker():
    old = stack_config("dev")
    old["gpuloan:cluster"]["kubernetes_version"] = "1.33"
    base = _doc("dev", old)
    [blocker] = rollout.blockers(base, _doc("dev", stack_config("dev")))  # the shipped 1.35
    assert blocker.sentence() == (
        "upgrades the EKS cluster `gpuloan-dev` (Kubernetes 1.33 -> 1.35: EKS updates a "
        "cluster one minor version at a time (apply 1.34 first))"
    )
    step = stack_config("dev")
    step["gpuloan:cluster"]["kubernetes_version"] = "1.34"
    assert rollout.blockers(base, _doc("dev", step)) == []


# --- issue 35 items 4 and 5 -----------------------------------------------------------------------------------


def test_replacing_or_deleting_an_elastic_group_is_a_blocker(prod_base):
    config = stack_config("prod")
    config["gpuloan:pools"][0]["elastic"]["instance_types"] = ["p5.48xlarge", "p4de.24xlarge"]
    found = [b for b in rollout.blockers(prod_base, _doc("prod", config)) if b.what == "elastic group"]
    assert {b.name for b in found} == {"prod-training-spot", "prod-training-on-demand"}
    assert all(b.action == "replaces" and rollout.ELASTIC_NODES_UP in b.reasons for b in found)
    assert not any(b.needs_administrator for b in found)


def test_a_delete_first_floor_replacement_with_a_pathless_node_role_needs_an_administrator(monkeypatch, prod_base):
    from stacks.gitops import role_guard

    with monkeypatch.context() as m:
        m.setattr(role_guard.RoleGuard, "_transform", _without_role_paths)
        before_paths = _doc("prod", stack_config("prod"))
    head = copy.deepcopy(prod_base)
    for label in ("prod-training-guaranteed", "prod-inference-guaranteed"):  # forces a new group of each floor
        _floor_group(head, label)["inputs"]["amiType"] = "AL2023_ARM_64_NVIDIA"
    found = {b.name: b for b in rollout.blockers(before_paths, head) if b.what == "floor"}
    # training's floor targets its ODCR: delete first, and CI may not pass the `/` node role to CreateNodegroup
    training = found["prod-training-guaranteed"]
    assert training.needs_administrator
    [why] = [r for r in training.reasons if r.startswith("delete first with the node role")]
    assert "arn:aws:iam::123456789012:role/prod-cluster-node-role" in why
    # inference's floor has no reservation: created first, so a refused CreateNodegroup deletes nothing
    assert not found["prod-inference-guaranteed"].needs_administrator
    # the same replacement on a stack whose node role has its path is CI's to apply (after the override)
    assert not any(b.needs_administrator for b in rollout.blockers(prod_base, head))
