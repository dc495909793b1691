"""Kueue from the config (issue 19): objects schema-valid against the pinned CRDs, quotas derived from the pools,
flavors matching the node groups, tier/capacity rules, and agreement with the policy function and the budget cap."""

from __future__ import annotations

import copy
import functools
import re

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from conftest import REPO, requires_shared_kueue_crds, requires_shared_prices, run_stack, stack_config, resolved_prices
from kube_checks import KUEUE_CRDS, kube_objects, layer, release, run_layer, validate_kueue
from policy_cases import NOW, spend

from policy import pods as policy_pods
from policy.decide import decide
from policy.model import Group, Observation, PoolObservation
from policy.terms import Reason
from pricing import checks
from config import config, scheduling, tags, tenancy, versions
from pricing import policy_settings
from stacks.kubernetes import kueue
from config.config import ConfigError, Tier

STACKS = ("dev", "prod")
KUEUE_KINDS = ("WorkloadPriorityClass", "Cohort", "ResourceFlavor", "ClusterQueue", "LocalQueue")
needs_crds = requires_shared_kueue_crds


def _cfg(stack: str, **sections) -> config.GpuLoanConfig:
    data = stack_config(stack)
    for key, value in sections.items():
        data[f"gpuloan:{key}"] = value
    return checks.from_stack_yaml({"config": data}, f"Pulumi.{stack}.yaml", prices=resolved_prices())


def _problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    return err.value.problems


def _kueue_objects(rec, kind=None):
    objs = [o for o in kube_objects(rec) if o["apiVersion"].startswith("kueue.x-k8s.io/")]
    return [o for o in objs if kind is None or o["kind"] == kind]


def _cq(cfg, pool_name):
    [q] = [q for q in scheduling.plan(cfg).queues if q.pool == pool_name]
    return kueue.cluster_queue_manifest(cfg, q)


def _quotas(cq) -> dict[str, dict]:
    [group] = cq["spec"]["resourceGroups"]
    return {f["name"]: f["resources"][0] for f in group["flavors"]}


# --- dev and prod plans contain every Kueue object, schema-valid ------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_plan_contains_release_and_every_kueue_kind(stack):
    rec = layer(stack)
    cfg = _cfg(stack)
    kueue_release = release(rec, "kueue")
    assert kueue_release.inputs["chart"] == versions.KUEUE_CHART
    kinds = [o["kind"] for o in _kueue_objects(rec)]
    assert {k: kinds.count(k) for k in KUEUE_KINDS} == {
        "WorkloadPriorityClass": 3,
        "Cohort": 1,
        "ResourceFlavor": sum(len(scheduling.pool_flavors(cfg, p)) for p in cfg.pools),
        "ClusterQueue": len(cfg.pools),
        "LocalQueue": len(cfg.pools),
    }
    assert rec.outputs["kueue_local_queues"] == {p.name: f"{p.team}/{p.name}" for p in cfg.pools}


@needs_crds
@pytest.mark.parametrize("stack", STACKS)
def test_every_kueue_object_validates_against_the_pinned_crds(stack):
    objects = _kueue_objects(layer(stack))
    assert objects
    for obj in objects:
        assert obj["apiVersion"] == versions.KUEUE_API_VERSION
        validate_kueue(obj)


@needs_crds
@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda cq: cq["spec"].update(cohort="x"), "Additional properties"),  # the v1beta1 name, gone in v1beta2
        (lambda cq: cq["spec"]["preemption"].update(reclaimWithinCohort="Always"), "is not one of"),
        (lambda cq: cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota="lots"), "lots"),
        (lambda cq: cq["spec"].pop("cohortName"), "must be nil when cohort is empty"),
        (
            lambda cq: cq["spec"]["resourceGroups"][0].update(coveredResources=["nvidia.com/gpu", "cpu"]),
            "same number of resources",
        ),
    ],
)
def test_crd_validation_can_fail(mutate, message):
    cfg = _cfg("dev", scheduling={"kueue": {"teams": {"research": {"lending_limit_pct": 50}}}})
    cq = copy.deepcopy(_cq(cfg, "research"))
    validate_kueue(cq)
    mutate(cq)
    with pytest.raises(jsonschema.ValidationError, match=message):
        validate_kueue(cq)


def test_kueue_objects_are_created_after_the_release_and_queues_after_flavors():
    rec = layer("prod")
    by_urn = {r.urn: r for r in rec.resources}
    release_urn = release(rec, "kueue").urn
    for r in rec.resources:
        if r.type.startswith("kubernetes:kueue.x-k8s.io/"):
            assert release_urn in r.dependencies, f"{r.name} does not wait for the Kueue release (CRDs, webhook)"
    for r in rec.resources:
        if r.type.endswith(":ClusterQueue"):
            kinds = {by_urn[d].type.rsplit(":", 1)[-1] for d in r.dependencies}
            assert {"ResourceFlavor", "Cohort"} <= kinds
        if r.type.endswith(":LocalQueue"):
            kinds = {by_urn[d].type.rsplit(":", 1)[-1] for d in r.dependencies}
            assert {"ClusterQueue", "Namespace"} <= kinds


# --- release --------------------------------------------------------------------------------------------------


def test_release_is_the_pinned_oci_chart_and_the_version_is_overridable():
    r = release(layer("prod"), "kueue")
    assert (r.inputs["chart"], r.inputs["version"]) == ("oci://registry.k8s.io/kueue/charts/kueue", "0.19.2")
    assert r.inputs["namespace"] == kueue.NAMESPACE
    cfg = stack_config("dev")
    cfg["gpuloan:scheduling"] = {"kueue": {"chart_version": "0.20.0"}}
    assert release(run_layer("dev", cfg), "kueue").inputs["version"] == "0.20.0"


def test_controller_runs_on_the_system_nodes_of_a_new_cluster_only():
    values = release(layer("prod"), "kueue").inputs["values"]
    assert values["controllerManager"]["nodeSelector"] == {tags.LABEL_TIER: "system"}
    existing = kueue.helm_values(_cfg("dev", cluster={"mode": "existing", "name": "ml-shared"}))
    assert "controllerManager" not in existing  # no gpuloan system nodes to select there


def test_manager_config_counts_gpus_only_and_manages_queued_jobs_in_team_namespaces():
    values = release(layer("prod"), "kueue").inputs["values"]
    conf = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert conf["apiVersion"] == versions.KUEUE_CONFIG_API_VERSION and conf["kind"] == "Configuration"
    excluded = conf["resources"]["excludeResourcePrefixes"]
    assert {"cpu", "memory"} <= set(excluded)
    assert not any(scheduling.GPU_RESOURCE.startswith(prefix) for prefix in excluded)
    assert conf["manageJobsWithoutQueueName"] is False
    assert conf["managedJobsNamespaceSelector"] == {
        "matchExpressions": [{"key": tags.LABEL_TEAM, "operator": "Exists"}]
    }
    assert {"batch/job", "pod", "deployment"} <= set(conf["integrations"]["frameworks"])


def test_kueue_off_declares_nothing_and_quota_is_the_physical_pools():
    data = stack_config("prod")
    data["gpuloan:scheduling"] = {"kueue": {"enabled": False}}
    rec = run_layer("prod", data)
    assert [r.inputs["chart"] for r in rec.resources if r.type == "kubernetes:helm.sh/v3:Release"] == ["gpu-operator"]
    assert _kueue_objects(rec) == []
    assert "kueue_local_queues" not in rec.outputs
    # Without Kueue there is no borrowing: the team quota is its own pools' GPUs again.
    off = _two_experiment_teams(enabled=False)
    assert tenancy.team_gpu_quota(off, "research") == 3 + 4
    assert tenancy.team_gpu_quota(_two_experiment_teams(), "research") == 3 + 4 + 2


# --- quotas are derived from config ----------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 3])
def test_changing_the_floor_moves_the_nominal_quota(nodes):
    data = stack_config("dev")
    data["gpuloan:pools"][0]["guaranteed"]["nodes"] = nodes
    cqs = _kueue_objects(run_layer("dev", data), "ClusterQueue")
    [cq] = cqs
    assert _quotas(cq)["gpuloan-dev-research-floor"]["nominalQuota"] == nodes  # g6.xlarge: 1 GPU each


def test_prod_quotas_hand_computed():
    # training: 2 p4d floor (8 GPUs each) = 16, spot max 6 x 8 = 48; inference: 2 + 8 g6e.xlarge (1 GPU each).
    cfg = _cfg("prod")
    assert {k: v["nominalQuota"] for k, v in _quotas(_cq(cfg, "training")).items()} == {
        "gpuloan-prod-training-floor": 16,
        "gpuloan-prod-training-spot": 48,
    }
    assert {k: v["nominalQuota"] for k, v in _quotas(_cq(cfg, "inference")).items()} == {
        "gpuloan-prod-inference-floor": 2,
        "gpuloan-prod-inference-spot": 8,
    }


def test_time_slicing_counts_quota_in_device_plugin_units():
    cfg = _cfg("dev", gpu_operator={"time_slicing_replicas": 4})
    assert {k: v["nominalQuota"] for k, v in _quotas(_cq(cfg, "research")).items()} == {
        "gpuloan-dev-research-floor": 4,
        "gpuloan-dev-research-spot": 16,
    }


def test_capacity_block_floor_has_quota_only_inside_its_window_or_while_held():
    import datetime as dt

    today = dt.datetime.now(dt.timezone.utc).replace(hour=11, minute=30, second=0, microsecond=0)

    def iso(days: int) -> str:
        return (today + dt.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")

    data = stack_config("prod")
    # A Capacity Block is paid as one (prod's floor is otherwise paid reserved_1yr). It starts in 10 days.
    data["gpuloan:pools"][0]["guaranteed"].update(
        reservation="capacity_block",
        reservation_id="cr-0123456789abcdef0",
        payment="capacity_block",
        capacity_block_start=iso(10),
        capacity_block_end=iso(17),
    )
    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    assert _quotas(_cq(cfg, "training"))["gpuloan-prod-training-floor"]["nominalQuota"] == 0
    data["gpuloan:pools"][0]["guaranteed"].update(capacity_block_start=iso(-1), capacity_block_end=iso(6))
    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    assert _quotas(_cq(cfg, "training"))["gpuloan-prod-training-floor"]["nominalQuota"] == 16
    data["gpuloan:pools"][0]["guaranteed"]["capacity_block_active"] = False  # held at 0 for a roll
    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    assert _quotas(_cq(cfg, "training"))["gpuloan-prod-training-floor"]["nominalQuota"] == 0


def test_a_future_capacity_block_counts_in_the_team_quota_so_admitted_pods_are_not_refused():
    """Issue 35 item 3: a 2 x p5.48xlarge block that opens after `pulumi up`, beside 8 elastic p5 nodes. The policy
    raises the block flavor's nominalQuota to 16 inside the window without a `pulumi up`, so Kueue may then admit
    80 GPUs for the pool; the namespace quota computed at `pulumi up` (before the window) must already allow them."""
    import datetime as dt

    today = dt.datetime.now(dt.timezone.utc).replace(hour=11, minute=30, second=0, microsecond=0)

    def iso(days: int) -> str:
        return (today + dt.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def with_block(start: int, end: int):
        data = stack_config("prod")
        training = data["gpuloan:pools"][0]
        training["guaranteed"].update(
            instance_type="p5.48xlarge",
            reservation="capacity_block",
            reservation_id="cr-0123456789abcdef0",
            payment="capacity_block",
            capacity_block_start=iso(start),
            capacity_block_end=iso(end),
        )
        training["elastic"] = {
            **training["elastic"],
            "instance_types": ["p5.48xlarge"],
            "capacity": "on_demand",
            "max_nodes": 8,
        }
        training["elastic"].pop("on_demand_max_nodes", None)
        training["budget"]["monthly_usd"] = 400000  # a block of p5s costs more than prod's p4d budget
        data["gpuloan:budget"] = {**data.get("gpuloan:budget", {}), "monthly_usd": 500000}
        return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())

    future, open_now = with_block(10, 17), with_block(-1, 6)
    assert _quotas(_cq(future, "training"))["gpuloan-prod-training-floor"]["nominalQuota"] == 0
    inside = {k: v["nominalQuota"] for k, v in _quotas(_cq(open_now, "training")).items()}
    assert inside == {"gpuloan-prod-training-floor": 16, "gpuloan-prod-training-on-demand": 64}
    [queue] = [q for q in scheduling.plan(future).queues if q.pool == "training"]
    assert scheduling.queue_reach_gpus(future, queue) == 80 == sum(inside.values())
    # The namespace quota set at `pulumi up` before the window is the one in force inside it.
    assert tenancy.team_gpu_quota(future, "research") == tenancy.team_gpu_quota(open_now, "research")
    assert tenancy.team_gpu_quota(future, "research") >= 80


def _variants():
    """Configs covering every tier x elastic capacity the rules accept."""
    out = [("dev", _cfg("dev")), ("prod", _cfg("prod"))]
    for capacity in ("spot", "on_demand", "spot_then_on_demand"):
        for tier in ("production", "experiment", "learning"):
            data = stack_config("prod")
            for pool in data["gpuloan:pools"]:
                pool["tier"], pool["elastic"]["capacity"] = tier, capacity
                pool["elastic"].pop("on_demand_max_nodes", None)
            data["gpuloan:scheduling"] = {
                "kueue": {
                    "production_spot_pools": []
                    if capacity == "on_demand" or tier != "production"
                    else [p["name"] for p in data["gpuloan:pools"]]
                }
            }
            out.append(
                (f"{tier}-{capacity}", checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices()))
            )
    return out


VARIANTS = _variants()


@pytest.mark.parametrize("name,cfg", VARIANTS, ids=[n for n, _ in VARIANTS])
def test_quota_never_exceeds_what_the_node_groups_can_reach(name, cfg):
    for pool in cfg.pools:
        per_node = scheduling.gpus_per_node(cfg, pool)
        for flavor in scheduling.pool_flavors(cfg, pool):
            if flavor.kind == scheduling.FLOOR:
                assert flavor.gpus == pool.guaranteed.nodes * per_node
            else:
                # the policy sizes spot up to max_nodes (on-demand only replaces missing spot), on-demand-only
                # groups up to max_nodes: the quota is exactly that, never more
                assert flavor.gpus == pool.elastic.max_nodes * per_node
        queue = scheduling.pool_queue(cfg, pool)
        own = sum(e.nominal_gpus for e in queue.flavors)
        assert own == sum(f.gpus for f in scheduling.pool_flavors(cfg, pool))


# --- flavors match the node groups ------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_each_flavor_selects_node_groups_of_its_pool_and_tolerates_their_taints(recorded, stack):
    rec = recorded(stack)
    groups = [
        r for r in rec.of_type("aws:eks/nodeGroup:NodeGroup") if tags.LABEL_POOL in (r.inputs.get("labels") or {})
    ]
    flavors = _kueue_objects(rec, "ResourceFlavor")
    assert flavors
    covered = set()
    for f in flavors:
        labels = f["spec"]["nodeLabels"]
        matched = [g for g in groups if labels.items() <= g.inputs["labels"].items()]
        assert matched, f"{f['metadata']['name']} selects no node group"
        tolerated = {(t["key"], t["effect"]) for t in f["spec"]["tolerations"]}
        for g in matched:
            assert g.inputs["labels"][tags.LABEL_POOL] == labels[tags.LABEL_POOL]
            for taint in g.inputs.get("taints") or []:
                assert (taint["key"], "NoSchedule") in tolerated, (f["metadata"]["name"], taint)
            covered.add(g.inputs["nodeGroupNamePrefix"])
    # Every GPU node group is reachable through some flavor (quota and capacity cannot disagree by omission).
    assert covered == {g.inputs["nodeGroupNamePrefix"] for g in groups}


def test_production_flavor_order_without_spot_is_floor_then_on_demand():
    data = stack_config("prod")
    data["gpuloan:pools"][1]["elastic"]["capacity"] = "on_demand"
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": ["training"]}}
    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    cq = _cq(cfg, "inference")
    assert list(_quotas(cq)) == ["gpuloan-prod-inference-floor", "gpuloan-prod-inference-on-demand"]
    [od] = [f for f in scheduling.pool_flavors(cfg, cfg.pool("inference")) if f.kind == scheduling.ON_DEMAND]
    assert tags.SPOT_TAINT_KEY not in {t["key"] for t in od.tolerations}
    assert od.node_labels[tags.LABEL_CAPACITY] == "on-demand"
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"  # production preempts lower tiers


def _two_experiment_teams(**sharing):
    """prod with both pools on 1-GPU nodes (so floors can be lent), training moved to tier experiment."""
    data = stack_config("prod")
    data["gpuloan:pools"] = data["gpuloan:pools"][:2]  # training and inference: one pool per team
    training = data["gpuloan:pools"][0]
    training.update(tier="experiment", budget=None)
    training["guaranteed"] = {"instance_type": "g6e.xlarge", "nodes": 3}
    training["elastic"].update(instance_types=["g6e.xlarge"], max_nodes=4)
    data["gpuloan:pools"][0] = {k: v for k, v in training.items() if v is not None}
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": ["inference"], **sharing}}
    return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


def test_experiment_order_is_floor_then_borrowed_floors_then_spot():
    cfg = _two_experiment_teams()
    quotas = _quotas(_cq(cfg, "training"))
    assert list(quotas) == ["gpuloan-prod-training-floor", "gpuloan-prod-inference-floor", "gpuloan-prod-training-spot"]
    assert quotas["gpuloan-prod-inference-floor"]["nominalQuota"] == 0  # borrowed, never owned
    # production (inference) lends its floor but borrows nothing
    assert list(_quotas(_cq(cfg, "inference"))) == ["gpuloan-prod-inference-floor", "gpuloan-prod-inference-spot"]


def test_floors_with_other_gpus_per_node_are_not_borrowed():
    data = stack_config("prod")
    data["gpuloan:pools"][0]["tier"] = "experiment"  # 8-GPU p4d pool; inference floor is 1-GPU g6e
    data["gpuloan:scheduling"]["kueue"]["production_spot_pools"] = ["inference"]
    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    assert "gpuloan-prod-inference-floor" not in _quotas(_cq(cfg, "training"))


# --- cohort, reclaim, lending and borrowing ------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_one_cohort_per_environment_and_owners_reclaim_lent_quota(stack):
    rec = layer(stack)
    [cohort] = _kueue_objects(rec, "Cohort")
    assert cohort["metadata"]["name"] == f"gpuloan-{stack}"
    for cq in _kueue_objects(rec, "ClusterQueue"):
        spec = cq["spec"]
        assert spec["cohortName"] == cohort["metadata"]["name"]
        assert spec["preemption"]["reclaimWithinCohort"] == "Any"
        assert spec["preemption"]["borrowWithinCohort"] == {"policy": "Never"}
        # The owner takes its lent floor back rather than moving on to elastic nodes it would pay for.
        assert spec["flavorFungibility"]["whenCanPreempt"] == "MayStopSearch"


def test_elastic_quota_is_never_lent():
    for _, cfg in VARIANTS:
        for q in scheduling.plan(cfg).queues:
            for entry in q.flavors:
                if not entry.flavor.endswith("-floor"):
                    assert entry.lending_limit_gpus == 0, entry


def test_lending_and_borrowing_limits_come_from_config():
    cfg = _two_experiment_teams(teams={"serving": {"lending_limit_pct": 50}, "research": {"borrowing_limit_gpus": 1}})
    inference = _quotas(_cq(cfg, "inference"))["gpuloan-prod-inference-floor"]
    assert (inference["nominalQuota"], inference["lendingLimit"]) == (2, 1)
    borrowed = _quotas(_cq(cfg, "training"))["gpuloan-prod-inference-floor"]
    assert borrowed == {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 1}
    # defaults: all of an idle floor may be lent, no borrowing limit
    default = _two_experiment_teams()
    assert "lendingLimit" not in _quotas(_cq(default, "inference"))["gpuloan-prod-inference-floor"]
    assert "borrowingLimit" not in _quotas(_cq(default, "training"))["gpuloan-prod-inference-floor"]


def test_a_team_that_lends_nothing_is_not_listed_as_a_lender():
    cfg = _two_experiment_teams(teams={"serving": {"lending_limit_pct": 0}})
    assert "gpuloan-prod-inference-floor" not in _quotas(_cq(cfg, "training"))


def test_team_resource_quota_is_what_kueue_can_admit_including_borrowed_floors():
    cfg = _two_experiment_teams(teams={"research": {"borrowing_limit_gpus": 1}})
    # research: own floor 3 + own spot 4 + at most 1 borrowed from serving's floor
    assert tenancy.team_gpu_quota(cfg, "research") == 3 + 4 + 1
    assert tenancy.team_gpu_quota(cfg, "serving") == 2 + 8
    off = _two_experiment_teams()
    assert tenancy.team_gpu_quota(off, "research") == 3 + 4 + 2  # no limit: all of serving's idle floor


# --- local queues and priority classes ---------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_local_queue_per_pool_in_its_team_namespace_and_only_that_team_may_submit(stack):
    cfg = _cfg(stack)
    rec = layer(stack)
    lqs = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
        for o in _kueue_objects(rec, "LocalQueue")
    }
    assert lqs == {(p.team, p.name): f"gpuloan-{stack}-{p.name}" for p in cfg.pools}
    namespaces = {o["metadata"]["name"]: o["metadata"]["labels"] for o in kube_objects(rec) if o["kind"] == "Namespace"}
    for cq in _kueue_objects(rec, "ClusterQueue"):
        team = cq["metadata"]["labels"][tags.LABEL_TEAM]
        selector = cq["spec"]["namespaceSelector"]["matchLabels"]
        assert selector.items() <= namespaces[team].items()
        assert [ns for ns, labels in namespaces.items() if selector.items() <= labels.items()] == [team]


def test_workload_priority_classes_match_the_priority_classes():
    rec = layer("prod")
    pcs = {o["metadata"]["name"]: o["value"] for o in kube_objects(rec) if o["kind"] == "PriorityClass"}
    wpcs = {o["metadata"]["name"]: o["value"] for o in _kueue_objects(rec, "WorkloadPriorityClass")}
    assert wpcs == pcs == {tenancy.priority_class_name(t): tenancy.PRIORITY_VALUES[t] for t in Tier}


# --- config rules: tiers and capacity must satisfy each other ------------------------------------------------------


def test_production_pool_with_spot_only_elastic_and_no_floor_is_an_error_with_its_path():
    data = stack_config("prod")
    pool = data["gpuloan:pools"][1]
    del pool["guaranteed"]
    pool["elastic"]["capacity"] = "spot"
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": ["training"]}}
    problems = _problems(data)
    [(path, msg)] = [p for p in problems if "Kueue" in p[1]]
    assert path == "pools[1].elastic.capacity"
    assert "no floor" in msg and "production_spot_pools" in msg


@pytest.mark.parametrize("capacity", ["spot", "spot_then_on_demand"])
def test_production_pool_with_spot_it_may_not_use_is_an_error_until_listed(capacity):
    data = stack_config("prod")
    data["gpuloan:pools"][1]["elastic"]["capacity"] = capacity
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": ["training"]}}
    assert "pools[1].elastic.capacity" in {p for p, _ in _problems(data)}
    data["gpuloan:scheduling"]["kueue"]["production_spot_pools"].append("inference")
    checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())  # listing it is the explicit permission


def test_a_batch_production_pool_with_spot_then_on_demand_gets_its_on_demand_group_as_flavor():
    """Issue 27 follow-up: pending pods that may not run on spot are their own scale-up signal (policy/off_spot.py),
    so a production batch pool's work kept off spot no longer waits behind spot nodes it cannot use: the config
    is valid, and its queue's elastic flavor is the on-demand group (pinned capacity=on-demand, no spot
    toleration, quota = the on-demand group's max)."""
    data = stack_config("prod")
    inference = data["gpuloan:pools"][1]
    inference["elastic"].update(workload="batch", on_demand_max_nodes=3)
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": ["training"]}}
    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    pool = cfg.pool("inference")
    [od] = [f for f in scheduling.pool_flavors(cfg, pool) if f.kind != scheduling.FLOOR]
    assert od.kind == scheduling.ON_DEMAND and od.node_labels[tags.LABEL_CAPACITY] == "on-demand"
    assert tags.SPOT_TAINT_KEY not in {t["key"] for t in od.tolerations}
    assert od.gpus == 3 * scheduling.gpus_per_node(cfg, pool)
    assert list(_quotas(_cq(cfg, "inference"))) == ["gpuloan-prod-inference-floor", "gpuloan-prod-inference-on-demand"]


@pytest.mark.parametrize(
    "knob, fragment",
    [({"workload": "service"}, "utilization scale-up"), ({"workload": "batch", "warm_up": True}, "warm_up")],
)
def test_production_pool_whose_rules_add_spot_before_pods_are_pending_stays_an_error(knob, fragment):
    data = stack_config("prod")
    data["gpuloan:pools"][1]["elastic"].update(knob)
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": ["training"]}}
    [msg] = [m for p, m in _problems(data) if p == "pools[1].elastic.capacity"]
    assert fragment in msg and "production_spot_pools" in msg


def test_the_rule_is_off_with_kueue_off():
    data = stack_config("prod")
    data["gpuloan:scheduling"] = {"kueue": {"enabled": False}}
    checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


@pytest.mark.parametrize(
    "entry,fragment",
    [
        ("nope", "no pool named 'nope'"),
        ("serving", "no pool named"),  # a team's name, not a pool's
    ],
)
def test_production_spot_pools_must_name_pools(entry, fragment):
    data = stack_config("prod")
    data["gpuloan:scheduling"]["kueue"]["production_spot_pools"].append(entry)
    assert any(p == "scheduling.kueue.production_spot_pools[2]" and fragment in m for p, m in _problems(data))


def test_production_spot_pools_may_list_pools_that_need_no_permission():
    # A tier or capacity change of the pool alone must not break the config: the entry then allows nothing.
    data = stack_config("dev")  # research is tier experiment
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": ["research"]}}
    checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    data = stack_config("prod")
    data["gpuloan:pools"][1]["elastic"]["capacity"] = "on_demand"
    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    assert [f.kind for f in scheduling.pool_flavors(cfg, cfg.pool("inference"))] == ["floor", "on-demand"]


def test_team_limits_must_name_a_team():
    data = stack_config("prod")
    data["gpuloan:scheduling"]["kueue"]["teams"] = {"reserch": {"lending_limit_pct": 10}}
    assert [p for p, _ in _problems(data)] == ["scheduling.kueue.teams.reserch"]


def test_team_limits_are_range_checked():
    data = stack_config("prod")
    data["gpuloan:scheduling"]["kueue"]["teams"] = {"research": {"lending_limit_pct": 150}}
    assert [p for p, _ in _problems(data)] == ["scheduling.kueue.teams.research.lending_limit_pct"]


# --- the policy function and the budget cap ------------------------------------------------------------------------


def test_not_admitted_work_is_invisible_to_the_policy():
    # A Job Kueue has not admitted is suspended: no pods at all. Pod-based kinds (Deployment) wait behind Kueue's
    # scheduling gate: not demand for a node.
    gated = {
        "spec": {
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
        },
    }
    assert policy_pods.unschedulable(gated) is False


def test_admitted_pods_count_for_the_pool_their_flavor_pins_them_to():
    cfg = _cfg("prod")
    [spot] = [f for f in scheduling.pool_flavors(cfg, cfg.pool("training")) if f.kind == scheduling.SPOT]
    # Kueue merges the flavor's nodeLabels into the pod's nodeSelector when it admits the workload.
    pod = {
        "spec": {
            "nodeSelector": dict(spot.node_labels),
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        }
    }
    assert policy_pods.pod_pools(pod) == {"training"}
    assert policy_pods.pod_gpus(pod) == 8


def _dev_settings(cfg):
    names = {"research": {"spot": "dev-research-spot", "guaranteed": "dev-research-guaranteed"}}
    return policy_settings.settings_for(resolved_prices(), cfg, "gpuloan-dev", names)


def _pool_observation(pending, spent):
    groups = (Group("dev-research-spot", 0, 0, 0, "ACTIVE", None, False),)
    return Observation((PoolObservation("research", groups, (), pending, None),), spent)


@requires_shared_prices
def test_kueue_quota_never_asks_the_policy_for_more_than_the_group_max():
    cfg = _cfg("dev")
    quota = _quotas(_cq(cfg, "research"))["gpuloan-dev-research-spot"]["nominalQuota"]
    # The floor is busy; Kueue admits one 1-GPU pod per unit of spot quota, and they are pending.
    plan = decide(_dev_settings(cfg), _pool_observation((1,) * quota, spend(0.0)), NOW)
    [change] = plan.changes
    assert (change.group, change.desired_to) == ("dev-research-spot", quota)
    assert Reason.AT_MAX not in plan.decision("research").reasons


@requires_shared_prices
def test_budget_cap_wins_over_kueue_quota_admitted_pods_wait():
    cfg = _cfg("dev")
    quota = _quotas(_cq(cfg, "research"))["gpuloan-dev-research-spot"]["nominalQuota"]
    near_cap = spend(cfg.budget.monthly_usd * 0.999)
    plan = decide(_dev_settings(cfg), _pool_observation((1,) * quota, near_cap), NOW)
    assert Reason.BUDGET_CAP in plan.decision("research").reasons
    assert sum(c.desired_to - c.desired_from for c in plan.changes) < quota


# --- the workload examples are admitted by queue name --------------------------------------------------------------

WORKLOADS = sorted((REPO / "docs" / "workloads").glob("*.yaml"))


@functools.cache
def _prod_plan():
    cfg = _cfg("prod")
    return cfg, {
        kueue.local_queue_manifest(q)["metadata"]["namespace"] + "/" + q.local_queue: q
        for q in scheduling.plan(cfg).queues
    }


def _workload_objects():
    for path in WORKLOADS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Job", "Deployment"):
                yield path.name, doc


@pytest.mark.parametrize("name,obj", list(_workload_objects()), ids=[n for n, _ in _workload_objects()])
def test_workload_examples_are_admitted_by_queue_name(name, obj):
    cfg, queues = _prod_plan()
    queue_name = obj["metadata"]["labels"][kueue.QUEUE_NAME_LABEL]
    queue = queues.get(f"{obj['metadata']['namespace']}/{queue_name}")
    assert queue is not None, f"{name}: no LocalQueue {queue_name} in namespace {obj['metadata']['namespace']}"
    assert queue.team == obj["metadata"]["namespace"]
    spec = obj["spec"]["template"]["spec"]
    selector = spec.get("nodeSelector") or {}
    flavors = {f.name: f for f in scheduling.plan(cfg).flavors}
    # Kueue only assigns a flavor whose node labels do not contradict the pod's own node selector.
    fitting = [
        e for e in queue.flavors if all(selector.get(k, v) == v for k, v in flavors[e.flavor].node_labels.items())
    ]
    assert fitting, f"{name}: its nodeSelector {selector} matches no flavor of queue {queue.name}"
    per_pod = sum(int(c["resources"]["limits"].get("nvidia.com/gpu", 0)) for c in spec["containers"])
    pods = obj["spec"].get("parallelism", 1) if obj["kind"] == "Job" else 1  # a Deployment is admitted per pod
    assert any(e.nominal_gpus >= per_pod * pods for e in fitting), f"{name}: no fitting flavor has the quota"
    if kueue.PRIORITY_CLASS_LABEL in obj["metadata"]["labels"]:
        assert obj["metadata"]["labels"][kueue.PRIORITY_CLASS_LABEL] == spec["priorityClassName"]


def test_full_program_plans_kueue_for_both_stacks(recorded):
    for stack in STACKS:
        rec = recorded(stack)
        assert len(rec.of_type("gpuloan:kueue:Kueue")) == 1
        assert {o["kind"] for o in _kueue_objects(rec)} == set(KUEUE_KINDS)


def test_existing_cluster_mode_still_generates_the_queues():
    data = stack_config("dev")
    data["gpuloan:cluster"] = {"mode": "existing", "name": "ml-shared", "kubernetes_version": "1.33"}
    rec = run_stack("dev", data)
    assert {o["kind"] for o in _kueue_objects(rec)} == set(KUEUE_KINDS)
    assert "controllerManager" not in release(rec, "kueue").inputs["values"]


# --- invariants over generated configs (hypothesis) ----------------------------------------------------------------


_TYPES = {1: ["g6e.xlarge", "g6.xlarge"], 8: ["p4d.24xlarge", "p5.48xlarge"]}


@st.composite
def _configs(draw):
    data = stack_config("dev")
    data["gpuloan:budget"]["monthly_usd"] = 5_000_000  # floors of up to 12 p5 nodes fit
    pools, spot_ok = [], []
    for i in range(draw(st.integers(1, 4))):
        gpus = draw(st.sampled_from(sorted(_TYPES)))
        pool = {
            "name": f"p{i}",
            "team": draw(st.sampled_from(["alpha", "beta"])),
            "tier": draw(st.sampled_from(["production", "experiment", "learning"])),
        }
        has_floor, has_elastic = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
        if has_floor:
            pool["guaranteed"] = {"instance_type": _TYPES[gpus][0], "nodes": draw(st.integers(1, 3))}
        if has_elastic:
            capacity = draw(st.sampled_from(["spot", "on_demand", "spot_then_on_demand"]))
            pool["elastic"] = {
                "instance_types": _TYPES[gpus],
                "capacity": capacity,
                "max_nodes": draw(st.integers(1, 6)),
            }
            if pool["tier"] == "production" and capacity != "on_demand":
                spot_ok.append(pool["name"])
        pools.append(pool)
    data["gpuloan:pools"] = pools
    teams = {t: {"lending_limit_pct": draw(st.sampled_from([0, 50, 100]))} for t in {p["team"] for p in pools}}
    data["gpuloan:scheduling"] = {"kueue": {"production_spot_pools": spot_ok, "teams": teams}}
    data["gpuloan:gpu_operator"] = {"time_slicing_replicas": draw(st.sampled_from([None, 2]))}
    return checks.from_stack_yaml({"config": data}, "generated", prices=resolved_prices())


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_configs())
def test_quota_invariants_over_generated_configs(cfg):
    plan = scheduling.plan(cfg)
    replicas = cfg.gpu_operator.time_slicing_replicas or 1
    owners: dict[str, list[int]] = {}
    for q in plan.queues:
        pool = cfg.pool(q.pool)
        per_node = scheduling.gpus_per_node(cfg, pool)
        reach = (pool.guaranteed.nodes if pool.guaranteed else 0) + (pool.elastic.max_nodes if pool.elastic else 0)
        assert sum(e.nominal_gpus for e in q.flavors) <= reach * per_node  # never more than the groups reach
        assert per_node % replicas == 0
        for e in q.flavors:
            if e.nominal_gpus:
                owners.setdefault(e.flavor, []).append(e.nominal_gpus)
            elif not e.flavor.endswith(f"-{q.pool}-floor"):
                # borrowed: another pool's floor only, by a non-production queue, same GPUs per node
                lender = next(p for p in cfg.pools if scheduling.flavor_name(cfg, p, scheduling.FLOOR) == e.flavor)
                assert q.tier != Tier.production and lender.name != q.pool
                assert scheduling.gpus_per_node(cfg, lender) == per_node
        assert tenancy.team_gpu_quota(cfg, q.team) >= sum(e.nominal_gpus for e in q.flavors)
    # each flavor's quota is owned by exactly one queue and equals what its group reaches
    flavors = {f.name: f for f in plan.flavors}
    for name, quotas in owners.items():
        assert quotas == [flavors[name].gpus]
    if KUEUE_CRDS.is_dir():
        for q in plan.queues:
            validate_kueue(kueue.cluster_queue_manifest(cfg, q))


def test_scheduling_doc_names_what_the_code_declares():
    doc = (REPO / "docs" / "scheduling.md").read_text()
    assert versions.KUEUE_CHART in doc and kueue.NAMESPACE in doc
    for prefix in kueue.EXCLUDED_RESOURCE_PREFIXES:
        assert f"`{prefix}`" in doc
    cq = _cq(_cfg("prod"), "training")["spec"]
    assert f"reclaimWithinCohort: {cq['preemption']['reclaimWithinCohort']}" in doc
    assert f"whenCanPreempt: {cq['flavorFungibility']['whenCanPreempt']}" in doc
    assert kueue.QUEUE_NAME_LABEL in doc and kueue.PRIORITY_CLASS_LABEL in doc
    # the hand-drawn picture's quotas are the prod plan's
    for name, quota in _quotas(_cq(_cfg("prod"), "training")).items():
        assert re.search(rf"{name}\s+{quota['nominalQuota']} GPUs", doc), name


# --- lending in the shipped stack, and only to work that runs there (issue 27) -------------------------------------


def test_shipped_prod_lends_the_training_floor_to_research_experiments():
    cfg = _cfg("prod")
    borrowed = {
        (q.name, e.flavor)
        for q in scheduling.plan(cfg).queues
        for e in q.flavors
        if not e.flavor.startswith(q.name + "-")
    }
    # a ClusterQueue lists another pool's floor flavor: something is really borrowed (it was not before)
    assert borrowed == {("gpuloan-prod-research", "gpuloan-prod-training-floor")}
    quotas = _quotas(_cq(cfg, "research"))
    assert list(quotas) == ["gpuloan-prod-training-floor", "gpuloan-prod-research-spot"]
    assert quotas["gpuloan-prod-training-floor"] == {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 8}
    assert _cq(cfg, "research")["spec"]["flavorFungibility"]["whenCanBorrow"] == "MayStopSearch"


@pytest.mark.parametrize("pool", ["training", "inference"])
def test_production_queues_never_borrow_so_they_are_never_reclaimed_from(pool):
    for name, quota in _quotas(_cq(_cfg("prod"), pool)).items():
        assert quota["borrowingLimit"] == 0, name


def _borrower(own_types: list[str], lender_type: str) -> config.GpuLoanConfig:
    """prod with the training floor of `lender_type` and its experiment pool (research) running `own_types` only."""
    data = stack_config("prod")
    data["gpuloan:pools"][0]["guaranteed"]["instance_type"] = lender_type
    data["gpuloan:pools"][0]["elastic"]["instance_types"] = [lender_type]
    data["gpuloan:pools"][2]["elastic"]["instance_types"] = own_types
    data.pop("gpuloan:commitments")  # the RIs are for p4d.24xlarge; not what these cases are about
    return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


@pytest.mark.parametrize(
    "own, lender, lent",
    [
        (["p4d.24xlarge"], "p4d.24xlarge", True),  # same A100 nodes
        (["p4d.24xlarge"], "p4de.24xlarge", True),  # A100 80 GB: a 40 GB job fits
        (["p4de.24xlarge"], "p4d.24xlarge", False),  # an 80 GB-per-GPU job would not fit 40 GB A100s
        (["g6e.48xlarge"], "p4d.24xlarge", False),  # 8 L40S vs 8 A100: same GPUs per node, another GPU model
        (["p5.48xlarge"], "p4d.24xlarge", False),  # H100 work onto A100s
    ],
)
def test_a_floor_is_lent_only_to_queues_whose_work_runs_on_its_gpus(own, lender, lent):
    cfg = _borrower(own, lender)
    assert ("gpuloan-prod-training-floor" in _quotas(_cq(cfg, "research"))) is lent


# --- a pool of several node sizes (docs/scheduling.md, "Several node sizes, one elastic flavor") ------------------


@needs_crds
@requires_shared_prices
def test_several_node_sizes_share_one_elastic_flavor_that_selects_every_size_and_validates():
    from capacity_helpers import dev_variant
    from conftest import run_stack

    data = dev_variant(
        guaranteed={"instance_type": "g6e.2xlarge"},
        elastic={
            "instance_types": ["g6e.48xlarge", "g6e.12xlarge", "g6e.2xlarge"],
            "capacity": "spot_then_on_demand",
            "max_nodes": 2,
        },
    )
    cfg = checks.from_stack_yaml({"config": data}, "dev", prices=resolved_prices())
    pool = cfg.pools[0]
    elastic = [f for f in scheduling.pool_flavors(cfg, pool) if f.kind != scheduling.FLOOR]
    assert [f.gpus for f in elastic] == [2 * (8 + 4 + 1)]  # every size's groups at their max, in GPUs
    for obj in kueue.manifests(cfg):
        if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
            validate_kueue(obj)
    # the one elastic flavor's labels select every size's groups (pods admitted on it may land on any size)
    rec = run_stack("dev", data)
    groups = [
        r
        for r in rec.of_type("aws:eks/nodeGroup:NodeGroup")
        if (r.inputs.get("labels") or {}).get(tags.LABEL_TIER) == "elastic"
    ]
    assert len(groups) == 6
    labels = elastic[0].node_labels
    assert all(labels.items() <= g.inputs["labels"].items() for g in groups)
