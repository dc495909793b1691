"""docs/workloads: every manifest validates strictly, and each one lands where its comment says it does."""

from __future__ import annotations

import pytest
import yaml
from conftest import REPO, stack_config, resolved_prices
from kube_checks import WORKLOADS, schema_version, validate_strict

from pricing import checks
from config import config, tags
from config import tenancy

PROD = checks.from_stack_yaml({"config": stack_config("prod")}, "Pulumi.prod.yaml", prices=resolved_prices())
CLUSTER_VERSION = PROD.cluster.kubernetes_version


def _docs(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def _workload(name):
    [obj] = [d for d in _docs(REPO / "docs" / "workloads" / name) if d["kind"] in ("Job", "Deployment")]
    return obj


def _tolerated(spec):
    return {t["key"] for t in spec.get("tolerations", []) if t.get("effect") == "NoSchedule"}


def test_the_three_examples_exist():
    assert {p.name for p in WORKLOADS} >= {"training-guaranteed.yaml", "elastic-spot.yaml", "inference.yaml"}


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.name for p in WORKLOADS])
def test_workload_manifests_validate_strictly(path):
    assert schema_version(CLUSTER_VERSION) == CLUSTER_VERSION == "1.35"  # the prod stack's, shipped in the schemas
    for doc in _docs(path):
        validate_strict(doc, CLUSTER_VERSION)


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.name for p in WORKLOADS])
def test_workloads_fit_the_prod_stack(path):
    for obj in _docs(path):
        team = obj["metadata"]["namespace"]
        assert team in PROD.teams, f"{path.name}: namespace {team} is not a team of the prod stack"
        if obj["kind"] not in ("Job", "Deployment"):
            continue
        spec = _pod_spec(obj)
        pool = PROD.pool(spec["nodeSelector"][tags.LABEL_POOL])
        assert pool.team == team, f"{path.name}: pool {pool.name} belongs to team {pool.team}"
        assert spec["priorityClassName"] in {tenancy.priority_class_name(t) for t in config.Tier}
        assert spec["priorityClassName"] not in tenancy.forbidden_priority_classes(PROD, team)
        assert tags.GPU_TAINT_KEY in _tolerated(spec)
        for container in spec["containers"]:
            assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1


def test_training_job_is_pinned_to_the_guaranteed_floor_and_cannot_land_on_spot():
    spec = _pod_spec(_workload("training-guaranteed.yaml"))
    assert spec["nodeSelector"][tags.LABEL_TIER] == "guaranteed"
    assert tags.SPOT_TAINT_KEY not in _tolerated(spec)
    assert spec["priorityClassName"] == "gpuloan-production"


def test_elastic_job_runs_on_spot_survives_interruption_and_checkpoints_to_a_volume():
    job = _workload("elastic-spot.yaml")
    spec = _pod_spec(job)
    assert spec["nodeSelector"][tags.LABEL_TIER] == "elastic"
    assert tags.SPOT_TAINT_KEY in _tolerated(spec)
    ignore = [r for r in job["spec"]["podFailurePolicy"]["rules"] if r["action"] == "Ignore"]
    assert {"type": "DisruptionTarget", "status": "True"} in ignore[0]["onPodConditions"]
    assert spec["terminationGracePeriodSeconds"] < 120  # spot gives a two-minute notice
    claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
    pvcs = [d for d in _docs(REPO / "docs" / "workloads" / "elastic-spot.yaml") if d["kind"] == "PersistentVolumeClaim"]
    assert claims == {p["metadata"]["name"] for p in pvcs}
    assert pvcs[0]["spec"]["accessModes"] == ["ReadWriteMany"]  # elastic nodes span AZs
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    env = {e["name"]: e.get("value", "") for e in spec["containers"][0]["env"]}
    assert env["CHECKPOINT_DIR"].startswith(
        mounts[next(iter(v["name"] for v in spec["volumes"] if "persistentVolumeClaim" in v))]
    )


def test_inference_prefers_the_floor_and_keeps_a_replica_through_spot_drains():
    deployment = _workload("inference.yaml")
    spec = _pod_spec(deployment)
    [pref] = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref["preference"]["matchExpressions"][0] == {
        "key": tags.LABEL_TIER,
        "operator": "In",
        "values": ["guaranteed"],
    }
    [pdb] = [d for d in _docs(REPO / "docs" / "workloads" / "inference.yaml") if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
