"""AWS Lambda entry point: `lambda_handler(event, context)`. Thin (STYLE.md 7): parse, build adapters, run a tick.

Environment:
  GPULOAN_SETTINGS      the validated policy settings JSON (policy.model.Settings.to_json), required
  GPULOAN_STATE_TABLE   DynamoDB table for spend estimates and notification timestamps (optional)
  GPULOAN_TOPIC_ARN     SNS topic for notifications (optional)
  GPULOAN_KUBE_ENDPOINT, GPULOAN_KUBE_CA_PEM  override the API server found by EKS DescribeCluster (tests)
Event (all optional): {"dry_run": true} forces a dry run for this invocation (it can never force a live one);
{"now": "<ISO-8601>"} replays a tick at another time (tests, replays; the schedule never sends it).
"""

from __future__ import annotations

import base64
import json
import os
import weakref
from datetime import datetime, timezone

from policy.errors import BadSettings, PolicyError
from policy.model import Settings
from policy.tick import Ports, TickResult, run_tick

_settings_cache: tuple[str, Settings] | None = None
_cluster_cache: dict[str, tuple[str, str]] = {}  # read-through cache of endpoint + CA (they do not change)


def load_settings() -> Settings:
    global _settings_cache
    raw = os.environ.get("GPULOAN_SETTINGS")
    if not raw:
        raise BadSettings("environment variable GPULOAN_SETTINGS is not set")
    if _settings_cache is None or _settings_cache[0] != raw:
        _settings_cache = (raw, Settings.from_json(raw))
    return _settings_cache[1]


def _now(event: dict) -> datetime:
    value = event.get("now") if isinstance(event, dict) else None
    if not value:
        return datetime.now(timezone.utc)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise BadSettings(f"event.now {value!r} is not an ISO-8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _account_id(context, session) -> str:
    arn = getattr(context, "invoked_function_arn", "") or ""
    parts = arn.split(":")
    if len(parts) > 4 and parts[4]:
        return parts[4]
    return _client(session, "sts").get_caller_identity()["Account"]


def build_ports(settings: Settings, session, context) -> Ports:
    from policy.kube import KubePendingPods, eks_token
    from policy.nodegroups import AwsNodeGroups
    from policy.notifications import SnsPublisher
    from policy.spend import AwsBudgets
    from policy.state import DynamoState
    from policy.utilization import CloudWatchUtilization

    eks = _client(session, "eks")
    groups = AwsNodeGroups(eks, _client(session, "autoscaling"), _client(session, "ec2"), settings.cluster_name)
    util = CloudWatchUtilization(_client(session, "cloudwatch"), settings.cluster_name, settings.metric_namespace,
                                 settings.utilization_metric, settings.reserved_metric)
    endpoint = os.environ.get("GPULOAN_KUBE_ENDPOINT")
    ca_pem = os.environ.get("GPULOAN_KUBE_CA_PEM")
    pods = None
    try:
        if not endpoint:
            if settings.cluster_name not in _cluster_cache:
                cluster = eks.describe_cluster(name=settings.cluster_name)["cluster"]
                ca = base64.b64decode(cluster["certificateAuthority"]["data"]).decode()
                _cluster_cache[settings.cluster_name] = (cluster["endpoint"], ca)
            endpoint, ca_pem = _cluster_cache[settings.cluster_name]
        sts = _client(session, "sts")
        credentials = session.get_credentials()
        pods = KubePendingPods(endpoint, ca_pem, lambda: eks_token(sts, credentials, settings.cluster_name))
    except Exception as err:  # noqa: BLE001 - no API server known: pending pods are unknown, which holds
        print(json.dumps({"level": "ERROR", "message": "cluster endpoint unavailable", "error": str(err)[:300]}))
    needs_budgets = settings.budget_name or any(p.budget_name for p in settings.pools)
    budgets = AwsBudgets(_client(session, "budgets"), _account_id(context, session)) if needs_budgets else None
    table = os.environ.get("GPULOAN_STATE_TABLE")
    state = DynamoState(_client(session, "dynamodb"), table) if table else None
    topic = os.environ.get("GPULOAN_TOPIC_ARN")
    publisher = SnsPublisher(_client(session, "sns"), topic) if topic else None
    return Ports(groups, util, pods, budgets, state, publisher)


def handle(event: dict, context, session=None) -> TickResult:
    settings = load_settings()
    if isinstance(event, dict) and event.get("dry_run") is True and not settings.dry_run:
        from dataclasses import replace

        settings = replace(settings, dry_run=True)
    now = _now(event or {})
    return run_tick(settings, build_ports(settings, session or _warm_session(), context), now)


_session = None
_clients: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # session -> {service: client}


def _client(session, service: str):
    """boto3 clients are thread-safe and reusable: build each once per session, not once per tick."""
    per_session = _clients.setdefault(session, {})
    if service not in per_session:
        per_session[service] = session.client(service)
    return per_session[service]


def _warm_session():
    """One boto3 Session per warm Lambda container: a Session loads each service's API model once, and the EC2
    model alone is megabytes, so a new Session every minute would re-parse it on every tick."""
    global _session
    if _session is None:
        import boto3

        _session = boto3.Session()
    return _session


def lambda_handler(event, context):
    try:
        result = handle(event if isinstance(event, dict) else {}, context)
    except PolicyError:
        raise  # bad settings: fail loudly (the Errors alarm), nothing was changed
    return result.summary()
