"""An in-memory StatePort (policy/ports.py) with DynamoState's compare-and-set semantics (policy/io/state.py): the
tests, the simulator and dry runs without a table.
"""

from __future__ import annotations

import json

from policy.ports import LEASE_KEY, checked_ids


class MemoryState:
    """In-memory StatePort with the same compare-and-set semantics (tests, simulator, dry runs without a table)."""

    def __init__(self):
        self.items: dict[str, tuple[dict, int]] = {}
        self.leases: dict[str, tuple[str, float]] = {}  # lease key -> (holder, expires_at)
        self.leaving: dict[str, float] = {}  # the "leaving" item: instance id -> expires_at

    def load(self, key: str) -> tuple[dict, int]:
        data, version = self.items.get(key, ({}, 0))
        return json.loads(json.dumps(data)), version

    def save(self, key: str, data: dict, version: int) -> None:
        from policy.errors import ConflictingUpdate

        if self.items.get(key, ({}, 0))[1] != version:
            raise ConflictingUpdate(f"state {key} changed since it was read")
        self.items[key] = (json.loads(json.dumps(data)), version + 1)

    @property
    def lease(self) -> tuple[str, float] | None:
        """The unsharded tick's lease (holder, expires_at), or None."""
        return self.leases.get(LEASE_KEY)

    def acquire_lease(self, holder: str, now_epoch: float, ttl_s: float, key: str = LEASE_KEY) -> bool:
        held = self.leases.get(key)
        if held is not None and held[1] >= now_epoch:
            return False
        self.leases[key] = (holder, now_epoch + ttl_s)
        return True

    def release_lease(self, holder: str, key: str = LEASE_KEY) -> None:
        held = self.leases.get(key)
        if held is not None and held[0] == holder:
            del self.leases[key]

    def record_leaving(self, expires_at: dict[str, float]) -> None:
        self.leaving.update(checked_ids(expires_at))

    def load_leaving(self) -> dict[str, float]:
        return dict(self.leaving)

    def prune_leaving(self, ids: list[str], now_epoch: float) -> bool:
        ids = list(checked_ids(dict.fromkeys(ids, 0.0)))
        if not all(i in self.leaving and self.leaving[i] <= now_epoch for i in ids):
            return False
        for i in ids:
            del self.leaving[i]
        return True
