"""Early spot warnings (opt-in, `elastic.rebalance_checkpoint`; docs/policy.md "Early spot warnings").

EC2 sends an "EC2 Instance Rebalance Recommendation" when a spot instance is at elevated risk of interruption. It
can come before the 2-minute interruption notice, or with it (EC2 User Guide, "EC2 instance rebalance
recommendations": "It is not always possible for Amazon EC2 to send the rebalance recommendation signal before
the two-minute Spot Instance interruption notice"). The node group's Capacity Rebalancing already launches a
replacement on it (EKS managed node groups turn it on for spot). What gpuloan adds is a signal to the job: the
function puts the NoSchedule taint `gpuloan.io/rebalance-recommended=true` on the instance's node, so

- no new pod lands on a node that is likely to go (the pods on it run on), and
- a job that watches its own Node object (its service account may `get` nodes; spec.nodeName from the downward
  API) sees the taint and writes a checkpoint now, minutes before the notice when EC2 sends it early.

No capacity decision changes and no tick runs: the replacement is the node group's, and the next scheduled tick
sees it. A recommendation can come for an instance that is then not interrupted; the taint stays (the node takes no
new pods, goes once idle, or when EKS drains it after its replacement is ready). An instance of another stack, of a
pool that did not opt in, or without a registered node is skipped, each with a log line; a failure is an error in
the result (PolicyErrors), never a crash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from policy.errors import PolicyError
from policy.io.instances import describe
from policy.pods import REBALANCE_TAINT_KEY
from policy.ports import NodeGuardPort
from policy.model import INSTANCE_ID, Settings

REBALANCE = "EC2 Instance Rebalance Recommendation"


def recommendation(event: dict) -> str | None:
    """The instance an EventBridge rebalance recommendation names, or None for any other event or a malformed
    id (never trusted)."""
    if event.get("source") != "aws.ec2" or event.get("detail-type") != REBALANCE:
        return None
    detail = event.get("detail")
    iid = detail.get("instance-id") if isinstance(detail, dict) else None
    return iid if isinstance(iid, str) and INSTANCE_ID.fullmatch(iid) else None


def is_recommendation(event: dict) -> bool:
    return event.get("source") == "aws.ec2" and event.get("detail-type") == REBALANCE


@dataclass
class Outcome:
    instance_id: str | None
    node: str = ""
    pool: str = ""
    tainted: bool = False
    skipped: str = ""  # why nothing was done
    errors: list[str] | None = None


def handle(
    settings: Settings, event: dict, ec2, nodes: Callable[[], NodeGuardPort | None], log: Callable[[str], None] = print
) -> Outcome:
    """Taint the node of the instance the recommendation names, if its pool opted in. `nodes` builds the Kubernetes
    client only when it is needed."""
    iid = recommendation(event)
    if iid is None:
        detail = event.get("detail")
        shown = detail.get("instance-id") if isinstance(detail, dict) else detail
        return Outcome(
            None,
            skipped="malformed",
            errors=[
                f"malformed rebalance recommendation ignored: instance-id {str(shown)[:40]!r} is not an EC2 instance id"
            ],
        )
    opted = {p.name for p in settings.pools if p.rebalance_checkpoint}
    if not opted:
        return _skip(Outcome(iid, skipped="no pool has rebalance_checkpoint"), log)
    try:
        found = describe(ec2, settings, iid)
    except Exception as err:  # noqa: BLE001 - EC2 unreadable: nothing known to act on; reported
        return Outcome(
            iid,
            skipped="instance unreadable",
            errors=[
                f"rebalance recommendation for {iid}: DescribeInstances failed: {type(err).__name__}: {str(err)[:300]}"
            ],
        )
    if found is None:
        return _skip(Outcome(iid, skipped="not this stack's instance"), log)
    pool, node = found
    out = Outcome(iid, node=node, pool=pool)
    if pool not in opted:
        out.skipped = f"pool {pool or '?'} did not opt in (elastic.rebalance_checkpoint)"
        return _skip(out, log)
    if settings.dry_run:
        out.skipped = f"dry run: {node or iid} would get {REBALANCE_TAINT_KEY}"
        return _skip(out, log)
    client = nodes()
    if client is None or not node:
        out.skipped = "no Kubernetes access" if client is None else "the instance has no node name yet"
        out.errors = [f"rebalance recommendation for {iid}: not signalled ({out.skipped})"]
        return out
    try:
        client.set_taint(node, REBALANCE_TAINT_KEY, True)
        out.tainted = True
    except PolicyError as err:
        out.errors = [f"rebalance recommendation for {iid}: could not taint {node}: {type(err).__name__}: {err}"]
        return out
    log(
        json.dumps(
            {
                "level": "INFO",
                "message": "rebalance recommendation: node tainted, its jobs may checkpoint now",
                "environment": settings.environment,
                "pool": pool,
                "instance": iid,
                "node": node,
                "taint": f"{REBALANCE_TAINT_KEY}=true:NoSchedule",
            }
        )
    )
    return out


def _skip(out: Outcome, log: Callable[[str], None]) -> Outcome:
    log(
        json.dumps(
            {
                "level": "INFO",
                "message": f"rebalance recommendation skipped: {out.skipped}",
                "instance": out.instance_id,
            }
        )
    )
    return out
