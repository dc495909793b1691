"""Persisted state (DESIGN.md decision 3): a DynamoDB table written only with conditional writes.

Why DynamoDB rather than SSM Parameter Store: PutParameter has no compare-and-set, so two overlapping ticks
could both read, both add their spend estimate and one would silently win. DynamoDB's ConditionExpression on
a version attribute makes the second writer fail (ConflictingUpdate) instead. One item per key:
{"pk": key, "version": n, "data": "<json>"}.

The tick lease (issue 12): a live tick acts only while it holds the item {"pk": "lease", "holder", "expires_at"},
taken with a conditional PutItem that succeeds only when no lease exists or the last one expired, and deleted
(only by its holder) when the tick ends. Two overlapping ticks (a slow tick and the next schedule, a manual
invocation) therefore never both change capacity, without reserved concurrency, which new accounts cannot set
(it must leave 100 unreserved executions). A tick that dies keeps the lease until it expires (the function's
timeout), after which the next tick takes it over.
"""

from __future__ import annotations

import json
from typing import Protocol

from policy.aws_errors import classify


LEASE_KEY = "lease"


class StatePort(Protocol):
    def load(self, key: str) -> tuple[dict, int]: ...

    def save(self, key: str, data: dict, version: int) -> None: ...

    def acquire_lease(self, holder: str, now_epoch: float, ttl_s: float) -> bool: ...

    def release_lease(self, holder: str) -> None: ...


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
        return json.loads(item["data"]["S"]), int(item["version"]["N"])

    def save(self, key: str, data: dict, version: int) -> None:
        """Write `data` if the stored version is still `version` (0 = never written); else ConflictingUpdate."""
        self.calls += 1
        item = {"pk": {"S": key}, "version": {"N": str(version + 1)},
                "data": {"S": json.dumps(data, sort_keys=True, separators=(",", ":"))}}
        try:
            if version == 0:
                self._db.put_item(TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)")
            else:
                self._db.put_item(TableName=self._table, Item=item, ConditionExpression="version = :v",
                                  ExpressionAttributeValues={":v": {"N": str(version)}})
        except Exception as err:  # noqa: BLE001
            raise classify(err, f"DynamoDB PutItem {key}") from err

    def acquire_lease(self, holder: str, now_epoch: float, ttl_s: float) -> bool:
        """True when this tick now holds the lease; False when another tick holds an unexpired one."""
        self.calls += 1
        item = {"pk": {"S": LEASE_KEY}, "holder": {"S": holder}, "expires_at": {"N": f"{now_epoch + ttl_s:.3f}"}}
        try:
            self._db.put_item(TableName=self._table, Item=item,
                              ConditionExpression="attribute_not_exists(pk) OR expires_at < :now",
                              ExpressionAttributeValues={":now": {"N": f"{now_epoch:.3f}"}})
            return True
        except Exception as err:  # noqa: BLE001
            code = ((getattr(err, "response", None) or {}).get("Error") or {}).get("Code", "")
            if code == "ConditionalCheckFailedException":
                return False
            raise classify(err, "DynamoDB PutItem lease") from err

    def release_lease(self, holder: str) -> None:
        self.calls += 1
        try:
            self._db.delete_item(TableName=self._table, Key={"pk": {"S": LEASE_KEY}},
                                 ConditionExpression="holder = :me", ExpressionAttributeValues={":me": {"S": holder}})
        except Exception as err:  # noqa: BLE001
            raise classify(err, "DynamoDB DeleteItem lease") from err


class MemoryState:
    """In-memory StatePort with the same compare-and-set semantics (tests, simulator, dry runs without a table)."""

    def __init__(self):
        self.items: dict[str, tuple[dict, int]] = {}
        self.lease: tuple[str, float] | None = None  # (holder, expires_at)

    def load(self, key: str) -> tuple[dict, int]:
        data, version = self.items.get(key, ({}, 0))
        return json.loads(json.dumps(data)), version

    def save(self, key: str, data: dict, version: int) -> None:
        from policy.errors import ConflictingUpdate

        if self.items.get(key, ({}, 0))[1] != version:
            raise ConflictingUpdate(f"state {key} changed since it was read")
        self.items[key] = (json.loads(json.dumps(data)), version + 1)

    def acquire_lease(self, holder: str, now_epoch: float, ttl_s: float) -> bool:
        if self.lease is not None and self.lease[1] >= now_epoch:
            return False
        self.lease = (holder, now_epoch + ttl_s)
        return True

    def release_lease(self, holder: str) -> None:
        if self.lease is not None and self.lease[0] == holder:
            self.lease = None
