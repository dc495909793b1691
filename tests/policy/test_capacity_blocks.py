"""Capacity Blocks that run themselves (issue 28, aws/karpenter-provider-aws#9001): the policy keeps a block's window
(policy/capacity_blocks.py): up at the start, drain and checkpoint ahead of EKS's scale-down, down from it; nothing
on a normal floor; the tick carries it out (and refuses anything outside the window); IAM and RBAC allow exactly
that; settings carry the window from the config."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pricing import checks

import pytest

from policy import capacity_blocks as cb
from policy.decide import decide
from policy.model import (
    ACTION_HOLD,
    ACTION_SET_DESIRED,
    ACTION_TERMINATE,
    LIFECYCLE_IN_SERVICE,
    Action,
    Node,
    Observation,
    Plan,
    PoolDecision,
    PoolObservation,
    Settings,
)
from policy.terms import Reason
from policy.ports import Instance
from policy.memory_state import MemoryState
from policy.tick import Ports, run_tick
from policy_cases import FLOOR, OD, SPOT, group, pool_settings, settings
from test_policy_adapters import FakeGroups, FakeNodes, FakePods, FakePublisher, FakeUtil
from conftest import resolved_prices

START = datetime(2027, 1, 8, 3, 0, tzinfo=timezone.utc)  # a block that starts at 03:00
END = datetime(2027, 1, 15, 11, 30, tzinfo=timezone.utc)
SCALE_DOWN = END - timedelta(minutes=40)  # EKS's scheduled scale-down
DRAIN = SCALE_DOWN - timedelta(minutes=30)  # the default lead


def block(**kw):
    return pool_settings(
        **{
            "guaranteed_nodes": 2,
            "capacity_block_start": START.isoformat(),
            "capacity_block_end": END.isoformat(),
            **kw,
        }
    )


def floor_nodes(n: int = 2, lifecycle: str = LIFECYCLE_IN_SERVICE) -> tuple[Node, ...]:
    return tuple(Node(f"i-0000000{k}", FLOOR, START, lifecycle, 60.0, 60.0, 100.0, 60.0, 1) for k in range(n))


def obs(desired: int, nodes=(), pending=(), status: str = "ACTIVE") -> Observation:
    groups = (group(SPOT, 0), group(OD, 0), group(FLOOR, desired, status=status))
    return Observation((PoolObservation("research", groups, tuple(nodes), tuple(pending)),))


def block_changes(plan: Plan) -> list[Action]:
    return [a for a in plan.changes if a.group == FLOOR]


def reasons(plan: Plan) -> set[Reason]:
    return set(plan.decision("research").reasons)


# --- the decision at start / lead / end -----------------------------------------------------------------------


def test_before_the_start_the_block_group_is_left_at_zero():
    plan = decide(settings(block()), obs(0), START - timedelta(minutes=1))
    assert block_changes(plan) == [] and Reason.CAPACITY_BLOCK_WAITING in reasons(plan)


def test_at_the_start_the_group_goes_to_the_floor_size():
    plan = decide(settings(block()), obs(0), START)
    [a] = block_changes(plan)
    assert (a.kind, a.reason, a.desired_from, a.desired_to) == (ACTION_SET_DESIRED, Reason.CAPACITY_BLOCK_START, 0, 2)
    # Once up, nothing more; a node lost meanwhile (desired lowered) is asked for again.
    assert block_changes(decide(settings(block()), obs(2, floor_nodes()), START + timedelta(hours=5))) == []
    [again] = block_changes(decide(settings(block()), obs(1, floor_nodes(1)), START + timedelta(hours=5)))
    assert again.desired_to == 2


def test_from_the_lead_every_block_node_is_drained_and_the_size_is_left_alone():
    assert block_changes(decide(settings(block()), obs(2, floor_nodes()), DRAIN - timedelta(minutes=1))) == []
    plan = decide(settings(block()), obs(2, floor_nodes()), DRAIN)
    changes = block_changes(plan)
    assert [(a.kind, a.reason, a.instance_id) for a in changes] == [
        (cb.ACTION_CHECKPOINT, Reason.CAPACITY_BLOCK_DRAIN, "i-00000000"),
        (cb.ACTION_CHECKPOINT, Reason.CAPACITY_BLOCK_DRAIN, "i-00000001"),
    ]
    assert not any(a.kind == ACTION_SET_DESIRED for a in changes)
    # The lead is configurable: 90 minutes ahead drains an hour earlier.
    early = block(capacity_block_checkpoint_lead_minutes=90)
    assert len(block_changes(decide(settings(early), obs(2, floor_nodes()), SCALE_DOWN - timedelta(minutes=90)))) == 2
    # A lead of 0: no early drain.
    late = block(capacity_block_checkpoint_lead_minutes=0)
    assert block_changes(decide(settings(late), obs(2, floor_nodes()), SCALE_DOWN - timedelta(minutes=1))) == []


def test_pending_work_of_the_drained_block_goes_to_the_elastic_groups():
    plan = decide(settings(block()), obs(2, floor_nodes(), pending=(1, 1)), DRAIN + timedelta(minutes=5))
    spot = [a for a in plan.changes if a.group == SPOT]
    assert [(a.kind, a.reason, a.desired_to) for a in spot] == [(ACTION_SET_DESIRED, Reason.SCALE_UP_PENDING, 2)]


def test_from_ekss_scale_down_the_group_goes_to_zero_and_stays_there():
    plan = decide(settings(block()), obs(2, floor_nodes()), SCALE_DOWN)
    [a] = block_changes(plan)
    assert (a.kind, a.reason, a.desired_to) == (ACTION_SET_DESIRED, Reason.CAPACITY_BLOCK_END, 0)
    # Already at 0 (EKS's own action ran): nothing; and never raised again after the end.
    assert block_changes(decide(settings(block()), obs(0), SCALE_DOWN + timedelta(minutes=1))) == []
    assert block_changes(decide(settings(block()), obs(0), END + timedelta(days=2))) == []


def test_held_block_busy_group_and_unreadable_group_are_left_alone():
    assert block_changes(decide(settings(block(capacity_block_held=True)), obs(0), START)) == []
    assert Reason.CAPACITY_BLOCK_HELD in reasons(decide(settings(block(capacity_block_held=True)), obs(0), START))
    plan = decide(settings(block()), obs(0, status="UPDATING"), START)
    assert block_changes(plan) == [] and Reason.UPDATE_IN_PROGRESS in reasons(plan)
    unread = Observation((PoolObservation("research", (group(SPOT, 0), group(OD, 0)), (), ()),))
    plan = decide(settings(block()), unread, START)
    assert block_changes(plan) == [] and Reason.HOLD_MISSING_DATA in reasons(plan)


def test_bad_window_in_the_settings_is_reported_not_raised():
    plan = decide(settings(block(capacity_block_end="not a time")), obs(0), START)
    assert block_changes(plan) == []
    assert any(a.reason == Reason.HOLD_MISSING_DATA and "unreadable" in a.detail for a in plan.actions)


@pytest.mark.parametrize(
    "minutes",
    [
        -60,
        0,
        1,
        60 * 24,
        *(int((t - START).total_seconds() // 60) + d for t in (DRAIN, SCALE_DOWN, END) for d in (-1, 0, 1)),
    ],
)
def test_a_normal_floor_is_never_touched(minutes):
    """The same pool without a block: no action on its floor at any time around the would-be window."""
    now = START + timedelta(minutes=minutes)
    plan = decide(settings(pool_settings(guaranteed_nodes=2)), obs(0, floor_nodes(), pending=(1,)), now)
    assert all(a.group != FLOOR for a in plan.actions)


# --- Kueue: the floor flavor's quota follows the window -------------------------------------------------------


def kueue_block(**kw):
    return block(
        capacity_block_queue="gpuloan-dev-research",
        capacity_block_flavor="gpuloan-dev-research-floor",
        capacity_block_quota_gpus=16,
        **kw,
    )


def quota_obs(quota: int | None, desired: int = 0, nodes=()) -> Observation:
    o = obs(desired, nodes)
    return Observation((dataclasses.replace(o.pools[0], floor_quota_gpus=quota),))


def quota_changes(plan: Plan) -> list[tuple[int, int, Reason]]:
    return [(a.desired_from, a.desired_to, a.reason) for a in plan.changes if a.kind == cb.ACTION_SET_QUOTA]


def test_kueue_quota_is_the_blocks_while_it_is_up_and_zero_otherwise():
    s = settings(kueue_block())
    assert quota_changes(decide(s, quota_obs(0), START)) == [(0, 16, Reason.CAPACITY_BLOCK_START)]
    assert quota_changes(decide(s, quota_obs(16, 2, floor_nodes()), START + timedelta(hours=3))) == []
    assert quota_changes(decide(s, quota_obs(16, 2, floor_nodes()), DRAIN)) == [(16, 0, Reason.CAPACITY_BLOCK_DRAIN)]
    assert quota_changes(decide(s, quota_obs(16), SCALE_DOWN)) == [(16, 0, Reason.CAPACITY_BLOCK_END)]
    assert quota_changes(decide(s, quota_obs(16), START - timedelta(hours=1))) == [
        (16, 0, Reason.CAPACITY_BLOCK_WAITING)
    ]
    assert quota_changes(decide(settings(kueue_block(capacity_block_held=True)), quota_obs(16), START)) == [
        (16, 0, Reason.CAPACITY_BLOCK_HELD)
    ]
    assert quota_changes(decide(s, quota_obs(None), START)) == []  # unread: left as it is
    assert quota_changes(decide(settings(block()), quota_obs(0), START)) == []  # no Kueue: no quota action


class FakeQueues:
    def __init__(self, quota: int):
        self.quota, self.writes = quota, []

    def floor_quota(self, api, queue, flavor):
        return self.quota

    def set_floor_quota(self, api, queue, flavor, gpus):
        self.writes.append((queue, flavor, gpus))
        self.quota = gpus


def test_tick_sets_the_quota_with_the_group_at_the_start():
    ports = _tick_ports(0)
    ports.queues = FakeQueues(0)
    result = run_tick(settings(kueue_block()), ports, START + timedelta(seconds=30), lambda _: None)
    assert not result.failed
    assert ports.queues.writes == [("gpuloan-dev-research", "gpuloan-dev-research-floor", 16)]
    assert ports.groups.writes == [("set", FLOOR, 2)]


@pytest.mark.parametrize(
    "to,at",
    [
        (16, START - timedelta(minutes=5)),
        (16, DRAIN + timedelta(minutes=1)),
        (8, START + timedelta(hours=1)),
        (0, START + timedelta(hours=1)),
    ],
)
def test_tick_refuses_a_quota_the_window_does_not_want(monkeypatch, to, at):
    import policy.tick as tick

    bad = Action("research", cb.ACTION_SET_QUOTA, Reason.CAPACITY_BLOCK_START, desired_from=0, desired_to=to)
    monkeypatch.setattr(tick, "decide", lambda s, o, now: Plan((PoolDecision("research", (bad,)),), decided_at=now))
    ports = _tick_ports(1)
    ports.queues = FakeQueues(0)
    result = run_tick(settings(kueue_block()), ports, at, lambda _: None)
    assert ports.queues.writes == [] and "refused" in result.failed[0][1]


# --- the tick carries it out, and refuses anything outside the window -----------------------------------------


class CheckpointNodes(FakeNodes):
    def __init__(self):
        super().__init__()
        self.marked: list[tuple[str, str, str]] = []

    def mark_checkpoint(self, name, key, value):
        self.marked.append((name, key, value))
        return 1


def _tick_ports(desired: int, nodes: CheckpointNodes | None = None) -> Ports:
    instances = [Instance(f"i-0000000{k}", FLOOR, "InService", START, f"floor-{k}") for k in range(desired)]
    groups = FakeGroups([group(SPOT, 0), group(OD, 0), group(FLOOR, desired)], instances)
    return Ports(
        groups,
        FakeUtil({i.instance_id: 60.0 for i in instances}),
        FakePods({"research": ()}),
        None,
        MemoryState(),
        FakePublisher(),
        nodes if nodes is not None else CheckpointNodes(),
    )


def test_tick_raises_the_block_at_its_start():
    ports = _tick_ports(0)
    result = run_tick(settings(block()), ports, START + timedelta(seconds=30), lambda _: None)
    assert ports.groups.writes == [("set", FLOOR, 2)] and not result.failed


def test_tick_cordons_and_marks_block_nodes_ahead_of_the_scale_down():
    nodes = CheckpointNodes()
    ports = _tick_ports(2, nodes)
    result = run_tick(settings(block()), ports, DRAIN + timedelta(minutes=1), lambda _: None)
    assert not result.failed and ports.groups.writes == []
    assert nodes.cordoned == {"floor-0", "floor-1"}
    assert nodes.marked == [(f"floor-{k}", cb.CHECKPOINT_BY_ANNOTATION, "2027-01-15T10:50:00Z") for k in range(2)]


def test_tick_lowers_the_block_at_the_scale_down():
    ports = _tick_ports(2)
    run_tick(settings(block()), ports, SCALE_DOWN + timedelta(seconds=10), lambda _: None)
    assert ports.groups.writes == [("set", FLOOR, 0)]


@pytest.mark.parametrize(
    "kind,desired_to,at",
    [
        (ACTION_SET_DESIRED, 2, START - timedelta(minutes=5)),  # raised before the start
        (ACTION_SET_DESIRED, 5, START + timedelta(hours=1)),  # above the floor size
        (ACTION_SET_DESIRED, 0, START + timedelta(hours=1)),  # lowered inside the window
        (cb.ACTION_CHECKPOINT, None, START + timedelta(hours=1)),  # drained before the lead
        (ACTION_TERMINATE, None, DRAIN + timedelta(minutes=1)),  # never terminated by the policy
    ],
)
def test_tick_refuses_block_actions_outside_the_window(monkeypatch, kind, desired_to, at):
    """Defence in depth behind IAM: a plan (a bug, say) asking the block's group for anything the window does
    not allow at that time is refused by the tick, not sent."""
    import policy.tick as tick

    bad = Action(
        "research",
        kind,
        Reason.CAPACITY_BLOCK_START,
        group=FLOOR,
        desired_from=0,
        desired_to=desired_to,
        instance_id="i-00000000" if desired_to is None else None,
    )
    monkeypatch.setattr(tick, "decide", lambda s, o, now: Plan((PoolDecision("research", (bad,)),), decided_at=now))
    nodes = CheckpointNodes()
    ports = _tick_ports(1, nodes)
    result = run_tick(settings(block()), ports, at, lambda _: None)
    assert ports.groups.writes == [] and nodes.marked == [] and not nodes.cordoned
    assert [why for _, why in result.failed] and "refused" in result.failed[0][1]


def test_tick_never_touches_a_normal_floor(monkeypatch):
    import policy.tick as tick

    bad = Action("research", ACTION_SET_DESIRED, Reason.SCALE_UP_PENDING, group=FLOOR, desired_from=1, desired_to=2)
    monkeypatch.setattr(tick, "decide", lambda s, o, now: Plan((PoolDecision("research", (bad,)),), decided_at=now))
    ports = _tick_ports(1)
    result = run_tick(settings(pool_settings(guaranteed_nodes=2)), ports, START, lambda _: None)
    assert ports.groups.writes == [] and "refused" in result.failed[0][1]


# --- settings from the config; IAM and RBAC -------------------------------------------------------------------


def _block_cfg(**guaranteed):
    from conftest import stack_config

    data = stack_config("prod")
    data["gpuloan:pools"][0]["guaranteed"].update(
        reservation="capacity_block",
        reservation_id="cr-0123456789abcdef0",
        payment="capacity_block",
        capacity_block_start="2027-01-08T03:00:00Z",
        capacity_block_end="2027-01-15T11:30:00Z",
        **guaranteed,
    )
    return checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())


def test_program_leaves_the_block_queues_floor_quota_to_the_policy():
    from conftest import stack_config
    from offline import runner as offline

    data = stack_config("prod")
    data["gpuloan:pools"][0]["guaranteed"].update(
        reservation="capacity_block",
        reservation_id="cr-0123456789abcdef0",
        payment="capacity_block",
        capacity_block_start="2027-01-08T03:00:00Z",
        capacity_block_end="2027-01-15T11:30:00Z",
    )
    rec = offline.run_program("prod", data)
    queues = {
        r.inputs["metadata"]["labels"]["gpuloan.io/pool"]: r for r in rec.resources if r.type.endswith(":ClusterQueue")
    }
    block_pool = data["gpuloan:pools"][0]["name"]
    cq = queues[block_pool]
    assert cq.ignore_changes == ["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]
    assert cq.inputs["spec"]["resourceGroups"][0]["flavors"][0]["name"].endswith(f"{block_pool}-floor")
    assert all(q.ignore_changes == [] for pool, q in queues.items() if pool != block_pool)


def test_settings_carry_the_window_and_survive_the_package_json():
    from pricing.policy_settings import settings_for

    cfg = _block_cfg(capacity_block_checkpoint_lead_minutes=45)
    s = settings_for(
        resolved_prices(),
        cfg,
        "c",
        {p.name: {"spot": "s", "on_demand": "o", "guaranteed": "g"} for p in cfg.pools},
        allow_unknown_prices=True,
    )
    s = Settings.from_json(s.to_json())
    training = s.pool(cfg.pools[0].name)
    assert (cb.parse_time(training.capacity_block_start), cb.parse_time(training.capacity_block_end)) == (START, END)
    assert training.capacity_block_checkpoint_lead_minutes == 45 and not training.capacity_block_held
    assert (training.capacity_block_queue, training.capacity_block_flavor, training.capacity_block_quota_gpus) == (
        "gpuloan-prod-training",
        "gpuloan-prod-training-floor",
        16,
    )
    assert all(p.capacity_block_start is None for p in s.pools[1:])  # other floors: no window
    held = settings_for(resolved_prices(), _block_cfg(capacity_block_active=False), "c", {}, allow_unknown_prices=True)
    assert held.pools[0].capacity_block_held


def _document(capacity_blocks):
    from stacks.policy_function.function import policy_document

    return policy_document(
        partition="aws",
        region="us-east-1",
        account="123456789012",
        cluster_name="c",
        elastic=["dev-a-spot_*"],
        guaranteed=["dev-a-guaranteed_*", "dev-b-guaranteed_*"],
        table_arn="t",
        log_group_arn="l",
        dlq_arn="q",
        topic_arn=None,
        kms_key_arn=None,
        budget_names=[],
        subnet_ids=[],
        security_group_id="sg-1",
        capacity_blocks=capacity_blocks,
    )


def test_iam_lets_the_policy_resize_exactly_the_block_group():
    import fnmatch

    base = "arn:aws:eks:us-east-1:123456789012:nodegroup/c/"
    doc = _document(["dev-a-guaranteed_*"])
    mutating = [
        s for s in doc["Statement"] if any(a.startswith(("eks:Update", "autoscaling:Terminate")) for a in s["Action"])
    ]
    block_arn, normal_arn = f"{base}dev-a-guaranteed_x/uuid", f"{base}dev-b-guaranteed_y/uuid"
    covering = [s["Sid"] for s in mutating if any(fnmatch.fnmatchcase(block_arn, r) for r in s["Resource"])]
    assert covering == ["CapacityBlockWindow"]
    [window] = [s for s in doc["Statement"] if s["Sid"] == "CapacityBlockWindow"]
    assert window["Action"] == ["eks:UpdateNodegroupConfig"]  # no termination, no other change
    assert not any(fnmatch.fnmatchcase(normal_arn, r) for s in mutating for r in s["Resource"])
    assert "CapacityBlockWindow" not in {s["Sid"] for s in _document([])["Statement"]}


def test_program_scopes_the_window_statement_to_the_block_floor_only():
    from stacks.policy_function.function import group_patterns

    cfg = _block_cfg()
    patterns = group_patterns(cfg)
    assert patterns[cfg.pools[0].name].guaranteed.endswith("-guaranteed_*")
    from conftest import stack_config
    from offline import runner as offline

    data = stack_config("prod")
    data["gpuloan:pools"][0]["guaranteed"].update(
        reservation="capacity_block",
        reservation_id="cr-0123456789abcdef0",
        payment="capacity_block",
        capacity_block_start="2027-01-08T03:00:00Z",
        capacity_block_end="2027-01-15T11:30:00Z",
    )
    rec = offline.run_program("prod", data)
    doc = json.loads(rec.named("prod-policy-policy").inputs["policy"])
    [window] = [s for s in doc["Statement"] if s["Sid"] == "CapacityBlockWindow"]
    assert window["Resource"] == [
        f"arn:aws:eks:us-east-1:{offline.ACCOUNT_ID}:nodegroup/gpuloan-prod/{patterns[cfg.pools[0].name].guaranteed}/*"
    ]


def test_rbac_grants_pod_patch_only_with_a_block_and_the_client_uses_exactly_that():
    import base64
    import urllib.parse

    from conftest import stack_config
    from fake_kube import FakeKube, gpu_pod
    from policy.io.kube import KubeClient
    from config import scheduling, versions
    from config import tenancy

    plain = checks.from_stack_yaml({"config": stack_config("prod")}, "test", prices=resolved_prices())
    # without a block: the base rules and, with Kueue, the loan's read of the environment's queues
    assert tenancy.policy_rbac_rules(plain) == [*tenancy.POLICY_RBAC_RULES, tenancy.loan_rbac_rule(plain)]
    cfg = _block_cfg()
    rules = tenancy.policy_rbac_rules(cfg)
    queue = scheduling.cluster_queue_name(cfg, cfg.pools[0])
    flavor = scheduling.flavor_name(cfg, cfg.pools[0], scheduling.FLOOR)
    assert rules == [
        *tenancy.POLICY_RBAC_RULES,
        tenancy.loan_rbac_rule(cfg),
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "verbs": ["get", "patch"],
            "resourceNames": [queue],
        },
    ]  # that pool's queue only
    dry = _block_cfg()
    dry = dry.model_copy(update={"policy": dry.policy.model_copy(update={"dry_run": True})})
    # a dry run changes nothing: it only reads
    assert tenancy.policy_rbac_rules(dry) == [*tenancy.POLICY_RBAC_RULES, tenancy.loan_rbac_rule(dry)]

    kube = FakeKube("c")
    try:
        kube.add_node("n1")
        kube.pods = [
            gpu_pod("train", 8, node_name="n1", phase="Running"),
            gpu_pod("done", 8, node_name="n1", phase="Succeeded"),
            {**gpu_pod("cpu", 0, node_name="n1", phase="Running")},
        ]
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        client = KubeClient(
            kube.endpoint,
            kube.ca_pem,
            lambda: "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("="),
        )
        assert client.cordon("n1") is True
        assert client.mark_checkpoint("n1", cb.CHECKPOINT_BY_ANNOTATION, "2027-01-15T10:50:00Z") == 1
        assert client.mark_checkpoint("n1", cb.CHECKPOINT_BY_ANNOTATION, "2027-01-15T10:50:00Z") == 0  # idempotent
        from stacks.kubernetes.kueue import cluster_queue_manifest

        kube.cluster_queues[queue] = cluster_queue_manifest(cfg, scheduling.pool_queue(cfg, cfg.pools[0]))
        kube.cluster_queues[queue]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 0
        api = versions.KUEUE_API_VERSION
        assert client.floor_quota(api, queue, flavor) == 0
        client.set_floor_quota(api, queue, flavor, 16)
        assert client.floor_quota(api, queue, flavor) == 16
    finally:
        kube.close()
    assert kube.pods[0]["metadata"]["annotations"] == {cb.CHECKPOINT_BY_ANNOTATION: "2027-01-15T10:50:00Z"}
    assert "annotations" not in kube.pods[1]["metadata"] and "annotations" not in kube.pods[2]["metadata"]
    assert (
        "default/train",
        {"metadata": {"annotations": {cb.CHECKPOINT_BY_ANNOTATION: "2027-01-15T10:50:00Z"}}},
    ) in kube.patches  # one annotation, nothing else of the pod
    used: dict[str, set[str]] = {}
    for request in kube.requests:
        method, target = request.split(" ", 1)
        parts = urllib.parse.urlparse(target).path.strip("/").split("/")
        if parts[0] == "apis":  # apis, <group>, <version>, <resource>, <name>
            parts = parts[1:]
        resource = parts[4] if parts[2] == "namespaces" else parts[2]
        named = len(parts) > (5 if parts[2] == "namespaces" else 3)
        used.setdefault(resource, set()).add({"GET": "get" if named else "list", "PATCH": "patch"}[method])
    granted: dict[str, set[str]] = {}
    for rule in rules:
        for r in rule["resources"]:
            granted.setdefault(r, set()).update(rule["verbs"])
    assert used == granted == {"pods": {"list", "patch"}, "nodes": {"get", "patch"}, "clusterqueues": {"get", "patch"}}
    [cq_patch] = [b for who, b in kube.patches if who == f"clusterqueues/{queue}"]
    assert cq_patch == [
        {"op": "test", "path": "/spec/resourceGroups/0/flavors/0/name", "value": flavor},
        {"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota", "value": 16},
    ]


def test_a_pool_without_a_block_gets_its_decision_unchanged():
    d = PoolDecision("research", (Action("research", ACTION_HOLD, Reason.STEADY),))
    assert cb.with_block_actions(pool_settings(), None, d, START) is d
