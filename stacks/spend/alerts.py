"""The environment's alerts topic: where budgets, alarms and the policy function send what people must hear.

SNS topic encrypted with a customer-managed KMS key (an AWS-managed `alias/aws/sns` key cannot be used by
AWS Budgets or CloudWatch alarms: its key policy cannot grant them, so deliveries would fail silently).
The key policy and the topic policy both let budgets.amazonaws.com and cloudwatch.amazonaws.com act only for
this account (`aws:SourceAccount`), so another account's budget or alarm cannot use this topic (confused deputy).
Email subscriptions stay "pending confirmation" until each person clicks the link AWS mails them (docs/budgets.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from config import tags
from config.config import GpuLoanConfig

# The two AWS services that publish to the topic on their own (the policy function publishes with its IAM role).
PUBLISHING_SERVICES = ("budgets.amazonaws.com", "cloudwatch.amazonaws.com")
KMS_DELETION_WINDOW_DAYS = 30  # the longest window: a key deleted by mistake can be restored for a month


@dataclass(frozen=True)
class AlertsArgs:
    environment: str
    account_id: pulumi.Input[str]
    region: str
    partition: pulumi.Input[str] = "aws"
    emails: tuple[str, ...] = ()

    @staticmethod
    def from_config(
        cfg: GpuLoanConfig, account_id: pulumi.Input[str], partition: pulumi.Input[str] = "aws"
    ) -> "AlertsArgs":
        return AlertsArgs(cfg.environment, account_id, cfg.region, partition, topic_emails(cfg))


def topic_emails(cfg: GpuLoanConfig) -> tuple[str, ...]:
    """Who receives the topic (alarms, policy events, budget copies): the environment's budget emails.

    Pool-only addresses get their pool's budget notifications straight from AWS Budgets (stacks/spend/budgets.py);
    subscribing them here too would mail them every other pool's alarms.
    """
    return tuple(dict.fromkeys(str(e) for e in cfg.budget.alert_emails))


def email_key(email: str) -> str:
    return hashlib.sha256(email.strip().lower().encode()).hexdigest()[:10]


def source_arn_patterns(account_id: str, region: str, partition: str = "aws") -> dict[str, str]:
    # Budgets is a global service: its ARNs carry no region.
    return {
        "budgets.amazonaws.com": f"arn:{partition}:budgets::{account_id}:*",
        "cloudwatch.amazonaws.com": f"arn:{partition}:cloudwatch:{region}:{account_id}:alarm:*",
    }


def key_policy(account_id: str, region: str, partition: str = "aws") -> dict:
    """KMS key policy: the account administers the key (AWS's default, so IAM policies govern it), and the two
    publishing services may only create and read data keys, only on behalf of this account."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AccountAdministersKey",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:{partition}:iam::{account_id}:root"},
                "Action": "kms:*",
                "Resource": "*",
            },
            {
                "Sid": "BudgetsAndAlarmsEncryptForThisAccount",
                "Effect": "Allow",
                "Principal": {"Service": list(PUBLISHING_SERVICES)},
                "Action": ["kms:GenerateDataKey*", "kms:Decrypt"],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:SourceAccount": account_id}},
            },
        ],
    }


def topic_policy(topic_arn: str, account_id: str, region: str, partition: str = "aws") -> dict:
    """Topic policy: one Publish statement per service, limited to this account and its own budgets/alarms;
    plus a deny of plain-HTTP publishing."""
    arns = source_arn_patterns(account_id, region, partition)
    statements = [
        {
            "Sid": "AllowPublishFrom" + service.split(".", 1)[0].capitalize(),
            "Effect": "Allow",
            "Principal": {"Service": service},
            "Action": "SNS:Publish",
            "Resource": topic_arn,
            "Condition": {
                "StringEquals": {"aws:SourceAccount": account_id},
                "ArnLike": {"aws:SourceArn": arns[service]},
            },
        }
        for service in PUBLISHING_SERVICES
    ]
    statements.append(
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "SNS:Publish",
            "Resource": topic_arn,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
    )
    return {"Version": "2012-10-17", "Statement": statements}


class Alerts(pulumi.ComponentResource):
    """SNS topic + KMS key + policies + email subscriptions of one environment."""

    topic_arn: pulumi.Output[str]
    kms_key_arn: pulumi.Output[str]

    def __init__(self, name: str, args: AlertsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:alerts:Alerts", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account_id = pulumi.Output.from_input(args.account_id)
        partition = pulumi.Output.from_input(args.partition)

        self.key = aws.kms.Key(
            f"{name}-key",
            description=f"gpuloan {args.environment}: encrypts the alerts topic (budgets, alarms, policy events)",
            enable_key_rotation=True,
            deletion_window_in_days=KMS_DELETION_WINDOW_DAYS,
            policy=pulumi.Output.all(account_id, partition).apply(
                lambda v: json.dumps(key_policy(v[0], args.region, v[1]))
            ),
            tags=tags.environment_tags(args.environment),
            opts=child,
        )
        aws.kms.Alias(
            f"{name}-key-alias",
            name=f"alias/gpuloan-{args.environment}-alerts",
            target_key_id=self.key.key_id,
            opts=child,
        )
        self.topic = aws.sns.Topic(
            f"{name}-topic",
            name=f"gpuloan-{args.environment}-alerts",
            display_name=f"gpuloan {args.environment}",
            kms_master_key_id=self.key.arn,
            tags=tags.environment_tags(args.environment),
            opts=child,
        )
        aws.sns.TopicPolicy(
            f"{name}-topic-policy",
            arn=self.topic.arn,
            policy=pulumi.Output.all(self.topic.arn, account_id, partition).apply(
                lambda v: json.dumps(topic_policy(v[0], v[1], args.region, v[2]))
            ),
            opts=child,
        )
        for email in args.emails:
            # A hash of the address names the subscription: stable when the list is reordered (no new
            # confirmation mail), and the address itself stays out of URNs and PR previews.
            aws.sns.TopicSubscription(
                f"{name}-email-{email_key(email)}",
                topic=self.topic.arn,
                protocol="email",
                endpoint=email,
                opts=child,
            )

        self.topic_arn = self.topic.arn
        self.kms_key_arn = self.key.arn
        self.register_outputs({"topic_arn": self.topic_arn, "kms_key_arn": self.kms_key_arn})
