"""The policy function: Lambda (zip of policy/), its least-privilege role, schedule, state table, DLQ, alarms,
VPC placement and its read-only Kubernetes access entry.

Least privilege (DESIGN.md decision 5): mutating EKS / Auto Scaling actions are scoped to this stack's
*elastic* node groups (EKS node group ARNs by name prefix; ASG termination by the eks:nodegroup-name tag EKS puts
on each group's ASG, matched on the same prefix, and its eks:cluster-name tag, this cluster's name). Node group names are generated from a prefix
(stacks/capacity/pools.py), so the role is scoped to `<env>-<pool>-spot_*` / `<env>-<pool>-on-demand_*` and stays valid
across a create-before-delete replacement; the settings carry the groups' actual names. The guaranteed groups appear in no statement, except a floor on a Capacity Block, whose desired
size the policy sets inside the block's window (DescribeNodegroup and UpdateNodegroupConfig on that group only; no
termination). Reads that AWS cannot scope (DescribeAutoScalingGroups, DescribeScalingActivities, DescribeInstances,
GetMetricData, and DescribeCapacityReservations where a floor is a Capacity Block) are on "*".
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws

from policy import metric_names
from config import tags, versions
from config.names import GROUP_GUARANTEED, GROUP_ON_DEMAND, GROUP_SPOT, node_group_name_pattern
from config.node_sizes import pool_sizes, size_suffix
from config.config import ElasticCapacity as CapacityMode
from config.config import GpuLoanConfig, Reservation
from stacks.policy_function.package import HANDLER, build_zip, source_code_hash
from pricing.policy_settings import GroupNames, settings_for
from stacks.policy_function.preview_mode import unknown_prices_allowed
from pricing.sources.catalog import Prices

if TYPE_CHECKING:
    from stacks.cluster import Cluster

BUILD_DIR = Path(__file__).resolve().parents[2] / "build"
TIMEOUT_SECONDS = 50  # below the 1-minute schedule, so ticks do not overlap
MEMORY_MB = 256
LAMBDA_PRINCIPAL = "lambda.amazonaws.com"
SCHEDULER_PRINCIPAL = "scheduler.amazonaws.com"
EVENTS_PRINCIPAL = "events.amazonaws.com"
# EC2 sends this to the default event bus 2 minutes before it reclaims a spot instance (policy/handler.py reads it).
SPOT_WARNING_PATTERN = {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]}
REBALANCE_PATTERN = {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]}
EKS_NODEGROUP_TAG = "eks:nodegroup-name"  # EKS tags each managed node group's ASG with its name
EKS_CLUSTER_TAG = "eks:cluster-name"  # ... and with its cluster's name
LAMBDA_ENV_LIMIT_BYTES = 4096  # all keys and values together (Lambda quotas)
POLICY_ERRORS_TICKS = 5  # the PolicyErrors alarm looks at the last 5 ticks ...
POLICY_ERRORS_DATAPOINTS = 3  # ... and fires when 3 of them had errors (one throttled call is not an outage)

MUTATING_EKS = ["eks:UpdateNodegroupConfig"]
MUTATING_ASG = ["autoscaling:TerminateInstanceInAutoScalingGroup"]
STATE_TABLE_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:UpdateItem"]


SCHEDULE_NAME_MAX = 64  # EventBridge Scheduler: a schedule's name is 1-64 characters of [0-9a-zA-Z-_.]


def schedule_specs(name: str, fn_name: str, cfg: GpuLoanConfig) -> list[tuple[str, str, dict]]:
    """(Pulumi resource name, schedule name, the event it sends) for each schedule of the function: one per shard
    of `policy.shards`, else the single schedule of every pool. A shard's schedule name that would pass
    SCHEDULE_NAME_MAX keeps its end unique with a digest of the shard's name."""
    if not cfg.policy.shards:
        return [(f"{name}-schedule", f"{fn_name}-tick", {})]
    out = []
    for shard in cfg.policy.shards:
        schedule_name = f"{fn_name}-tick-{shard.name}"
        if len(schedule_name) > SCHEDULE_NAME_MAX:
            digest = hashlib.sha256(shard.name.encode()).hexdigest()[:8]
            schedule_name = f"{schedule_name[: SCHEDULE_NAME_MAX - 9]}-{digest}"
        out.append((f"{name}-schedule-{shard.name}", schedule_name, {"shard": shard.name}))
    return out


def group_patterns(cfg: GpuLoanConfig) -> dict[str, GroupNames]:
    """Per pool, the name patterns (`<prefix>*`) of the groups the capacity components create: what IAM is
    scoped to (the actual names are generated at create time)."""
    out = {}
    for pool in cfg.pools:
        e = pool.elastic
        spot = od = None
        if e is not None and e.capacity in (CapacityMode.spot, CapacityMode.spot_then_on_demand):
            spot = node_group_name_pattern(cfg.environment, pool.name, GROUP_SPOT)
        if e is not None and e.capacity in (CapacityMode.on_demand, CapacityMode.spot_then_on_demand):
            od = node_group_name_pattern(cfg.environment, pool.name, GROUP_ON_DEMAND)
        floor = node_group_name_pattern(cfg.environment, pool.name, GROUP_GUARANTEED) if pool.guaranteed else None
        others: tuple[tuple[int, str | None, str | None], ...] = ()
        if e is not None:  # the groups of the pool's other node sizes (config/node_sizes.py)
            others = tuple(
                (
                    size.gpus_per_node,
                    node_group_name_pattern(cfg.environment, pool.name, GROUP_SPOT + size_suffix(size))
                    if spot
                    else None,
                    node_group_name_pattern(cfg.environment, pool.name, GROUP_ON_DEMAND + size_suffix(size))
                    if od
                    else None,
                )
                for size in pool_sizes(e, cfg.instance_facts)
                if not size.first
            )
        out[pool.name] = GroupNames(spot, od, floor, others)
    return out


def policy_document(
    *,
    partition: str,
    region: str,
    account: str,
    cluster_name: str,
    elastic: list[str],
    guaranteed: list[str],
    table_arn: str,
    log_group_arn: str,
    dlq_arn: str,
    topic_arn: str | None,
    kms_key_arn: str | None,
    budget_names: list[str],
    subnet_ids: list[str],
    security_group_id: str,
    capacity_blocks: list[str] | None = None,
) -> dict:
    """The role's inline policy (pure, so tests can check it without running the program). `elastic` and
    `guaranteed` are node group name patterns (`<prefix>*`, group_patterns); `capacity_blocks` the patterns of the
    floors that sit on a Capacity Block (a subset of `guaranteed`): the one change the policy makes to them is their
    desired size inside the block's window (policy/capacity_blocks.py)."""
    base = f"arn:{partition}"
    blocks = list(capacity_blocks or [])
    unknown = sorted(set(blocks) - set(guaranteed))
    if unknown:
        raise ValueError(f"capacity_blocks {unknown} are not floors (guaranteed)")

    def nodegroup(name: str) -> str:
        return f"{base}:eks:{region}:{account}:nodegroup/{cluster_name}/{name}/*"

    statements = [
        {
            "Sid": "Logs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [f"{log_group_arn}:*"],
        },
        {
            "Sid": "ReadCluster",
            "Effect": "Allow",
            "Action": ["eks:DescribeCluster"],
            "Resource": [f"{base}:eks:{region}:{account}:cluster/{cluster_name}"],
        },
        # Read again just before the policy changes a group (policy/io/nodegroups.py recheck): only the groups it may
        # change. Every group, floors included, is read through its Auto Scaling group (ReadUnscopable).
        {
            "Sid": "ReadNodeGroups",
            "Effect": "Allow",
            "Action": ["eks:DescribeNodegroup"],
            "Resource": [nodegroup(n) for n in sorted(elastic + blocks)],
        },
        {
            "Sid": "ResizeElasticNodeGroups",
            "Effect": "Allow",
            "Action": MUTATING_EKS,
            "Resource": [nodegroup(n) for n in sorted(elastic)],
        },
        *(
            [
                {
                    "Sid": "CapacityBlockWindow",
                    "Effect": "Allow",
                    "Action": MUTATING_EKS,
                    "Resource": [nodegroup(n) for n in sorted(capacity_blocks)],
                }
            ]
            if capacity_blocks
            else []
        ),
        {
            "Sid": "ReclaimIdleElasticInstances",
            "Effect": "Allow",
            "Action": MUTATING_ASG,
            "Resource": [f"{base}:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/eks-*"],
            # Both tags are EKS's own on every managed group's ASG: the name alone would also match a group of the
            # same name in another cluster of the account (issue 42); the cluster name is unique per region.
            "Condition": {
                "StringLike": {f"autoscaling:ResourceTag/{EKS_NODEGROUP_TAG}": sorted(elastic)},
                "StringEquals": {f"autoscaling:ResourceTag/{EKS_CLUSTER_TAG}": cluster_name},
            },
        },
        {
            "Sid": "ReadUnscopable",
            "Effect": "Allow",
            "Resource": ["*"],
            "Action": [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeScalingActivities",
                "ec2:DescribeInstances",
                "cloudwatch:GetMetricData",
            ],
        },
        # PutItem/DeleteItem also take and release the tick lease; UpdateItem records a spot warning without the
        # lease and prunes expired records (policy/io/state.py). Exactly the calls DynamoState makes (a test derives
        # them from its requests), on this table only.
        {"Sid": "State", "Effect": "Allow", "Action": STATE_TABLE_ACTIONS, "Resource": [table_arn]},
        {"Sid": "DeadLetters", "Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": [dlq_arn]},
        # Lambda creates the function's ENIs with this role: only in the cluster's subnets, with its own SG.
        {
            "Sid": "VpcNetworkInterfaces",
            "Effect": "Allow",
            "Action": ["ec2:CreateNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"],
            "Resource": [
                f"{base}:ec2:{region}:{account}:network-interface/*",
                *[f"{base}:ec2:{region}:{account}:subnet/{s}" for s in subnet_ids],
                f"{base}:ec2:{region}:{account}:security-group/{security_group_id}",
            ],
        },
        # The Lambda guide's own form for DeleteNetworkInterface: "include all resource IDs", for example
        # arn:aws:ec2:<region>:<account>:*/*; a narrower resource can make CreateFunction refuse the role
        # (docs/aws-rules.md, Lambda execution role).
        {
            "Sid": "VpcDeleteNetworkInterfaces",
            "Effect": "Allow",
            "Action": ["ec2:DeleteNetworkInterface"],
            "Resource": [f"{base}:ec2:{region}:{account}:*/*"],
        },
        {
            "Sid": "VpcDescribe",
            "Effect": "Allow",
            "Action": ["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups"],
            "Resource": ["*"],
        },
    ]
    if blocks:
        # The blocks' real dates (policy/io/reservations.py). DescribeCapacityReservations has no resource-level
        # permission (a List action without resource types, docs/aws-rules.md): "*" is the only Resource it takes.
        statements.append(
            {
                "Sid": "ReadCapacityBlockDates",
                "Effect": "Allow",
                "Action": ["ec2:DescribeCapacityReservations"],
                "Resource": ["*"],
            }
        )
    if budget_names:
        statements.append(
            {
                "Sid": "ReadBudgets",
                "Effect": "Allow",
                "Action": ["budgets:ViewBudget"],
                "Resource": [f"{base}:budgets::{account}:budget/{n}" for n in sorted(budget_names)],
            }
        )
    if topic_arn:
        statements.append({"Sid": "Notify", "Effect": "Allow", "Action": ["sns:Publish"], "Resource": [topic_arn]})
    if kms_key_arn:
        statements.append(
            {
                "Sid": "NotifyEncryptedTopic",
                "Effect": "Allow",
                "Action": ["kms:GenerateDataKey", "kms:Decrypt"],
                "Resource": [kms_key_arn],
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def function_environment(state_table: pulumi.Input[str], topic_arn: pulumi.Input[str] | None) -> dict:
    """The function's environment variables: names of resources only, a few hundred bytes whatever the config
    (the settings are in the package), far under Lambda's 4 KB limit."""
    variables = {"GPULOAN_STATE_TABLE": state_table}
    if topic_arn is not None:
        variables["GPULOAN_TOPIC_ARN"] = topic_arn
    return variables


def package_path(environment: str, data: bytes) -> Path:
    """Where the package with these bytes lives: named by its content, so two programs of the same environment
    (a preview and a cost-diff of another commit, say) never overwrite each other's package."""
    return BUILD_DIR / f"policy-function-{environment}-{hashlib.sha256(data).hexdigest()[:16]}.zip"


def write_package(environment: str, data: bytes) -> Path:
    """The zip on disk for FileArchive; written once per content (build/ is a cache, safe to delete)."""
    BUILD_DIR.mkdir(exist_ok=True)
    path = package_path(environment, data)
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # atomic: a reader never sees half a zip
    return path


@dataclass(frozen=True)
class PolicyFunctionArgs:
    cfg: GpuLoanConfig
    cluster: Cluster  # name, arn, private_subnet_ids, vpc_id, cluster_security_group_id
    account_id: pulumi.Input[str]
    partition: pulumi.Input[str]
    alerts_topic_arn: pulumi.Input[str] | None = None
    alerts_kms_key_arn: pulumi.Input[str] | None = None
    depends_on: list | None = None  # the node groups, so the function never runs before its groups exist
    # pool -> {"spot" | "on_demand" | "guaranteed": the group's generated name}, from the capacity components.
    group_names: Mapping[str, Mapping[str, pulumi.Input[str]]] | None = None
    # The prices the settings carry (the budget cap's rates): the program entry's, with the config's own.
    prices: Prices = field(kw_only=True)

    @staticmethod
    def from_config(
        cfg: GpuLoanConfig,
        prices: Prices,
        cluster: Cluster,
        account_id: pulumi.Input[str],
        partition: pulumi.Input[str],
        alerts_topic_arn: pulumi.Input[str] | None = None,
        alerts_kms_key_arn: pulumi.Input[str] | None = None,
        *,
        node_groups: list | None = None,
        group_names: Mapping[str, Mapping[str, pulumi.Input[str]]] | None = None,
    ) -> PolicyFunctionArgs:
        """The function of `cfg`'s pools priced by `prices`; `node_groups` (the capacity components) are created
        first and `group_names` are their generated names, which the settings carry."""
        return PolicyFunctionArgs(
            cfg,
            cluster,
            account_id,
            partition,
            alerts_topic_arn,
            alerts_kms_key_arn,
            depends_on=node_groups,
            group_names=group_names,
            prices=prices,
        )


class PolicyFunction(pulumi.ComponentResource):
    function_name: pulumi.Output[str]
    role_arn: pulumi.Output[str]
    alarm_arns: pulumi.Output[list[str]]  # for the dashboard's alarm widget

    def __init__(self, name: str, args: PolicyFunctionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:policy:PolicyFunction", name, None, opts)
        cfg, cluster = args.cfg, args.cluster
        child = pulumi.ResourceOptions(parent=self)
        env = cfg.environment
        fn_name = f"gpuloan-{env}-policy"
        patterns = group_patterns(cfg)
        elastic = sorted(n for g in patterns.values() for n in (g.spot, g.on_demand, *g.other_size_groups) if n)
        guaranteed = sorted(n for g in patterns.values() if (n := g.guaranteed))
        capacity_blocks = sorted(
            n
            for p in cfg.pools
            if p.guaranteed is not None
            and p.guaranteed.reservation == Reservation.capacity_block
            and (n := patterns[p.name].guaranteed)
        )
        from pricing.policy_settings import default_budget_names

        budget_names = default_budget_names(cfg)

        self.table = aws.dynamodb.Table(
            f"{name}-state",
            name=f"{fn_name}-state",
            billing_mode="PAY_PER_REQUEST",
            hash_key="pk",
            attributes=[aws.dynamodb.TableAttributeArgs(name="pk", type="S")],
            server_side_encryption=aws.dynamodb.TableServerSideEncryptionArgs(enabled=True),
            point_in_time_recovery=aws.dynamodb.TablePointInTimeRecoveryArgs(enabled=True),
            # The policy's memory (spend estimate, fallback clocks, notification times): losing it resets the
            # budget estimate. Protected unless protect_critical is false: Pulumi's `protect` guards only Pulumi's
            # own deletes, DynamoDB's deletion protection every DeleteTable, whoever calls it (issue 42). Turning it
            # on or off is an in-place UpdateTable (DynamoDB developer guide, "Using deletion protection").
            deletion_protection_enabled=cfg.protect_critical,
            opts=pulumi.ResourceOptions(parent=self, protect=cfg.protect_critical),
        )
        self.dlq = aws.sqs.Queue(
            f"{name}-dlq",
            name=f"{fn_name}-dlq",
            sqs_managed_sse_enabled=True,
            message_retention_seconds=14 * 24 * 3600,
            opts=child,
        )
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs", name=f"/aws/lambda/{fn_name}", retention_in_days=cfg.policy.log_retention_days, opts=child
        )
        self.role = aws.iam.Role(
            f"{name}-role",
            name=f"{fn_name}-{cfg.region}",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"Service": LAMBDA_PRINCIPAL}}
                    ],
                }
            ),
            opts=child,
        )
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=cluster.vpc_id,
            description=f"gpuloan {env} policy function: HTTPS out only",
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    protocol="tcp",
                    from_port=443,
                    to_port=443,
                    cidr_blocks=["0.0.0.0/0"],
                    description="AWS APIs (NAT or VPC endpoints) and the EKS API",
                )
            ],
            # Lambda releases a VPC function's network interfaces only some time after the function is deleted
            # (often 20+ minutes); until then deleting the group fails with DependencyViolation. The provider
            # retries for its delete timeout, so give it longer than Lambda takes.
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=pulumi.CustomTimeouts(delete="60m")),
        )
        # The cluster's own SG must accept the function on 443 for a private (or CIDR-limited) endpoint.
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-to-cluster",
            security_group_id=cluster.cluster_security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            referenced_security_group_id=self.security_group.id,
            description="gpuloan policy function -> EKS API",
            opts=child,
        )
        document = pulumi.Output.all(
            args.partition,
            args.account_id,
            cluster.name,
            self.table.arn,
            self.log_group.arn,
            self.dlq.arn,
            args.alerts_topic_arn,
            args.alerts_kms_key_arn,
            cluster.private_subnet_ids,
            self.security_group.id,
        ).apply(
            lambda v: json.dumps(
                policy_document(
                    partition=v[0],
                    region=cfg.region,
                    account=v[1],
                    cluster_name=v[2],
                    elastic=elastic,
                    guaranteed=guaranteed,
                    table_arn=v[3],
                    log_group_arn=v[4],
                    dlq_arn=v[5],
                    topic_arn=v[6],
                    kms_key_arn=v[7],
                    budget_names=list(budget_names.values()),
                    subnet_ids=list(v[8] or []),
                    security_group_id=v[9],
                    capacity_blocks=capacity_blocks,
                )
            )
        )
        policy = aws.iam.RolePolicy(f"{name}-policy", role=self.role.id, policy=document, opts=child)

        # The settings go inside the package (stacks/policy_function/package.py): Lambda's environment variables are
        # limited to 4 KB in total and the settings of about six pools exceed it. They name the node groups' generated
        # names (known once the groups exist), so the package is built from those outputs; a preview of a new stack
        # shows the code as computed, every later preview as the exact package.
        # A deployment needs every price (the budget cap spends by them); a preview may show them as unknown.
        preview_only = pulumi.runtime.is_dry_run() or unknown_prices_allowed()

        def package(v) -> tuple[str, str]:
            settings_json = settings_for(
                args.prices, cfg, v[0], v[1], budget_names, allow_unknown_prices=preview_only
            ).to_json()
            data = build_zip(settings_json=settings_json)
            return str(write_package(env, data)), source_code_hash(data)

        built = pulumi.Output.all(cluster.name, pulumi.Output.from_input(args.group_names or {})).apply(package)
        variables = function_environment(self.table.name, args.alerts_topic_arn)
        self.function = aws.lambda_.Function(
            f"{name}-fn",
            name=fn_name,
            role=self.role.arn,
            runtime=versions.POLICY_LAMBDA_RUNTIME,
            architectures=[versions.POLICY_LAMBDA_ARCHITECTURE],
            handler=HANDLER,
            code=built.apply(lambda b: pulumi.FileArchive(b[0])),
            source_code_hash=built.apply(lambda b: b[1]),
            timeout=TIMEOUT_SECONDS,
            memory_size=MEMORY_MB,
            # Optional (policy.reserve_concurrency): Lambda rejects any reservation that would leave the account
            # under 100 unreserved executions, which is every new account. The state table's lease keeps two
            # ticks from both acting whether or not it is set.
            reserved_concurrent_executions=1 if cfg.policy.reserve_concurrency else None,
            environment=aws.lambda_.FunctionEnvironmentArgs(variables=variables),
            vpc_config=aws.lambda_.FunctionVpcConfigArgs(
                subnet_ids=cluster.private_subnet_ids, security_group_ids=[self.security_group.id]
            ),
            logging_config=aws.lambda_.FunctionLoggingConfigArgs(log_format="Text", log_group=self.log_group.name),
            description=f"gpuloan {env}: resize elastic GPU node groups from GPU metrics, pending pods and budget",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy, self.log_group, *(args.depends_on or [])]),
        )
        # Scheduler invokes asynchronously: no retries (the next tick is a retry), failures to the DLQ.
        aws.lambda_.FunctionEventInvokeConfig(
            f"{name}-async",
            function_name=self.function.name,
            maximum_retry_attempts=0,
            maximum_event_age_in_seconds=60 * max(cfg.policy.schedule_minutes, 1),
            destination_config=aws.lambda_.FunctionEventInvokeConfigDestinationConfigArgs(
                on_failure=aws.lambda_.FunctionEventInvokeConfigDestinationConfigOnFailureArgs(destination=self.dlq.arn)
            ),
            opts=child,
        )

        scheduler_role = aws.iam.Role(
            f"{name}-scheduler-role",
            name=f"{fn_name}-scheduler-{cfg.region}",
            assume_role_policy=pulumi.Output.from_input(args.account_id).apply(
                lambda acct: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Action": "sts:AssumeRole",
                                "Principal": {"Service": SCHEDULER_PRINCIPAL},
                                "Condition": {"StringEquals": {"aws:SourceAccount": acct}},
                            }
                        ],
                    }
                )
            ),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-scheduler-policy",
            role=scheduler_role.id,
            policy=pulumi.Output.all(self.function.arn, self.dlq.arn).apply(
                lambda v: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Action": ["lambda:InvokeFunction"], "Resource": [v[0]]},
                            {"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": [v[1]]},
                        ],
                    }
                )
            ),
            opts=child,
        )
        minutes = cfg.policy.schedule_minutes
        # One schedule per shard (docs/policy.md, "Shards"), each invoking the same function with {"shard": name}:
        # every shard gets its own invocation, lease and deadline, and one that fails or runs long never delays
        # another. Without shards, the one schedule of every pool, as before (same resource name, same URN).
        for resource_name, schedule_name, event in schedule_specs(name, fn_name, cfg):
            aws.scheduler.Schedule(
                resource_name,
                name=schedule_name,
                schedule_expression=f"rate({minutes} minute{'s' if minutes > 1 else ''})",
                flexible_time_window=aws.scheduler.ScheduleFlexibleTimeWindowArgs(mode="OFF"),
                target=aws.scheduler.ScheduleTargetArgs(
                    arn=self.function.arn,
                    role_arn=scheduler_role.arn,
                    input=json.dumps(event),
                    retry_policy=aws.scheduler.ScheduleTargetRetryPolicyArgs(
                        maximum_retry_attempts=0, maximum_event_age_in_seconds=60
                    ),
                    dead_letter_config=aws.scheduler.ScheduleTargetDeadLetterConfigArgs(arn=self.dlq.arn),
                ),
                opts=child,
            )

        # The 2-minute spot interruption notice, delivered to the function at once (not at the next tick): the
        # warned node stops counting as capacity and its GPU pods count as pending, so their replacement starts
        # with the notice, as Karpenter's interruption handling does. Only this rule may invoke the function
        # through EventBridge (the permission names the rule's ARN); no role is needed for a Lambda target.
        self.spot_warning_rule = aws.cloudwatch.EventRule(
            f"{name}-spot-warning",
            name=f"{fn_name}-spot-warning",
            description="EC2 Spot Instance Interruption Warning -> gpuloan policy function",
            event_pattern=json.dumps(SPOT_WARNING_PATTERN),
            opts=child,
        )
        aws.lambda_.Permission(
            f"{name}-spot-warning-invoke",
            action="lambda:InvokeFunction",
            function=self.function.name,
            principal=EVENTS_PRINCIPAL,
            source_arn=self.spot_warning_rule.arn,
            source_account=args.account_id,
            opts=child,
        )
        aws.cloudwatch.EventTarget(
            f"{name}-spot-warning-target",
            rule=self.spot_warning_rule.name,
            arn=self.function.arn,
            # a notice older than a minute is half its warning: the next scheduled tick does better
            retry_policy=aws.cloudwatch.EventTargetRetryPolicyArgs(
                maximum_event_age_in_seconds=60, maximum_retry_attempts=1
            ),
            opts=child,
        )

        # Early spot warnings (opt-in, elastic.rebalance_checkpoint): EC2's rebalance recommendation, delivered to the
        # function, which taints the named node so jobs that watch it checkpoint (policy/rebalance.py). Only when a
        # pool asks for it: without one, nothing listens and no permission exists.
        self.rebalance_rule = None
        if any(p.elastic is not None and p.elastic.rebalance_checkpoint for p in cfg.pools):
            self.rebalance_rule = aws.cloudwatch.EventRule(
                f"{name}-rebalance",
                name=f"{fn_name}-rebalance",
                description="EC2 Instance Rebalance Recommendation -> gpuloan policy function",
                event_pattern=json.dumps(REBALANCE_PATTERN),
                opts=child,
            )
            aws.lambda_.Permission(
                f"{name}-rebalance-invoke",
                action="lambda:InvokeFunction",
                function=self.function.name,
                principal=EVENTS_PRINCIPAL,
                source_arn=self.rebalance_rule.arn,
                source_account=args.account_id,
                opts=child,
            )
            aws.cloudwatch.EventTarget(
                f"{name}-rebalance-target",
                rule=self.rebalance_rule.name,
                arn=self.function.arn,
                # the recommendation is worth acting on only while the job can still checkpoint before the notice
                retry_policy=aws.cloudwatch.EventTargetRetryPolicyArgs(
                    maximum_event_age_in_seconds=120, maximum_retry_attempts=2
                ),
                opts=child,
            )

        alarm_actions = [args.alerts_topic_arn] if args.alerts_topic_arn is not None else []
        alarms = []
        for metric, threshold, detail in (
            (
                "Errors",
                1,
                "the function failed in 3 of the last 5 minutes (bad settings or a crash); capacity is left as it was",
            ),
            (
                "Throttles",
                1,
                "invocations were throttled (a tick ran longer than the schedule, or the account's "
                "concurrency is exhausted)",
            ),
        ):
            alarms.append(
                aws.cloudwatch.MetricAlarm(
                    f"{name}-{metric.lower()}",
                    name=f"{fn_name}-{metric.lower()}",
                    namespace="AWS/Lambda",
                    metric_name=metric,
                    dimensions={"FunctionName": self.function.name},
                    statistic="Sum",
                    period=60,
                    evaluation_periods=5,
                    datapoints_to_alarm=3,
                    threshold=threshold,
                    comparison_operator="GreaterThanOrEqualToThreshold",
                    treat_missing_data="notBreaching",
                    alarm_description=f"gpuloan {env} policy function: {detail}",
                    alarm_actions=alarm_actions,
                    ok_actions=alarm_actions,
                    opts=child,
                )
            )
        # A tick that could not read something (or whose writes failed) still succeeds: Errors stays 0, so
        # blindness would be silent without this alarm on the policy's own PolicyErrors metric (issue 14).
        alarms.append(
            aws.cloudwatch.MetricAlarm(
                f"{name}-policy-errors",
                name=f"{fn_name}-policy-errors",
                namespace=metric_names.NAMESPACE,
                metric_name=metric_names.POLICY_ERRORS,
                dimensions={metric_names.DIM_ENVIRONMENT: env},
                statistic="Sum",
                period=60 * minutes,
                evaluation_periods=POLICY_ERRORS_TICKS,
                datapoints_to_alarm=POLICY_ERRORS_DATAPOINTS,
                threshold=1,
                comparison_operator="GreaterThanOrEqualToThreshold",
                treat_missing_data="notBreaching",
                alarm_description=(
                    f"gpuloan {env} policy function: reads or writes failed in {POLICY_ERRORS_DATAPOINTS} of "
                    f"the last {POLICY_ERRORS_TICKS} ticks (Kubernetes API, CloudWatch, Budgets, node "
                    "groups...). Missing data never shrinks capacity, so reclaim, drain or scale-up may "
                    "have stopped; the 'tick errors' log lines say which read failed."
                ),
                alarm_actions=alarm_actions,
                ok_actions=alarm_actions,
                opts=child,
            )
        )
        alarms.append(
            aws.cloudwatch.MetricAlarm(
                f"{name}-dead-letters",
                name=f"{fn_name}-dead-letters",
                namespace="AWS/SQS",
                metric_name="ApproximateNumberOfMessagesVisible",
                dimensions={"QueueName": self.dlq.name},
                statistic="Maximum",
                period=300,
                evaluation_periods=1,
                threshold=1,
                comparison_operator="GreaterThanOrEqualToThreshold",
                treat_missing_data="notBreaching",
                alarm_description=f"gpuloan {env} policy function: failed invocations in the dead-letter queue",
                alarm_actions=alarm_actions,
                ok_actions=alarm_actions,
                opts=child,
            )
        )
        self.alarm_arns = pulumi.Output.all(*[a.arn for a in alarms]).apply(list)

        # Read-only Kubernetes identity: the group is bound to a ClusterRole that can list pods (stacks/kubernetes).
        self.access_entry = aws.eks.AccessEntry(
            f"{name}-access",
            cluster_name=cluster.name,
            principal_arn=self.role.arn,
            kubernetes_groups=[tags.POLICY_READER_GROUP],
            type="STANDARD",
            opts=child,
        )

        self.function_name = self.function.name
        self.role_arn = self.role.arn
        self.register_outputs(
            {
                "function_name": self.function_name,
                "role_arn": self.role_arn,
                "state_table": self.table.name,
                "dlq_arn": self.dlq.arn,
            }
        )
