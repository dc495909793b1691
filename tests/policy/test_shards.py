"""Shards (issue 41): an invocation decides only its shard's pools under its own lease and tick state; a missing or
unknown shard is refused with nothing changed; a spot warning reaches the shard that owns the instance; and the
environment budget's cap holds across shards (policy/shard_budget.py): two shards racing never together spend
more than the headroom, and one shard failing leaves the other acting."""

from __future__ import annotations

import dataclasses
import json
import threading
import types
from unittest import mock

import pytest

from policy import handler, shard_budget
from policy.decide import hours_left_in_month
from policy.errors import BadSettings, ConflictingUpdate, Throttled
from policy.model import ACTION_SET_DESIRED, Observation, PoolObservation, Settings, ShardSettings
from policy.terms import Reason
from policy.memory_state import MemoryState
from policy.ports import LEASE_KEY
from policy.tick import STATE_KEY, Ports, run_tick
from policy_cases import NOW, group, pool_settings, settings
from test_policy_adapters import FakeGroups, FakeNodes, FakePods, FakePublisher, FakeUtil

A, B = "research", "teamb"
SPOT_USD = 0.41  # policy_cases' spot price per node-hour
FLOOR_USD = 0.80  # ... and each pool's floor


def _settings(env_budget: float | None, pools=(A, B), shards=((("one", (A,)), ("two", (B,))))) -> Settings:
    s = settings(*(pool_settings(p) for p in pools), env_budget=env_budget)
    return dataclasses.replace(
        s, budget_name="env" if env_budget else None, shards=tuple(ShardSettings(n, tuple(ps)) for n, ps in shards)
    )


def _pool_obs(name: str, pending=(1, 1, 1, 1)) -> PoolObservation:
    spot = "research-spot" if name == A else f"{name}-spot"
    od = "research-od" if name == A else f"{name}-od"
    return PoolObservation(name, (group(spot, 0), group(od, 0)), (), pending, None)


class Budget:
    def __init__(self, actual: float = 0.0):
        self.actual = actual

    def actual_usd(self, name: str) -> float:
        return self.actual


def _added(plan) -> int:
    return sum(
        a.desired_to - a.desired_from
        for a in plan.changes
        if a.kind == ACTION_SET_DESIRED and a.desired_to > a.desired_from
    )


def _budget_affording(nodes: int) -> float:
    """An environment budget whose projection leaves room for `nodes` more spot nodes beside both floors."""
    return hours_left_in_month(NOW) * (2 * FLOOR_USD + nodes * SPOT_USD + 0.2)


def _seeded(state, full: Settings) -> None:
    """Both shards ticked before, each running its floor only."""
    state.save(
        shard_budget.ENV_BUDGET_KEY,
        {"shards": {sh.name: {"usd_per_hour": FLOOR_USD, "accrued_at": NOW.isoformat()} for sh in full.shards}},
        0,
    )


def _decide(full: Settings, shard: str, state, errors: list, budgets=None):
    own = full.shard(shard)
    obs = Observation(tuple(_pool_obs(p.name) for p in own.pools))
    return shard_budget.decide_and_reserve(
        full, shard, own, obs, state, budgets or Budget(), NOW, lambda e: errors.append(f"{type(e).__name__}: {e}")
    )


# --- the budget cap across shards ---------------------------------------------------------------------------------


def test_one_shard_alone_takes_what_the_headroom_affords():
    full = _settings(_budget_affording(3))
    state = MemoryState()
    _seeded(state, full)
    plan = _decide(full, "one", state, [])
    assert _added(plan) == 3
    assert Reason.BUDGET_CAP in plan.decision(A).reasons
    shared, _ = state.load(shard_budget.ENV_BUDGET_KEY)
    assert shared["shards"]["one"]["usd_per_hour"] == pytest.approx(FLOOR_USD + 3 * SPOT_USD)


def test_interleaved_shards_never_spend_headroom_the_other_reserved():
    """Shard one reads the shared item, shard two reserves in between, shard one's conditional write fails: it
    decides again against shard two's reservation and gets only what is left (BUDGET_CAP)."""
    full = _settings(_budget_affording(5))
    state = MemoryState()
    _seeded(state, full)
    plans = {}
    real_save = state.save
    interleaved = []

    def save_after_the_other(key, data, version):
        if key == shard_budget.ENV_BUDGET_KEY and not interleaved:
            interleaved.append(True)
            plans["two"] = _decide(full, "two", state, [])  # the other shard's whole tick in between
        return real_save(key, data, version)

    state.save = save_after_the_other
    plans["one"] = _decide(full, "one", state, [])
    assert _added(plans["two"]) == 4  # first to reserve: all it wants (4 of the 5 affordable)
    assert _added(plans["one"]) == 1 and Reason.BUDGET_CAP in plans["one"].decision(A).reasons
    shared, _ = state.load(shard_budget.ENV_BUDGET_KEY)
    reserved = sum(e["usd_per_hour"] for e in shared["shards"].values())
    assert reserved == pytest.approx(2 * FLOOR_USD + 5 * SPOT_USD)


@pytest.fixture
def table(aws_env):
    import boto3

    ddb = boto3.client("dynamodb")
    ddb.create_table(
        TableName="t",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return ddb


@pytest.mark.parametrize("affordable", [0, 1, 3, 5, 7])
def test_two_shards_racing_on_dynamodb_never_exceed_the_headroom(table, affordable):
    """Threads against the moto server, started together, each shard wanting 4 nodes: whatever the order,
    what both add together fits the headroom, and each reservation was written with the version condition."""
    from policy.io.state import DynamoState

    full = _settings(_budget_affording(affordable))
    for attempt in range(3):
        table.delete_item(TableName="t", Key={"pk": {"S": shard_budget.ENV_BUDGET_KEY}})
        _seeded(DynamoState(table, "t"), full)
        start = threading.Barrier(2)
        plans, errors = {}, {"one": [], "two": []}

        def run(shard):
            start.wait()
            plans[shard] = _decide(full, shard, DynamoState(table, "t"), errors[shard])

        threads = [threading.Thread(target=run, args=(s,)) for s in ("one", "two")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert set(plans) == {"one", "two"}, errors
        together = _added(plans["one"]) + _added(plans["two"])
        assert together <= affordable, (attempt, together, errors)
        if affordable >= 4:  # room for one shard's whole want: the coordination leaves none unspent for nothing
            assert together == min(8, affordable) or errors["one"] or errors["two"]


def test_a_shard_that_never_reserved_counts_at_its_worst_case():
    """Unknown spend is not zero: before shard two's first tick, shard one sees it at every floor and elastic
    group at its max (0.80 + 4 x 0.41 + 2 x 1.00 per hour)."""
    full = _settings(_budget_affording(5))
    assert shard_budget.others_usd_per_hour(full, "one", {}) == pytest.approx(FLOOR_USD + 4 * SPOT_USD + 2 * 1.0)
    plan = _decide(full, "one", MemoryState(), [])
    assert _added(plan) <= 5 - 4 - 1  # what the worst case of shard two leaves (5 - 5.x nodes' worth): none
    assert Reason.BUDGET_CAP in plan.decision(A).reasons


class FailingState(MemoryState):
    def __init__(self, fail):
        super().__init__()
        self.fail = fail

    def save(self, key, data, version):
        if key == shard_budget.ENV_BUDGET_KEY:
            raise self.fail
        return super().save(key, data, version)


@pytest.mark.parametrize(
    "fail",
    [Throttled("DynamoDB PutItem: Throttling"), ConflictingUpdate("DynamoDB PutItem: ConditionalCheckFailedException")],
    ids=["throttled", "always_conflicting"],
)
def test_a_reservation_not_stored_buys_nothing(fail):
    full = _settings(_budget_affording(5))
    state = FailingState(fail)
    _seeded(MemoryState(), full)
    errors: list[str] = []
    plan = _decide(full, "one", state, errors)
    assert _added(plan) == 0 and Reason.BUDGET_UNKNOWN in plan.decision(A).reasons
    assert any("not stored" in e for e in errors), errors


def test_an_environment_without_budget_shares_nothing():
    full = _settings(None)
    state = MemoryState()
    plan = _decide(full, "one", state, [])
    assert _added(plan) == 4 and shard_budget.ENV_BUDGET_KEY not in state.items


# --- the tick and the handler ---------------------------------------------------------------------------------------


def _ports(state, fail=None):
    groups = FakeGroups(
        [group("research-spot", 0), group("research-od", 0), group("teamb-spot", 0), group("teamb-od", 0)], [], fail
    )
    return Ports(groups, FakeUtil({}), FakePods({A: (1, 1), B: (1, 1)}), Budget(), state, FakePublisher(), FakeNodes())


def test_a_shard_tick_decides_only_its_pools_under_its_own_lease_and_state():
    full = _settings(_budget_affording(50))
    state = MemoryState()
    _seeded(state, full)
    ports = _ports(state)
    result = run_tick(full, ports, NOW, lambda line: None, lease=("me", 60.0), shard="two")
    assert [d.pool for d in result.plan.decisions] == [B]
    assert {w[1] for w in ports.groups.writes} == {"teamb-spot"}
    assert shard_budget.tick_key("two") in state.items and STATE_KEY not in state.items
    assert state.leases == {}, "released at the end"
    # another tick holding shard one's lease does not stop shard two
    assert state.acquire_lease("other", NOW.timestamp(), 60.0, key=shard_budget.lease_key("one"))
    again = run_tick(full, _ports(state), NOW, lambda line: None, lease=("me2", 60.0), shard="two")
    assert again.skipped == ""
    held = run_tick(full, _ports(state), NOW, lambda line: None, lease=("me3", 60.0), shard="one")
    assert held.skipped == "lease held"
    assert LEASE_KEY not in state.leases


def test_one_shard_failing_leaves_the_other_acting():
    """Shard one's tick dies (an exception out of its reads) and keeps its lease until it expires; shard two acts."""
    full = _settings(_budget_affording(50))
    state = MemoryState()
    _seeded(state, full)

    class Broken(FakeGroups):
        def read(self, *a, **k):
            raise RuntimeError("a bug in shard one's tick")

    broken = Ports(Broken([], []), FakeUtil({}), FakePods({A: (1,)}), Budget(), state, FakePublisher(), FakeNodes())
    with pytest.raises(RuntimeError):
        run_tick(full, broken, NOW, lambda line: None, lease=("one-tick", 60.0), shard="one")
    ports = _ports(state)
    result = run_tick(full, ports, NOW, lambda line: None, lease=("two-tick", 60.0), shard="two")
    assert result.skipped == "" and {w[1] for w in ports.groups.writes} == {"teamb-spot"}


def test_a_tick_without_shard_in_a_sharded_environment_does_nothing():
    full = _settings(_budget_affording(50))
    ports = _ports(MemoryState())
    result = run_tick(full, ports, NOW, lambda line: None, lease=("me", 60.0))
    assert result.skipped == "no shard" and ports.groups.writes == [] and result.errors


@pytest.mark.parametrize(
    "event,why",
    [({}, "is not one of"), ({"shard": "three"}, "is not one of"), ({"shard": 7}, "is not one of")],
    ids=["missing", "unknown", "not_a_name"],
)
def test_the_handler_refuses_a_missing_or_unknown_shard_loudly(event, why):
    full = _settings(_budget_affording(50))
    built = []
    with (
        mock.patch.object(handler, "load_settings", lambda: full),
        mock.patch.object(handler, "build_ports", lambda *a, **k: built.append(a)),
    ):
        with pytest.raises(BadSettings, match=why):
            handler.lambda_handler(event, types.SimpleNamespace())
    assert built == [], "refused before any port was built"


def test_the_handler_refuses_a_shard_where_there_are_none():
    with mock.patch.object(handler, "load_settings", lambda: settings(pool_settings())):
        with pytest.raises(BadSettings, match="no shards"):
            handler.handle({"shard": "one"}, types.SimpleNamespace(), session=object())


def test_the_handler_runs_the_named_shard():
    full = _settings(_budget_affording(50))
    seen = {}
    with (
        mock.patch.object(handler, "load_settings", lambda: full),
        mock.patch.object(handler, "build_ports", lambda s, *a, **k: seen.update(pools=[p.name for p in s.pools])),
        mock.patch.object(handler, "run_tick", lambda s, p, now, **kw: seen.update(shard=kw["shard"])),
    ):
        handler.handle({"shard": "two"}, types.SimpleNamespace(), session=object())
    assert seen == {"pools": [B], "shard": "two"}


class Ec2:
    def __init__(self, tags=None, fail=False):
        self.tags, self.fail = tags, fail

    def describe_instances(self, **kw):
        if self.fail:
            raise RuntimeError("EC2 down")
        if self.tags is None:
            return {"Reservations": []}
        return {
            "Reservations": [
                {
                    "Instances": [
                        {
                            "InstanceId": "i-0123456789abcdef0",
                            "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()],
                        }
                    ]
                }
            ]
        }


WARNING = {"source": "aws.ec2", "detail-type": handler.SPOT_WARNING, "detail": {"instance-id": "i-0123456789abcdef0"}}


@pytest.mark.parametrize(
    "tags,shard",
    [
        ({"gpuloan:environment": "dev", "gpuloan:pool": B}, "two"),
        ({"gpuloan:environment": "dev", "eks:nodegroup-name": "research-spot"}, "one"),
    ],
    ids=["pool_tag", "nodegroup_tag"],
)
def test_a_spot_warning_runs_the_shard_that_owns_the_instance(tags, shard):
    full = _settings(_budget_affording(50))
    seen = {}
    with (
        mock.patch.object(handler, "load_settings", lambda: full),
        mock.patch.object(handler, "_bounded", lambda session, service, deadline: Ec2(tags)),
        mock.patch.object(handler, "build_ports", lambda s, *a, **k: None),
        mock.patch.object(handler, "run_tick", lambda s, p, now, **kw: seen.update(kw)),
    ):
        handler.handle(WARNING, types.SimpleNamespace(), session=object())
    assert seen["shard"] == shard and seen["leaving"] == ("i-0123456789abcdef0",)


def test_a_spot_warning_of_unknown_owner_is_recorded_for_every_shard(monkeypatch):
    """The instance could not be read (or carries no pool tag): no shard's tick runs now; the warning goes to the
    shared "leaving" item, which every shard's next tick merges."""
    full = _settings(_budget_affording(50))
    state = MemoryState()
    monkeypatch.setenv("GPULOAN_STATE_TABLE", "t")
    with (
        mock.patch.object(handler, "load_settings", lambda: full),
        mock.patch.object(handler, "_bounded", lambda session, service, deadline: Ec2(fail=True)),
        mock.patch("policy.io.state.DynamoState", lambda client, table: state),
        mock.patch.object(handler, "run_tick", lambda *a, **k: pytest.fail("no tick without a shard")),
    ):
        result = handler.handle(WARNING, types.SimpleNamespace(), session=object())
    assert "i-0123456789abcdef0" in state.leaving and not result.errors
    # the owning shard's next tick treats the instance as leaving (it is merged from the shared item)
    ports = _ports(state)
    logs: list[str] = []
    run_tick(full, ports, NOW, logs.append, lease=("me", 60.0), shard="one")
    saved, _ = state.load(shard_budget.tick_key("one"))
    assert "i-0123456789abcdef0" in saved.get("leaving", {}), json.dumps(saved)[:300]


# --- the settings JSON ------------------------------------------------------------------------------------------


def test_settings_json_carries_shards_and_an_unsharded_one_has_no_key():
    full = _settings(1000.0)
    assert Settings.from_json(full.to_json()).shards == full.shards
    plain = settings(pool_settings())
    assert "shards" not in json.loads(plain.to_json())  # the package of an unsharded stack is as before


@pytest.mark.parametrize(
    "shards,why",
    [
        ((("one", (A,)),), "pools in no shard: teamb"),
        ((("one", (A, B)), ("two", (B,))), "pools in two shards: teamb"),
        ((("one", (A,)), ("two", (B, "nosuch"))), "not pools: nosuch"),
        ((("one", (A,)), ("one", (B,))), "used twice"),
    ],
    ids=["no_shard", "two_shards", "unknown_pool", "duplicate_name"],
)
def test_settings_whose_shards_do_not_cover_every_pool_once_are_refused(shards, why):
    data = json.loads(_settings(1000.0).to_json())
    data["shards"] = [{"name": n, "pools": list(p)} for n, p in shards]
    with pytest.raises(BadSettings, match=why):
        Settings.from_json(json.dumps(data))


def test_a_malformed_spot_warning_in_a_sharded_environment_changes_nothing():
    full = _settings(1000.0)
    bad = {**WARNING, "detail": {"instance-id": "not-an-instance"}}
    with (
        mock.patch.object(handler, "load_settings", lambda: full),
        mock.patch.object(handler, "build_ports", lambda *a, **k: pytest.fail("nothing is built")),
    ):
        with pytest.raises(BadSettings, match="malformed spot warning"):
            handler.handle(bad, types.SimpleNamespace(), session=object())
