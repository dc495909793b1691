"""Network and EKS cluster: the subnet plan, the new-cluster resources and the existing-cluster lookups."""

from __future__ import annotations

import ipaddress
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capacity_helpers import CLUSTER, NODE_GROUP, descendants, dev_variant, is_taggable
from conftest import STACKS, run_stack, stack_config, resolved_prices
from offline import runner as offline
from stacks import cluster as cluster_mod
from pricing import checks
from config import tags, versions
from pricing import checks
from stacks.network import plan_subnets

EKS = "aws:eks/cluster:Cluster"
SUBNET = "aws:ec2/subnet:Subnet"
NETWORK_TYPES = {
    "aws:ec2/vpc:Vpc",
    SUBNET,
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/eip:Eip",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/routeTable:RouteTable",
}


def cfg_of(stack):
    return checks.from_stack_yaml({"config": stack_config(stack)}, stack, prices=resolved_prices())


def in_cluster(rec, type_=None):
    [component] = rec.of_type(CLUSTER)
    found = descendants(rec, component.urn)
    return [r for r in found if type_ is None or r.type == type_]


def mock_id(rec, resource) -> str:
    """The id the offline mocks give a resource (its ARN ends with it)."""
    return f"{resource.name}-{offline._short_hash(rec.stack, resource.type, resource.name)}"


# --- the subnet plan (pure) --------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(prefix=st.integers(16, 20), n_azs=st.integers(2, 6), second=st.integers(0, 255))
def test_subnet_plan_is_disjoint_inside_the_vpc_and_one_of_each_kind_per_az(prefix, n_azs, second):
    vpc = ipaddress.ip_network(f"10.{second}.0.0/16").supernet(new_prefix=16)
    vpc = list(vpc.subnets(new_prefix=prefix))[0]
    azs = [f"us-east-1{c}" for c in "abcdef"[:n_azs]]
    specs = plan_subnets(str(vpc), azs)
    nets = [ipaddress.ip_network(s.cidr_block) for s in specs]
    assert all(n.subnet_of(vpc) for n in nets)
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    for az in azs:
        assert sorted(s.kind for s in specs if s.availability_zone == az) == ["private", "public"]
    private = [n for s, n in zip(specs, nets) if s.kind == "private"]
    public = [n for s, n in zip(specs, nets) if s.kind == "public"]
    assert min(p.num_addresses for p in private) > max(p.num_addresses for p in public)  # pods take IPs


def test_subnet_plan_is_stable_when_an_az_is_added():
    two = plan_subnets("10.40.0.0/16", ["us-east-1a", "us-east-1b"])
    three = plan_subnets("10.40.0.0/16", ["us-east-1a", "us-east-1b", "us-east-1c"])
    assert three[:4] == two


def test_subnet_plan_ignores_the_order_of_the_azs_and_where_one_is_added():
    # A subnet's CIDR forces a new subnet, which EC2 cannot do under running nodes: order must not matter.
    def by_az(azs):
        return {(x.availability_zone, x.kind): x.cidr_block for x in plan_subnets("10.40.0.0/16", azs)}

    ab = by_az(["us-east-1b", "us-east-1c"])
    assert by_az(["us-east-1c", "us-east-1b"]) == ab
    with_a = by_az(["us-east-1a", "us-east-1b", "us-east-1c"])
    assert {k: v for k, v in with_a.items() if k[0] != "us-east-1a"} == ab


# --- new cluster -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_network_has_private_and_public_subnets_per_az_and_nat_per_az(recorded, stack):
    rec, cfg = recorded(stack), cfg_of(stack)
    azs = cfg.cluster.availability_zones
    [vpc] = in_cluster(rec, "aws:ec2/vpc:Vpc")
    assert vpc.inputs["cidrBlock"] == cfg.cluster.vpc_cidr
    assert vpc.inputs["enableDnsHostnames"] and vpc.inputs["enableDnsSupport"]
    subnets = in_cluster(rec, SUBNET)
    assert sorted(s.inputs["availabilityZone"] for s in subnets) == sorted(azs * 2)
    for s in subnets:
        assert s.inputs["mapPublicIpOnLaunch"] is False
        assert s.inputs["tags"][f"kubernetes.io/cluster/gpuloan-{stack}"] == "shared"
    assert len(in_cluster(rec, "aws:ec2/natGateway:NatGateway")) == len(azs)
    private_routes = [rt for rt in in_cluster(rec, "aws:ec2/routeTable:RouteTable") if "private" in rt.name]
    assert len(private_routes) == len(azs)
    for rt in private_routes:
        [route] = rt.inputs["routes"]
        assert route["cidrBlock"] == "0.0.0.0/0" and route["natGatewayId"] and "gatewayId" not in route
    [default_sg] = in_cluster(rec, "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
    assert not default_sg.inputs.get("ingress") and not default_sg.inputs.get("egress")


@pytest.mark.parametrize("stack", STACKS)
def test_eks_cluster_is_encrypted_logged_and_uses_access_entries(recorded, stack):
    rec, cfg = recorded(stack), cfg_of(stack)
    [eks] = in_cluster(rec, EKS)
    assert eks.inputs["name"] == f"gpuloan-{stack}"
    assert eks.inputs["version"] == cfg.cluster.kubernetes_version
    enc = eks.inputs["encryptionConfig"]
    assert enc["resources"] == ["secrets"]
    [key] = in_cluster(rec, "aws:kms/key:Key")
    assert enc["provider"]["keyArn"].endswith("/" + mock_id(rec, key))
    assert key.inputs["enableKeyRotation"] is True
    assert set(eks.inputs["enabledClusterLogTypes"]) == {
        "api",
        "audit",
        "authenticator",
        "controllerManager",
        "scheduler",
    }
    [logs] = in_cluster(rec, "aws:cloudwatch/logGroup:LogGroup")
    assert logs.inputs["name"] == f"/aws/eks/gpuloan-{stack}/cluster" and logs.inputs["retentionInDays"] > 0
    assert eks.inputs["accessConfig"]["authenticationMode"] == "API"
    assert eks.inputs["bootstrapSelfManagedAddons"] is False
    vpc = eks.inputs["vpcConfig"]
    assert vpc["endpointPrivateAccess"] is True
    assert vpc["endpointPublicAccess"] is True and vpc["publicAccessCidrs"] == cfg.cluster.public_endpoint_cidrs
    private = {mock_id(rec, s) for s in in_cluster(rec, SUBNET) if "internal-elb" in str(s.inputs["tags"])}
    assert set(vpc["subnetIds"]) == private  # control-plane ENIs only in private subnets


@pytest.mark.parametrize("stack", STACKS)
def test_bin_packing_sets_the_schedulers_scoring_on_the_cluster(recorded, stack):
    [eks] = in_cluster(recorded(stack), EKS)
    assert cfg_of(stack).cluster.bin_packing is True  # both shipped stacks bin-pack
    strategy = eks.inputs["kubeSchedulerConfig"]["nodeResourcesFit"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    assert {r["name"]: r["weight"] for r in strategy["resources"]} == {"cpu": 1, "memory": 1, "nvidia.com/gpu": 3}
    assert all(1 <= r["weight"] <= 100 for r in strategy["resources"])  # EKS ResourceWeight range


def test_without_bin_packing_the_cluster_is_sent_the_default_scoring():
    # EKS merges scheduler configuration updates and an omitted block sends nothing, so turning bin packing off
    # must send kube-scheduler's default (LeastAllocated, cpu and memory weight 1) to take MostAllocated back.
    config = stack_config("dev")
    config["gpuloan:cluster"]["bin_packing"] = False
    [eks] = run_stack("dev", config).of_type(EKS)
    strategy = eks.inputs["kubeSchedulerConfig"]["nodeResourcesFit"]["scoringStrategy"]
    assert strategy["type"] == "LeastAllocated"
    assert {r["name"]: r["weight"] for r in strategy["resources"]} == {"cpu": 1, "memory": 1}


def test_bin_packing_needs_kubernetes_1_31():
    from config.config import ConfigError

    config = stack_config("dev")
    config["gpuloan:cluster"]["kubernetes_version"] = "1.30"
    with pytest.raises(ConfigError) as err:
        checks.from_stack_yaml({"config": config}, "dev", prices=resolved_prices())
    assert "cluster.bin_packing" in str(err.value) and "1.31" in str(err.value)


def test_private_only_endpoint_when_no_cidrs_are_listed():
    config = stack_config("dev")
    config["gpuloan:cluster"]["public_endpoint_cidrs"] = []
    [eks] = run_stack("dev", config).of_type(EKS)
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in eks.inputs["vpcConfig"]


@pytest.mark.parametrize("stack", STACKS)
def test_managed_addons_are_pinned(recorded, stack):
    rec, cfg = recorded(stack), cfg_of(stack)
    addons = {a.inputs["addonName"]: a for a in in_cluster(rec, "aws:eks/addon:Addon")}
    pins = versions.EKS_ADDON_VERSIONS[cfg.cluster.kubernetes_version]
    assert set(addons) == set(pins) == {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"}
    for name, addon in addons.items():
        assert addon.inputs["addonVersion"] == pins[name]
        assert addon.inputs["clusterName"] == f"gpuloan-{stack}"
    # The CNI gets its AWS permissions through IRSA bound to exactly kube-system/aws-node, not the node role.
    cni_role_arn = addons["vpc-cni"].inputs["serviceAccountRoleArn"]
    [cni_role] = [r for r in in_cluster(rec, "aws:iam/role:Role") if r.outputs["arn"] == cni_role_arn]
    trust = json.loads(cni_role.inputs["assumeRolePolicy"])
    [stmt] = trust["Statement"]
    assert stmt["Action"] == "sts:AssumeRoleWithWebIdentity"
    [oidc] = in_cluster(rec, "aws:iam/openIdConnectProvider:OpenIdConnectProvider")
    assert stmt["Principal"]["Federated"] == oidc.outputs["arn"]
    assert oidc.inputs["clientIdLists"] == ["sts.amazonaws.com"]
    conditions = stmt["Condition"]["StringEquals"]
    assert sorted(conditions.values()) == ["sts.amazonaws.com", "system:serviceaccount:kube-system:aws-node"]


@pytest.mark.parametrize("stack", STACKS)
def test_node_and_cluster_roles_have_only_the_managed_policies_they_need(recorded, stack):
    rec = recorded(stack)
    attachments = in_cluster(rec, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    roles = {r.name: r for r in in_cluster(rec, "aws:iam/role:Role")}
    attached: dict[str, set[str]] = {}
    for a in attachments:
        attached.setdefault(a.inputs["role"], set()).add(a.inputs["policyArn"].rsplit("/", 1)[1])
    assert set(attached) <= set(roles)
    node_role = next(n for n in roles if n.endswith("-node-role"))
    cluster_role = next(n for n in roles if n.endswith("-cluster-role"))
    cni_role = next(n for n in roles if n.endswith("-vpc-cni-role"))
    assert attached == {
        node_role: set(cluster_mod.NODE_POLICIES),
        cluster_role: {"AmazonEKSClusterPolicy"},
        cni_role: {"AmazonEKS_CNI_Policy"},
    }
    assert not in_cluster(rec, "aws:iam/rolePolicy:RolePolicy"), "no inline policies on cluster or node roles"
    [stmt] = json.loads(roles[node_role].inputs["assumeRolePolicy"])["Statement"]
    assert stmt["Principal"] == {"Service": "ec2.amazonaws.com"} and stmt["Action"] == "sts:AssumeRole"


@pytest.mark.parametrize("stack", STACKS)
def test_system_node_group_is_on_demand_untainted_and_sized_from_config(recorded, stack):
    rec, cfg = recorded(stack), cfg_of(stack)
    [system] = [r for r in in_cluster(rec, NODE_GROUP)]
    spec = cfg.cluster.system_nodes
    # Auto-named like the GPU groups, so a replacement creates the new group before deleting the old one.
    assert "nodeGroupName" not in system.inputs and system.inputs["nodeGroupNamePrefix"] == f"{stack}-system_"
    assert not system.delete_before_replace
    assert system.inputs["capacityType"] == "ON_DEMAND"
    assert system.inputs["amiType"] == versions.SYSTEM_AMI_TYPE
    assert system.inputs["instanceTypes"] == [spec.instance_type]
    assert system.inputs["scalingConfig"] == {"minSize": spec.nodes, "desiredSize": spec.nodes, "maxSize": spec.nodes}
    assert not system.inputs.get("taints")
    assert system.inputs["labels"] == {tags.LABEL_TIER: "system"}
    assert len(system.inputs["subnetIds"]) == len(cfg.cluster.availability_zones)


def test_partition_follows_the_region():
    assert cluster_mod.partition_for("us-east-1") == "aws"
    assert cluster_mod.partition_for("us-gov-west-1") == "aws-us-gov"
    assert cluster_mod.managed_policy_arn("cn-north-1", "AmazonEKSClusterPolicy") == (
        "arn:aws-cn:iam::aws:policy/AmazonEKSClusterPolicy"
    )


# --- existing cluster --------------------------------------------------------------------------------------

EXISTING = {"mode": "existing", "name": "ml-shared", "availability_zones": ["us-east-1a", "us-east-1b"]}


@pytest.fixture(scope="module")
def existing():
    return run_stack(
        "dev", dev_variant(cluster=EXISTING, guaranteed={"reservation": "odcr", "availability_zone": "us-east-1b"})
    )


def test_existing_cluster_creates_no_network_no_cluster_no_addons(existing):
    created = {r.type for r in in_cluster(existing)}
    assert not created & NETWORK_TYPES
    assert not created & {
        EKS,
        "aws:eks/addon:Addon",
        "aws:kms/key:Key",
        NODE_GROUP,
        "aws:iam/openIdConnectProvider:OpenIdConnectProvider",
    }
    assert "aws:eks/getCluster:getCluster" in existing.invokes
    assert existing.outputs["cluster_name"] == "ml-shared"
    assert existing.outputs["cluster_endpoint"].startswith("https://")


def test_existing_cluster_gpu_groups_use_its_subnets_and_a_role_with_cni(existing):
    groups = existing.of_type(NODE_GROUP)
    assert {g.inputs["nodeGroupNamePrefix"] for g in groups} == {"dev-research-guaranteed_", "dev-research-spot_"}
    for g in groups:
        assert g.inputs["clusterName"] == "ml-shared"
        assert all(s.startswith("subnet-") for s in g.inputs["subnetIds"])
    [floor] = [g for g in groups if g.inputs["nodeGroupNamePrefix"].endswith("guaranteed_")]
    [spot] = [g for g in groups if g.inputs["nodeGroupNamePrefix"].endswith("spot_")]
    # The reservation's AZ only (the mocked lookup answers one subnet per requested AZ).
    assert len(floor.inputs["subnetIds"]) == 1 and len(spot.inputs["subnetIds"]) == 2
    assert floor.inputs["subnetIds"][0] in spot.inputs["subnetIds"]
    node_policies = {
        a.inputs["policyArn"].rsplit("/", 1)[1]
        for a in in_cluster(existing)
        if a.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    }
    assert node_policies == set(cluster_mod.NODE_POLICIES_EXISTING_CLUSTER)


@pytest.mark.parametrize("stack", STACKS)
def test_every_taggable_cluster_resource_is_tagged_as_platform(recorded, stack):
    # Shared resources are split from pool costs by gpuloan:tier=platform (environment comes from the provider).
    rec = recorded(stack)
    taggable = [r for r in in_cluster(rec) if r.custom and is_taggable(r.type)]
    assert len(taggable) > 20
    for r in taggable:
        assert r.inputs.get("tags", {}).get(tags.TAG_TIER) == "platform", f"{r.type} {r.name}"


def _subnet_filters(recording) -> list[dict]:
    return [
        {f["name"]: f["values"] for f in args.get("filters", [])}
        for token, args in recording.invoke_args
        if token == "aws:ec2/getSubnets:getSubnets"
    ]


def test_existing_cluster_default_subnets_are_those_without_public_ips(existing):
    lookups = _subnet_filters(existing)
    assert lookups and all(f.get("map-public-ip-on-launch") == ["false"] for f in lookups)


def test_existing_cluster_node_subnets_from_config_are_used_exactly():
    # Some VPC modules make public subnets that assign no public IPs: a user names the private ones instead.
    chosen = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"]
    rec = run_stack("dev", dev_variant(cluster={**EXISTING, "node_subnet_ids": chosen}))
    lookups = _subnet_filters(rec)
    assert lookups
    for f in lookups:
        assert f["subnet-id"] == chosen
        assert "map-public-ip-on-launch" not in f


def test_node_subnet_ids_must_be_subnet_ids():
    from conftest import stack_config
    from config import config as config_mod

    data = {k.split(":", 1)[1]: v for k, v in stack_config("dev").items() if k.startswith("gpuloan:")}
    data["cluster"] = {**EXISTING, "node_subnet_ids": ["vpc-123"]}
    with pytest.raises(config_mod.ConfigError) as err:
        checks.parse(data, prices=resolved_prices())
    assert any(p.startswith("cluster.node_subnet_ids") for p, _ in err.value.problems)


def test_an_existing_stack_replaces_its_fixed_name_system_group_new_group_first(recorded):
    from gpuloan import preview
    from offline import rollout
    from offline.runner import generated_name

    from conftest import stack_config

    head = preview.preview_document(resolved_prices(), "dev", stack_config("dev"))
    base = json.loads(json.dumps(head))
    [old] = [
        r
        for r in base["resources"]
        if r["type"] == NODE_GROUP and r["inputs"].get("labels", {}).get(tags.LABEL_TIER) == "system"
    ]
    old["inputs"]["nodeGroupName"] = old["inputs"].pop("nodeGroupNamePrefix").rstrip("_")  # the old fixed name
    [change] = rollout.group_changes(base, head)
    assert change.action == "replaces" and change.group == "dev-system" and "nodeGroupName" in change.reasons
    # The replacement's name cannot clash with the old one, so nothing forces delete-before-replace.
    [system] = [r for r in in_cluster(recorded("dev"), NODE_GROUP)]
    assert generated_name("dev-system_", system.name) != "dev-system" and not system.delete_before_replace
