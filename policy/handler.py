"""AWS Lambda entry point: `lambda_handler(event, context)`. Thin (STYLE.md 7): parse, build adapters, run a tick.

Settings: policy/settings.json inside the deployment package (stacks/policy_function/package.py puts the validated
settings there: Lambda's 4 KB environment limit is too small for them). GPULOAN_SETTINGS (the same JSON) is read
only when the package carries no settings file, e.g. when the code runs from a source checkout.

Environment:
  GPULOAN_STATE_TABLE   DynamoDB table for spend estimates and notification timestamps (optional)
  GPULOAN_TOPIC_ARN     SNS topic for notifications (optional)
  GPULOAN_KUBE_ENDPOINT, GPULOAN_KUBE_CA_PEM  override the API server found by EKS DescribeCluster (tests)
Event: {"shard": "<name>"} (required when the settings have shards, and refused when they have none; sent by the
shard's own schedule, docs/policy.md "Shards"): decide only that shard's pools. The rest is optional:
{"dry_run": true} forces a dry run for this invocation (it can never force a live one);
{"now": "<ISO-8601>"} replays a dry run at another time, and is honoured ONLY in a dry run: a live tick always
uses the clock (a crafted or replayed time could otherwise unlock scale-ups past the budget cap or push
notification timestamps weeks ahead). A replay at an explicit time never writes the state back.

Every boto3 client has connect/read timeouts and adaptive retries (boto_config), and the whole tick has one
deadline: the context's remaining time minus DEADLINE_MARGIN_S (policy/deadline.py). Every AWS call of a tick is
bounded as a whole by it (`_bounded`); the state table's, which must still write after it, by the invocation's
own end minus INVOCATION_MARGIN_S.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
import weakref
from datetime import datetime, timezone
from pathlib import Path

from policy import rebalance
from policy.deadline import Deadline
from policy.io.bounded import BoundedClient
from policy.errors import BadSettings, PolicyError
from policy.model import INSTANCE_ID, Settings
from policy.tick import Ports, TickResult, run_tick

# botocore client settings (https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html): a slow
# endpoint fails fast, and "adaptive" retries are the standard ones (back off with jitter, honour throttling) plus a
# client-side rate limiter that slows the client down once AWS answers a call with throttling: the tick's calls run
# side by side (policy/fanout.py), so a throttled service sees fewer of them, not the same burst again. The
# limiter only waits after throttling was seen, and each call stays bounded by the deadline. MAX_ATTEMPTS counts
# the first try. A server that answers at all answers one call within WORST_CALL_S; these timeouts bound each
# socket operation, though, not a whole answer (a byte every few seconds never trips READ_TIMEOUT_S), so every
# call is also bounded as a whole by the deadline (`_bounded`). The deadline keeps room for two such calls after
# it (the final state write and the lease release), so the tick ends before Lambda's own timeout.
CONNECT_TIMEOUT_S = 2
READ_TIMEOUT_S = 4
MAX_ATTEMPTS = 2
WORST_CALL_S = MAX_ATTEMPTS * (CONNECT_TIMEOUT_S + READ_TIMEOUT_S) + 1  # + the first backoff (<= 1 s)
# Connections each client keeps: at least the most calls a tick runs side by side (config: policy.aws_calls_in_flight
# <= 32), so no call waits for a pooled connection (botocore's default is 10).
MAX_POOL_CONNECTIONS = 32
DEADLINE_MARGIN_S = 2 * WORST_CALL_S + 1
# The state table's calls (lease, final write, release) run after the tick's deadline, within the margin above;
# they are bounded as a whole by the invocation's end less this, so even a dripping answer leaves the handler
# time to return before Lambda kills it.
INVOCATION_MARGIN_S = 1.0
DEFAULT_LEASE_S = 60.0  # outside Lambda (no context): about one schedule interval

SETTINGS_FILE = Path(__file__).with_name("settings.json")
_settings_cache: tuple[str, Settings] | None = None
_cluster_cache: dict[str, tuple[str, str]] = {}  # read-through cache of endpoint + CA (they do not change)


def load_settings() -> Settings:
    global _settings_cache
    raw: str | None
    if SETTINGS_FILE.is_file():
        raw = SETTINGS_FILE.read_text(encoding="utf-8")
    else:
        raw = os.environ.get("GPULOAN_SETTINGS")
    if not raw:
        raise BadSettings(
            f"no policy settings: the package has no {SETTINGS_FILE.name} and GPULOAN_SETTINGS is not set"
        )
    if _settings_cache is None or _settings_cache[0] != raw:
        _settings_cache = (raw, Settings.from_json(raw))
    return _settings_cache[1]


def clock() -> datetime:
    """The only time a live tick uses."""
    return datetime.now(timezone.utc)


def _explicit_time(value) -> datetime:
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise BadSettings(f"event.now {value!r} is not an ISO-8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _account_id(context, session, deadline: Deadline | None = None) -> str:
    arn = getattr(context, "invoked_function_arn", "") or ""
    parts = arn.split(":")
    if len(parts) > 4 and parts[4]:
        return parts[4]
    return _bounded(session, "sts", deadline).get_caller_identity()["Account"]


def build_ports(
    settings: Settings, session, context, deadline: Deadline | None = None, errors: list[str] | None = None
) -> Ports:
    """The adapters of one tick. A failure to find the cluster's API server goes into `errors` (the tick's
    errors and PolicyErrors): without it pending pods are unknown and nothing is terminated."""
    from policy.io.kube import KubeClient, eks_token
    from policy.terms import Workload
    from policy.io.nodegroups import AwsNodeGroups
    from policy.io.sns import SnsPublisher
    from policy.io.budgets import AwsBudgets
    from policy.io.state import DynamoState
    from policy.io.cloudwatch import CloudWatchUtilization

    eks = _bounded(session, "eks", deadline)
    # A service pool's utilization scale-up waits out a cooldown from its groups' last change, so its spot groups'
    # activities are read every tick; any other spot group's only while a launch is outstanding (policy/io/nodegroups.py).
    groups = AwsNodeGroups(
        eks,
        _bounded(session, "autoscaling", deadline),
        _bounded(session, "ec2", deadline),
        settings.cluster_name,
        deadline,
        in_flight=settings.aws_calls_in_flight,
        activities_always=[g for p in settings.pools if p.workload == Workload.service for g in p.spot_groups],
    )
    util = CloudWatchUtilization(
        _bounded(session, "cloudwatch", deadline),
        settings.cluster_name,
        settings.metric_namespace,
        settings.utilization_metric,
        settings.reserved_metric,
        deadline,
        in_flight=settings.aws_calls_in_flight,
    )
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
        pods = KubeClient(endpoint, ca_pem, lambda: eks_token(sts, credentials, settings.cluster_name), deadline)
    except Exception as err:  # noqa: BLE001 - no API server known: pending pods are unknown, which holds
        if errors is not None:
            errors.append(f"cluster endpoint unavailable (EKS DescribeCluster): {type(err).__name__}: {str(err)[:300]}")
    needs_budgets = settings.budget_name or any(p.budget_name for p in settings.pools)
    budgets = None
    if needs_budgets:
        try:
            budgets = AwsBudgets(
                _bounded(session, "budgets", deadline), _account_id(context, session, deadline), deadline
            )
        except Exception as err:  # noqa: BLE001 - no account id: spend runs on the estimate alone (still caps)
            if errors is not None:
                errors.append(f"budgets unreadable (account id unknown): {type(err).__name__}: {str(err)[:300]}")
    table = os.environ.get("GPULOAN_STATE_TABLE")
    state = (
        DynamoState(_bounded(session, "dynamodb", Deadline.from_context(context, INVOCATION_MARGIN_S)), table)
        if table
        else None
    )
    topic = os.environ.get("GPULOAN_TOPIC_ARN")
    publisher = (
        SnsPublisher(_bounded(session, "sns", deadline), topic, deadline, settings.aws_calls_in_flight)
        if topic
        else None
    )
    blocks = None
    if any(p.capacity_block_reservation_id and p.capacity_block_start for p in settings.pools):
        from policy.io.reservations import AwsCapacityBlocks

        blocks = AwsCapacityBlocks(_bounded(session, "ec2", deadline), deadline)
    return Ports(groups, util, pods, budgets, state, publisher, pods, pods, blocks)


def handle(event: dict, context, session=None) -> TickResult:
    settings = load_settings()
    event = event if isinstance(event, dict) else {}
    if event.get("dry_run") is True and not settings.dry_run:
        from dataclasses import replace

        settings = replace(settings, dry_run=True)
    now, replay = clock(), False
    if event.get("now"):
        if settings.dry_run:
            now, replay = _explicit_time(event["now"]), True
        else:
            print(
                json.dumps(
                    {
                        "level": "WARNING",
                        "message": "event.now ignored: a live tick uses the clock",
                        "event_now": str(event["now"])[:64],
                    }
                )
            )
    deadline = Deadline.from_context(context, DEADLINE_MARGIN_S)
    errors: list[str] = []
    if rebalance.is_recommendation(event):
        return _rebalance(settings, event, session or _warm_session(), context, deadline, now)
    leaving = spot_warning(event)
    problem = spot_warning_problem(event)
    if problem:  # reported with the tick's errors (PolicyErrors, the error email), never dropped silently
        errors.append(f"malformed spot warning ignored: {problem}")
    # A scheduled tick of a sharded environment names its shard (one schedule per shard); a bad name changes
    # nothing and fails the invocation (the Errors alarm). A spot warning names no shard: see below.
    if problem and settings.shards:
        raise BadSettings(
            f"malformed spot warning ({problem}) in an environment with shards: no shard to run; nothing was changed"
        )
    shard = None if leaving else event_shard(settings, event)
    session = session or _warm_session()
    if leaving:
        ours, owner = _warned_instance(settings, session, leaving[0], deadline)
        if not ours:
            # EventBridge's rule matches every spot warning of the account and region (EC2 puts no cluster in the
            # event): another stack's instance costs one DescribeInstances, not a whole tick.
            print(
                json.dumps(
                    {
                        "level": "INFO",
                        "message": "spot warning for an instance of another stack: skipped",
                        "environment": settings.environment,
                        "instances": list(leaving),
                    }
                )
            )
            from policy.model import Plan

            return TickResult(Plan((), dry_run=settings.dry_run, decided_at=now), skipped="not this stack's instance")
        if settings.shards:
            # The warned instance's node group (the eks:nodegroup-name tag EKS puts on it) names the pool, and so
            # the shard, whose tick runs now under that shard's lease. Not known (the read failed, an untagged
            # instance): the warning is recorded in the shared "leaving" item, which every shard's next tick reads.
            shard = owner
            if shard is None:
                from policy.io.state import DynamoState
                from policy.tick import record_spot_warning

                table = os.environ.get("GPULOAN_STATE_TABLE")
                state = (
                    DynamoState(
                        _bounded(session, "dynamodb", Deadline.from_context(context, INVOCATION_MARGIN_S)), table
                    )
                    if table
                    else None
                )
                return record_spot_warning(settings, state if not replay else None, leaving, now)
    ports = build_ports(settings if shard is None else settings.shard(shard), session, context, deadline, errors)
    return run_tick(
        settings,
        ports,
        now,
        deadline=deadline,
        persist=not replay,
        errors=errors,
        lease=(_lease_holder(context), _lease_seconds(context)),
        leaving=leaving,
        shard=shard,
    )


def event_shard(settings: Settings, event: dict) -> str | None:
    """The shard a scheduled invocation decides (its schedule's {"shard": name}), None without shards. A missing or
    unknown name, or a shard named to an environment without shards, raises BadSettings before anything is read
    or changed: deciding every pool there would overlap the shards' own ticks."""
    names = [sh.name for sh in settings.shards]
    shard = event.get("shard")
    if not names:
        if shard is not None:
            raise BadSettings(
                f"event.shard {str(shard)[:64]!r}: this environment has no shards (policy.shards); nothing was changed"
            )
        return None
    if not isinstance(shard, str) or shard not in names:
        raise BadSettings(
            f"event.shard {str(shard)[:64]!r} is not one of this environment's shards "
            f"({', '.join(names)}); nothing was changed"
        )
    return shard


def _rebalance(
    settings: Settings, event: dict, session, context, deadline: Deadline | None, now: datetime
) -> TickResult:
    """EC2's rebalance recommendation (policy/rebalance.py): a taint on the node, no tick. Errors are counted in
    PolicyErrors like a tick's."""
    from policy import emf
    from policy.model import Plan

    errors: list[str] = []
    outcome = rebalance.handle(
        settings,
        event,
        _bounded(session, "ec2", deadline),
        lambda: build_ports(settings, session, context, deadline, errors).nodes,
    )
    errors += outcome.errors or []
    print(emf.error_line(settings.environment, len(errors), now))
    if errors:
        print(json.dumps({"level": "ERROR", "message": "rebalance recommendation errors", "errors": errors}))
    skipped = f"rebalance recommendation: {'node tainted' if outcome.tainted else outcome.skipped}"
    return TickResult(Plan((), dry_run=settings.dry_run, decided_at=now), errors=errors, skipped=skipped)


SPOT_WARNING = "EC2 Spot Instance Interruption Warning"


def _is_spot_warning(event: dict) -> bool:
    return event.get("source") == "aws.ec2" and event.get("detail-type") == SPOT_WARNING


def spot_warning(event: dict) -> tuple[str, ...]:
    """The instance an EventBridge "EC2 Spot Instance Interruption Warning" names (stacks/policy_function/function.py
    routes it here), or () for any other event. An id that is not an instance id is ignored, not trusted."""
    if not _is_spot_warning(event):
        return ()
    detail = event.get("detail")
    iid = detail.get("instance-id") if isinstance(detail, dict) else None
    return (iid,) if isinstance(iid, str) and INSTANCE_ID.fullmatch(iid) else ()


def spot_warning_problem(event: dict) -> str | None:
    """Why an event that says it is a spot warning names no instance, or None (not a warning, or a good one)."""
    if not _is_spot_warning(event) or spot_warning(event):
        return None
    detail = event.get("detail")
    if not isinstance(detail, dict):
        return f"detail is a {type(detail).__name__}, not an object"
    return f"detail.instance-id {str(detail.get('instance-id'))[:40]!r} is not an EC2 instance id"


# The tag gpuloan's launch templates put on every GPU instance (stacks/capacity/pools.py:instance_tags, config/tags.py).
ENVIRONMENT_TAG = "gpuloan:environment"


# The pool's tag gpuloan's launch templates put on every GPU instance (config/tags.py TAG_POOL), and, where it is
# missing, the node group's name EKS's Auto Scaling group propagates to its instances.
POOL_TAG = "gpuloan:pool"
NODEGROUP_TAG = "eks:nodegroup-name"


def _instance_of_this_stack(settings: Settings, session, instance_id: str, deadline: Deadline | None = None) -> bool:
    """Whether the warned instance carries this environment's tag. Any doubt (the read fails) counts as ours: a
    warning acted on needlessly costs a tick, one skipped wrongly costs the replacement's head start."""
    return _warned_instance(settings, session, instance_id, deadline)[0]


def _warned_instance(
    settings: Settings, session, instance_id: str, deadline: Deadline | None = None
) -> tuple[bool, str | None]:
    """(whether the warned instance is this environment's, the shard whose pool owns its node group or None) from
    one DescribeInstances. A failed read counts as ours with no shard known."""
    try:
        resp = _bounded(session, "ec2", deadline).describe_instances(
            Filters=[
                {"Name": "instance-id", "Values": [instance_id]},
                {"Name": f"tag:{ENVIRONMENT_TAG}", "Values": [settings.environment]},
            ]
        )
    except Exception:  # noqa: BLE001
        return True, None
    instances = [i for r in resp.get("Reservations", []) for i in r.get("Instances", [])]
    if not instances:
        return False, None
    if not settings.shards:
        return True, None
    tags = {t.get("Key"): t.get("Value") for i in instances for t in i.get("Tags") or []}
    return True, settings.shard_of_pool(tags.get(POOL_TAG)) or settings.shard_of_group(tags.get(NODEGROUP_TAG))


def _lease_holder(context) -> str:
    return str(getattr(context, "aws_request_id", "") or uuid.uuid4())


def _lease_seconds(context) -> float:
    """Held at most for the invocation's remaining time (Lambda kills the tick then), plus a little for clocks."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return (remaining() / 1000.0 if callable(remaining) else DEFAULT_LEASE_S) + 5.0


_session = None
_clients: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # session -> {service: client}


def boto_config():
    from botocore.config import Config

    return Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"mode": "adaptive", "total_max_attempts": MAX_ATTEMPTS},
        max_pool_connections=MAX_POOL_CONNECTIONS,
    )


def _client(session, service: str):
    """boto3 clients are thread-safe and reusable: build each once per session, not once per tick. Every one
    gets the timeouts and retries of boto_config()."""
    per_session = _clients.setdefault(session, {})
    if service not in per_session:
        per_session[service] = session.client(service, config=boto_config())
    return per_session[service]


def _bounded(session, service: str, deadline: Deadline | None):
    """The session's client for `service`, each API call bounded as a whole by `deadline` (policy/deadline.py):
    botocore's timeouts bound each socket read, not an answer that drips in."""
    return BoundedClient(_client(session, service), deadline)


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
