"""Capacity Block dates from EC2: one DescribeCapacityReservations per tick for every block of the environment.

The port: `read(reservation_ids) -> {id: BlockDates}`. A block EC2 does not return is left out (the tick reports
it and treats its dates as unread). Any failure of the call, on any page, raises PolicyError: a partial answer is
never taken for the whole, so every block's window is then unconfirmed (policy/capacity_blocks.py), which holds
what would take a block away. `ec2:DescribeCapacityReservations` has no resource-level permission, so the role
grants it on "*" (stacks/policy_function/function.py, docs/aws-rules.md); it is read-only.
"""

from __future__ import annotations

from datetime import datetime, timezone

from policy.io.aws_errors import classify
from policy.deadline import Deadline
from policy.model import BlockDates


class AwsCapacityBlocks:
    def __init__(self, ec2, deadline: Deadline | None = None):
        self._ec2 = ec2
        self._deadline = deadline
        self.calls = 0

    def read(self, reservation_ids: list[str]) -> dict[str, BlockDates]:
        out: dict[str, BlockDates] = {}
        ids = sorted(set(reservation_ids))
        if not ids:
            return out
        token = None
        while True:
            kwargs = {"CapacityReservationIds": ids}
            if token:
                kwargs["NextToken"] = token
            if self._deadline is not None:
                self._deadline.check()
            self.calls += 1
            try:
                resp = self._ec2.describe_capacity_reservations(**kwargs)
            except Exception as err:  # noqa: BLE001 - every failure becomes a typed PolicyError
                raise classify(err, "EC2 DescribeCapacityReservations") from err
            for r in resp.get("CapacityReservations", []):
                rid = r.get("CapacityReservationId")
                if rid in ids:
                    out[rid] = BlockDates(
                        rid, str(r.get("State", "")), _utc(r.get("StartDate")), _utc(r.get("EndDate"))
                    )
            token = resp.get("NextToken")
            if not token:
                return out


def _utc(t) -> datetime | None:
    if not isinstance(t, datetime):
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
