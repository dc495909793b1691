"""Kubernetes upgrades EKS accepts (issue 35 item 1): every managed node group carries the control plane's version,
so a version change rolls the groups after the control plane and the add-ons; offline/rollout.py refuses a
control-plane step EKS refuses (more than one minor, a group lagging) and maps role references by URN, so a base
previewed by an earlier release (no group versions, role ARNs rendered without paths) shows the real blockers of
each step of the documented path 1.33 -> 1.34 -> 1.35 (docs/capacity.md, "Kubernetes upgrades")."""

from __future__ import annotations

import copy
import re

import pytest

from conftest import run_stack, stack_config, resolved_prices
from gpuloan.render import cost_comment
from offline import diff as cost_diff
from gpuloan import preview
from offline import rollout
from offline import runner as offline_runner


def _config(version: str) -> dict:
    config = stack_config("dev")
    config["gpuloan:cluster"]["kubernetes_version"] = version
    return config


def _doc(version: str) -> dict:
    return preview.preview_document(resolved_prices(), "dev", _config(version))


def _without_role_paths(self, args):
    # The program as it was before every role got an IAM path (stacks/gitops/role_guard.py).
    self.declared_types.add(args.type_)
    return None


def _as_an_earlier_release(doc: dict) -> dict:
    """`doc` as the release before this one previewed it: no node group declared a `version`, and its offline
    runner rendered a role's ARN as any other resource's (`arn:aws:iam:<region>:<account>:role/<id>`, the id the
    logical name plus a short hash), not from the role's path and name as today's runner does."""
    old = copy.deepcopy(doc)
    arns = {}
    for r in old["resources"]:
        if r["type"] == rollout.IAM_ROLE:
            today = offline_runner.TYPE_OUTPUTS[rollout.IAM_ROLE](r["name"], r["inputs"], "")["arn"]
            rid = f"{r['name']}-{offline_runner._short_hash('dev', r['type'], r['name'])}"
            arns[today] = f"arn:aws:iam:us-east-1:{offline_runner.ACCOUNT_ID}:role/{rid}"

    def swap(value):
        if isinstance(value, str):
            return arns.get(value, value)
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    for r in old["resources"]:
        r["inputs"] = swap(r["inputs"])
        if r["type"] == rollout.NODE_GROUP:
            r["inputs"].pop("version", None)
    return old


@pytest.fixture(scope="module")
def earlier_133(monkeypatch_module):
    """dev deployed at 1.33 by an earlier release: roles without paths, groups without `version`."""
    from stacks.gitops import role_guard

    monkeypatch_module.setattr(role_guard.RoleGuard, "_transform", _without_role_paths)
    doc = _doc("1.33")
    monkeypatch_module.undo()
    return _as_an_earlier_release(doc)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def head_134():
    return _doc("1.34")


@pytest.fixture(scope="module")
def head_135():
    return _doc("1.35")


def test_every_managed_node_group_carries_the_control_planes_version(recorded):
    for stack in ("dev", "prod"):
        rec = recorded(stack)
        [cluster] = rec.of_type(rollout.CLUSTER)
        groups = rec.of_type(rollout.NODE_GROUP)
        assert len(groups) >= 3  # the system group, a floor, elastic groups
        assert {g.inputs.get("version") for g in groups} == {cluster.inputs["version"]}, stack


def test_an_existing_cluster_gives_its_groups_the_configured_version():
    # EKS's version of a cluster the stack does not own is not read (no hidden invoke): the config's
    # cluster.kubernetes_version says it, as it already does for the manifests.
    config = stack_config("dev")
    config["gpuloan:cluster"] = {"mode": "existing", "name": "ml-shared", "kubernetes_version": "1.34"}
    groups = run_stack("dev", config).of_type(rollout.NODE_GROUP)
    assert groups and {g.inputs.get("version") for g in groups} == {"1.34"}


def test_groups_roll_after_the_control_plane_and_the_pre_node_add_ons(recorded):
    # Pulumi updates a resource after everything it depends on: the system group after the pre-node add-ons
    # (vpc-cni, kube-proxy, Pod Identity agent), every GPU group after the system group, coredns after it too.
    rec = recorded("dev")
    by_urn = {r.urn: r for r in rec.resources}
    [system] = [g for g in rec.of_type(rollout.NODE_GROUP) if g.name.endswith("-system")]
    addons = {r.inputs["addonName"] for u in system.dependencies for r in [by_urn[u]] if r.type == rollout.ADDON}
    assert addons == {"vpc-cni", "kube-proxy", "eks-pod-identity-agent"}
    for group in rec.of_type(rollout.NODE_GROUP):
        if group is not system:
            assert system.urn in group.dependencies, group.name


def test_the_earlier_release_base_shows_no_false_role_blocker(earlier_133):
    # The same version on both sides: the roles kept their ARNs (path kept from the state), whatever the earlier
    # runner rendered; before the URN mapping this read as "replaces the EKS cluster (roleArn)".
    from stacks.gitops import role_guard

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(role_guard.RoleGuard, "_transform", _without_role_paths)
        same = _doc("1.33")
    head = _doc("1.33")
    assert rollout.blockers(earlier_133, head) == []
    assert rollout.group_changes(earlier_133, head) == []
    assert rollout.blockers(earlier_133, _as_an_earlier_release(same)) == []


def test_step_one_from_an_earlier_release_at_133_is_134_with_every_group_rolled(earlier_133, head_134):
    assert rollout.blockers(earlier_133, head_134) == []
    changes = rollout.group_changes(earlier_133, head_134)
    groups = {r["inputs"]["nodeGroupNamePrefix"] for r in head_134["resources"] if r["type"] == rollout.NODE_GROUP}
    assert len(changes) == len(groups) == 3
    assert all(c.action == "rolls" and "version" in c.reasons for c in changes)
    steps = rollout.upgrade_steps(earlier_133, head_134)
    assert steps[0] == "1. control plane: Kubernetes 1.33 -> 1.34 (UpdateClusterVersion)"
    assert steps[1].startswith("2. add-ons: ") and "kube-proxy v1.33.3-eksbuild.6 -> v1.34.6-eksbuild.2" in steps[1]
    assert steps[2].startswith("3. node groups to 1.34") and "`dev-system`" in steps[2]


def test_a_jump_from_133_to_135_is_refused(earlier_133, head_135):
    found = rollout.blockers(earlier_133, head_135)
    assert [b.sentence() for b in found] == [
        "upgrades the EKS cluster `gpuloan-dev` (Kubernetes 1.33 -> 1.35: EKS updates a cluster one minor version "
        "at a time (apply 1.34 first))"
    ]


def test_step_two_from_134_to_135_is_accepted(head_134, head_135):
    assert rollout.blockers(head_134, head_135) == []
    assert all(c.action == "rolls" for c in rollout.group_changes(head_134, head_135))


def test_a_control_plane_step_while_a_group_lags_is_refused(head_134, head_135):
    lagging = copy.deepcopy(head_134)
    [floor] = [
        r
        for r in lagging["resources"]
        if r["type"] == rollout.NODE_GROUP and r["inputs"]["nodeGroupNamePrefix"] == "dev-research-guaranteed_"
    ]
    floor["inputs"]["version"] = "1.33"
    [blocker] = rollout.blockers(lagging, head_135)
    assert blocker.what == "EKS cluster" and blocker.action == "upgrades"
    assert "node groups lag the control plane (`dev-research-guaranteed` is on 1.33)" in blocker.sentence()


def test_a_head_that_leaves_a_group_behind_is_refused(head_134, head_135):
    behind = copy.deepcopy(head_135)
    [spot] = [
        r
        for r in behind["resources"]
        if r["type"] == rollout.NODE_GROUP and r["inputs"]["nodeGroupNamePrefix"] == "dev-research-spot_"
    ]
    spot["inputs"]["version"] = "1.34"
    [blocker] = rollout.blockers(head_134, behind)
    assert "leaves node groups behind (`dev-research-spot` is on 1.34)" in blocker.sentence()


def test_the_version_check_runs_beside_a_cluster_replacement(head_134):
    head = _doc("1.35")  # a fresh copy
    [cluster] = [r for r in head["resources"] if r["type"] == rollout.CLUSTER]
    cluster["inputs"]["version"] = "1.36"
    cluster["inputs"]["bootstrapSelfManagedAddons"] = True  # forces a new cluster
    sentences = [b.sentence() for b in rollout.blockers(head_134, head)]
    assert any("replaces the EKS cluster" in s for s in sentences)
    assert any("one minor version at a time (apply 1.35 first)" in s for s in sentences)


def test_cost_diff_shows_each_steps_blockers_and_order(earlier_133, head_134, head_135):
    def rendered(base, head):
        d = cost_diff.diff_stack("dev", cost_diff.Side(doc=base), cost_diff.Side(doc=head))
        return cost_comment.render_markdown([d], "base"), cost_comment.render_table([d], "base")

    jump_md, jump_table = rendered(earlier_133, head_135)
    assert "> ⛔ **Blocker**: this change upgrades the EKS cluster `gpuloan-dev` (Kubernetes 1.33 -> 1.35" in jump_md
    assert "BLOCKER dev: this change upgrades the EKS cluster `gpuloan-dev`" in jump_table
    step_md, step_table = rendered(earlier_133, head_134)
    assert "Blocker" not in step_md and "BLOCKER" not in step_table
    order = [step_md.index(s) for s in ("1. control plane", "2. add-ons", "3. node groups")]
    assert order == sorted(order)
    assert "upgrade 1. control plane: Kubernetes 1.33 -> 1.34" in step_table
    steps = step_table[step_table.index("  upgrade 1.") : step_table.index("  node group:")].splitlines()
    assert len(steps) > 3 and all(len(line) <= 80 for line in steps)  # the add-on step folds
    last_md, _ = rendered(head_134, head_135)
    assert "Blocker" not in last_md and "Kubernetes 1.34 -> 1.35" in last_md


def test_the_shipped_stacks_are_on_one_version_with_pinned_add_ons():
    # One minor per commit is what the deploy gate enforces (the base is the commit before); the shipped stacks
    # themselves must be on a version with pins for every step down to the oldest supported one.
    from config import versions

    for stack in ("dev", "prod"):
        version = stack_config(stack)["gpuloan:cluster"]["kubernetes_version"]
        major, minor = (int(p) for p in version.split("."))
        for step in range(33, minor + 1):
            assert f"{major}.{step}" in versions.EKS_ADDON_VERSIONS, (stack, step)
        assert re.fullmatch(r"1\.\d+", version)


def test_a_version_change_of_an_active_capacity_block_floor_is_staged():
    # EKS upgrades a Capacity Block group only at desired 0 (docs/floor.md, "Rolls"): the version roll of an active
    # block is a blocker until capacity_block_active: false holds it at 0.
    from test_rollout import _block_config

    def block(version: str, active: bool) -> dict:
        config = _block_config(active=active)
        config["gpuloan:cluster"]["kubernetes_version"] = version
        return preview.preview_document(resolved_prices(), "dev", config)

    [floor] = [b for b in rollout.blockers(block("1.34", True), block("1.35", True)) if b.what == "floor"]
    assert floor.action == "rolls" and "version" in floor.reasons and rollout.CAPACITY_BLOCK_STAGED in floor.reasons
    assert [b for b in rollout.blockers(block("1.34", False), block("1.35", False)) if b.what == "floor"] == []


def _addon_version(pin: str) -> tuple[int, int, int, int]:
    # EKS add-on versions read vMAJOR.MINOR.PATCH-eksbuild.N (DescribeAddonVersions; config/versions.py).
    match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-eksbuild\.(\d+)", pin)
    assert match, pin
    major, minor, patch, build = (int(g) for g in match.groups())
    return major, minor, patch, build


def test_add_on_pins_never_go_back_on_the_upgrade_path_and_the_cni_moves_one_minor_per_step():
    # The staged path applies each minor's pins in turn (UpdateAddon after UpdateClusterVersion): a pin lower than the
    # previous minor's asks EKS to downgrade a running add-on, and AWS asks the VPC CNI to move one minor version at a
    # time (docs/aws-rules.md, "EKS managed add-ons per version"). kube-proxy follows the control plane's minor.
    from config import versions

    minors = sorted(versions.EKS_ADDON_VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))
    for old, new in zip(minors, minors[1:]):
        assert tuple(int(p) for p in new.split("."))[1] == tuple(int(p) for p in old.split("."))[1] + 1, (old, new)
        before, after = versions.EKS_ADDON_VERSIONS[old], versions.EKS_ADDON_VERSIONS[new]
        assert set(before) == set(after), (old, new)
        for addon in after:
            assert _addon_version(after[addon]) >= _addon_version(before[addon]), (addon, old, new)
        cni_before, cni_after = _addon_version(before["vpc-cni"]), _addon_version(after["vpc-cni"])
        assert cni_after[0] == cni_before[0] and cni_after[1] - cni_before[1] <= 1, (old, new)
    for minor in minors:
        kube_proxy = _addon_version(versions.EKS_ADDON_VERSIONS[minor]["kube-proxy"])
        assert f"{kube_proxy[0]}.{kube_proxy[1]}" == minor
