"""Persisted state (DESIGN.md decision 3): a DynamoDB table written only with conditional writes.

Why DynamoDB rather than SSM Parameter Store: PutParameter has no compare-and-set, so two overlapping ticks
could both read, both add their spend estimate and one would silently win. DynamoDB's ConditionExpression on
a version attribute makes the second writer fail (ConflictingUpdate) instead. One item per key:
{"pk": key, "version": n, "data": "<json>"}.

The tick lease (issue 12): a live tick acts only while it holds the item {"pk": "lease", "holder", "expires_at"},
taken with a conditional PutItem that succeeds only when no lease exists or the last one expired, and deleted
(only by its holder) when the tick ends. With shards (docs/policy.md, "Shards") each shard's tick holds its own
item "lease#<shard>" and writes its own "tick#<shard>": one shard never waits for another. Two overlapping ticks (a slow tick and the next schedule, a manual
invocation) therefore never both change capacity, without reserved concurrency, which new accounts cannot set
(it must leave 100 unreserved executions). A tick that dies keeps the lease until it expires (the function's
timeout), after which the next tick takes it over.

Spot warnings (the item {"pk": "leaving", "<instance id>": expires_at, ...}): a spot interruption warning invocation
records the warned instance here BEFORE it tries the lease, so a warning is never lost to a held lease. Why a
separate item, and why one top-level attribute per instance:
- the tick item is written with a whole-item PutItem (a version condition), which replaces every attribute: a
  warning written into it without the lease would either be dropped by the holder's save or make that save fail;
- UpdateItem changes only the attributes it names and creates the item when it is missing, so one unconditional
  `SET #iid = :expires` per warning needs neither the lease nor a read, and two warnings never clobber each other;
- a map attribute (`SET #m.#iid`) would fail while the map does not exist yet (DynamoDB requires every parent on a
  document path), needing a second call to create it first; top-level attributes need nothing first.
Every tick reads the item (merged into the ids it keeps itself); the tick that acts removes expired entries with
a conditional REMOVE (only while they are still expired, so a concurrent re-record of the same id survives).
"""

from __future__ import annotations

import json

from policy.io.aws_errors import classify
from policy.errors import MalformedState
from policy.model import INSTANCE_ID
from policy.ports import LEASE_KEY, LEAVING_KEY, MALFORMED_VERSION, checked_ids


class DynamoState:
    def __init__(self, dynamodb, table: str):
        self._db = dynamodb
        self._table = table
        self.calls = 0

    def load(self, key: str) -> tuple[dict, int]:
        """(data, version); ({}, 0) for a key never written."""
        self.calls += 1
        try:
            resp = self._db.get_item(TableName=self._table, Key={"pk": {"S": key}}, ConsistentRead=True)
        except Exception as err:  # noqa: BLE001
            raise classify(err, f"DynamoDB GetItem {key}") from err
        item = resp.get("Item")
        if not item:
            return {}, 0
        try:
            version = int((item.get("version") or {})["N"])
        except (KeyError, TypeError, ValueError):
            raise MalformedState(f"state item {key!r} has no numeric version", None) from None
        try:
            data = json.loads((item.get("data") or {})["S"])
        except (KeyError, TypeError, ValueError) as err:
            raise MalformedState(f"state item {key!r} data is not JSON ({type(err).__name__})", version) from None
        if not isinstance(data, dict):
            raise MalformedState(f"state item {key!r} data is a {type(data).__name__}, not an object", version)
        return data, version

    def save(self, key: str, data: dict, version: int) -> None:
        """Write `data` if the stored version is still `version` (0 = never written); else ConflictingUpdate."""
        self.calls += 1
        item = {
            "pk": {"S": key},
            "version": {"N": str(max(version, 0) + 1)},
            "data": {"S": json.dumps(data, sort_keys=True, separators=(",", ":"))},
        }
        try:
            if version == 0:
                self._db.put_item(TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)")
            elif version == MALFORMED_VERSION:
                # Replaces an item whose version did not parse, only while it is still that item: a tick that
                # rewrote it meanwhile (a numeric version) wins, as any concurrent writer does.
                self._db.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="attribute_exists(pk) AND NOT attribute_type(version, :n)",
                    ExpressionAttributeValues={":n": {"S": "N"}},
                )
            else:
                self._db.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="version = :v",
                    ExpressionAttributeValues={":v": {"N": str(version)}},
                )
        except Exception as err:  # noqa: BLE001
            raise classify(err, f"DynamoDB PutItem {key}") from err

    def acquire_lease(self, holder: str, now_epoch: float, ttl_s: float, key: str = LEASE_KEY) -> bool:
        """True when this tick now holds the lease `key`; False when another tick holds an unexpired one."""
        self.calls += 1
        item = {"pk": {"S": key}, "holder": {"S": holder}, "expires_at": {"N": f"{now_epoch + ttl_s:.3f}"}}
        try:
            self._db.put_item(
                TableName=self._table,
                Item=item,
                # A lease whose expiry is not a number (a hand edit) would never compare as
                # expired and would stop every tick for good: it counts as expired.
                ConditionExpression="attribute_not_exists(pk) OR NOT attribute_type(expires_at, :n) "
                "OR expires_at < :now",
                ExpressionAttributeValues={":now": {"N": f"{now_epoch:.3f}"}, ":n": {"S": "N"}},
            )
            return True
        except Exception as err:  # noqa: BLE001
            if _condition_failed(err):
                return False
            raise classify(err, f"DynamoDB PutItem {key}") from err

    def release_lease(self, holder: str, key: str = LEASE_KEY) -> None:
        self.calls += 1
        try:
            self._db.delete_item(
                TableName=self._table,
                Key={"pk": {"S": key}},
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":me": {"S": holder}},
            )
        except Exception as err:  # noqa: BLE001
            raise classify(err, f"DynamoDB DeleteItem {key}") from err

    def record_leaving(self, expires_at: dict[str, float]) -> None:
        """Store each instance's notice expiry (epoch seconds) without the lease: one UpdateItem, no condition."""
        ids = sorted(checked_ids(expires_at))
        if not ids:
            return
        self.calls += 1
        names = {f"#i{k}": iid for k, iid in enumerate(ids)}  # "i-..." has a '-': only usable as a placeholder
        values = {f":e{k}": {"N": f"{expires_at[iid]:.3f}"} for k, iid in enumerate(ids)}
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": LEAVING_KEY}},
                UpdateExpression="SET " + ", ".join(f"#i{k} = :e{k}" for k in range(len(ids))),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except Exception as err:  # noqa: BLE001
            raise classify(err, "DynamoDB UpdateItem leaving") from err

    def load_leaving(self) -> dict[str, float]:
        """{instance id: expires_at} as recorded (expired ones included: the caller prunes them)."""
        self.calls += 1
        try:
            resp = self._db.get_item(TableName=self._table, Key={"pk": {"S": LEAVING_KEY}}, ConsistentRead=True)
        except Exception as err:  # noqa: BLE001
            raise classify(err, f"DynamoDB GetItem {LEAVING_KEY}") from err
        out = {}
        for name, value in (resp.get("Item") or {}).items():
            # An entry that is not a number (a hand edit) is skipped: the warning it stood for is then seen only
            # once the node's pods are evicted, as without the record.
            if INSTANCE_ID.fullmatch(name) and isinstance(value, dict) and "N" in value:
                try:
                    out[name] = float(value["N"])
                except (TypeError, ValueError):
                    continue
        return out

    def prune_leaving(self, ids: list[str], now_epoch: float) -> bool:
        """Remove `ids` if every one is still expired at `now_epoch`; False (nothing removed) when one was
        re-recorded meanwhile or is already gone: the next tick reads the item again and retries."""
        ids = sorted(checked_ids(dict.fromkeys(ids, 0.0)))
        if not ids:
            return True
        self.calls += 1
        names = {f"#i{k}": iid for k, iid in enumerate(ids)}
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": LEAVING_KEY}},
                UpdateExpression="REMOVE " + ", ".join(names),
                ConditionExpression=" AND ".join(f"{n} <= :now" for n in names),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":now": {"N": f"{now_epoch:.3f}"}},
            )
            return True
        except Exception as err:  # noqa: BLE001
            if _condition_failed(err):
                return False
            raise classify(err, "DynamoDB UpdateItem leaving") from err


def _condition_failed(err: Exception) -> bool:
    """A conditional write refused because its condition did not hold (not an error: the caller's answer)."""
    return ((getattr(err, "response", None) or {}).get("Error") or {}).get(
        "Code", ""
    ) == "ConditionalCheckFailedException"
