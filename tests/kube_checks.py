"""Helpers shared by the Kubernetes tests: run the layer, collect its objects, validate them strictly."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from conftest import REPO, SHARED_KUEUE_CRDS, stack_config
from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from offline import runner as offline

LAYER_PROGRAM = Path(__file__).resolve().parent / "kubernetes_layer_program.py"
WORKLOADS = sorted((REPO / "docs" / "workloads").glob("*.yaml"))
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# Kueue's CRDs of the pinned chart (read by path, never copied into the repository; see its SOURCE.md).
KUEUE_CRDS = SHARED_KUEUE_CRDS
KUEUE_GROUP = "kueue.x-k8s.io"


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


def release(rec: offline.Recording, chart: str):
    """The one Helm release of a chart (the layer declares the GPU Operator's and Kueue's)."""
    found = [r for r in rec.of_type(HELM_RELEASE) if r.inputs["chart"].rsplit("/", 1)[-1] == chart]
    assert len(found) == 1, f"expected one {chart} release, found {len(found)}"
    return found[0]


def kube_objects(rec: offline.Recording) -> list[dict[str, Any]]:
    """Every Kubernetes object the program declares, as the manifest the provider would apply."""
    return [_ints(r.inputs) for r in rec.resources if r.type.startswith("kubernetes:") and r.type != HELM_RELEASE]


def validate_strict(manifest: dict[str, Any], cluster_version: str) -> None:
    """Built-in kinds against kubernetes-validate's strict schemas; Kueue kinds against the pinned chart's CRDs
    (when the shared data is absent those are left to tests/stacks/test_kueue.py, which skips saying why)."""
    if manifest.get("apiVersion", "").startswith(KUEUE_GROUP + "/"):
        if KUEUE_CRDS.is_dir():
            validate_kueue(manifest)
        return
    kubernetes_validate.validate(manifest, schema_version(cluster_version), strict=True)


def _closed(schema: Any) -> Any:
    """The API server rejects unknown fields (kubectl and server-side apply validate strictly); JSON Schema allows
    them unless an object says additionalProperties: false. Close every object schema that lists its properties."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@functools.cache
def kueue_schema(kind: str, version: str) -> dict[str, Any]:
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    crd = yaml.safe_load((KUEUE_CRDS / f"{KUEUE_GROUP}_{plural}.yaml").read_text())
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return _closed(served["schema"]["openAPIV3Schema"])


def validate_kueue(manifest: dict[str, Any]) -> None:
    """JSON Schema of the CRD version, plus the CEL rules (x-kubernetes-validations) a generated object can break,
    which JSON Schema cannot express."""
    version = manifest["apiVersion"].split("/", 1)[1]
    jsonschema.validate(manifest, kueue_schema(manifest["kind"], version))
    spec = manifest.get("spec") or {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group["flavors"]:
            if len(flavor["resources"]) != len(group["coveredResources"]):
                raise jsonschema.ValidationError(
                    f"flavor {flavor['name']}: flavors must have the same number of resources as the coveredResources"
                )
            if not spec.get("cohortName") and any(
                "borrowingLimit" in r or "lendingLimit" in r for r in flavor["resources"]
            ):
                raise jsonschema.ValidationError("borrowingLimit/lendingLimit must be nil when cohort is empty")
