"""SNS notifications of the policy function: readable templates and a rate limit, sent through a Publisher
(SNS: policy/io/sns.py).

Subject (<= 100 characters, SNS's limit): `[gpuloan <environment>] <pool>: <what happened>`. The body says
what changed, why (the engine's reason and detail), the month's spend against the budget, and what to do.
Each (pool, kind) is sent at most once per `notify_min_interval_minutes` (timestamps kept in the tick state).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from policy.model import ACTION_SET_DESIRED, ACTION_TERMINATE, PoolDecision
from policy.terms import Reason

SUBJECT_MAX = 100

KIND_SCALE_UP = "scale_up"
KIND_RECLAIM = "reclaim"
KIND_BUDGET_CAP = "budget_cap"
KIND_BUDGET_UNKNOWN = "budget_unknown"
KIND_BUDGET_DRAIN = "budget_drain"
KIND_FALLBACK = "spot_fallback"
KIND_RECOVERED = "spot_recovered"
KIND_ON_DEMAND_ONLY = "on_demand_only"
KIND_ERROR = "error"

_HEADLINE = {
    KIND_SCALE_UP: "added {n} elastic GPU node(s)",
    KIND_RECLAIM: "reclaimed {n} idle GPU node(s)",
    KIND_BUDGET_CAP: "scale-up held back by the budget",
    KIND_BUDGET_UNKNOWN: "spend unknown, scale-up refused",
    KIND_BUDGET_DRAIN: "budget reached, draining elastic GPUs",
    KIND_FALLBACK: "spot short, using on-demand fallback",
    KIND_RECOVERED: "spot capacity is back",
    KIND_ON_DEMAND_ONLY: "pods that may not run on spot wait: no on-demand group",
    KIND_ERROR: "policy function could not complete a tick",
}

_ADVICE = {
    KIND_SCALE_UP: "No action needed. Idle nodes are reclaimed after the pool's idle timeout.",
    KIND_RECLAIM: "No action needed. The nodes were idle; capacity returns when pods are pending again.",
    KIND_BUDGET_CAP: "Pending work may wait. Raise the budget (budget.monthly_usd in Pulumi.<env>.yaml) or free "
    "capacity if the work is urgent.",
    KIND_BUDGET_UNKNOWN: "Month-to-date spend could not be read from AWS Budgets and none was kept in the tick "
    "state, so enforcement cap_elastic adds no elastic node. Check the function's logs (budgets:"
    "ViewBudget, the DynamoDB state table); scale-ups resume once a Budgets figure is read.",
    KIND_BUDGET_DRAIN: "Elastic capacity is being removed, idle nodes first. The guaranteed floor is untouched. "
    "Raise the budget or switch enforcement to alert_only to stop the drain.",
    KIND_FALLBACK: "On-demand nodes cost more than spot. They are reclaimed first once spot capacity returns and "
    "they go idle.",
    KIND_RECOVERED: "New demand goes to spot again; on-demand fallback nodes are reclaimed first when idle.",
    KIND_ON_DEMAND_ONLY: "These pods ask for on-demand capacity (or do not tolerate the spot taint) and the pool has "
    "no on-demand group, so they wait and no spot node is bought for them. Give the pool "
    "on-demand capacity (elastic.capacity spot_then_on_demand) or let the pods tolerate spot.",
    KIND_ERROR: "Capacity was left as it was. If this repeats, check the function's logs and its Errors alarm.",
}


@dataclass(frozen=True)
class Message:
    kind: str
    pool: str
    subject: str
    body: str


def kinds_of(decision: PoolDecision) -> list[str]:
    """Which notification kinds a pool decision triggers (at most one of each)."""
    kinds = []
    reasons = set(decision.reasons)
    changes = decision.changes
    if any(
        a.kind == ACTION_SET_DESIRED
        and a.reason in (Reason.SCALE_UP_PENDING, Reason.SCALE_UP_UTILIZATION, Reason.ON_DEMAND_ONLY)
        for a in changes
    ):
        kinds.append(KIND_SCALE_UP)
    if any(a.kind == ACTION_TERMINATE and a.reason == Reason.RECLAIM_IDLE for a in changes):
        kinds.append(KIND_RECLAIM)
    if Reason.SPOT_FALLBACK in reasons and any(a.reason == Reason.SPOT_FALLBACK for a in changes):
        kinds.append(KIND_FALLBACK)
    if Reason.BUDGET_DRAIN in reasons:
        kinds.append(KIND_BUDGET_DRAIN)
    elif Reason.BUDGET_CAP in reasons:
        kinds.append(KIND_BUDGET_CAP)
    if Reason.BUDGET_UNKNOWN in reasons:
        kinds.append(KIND_BUDGET_UNKNOWN)
    if Reason.SPOT_RECOVERED in reasons:
        kinds.append(KIND_RECOVERED)
    if any(a.reason == Reason.ON_DEMAND_ONLY and not a.changes for a in decision.actions):
        kinds.append(KIND_ON_DEMAND_ONLY)  # they wait with nothing to serve them (policy/off_spot.py)
    return kinds


def _money(v: float | None) -> str:
    return "unknown" if v is None else f"${v:,.2f}"


def render(
    kind: str, environment: str, decision: PoolDecision, budget_usd: float | None = None, dry_run: bool = False
) -> Message:
    n = sum(
        1
        for a in decision.changes
        if (kind == KIND_SCALE_UP and a.kind == ACTION_SET_DESIRED)
        or (kind == KIND_RECLAIM and a.kind == ACTION_TERMINATE)
    )
    if kind == KIND_SCALE_UP:
        n = sum(
            a.desired_to - a.desired_from
            for a in decision.changes
            if a.kind == ACTION_SET_DESIRED
            and a.desired_to is not None
            and a.desired_from is not None
            and a.desired_to > a.desired_from
        )
    headline = _HEADLINE[kind].format(n=n)
    prefix = f"[gpuloan {environment}]{' [dry run]' if dry_run else ''} {decision.pool}: "
    subject = (prefix + headline)[:SUBJECT_MAX]
    lines = [
        f"Environment: {environment}",
        f"Pool: {decision.pool}",
        f"What happened: {headline}" + (" (dry run: nothing was changed)" if dry_run else ""),
        "",
    ]
    relevant = [
        a
        for a in decision.actions
        if a.changes or kind in (KIND_BUDGET_CAP, KIND_BUDGET_UNKNOWN, KIND_RECOVERED, KIND_ERROR, KIND_ON_DEMAND_ONLY)
    ]
    for a in relevant:
        what = a.reason.value
        if a.kind == ACTION_SET_DESIRED:
            what += f": {a.group} desired {a.desired_from} -> {a.desired_to}"
        elif a.kind == ACTION_TERMINATE:
            what += f": terminated {a.instance_id} in {a.group}"
        lines.append(f" - {what}" + (f" ({a.detail})" if a.detail else ""))
    lines += [
        "",
        "Elastic nodes now: " + (", ".join(f"{g}={n}" for g, n in sorted(decision.desired_after.items())) or "none"),
        # The reported figure is the running estimate alone when no Budgets figure was read: not the month.
        f"Month-to-date spend: "
        f"{'unknown' if kind == KIND_BUDGET_UNKNOWN else _money(decision.month_to_date_usd)}"
        + (f" of {_money(budget_usd)} budget" if budget_usd is not None else ""),
        f"Projected month: {_money(decision.projected_month_usd)}",
        "",
        _ADVICE[kind],
    ]
    return Message(kind, decision.pool, subject, "\n".join(lines))


def render_error(environment: str, error: str) -> Message:
    subject = f"[gpuloan {environment}] all pools: {_HEADLINE[KIND_ERROR]}"[:SUBJECT_MAX]
    body = "\n".join(
        [
            f"Environment: {environment}",
            f"What happened: {_HEADLINE[KIND_ERROR]}",
            "",
            f"Error: {error}",
            "",
            _ADVICE[KIND_ERROR],
        ]
    )
    return Message(KIND_ERROR, "all pools", subject, body)


class Publisher(Protocol):
    def publish(self, subject: str, body: str) -> None: ...

    # Optional (publish_all uses it when the publisher has it): several messages in as few calls as the service
    # allows, one outcome (None, or the PolicyError) per message in their order.
    # def publish_batch(self, messages: list[tuple[str, str]]) -> list[PolicyError | None]: ...


def publish_all(publisher: Publisher, messages: list[tuple[str, str]]) -> list[Exception | None]:
    """Every (subject, body), one outcome each in order: one PublishBatch per 10 where the publisher batches (a tick
    of 200 pools that all scale up sends 20 requests, not 200), else one publish each."""
    batch = getattr(publisher, "publish_batch", None)
    if batch is not None:
        return list(batch(messages))
    out: list[Exception | None] = []
    for subject, body in messages:
        try:
            publisher.publish(subject, body)
            out.append(None)
        except Exception as err:  # noqa: BLE001 - the caller records it
            out.append(err)
    return out


def due(state: dict, key: str, now: datetime, min_interval_minutes: int) -> bool:
    """True (and records `now`) when `key` was not notified within the interval. Mutates `state`."""
    sent = state.setdefault("notified", {})
    last = sent.get(key)
    if last and now - datetime.fromisoformat(last) < timedelta(minutes=min_interval_minutes):
        return False
    sent[key] = now.isoformat()
    return True
