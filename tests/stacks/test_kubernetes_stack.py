"""The Kubernetes layer inside the real program (__main__.py): wired after the cluster, objects validate."""

from __future__ import annotations

import json

import pytest
from conftest import run_stack, stack_config
from kube_checks import HELM_RELEASE, kube_objects, validate_strict

from config import versions

STACKS = ("dev", "prod")
LAYER_TYPES = (
    "gpuloan:gpu_operator:GpuOperator",
    "gpuloan:gpu_metrics:GpuMetrics",
    "gpuloan:tenancy:Tenancy",
    "gpuloan:kueue:Kueue",
)


@pytest.mark.parametrize("stack", STACKS)
def test_program_declares_the_kubernetes_layer(recorded, stack):
    rec = recorded(stack)
    for type_ in LAYER_TYPES:
        assert len(rec.of_type(type_)) == 1, type_
    assert sorted(r.inputs["chart"] for r in rec.of_type(HELM_RELEASE)) == ["gpu-operator", versions.KUEUE_CHART]
    assert rec.outputs["priority_classes"] == {
        "production": "gpuloan-production",
        "experiment": "gpuloan-experiment",
        "learning": "gpuloan-learning",
    }


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_object_of_the_program_validates_strictly(recorded, stack):
    version = stack_config(stack)["gpuloan:cluster"]["kubernetes_version"]
    objects = kube_objects(recorded(stack))
    assert len(objects) >= 8
    for obj in objects:
        validate_strict(obj, version)


def test_kubeconfig_points_at_the_stacks_cluster(recorded):
    rec = recorded("prod")
    [provider] = rec.of_type("pulumi:providers:kubernetes")
    kubeconfig = json.loads(provider.inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == rec.outputs["cluster_endpoint"]
    args = kubeconfig["users"][0]["user"]["exec"]["args"]
    assert args[args.index("--cluster-name") + 1] == rec.outputs["cluster_name"]


def test_existing_cluster_mode_uses_the_looked_up_cluster():
    cfg = stack_config("dev")
    cfg["gpuloan:cluster"] = {"mode": "existing", "name": "ml-shared", "kubernetes_version": "1.33"}
    rec = run_stack("dev", cfg)
    [provider] = rec.of_type("pulumi:providers:kubernetes")
    kubeconfig = json.loads(provider.inputs["kubeconfig"])
    args = kubeconfig["users"][0]["user"]["exec"]["args"]
    assert args[args.index("--cluster-name") + 1] == "ml-shared"
    assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://")
    [assoc] = rec.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert assoc.inputs["clusterName"] == "ml-shared"
    for obj in kube_objects(rec):
        validate_strict(obj, "1.33")
