"""The AWS requests a deploy makes, per resource of a recorded plan, as IAM sees them (action, resource ARN, context).

REQUESTS maps each Pulumi resource type to the API calls the AWS provider (and docker-build) makes to create, update
and delete one resource of it, with the request context IAM evaluates each call in:
- a create is evaluated on the new resource's ARN (for EC2, with `*` for the id it does not have yet) with
  `aws:RequestTag/<key>` and `aws:TagKeys` from the tags the request carries: the provider's default tags merged with
  the resource's own (Pulumi AWS provider, "defaultTags"), which it sends on create (tag-on-create);
- EC2 evaluates tag-on-create as a second request, `ec2:CreateTags` on the new resource with `ec2:CreateAction` =
  the API operation's name (EC2 User Guide, "Grant permission to tag resources during creation");
- every other call is evaluated on an existing resource with `aws:ResourceTag/<key>` from its tags;
- `iam:PermissionsBoundary` is the boundary the request sets or the role carries, `iam:PassedToService` the service a
  role is passed to (Service Authorization Reference, IAM).
Which calls the provider makes is read from its resource docs and CRUD functions (stacks/iam_permissions.TABLE names
the same actions; test_gitops_requests.py checks the two agree). A type of the plan with no entry here fails the test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from offline import runner as offline

ACCOUNT = offline.ACCOUNT_ID
OPS = ("create", "update", "delete")


@dataclass(frozen=True)
class Request:
    op: str
    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict)


class Plan:
    """A recorded plan with what the requests need: tags, ARNs, and the resources other resources refer to."""

    def __init__(self, rec, region: str = "us-east-1"):
        self.rec = rec
        self.env = rec.stack
        self.region = region
        (provider,) = rec.of_type("pulumi:providers:aws")
        self.default_tags: dict[str, str] = json.loads(provider.inputs.get("defaultTags", "{}")).get("tags", {})
        (cluster,) = rec.of_type("aws:eks/cluster:Cluster")
        self.cluster = cluster.inputs["name"]
        self.cluster_sg = cluster.outputs["vpcConfig"]["clusterSecurityGroupId"]
        self.boundary = next(
            (r.outputs["arn"] for r in rec.of_type("aws:iam/policy:Policy") if r.name.endswith("-role-boundary")), None
        )
        # The mocks' resource ids: the names other resources' inputs refer to.
        self.by_id = {}
        for r in rec.resources:
            if r.custom:
                self.by_id[f"{r.name}-{offline._short_hash(rec.stack, r.type, r.name)}"] = r
                self.by_id.setdefault(str(r.outputs.get("arn")), r)

    # --- tags and contexts ---
    def tags(self, r) -> dict[str, str]:
        own = r.inputs.get("tags")
        return {**self.default_tags, **(own if isinstance(own, dict) else {})}

    def new(self, r, **extra) -> dict[str, Any]:
        t = self.tags(r)
        return {
            **{f"aws:RequestTag/{k}": v for k, v in t.items()},
            "aws:TagKeys": sorted(t),
            "aws:RequestedRegion": self.region,
            **extra,
        }

    def own(self, r, **extra) -> dict[str, Any]:
        return {
            **{f"aws:ResourceTag/{k}": v for k, v in self.tags(r).items()},
            "aws:RequestedRegion": self.region,
            **extra,
        }

    def ref(self, resource_id: str) -> dict[str, Any]:
        """The context of an existing resource another one refers to (its VPC, subnet, security group...)."""
        if resource_id == self.cluster_sg:
            # Created by EKS, tagged by EKS with the cluster's name (EKS User Guide, cluster security group).
            return {"aws:ResourceTag/aws:eks:cluster-name": self.cluster, "aws:RequestedRegion": self.region}
        return self.own(self.by_id[resource_id])

    # --- ARNs ---
    def arn(self, service: str, rest: str, region: bool = True) -> str:
        return f"arn:aws:{service}:{self.region if region else ''}:{ACCOUNT}:{rest}"

    def ec2(self, kind: str, rid: str = "*") -> str:
        return self.arn("ec2", f"{kind}/{rid}")

    def role_arn(self, r) -> str:
        name = r.inputs.get("name") or r.name
        return self.arn("iam", f"role{r.inputs.get('path', '/')}{name}", region=False)

    def role_by_name(self, name: str) -> str:
        for r in self.rec.of_type("aws:iam/role:Role"):
            if name in (r.inputs.get("name"), r.name) or self.by_id.get(name) is r:
                return self.role_arn(r)
        raise KeyError(name)

    def role_of(self, r) -> str:
        role = r.inputs["role"]
        return self.role_by_name(self.by_id[role].name if role in self.by_id else role)

    def boundary_of_role(self, role_arn: str) -> dict[str, Any]:
        for r in self.rec.of_type("aws:iam/role:Role"):
            if self.role_arn(r) == role_arn and r.inputs.get("permissionsBoundary"):
                return {"iam:PermissionsBoundary": r.inputs["permissionsBoundary"]}
        return {}

    def rid(self, r) -> str:
        return f"{r.name}-{offline._short_hash(self.rec.stack, r.type, r.name)}"

    def uuid(self, r) -> str:
        return offline._short_hash(r.name, "uuid")


Calls = dict[str, list[tuple[str, str, dict]]]
Fn = Callable[[Plan, Any], Calls]
REQUESTS: dict[str, Fn] = {}


def calls(type_: str):
    def register(fn: Fn) -> Fn:
        REQUESTS[type_] = fn
        return fn

    return register


def _named(arn_of: Callable[[Plan, Any], str], create: str, update: str, delete: str, tag: str | None = None) -> Fn:
    """A service whose calls all land on the resource's own ARN; `tag` is its tag-on-create action."""

    def fn(p: Plan, r) -> Calls:
        a = arn_of(p, r)
        out: Calls = {
            op: [(act, a, p.own(r)) for act in acts.split()] for op, acts in (("update", update), ("delete", delete))
        }
        out["create"] = [(act, a, p.new(r)) for act in create.split()]
        if tag:
            out["create"].append((tag, a, p.new(r)))
        return out

    return fn


def _ec2_create(p: Plan, r, action: str, kind: str, extra: list[tuple[str, str, dict]] = ()) -> list:
    """An EC2 create with TagSpecifications: the create on the new resource, the existing resources it names, and
    the tag-on-create CreateTags request."""
    new = p.new(r)
    return [
        (f"ec2:{action}", p.ec2(kind), new),
        *extra,
        ("ec2:CreateTags", p.ec2(kind), {**new, "ec2:CreateAction": action}),
    ]


def _ec2_own(p: Plan, r, kind: str, rid: str, actions: str) -> list:
    return [(a, p.ec2(kind, rid), p.own(r)) for a in actions.split()]


def _tag_update(p: Plan, r, arn: str, action: str) -> tuple:
    return (action, arn, {**p.own(r), **{k: v for k, v in p.new(r).items() if k.startswith("aws:")}})


# --- EC2 --------------------------------------------------------------------------------------------------------


@calls("aws:ec2/vpc:Vpc")
def _vpc(p, r):
    rid = p.rid(r)
    return {
        "create": _ec2_create(p, r, "CreateVpc", "vpc") + _ec2_own(p, r, "vpc", rid, "ec2:ModifyVpcAttribute"),
        "update": _ec2_own(p, r, "vpc", rid, "ec2:ModifyVpcAttribute ec2:CreateTags ec2:DeleteTags"),
        "delete": _ec2_own(p, r, "vpc", rid, "ec2:DeleteVpc"),
    }


@calls("aws:ec2/subnet:Subnet")
def _subnet(p, r):
    rid, vpc = p.rid(r), r.inputs["vpcId"]
    return {
        "create": _ec2_create(p, r, "CreateSubnet", "subnet", [("ec2:CreateSubnet", p.ec2("vpc", vpc), p.ref(vpc))])
        + _ec2_own(p, r, "subnet", rid, "ec2:ModifySubnetAttribute"),
        "update": _ec2_own(p, r, "subnet", rid, "ec2:ModifySubnetAttribute ec2:CreateTags ec2:DeleteTags"),
        "delete": _ec2_own(p, r, "subnet", rid, "ec2:DeleteSubnet"),
    }


@calls("aws:ec2/internetGateway:InternetGateway")
def _igw(p, r):
    rid, vpc = p.rid(r), r.inputs["vpcId"]
    attach = [("ec2:AttachInternetGateway", p.ec2("vpc", vpc), p.ref(vpc))]
    detach = [("ec2:DetachInternetGateway", p.ec2("vpc", vpc), p.ref(vpc))]
    return {
        "create": _ec2_create(p, r, "CreateInternetGateway", "internet-gateway")
        + _ec2_own(p, r, "internet-gateway", rid, "ec2:AttachInternetGateway")
        + attach,
        "update": _ec2_own(p, r, "internet-gateway", rid, "ec2:CreateTags ec2:DeleteTags"),
        "delete": _ec2_own(p, r, "internet-gateway", rid, "ec2:DetachInternetGateway ec2:DeleteInternetGateway")
        + detach,
    }


@calls("aws:ec2/eip:Eip")
def _eip(p, r):
    rid = p.rid(r)
    return {
        "create": _ec2_create(p, r, "AllocateAddress", "elastic-ip"),
        "update": _ec2_own(p, r, "elastic-ip", rid, "ec2:CreateTags ec2:DeleteTags"),
        "delete": _ec2_own(p, r, "elastic-ip", rid, "ec2:ReleaseAddress"),
    }


@calls("aws:ec2/natGateway:NatGateway")
def _nat(p, r):
    rid, subnet, eip = p.rid(r), r.inputs["subnetId"], r.inputs["allocationId"]
    return {
        "create": _ec2_create(
            p,
            r,
            "CreateNatGateway",
            "natgateway",
            [
                ("ec2:CreateNatGateway", p.ec2("subnet", subnet), p.ref(subnet)),
                ("ec2:CreateNatGateway", p.ec2("elastic-ip", eip), p.ref(eip)),
            ],
        ),
        "update": _ec2_own(p, r, "natgateway", rid, "ec2:CreateTags ec2:DeleteTags"),
        "delete": _ec2_own(p, r, "natgateway", rid, "ec2:DeleteNatGateway"),
    }


@calls("aws:ec2/routeTable:RouteTable")
def _route_table(p, r):
    rid, vpc = p.rid(r), r.inputs["vpcId"]
    return {
        "create": _ec2_create(
            p, r, "CreateRouteTable", "route-table", [("ec2:CreateRouteTable", p.ec2("vpc", vpc), p.ref(vpc))]
        )
        + _ec2_own(p, r, "route-table", rid, "ec2:CreateRoute"),
        "update": _ec2_own(
            p, r, "route-table", rid, "ec2:CreateRoute ec2:ReplaceRoute ec2:DeleteRoute ec2:CreateTags ec2:DeleteTags"
        ),
        "delete": _ec2_own(p, r, "route-table", rid, "ec2:DeleteRoute ec2:DeleteRouteTable"),
    }


@calls("aws:ec2/routeTableAssociation:RouteTableAssociation")
def _rta(p, r):
    rt, subnet = r.inputs["routeTableId"], r.inputs["subnetId"]
    both = lambda a: [(a, p.ec2("route-table", rt), p.ref(rt)), (a, p.ec2("subnet", subnet), p.ref(subnet))]  # noqa
    return {
        "create": both("ec2:AssociateRouteTable"),
        "update": both("ec2:ReplaceRouteTableAssociation"),
        "delete": [("ec2:DisassociateRouteTable", p.ec2("route-table", rt), p.ref(rt))],
    }


@calls("aws:ec2/securityGroup:SecurityGroup")
def _sg(p, r):
    rid, vpc = p.rid(r), r.inputs["vpcId"]
    # The provider revokes the allow-all egress rule AWS adds, then authorizes the declared rules.
    return {
        "create": _ec2_create(
            p, r, "CreateSecurityGroup", "security-group", [("ec2:CreateSecurityGroup", p.ec2("vpc", vpc), p.ref(vpc))]
        )
        + _ec2_own(p, r, "security-group", rid, "ec2:RevokeSecurityGroupEgress ec2:AuthorizeSecurityGroupEgress"),
        "update": _ec2_own(
            p,
            r,
            "security-group",
            rid,
            "ec2:AuthorizeSecurityGroupEgress ec2:RevokeSecurityGroupEgress ec2:CreateTags ec2:DeleteTags",
        ),
        "delete": _ec2_own(p, r, "security-group", rid, "ec2:DeleteSecurityGroup"),
    }


@calls("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
def _default_sg(p, r):
    # Adopting the VPC's default group: AWS created it with the VPC, untagged. The provider tags it, then revokes
    # its default rules. Deleting only forgets it.
    rid = p.rid(r)
    untagged = {"aws:RequestedRegion": p.region}
    request = {k: v for k, v in p.new(r).items() if k.startswith("aws:")}
    return {
        "create": [("ec2:CreateTags", p.ec2("security-group", rid), {**untagged, **request})]
        + _ec2_own(p, r, "security-group", rid, "ec2:RevokeSecurityGroupIngress ec2:RevokeSecurityGroupEgress"),
        "update": _ec2_own(
            p,
            r,
            "security-group",
            rid,
            "ec2:RevokeSecurityGroupIngress ec2:RevokeSecurityGroupEgress ec2:CreateTags ec2:DeleteTags",
        ),
        "delete": [],
    }


@calls("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
def _ingress(p, r):
    sg = r.inputs["securityGroupId"]
    rule = p.ec2("security-group-rule", p.rid(r))
    return {
        "create": [("ec2:AuthorizeSecurityGroupIngress", p.ec2("security-group", sg), p.ref(sg))]
        + _ec2_create(p, r, "AuthorizeSecurityGroupIngress", "security-group-rule"),
        "update": [
            ("ec2:ModifySecurityGroupRules", p.ec2("security-group", sg), p.ref(sg)),
            ("ec2:CreateTags", rule, p.own(r)),
            ("ec2:DeleteTags", rule, p.own(r)),
        ],
        "delete": [("ec2:RevokeSecurityGroupIngress", p.ec2("security-group", sg), p.ref(sg))],
    }


@calls("aws:ec2/launchTemplate:LaunchTemplate")
def _launch_template(p, r):
    rid = r.outputs.get("id") or p.rid(r)
    return {
        "create": _ec2_create(p, r, "CreateLaunchTemplate", "launch-template"),
        "update": _ec2_own(
            p,
            r,
            "launch-template",
            rid,
            "ec2:CreateLaunchTemplateVersion ec2:ModifyLaunchTemplate ec2:CreateTags ec2:DeleteTags",
        ),
        "delete": _ec2_own(p, r, "launch-template", rid, "ec2:DeleteLaunchTemplate"),
    }


@calls("aws:ec2/capacityReservation:CapacityReservation")
def _odcr(p, r):
    rid = p.rid(r)
    return {
        "create": _ec2_create(p, r, "CreateCapacityReservation", "capacity-reservation"),
        "update": _ec2_own(
            p, r, "capacity-reservation", rid, "ec2:ModifyCapacityReservation ec2:CreateTags ec2:DeleteTags"
        ),
        "delete": _ec2_own(p, r, "capacity-reservation", rid, "ec2:CancelCapacityReservation"),
    }


# --- EKS --------------------------------------------------------------------------------------------------------


def _pass(p: Plan, role_arn: str, service: str) -> tuple:
    return ("iam:PassRole", role_arn, {"iam:PassedToService": service})


@calls("aws:eks/cluster:Cluster")
def _cluster(p, r):
    c = p.arn("eks", f"cluster/{r.inputs['name']}")
    (key,) = [k for k in p.rec.of_type("aws:kms/key:Key") if k.name.endswith("-cluster-secrets-key")]
    key_arn, key_ctx = p.arn("kms", f"key/{p.uuid(key)}"), p.own(key)
    role = p.role_by_name(r.inputs["roleArn"].rsplit("/", 1)[-1])
    slr = p.arn("iam", "role/aws-service-role/eks.amazonaws.com/AWSServiceRoleForAmazonEKS", region=False)
    return {
        "create": [
            ("eks:CreateCluster", c, p.new(r)),
            ("eks:TagResource", c, p.new(r)),
            _pass(p, role, "eks.amazonaws.com"),
            ("kms:DescribeKey", key_arn, key_ctx),
            ("kms:CreateGrant", key_arn, key_ctx),
            ("iam:CreateServiceLinkedRole", slr, {"iam:AWSServiceName": "eks.amazonaws.com"}),
        ],
        "update": [
            (a, c, p.own(r))
            for a in ("eks:UpdateClusterConfig", "eks:UpdateClusterVersion", "eks:TagResource", "eks:UntagResource")
        ],
        "delete": [("eks:DeleteCluster", c, p.own(r))],
    }


@calls("aws:eks/nodeGroup:NodeGroup")
def _node_group(p, r):
    c = p.arn("eks", f"cluster/{r.inputs['clusterName']}")
    ng = r.outputs["arn"]
    role = p.role_by_name(r.inputs["nodeRoleArn"].rsplit("/", 1)[-1])
    slr = p.arn(
        "iam", "role/aws-service-role/eks-nodegroup.amazonaws.com/AWSServiceRoleForAmazonEKSNodegroup", region=False
    )
    return {
        "create": [
            ("eks:CreateNodegroup", c, p.new(r)),
            ("eks:CreateNodegroup", ng, p.new(r)),
            ("eks:TagResource", ng, p.new(r)),
            _pass(p, role, "eks.amazonaws.com"),
            ("iam:CreateServiceLinkedRole", slr, {"iam:AWSServiceName": "eks-nodegroup.amazonaws.com"}),
            ("ec2:DescribeLaunchTemplateVersions", "*", {}),
        ],
        "update": [
            (a, ng, p.own(r))
            for a in ("eks:UpdateNodegroupConfig", "eks:UpdateNodegroupVersion", "eks:TagResource", "eks:UntagResource")
        ],
        "delete": [("eks:DeleteNodegroup", ng, p.own(r))],
    }


@calls("aws:eks/addon:Addon")
def _addon(p, r):
    c = p.arn("eks", f"cluster/{r.inputs['clusterName']}")
    a = p.arn("eks", f"addon/{r.inputs['clusterName']}/{r.inputs['addonName']}/{p.uuid(r)}")
    passes = (
        [_pass(p, r.inputs["serviceAccountRoleArn"], "eks.amazonaws.com")]
        if r.inputs.get("serviceAccountRoleArn")
        else []
    )
    return {
        "create": [
            ("eks:CreateAddon", c, p.new(r)),
            ("eks:CreateAddon", a, p.new(r)),
            ("eks:TagResource", a, p.new(r)),
            *passes,
        ],
        "update": [("eks:UpdateAddon", a, p.own(r)), *passes],
        "delete": [("eks:DeleteAddon", a, p.own(r))],
    }


def _access_entry_arn(p: Plan, r) -> str:
    principal = r.inputs["principalArn"].split(":role/", 1)[1].rsplit("/", 1)[-1]
    return p.arn("eks", f"access-entry/{r.inputs['clusterName']}/role/{ACCOUNT}/{principal}/{p.uuid(r)}")


@calls("aws:eks/accessEntry:AccessEntry")
def _access_entry(p, r):
    c = p.arn("eks", f"cluster/{r.inputs['clusterName']}")
    e = _access_entry_arn(p, r)
    return {
        "create": [
            ("eks:CreateAccessEntry", c, p.new(r)),
            ("eks:CreateAccessEntry", e, p.new(r)),
            ("eks:TagResource", e, p.new(r)),
        ],
        "update": [("eks:UpdateAccessEntry", e, p.own(r))],
        "delete": [("eks:DeleteAccessEntry", e, p.own(r))],
    }


@calls("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
def _access_policy(p, r):
    e = _access_entry_arn(p, r)
    return {
        "create": [("eks:AssociateAccessPolicy", e, {})],
        "update": [("eks:AssociateAccessPolicy", e, {})],
        "delete": [("eks:DisassociateAccessPolicy", e, {})],
    }


@calls("aws:eks/podIdentityAssociation:PodIdentityAssociation")
def _pod_identity(p, r):
    c = p.arn("eks", f"cluster/{r.inputs['clusterName']}")
    a = p.arn("eks", f"podidentityassociation/{r.inputs['clusterName']}/a-{p.uuid(r)}")
    role = r.inputs["roleArn"]
    return {
        "create": [
            ("eks:CreatePodIdentityAssociation", c, p.new(r)),
            ("eks:TagResource", a, p.new(r)),
            _pass(p, role, "pods.eks.amazonaws.com"),
            ("iam:GetRole", role, {}),
        ],
        "update": [("eks:UpdatePodIdentityAssociation", a, p.own(r)), _pass(p, role, "pods.eks.amazonaws.com")],
        "delete": [("eks:DeletePodIdentityAssociation", a, p.own(r))],
    }


# --- IAM --------------------------------------------------------------------------------------------------------


@calls("aws:iam/role:Role")
def _role(p, r):
    a = p.role_arn(r)
    bound = {"iam:PermissionsBoundary": r.inputs["permissionsBoundary"]} if r.inputs.get("permissionsBoundary") else {}
    return {
        "create": [("iam:CreateRole", a, p.new(r, **bound)), ("iam:TagRole", a, p.new(r))],
        # IAM puts the role's boundary in the context of its trust-policy, settings and delete calls (Service
        # Authorization Reference, IAM; docs/aws-rules.md), not in that of its tag calls.
        "update": [
            ("iam:UpdateAssumeRolePolicy", a, {**p.own(r), **bound}),
            ("iam:UpdateRole", a, {**p.own(r), **bound}),
            ("iam:UpdateRoleDescription", a, {**p.own(r), **bound}),
            _tag_update(p, r, a, "iam:TagRole"),
            ("iam:UntagRole", a, p.own(r)),
        ]
        + ([("iam:PutRolePermissionsBoundary", a, {**p.own(r), **bound})] if bound else []),
        "delete": [("iam:ListInstanceProfilesForRole", a, p.own(r)), ("iam:DeleteRole", a, {**p.own(r), **bound})],
    }


@calls("aws:iam/rolePolicy:RolePolicy")
def _role_policy(p, r):
    role = p.role_of(r)
    ctx = p.boundary_of_role(role)
    return {
        "create": [("iam:PutRolePolicy", role, ctx)],
        "update": [("iam:PutRolePolicy", role, ctx)],
        "delete": [("iam:DeleteRolePolicy", role, ctx)],
    }


@calls("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
def _attachment(p, r):
    role = p.role_of(r)
    ctx = {**p.boundary_of_role(role), "iam:PolicyARN": r.inputs["policyArn"]}
    return {
        "create": [("iam:AttachRolePolicy", role, ctx)],
        "update": [("iam:AttachRolePolicy", role, ctx)],
        "delete": [("iam:DetachRolePolicy", role, ctx)],
    }


@calls("aws:iam/policy:Policy")
def _policy(p, r):
    a = p.arn("iam", f"policy{r.inputs.get('path', '/')}{r.inputs.get('name') or r.name}", region=False)
    return {
        "create": [("iam:CreatePolicy", a, p.new(r)), ("iam:TagPolicy", a, p.new(r))],
        "update": [("iam:CreatePolicyVersion", a, p.own(r)), ("iam:DeletePolicyVersion", a, p.own(r))],
        "delete": [("iam:DeletePolicy", a, p.own(r))],
    }


@calls("aws:iam/openIdConnectProvider:OpenIdConnectProvider")
def _oidc(p, r):
    a = r.outputs["arn"]
    return {
        "create": [("iam:CreateOpenIDConnectProvider", a, p.new(r)), ("iam:TagOpenIDConnectProvider", a, p.new(r))],
        "update": [("iam:UpdateOpenIDConnectProviderThumbprint", a, p.own(r))],
        "delete": [("iam:DeleteOpenIDConnectProvider", a, p.own(r))],
    }


# --- KMS --------------------------------------------------------------------------------------------------------


@calls("aws:kms/key:Key")
def _key(p, r):
    a = p.arn("kms", f"key/{p.uuid(r)}")
    # CreateKey has no resource: IAM evaluates it, and the kms:TagResource its tags need, on "*" with the request's
    # tags (KMS developer guide, "Controlling access to tags").
    return {
        "create": [
            ("kms:CreateKey", "*", p.new(r)),
            ("kms:TagResource", "*", p.new(r)),
            ("kms:EnableKeyRotation", a, p.own(r)),
            ("kms:PutKeyPolicy", a, p.own(r)),
        ],
        "update": [
            (x, a, p.own(r))
            for x in ("kms:PutKeyPolicy", "kms:EnableKeyRotation", "kms:UpdateKeyDescription", "kms:UntagResource")
        ]
        + [_tag_update(p, r, a, "kms:TagResource")],
        "delete": [("kms:ScheduleKeyDeletion", a, p.own(r))],
    }


@calls("aws:kms/alias:Alias")
def _alias(p, r):
    alias = p.arn("kms", r.inputs["name"])
    (key,) = [k for k in p.rec.of_type("aws:kms/key:Key") if r.name.startswith(k.name)]
    key_arn = p.arn("kms", f"key/{p.uuid(key)}")
    # CreateAlias/UpdateAlias/DeleteAlias are authorized on both the alias and the key (KMS developer guide).
    both = lambda act: [(act, alias, {}), (act, key_arn, p.own(key))]  # noqa: E731
    return {"create": both("kms:CreateAlias"), "update": both("kms:UpdateAlias"), "delete": both("kms:DeleteAlias")}


# --- everything named by this environment -------------------------------------------------------------------------


def _name(r, key: str = "name") -> str:
    return r.inputs[key]


REQUESTS.update(
    {
        "aws:budgets/budget:Budget": _named(
            lambda p, r: p.arn("budgets", f"budget/{_name(r)}", region=False),
            "budgets:ModifyBudget",
            "budgets:ModifyBudget budgets:UntagResource",
            "budgets:ModifyBudget",
            "budgets:TagResource",
        ),
        "aws:cloudwatch/dashboard:Dashboard": _named(
            lambda p, r: p.arn("cloudwatch", f"dashboard/{_name(r, 'dashboardName')}", region=False),
            "cloudwatch:PutDashboard",
            "cloudwatch:PutDashboard",
            "cloudwatch:DeleteDashboards",
        ),
        "aws:cloudwatch/metricAlarm:MetricAlarm": _named(
            lambda p, r: p.arn("cloudwatch", f"alarm:{_name(r)}"),
            "cloudwatch:PutMetricAlarm",
            "cloudwatch:PutMetricAlarm cloudwatch:UntagResource",
            "cloudwatch:DeleteAlarms",
            "cloudwatch:TagResource",
        ),
        "aws:cloudwatch/logGroup:LogGroup": _named(
            lambda p, r: p.arn("logs", f"log-group:{_name(r)}"),
            "logs:CreateLogGroup logs:PutRetentionPolicy",
            "logs:PutRetentionPolicy logs:UntagResource",
            "logs:DeleteLogGroup",
            "logs:TagResource",
        ),
        "aws:cloudwatch/eventRule:EventRule": _named(
            lambda p, r: p.arn("events", f"rule/{_name(r)}"),
            "events:PutRule",
            "events:PutRule events:UntagResource",
            "events:DeleteRule",
            "events:TagResource",
        ),
        "aws:cloudwatch/eventTarget:EventTarget": _named(
            lambda p, r: p.arn("events", f"rule/{_name(r, 'rule')}"),
            "events:PutTargets",
            "events:PutTargets",
            "events:RemoveTargets",
        ),
        "aws:dynamodb/table:Table": _named(
            lambda p, r: p.arn("dynamodb", f"table/{_name(r)}"),
            "dynamodb:CreateTable dynamodb:UpdateContinuousBackups",
            "dynamodb:UpdateTable dynamodb:UpdateTimeToLive dynamodb:UpdateContinuousBackups dynamodb:UntagResource",
            "dynamodb:DeleteTable",
            "dynamodb:TagResource",
        ),
        "aws:ecr/repository:Repository": _named(
            lambda p, r: p.arn("ecr", f"repository/{_name(r)}"),
            "ecr:CreateRepository",
            "ecr:PutImageTagMutability ecr:PutImageScanningConfiguration ecr:UntagResource",
            "ecr:ListImages ecr:BatchDeleteImage ecr:DeleteRepository",
            "ecr:TagResource",
        ),
        "aws:ecr/lifecyclePolicy:LifecyclePolicy": _named(
            lambda p, r: p.arn("ecr", f"repository/{_name(r, 'repository')}"),
            "ecr:PutLifecyclePolicy",
            "ecr:PutLifecyclePolicy",
            "ecr:DeleteLifecyclePolicy",
        ),
        "aws:sqs/queue:Queue": _named(
            lambda p, r: p.arn("sqs", _name(r)),
            "sqs:CreateQueue sqs:SetQueueAttributes",
            "sqs:SetQueueAttributes sqs:UntagQueue",
            "sqs:DeleteQueue",
            "sqs:TagQueue",
        ),
        "aws:sns/topic:Topic": _named(
            lambda p, r: p.arn("sns", _name(r)),
            "sns:CreateTopic sns:SetTopicAttributes",
            "sns:SetTopicAttributes sns:UntagResource",
            "sns:DeleteTopic",
            "sns:TagResource",
        ),
        "aws:scheduler/schedule:Schedule": lambda p, r: _with_pass(
            _named(
                lambda p, r: p.arn("scheduler", f"schedule/default/{_name(r)}"),
                "scheduler:CreateSchedule",
                "scheduler:UpdateSchedule",
                "scheduler:DeleteSchedule",
            )(p, r),
            _pass(p, r.inputs["target"]["roleArn"], "scheduler.amazonaws.com"),
        ),
    }
)


def _with_pass(out: Calls, passing: tuple) -> Calls:
    out["create"].append(passing)
    out["update"].append(passing)
    return out


def _topic_arn(p: Plan, mock_arn: str) -> str:
    return p.arn("sns", p.by_id[mock_arn].inputs["name"])


@calls("aws:sns/topicPolicy:TopicPolicy")
def _topic_policy(p, r):
    t = _topic_arn(p, r.inputs["arn"])
    return {op: [("sns:SetTopicAttributes", t, {})] for op in OPS}


@calls("aws:sns/topicSubscription:TopicSubscription")
def _subscription(p, r):
    t = _topic_arn(p, r.inputs["topic"])
    sub = f"{t}:{p.uuid(r)}"  # a subscription's ARN is its topic's ARN plus an id (SNS API reference, Subscribe)
    return {
        "create": [("sns:Subscribe", t, {})],
        "update": [("sns:SetSubscriptionAttributes", sub, {})],
        "delete": [("sns:Unsubscribe", sub, {"aws:RequestedRegion": p.region})],
    }


def _function_arn(p: Plan, name_or_arn: str) -> str:
    if name_or_arn in p.by_id:
        name_or_arn = p.by_id[name_or_arn].inputs["name"]
    return p.arn("lambda", f"function:{name_or_arn}")


@calls("aws:lambda/function:Function")
def _function(p, r):
    f = _function_arn(p, r.inputs["name"])
    role = r.inputs["role"]
    # With a VPC configuration Lambda checks the caller may describe the subnets, groups and VPC (Lambda developer
    # guide, "Giving Lambda functions access to resources in an Amazon VPC").
    vpc = [(a, "*", {}) for a in ("ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs")]
    return {
        "create": [
            ("lambda:CreateFunction", f, p.new(r)),
            ("lambda:TagResource", f, p.new(r)),
            _pass(p, role, "lambda.amazonaws.com"),
            ("lambda:PutFunctionConcurrency", f, p.own(r)),
            *vpc,
        ],
        "update": [
            (a, f, p.own(r))
            for a in (
                "lambda:UpdateFunctionCode",
                "lambda:UpdateFunctionConfiguration",
                "lambda:PutFunctionConcurrency",
                "lambda:UntagResource",
            )
        ]
        + [_pass(p, role, "lambda.amazonaws.com"), *vpc],
        "delete": [("lambda:DeleteFunction", f, p.own(r))],
    }


@calls("aws:lambda/functionEventInvokeConfig:FunctionEventInvokeConfig")
def _invoke_config(p, r):
    f = _function_arn(p, r.inputs["functionName"])
    return {
        "create": [("lambda:PutFunctionEventInvokeConfig", f, {})],
        "update": [("lambda:UpdateFunctionEventInvokeConfig", f, {})],
        "delete": [("lambda:DeleteFunctionEventInvokeConfig", f, {})],
    }


@calls("aws:lambda/permission:Permission")
def _permission(p, r):
    f = _function_arn(p, r.inputs["function"])
    return {
        "create": [("lambda:AddPermission", f, {})],
        "update": [("lambda:RemovePermission", f, {}), ("lambda:AddPermission", f, {})],
        "delete": [("lambda:RemovePermission", f, {})],
    }


@calls("docker-build:index:Image")
def _image(p, r):
    (ref,) = r.inputs["tags"][:1]
    repo = ref.split("/", 1)[1].rsplit(":", 1)[0]
    a = p.arn("ecr", f"repository/{repo}")
    push = (
        "ecr:BatchCheckLayerAvailability ecr:InitiateLayerUpload ecr:UploadLayerPart ecr:CompleteLayerUpload "
        "ecr:PutImage ecr:BatchGetImage ecr:GetDownloadUrlForLayer"
    )
    build = [("ecr:GetAuthorizationToken", "*", {})] + [(x, a, {}) for x in push.split()]
    return {"create": build, "update": build, "delete": []}


def requests_for(p: Plan, r) -> list[Request]:
    out = REQUESTS[r.type](p, r)
    return [Request(op, action, arn, ctx) for op in OPS for action, arn, ctx in out[op]]
