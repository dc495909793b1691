"""Run the real Pulumi program (__main__.py) in-process under Pulumi's mocks and record what it declares.

This is the offline preview: no Pulumi CLI, no provider plugins, no cloud account. The mock engine answers
every resource with plausible generic outputs (id, ARN, name) plus the few type-specific outputs the program
reads (a cluster's endpoint, an OIDC issuer, ...), and every invoke the program uses with canned data. The
recording keeps each resource's type, name, parent, inputs and options (ignore_changes, protect), which is
what the preview prints and what the tests assert on.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from offline import document_limits

if TYPE_CHECKING:
    from pricing.sources.catalog import Prices

REPO_ROOT = Path(__file__).resolve().parent.parent
# The name under which run_program hands the Pulumi program (__main__.py) the prices it runs with.
PROGRAM_PRICES = "GPULOAN_PROGRAM_PRICES"
ACCOUNT_ID = "123456789012"  # a documentation account id: the recording never reaches AWS


@dataclass
class RecordedResource:
    urn: str
    type: str
    name: str
    parent: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    custom: bool
    ignore_changes: list[str] = field(default_factory=list)
    protect: bool = False
    delete_before_replace: bool = False
    provider: str = ""
    dependencies: list[str] = field(default_factory=list)  # URNs of depends_on (creation order the engine keeps)

    def to_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "inputs": self.inputs,
            "ignore_changes": self.ignore_changes,
            "protect": self.protect,
        }


@dataclass
class Recording:
    stack: str
    resources: list[RecordedResource]
    outputs: dict[str, Any]
    invokes: list[str]
    invoke_args: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def of_type(self, type_: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> RecordedResource:
        matches = [r for r in self.resources if r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} resources named {name!r}")
        return matches[0]

    def children_of(self, urn: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.parent == urn]


def _service_of(type_: str) -> str:
    # "aws:eks/nodeGroup:NodeGroup" -> "eks"
    pkg, _, rest = type_.partition(":")
    module = rest.split("/", 1)[0].split(":", 1)[0]
    return module if pkg == "aws" else pkg


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


# Type-specific outputs the program reads. Everything else echoes the inputs plus id/arn/name.
OutputFn = Callable[[str, dict[str, Any], str], dict[str, Any]]
TYPE_OUTPUTS: dict[str, OutputFn] = {}


def outputs_for(type_: str):
    def register(fn: OutputFn) -> OutputFn:
        TYPE_OUTPUTS[type_] = fn
        return fn

    return register


@outputs_for("aws:eks/cluster:Cluster")
def _eks_cluster(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    oidc = f"https://oidc.eks.{region}.amazonaws.com/id/{_short_hash(name).upper()}0000000000000000000000"
    return {
        "endpoint": f"https://{_short_hash(name).upper()}.gr7.{region}.eks.amazonaws.com",
        "certificateAuthority": {
            "data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCm9mZmxpbmUKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
        },
        "identities": [{"oidcs": [{"issuer": oidc}]}],
        "vpcConfig": {**inputs.get("vpcConfig", {}), "clusterSecurityGroupId": f"sg-{_short_hash(name, 'cluster')}"},
        "version": inputs.get("version", "1.33"),
        "status": "ACTIVE",
    }


@outputs_for("aws:ec2/capacityReservation:CapacityReservation")
def _odcr(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    return {"id": f"cr-{_short_hash(name)}{_short_hash(name, 'x')[:9]}"}


@outputs_for("aws:ec2/launchTemplate:LaunchTemplate")
def _launch_template(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    return {"id": f"lt-{_short_hash(name)}{_short_hash(name, 'x')[:9]}", "latestVersion": 1}


@outputs_for("aws:iam/openIdConnectProvider:OpenIdConnectProvider")
def _oidc_provider(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    host = str(inputs.get("url", "")).removeprefix("https://")
    return {"arn": f"arn:aws:iam::{ACCOUNT_ID}:oidc-provider/{host}"}


def generated_name(prefix: str, logical_name: str) -> str:
    """What the provider does with a name prefix: prefix + a 26-character unique suffix (a timestamp and a
    counter there; a hash of the logical name here, so the recording is deterministic)."""
    digits = str(int(hashlib.sha256(logical_name.encode()).hexdigest(), 16))
    return prefix + digits[:26]


@outputs_for("aws:eks/nodeGroup:NodeGroup")
def _node_group(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "resources": [{"autoscalingGroups": [{"name": f"eks-{name}-{_short_hash(name)}"}]}],
        "status": "ACTIVE",
    }
    group_name = inputs.get("nodeGroupName")
    if not group_name and inputs.get("nodeGroupNamePrefix"):
        group_name = generated_name(inputs["nodeGroupNamePrefix"], name)
        out["nodeGroupName"] = group_name
    if inputs.get("clusterName") and group_name:
        # EKS's real ARN shape: nodegroup/<cluster>/<node group name>/<uuid> (IAM patterns match on it).
        uuid = hashlib.sha256(name.encode()).hexdigest()
        uuid = f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}"
        out["arn"] = f"arn:aws:eks:{region}:{ACCOUNT_ID}:nodegroup/{inputs['clusterName']}/{group_name}/{uuid}"
    return out


class OfflineMocks:
    """pulumi.runtime.Mocks: generic, deterministic outputs for any resource type and invoke."""

    def __init__(self, region: str, stack: str):
        self.region = region
        self.stack = stack
        self.invokes: list[str] = []
        self.invoke_args: list[tuple[str, dict[str, Any]]] = []

    def new_resource(self, args) -> tuple[str, dict[str, Any]]:
        if args.typ.startswith("pulumi:providers:"):
            return f"{args.name}-provider-id", dict(args.inputs)
        service = _service_of(args.typ)
        rid = args.resource_id or f"{args.name}-{_short_hash(self.stack, args.typ, args.name)}"
        state = dict(args.inputs)
        state.setdefault("name", args.inputs.get("name", args.name))
        if args.typ.startswith("aws:"):
            state.setdefault(
                "arn", f"arn:aws:{service}:{self.region}:{ACCOUNT_ID}:{args.typ.rsplit(':', 1)[-1].lower()}/{rid}"
            )
        extra = TYPE_OUTPUTS.get(args.typ)
        if extra is not None:
            extra_state = extra(args.name, args.inputs, self.region)
            rid = extra_state.pop("id", rid)
            state.update(extra_state)
        return rid, state

    def call(self, args) -> dict[str, Any]:
        self.invokes.append(args.token)
        self.invoke_args.append((args.token, _plain(args.args)))
        handler = INVOKES.get(args.token)
        return handler(args.args, self) if handler else {}


InvokeFn = Callable[[dict[str, Any], OfflineMocks], dict[str, Any]]
INVOKES: dict[str, InvokeFn] = {
    "aws:index/getCallerIdentity:getCallerIdentity": lambda a, m: {
        "accountId": ACCOUNT_ID,
        "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/offline",
        "userId": "AIDAOFFLINE",
        "id": ACCOUNT_ID,
    },
    "aws:index/getRegion:getRegion": lambda a, m: {"name": m.region, "region": m.region, "id": m.region},
    "aws:index/getPartition:getPartition": lambda a, m: {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"},
    "aws:eks/getCluster:getCluster": lambda a, m: {
        "name": a.get("name"),
        "arn": f"arn:aws:eks:{m.region}:{ACCOUNT_ID}:cluster/{a.get('name')}",
        "endpoint": f"https://{_short_hash(a.get('name', '')).upper()}.gr7.{m.region}.eks.amazonaws.com",
        "version": "1.33",
        "certificateAuthorities": [
            {"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCm9mZmxpbmUKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="}
        ],
        "identities": [{"oidcs": [{"issuer": f"https://oidc.eks.{m.region}.amazonaws.com/id/OFFLINE"}]}],
        "vpcConfig": {
            "vpcId": "vpc-0offline",
            "subnetIds": ["subnet-0offline1", "subnet-0offline2"],
            "clusterSecurityGroupId": "sg-0offline",
            "securityGroupIds": [],
            "endpointPrivateAccess": True,
            "endpointPublicAccess": False,
            "publicAccessCidrs": [],
        },
        "roleArn": f"arn:aws:iam::{ACCOUNT_ID}:role/{a.get('name')}-cluster",
        "id": a.get("name"),
    },
    "aws:ecr/getAuthorizationToken:getAuthorizationToken": lambda a, m: {
        "userName": "AWS",
        "password": "offline-token",
        "proxyEndpoint": f"https://{ACCOUNT_ID}.dkr.ecr.{m.region}.amazonaws.com",
        "authorizationToken": "QVdTOm9mZmxpbmU=",
        "id": m.region,
    },
}


# Live node groups the offline account "has": {(cluster, node group name): desired size}. Empty: a first deploy.
# Tests put groups here (monkeypatch) to play a later `pulumi up` against a running stack.
LIVE_NODE_GROUPS: dict[tuple[str, str], int] = {}


def _get_node_groups(args: dict[str, Any], mocks: "OfflineMocks") -> dict[str, Any]:
    cluster = args.get("clusterName")
    return {"clusterName": cluster, "names": sorted(n for c, n in LIVE_NODE_GROUPS if c == cluster), "id": cluster}


def _get_node_group(args: dict[str, Any], mocks: "OfflineMocks") -> dict[str, Any]:
    key = (args.get("clusterName"), args.get("nodeGroupName"))
    size = LIVE_NODE_GROUPS[key]
    return {
        "clusterName": key[0],
        "nodeGroupName": key[1],
        "id": f"{key[0]}:{key[1]}",
        "scalingConfigs": [{"desiredSize": size, "minSize": 0, "maxSize": max(size, 1)}],
    }


INVOKES["aws:eks/getNodeGroups:getNodeGroups"] = _get_node_groups
INVOKES["aws:eks/getNodeGroup:getNodeGroup"] = _get_node_group


def _get_subnets(args: dict[str, Any], mocks: "OfflineMocks") -> dict[str, Any]:
    # An existing cluster's private subnets: one per requested AZ, else the ids the filter named.
    filters = {f.get("name"): list(f.get("values") or []) for f in args.get("filters") or []}
    if filters.get("availability-zone"):
        ids = [f"subnet-0{_short_hash(az)}" for az in filters["availability-zone"]]
    else:
        ids = filters.get("subnet-id") or ["subnet-0offline1", "subnet-0offline2"]
    return {"ids": ids, "filters": args.get("filters") or [], "id": mocks.region}


INVOKES["aws:ec2/getSubnets:getSubnets"] = _get_subnets


def register_invoke(token: str):
    def register(fn: InvokeFn) -> InvokeFn:
        INVOKES[token] = fn
        return fn

    return register


def _make_monitor(mocks: OfflineMocks, records: list[RecordedResource]):
    from pulumi.runtime import rpc
    from pulumi.runtime.mocks import MockMonitor

    class RecordingMonitor(MockMonitor):
        def RegisterResource(self, request):
            response = super().RegisterResource(request)
            if request.type != "pulumi:pulumi:Stack":
                inputs = rpc.deserialize_properties(request.object)
                reg = self.resources.get(response.urn)
                records.append(
                    RecordedResource(
                        urn=response.urn,
                        type=request.type,
                        name=request.name,
                        parent=request.parent,
                        inputs=_plain(inputs),
                        outputs=_plain(reg.state if reg else {}),
                        custom=bool(request.custom),
                        ignore_changes=list(request.ignoreChanges),
                        protect=bool(request.protect),
                        delete_before_replace=bool(request.deleteBeforeReplace),
                        provider=request.provider,
                        dependencies=list(request.dependencies),
                    )
                )
            return response

    return RecordingMonitor(mocks)


def _asset_json(value: Any) -> dict[str, Any] | None:
    """A Pulumi asset or archive as its content hash, or None when `value` is neither.

    Its repr names a memory address (`<pulumi.asset.FileArchive object at 0x…>`), which differs on every run and
    made every cost-diff report the Lambda's code as changed. The path is left out on purpose: the base side of a
    cost-diff runs from another checkout, and only the bytes decide whether Pulumi uploads new code.
    """
    from pulumi import asset

    if not isinstance(value, (asset.Asset, asset.Archive)):
        return None
    kind = type(value).__name__
    digest = hashlib.sha256()
    if isinstance(value, asset.StringAsset):
        digest.update(value.text.encode())
    elif isinstance(value, (asset.FileAsset, asset.FileArchive)):
        path = Path(value.path)
        if path.is_dir():
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                digest.update(f.relative_to(path).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        elif path.is_file():
            digest.update(path.read_bytes())
        else:
            return {"asset": kind, "missing": path.name}
    elif isinstance(value, (asset.RemoteAsset, asset.RemoteArchive)):
        digest.update(value.uri.encode())
    elif isinstance(value, asset.AssetArchive):
        for name in sorted(value.assets):
            digest.update(name.encode() + b"\0" + json.dumps(_plain(value.assets[name]), sort_keys=True).encode())
    else:
        return {"asset": kind}
    return {"asset": kind, "sha256": digest.hexdigest()}


def _plain(value: Any) -> Any:
    """Make deserialized property values JSON-friendly (resource references become their URN, assets their hash)."""
    described = _asset_json(value)
    if described is not None:
        return described
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire format has only doubles; show node counts as 2, not 2.0
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    urn = getattr(value, "urn", None)
    if urn is not None:
        return f"<resource {type(value).__name__}>"
    return str(value)


def config_to_pulumi(config: dict[str, Any]) -> dict[str, str]:
    """Stack YAML config values → the string map the Pulumi engine hands a Python program."""
    return {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in config.items()}


def run_program(
    stack: str,
    config: dict[str, Any],
    program: Path | None = None,
    records: list[RecordedResource] | None = None,
    prices: Prices | None = None,
) -> Recording:
    """Run __main__.py with `config` (the stack YAML's `config:` map) and return what it declared.

    `records` (optional) receives each resource as it is registered, also when the program fails. `prices`: the
    prices of the command that runs the program (its --prices), handed to the program as PROGRAM_PRICES; None:
    the program resolves the prices in force itself, as under `pulumi up`.
    """
    import pulumi
    from pulumi.runtime import settings as pulumi_settings
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    # The CLI reads the stack file with these limits (gpuloan/stackfile.py); a caller in process (a test, a script)
    # hands a dict whose YAML aliases are shared objects, which config_to_pulumi's json.dumps would expand.
    document_limits.check_value(config, f"Pulumi.{stack}.yaml")
    program = program or REPO_ROOT / "__main__.py"
    region = str(config.get("gpuloan:region") or config.get("aws:region") or "us-east-1")
    mocks = OfflineMocks(region, stack)
    records = records if records is not None else []
    monitor = _make_monitor(mocks, records)

    pulumi_settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="gpuloan", stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(config_to_pulumi(config))
    pulumi_settings.SETTINGS.rpc_manager.clear()
    pulumi_settings.SETTINGS.outputs.clear()

    exported: dict[str, Any] = {}

    def body():
        sys_path_added = str(program.parent) not in sys.path
        if sys_path_added:
            sys.path.insert(0, str(program.parent))
        try:
            runpy.run_path(str(program), init_globals={PROGRAM_PRICES: prices}, run_name="__main__")
        finally:
            if sys_path_added:
                sys.path.remove(str(program.parent))
        root = pulumi_settings.get_root_resource()
        resolved = _sync_await(pulumi.Output.from_input(dict(root.outputs)).future())
        exported.update(_plain(resolved or {}))

    from stacks.policy_function.preview_mode import offline_preview

    cwd = os.getcwd()
    os.chdir(program.parent)
    try:
        with offline_preview():
            _sync_await(run_pulumi_func(body))
    finally:
        os.chdir(cwd)
        pulumi_settings.ROOT.set(None)
    return Recording(
        stack=stack,
        resources=records,
        outputs=exported,
        invokes=list(mocks.invokes),
        invoke_args=list(mocks.invoke_args),
    )


@outputs_for("aws:ecr/repository:Repository")
def _ecr_repository(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    repo = inputs.get("name", name)
    return {"registryId": ACCOUNT_ID, "repositoryUrl": f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com/{repo}"}


@outputs_for("docker-build:index:Image")
def _docker_build_image(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    # A pushed build's ref is its first tag pinned to the digest; the digest follows the build inputs.
    digest = "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
    tags = inputs.get("tags") or []
    return {"digest": digest, "ref": f"{tags[0]}@{digest}" if tags else ""}


@outputs_for("aws:iam/role:Role")
def _iam_role(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    # As for policies: the path is part of the role's ARN, so a path change shows as a new ARN wherever it is used.
    return {"arn": f"arn:aws:iam::{ACCOUNT_ID}:role{inputs.get('path') or '/'}{inputs.get('name', name)}"}


@outputs_for("aws:iam/policy:Policy")
def _iam_policy(name: str, inputs: dict[str, Any], region: str) -> dict[str, Any]:
    # IAM's real ARN shape: global (no region), the path inside the ARN (IAM patterns match on it).
    return {"arn": f"arn:aws:iam::{ACCOUNT_ID}:policy{inputs.get('path') or '/'}{inputs.get('name', name)}"}
