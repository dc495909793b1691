"""What each declared resource type needs from IAM, and the CI roles' policies derived from it.

The table below lists, per Pulumi resource type the program declares, the IAM actions the provider calls to
refresh (read), create, update and delete it, with the source each list was read from. The preview role gets the
read actions of the types the stack declares (nothing else); the deploy role gets all four, each mutation scoped
to this environment by resource name (ARN pattern), IAM path, or the `gpuloan:environment` tag, per service
(SCOPE_BY_SERVICE). tests/stacks/test_gitops_permissions.py walks every resource of the dev and prod plans: a type without
an entry, or an action the roles do not grant, fails it; tests/stacks/test_gitops_requests.py evaluates each create, update
and delete request (ARN and context) against the generated documents.

Sources, by service (AWS Service Authorization Reference, "Actions, resources, and condition keys for <service>",
https://docs.aws.amazon.com/service-authorization/latest/reference/list_<service>.html) name the actions, their
resource types and condition keys; which API calls the Terraform-based provider makes per operation is read from
the provider's resource docs (https://www.pulumi.com/registry/packages/aws/api-docs/) and its CRUD functions.

Pure module: no Pulumi resources, so the table, the policies and the docs table are plain data tests can read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from config import tags

SAR = "https://docs.aws.amazon.com/service-authorization/latest/reference/list_{}.html"


@dataclass(frozen=True)
class Needs:
    """IAM actions per Pulumi operation of one resource type."""

    read: tuple[str, ...]
    create: tuple[str, ...]
    update: tuple[str, ...]
    delete: tuple[str, ...]
    source: str

    @property
    def mutating(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.create) | set(self.update) | set(self.delete)))


def _n(read: str, create: str, update: str, delete: str, source: str) -> Needs:
    split = lambda s: tuple(sorted(set(s.split())))  # noqa: E731 - one-line table cells
    return Needs(split(read), split(create), split(update), split(delete), source)


_EC2 = SAR.format("amazonec2")
_EC2_TAGS = "ec2:CreateTags ec2:DeleteTags"
_LAMBDA_VPC = "ec2:DescribeSecurityGroups ec2:DescribeSubnets ec2:DescribeVpcs"

# Pulumi type token -> what refresh / create / update / delete call.
TABLE: dict[str, Needs] = {
    "aws:budgets/budget:Budget": _n(
        # ViewBudget is the one read action of the Budgets API (DescribeBudget, DescribeNotificationsForBudget,
        # DescribeSubscribersForNotification all authorize as it); no Describe*/Get* wildcard matches it.
        "budgets:ViewBudget budgets:ListTagsForResource",
        "budgets:ModifyBudget budgets:TagResource",
        "budgets:ModifyBudget budgets:TagResource budgets:UntagResource",
        "budgets:ModifyBudget",
        SAR.format("awsbudgetservice"),
    ),
    "aws:cloudwatch/dashboard:Dashboard": _n(
        "cloudwatch:GetDashboard",
        "cloudwatch:PutDashboard",
        "cloudwatch:PutDashboard",
        "cloudwatch:DeleteDashboards",
        SAR.format("amazoncloudwatch"),
    ),
    "aws:cloudwatch/logGroup:LogGroup": _n(
        "logs:DescribeLogGroups logs:ListTagsForResource",
        "logs:CreateLogGroup logs:PutRetentionPolicy logs:TagResource",
        "logs:PutRetentionPolicy logs:DeleteRetentionPolicy logs:TagResource logs:UntagResource",
        "logs:DeleteLogGroup",
        SAR.format("amazoncloudwatchlogs"),
    ),
    "aws:cloudwatch/metricAlarm:MetricAlarm": _n(
        "cloudwatch:DescribeAlarms cloudwatch:ListTagsForResource",
        "cloudwatch:PutMetricAlarm cloudwatch:TagResource",
        "cloudwatch:PutMetricAlarm cloudwatch:TagResource cloudwatch:UntagResource",
        "cloudwatch:DeleteAlarms",
        SAR.format("amazoncloudwatch"),
    ),
    "aws:costexplorer/costAllocationTag:CostAllocationTag": _n(
        "ce:ListCostAllocationTags",
        "ce:UpdateCostAllocationTagsStatus",
        "ce:UpdateCostAllocationTagsStatus",
        "ce:UpdateCostAllocationTagsStatus",
        SAR.format("awscostexplorerservice"),
    ),
    "aws:dynamodb/table:Table": _n(
        # Table configuration only: GetItem/Query/Scan (the policy state) are never needed to refresh it.
        "dynamodb:DescribeTable dynamodb:DescribeContinuousBackups dynamodb:DescribeTimeToLive "
        "dynamodb:ListTagsOfResource",
        "dynamodb:CreateTable dynamodb:UpdateContinuousBackups dynamodb:TagResource",
        "dynamodb:UpdateTable dynamodb:UpdateContinuousBackups dynamodb:UpdateTimeToLive dynamodb:TagResource "
        "dynamodb:UntagResource",
        "dynamodb:DeleteTable",
        SAR.format("amazondynamodb"),
    ),
    "aws:ec2/capacityReservation:CapacityReservation": _n(
        "ec2:DescribeCapacityReservations",
        f"ec2:CreateCapacityReservation {_EC2_TAGS}",
        f"ec2:ModifyCapacityReservation {_EC2_TAGS}",
        "ec2:CancelCapacityReservation",
        _EC2,
    ),
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup": _n(
        "ec2:DescribeSecurityGroups ec2:DescribeSecurityGroupRules",
        f"ec2:RevokeSecurityGroupIngress ec2:RevokeSecurityGroupEgress {_EC2_TAGS}",
        f"ec2:AuthorizeSecurityGroupIngress ec2:AuthorizeSecurityGroupEgress ec2:RevokeSecurityGroupIngress "
        f"ec2:RevokeSecurityGroupEgress {_EC2_TAGS}",
        "",
        _EC2 + " (the provider adopts the VPC's default group; delete only forgets it)",
    ),
    "aws:ec2/eip:Eip": _n(
        "ec2:DescribeAddresses ec2:DescribeAddressesAttribute",
        f"ec2:AllocateAddress {_EC2_TAGS}",
        _EC2_TAGS,
        "ec2:ReleaseAddress ec2:DisassociateAddress",
        _EC2,
    ),
    "aws:ec2/internetGateway:InternetGateway": _n(
        "ec2:DescribeInternetGateways",
        f"ec2:CreateInternetGateway ec2:AttachInternetGateway {_EC2_TAGS}",
        f"ec2:AttachInternetGateway ec2:DetachInternetGateway {_EC2_TAGS}",
        "ec2:DetachInternetGateway ec2:DeleteInternetGateway",
        _EC2,
    ),
    "aws:ec2/launchTemplate:LaunchTemplate": _n(
        "ec2:DescribeLaunchTemplates ec2:DescribeLaunchTemplateVersions",
        f"ec2:CreateLaunchTemplate {_EC2_TAGS}",
        f"ec2:CreateLaunchTemplateVersion ec2:ModifyLaunchTemplate {_EC2_TAGS}",
        "ec2:DeleteLaunchTemplate",
        _EC2,
    ),
    "aws:ec2/natGateway:NatGateway": _n(
        "ec2:DescribeNatGateways", f"ec2:CreateNatGateway {_EC2_TAGS}", _EC2_TAGS, "ec2:DeleteNatGateway", _EC2
    ),
    "aws:ec2/routeTable:RouteTable": _n(
        "ec2:DescribeRouteTables",
        f"ec2:CreateRouteTable ec2:CreateRoute {_EC2_TAGS}",
        f"ec2:CreateRoute ec2:ReplaceRoute ec2:DeleteRoute {_EC2_TAGS}",
        "ec2:DeleteRouteTable ec2:DeleteRoute",
        _EC2,
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": _n(
        "ec2:DescribeRouteTables",
        "ec2:AssociateRouteTable",
        "ec2:ReplaceRouteTableAssociation",
        "ec2:DisassociateRouteTable",
        _EC2,
    ),
    "aws:ec2/securityGroup:SecurityGroup": _n(
        "ec2:DescribeSecurityGroups ec2:DescribeSecurityGroupRules",
        # The provider removes the default allow-all egress rule AWS adds, then authorizes the declared ones.
        f"ec2:CreateSecurityGroup ec2:AuthorizeSecurityGroupEgress ec2:RevokeSecurityGroupEgress "
        f"ec2:AuthorizeSecurityGroupIngress {_EC2_TAGS}",
        f"ec2:AuthorizeSecurityGroupEgress ec2:RevokeSecurityGroupEgress ec2:AuthorizeSecurityGroupIngress "
        f"ec2:RevokeSecurityGroupIngress ec2:UpdateSecurityGroupRuleDescriptionsEgress "
        f"ec2:UpdateSecurityGroupRuleDescriptionsIngress {_EC2_TAGS}",
        "ec2:DeleteSecurityGroup ec2:DescribeNetworkInterfaces",
        _EC2,
    ),
    "aws:ec2/subnet:Subnet": _n(
        "ec2:DescribeSubnets",
        f"ec2:CreateSubnet ec2:ModifySubnetAttribute {_EC2_TAGS}",
        f"ec2:ModifySubnetAttribute {_EC2_TAGS}",
        "ec2:DeleteSubnet ec2:DescribeNetworkInterfaces",
        _EC2,
    ),
    "aws:ec2/vpc:Vpc": _n(
        # The provider also reads the VPC's default security group, main route table and default network ACL.
        "ec2:DescribeVpcs ec2:DescribeVpcAttribute ec2:DescribeSecurityGroups ec2:DescribeRouteTables "
        "ec2:DescribeNetworkAcls",
        f"ec2:CreateVpc ec2:ModifyVpcAttribute {_EC2_TAGS}",
        f"ec2:ModifyVpcAttribute {_EC2_TAGS}",
        "ec2:DeleteVpc",
        _EC2,
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": _n(
        "ec2:DescribeSecurityGroupRules",
        f"ec2:AuthorizeSecurityGroupIngress {_EC2_TAGS}",
        f"ec2:ModifySecurityGroupRules {_EC2_TAGS}",
        "ec2:RevokeSecurityGroupIngress",
        _EC2,
    ),
    "aws:ecr/repository:Repository": _n(
        "ecr:DescribeRepositories ecr:ListTagsForResource",
        "ecr:CreateRepository ecr:TagResource",
        "ecr:PutImageTagMutability ecr:PutImageScanningConfiguration ecr:TagResource ecr:UntagResource",
        # force_delete deletes the images with the repository (issue 12 item 6).
        "ecr:DeleteRepository ecr:ListImages ecr:BatchDeleteImage",
        SAR.format("amazonelasticcontainerregistry"),
    ),
    "aws:ecr/lifecyclePolicy:LifecyclePolicy": _n(
        "ecr:GetLifecyclePolicy",
        "ecr:PutLifecyclePolicy",
        "ecr:PutLifecyclePolicy",
        "ecr:DeleteLifecyclePolicy",
        SAR.format("amazonelasticcontainerregistry"),
    ),
    "aws:eks/accessEntry:AccessEntry": _n(
        "eks:DescribeAccessEntry eks:ListTagsForResource",
        "eks:CreateAccessEntry eks:TagResource",
        "eks:UpdateAccessEntry eks:TagResource eks:UntagResource",
        "eks:DeleteAccessEntry",
        SAR.format("amazonelastickubernetesservice"),
    ),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": _n(
        "eks:ListAssociatedAccessPolicies",
        "eks:AssociateAccessPolicy",
        "eks:AssociateAccessPolicy",
        "eks:DisassociateAccessPolicy",
        SAR.format("amazonelastickubernetesservice"),
    ),
    "aws:eks/addon:Addon": _n(
        "eks:DescribeAddon eks:ListTagsForResource",
        "eks:CreateAddon eks:TagResource iam:PassRole",  # service_account_role_arn is passed to EKS
        "eks:UpdateAddon eks:TagResource eks:UntagResource iam:PassRole",
        "eks:DeleteAddon",
        SAR.format("amazonelastickubernetesservice"),
    ),
    "aws:eks/cluster:Cluster": _n(
        "eks:DescribeCluster eks:ListTagsForResource",
        # CreateCluster passes the cluster role; secrets encryption needs DescribeKey and CreateGrant on the key
        # (EKS user guide "Encrypt Kubernetes secrets with KMS"); the first cluster creates EKS's service role.
        "eks:CreateCluster eks:TagResource iam:PassRole kms:DescribeKey kms:CreateGrant iam:CreateServiceLinkedRole",
        "eks:UpdateClusterConfig eks:UpdateClusterVersion eks:AssociateEncryptionConfig eks:TagResource "
        "eks:UntagResource eks:DescribeUpdate",
        "eks:DeleteCluster",
        SAR.format("amazonelastickubernetesservice"),
    ),
    "aws:eks/nodeGroup:NodeGroup": _n(
        "eks:DescribeNodegroup eks:ListTagsForResource",
        "eks:CreateNodegroup eks:TagResource iam:PassRole iam:CreateServiceLinkedRole "
        "ec2:DescribeLaunchTemplateVersions",
        "eks:UpdateNodegroupConfig eks:UpdateNodegroupVersion eks:TagResource eks:UntagResource eks:DescribeUpdate",
        "eks:DeleteNodegroup",
        SAR.format("amazonelastickubernetesservice"),
    ),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": _n(
        "eks:DescribePodIdentityAssociation eks:ListTagsForResource",
        "eks:CreatePodIdentityAssociation eks:TagResource iam:PassRole iam:GetRole",
        "eks:UpdatePodIdentityAssociation eks:TagResource eks:UntagResource iam:PassRole iam:GetRole",
        "eks:DeletePodIdentityAssociation",
        SAR.format("amazonelastickubernetesservice"),
    ),
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": _n(
        "iam:GetOpenIDConnectProvider",
        "iam:CreateOpenIDConnectProvider iam:TagOpenIDConnectProvider",
        "iam:UpdateOpenIDConnectProviderThumbprint iam:AddClientIDToOpenIDConnectProvider "
        "iam:RemoveClientIDFromOpenIDConnectProvider iam:TagOpenIDConnectProvider iam:UntagOpenIDConnectProvider",
        "iam:DeleteOpenIDConnectProvider",
        SAR.format("awsidentityandaccessmanagementiam"),
    ),
    "aws:iam/policy:Policy": _n(
        "iam:GetPolicy iam:GetPolicyVersion iam:ListPolicyVersions iam:ListPolicyTags",
        "iam:CreatePolicy iam:TagPolicy",
        "iam:CreatePolicyVersion iam:DeletePolicyVersion iam:ListPolicyVersions iam:TagPolicy iam:UntagPolicy",
        "iam:DeletePolicy iam:DeletePolicyVersion iam:ListPolicyVersions",
        SAR.format("awsidentityandaccessmanagementiam"),
    ),
    "aws:iam/role:Role": _n(
        # The provider reads inline and attached policies too (its inline_policy/managed_policy_arns outputs).
        "iam:GetRole iam:ListRolePolicies iam:ListAttachedRolePolicies",
        "iam:CreateRole iam:TagRole iam:PutRolePermissionsBoundary",
        "iam:UpdateRole iam:UpdateRoleDescription iam:UpdateAssumeRolePolicy iam:TagRole iam:UntagRole "
        "iam:PutRolePermissionsBoundary",
        "iam:DeleteRole iam:ListInstanceProfilesForRole",
        SAR.format("awsidentityandaccessmanagementiam"),
    ),
    "aws:iam/rolePolicy:RolePolicy": _n(
        "iam:GetRolePolicy",
        "iam:PutRolePolicy",
        "iam:PutRolePolicy",
        "iam:DeleteRolePolicy",
        SAR.format("awsidentityandaccessmanagementiam"),
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": _n(
        "iam:ListAttachedRolePolicies",
        "iam:AttachRolePolicy",
        "iam:AttachRolePolicy",
        "iam:DetachRolePolicy",
        SAR.format("awsidentityandaccessmanagementiam"),
    ),
    "aws:kms/alias:Alias": _n(
        "kms:ListAliases",
        "kms:CreateAlias",
        "kms:UpdateAlias",
        "kms:DeleteAlias",
        SAR.format("awskeymanagementservice"),
    ),
    "aws:kms/key:Key": _n(
        # Key metadata, policy, rotation and tags. Never kms:Decrypt: refreshing a key reads no ciphertext.
        "kms:DescribeKey kms:GetKeyPolicy kms:GetKeyRotationStatus kms:ListResourceTags",
        "kms:CreateKey kms:EnableKeyRotation kms:PutKeyPolicy kms:TagResource",
        "kms:PutKeyPolicy kms:EnableKeyRotation kms:DisableKeyRotation kms:UpdateKeyDescription kms:TagResource "
        "kms:UntagResource",
        "kms:ScheduleKeyDeletion",
        SAR.format("awskeymanagementservice"),
    ),
    "aws:lambda/function:Function": _n(
        # GetFunction is the provider's read and returns the environment variables and a code download URL; no
        # narrower read exists (GetFunctionConfiguration returns the environment too). The function's environment
        # holds settings, never a secret (stacks/policy_function/function.py).
        "lambda:GetFunction lambda:GetFunctionCodeSigningConfig lambda:ListVersionsByFunction",
        # A function with a VPC configuration: Lambda checks that the caller may describe its subnets, security
        # groups and VPC (Lambda developer guide, "Configuring a Lambda function to access resources in a VPC").
        f"lambda:CreateFunction lambda:PutFunctionConcurrency lambda:TagResource iam:PassRole {_LAMBDA_VPC}",
        "lambda:UpdateFunctionCode lambda:UpdateFunctionConfiguration lambda:PutFunctionConcurrency "
        f"lambda:DeleteFunctionConcurrency lambda:TagResource lambda:UntagResource iam:PassRole {_LAMBDA_VPC}",
        "lambda:DeleteFunction",
        SAR.format("awslambda"),
    ),
    "aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig": _n(
        "lambda:GetFunctionEventInvokeConfig",
        "lambda:PutFunctionEventInvokeConfig",
        "lambda:PutFunctionEventInvokeConfig lambda:UpdateFunctionEventInvokeConfig",
        "lambda:DeleteFunctionEventInvokeConfig",
        SAR.format("awslambda"),
    ),
    # The spot interruption warning rule of the policy function (stacks/policy_function/function.py).
    "aws:cloudwatch/eventRule:EventRule": _n(
        "events:DescribeRule events:ListTagsForResource",
        "events:PutRule events:TagResource",
        "events:PutRule events:TagResource events:UntagResource",
        "events:DeleteRule",
        SAR.format("amazoneventbridge"),
    ),
    "aws:cloudwatch/eventTarget:EventTarget": _n(
        "events:ListTargetsByRule",
        "events:PutTargets",
        "events:PutTargets",
        "events:RemoveTargets",
        SAR.format("amazoneventbridge"),
    ),
    "aws:lambda/permission:Permission": _n(
        "lambda:GetPolicy",
        "lambda:AddPermission",
        "lambda:AddPermission lambda:RemovePermission",
        "lambda:RemovePermission",
        SAR.format("awslambda"),
    ),
    "aws:scheduler/schedule:Schedule": _n(
        "scheduler:GetSchedule",
        "scheduler:CreateSchedule iam:PassRole",
        "scheduler:UpdateSchedule iam:PassRole",
        "scheduler:DeleteSchedule",
        SAR.format("amazoneventbridgescheduler"),
    ),
    "aws:sns/topic:Topic": _n(
        "sns:GetTopicAttributes sns:ListTagsForResource",
        "sns:CreateTopic sns:SetTopicAttributes sns:TagResource",
        "sns:SetTopicAttributes sns:TagResource sns:UntagResource",
        "sns:DeleteTopic",
        SAR.format("amazonsns"),
    ),
    "aws:sns/topicPolicy:TopicPolicy": _n(
        "sns:GetTopicAttributes",
        "sns:SetTopicAttributes",
        "sns:SetTopicAttributes",
        "sns:SetTopicAttributes",
        SAR.format("amazonsns"),
    ),
    "aws:sns/topicSubscription:TopicSubscription": _n(
        "sns:GetSubscriptionAttributes",
        "sns:Subscribe sns:GetSubscriptionAttributes",
        "sns:SetSubscriptionAttributes",
        "sns:Unsubscribe",
        SAR.format("amazonsns"),
    ),
    "aws:sqs/queue:Queue": _n(
        # Attributes and tags only: ReceiveMessage (the dead letters) is never needed to refresh the queue.
        "sqs:GetQueueAttributes sqs:GetQueueUrl sqs:ListQueueTags",
        "sqs:CreateQueue sqs:SetQueueAttributes sqs:TagQueue",
        "sqs:SetQueueAttributes sqs:TagQueue sqs:UntagQueue",
        "sqs:DeleteQueue",
        SAR.format("amazonsqs"),
    ),
    "aws:ssm/parameter:Parameter": _n(
        # Listed ahead of use (policy settings may move to a parameter, issue 12 item 7). A String parameter's
        # value comes with GetParameter; the roles never get kms:Decrypt, so a SecureString stays unreadable.
        "ssm:GetParameter ssm:DescribeParameters ssm:ListTagsForResource",
        "ssm:PutParameter ssm:AddTagsToResource",
        "ssm:PutParameter ssm:AddTagsToResource ssm:RemoveTagsFromResource",
        "ssm:DeleteParameter",
        SAR.format("awssystemsmanager"),
    ),
    # Images are pushed to this stack's ECR repositories (ECR user guide "Required IAM permissions for pushing an
    # image"); a refresh reads the pushed manifest only (BatchGetImage), never a layer. Deleting the resource does
    # not delete the image from the registry (docker-build provider docs), the repository's force_delete does.
    "docker-build:index:Image": _n(
        "ecr:BatchGetImage ecr:DescribeImages ecr:GetAuthorizationToken",
        "ecr:GetAuthorizationToken ecr:BatchCheckLayerAvailability ecr:InitiateLayerUpload ecr:UploadLayerPart "
        "ecr:CompleteLayerUpload ecr:PutImage ecr:BatchGetImage ecr:GetDownloadUrlForLayer",
        "ecr:GetAuthorizationToken ecr:BatchCheckLayerAvailability ecr:InitiateLayerUpload ecr:UploadLayerPart "
        "ecr:CompleteLayerUpload ecr:PutImage ecr:BatchGetImage ecr:GetDownloadUrlForLayer",
        "",
        "https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-push-iam.html",
    ),
}

# Data sources (invokes) the program calls, with the read actions they need. getCallerIdentity needs no
# permission (STS GetCallerIdentity is always allowed); getPartition/getRegion answer from the provider config.
INVOKES: dict[str, tuple[str, ...]] = {
    "aws:index/getCallerIdentity:getCallerIdentity": (),
    "aws:index/getPartition:getPartition": (),
    "aws:index/getRegion:getRegion": (),
    "aws:ec2/getSubnets:getSubnets": ("ec2:DescribeSubnets",),
    "aws:eks/getCluster:getCluster": ("eks:DescribeCluster",),
    # stacks/capacity/live_sizes.py: the elastic groups' live sizes, so a lower max_nodes never sends desired > max.
    "aws:eks/getNodeGroups:getNodeGroups": ("eks:ListNodegroups",),
    "aws:eks/getNodeGroup:getNodeGroup": ("eks:DescribeNodegroup",),
    "aws:ecr/getAuthorizationToken:getAuthorizationToken": ("ecr:GetAuthorizationToken",),
}

# Read-only price lookups of the live-prices work (Price List, spot history, Savings Plans and Capacity Block
# offerings), granted to both roles so previews and deploys can price the plan. None of them can change anything.
# `gpuloan prices refresh` (the weekly prices workflow, as the preview role) also reads which types the region
# offers, the facts of a type the offline catalog lacks, and the EKS version's support status
# (tests/pricing/test_prices_requests.py records every call it makes and checks each against the preview role).
PRICING_ACTIONS = (
    "ec2:DescribeCapacityBlockOfferings",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeSpotPriceHistory",
    "eks:DescribeClusterVersions",
    "pricing:GetProducts",
    "savingsplans:DescribeSavingsPlansOfferingRates",
)
# `gpuloan cost-report` reads actual spend; no workflow runs it with these roles, so neither role has it.
COST_REPORT_ACTIONS = ("ce:GetCostAndUsage",)

# Types that need no IAM action of the CI roles, and why.
NO_IAM_NEEDED = {
    "pulumi:providers:aws": "a provider configuration, not a cloud resource",
    "pulumi:providers:kubernetes": "a provider configuration; its kubeconfig runs `aws eks get-token`, a presigned "
    "sts:GetCallerIdentity that needs no permission",
}

# Kubernetes kinds: no IAM action (the EKS access entry admits the role), but the preview reader ClusterRole must
# list them: type token -> (API group, resource).
KUBERNETES_KINDS: dict[str, tuple[str, str]] = {
    "kubernetes:core/v1:ConfigMap": ("", "configmaps"),
    "kubernetes:core/v1:LimitRange": ("", "limitranges"),
    "kubernetes:core/v1:Namespace": ("", "namespaces"),
    "kubernetes:core/v1:ResourceQuota": ("", "resourcequotas"),
    "kubernetes:core/v1:ServiceAccount": ("", "serviceaccounts"),
    "kubernetes:helm.sh/v3:Release": ("", "secrets"),  # Helm's release records: see preview_kubernetes_rules
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole": ("rbac.authorization.k8s.io", "clusterroles"),
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings"),
    "kubernetes:rbac.authorization.k8s.io/v1:Role": ("rbac.authorization.k8s.io", "roles"),
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "kubernetes:scheduling.k8s.io/v1:PriorityClass": ("scheduling.k8s.io", "priorityclasses"),
    # Kueue's objects (stacks/kubernetes/kueue.py), served by the CRDs its chart installs.
    "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue": ("kueue.x-k8s.io", "clusterqueues"),
    "kubernetes:kueue.x-k8s.io/v1beta2:Cohort": ("kueue.x-k8s.io", "cohorts"),
    "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue": ("kueue.x-k8s.io", "localqueues"),
    "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor": ("kueue.x-k8s.io", "resourceflavors"),
    "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass": ("kueue.x-k8s.io", "workloadpriorityclasses"),
}


def needs_for(type_: str) -> Needs | None:
    return TABLE.get(type_)


def missing_types(types: Iterable[str]) -> list[str]:
    """Declared types the table says nothing about (components are not resources and need nothing)."""
    return sorted({t for t in types if t not in TABLE and t not in NO_IAM_NEEDED and t not in KUBERNETES_KINDS})


def _service(action: str) -> str:
    return action.split(":", 1)[0]


def _is_read(action: str) -> bool:
    return action.split(":", 1)[1].startswith(("Describe", "Get", "List", "View", "BatchGet"))


def read_actions(types: Iterable[str], invokes: Iterable[str] = ()) -> list[str]:
    out: set[str] = set(PRICING_ACTIONS)
    for t in types:
        if t in TABLE:
            out |= set(TABLE[t].read)
    for token in invokes:
        out |= set(INVOKES.get(token, ()))
    return sorted(out)


def mutating_actions(types: Iterable[str]) -> list[str]:
    out: set[str] = set()
    for t in types:
        if t in TABLE:
            out |= set(TABLE[t].mutating)
    # Reads needed inside a create/update (e.g. DescribeLaunchTemplateVersions) join the read statement.
    return sorted(a for a in out if not _is_read(a))


def inner_reads(types: Iterable[str]) -> list[str]:
    """Read actions the provider calls while creating/updating (waiters), beyond the refresh reads."""
    out: set[str] = set()
    for t in types:
        if t in TABLE:
            out |= {a for a in TABLE[t].mutating if _is_read(a)}
    return sorted(out)


# --- scoping -----------------------------------------------------------------------------------------------

ENV_TAG = tags.TAG_ENVIRONMENT


# IAM paths. The stack's workload roles live under workload_path, which the deploy role may manage; the CI roles,
# their policies and the permissions boundary live under ci_path, which only an administrator's `pulumi up` may
# change (a deploy role that could edit its own policy or the boundary could lift both).
def workload_path(env: str) -> str:
    return f"/gpuloan/{env}/"


def ci_path(env: str) -> str:
    return f"/gpuloan-ci/{env}/"


def boundary_name(env: str) -> str:
    return f"gpuloan-{env}-boundary"


@dataclass(frozen=True)
class Scope:
    """Where the deploy role's mutations of this environment may land."""

    partition: str
    account: str
    region: str
    env: str
    cluster_name: str

    def arn(self, service: str, rest: str, region: bool = True, account: bool = True) -> str:
        return (
            f"arn:{self.partition}:{service}:{self.region if region else ''}:{self.account if account else ''}:{rest}"
        )

    @property
    def prefix(self) -> str:
        return f"gpuloan-{self.env}"

    @property
    def boundary_arn(self) -> str:
        return self.arn("iam", f"policy{ci_path(self.env)}{boundary_name(self.env)}", region=False)


# Services whose mutations are scoped by resource ARN (name prefix): service -> ARN patterns for a Scope.
def _named_resources(s: Scope) -> dict[str, list[str]]:
    p = s.prefix
    return {
        "budgets": [s.arn("budgets", f"budget/{p}", region=False), s.arn("budgets", f"budget/{p}-*", region=False)],
        "cloudwatch": [
            s.arn("cloudwatch", f"alarm:{p}-*"),
            s.arn("cloudwatch", f"dashboard/{p}", region=False),
            s.arn("cloudwatch", f"dashboard/{p}-*", region=False),
        ],
        "logs": [
            s.arn("logs", f"log-group:/aws/eks/{s.cluster_name}/*"),
            s.arn("logs", f"log-group:/aws/lambda/{p}-*"),
        ],
        "dynamodb": [s.arn("dynamodb", f"table/{p}-*")],
        "sqs": [s.arn("sqs", f"{p}-*")],
        "sns": [s.arn("sns", f"{p}-*")],
        "lambda": [s.arn("lambda", f"function:{p}-*")],
        "scheduler": [s.arn("scheduler", f"schedule/default/{p}-*")],
        "events": [s.arn("events", f"rule/{p}-*")],
        "ecr": [s.arn("ecr", f"repository/gpuloan/{s.env}/*")],
        "ssm": [s.arn("ssm", f"parameter/gpuloan/{s.env}/*")],
        # Every EKS ARN below the cluster carries the cluster's name: cluster/<name>, nodegroup/<name>/...,
        # addon/<name>/..., access-entry/<name>/..., podidentityassociation/<name>/... .
        "eks": [s.arn("eks", f"cluster/{s.cluster_name}"), s.arn("eks", f"*/{s.cluster_name}/*")],
        "kms": [s.arn("kms", f"alias/{p}-*")],
    }


# Actions AWS authorizes only on "*" (no resource-level permission), with why that is acceptable.
UNSCOPABLE: dict[str, str] = {
    "ce:UpdateCostAllocationTagsStatus": "account-wide setting without a resource type; it only switches tag "
    "keys on or off for cost reports and cannot spend or read",
    "ecr:GetAuthorizationToken": "no resource type; the registry token it returns is limited to what the role "
    "may do in ECR (its own repositories)",
    "sns:Unsubscribe": "the Service Authorization Reference lists no resource type and no condition key for it "
    "(Subscribe has the topic, Unsubscribe nothing), so it is granted on `*` in the stack's region "
    "only (`aws:RequestedRegion`); it can only remove a subscription (alerts of another stack in "
    "the same region could be muted, not read or changed)",
}
# Actions the deploy role is never granted: the administrator's `pulumi up` makes these changes (docs/gitops.md,
# "Keys are the administrator's"). A deploy whose plan needs one fails with AccessDenied before anything else of
# that resource happens.
ADMINISTRATOR_ONLY: dict[str, str] = {
    "kms:CreateKey": "tags sent with CreateKey need kms:TagResource in an IAM policy that is not restricted to "
    'particular keys (KMS developer guide, "Controlling access to tags"), and KMS has no condition '
    "that tells a new key from an existing one (no ec2:CreateAction): the grant would let the role "
    "tag, then re-policy, grant or delete, any untagged key of the region (issue 42). Keys are "
    "created by the administrator's `pulumi up`, which creates the CI roles too",
    "iam:CreateOpenIDConnectProvider": "the same for the cluster's IRSA provider: its ARN names an issuer ID "
    "EKS assigns (not a name of this environment), and tags sent with the "
    "create need iam:TagOpenIDConnectProvider on a provider without tags, which "
    "every other cluster's untagged provider in the account would satisfy. It "
    "is created with the cluster, by the administrator's first `pulumi up`",
}
# UNSCOPABLE actions that are still limited to the stack's region (global condition key aws:RequestedRegion).
REGION_ONLY = ("sns:Unsubscribe",)
# Create actions authorized with a tag the request must carry (aws:RequestTag), the new resource has no tags yet.
TAG_ON_CREATE: dict[str, str] = {
    # EC2 action -> the resource type it creates (its ARN "type/")
    "ec2:CreateVpc": "vpc",
    "ec2:CreateSubnet": "subnet",
    "ec2:CreateRouteTable": "route-table",
    "ec2:CreateInternetGateway": "internet-gateway",
    "ec2:CreateNatGateway": "natgateway",
    "ec2:AllocateAddress": "elastic-ip",
    "ec2:CreateSecurityGroup": "security-group",
    "ec2:CreateLaunchTemplate": "launch-template",
    "ec2:CreateCapacityReservation": "capacity-reservation",
    "ec2:AuthorizeSecurityGroupIngress": "security-group-rule",
    "ec2:AuthorizeSecurityGroupEgress": "security-group-rule",
}


def create_action_value(action: str) -> str:
    """The value EC2 puts in `ec2:CreateAction` for a create: the API operation's name, without the service."""
    return action.split(":", 1)[1]


def _region_condition(region: str) -> dict:
    return {"StringEquals": {"aws:RequestedRegion": region}}


def _stmt(sid: str, actions: Iterable[str], resources: list[str] | str, condition: dict | None = None) -> dict:
    st: dict = {"Sid": sid, "Effect": "Allow", "Action": sorted(set(actions)), "Resource": resources}
    if condition:
        st["Condition"] = condition
    return st


@dataclass(frozen=True)
class StateBackend:
    """A self-managed Pulumi backend in S3 (`s3://<bucket>`) and the key of its awskms:// secrets provider.

    Object layout of Pulumi's DIY backend, per project and stack: `.pulumi/stacks/<project>/<stack>.json` (the
    checkpoint, plus `.bak`/`.gz` variants), `.pulumi/history/<project>/<stack>/...`, `.pulumi/backups/...`, and
    `.pulumi/locks/organization/<project>/<stack>/<lock>.json` (docs: "State and backends", DIY backend).
    """

    bucket: str
    project: str
    stack: str
    kms_key_arn: str | None = None


def _state_statements(state: StateBackend, partition: str, write: bool) -> list[dict]:
    b = f"arn:{partition}:s3:::{state.bucket}"
    stack_state = [f"{b}/.pulumi/stacks/{state.project}/{state.stack}.json*", f"{b}/.pulumi/meta.yaml"]
    # A lock file is written and removed around every operation, a preview's too; it is not state.
    locks = f"{b}/.pulumi/locks/organization/{state.project}/{state.stack}/*"
    out = [
        _stmt("StateList", ["s3:ListBucket"], b, {"StringLike": {"s3:prefix": [".pulumi/*"]}}),
        _stmt("StateRead", ["s3:GetObject"], stack_state),
        _stmt("StateLock", ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], locks),
    ]
    if write:
        out.append(
            _stmt(
                "StateWrite",
                ["s3:PutObject", "s3:DeleteObject"],
                [
                    stack_state[0],
                    f"{b}/.pulumi/history/{state.project}/{state.stack}/*",
                    f"{b}/.pulumi/backups/{state.project}/{state.stack}/*",
                ],
            )
        )
    if state.kms_key_arn:
        actions = ["kms:Decrypt"] + (["kms:Encrypt", "kms:GenerateDataKey"] if write else [])
        out.append(_stmt("StateSecrets", actions, state.kms_key_arn))
    return out


# Preview reads that return data beyond configuration, limited to this environment's resources by ARN: Lambda's
# GetFunction returns the function's environment variables and a download URL of its code.
def _own_function_reads(s: Scope) -> list[str]:
    return _named_resources(s)["lambda"]


# ECR's BatchGetImage returns an image's manifest (its layers' digests, its configuration): a refresh of a pushed
# image needs it for this environment's repositories only (issue 42 item 3). It supports the repository resource
# type (Service Authorization Reference, Amazon ECR).
OWN_IMAGE_READS = ("ecr:BatchGetImage",)


def preview_policy_document(
    types: Iterable[str],
    invokes: Iterable[str] = (),
    state: StateBackend | None = None,
    partition: str = "aws",
    scope: Scope | None = None,
) -> dict:
    """Exactly the refresh reads of the declared types, the invokes' reads and the price lookups (and, with a
    self-managed backend, this stack's state, read-only). With `scope`, Lambda reads (GetFunction returns a
    function's environment and code) are limited to this environment's functions."""
    reads = read_actions(types, invokes)
    if scope is None:
        statements = [_stmt("RefreshDeclaredResources", reads, "*")]
    else:
        function_reads = [a for a in reads if _service(a) == "lambda"]
        image_reads = [a for a in reads if a in OWN_IMAGE_READS]
        statements = [
            _stmt(
                "RefreshDeclaredResources", [a for a in reads if a not in function_reads and a not in image_reads], "*"
            )
        ]
        if function_reads:
            statements.append(_stmt("RefreshOwnFunctions", function_reads, _own_function_reads(scope)))
        if image_reads:
            statements.append(_stmt("RefreshOwnImages", image_reads, _named_resources(scope)["ecr"]))
    if state is not None:
        statements += _state_statements(state, partition, write=False)
    return {"Version": "2012-10-17", "Statement": statements}


def deploy_policy_document(
    types: Iterable[str], scope: Scope, invokes: Iterable[str] = (), state: StateBackend | None = None
) -> dict:
    """Read what refresh reads; change only this environment's resources (SCOPE_BY_SERVICE, docs/gitops.md)."""
    types = sorted(set(types))
    s = scope
    reads = sorted(set(read_actions(types, invokes)) | set(inner_reads(types)))
    # Image manifests and layers (what an image refresh and a push read) only from this environment's repositories.
    image_reads = [a for a in reads if a in OWN_IMAGE_READS or a == "ecr:GetDownloadUrlForLayer"]
    statements = [_stmt("Refresh", [a for a in reads if a not in image_reads], "*")]
    if image_reads:
        statements.append(_stmt("ReadOwnImages", image_reads, _named_resources(s)["ecr"]))
    mutating = mutating_actions(types)
    by_service: dict[str, list[str]] = {}
    for a in mutating:
        by_service.setdefault(_service(a), []).append(a)

    named = _named_resources(s)
    for service in sorted(by_service):
        actions = [a for a in by_service[service] if a not in UNSCOPABLE]
        if service in named and service != "kms":
            statements.append(_stmt(f"Change{service.capitalize()}ByName", actions, named[service]))
        elif service == "kms":
            # No key is created by this role (ADMINISTRATOR_ONLY: tagging a new key can only be granted on every
            # key of the region). Every key action needs the key to carry this environment's tag already, and a
            # tag request may not move a key to another environment; aliases are also checked by their name.
            key = [a for a in actions if a not in ADMINISTRATOR_ONLY]
            alias = [a for a in key if "Alias" in a]
            statements.append(
                _stmt(
                    "ChangeOwnKmsKeys",
                    key,
                    s.arn("kms", "key/*"),
                    {
                        "StringEquals": {f"aws:ResourceTag/{ENV_TAG}": s.env},
                        "StringEqualsIfExists": {f"aws:RequestTag/{ENV_TAG}": s.env},
                    },
                )
            )
            if alias:
                statements.append(_stmt("ChangeOwnKmsAliases", alias, named["kms"]))
        elif service == "ec2":
            statements += _ec2_statements(actions, s)
        elif service == "iam":
            statements += _iam_statements(actions, s)
        elif service == "ce":
            pass  # only UNSCOPABLE actions
        else:
            raise ValueError(f"no deploy scope for service {service!r}: add it to stacks/gitops/iam_permissions.py")
    unscopable = sorted(a for a in mutating if a in UNSCOPABLE and a not in REGION_ONLY)
    if unscopable:
        statements.append(_stmt("UnscopableByAws", unscopable, "*"))
    region_only = sorted(a for a in mutating if a in REGION_ONLY)
    if region_only:
        # No resource type and no service condition key: the stack's region is the one scope AWS offers.
        statements.append(_stmt("UnscopableInOwnRegion", region_only, "*", _region_condition(s.region)))
    if state is not None:
        statements += _state_statements(state, s.partition, write=True)
    return {"Version": "2012-10-17", "Statement": statements}


def _ec2_statements(actions: list[str], s: Scope) -> list[dict]:
    create = sorted(a for a in actions if a in TAG_ON_CREATE)
    out = []
    for a in create:
        # The new resource is only authorized when the request tags it with this environment...
        out.append(
            _stmt(
                f"Ec2{a.split(':')[1]}Tagged",
                [a],
                s.arn("ec2", f"{TAG_ON_CREATE[a]}/*"),
                {"StringEquals": {f"aws:RequestTag/{ENV_TAG}": s.env}},
            )
        )
    # ...and tagging is only allowed as part of such a create, or on a resource this environment already owns.
    # EC2 puts the bare API name in ec2:CreateAction ("CreateLaunchTemplate", "RunInstances"), not the IAM action
    # (EC2 User Guide, "Grant permission to tag resources during creation"; docs/aws-rules.md).
    out.append(
        _stmt(
            "Ec2TagOnCreate",
            ["ec2:CreateTags"],
            s.arn("ec2", "*"),
            {
                "StringEquals": {
                    "ec2:CreateAction": [create_action_value(a) for a in create],
                    f"aws:RequestTag/{ENV_TAG}": s.env,
                }
            },
        )
    )
    # Everything else (including the existing resources a create refers to: the VPC of a new subnet, the group of
    # a new rule) needs the environment's tag on the resource.
    out.append(
        _stmt("Ec2ChangeOwn", actions, s.arn("ec2", "*"), {"StringEquals": {f"aws:ResourceTag/{ENV_TAG}": s.env}})
    )
    # The cluster security group is created by EKS, which tags it with the cluster's name, not ours.
    sg_rules = [a for a in actions if "SecurityGroup" in a]
    if sg_rules:
        out.append(
            _stmt(
                "Ec2ChangeClusterSecurityGroup",
                sg_rules,
                s.arn("ec2", "security-group/*"),
                {"StringEquals": {"aws:ResourceTag/aws:eks:cluster-name": s.cluster_name}},
            )
        )
    return out


# Role actions whose request context carries iam:PermissionsBoundary (the boundary the request sets or the role
# carries), per the Service Authorization Reference for IAM (docs/aws-rules.md, "IAM `iam:PermissionsBoundary`").
BOUNDARY_CONDITION_ACTIONS = (
    "iam:CreateRole",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
    "iam:AttachRolePolicy",
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
)
# Trust-policy edits, deletes and role settings: the key is in their context too, and they also need this
# environment's tag on the role, so a role under the path that the administrator made without the boundary (the
# deploy role cannot remove one) is never taken over through its trust policy.
ROLE_ACTIONS_BY_TAG_AND_BOUNDARY = (
    "iam:UpdateAssumeRolePolicy",
    "iam:DeleteRole",
    "iam:UpdateRole",
    "iam:UpdateRoleDescription",
)
# Role actions without that key, allowed only on roles tagged with this environment. TagRole is among them: a
# role that does not carry the tag yet cannot be given it, so the tag conditions below cannot be met by tagging
# first (issue 42). The one exception is the TagRole that IAM evaluates for the tags CreateRole sends
# (IamTagRoleOnCreate).
ROLE_ACTIONS_BY_TAG = ("iam:UntagRole", "iam:TagRole")


def _iam_statements(actions: list[str], s: Scope) -> list[dict]:
    roles = s.arn("iam", f"role{workload_path(s.env)}*", region=False)
    policies = s.arn("iam", f"policy{workload_path(s.env)}*", region=False)
    boundary = {"StringEquals": {"iam:PermissionsBoundary": s.boundary_arn}}
    own_tag = {f"aws:RequestTag/{ENV_TAG}": s.env}
    out = []
    # Creating a role, or changing what it may do, requires the boundary on it: no role it makes can exceed it.
    # These are the role actions IAM evaluates iam:PermissionsBoundary for (Service Authorization Reference, IAM);
    # for any other action the key is absent and a condition on it would refuse every request.
    with_boundary = [a for a in actions if a in BOUNDARY_CONDITION_ACTIONS and a != "iam:CreateRole"]
    out.append(_stmt("IamRolesWithBoundary", with_boundary, roles, boundary))
    if "iam:CreateRole" in actions:
        # A new role is born with this environment's tag (CreateRole supports aws:RequestTag), so every role this
        # role creates is one the tag conditions below recognise.
        out.append(
            _stmt(
                "IamCreateRolesTaggedWithBoundary",
                ["iam:CreateRole"],
                roles,
                {"StringEquals": {**boundary["StringEquals"], **own_tag}},
            )
        )
    # Trust-policy edits, deletes and role settings need the environment's tag on the role (every role the stack
    # creates has it from the provider's default tags) and the boundary on it.
    tagged_and_bounded = [a for a in actions if a in ROLE_ACTIONS_BY_TAG_AND_BOUNDARY]
    if tagged_and_bounded:
        out.append(
            _stmt(
                "IamChangeOwnTaggedBoundedRoles",
                tagged_and_bounded,
                roles,
                {"StringEquals": {f"aws:ResourceTag/{ENV_TAG}": s.env, **boundary["StringEquals"]}},
            )
        )
    # Tag changes carry no iam:PermissionsBoundary: the environment's tag on the role, and a tag change may not move
    # the role to another environment.
    tagged = [a for a in actions if a in ROLE_ACTIONS_BY_TAG]
    if tagged:
        out.append(
            _stmt(
                "IamChangeOwnTaggedRoles",
                tagged,
                roles,
                {"StringEquals": {f"aws:ResourceTag/{ENV_TAG}": s.env}, "StringEqualsIfExists": own_tag},
            )
        )
    if "iam:TagRole" in actions and "iam:CreateRole" in actions:
        # CreateRole with tags also needs iam:TagRole on the new role's ARN, which has no tags yet; IAM offers no
        # condition that tells that check from a TagRole on an existing untagged role (no ec2:CreateAction for
        # IAM). So: only under this environment's path, only this environment's tag, on a role without one.
        # The path is this environment's name (docs/gitops.md: nothing else may live there).
        out.append(
            _stmt(
                "IamTagRoleOnCreate",
                ["iam:TagRole"],
                roles,
                {"StringEquals": own_tag, "Null": {f"aws:ResourceTag/{ENV_TAG}": "true"}},
            )
        )
    role_other = [
        a
        for a in actions
        if (
            "Role" in a
            and a not in BOUNDARY_CONDITION_ACTIONS
            and a not in tagged
            and a not in tagged_and_bounded
            and a != "iam:PassRole"
            and "ServiceLinked" not in a
        )
    ]
    if role_other:
        out.append(_stmt("IamChangeOwnRoles", role_other, roles))
    policy_actions = [a for a in actions if "Policy" in a and "Role" not in a]
    if policy_actions:
        out.append(_stmt("IamChangeOwnPolicies", policy_actions, policies))
    if "iam:PassRole" in actions:
        out.append(
            _stmt(
                "IamPassOwnRoles",
                ["iam:PassRole"],
                roles,
                {
                    "StringEquals": {
                        "iam:PassedToService": [
                            "eks.amazonaws.com",
                            "lambda.amazonaws.com",
                            "scheduler.amazonaws.com",
                            "pods.eks.amazonaws.com",
                        ]
                    }
                },
            )
        )
    if "iam:CreateServiceLinkedRole" in actions:
        out.append(
            _stmt(
                "IamServiceLinkedRoles",
                ["iam:CreateServiceLinkedRole"],
                s.arn("iam", "role/aws-service-role/*", region=False),
                {
                    "StringEquals": {
                        "iam:AWSServiceName": [
                            "eks.amazonaws.com",
                            "eks-nodegroup.amazonaws.com",
                            "autoscaling.amazonaws.com",
                        ]
                    }
                },
            )
        )
    oidc = [a for a in actions if "OpenIDConnectProvider" in a and a not in ADMINISTRATOR_ONLY]
    if oidc:
        # The cluster's IRSA provider: created by the administrator (ADMINISTRATOR_ONLY), changed only while it
        # carries this environment's tag. Only EKS issuers (oidc-provider/oidc.eks.<region>.amazonaws.com/id/<id>):
        # the GitHub provider carries the environment tag too (the provider's default tags), so the tag alone would
        # put it in reach.
        eks_issuers = s.arn("iam", f"oidc-provider/oidc.eks.{s.region}.amazonaws.com/id/*", region=False)
        out.append(
            _stmt(
                "IamChangeOwnClusterOidc",
                oidc,
                eks_issuers,
                {"StringEquals": {f"aws:ResourceTag/{ENV_TAG}": s.env}, "StringEqualsIfExists": own_tag},
            )
        )
    return out


def boundary_policy_document(scope: Scope) -> dict:
    """The most any role this stack creates may do: the services its workloads use, in its region, no IAM.

    Its job is to make the deploy role unable to mint an administrator: a role it creates must carry this
    boundary (deploy_policy_document), and this boundary grants no IAM, Organizations or account action.
    """
    services = (
        "autoscaling",
        "cloudwatch",
        "dynamodb",
        "ec2",
        "ecr",
        "eks",
        "eks-auth",
        "elasticloadbalancing",
        "kms",
        "lambda",
        "logs",
        "sns",
        "sqs",
        "ssm",
        "xray",
        "budgets",
        "ce",
        "pricing",
    )
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "WorkloadServices", "Effect": "Allow", "Action": [f"{svc}:*" for svc in services], "Resource": "*"},
            # A role of this environment never touches a resource tagged for another one, whatever its own policy
            # says (the deploy role writes those policies, so this is what keeps dev's roles out of prod).
            {
                "Sid": "NoOtherEnvironment",
                "Effect": "Deny",
                "Action": "*",
                "Resource": "*",
                "Condition": {
                    "StringNotEquals": {f"aws:ResourceTag/{ENV_TAG}": scope.env},
                    "Null": {f"aws:ResourceTag/{ENV_TAG}": "false"},
                },
            },
            # The EKS cluster role creates the load balancer service-linked role; nothing else in IAM.
            {
                "Sid": "ServiceLinkedRolesOnly",
                "Effect": "Allow",
                "Action": ["iam:CreateServiceLinkedRole"],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {
                        "iam:AWSServiceName": ["elasticloadbalancing.amazonaws.com", "autoscaling.amazonaws.com"]
                    }
                },
            },
        ],
    }


def deploy_boundary_name(env: str) -> str:
    return f"gpuloan-{env}-github-deploy-boundary"


# IAM write actions (any that could change a role, policy, user, group or identity provider).
_IAM_WRITES = [
    "iam:Add*",
    "iam:Attach*",
    "iam:Create*",
    "iam:Delete*",
    "iam:Detach*",
    "iam:PassRole",
    "iam:Put*",
    "iam:Remove*",
    "iam:Set*",
    "iam:Tag*",
    "iam:Untag*",
    "iam:Update*",
]


def deploy_services(types: Iterable[str], state: StateBackend | None = None) -> list[str]:
    """The services the deploy role's policies name: its boundary allows those and nothing else."""
    doc = deploy_policy_document(types, _WIDEST, INVOKES, state)
    return sorted({a.split(":", 1)[0] for st in doc["Statement"] for a in st["Action"]})


def deploy_boundary_document(scope: Scope, services: Iterable[str]) -> dict:
    """The deploy role's own permissions boundary: a ceiling over its managed policies.

    The policies (deploy_policy_document) grant; the boundary only takes away, so a later mistake in them cannot
    reach the CI roles, their policies, the boundaries or the GitHub provider, create IAM users or groups, assume
    another role, leave the organization, or touch a resource tagged for another environment.
    """
    ci_resources = [
        scope.arn("iam", f"role{ci_path(scope.env)}*", region=False),
        scope.arn("iam", f"policy{ci_path(scope.env)}*", region=False),
        scope.arn("iam", "oidc-provider/token.actions.githubusercontent.com", region=False),
    ]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ItsServices",
                "Effect": "Allow",
                "Action": [f"{svc}:*" for svc in sorted(set(services))],
                "Resource": "*",
            },
            {"Sid": "NotTheAdministrators", "Effect": "Deny", "Action": _IAM_WRITES, "Resource": ci_resources},
            {
                "Sid": "NoIdentitiesOrAccounts",
                "Effect": "Deny",
                "Resource": "*",
                "Action": [
                    "iam:*User*",
                    "iam:*Group*",
                    "iam:*AccessKey*",
                    "iam:*LoginProfile*",
                    "iam:*SAMLProvider*",
                    "iam:*ServiceSpecificCredential*",
                    "iam:*SSHPublicKey*",
                    "iam:*MFADevice*",
                    "iam:*AccountAlias*",
                    "iam:UpdateAccountPasswordPolicy",
                    "organizations:*",
                    "account:*",
                    "sts:AssumeRole",
                ],
            },
            {
                "Sid": "NoOtherEnvironment",
                "Effect": "Deny",
                "Action": "*",
                "Resource": "*",
                "Condition": {
                    "StringNotEquals": {f"aws:ResourceTag/{ENV_TAG}": scope.env},
                    "Null": {f"aws:ResourceTag/{ENV_TAG}": "false"},
                },
            },
        ],
    }


# IAM quotas: a customer managed policy holds at most 6,144 characters (whitespace not counted), a role at most 10
# attached managed policies by default (IAM and AWS STS quotas page). The deploy role's policy is larger than the
# 10,240 characters a role's inline policies may total, so it is split into managed policies by statement.
MANAGED_POLICY_MAX_CHARS = 6144
ROLE_MANAGED_POLICIES_MAX = 10
# The longest partition name ("aws-us-gov"): chunks are planned with it so the real ARNs never make one overflow.
_WIDEST = Scope("aws-us-gov", "123456789012", "ap-southeast-5", "x", "x")


def policy_size(document: dict) -> int:
    import json

    return len(json.dumps(document, separators=(",", ":")))


def plan_chunks(document: dict, limit: int = MANAGED_POLICY_MAX_CHARS) -> list[list[str]]:
    """Group a document's statements (by Sid) into policies under `limit` characters, in order."""
    chunks: list[list[str]] = [[]]
    current: list[dict] = []
    for st in document["Statement"]:
        trial = {"Version": document["Version"], "Statement": [*current, st]}
        if current and policy_size(trial) > limit:
            chunks.append([])
            current = []
        if policy_size({"Version": document["Version"], "Statement": [st]}) > limit:
            raise ValueError(f"statement {st['Sid']} alone exceeds {limit} characters; split it")
        chunks[-1].append(st["Sid"])
        current.append(st)
    if len(chunks) > ROLE_MANAGED_POLICIES_MAX:
        raise ValueError(
            f"the deploy policy needs {len(chunks)} managed policies; a role takes {ROLE_MANAGED_POLICIES_MAX}"
        )
    return chunks


def deploy_policy_chunks(
    types: Iterable[str], env: str, region: str, cluster_name: str, state: StateBackend | None = None
) -> list[list[str]]:
    """The statement ids of each deploy managed policy, planned with the widest ARNs this stack could have."""
    widest = Scope(_WIDEST.partition, _WIDEST.account, region, env, cluster_name)
    return plan_chunks(deploy_policy_document(types, widest, INVOKES, state))


def select(document: dict, sids: list[str]) -> dict:
    by_sid = {st["Sid"]: st for st in document["Statement"]}
    return {"Version": document["Version"], "Statement": [by_sid[s] for s in sids]}


# --- the table as documentation (docs/iam-permissions.md is this output; a test keeps it fresh) ---------------

SCOPE_BY_SERVICE: dict[str, str] = {
    "budgets": "budget ARN `budget/gpuloan-<env>` and `budget/gpuloan-<env>-*`",
    "ce": "not scopable: `ce:UpdateCostAllocationTagsStatus` has no resource type (see UNSCOPABLE)",
    "cloudwatch": "alarm ARN `alarm:gpuloan-<env>-*`, dashboard ARN `dashboard/gpuloan-<env>`",
    "dynamodb": "table ARN `table/gpuloan-<env>-*`",
    "ec2": "creates: `aws:RequestTag/gpuloan:environment=<env>` on the new resource; everything else: "
    "`aws:ResourceTag/gpuloan:environment=<env>` (the cluster security group: `aws:eks:cluster-name`); tags "
    "only on create (`ec2:CreateAction`) or on own resources; region in the ARN",
    "ecr": "repository ARN `repository/gpuloan/<env>/*`; `ecr:GetAuthorizationToken` has no resource type",
    "eks": "cluster name in every EKS ARN: `cluster/<cluster>`, `*/<cluster>/*` (node groups, add-ons, access "
    "entries, pod identity associations)",
    "iam": "roles and policies under the path `/gpuloan/<env>/`; CreateRole/PutRolePolicy/AttachRolePolicy/"
    "DeleteRolePolicy/DetachRolePolicy/PutRolePermissionsBoundary only with `iam:PermissionsBoundary` = the "
    "environment's boundary, CreateRole also with the request tag `gpuloan:environment=<env>`; "
    "UpdateAssumeRolePolicy/DeleteRole/UpdateRole/TagRole/UntagRole only on roles tagged "
    "`gpuloan:environment=<env>` (TagRole on an untagged role of the path only with that tag: the check IAM "
    "makes for CreateRole's tags); the deploy role's own boundary denies IAM writes on `/gpuloan-ci/<env>/`, "
    "users, groups, sts:AssumeRole and other environments' resources; PassRole to "
    "EKS/Lambda/Scheduler/Pod Identity only; the cluster's IRSA provider by the environment tag (created by the "
    "administrator); CI roles, "
    "boundary and GitHub provider (`/gpuloan-ci/<env>/`, untagged) are out of reach",
    "kms": "no CreateKey (the administrator's, see below); keys by `aws:ResourceTag` (a tag change may not set "
    "another environment); aliases `alias/gpuloan-<env>-*`",
    "lambda": "function ARN `function:gpuloan-<env>-*`",
    "logs": "log-group ARNs `/aws/eks/<cluster>/*`, `/aws/lambda/gpuloan-<env>-*`",
    "scheduler": "schedule ARN `schedule/default/gpuloan-<env>-*`",
    "events": "rule ARN `rule/gpuloan-<env>-*` (the default event bus)",
    "sns": "topic ARN `gpuloan-<env>-*`; `sns:Unsubscribe` has no resource type: `*` in the stack's region only",
    "sqs": "queue ARN `gpuloan-<env>-*`",
    "ssm": "parameter ARN `parameter/gpuloan/<env>/*`",
}


def markdown() -> str:
    lines = [
        "# What each resource type needs from IAM",
        "",
        "Generated from `stacks/gitops/iam_permissions.py` (`python -m stacks.gitops.iam_permissions > docs/iam-permissions.md`;",
        "tests/stacks/test_gitops_permissions.py checks it is fresh). The preview role gets the **read** column of the types",
        "a stack declares (Lambda reads only on `function:gpuloan-<env>-*`: GetFunction returns a function's",
        "environment and code; `ecr:BatchGetImage`, an image's manifest, only on `repository/gpuloan/<env>/*`);",
        "the deploy role all four, scoped as in the second table (image manifests and layer downloads only from",
        "`repository/gpuloan/<env>/*`), under its own permissions",
        "boundary `gpuloan-<env>-github-deploy-boundary`. tests/stacks/test_gitops_requests.py evaluates every create,",
        "update and delete request of the dev and prod plans against the generated documents. docs/gitops.md",
        "explains the model.",
        "",
        "| resource type | refresh (read) | create | update | delete | source |",
        "|---|---|---|---|---|---|",
    ]
    cell = lambda actions: "<br>".join(f"`{a}`" for a in actions) or "—"  # noqa: E731
    for type_, n in sorted(TABLE.items()):
        lines.append(
            f"| `{type_}` | {cell(n.read)} | {cell(n.create)} | {cell(n.update)} | {cell(n.delete)} | "
            f"[source]({n.source.split(' ')[0]}) |"
        )
    lines += ["", "Data sources the program calls:", "", "| invoke | read |", "|---|---|"]
    lines += [f"| `{t}` | {cell(a)} |" for t, a in sorted(INVOKES.items())]
    lines += [
        "",
        "Price lookups, both roles: " + ", ".join(f"`{a}`" for a in PRICING_ACTIONS) + ".",
        "Not granted (no workflow runs `gpuloan cost-report` with these roles): "
        + ", ".join(f"`{a}`" for a in COST_REPORT_ACTIONS)
        + ".",
        "",
        "## How the deploy role's changes are scoped, per service",
        "",
        "| service | scoped by |",
        "|---|---|",
    ]
    lines += [f"| {svc} | {text} |" for svc, text in sorted(SCOPE_BY_SERVICE.items())]
    lines += [
        "",
        "## Actions only the administrator's `pulumi up` makes",
        "",
        "The deploy role is never granted these; a deploy that needs one fails with AccessDenied (docs/gitops.md).",
        "",
        "| action | why |",
        "|---|---|",
    ]
    lines += [f"| `{a}` | {why} |" for a, why in sorted(ADMINISTRATOR_ONLY.items())]
    lines += ["", "## Actions AWS only authorizes on `*`", "", "| action | why that is acceptable |", "|---|---|"]
    lines += [f"| `{a}` | {why} |" for a, why in sorted(UNSCOPABLE.items())]
    lines += [
        "",
        "## Kubernetes kinds the preview role may read (no IAM action; EKS access entry + RBAC)",
        "",
        "| type | API group | resource |",
        "|---|---|---|",
    ]
    lines += [f"| `{t}` | `{g or 'core'}` | {r} |" for t, (g, r) in sorted(KUBERNETES_KINDS.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
