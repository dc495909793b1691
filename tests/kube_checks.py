"""Helpers shared by the Kubernetes tests: run the layer, collect its objects, validate them strictly."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import kubernetes_validate
from conftest import REPO, stack_config
from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from gpuloan import offline

LAYER_PROGRAM = Path(__file__).resolve().parent / "kubernetes_layer_program.py"
WORKLOADS = sorted((REPO / "docs" / "workloads").glob("*.yaml"))
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def run_layer(stack: str, config: dict | None = None) -> offline.Recording:
    return offline.run_program(stack, config if config is not None else stack_config(stack), program=LAYER_PROGRAM)


@functools.cache
def layer(stack: str) -> offline.Recording:
    return run_layer(stack)


def schema_version(cluster_version: str) -> str:
    """The kubernetes-validate schema for a cluster version: the same minor if shipped, else the nearest one."""
    supported = sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=Version)
    if cluster_version in supported:
        return cluster_version
    return min(supported, key=lambda v: (abs(Version(v).minor - Version(cluster_version).minor), Version(v)))


def _ints(value: Any) -> Any:
    # The mock engine carries numbers as doubles (protobuf Struct); the provider sends 1000000, not 1000000.0.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def kube_objects(rec: offline.Recording) -> list[dict[str, Any]]:
    """Every Kubernetes object the program declares, as the manifest the provider would apply."""
    return [_ints(r.inputs) for r in rec.resources if r.type.startswith("kubernetes:") and r.type != HELM_RELEASE]


def validate_strict(manifest: dict[str, Any], cluster_version: str) -> None:
    kubernetes_validate.validate(manifest, schema_version(cluster_version), strict=True)
