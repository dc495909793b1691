"""The EKS cluster: a new one (network, KMS, logging, access entries, OIDC, add-ons, system nodes) or an
existing one looked up by name.

Either way the component exposes the same attributes, so every later component (node groups, Kubernetes
layer, policy function, alarms) is written once. In existing mode gpuloan creates no network, no add-ons and
no system nodes: the cluster's owner runs those; gpuloan only adds a node IAM role and its GPU node groups.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import pulumi
import pulumi_aws as aws

from config import tags, versions
from config.config import BIN_PACKING_MIN_VERSION, ExistingCluster, GpuLoanConfig, NewCluster, endpoint_public_cidrs
from stacks.network import Network, NetworkArgs
from stacks.capacity.system_nodes import system_node_group

CONTROL_PLANE_LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]

# cluster.bin_packing: kube-scheduler's NodeResourcesFit scored MostAllocated, GPUs weighted above CPU and memory
# (the shape of the Kubernetes "Resource Bin Packing" example). A pod goes to the fullest node it fits, so partly
# used GPU nodes fill before empty ones and the empty ones can be released. EKS applies it in place
# (docs/aws-rules.md).
BIN_PACKING_RESOURCES = (("cpu", 1), ("memory", 1), ("nvidia.com/gpu", 3))


# cluster.bin_packing: false sends kube-scheduler's own default scoring (NodeResourcesFitArgs: LeastAllocated over cpu
# and memory, weight 1 each) instead of no block: EKS merges a scheduler configuration update into the one it has,
# and an omitted block sends nothing, so turning bin packing off would otherwise leave MostAllocated in place.
DEFAULT_SCORING = ("LeastAllocated", (("cpu", 1), ("memory", 1)))


def _scoring(type_: str, resources) -> aws.eks.ClusterKubeSchedulerConfigArgs:
    return aws.eks.ClusterKubeSchedulerConfigArgs(
        node_resources_fit=aws.eks.ClusterKubeSchedulerConfigNodeResourcesFitArgs(
            scoring_strategy=aws.eks.ClusterKubeSchedulerConfigNodeResourcesFitScoringStrategyArgs(
                type=type_,
                resources=[
                    aws.eks.ClusterKubeSchedulerConfigNodeResourcesFitScoringStrategyResourceArgs(name=n, weight=w)
                    for n, w in resources
                ],
            )
        )
    )


def bin_packing_config() -> aws.eks.ClusterKubeSchedulerConfigArgs:
    return _scoring("MostAllocated", BIN_PACKING_RESOURCES)


def scheduler_config(spec: NewCluster) -> aws.eks.ClusterKubeSchedulerConfigArgs | None:
    """Bin packing, or the default scoring spelled out; nothing where EKS has no scheduler configuration (< 1.31)."""
    if spec.bin_packing:
        return bin_packing_config()
    if tuple(int(p) for p in spec.kubernetes_version.split(".")) < BIN_PACKING_MIN_VERSION:
        return None
    return _scoring(*DEFAULT_SCORING)


# Control-plane logs (audit especially) are large; keep enough for an incident review, not forever.
CONTROL_PLANE_LOG_RETENTION_DAYS = 90
KMS_DELETION_WINDOW_DAYS = 30
# Add-ons nodes need before they can become Ready; CoreDNS instead needs Ready nodes to schedule onto.
ADDONS_BEFORE_NODES = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
ADDONS_AFTER_NODES = ("coredns",)
# Managed policies a node needs and nothing more: join the cluster, pull images. The CNI policy goes to the
# aws-node service account through IRSA on new clusters; an existing cluster's CNI may rely on the node role.
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly")
NODE_POLICIES_EXISTING_CLUSTER = NODE_POLICIES + ("AmazonEKS_CNI_Policy",)


def partition_for(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if "-gov-" in region:
        return "aws-us-gov"
    return "aws"


def managed_policy_arn(region: str, policy: str) -> str:
    return f"arn:{partition_for(region)}:iam::aws:policy/{policy}"


def cluster_name_for(cfg: GpuLoanConfig) -> str:
    if isinstance(cfg.cluster, ExistingCluster):
        return cfg.cluster.name
    return f"gpuloan-{cfg.environment}"


def _assume_role_policy(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


# What EKS returns for every created cluster; the provider types them optional (they are unset only on input).
def _certificate_data(ca: aws.eks.outputs.ClusterCertificateAuthority) -> str:
    return cast(str, ca.data)


def _oidc_issuer(identities: Sequence[aws.eks.outputs.ClusterIdentity]) -> str:
    oidcs = cast(Sequence[aws.eks.outputs.ClusterIdentityOidc], identities[0].oidcs)
    return cast(str, oidcs[0].issuer)


def _cluster_security_group(vpc: aws.eks.outputs.ClusterVpcConfig) -> str:
    return cast(str, vpc.cluster_security_group_id)


@dataclass(frozen=True)
class ClusterArgs:
    # The cluster reads most of the config (cluster, regions, github runners, environment), so it takes all of it.
    cfg: GpuLoanConfig

    @staticmethod
    def from_config(cfg: GpuLoanConfig) -> ClusterArgs:
        return ClusterArgs(cfg)


class Cluster(pulumi.ComponentResource):
    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificate_authority_data: pulumi.Output[str]
    oidc_issuer_url: pulumi.Output[str]
    oidc_provider_arn: pulumi.Output[str]
    cluster_security_group_id: pulumi.Output[str]
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]
    node_role_arn: pulumi.Output[str]
    node_role_name: pulumi.Output[str]
    kubernetes_version: str
    system_node_group: aws.eks.NodeGroup | None
    network: Network | None

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:cluster:Cluster", name, None, opts)
        cfg = args.cfg
        self._cfg = cfg
        self._name_prefix = name
        self.kubernetes_version = cfg.cluster.kubernetes_version
        self.network = None
        self.system_node_group = None
        self._subnets_by_az: dict[str, pulumi.Output[str]] = {}
        self._existing_subnet_cache: dict[str | None, pulumi.Output[list[str]]] = {}
        spec = cfg.cluster
        existing = isinstance(spec, ExistingCluster)
        self._node_role = self._make_node_role(name, cfg, NODE_POLICIES_EXISTING_CLUSTER if existing else NODE_POLICIES)
        self.node_role_arn = self._node_role.arn
        self.node_role_name = self._node_role.name
        if isinstance(spec, ExistingCluster):
            self._existing(spec)
        else:
            self._new(name, cfg, spec)
        self._admit_ci_runners(name, cfg)
        self.register_outputs(
            {
                "name": self.name,
                "arn": self.arn,
                "endpoint": self.endpoint,
                "oidc_provider_arn": self.oidc_provider_arn,
                "node_role_arn": self.node_role_arn,
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
            }
        )

    # --- shared ------------------------------------------------------------------------------------------

    def _make_node_role(self, name: str, cfg: GpuLoanConfig, policies: tuple[str, ...]) -> aws.iam.Role:
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=_assume_role_policy("ec2.amazonaws.com"),
            description=f"gpuloan {cfg.environment}: EKS nodes (system and GPU)",
            tags={tags.TAG_TIER: "platform"},
            opts=child,
        )
        for policy in policies:
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}", role=role.name, policy_arn=managed_policy_arn(cfg.region, policy), opts=child
            )
        return role

    def _admit_ci_runners(self, name: str, cfg: GpuLoanConfig) -> None:
        """Self-hosted CI runners reach the private endpoint through the cluster security group, which otherwise
        admits only the control plane and the nodes: one 443 rule per runner security group or CIDR."""
        gh = cfg.github
        if gh is None:
            return
        child = pulumi.ResourceOptions(parent=self)
        for sg in gh.runner_security_group_ids:
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-ci-runner-{sg}",
                security_group_id=self.cluster_security_group_id,
                ip_protocol="tcp",
                from_port=443,
                to_port=443,
                referenced_security_group_id=sg,
                description="gpuloan CI self-hosted runners -> EKS API",
                tags={tags.TAG_TIER: "platform"},
                opts=child,
            )
        for cidr in gh.runner_private_cidrs:
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-ci-runner-{cidr.replace('/', '-')}",
                security_group_id=self.cluster_security_group_id,
                ip_protocol="tcp",
                from_port=443,
                to_port=443,
                cidr_ipv4=cidr,
                description="gpuloan CI self-hosted runners -> EKS API",
                tags={tags.TAG_TIER: "platform"},
                opts=child,
            )

    def subnet_ids_in(self, availability_zone: str | None) -> pulumi.Output[list[str]]:
        """Private subnets for nodes: all of them, or those of one AZ (a reservation's)."""
        if availability_zone is None:
            return self.private_subnet_ids
        if self.network is not None:
            return pulumi.Output.all(self._subnets_by_az[availability_zone])
        if availability_zone not in self._existing_subnet_cache:
            self._existing_subnet_cache[availability_zone] = self._lookup_subnets([availability_zone])
        return self._existing_subnet_cache[availability_zone]

    # --- new cluster ----------------------------------------------------------------------------------------

    def _new(self, name: str, cfg: GpuLoanConfig, spec: NewCluster) -> None:
        child = pulumi.ResourceOptions(parent=self)
        platform = {tags.TAG_TIER: "platform"}
        cluster_name = cluster_name_for(cfg)
        self.network = Network(f"{name}-net", NetworkArgs.from_config(spec, cluster_name), opts=child)
        self._subnets_by_az = self.network.private_subnet_ids_by_az

        # Secrets are envelope-encrypted with a key this stack owns, so access to them can be audited and revoked.
        key = aws.kms.Key(
            f"{name}-secrets-key",
            description=f"EKS secrets encryption for {cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=KMS_DELETION_WINDOW_DAYS,
            tags=platform,
            opts=child,
        )
        aws.kms.Alias(
            f"{name}-secrets-key-alias", name=f"alias/{cluster_name}-eks-secrets", target_key_id=key.key_id, opts=child
        )
        # Created before the cluster so EKS writes into a group with retention instead of a never-expiring one.
        log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=f"/aws/eks/{cluster_name}/cluster",
            retention_in_days=CONTROL_PLANE_LOG_RETENTION_DAYS,
            tags=platform,
            opts=child,
        )
        cluster_role = aws.iam.Role(
            f"{name}-cluster-role",
            assume_role_policy=_assume_role_policy("eks.amazonaws.com"),
            description=f"EKS control plane of {cluster_name}",
            tags=platform,
            opts=child,
        )
        cluster_policy = aws.iam.RolePolicyAttachment(
            f"{name}-cluster-AmazonEKSClusterPolicy",
            role=cluster_role.name,
            policy_arn=managed_policy_arn(cfg.region, "AmazonEKSClusterPolicy"),
            opts=child,
        )

        # The configured CIDRs plus the CI runners' egress CIDRs (github.cluster_access: runner_cidrs).
        public_cidrs = endpoint_public_cidrs(cfg)
        public = bool(public_cidrs)
        eks = aws.eks.Cluster(
            f"{name}-eks",
            name=cluster_name,
            version=spec.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=self.network.private_subnet_ids,
                endpoint_private_access=True,
                endpoint_public_access=public,
                public_access_cidrs=public_cidrs if public else None,
            ),
            # Access entries, not the aws-auth ConfigMap: IAM-managed, auditable, no ConfigMap to corrupt.
            # The identity running `pulumi up` becomes cluster admin so the Kubernetes layer can be installed.
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API", bootstrap_cluster_creator_admin_permissions=True
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                resources=["secrets"], provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn)
            ),
            enabled_cluster_log_types=CONTROL_PLANE_LOG_TYPES,
            kube_scheduler_config=scheduler_config(spec),
            # The networking add-ons are managed below with pinned versions instead of unmanaged defaults.
            bootstrap_self_managed_addons=False,
            tags=platform,
            # Deleting or replacing the cluster takes every workload with it: protected unless protect_critical
            # is false (a `name`, subnet or encryption change would otherwise replace it).
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[log_group, cluster_policy], protect=cfg.protect_critical
            ),
        )

        self.name = eks.name
        self.arn = eks.arn
        self.endpoint = eks.endpoint
        self.certificate_authority_data = eks.certificate_authority.apply(_certificate_data)
        self.oidc_issuer_url = eks.identities.apply(_oidc_issuer)
        self.cluster_security_group_id = eks.vpc_config.apply(_cluster_security_group)
        self.vpc_id = self.network.vpc_id
        self.private_subnet_ids = self.network.private_subnet_ids

        # IRSA for workloads that need AWS APIs; the Pod Identity agent add-on serves the newer mechanism.
        oidc = aws.iam.OpenIdConnectProvider(
            f"{name}-oidc", url=self.oidc_issuer_url, client_id_lists=["sts.amazonaws.com"], tags=platform, opts=child
        )
        self.oidc_provider_arn = oidc.arn

        cni_role = aws.iam.Role(
            f"{name}-vpc-cni-role",
            description=f"aws-node (VPC CNI) of {cluster_name}",
            assume_role_policy=irsa_trust_policy(oidc.arn, self.oidc_issuer_url, "kube-system", "aws-node"),
            tags=platform,
            opts=child,
        )
        cni_policy = aws.iam.RolePolicyAttachment(
            f"{name}-vpc-cni-AmazonEKS_CNI_Policy",
            role=cni_role.name,
            policy_arn=managed_policy_arn(cfg.region, "AmazonEKS_CNI_Policy"),
            opts=child,
        )

        pins = versions.EKS_ADDON_VERSIONS[spec.kubernetes_version]
        before_nodes = []
        for addon in ADDONS_BEFORE_NODES:
            before_nodes.append(
                aws.eks.Addon(
                    f"{name}-addon-{addon}",
                    cluster_name=eks.name,
                    addon_name=addon,
                    addon_version=pins[addon],
                    service_account_role_arn=cni_role.arn if addon == "vpc-cni" else None,
                    resolve_conflicts_on_create="OVERWRITE",
                    resolve_conflicts_on_update="OVERWRITE",
                    tags=platform,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[cni_policy] if addon == "vpc-cni" else []),
                )
            )

        self.system_node_group = system_node_group(
            f"{name}-system",
            environment=cfg.environment,
            spec=spec.system_nodes,
            cluster_name=eks.name,
            kubernetes_version=spec.kubernetes_version,
            node_role_arn=self._node_role.arn,
            subnet_ids=self.network.private_subnet_ids,
            extra_tags=dict(cfg.default_tags),
            parent=self,
            depends_on=before_nodes,
        )
        for addon in ADDONS_AFTER_NODES:
            aws.eks.Addon(
                f"{name}-addon-{addon}",
                cluster_name=eks.name,
                addon_name=addon,
                addon_version=pins[addon],
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                tags=platform,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_node_group]),
            )

    # --- existing cluster -----------------------------------------------------------------------------------

    def _existing(self, spec: ExistingCluster) -> None:
        invoke = pulumi.InvokeOptions(parent=self)
        found = aws.eks.get_cluster_output(name=spec.name, opts=invoke)
        self._found = found
        self._node_subnet_ids = list(spec.node_subnet_ids)
        self.name = found.name
        self.arn = found.arn
        self.endpoint = found.endpoint
        self.certificate_authority_data = found.certificate_authorities.apply(lambda cas: cas[0].data)
        self.oidc_issuer_url = found.identities.apply(lambda ids: ids[0].oidcs[0].issuer)
        self.cluster_security_group_id = found.vpc_config.apply(lambda v: v.cluster_security_group_id)
        self.vpc_id = found.vpc_config.apply(lambda v: v.vpc_id)
        # The IAM OIDC provider of an existing cluster is the owner's (eksctl utils associate-iam-oidc-provider);
        # its ARN follows from the issuer URL and the account.
        account = aws.get_caller_identity_output(opts=invoke).account_id
        partition = partition_for(self._cfg.region)
        self.oidc_provider_arn = pulumi.Output.all(account, self.oidc_issuer_url).apply(
            lambda a: f"arn:{partition}:iam::{a[0]}:oidc-provider/{a[1].removeprefix('https://')}"
        )
        self.private_subnet_ids = self._lookup_subnets(list(spec.availability_zones))

    def _lookup_subnets(self, availability_zones: list[str]) -> pulumi.Output[list[str]]:
        # The subnets named in config (cluster.node_subnet_ids), or else the cluster's own subnets that assign no
        # public IPs; optionally only those in given AZs. The default is a guess: some VPC modules create public
        # subnets that do not assign public IPs either, and nodes there have no NAT route, hence the config key.
        def filters(vpc_config) -> list[aws.ec2.GetSubnetsFilterArgs]:
            if self._node_subnet_ids:
                out = [aws.ec2.GetSubnetsFilterArgs(name="subnet-id", values=self._node_subnet_ids)]
            else:
                out = [
                    aws.ec2.GetSubnetsFilterArgs(name="subnet-id", values=list(vpc_config.subnet_ids)),
                    aws.ec2.GetSubnetsFilterArgs(name="map-public-ip-on-launch", values=["false"]),
                ]
            if availability_zones:
                out.append(aws.ec2.GetSubnetsFilterArgs(name="availability-zone", values=availability_zones))
            return out

        found = aws.ec2.get_subnets_output(
            filters=self._found.vpc_config.apply(filters), opts=pulumi.InvokeOptions(parent=self)
        )
        return found.ids


def irsa_trust_policy(
    provider_arn: pulumi.Input[str], issuer_url: pulumi.Input[str], namespace: str, service_account: str
) -> pulumi.Output[str]:
    """Trust policy letting exactly one Kubernetes service account assume a role through the cluster's OIDC."""

    def render(args: list[str]) -> str:
        arn, issuer = args
        host = issuer.removeprefix("https://")
        return json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Federated": arn},
                        "Action": "sts:AssumeRoleWithWebIdentity",
                        "Condition": {
                            "StringEquals": {
                                f"{host}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                                f"{host}:aud": "sts.amazonaws.com",
                            }
                        },
                    }
                ],
            }
        )

    return pulumi.Output.all(provider_arn, issuer_url).apply(render)
