"""Persisted state (DESIGN.md decision 3): a DynamoDB table written only with conditional writes.

Why DynamoDB rather than SSM Parameter Store: PutParameter has no compare-and-set, so two overlapping ticks
could both read, both add their spend estimate and one would silently win. DynamoDB's ConditionExpression on
a version attribute makes the second writer fail (ConflictingUpdate) instead; reserved concurrency 1 makes
that rare, the condition makes it safe. One item per key: {"pk": key, "version": n, "data": "<json>"}.
"""

from __future__ import annotations

import json
from typing import Protocol

from policy.aws_errors import classify


class StatePort(Protocol):
    def load(self, key: str) -> tuple[dict, int]: ...

    def save(self, key: str, data: dict, version: int) -> None: ...


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


class MemoryState:
    """In-memory StatePort with the same compare-and-set semantics (tests, simulator, dry runs without a table)."""

    def __init__(self):
        self.items: dict[str, tuple[dict, int]] = {}

    def load(self, key: str) -> tuple[dict, int]:
        data, version = self.items.get(key, ({}, 0))
        return json.loads(json.dumps(data)), version

    def save(self, key: str, data: dict, version: int) -> None:
        from policy.errors import ConflictingUpdate

        if self.items.get(key, ({}, 0))[1] != version:
            raise ConflictingUpdate(f"state {key} changed since it was read")
        self.items[key] = (json.loads(json.dumps(data)), version + 1)
