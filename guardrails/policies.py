"""The gpuloan guardrails: what must hold for every stack before `pulumi up` may proceed.

Mandatory (a violation blocks the update):
- gpu-resources-tagged: GPU node groups, launch templates and capacity reservations carry the pool, team and
  environment cost-allocation tags (the environment may come from the provider's default tags).
- elastic-node-groups-bounded: elastic node groups have a max size and ignore desiredSize (the policy Lambda
  owns it; without ignore_changes every `pulumi up` would reset the live size). The one exception is the clamp
  of stacks/capacity/elastic.py: an update that lowers max_nodes below the live size sends desiredSize = maxSize.
- policy-role-no-mutating-star: the policy function's IAM policies grant no mutating action on Resource "*"
  unless a condition scopes it (resource tag, metric namespace).
- ecr-immutable-and-scanned: ECR repositories have IMMUTABLE tags (exclusions only for literal-prefix tags such
  as the registry build cache's) and scan on push.
- pool-budget-with-email: every pool has a budget with at least one email subscriber.
- launch-templates-imdsv2: launch templates require IMDSv2 tokens.
- roles-no-star-on-star: no IAM policy of the stack (inline, role policy, managed policy or an attached AWS managed
  policy) allows every action ("*", or NotAction) on every resource ("*"): that is an administrator role.
- rollout-blockers: the change has no rollout blocker (offline/rollout.py: the EKS cluster, a floor, an elastic
  group that may have nodes up or a reservation replaced or deleted, a control-plane step EKS refuses), unless the
  change accepts them on purpose. CrossGuard sees no base to compare with, so the deploy workflow computes the
  blockers (`gpuloan cost-diff --guardrail-config`) and passes them as this policy's config (pulumi/actions'
  policyPackConfigs); without that config (an administrator's `pulumi up`) it has nothing to report.

Advisory (reported, never blocking):
- spot-pools-diversified: spot node groups list at least two instance types.
- floor-under-budget: a pool's guaranteed floor costs no more per month than its budget (pricing/checks.py
  floor_over_budget, the rule the config validation applies to the floor billed with commitments; here the floor
  is priced on demand from the node groups it sees).
- floor-protected: the guaranteed floor's node groups and capacity reservations are `protect`ed, so a change that
  would replace or delete the floor (an AZ, instance type or reservation edit) stops the update instead of
  taking the floor down. CrossGuard sees a resource's new inputs and options, not the planned operation, so the
  floor is guarded through `protect`; `gpuloan preview`/`cost-diff` name the replacement itself (offline/rollout.py).
  Advisory, because `protect_critical: false` is how a deliberate floor replacement is done.

Props are the engine's (camelCase) resource inputs, as in `gpuloan preview --json`. Values unknown during a
preview (computed from other resources) are skipped, never reported as violations.
"""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any, Callable

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from config import tags
from pricing.checks import floor_over_budget, floor_over_budget_message
from pricing.cost_model.billing import HOURS_PER_MONTH
from pricing.sources import catalog

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
CAPACITY_RESERVATION = "aws:ec2/capacityReservation:CapacityReservation"
ECR_REPOSITORY = "aws:ecr/repository:Repository"
BUDGET = "aws:budgets/budget:Budget"
IAM_ROLE = "aws:iam/role:Role"
IAM_ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
IAM_POLICY = "aws:iam/policy:Policy"
IAM_ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"

# The component types of the policy function (stacks/policy_function/function.py): any type token under gpuloan:policy.
POLICY_COMPONENT = re.compile(r"(^|\$)gpuloan:policy[\w]*:")
READ_ACTION = re.compile(r"^[\w-]+:(Describe|Get|List|BatchGet|View|Query|Scan|Search|Lookup)[\w*]*$")
# Conditions that scope an action on "*" to this stack's resources or to one metric namespace.
SCOPING_CONDITION_KEY = re.compile(r"(ResourceTag/|^cloudwatch:namespace$)", re.I)
# Actions AWS only grants on "*": a VPC Lambda's network interfaces (AWSLambdaVPCAccessExecutionRole) and
# X-Ray trace upload (AWSXRayDaemonWriteAccess). None of them can touch a node group.
UNSCOPABLE_ACTIONS = frozenset(
    {
        "ec2:CreateNetworkInterface",
        "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
)
NARROW_EXCLUSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{2,}\*?$")
BROAD_MANAGED_POLICY = re.compile(
    r":policy/(AdministratorAccess|PowerUserAccess|IAMFullAccess|[A-Za-z0-9]+FullAccess)$"
)


# --- helpers -----------------------------------------------------------------------------------------------


def _known(value: Any) -> bool:
    # Unknown preview values reach policies as None or not at all; only judge what is known.
    return value is not None


def _as_dict(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def provider_default_tags(provider: Any) -> dict[str, str]:
    if provider is None:
        return {}
    default_tags = _as_dict(_as_dict(getattr(provider, "props", {})).get("defaultTags"))
    return dict(_as_dict(default_tags.get("tags")))


def effective_tags(props: dict, provider: Any) -> dict[str, str]:
    """Tags the resource ends up with: the provider's default tags, overridden by its own."""
    return {**provider_default_tags(provider), **(_as_dict(props.get("tags")))}


def tier_of(props: dict) -> str | None:
    return _as_dict(props.get("tags")).get(tags.TAG_TIER) or _as_dict(props.get("labels")).get(tags.LABEL_TIER)


def _instance_types(props: dict) -> list[str]:
    found = list(props.get("instanceTypes") or [])
    if props.get("instanceType"):
        found.append(props["instanceType"])
    return [t for t in found if isinstance(t, str)]


def is_gpu_resource(prices: catalog.Prices, resource_type: str, props: dict) -> bool:
    if resource_type not in (NODE_GROUP, LAUNCH_TEMPLATE, CAPACITY_RESERVATION):
        return False
    if any(prices.lookup(t) is not None and prices.lookup(t).gpus > 0 for t in _instance_types(props)):
        return True
    if "NVIDIA" in str(props.get("amiType") or ""):
        return True
    if tier_of(props) in ("guaranteed", "elastic"):
        return True
    return any(isinstance(t, dict) and t.get("key") == tags.GPU_TAINT_KEY for t in props.get("taints") or [])


def _normalize_path(path: str) -> str:
    return path.replace("_", "").replace("[", ".").replace("]", "").lower()


def _statements(document: Any) -> list[dict]:
    doc = _as_dict(document)
    stmts = doc.get("Statement") or []
    return [stmts] if isinstance(stmts, dict) else [s for s in stmts if isinstance(s, dict)]


def _listify(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def unscoped_mutating_actions(document: Any) -> list[str]:
    """Actions an Allow statement grants on Resource "*" that change something and carry no scoping condition."""
    bad = []
    for stmt in _statements(document):
        if stmt.get("Effect") != "Allow" or "*" not in _listify(stmt.get("Resource")):
            continue
        condition_keys = [k for op in _as_dict(stmt.get("Condition")).values() for k in _as_dict(op)]
        if any(SCOPING_CONDITION_KEY.search(k) for k in condition_keys):
            continue
        for action in _listify(stmt.get("Action")):
            if action in UNSCOPABLE_ACTIONS or READ_ACTION.match(str(action)):
                continue
            bad.append(str(action))
    return bad


def in_policy_function(urn: str) -> bool:
    # urn:pulumi:<stack>::<project>::<parent types joined by $>$<type>::<name>
    parts = urn.split("::")
    return len(parts) >= 3 and bool(POLICY_COMPONENT.search(parts[2]))


def _trusts_lambda(props: dict) -> bool:
    for stmt in _statements(props.get("assumeRolePolicy")):
        principal = _as_dict(stmt.get("Principal"))
        if "lambda.amazonaws.com" in _listify(principal.get("Service")):
            return True
    return False


# --- mandatory resource rules ------------------------------------------------------------------------------


def validate_gpu_tags(prices: catalog.Prices, args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = dict(args.props)
    if not is_gpu_resource(prices, args.resource_type, props):
        return
    if "tags" in props and not _known(props["tags"]):
        return  # computed during preview; judged at `up`
    have = effective_tags(props, args.provider)
    missing = [k for k in (tags.TAG_POOL, tags.TAG_TEAM, tags.TAG_ENVIRONMENT) if not have.get(k)]
    if missing:
        report(
            f"GPU resource '{args.name}' lacks the cost-allocation tag(s) {', '.join(missing)}: its spend would "
            "not show up in the pool's budget or the cost report (use config.tags.pool_tags)"
        )


def validate_elastic_bounded(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = dict(args.props)
    if args.resource_type != NODE_GROUP or tier_of(props) != "elastic":
        return
    scaling = _as_dict(props.get("scalingConfig"))
    max_size = scaling.get("maxSize")
    if not isinstance(max_size, (int, float)) or max_size < 1:
        report(
            f"elastic node group '{args.name}' has no max size (scalingConfig.maxSize): the policy could grow "
            "it without bound"
        )
    ignored = {_normalize_path(p) for p in args.opts.ignore_changes or []}
    clamp = isinstance(max_size, (int, float)) and scaling.get("desiredSize") == max_size
    if not ignored & {"scalingconfig.desiredsize", "scalingconfig"} and not clamp:
        report(
            f"elastic node group '{args.name}' must ignore_changes scalingConfig.desiredSize: the policy Lambda "
            "sets it, and each `pulumi up` would otherwise reset the live size"
        )


def validate_floor_protected(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = dict(args.props)
    floor_group = args.resource_type == NODE_GROUP and tier_of(props) == "guaranteed"
    if not (floor_group or args.resource_type == CAPACITY_RESERVATION):
        return
    if not args.opts.protect:
        report(
            f"guaranteed floor resource '{args.name}' is not protected: a change that replaces it would take the "
            "floor down (set protect_critical: true, the default, unless a replacement is meant)"
        )


def validate_policy_role(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = dict(args.props)
    documents: list[Any] = []
    if args.resource_type == IAM_ROLE and (in_policy_function(args.urn) or _trusts_lambda(props)):
        documents = [p.get("policy") for p in props.get("inlinePolicies") or [] if isinstance(p, dict)]
    elif args.resource_type in (IAM_ROLE_POLICY, IAM_POLICY) and in_policy_function(args.urn):
        documents = [props.get("policy")]
    elif args.resource_type == IAM_ROLE_POLICY_ATTACHMENT and in_policy_function(args.urn):
        arn = str(props.get("policyArn") or "")
        if BROAD_MANAGED_POLICY.search(arn):
            report(
                f"the policy function's role gets the broad managed policy {arn}; it may only resize this "
                "stack's elastic node groups"
            )
        return
    for doc in documents:
        if not isinstance(doc, (str, dict)):
            continue  # unknown during preview
        bad = unscoped_mutating_actions(doc)
        if bad:
            report(
                f"the policy function's IAM policy '{args.name}' allows {', '.join(sorted(bad))} on Resource "
                '"*" without a scoping condition: name the elastic node groups\' ARNs or add a resource-tag '
                "condition, so the guaranteed floor stays untouchable"
            )


# AWS managed policies that allow "*" on "*" (AdministratorAccess is literally that).
ADMIN_MANAGED_POLICY = re.compile(r":policy/AdministratorAccess$")


def star_on_star_statements(document: Any) -> list[str]:
    """Sids (or positions) of Allow statements granting every action on every resource."""
    found = []
    for i, stmt in enumerate(_statements(document)):
        if stmt.get("Effect") != "Allow" or "*" not in _listify(stmt.get("Resource")):
            continue
        # NotAction on "*" allows everything not listed: as good as "*" for an attacker.
        if "*" in _listify(stmt.get("Action")) or "NotAction" in stmt:
            found.append(str(stmt.get("Sid") or f"Statement[{i}]"))
    return found


def validate_no_star_on_star(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = dict(args.props)
    documents: list[Any] = []
    arns: list[str] = []
    if args.resource_type == IAM_ROLE:
        documents = [p.get("policy") for p in props.get("inlinePolicies") or [] if isinstance(p, dict)]
        arns = [str(a) for a in props.get("managedPolicyArns") or []]
    elif args.resource_type in (IAM_ROLE_POLICY, IAM_POLICY):
        documents = [props.get("policy")]
    elif args.resource_type == IAM_ROLE_POLICY_ATTACHMENT:
        arns = [str(props.get("policyArn") or "")]
    for arn in arns:
        if ADMIN_MANAGED_POLICY.search(arn):
            report(
                f"'{args.name}' gives a role {arn}: every action on every resource. Grant the actions the role "
                "needs (stacks/gitops/iam_permissions.py lists them per resource type)"
            )
    for doc in documents:
        if not isinstance(doc, (str, dict)):
            continue  # unknown during preview
        bad = star_on_star_statements(doc)
        if bad:
            report(
                f"IAM policy '{args.name}' allows every action on Resource \"*\" ({', '.join(bad)}): an "
                "administrator. Grant the actions the role needs (stacks/gitops/iam_permissions.py)"
            )


def validate_ecr(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != ECR_REPOSITORY:
        return
    props = dict(args.props)
    mutability = props.get("imageTagMutability")
    if mutability == "IMMUTABLE_WITH_EXCLUSION":
        # Registry build-cache tags are rewritten by every build; a literal prefix keeps version tags immutable.
        filters = [
            f.get("filter") for f in props.get("imageTagMutabilityExclusionFilters") or [] if isinstance(f, dict)
        ]
        broad = [f for f in filters if not isinstance(f, str) or not NARROW_EXCLUSION.match(f)]
        if broad or not filters:
            report(
                f"ECR repository '{args.name}' exempts {', '.join(map(str, broad)) or 'no named'} tags from "
                "immutability: exclusions must be literal prefixes such as 'buildcache-*'"
            )
    elif mutability != "IMMUTABLE":
        report(
            f"ECR repository '{args.name}' must set imageTagMutability IMMUTABLE: a pushed tag must always mean "
            "the same image (pods pinned to it)"
        )
    if _as_dict(props.get("imageScanningConfiguration")).get("scanOnPush") is not True:
        report(f"ECR repository '{args.name}' must scan on push (imageScanningConfiguration.scanOnPush)")


def validate_imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    if _as_dict(dict(args.props).get("metadataOptions")).get("httpTokens") != "required":
        report(
            f"launch template '{args.name}' must require IMDSv2 (metadataOptions.httpTokens = required): IMDSv1 "
            "lets any SSRF in a pod read the node role's credentials"
        )


# --- stack rules -------------------------------------------------------------------------------------------


def _resources(args: StackValidationArgs, type_: str) -> list:
    return [r for r in args.resources if r.resource_type == type_]


def pools_in_stack(prices: catalog.Prices, args: StackValidationArgs) -> dict[str, list]:
    """Pool name -> its GPU node groups (from the gpuloan:pool tag)."""
    pools: dict[str, list] = {}
    for r in _resources(args, NODE_GROUP):
        pool = _as_dict(r.props.get("tags")).get(tags.TAG_POOL)
        if pool and is_gpu_resource(prices, r.resource_type, dict(r.props)):
            pools.setdefault(pool, []).append(r)
    return pools


def _budget_filter_values(budget_props: dict, key: str) -> list[str]:
    """Values of tag `key` a budget filters on: a classic `TagKeyValue` filter (`user:<key>$<value>`) or a
    filter expression (a `tags` block, alone or among `ands`)."""
    prefix = f"user:{key}$"
    values = []
    for f in budget_props.get("costFilters") or []:
        if isinstance(f, dict) and f.get("name") == "TagKeyValue":
            values += [v[len(prefix) :] for v in f.get("values") or [] if isinstance(v, str) and v.startswith(prefix)]
    expression = budget_props.get("filterExpression")
    if isinstance(expression, dict):
        for block in [expression, *(expression.get("ands") or [])]:
            tag = block.get("tags") if isinstance(block, dict) else None
            if isinstance(tag, dict) and tag.get("key") == key:
                values += [v for v in tag.get("values") or [] if isinstance(v, str)]
    return values


def _emails(budget_props: dict) -> list[str]:
    return [
        e
        for n in budget_props.get("notifications") or []
        if isinstance(n, dict)
        for e in n.get("subscriberEmailAddresses") or []
    ]


def pool_budgets(args: StackValidationArgs) -> dict[str, list]:
    found: dict[str, list] = {}
    for b in _resources(args, BUDGET):
        for pool in _budget_filter_values(dict(b.props), tags.TAG_POOL):
            found.setdefault(pool, []).append(b)
    return found


def validate_pool_budgets(prices: catalog.Prices, args: StackValidationArgs, report: ReportViolation) -> None:
    pools = pools_in_stack(prices, args)
    budgets = pool_budgets(args)
    env_budgets = [
        b
        for b in _resources(args, BUDGET)
        if _budget_filter_values(dict(b.props), tags.TAG_ENVIRONMENT)
        and not _budget_filter_values(dict(b.props), tags.TAG_POOL)
    ]
    for pool, groups in sorted(pools.items()):
        own = budgets.get(pool, [])
        # With a single pool the environment budget watches exactly that pool's spend (plus shared platform
        # costs, which only makes it alert earlier), so it counts as the pool's budget.
        candidates = own or (env_budgets if len(pools) == 1 else [])
        if not candidates:
            report(
                f"pool '{pool}' has no budget: add pools[].budget with alert_emails to its stack config", groups[0].urn
            )
        elif not any(_emails(dict(b.props)) for b in candidates):
            report(
                f"pool '{pool}'s budget emails nobody: add at least one address to its budget.alert_emails",
                candidates[0].urn,
            )


def floor_monthly_usd(prices: catalog.Prices, args: StackValidationArgs) -> dict[str, tuple[float, list[str]]]:
    """Pool -> (guaranteed floor's on-demand USD per month, notes), from node group sizes and catalog prices."""
    templates = {}
    for lt in _resources(args, LAUNCH_TEMPLATE):
        t = _as_dict(lt.props.get("tags"))
        if t.get(tags.TAG_TIER) == "guaranteed" and t.get(tags.TAG_POOL):
            templates[t[tags.TAG_POOL]] = lt.props.get("instanceType")
    out: dict[str, tuple[float, list[str]]] = {}
    for pool, groups in pools_in_stack(prices, args).items():
        total, notes = 0.0, []
        for ng in groups:
            if tier_of(dict(ng.props)) != "guaranteed":
                continue
            region = str(_as_dict(getattr(ng.provider, "props", {})).get("region") or "")
            types = _instance_types(dict(ng.props)) or [templates.get(pool)]
            scaling = _as_dict(ng.props.get("scalingConfig"))
            # A Capacity Block is paid for its whole window whatever its group's size at this `pulumi up` (0 before
            # its start: the policy function raises it later): count its max, the block's size.
            nodes = (
                scaling.get("maxSize")
                if ng.props.get("capacityType") == "CAPACITY_BLOCK"
                else scaling.get("desiredSize")
            ) or 0
            price = prices.price(types[0], region) if types[0] and region else None
            if price is None:
                notes.append(f"no price for {types[0]} in {region or 'an unknown region'}")
                continue
            total += price.ondemand_usd_per_hour * float(nodes) * HOURS_PER_MONTH
        out[pool] = (total, notes)
    return out


def validate_floor_under_budget(prices: catalog.Prices, args: StackValidationArgs, report: ReportViolation) -> None:
    budgets = pool_budgets(args)
    for pool, (fixed_usd, _notes) in sorted(floor_monthly_usd(prices, args).items()):
        for b in budgets.get(pool, []):
            try:
                limit_usd = float(b.props.get("limitAmount"))
            except (TypeError, ValueError):
                continue
            if floor_over_budget(fixed_usd, limit_usd):  # the config validation's rule (pricing/checks.py)
                report(
                    f"pool '{pool}': {floor_over_budget_message(fixed_usd, 'on demand', 'budget', limit_usd)}; "
                    "elastic capacity would be capped at once",
                    b.urn,
                )


# --- advisory ----------------------------------------------------------------------------------------------


def validate_spot_diversified(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = dict(args.props)
    if args.resource_type != NODE_GROUP or props.get("capacityType") != "SPOT":
        return
    types = props.get("instanceTypes")
    if isinstance(types, list) and len(types) < 2:
        report(
            f"spot node group '{args.name}' uses one instance type ({', '.join(types) or 'none'}): list at least "
            "two with the same GPUs per node so one spot shortage does not stop the pool"
        )


ACCEPT_TRAILER = "Rollout-Blockers-Accepted"  # gpuloan/render/cost_comment.py; the pack imports no command-line code
ROLLOUT_BLOCKERS_SCHEMA = PolicyConfigSchema(
    properties={
        "blockers": {"type": "array", "items": {"type": "string"}},
        "administrator_blockers": {"type": "array", "items": {"type": "string"}},
        "accepted": {"type": "string"},
    }
)


def validate_rollout_blockers(args: StackValidationArgs, report: ReportViolation) -> None:
    config = args.get_config() or {}
    for sentence in config.get("administrator_blockers") or []:
        report(
            f"rollout blocker CI's deploy role cannot apply: {sentence}; an administrator applies it "
            '(docs/gitops.md, "Rollout blockers")'
        )
    if str(config.get("accepted") or "").strip():
        return
    for sentence in config.get("blockers") or []:
        report(
            f"rollout blocker: {sentence}; to apply it on purpose, add the trailer '{ACCEPT_TRAILER}: <why>' "
            'to the commit (docs/gitops.md, "Rollout blockers")'
        )


def _resource_policy(name: str, description: str, fn: Callable, level: EnforcementLevel) -> ResourceValidationPolicy:
    return ResourceValidationPolicy(name=name, description=description, validate=fn, enforcement_level=level)


MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY


def policies(prices: catalog.Prices) -> list:
    """The pack's rules; those that know a GPU type or price one read `prices` (the pack's entry resolves them
    once, __main__.py)."""
    return [
        _resource_policy(
            "gpu-resources-tagged",
            "GPU resources carry the pool, team and environment tags.",
            partial(validate_gpu_tags, prices),
            MANDATORY,
        ),
        _resource_policy(
            "elastic-node-groups-bounded",
            "Elastic node groups have a max size and ignore desiredSize.",
            validate_elastic_bounded,
            MANDATORY,
        ),
        _resource_policy(
            "policy-role-no-mutating-star",
            "The policy function's role has no mutating action on '*'.",
            validate_policy_role,
            MANDATORY,
        ),
        _resource_policy(
            "ecr-immutable-and-scanned", "ECR repositories are immutable and scanned on push.", validate_ecr, MANDATORY
        ),
        StackValidationPolicy(
            name="pool-budget-with-email",
            description="Every pool has a budget that emails someone.",
            validate=partial(validate_pool_budgets, prices),
            enforcement_level=MANDATORY,
        ),
        _resource_policy("launch-templates-imdsv2", "Launch templates require IMDSv2.", validate_imdsv2, MANDATORY),
        _resource_policy(
            "roles-no-star-on-star",
            "No role of the stack may do every action on every resource.",
            validate_no_star_on_star,
            MANDATORY,
        ),
        StackValidationPolicy(
            name="rollout-blockers",
            description="The change replaces or deletes nothing a reviewer must stop at, unless it says so on purpose.",
            validate=validate_rollout_blockers,
            enforcement_level=MANDATORY,
            config_schema=ROLLOUT_BLOCKERS_SCHEMA,
        ),
        _resource_policy(
            "spot-pools-diversified",
            "Spot node groups use at least two instance types.",
            validate_spot_diversified,
            ADVISORY,
        ),
        StackValidationPolicy(
            name="floor-under-budget",
            description="A pool's guaranteed floor costs less than its budget.",
            validate=partial(validate_floor_under_budget, prices),
            enforcement_level=ADVISORY,
        ),
        _resource_policy(
            "floor-protected",
            "The guaranteed floor's node groups and reservations are protected.",
            validate_floor_protected,
            ADVISORY,
        ),
    ]
