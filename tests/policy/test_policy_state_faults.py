"""Issue 24 item 12: a tick state that does not parse is reported, ignored for the tick's bookkeeping and rewritten;
it never stops the safety rules, and the errors it causes are counted (PolicyErrors) and mailed.

The in-memory cases cover the parsed item's parts (policy/tick_state.py); the DynamoDB cases, against the moto
server, cover what only the table can hold (data that is not JSON, a version that is not a number, a lease or a
spot notice whose value is not a number)."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest

from policy import tick_state
from policy.tick import run_tick
from policy_cases import NOW, SHARDINGS, pool_settings, settings, sharded, tick_key
from test_policy_adapters import _ports

GOOD_SCOPE = {
    "month": NOW.strftime("%Y-%m"),
    "actual_usd": 100.0,
    "actual_as_of": NOW.isoformat(),
    "estimated_since_usd": 1.0,
    "elastic_month_usd": 1.0,
}

MALFORMED = [
    # (name, the parsed state item, the part reported)
    ("spend_not_an_object", {"spend": ["environment"]}, "spend is a list"),
    (
        "spend_estimate_not_a_number",
        {"spend": {"environment": {**GOOD_SCOPE, "estimated_since_usd": "abc"}}},
        "estimated_since_usd 'abc'",
    ),
    ("spend_actual_nan", {"spend": {"pool:research": {**GOOD_SCOPE, "actual_usd": math.nan}}}, "actual_usd nan"),
    ("spend_actual_negative", {"spend": {"pool:research": {**GOOD_SCOPE, "actual_usd": -5}}}, "actual_usd -5"),
    (
        "spend_as_of_not_a_time",
        {"spend": {"environment": {**GOOD_SCOPE, "actual_as_of": "yesterday"}}},
        "actual_as_of 'yesterday'",
    ),
    ("spend_scope_not_an_object", {"spend": {"environment": 42}}, "is a int"),
    (
        "spend_without_month",
        {"spend": {"environment": {k: v for k, v in GOOD_SCOPE.items() if k != "month"}}},
        "has no month",
    ),
    ("last_tick_not_a_time", {"last_tick_at": 12345}, "last_tick_at 12345"),
    ("last_tick_without_zone", {"last_tick_at": "2026-03-10T11:00:00"}, "last_tick_at"),
    ("notified_not_an_object", {"notified": "research:reclaim"}, "notified is a str"),
    ("notified_time_not_a_time", {"notified": {"research:reclaim": "soon"}}, "notified times"),
    ("leaving_not_an_object", {"leaving": ["i-0123456789abcdef0"]}, "leaving is a list"),
    ("leaving_expiry_not_a_number", {"leaving": {"i-0123456789abcdef0": "later"}}, "leaving expiries"),
    ("rhythm_not_an_object", {"rhythm": [1, 2, 3]}, "rhythm is a list"),
    ("changed_not_an_object", {"changed": ["research-spot"]}, "changed is a list"),
    ("changed_time_without_zone", {"changed": {"research-spot": "2026-03-10T11:58:00"}}, "changed times"),
]


@pytest.mark.parametrize("shards", SHARDINGS)
@pytest.mark.parametrize("name,data,reported", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_tick_state_is_reported_and_the_tick_still_acts(name, data, reported, shards):
    ports = _ports()
    s, shard = sharded(settings(pool_settings(budget_monthly_usd=2500.0)), shards)
    STATE_KEY = tick_key(shard)  # noqa: N806 - the module's name, per shard (a shard's own tick state)
    ports.state.items[STATE_KEY] = (json.loads(json.dumps(data)), 3)
    logs: list[str] = []
    result = run_tick(s, ports, NOW, logs.append, shard=shard)
    # the safety rules and the decisions do not depend on the bookkeeping: the idle node is reclaimed
    assert ports.groups.writes == [("terminate", "i-idle")]
    assert any("MalformedState" in e and reported in e for e in result.errors), result.errors
    assert any('"PolicyErrors":' in line and '"PolicyErrors":0' not in line for line in logs)
    assert any("could not complete a tick" in s for s in ports.publisher.sent)
    # the bookkeeping was rewritten (conditionally, on the version read) and parses from now on
    saved, version = ports.state.items[STATE_KEY]
    assert version == 4 and tick_state.clean(saved)[1] == []
    # and the next tick runs clean
    later = run_tick(s, ports, NOW + timedelta(minutes=1), logs.append, shard=shard)
    assert not any("MalformedState" in e for e in later.errors)


def test_a_well_formed_state_reports_nothing():
    state = {
        "spend": {"environment": GOOD_SCOPE},
        "last_tick_at": NOW.isoformat(),
        "notified": {"research:reclaim": NOW.isoformat()},
        "leaving": {"i-0123456789abcdef0": 1.0e9},
        "rhythm": {"research": {"rows": {}, "last": None}},
        "changed": {"research-spot": NOW.isoformat()},
        "a_later_release": {"kept": True},
    }
    assert tick_state.clean(state) == (state, [])


# --- in the table (moto server) -----------------------------------------------------------------------------------


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


RAW_ITEMS = [
    ("data_not_json", {"version": {"N": "7"}, "data": {"S": "{not json"}}, 7),
    ("data_not_an_object", {"version": {"N": "7"}, "data": {"S": "[1, 2]"}}, 7),
    ("data_missing", {"version": {"N": "7"}}, 7),
    ("version_not_a_number", {"version": {"S": "seven"}, "data": {"S": "{}"}}, None),
    ("version_missing", {"data": {"S": "{}"}}, None),
]


@pytest.mark.parametrize("shards", SHARDINGS)
@pytest.mark.parametrize("name,attrs,version", RAW_ITEMS, ids=[r[0] for r in RAW_ITEMS])
def test_a_malformed_item_in_dynamodb_is_reported_and_rewritten(table, name, attrs, version, shards):
    from policy.io.state import DynamoState

    s, shard = sharded(settings(pool_settings()), shards)
    STATE_KEY = tick_key(shard)  # noqa: N806 - the module's name, per shard (a shard's own tick state)
    table.put_item(TableName="t", Item={"pk": {"S": STATE_KEY}, **attrs})
    ports = _ports()
    ports = type(ports)(**{**ports.__dict__, "state": DynamoState(table, "t")})
    result = run_tick(s, ports, NOW, lambda line: None, shard=shard)
    assert ports.groups.writes == [("terminate", "i-idle")]
    assert any(e.startswith(f"MalformedState: state item '{STATE_KEY}'") for e in result.errors), result.errors
    item = table.get_item(TableName="t", Key={"pk": {"S": STATE_KEY}})["Item"]
    assert int(item["version"]["N"]) == (version or 0) + 1 and isinstance(json.loads(item["data"]["S"]), dict)
    # the next tick reads it and writes it on its own version: no error, no lost write
    later = run_tick(s, ports, NOW + timedelta(minutes=1), lambda line: None, shard=shard)
    assert not any("MalformedState" in e or "PutItem" in e for e in later.errors), later.errors


@pytest.mark.parametrize("shard", [None, "one"])
def test_a_lease_whose_expiry_is_not_a_number_does_not_stop_every_tick(table, shard):
    from policy import shard_budget
    from policy.io.state import DynamoState
    from policy.ports import LEASE_KEY

    key = LEASE_KEY if shard is None else shard_budget.lease_key(shard)
    table.put_item(TableName="t", Item={"pk": {"S": key}, "holder": {"S": "x"}, "expires_at": {"S": "never"}})
    assert DynamoState(table, "t").acquire_lease("me", NOW.timestamp(), 60, key=key) is True
    assert DynamoState(table, "t").acquire_lease("you", NOW.timestamp(), 60, key=key) is False  # held now


def test_a_spot_notice_whose_expiry_is_not_a_number_is_skipped(table):
    from policy.io.state import DynamoState
    from policy.ports import LEAVING_KEY

    table.put_item(
        TableName="t",
        Item={"pk": {"S": LEAVING_KEY}, "i-0123456789abcdef0": {"S": "soon"}, "i-0123456789abcdef1": {"N": "1000.5"}},
    )
    assert DynamoState(table, "t").load_leaving() == {"i-0123456789abcdef1": 1000.5}
