"""A Capacity Block's real dates (issue 35 item 7): the policy reads StartDate, EndDate and State from EC2
(DescribeCapacityReservations, one call per tick for every block) and prefers them over config, so an extension or
a typo in config never drains a paid block early; a mismatch is a tick error; when the read fails, nothing is taken
away from a block on its configured dates alone. moto has no capacity reservations (DESIGN.md): the adapter is
tested with botocore's Stubber, the decision purely, the tick with an in-memory port."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber

from policy import capacity_blocks as cb
from policy.decide import decide
from policy.errors import PolicyError, Throttled
from policy.model import ACTION_HOLD, ACTION_SET_DESIRED, BLOCK_UNREAD, Action, BlockDates, Observation, PoolObservation
from policy.terms import Reason
from policy.io.reservations import AwsCapacityBlocks
from policy.tick import run_tick
from policy_cases import FLOOR, OD, SPOT, group, settings
from test_capacity_blocks import (
    DRAIN,
    END,
    SCALE_DOWN,
    START,
    CheckpointNodes,
    _document,
    _tick_ports,
    block,
    block_changes,
    floor_nodes,
    kueue_block,
    quota_changes,
)
from conftest import resolved_prices

RID = "cr-0123456789abcdef0"
EXTENDED = END + timedelta(days=7)  # the block was extended by a week; config still says END


def dates(state="active", start=START, end=EXTENDED) -> BlockDates:
    return BlockDates(RID, state, start, end)


def obs(desired: int, nodes=(), block_dates=None, quota=None) -> Observation:
    groups = (group(SPOT, 0), group(OD, 0), group(FLOOR, desired))
    return Observation(
        (PoolObservation("research", groups, tuple(nodes), (), floor_quota_gpus=quota, block_dates=block_dates),)
    )


def with_id(**kw):
    return block(capacity_block_reservation_id=RID, **kw)


# --- the adapter (botocore's Stubber: the request EC2 gets, the answer it gives) ----------------------------------


def _ec2():
    return boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def _reservation(rid, state="active", start=START, end=EXTENDED):
    return {
        "CapacityReservationId": rid,
        "State": state,
        "StartDate": start,
        "EndDate": end,
        "ReservationType": "capacity-block",
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a",
    }


def test_one_call_reads_every_block_with_its_pages():
    ec2 = _ec2()
    other = "cr-0fedcba9876543210"
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [_reservation(RID)], "NextToken": "t"},
            {"CapacityReservationIds": [RID, other]},
        )
        stub.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [_reservation(other, "scheduled")]},
            {"CapacityReservationIds": [RID, other], "NextToken": "t"},
        )
        adapter = AwsCapacityBlocks(ec2)
        read = adapter.read([other, RID, RID])
        stub.assert_no_pending_responses()
    assert read[RID] == BlockDates(RID, "active", START, EXTENDED)
    assert read[other].state == "scheduled" and adapter.calls == 2


@pytest.mark.parametrize(
    "code,status",
    [("RequestLimitExceeded", 503), ("UnauthorizedOperation", 403), ("InvalidCapacityReservationId.NotFound", 400)],
)
def test_a_failed_read_raises_even_after_a_good_page(code, status):
    """Throttled, denied, or a page that fails after a good one: never a partial answer taken for the whole."""
    ec2 = _ec2()
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_capacity_reservations", {"CapacityReservations": [_reservation(RID)], "NextToken": "t"}
        )
        stub.add_client_error("describe_capacity_reservations", code, "no", http_status_code=status)
        with pytest.raises(PolicyError, match=f"DescribeCapacityReservations: {code}"):
            AwsCapacityBlocks(ec2).read([RID])


def test_the_handler_reads_dates_only_where_a_floor_is_a_block(monkeypatch):
    from policy.handler import build_ports

    monkeypatch.setenv("GPULOAN_KUBE_ENDPOINT", "http://127.0.0.1:1")
    session = boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    assert build_ports(settings(with_id()), session, None).blocks is not None
    assert build_ports(settings(block()), session, None).blocks is None  # no reservation id: config alone


# --- the decision on EC2's dates --------------------------------------------------------------------------------


def test_an_extension_moves_the_drain_and_the_scale_down():
    """Config says END; EC2 says a week later. At the configured drain and scale-down nothing is taken away; at
    EC2's they are."""
    ext = dates()
    assert block_changes(decide(settings(with_id()), obs(2, floor_nodes(), ext), DRAIN)) == []
    assert block_changes(decide(settings(with_id()), obs(2, floor_nodes(), ext), SCALE_DOWN + timedelta(hours=1))) == []
    late_drain = EXTENDED - cb.EKS_SCALEDOWN_BEFORE_END - timedelta(minutes=30)
    assert {a.kind for a in block_changes(decide(settings(with_id()), obs(2, floor_nodes(), ext), late_drain))} == {
        cb.ACTION_CHECKPOINT
    }
    [down] = block_changes(
        decide(settings(with_id()), obs(2, floor_nodes(), ext), EXTENDED - cb.EKS_SCALEDOWN_BEFORE_END)
    )
    assert (down.kind, down.desired_to) == (ACTION_SET_DESIRED, 0)


def test_a_block_ec2_says_is_over_goes_to_zero_and_one_not_delivered_waits():
    inside = START + timedelta(hours=5)  # inside both windows
    for state in ("expired", "cancelled", "payment-failed"):
        [a] = block_changes(decide(settings(with_id()), obs(2, floor_nodes(), dates(state)), inside))
        assert (a.kind, a.desired_to, a.reason) == (ACTION_SET_DESIRED, 0, Reason.CAPACITY_BLOCK_END)
    for state in ("scheduled", "payment-pending"):
        plan = decide(settings(with_id()), obs(0, (), dates(state)), inside)
        assert block_changes(plan) == [] and Reason.CAPACITY_BLOCK_WAITING in plan.decision("research").reasons


def test_unread_dates_still_raise_the_block_but_never_drain_or_lower_it():
    unread = BlockDates(RID, BLOCK_UNREAD)
    [up] = block_changes(decide(settings(with_id()), obs(0, (), unread), START))
    assert (up.kind, up.desired_to) == (ACTION_SET_DESIRED, 2)
    for at in (DRAIN, SCALE_DOWN + timedelta(minutes=5)):
        plan = decide(settings(with_id()), obs(2, floor_nodes(), unread), at)
        assert block_changes(plan) == []
        [hold] = [a for a in plan.decision("research").actions if a.group == FLOOR]
        assert (hold.kind, hold.reason) == (ACTION_HOLD, Reason.HOLD_MISSING_DATA)
        assert "could not be read" in hold.detail
        assert not cb.may_touch(
            with_id(),
            Action(
                "research", ACTION_SET_DESIRED, Reason.CAPACITY_BLOCK_END, group=FLOOR, desired_from=2, desired_to=0
            ),
            at,
            unread,
        )
    kueue = kueue_block(capacity_block_reservation_id=RID)
    assert quota_changes(decide(settings(kueue), obs(2, floor_nodes(), unread, quota=16), DRAIN)) == []
    assert not cb.may_touch(
        kueue,
        Action("research", cb.ACTION_SET_QUOTA, Reason.CAPACITY_BLOCK_DRAIN, desired_from=16, desired_to=0),
        DRAIN,
        unread,
    )


def test_without_a_read_the_configured_window_rules_as_before():
    """The simulator and a block without a reservation id: no dates, the configured window (unchanged)."""
    assert {a.kind for a in block_changes(decide(settings(block()), obs(2, floor_nodes()), DRAIN))} == {
        cb.ACTION_CHECKPOINT
    }


# --- the tick ---------------------------------------------------------------------------------------------------


class FakeBlocks:
    def __init__(self, answer):
        self.answer = answer
        self.asked: list[list[str]] = []

    def read(self, ids):
        self.asked.append(list(ids))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _ports(desired, answer, nodes=None):
    ports = _tick_ports(desired, nodes)
    ports.blocks = FakeBlocks(answer)
    return ports


def test_the_tick_follows_ec2_reports_the_mismatch_and_marks_ec2s_scale_down_time():
    nodes = CheckpointNodes()
    ports = _ports(2, {RID: dates()}, nodes)
    result = run_tick(settings(with_id()), ports, DRAIN + timedelta(minutes=1), lambda _: None)
    assert nodes.cordoned == set() and ports.groups.writes == []  # config's drain time: EC2 says the block runs on
    assert ports.blocks.asked == [[RID]]
    [mismatch] = [e for e in result.errors if RID in e]
    assert "2027-01-22T11:30:00Z" in mismatch and "2027-01-15T11:30:00Z" in mismatch and "follows EC2" in mismatch
    late = EXTENDED - cb.EKS_SCALEDOWN_BEFORE_END - timedelta(minutes=20)
    run_tick(settings(with_id()), ports, late, lambda _: None)
    assert nodes.marked[0][2] == "2027-01-22T10:50:00Z"  # the checkpoint-by time from EC2's end


def test_a_failed_read_is_reported_and_takes_nothing_away():
    nodes = CheckpointNodes()
    ports = _ports(2, Throttled("EC2 DescribeCapacityReservations: RequestLimitExceeded"), nodes)
    result = run_tick(settings(with_id()), ports, SCALE_DOWN + timedelta(minutes=1), lambda _: None)
    assert ports.groups.writes == [] and nodes.cordoned == set()
    assert any("Capacity Block dates unread" in e and "RequestLimitExceeded" in e for e in result.errors)
    up = _ports(0, Throttled("EC2 DescribeCapacityReservations: RequestLimitExceeded"))
    run_tick(settings(with_id()), up, START + timedelta(seconds=30), lambda _: None)
    assert up.groups.writes == [("set", FLOOR, 2)]  # the start still raises the paid block


def test_a_block_ec2_does_not_return_is_reported():
    ports = _ports(2, {})
    result = run_tick(settings(with_id()), ports, DRAIN + timedelta(minutes=1), lambda _: None)
    assert any("did not return it" in e and RID in e for e in result.errors)
    assert ports.nodes.cordoned == set()


# --- IAM and settings -------------------------------------------------------------------------------------------


def test_iam_reads_block_dates_only_with_a_block_and_describes_only_groups_it_may_change():
    with_block = {s["Sid"]: s for s in _document(["dev-a-guaranteed_*"])["Statement"]}
    assert with_block["ReadCapacityBlockDates"]["Action"] == ["ec2:DescribeCapacityReservations"]
    assert with_block["ReadCapacityBlockDates"]["Resource"] == ["*"]  # no resource-level permission exists
    base = "arn:aws:eks:us-east-1:123456789012:nodegroup/c/"
    assert with_block["ReadNodeGroups"]["Resource"] == [f"{base}dev-a-guaranteed_*/*", f"{base}dev-a-spot_*/*"]
    without = {s["Sid"]: s for s in _document([])["Statement"]}
    assert "ReadCapacityBlockDates" not in without
    assert without["ReadNodeGroups"]["Resource"] == [f"{base}dev-a-spot_*/*"]  # floors are read through their ASGs


def test_settings_carry_the_reservation_id():
    from policy.model import Settings
    from pricing.policy_settings import settings_for
    from test_capacity_blocks import _block_cfg

    cfg = _block_cfg()
    s = Settings.from_json(settings_for(resolved_prices(), cfg, "c", {}, allow_unknown_prices=True).to_json())
    assert s.pools[0].capacity_block_reservation_id == cfg.pools[0].guaranteed.reservation_id
    assert s.pools[0].capacity_block_reservation_id.startswith("cr-")
