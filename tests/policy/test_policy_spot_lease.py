"""A spot interruption warning is never lost to a held lease (policy/tick.py run_tick, policy/lease.py,
policy/io/state.py's "leaving" records), over the in-memory state and fakes. The same rules against the packaged zip
and the moto server: tests/policy/test_policy_e2e.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from policy.deadline import Deadline
from policy.errors import Throttled
from policy.lease import MIN_TICK_S
from policy.ports import Instance
from policy.memory_state import MemoryState
from policy.tick import Ports, run_tick
from policy_cases import NOW, OD, SPOT, ago, group, pool_settings, settings
from test_policy_adapters import FakeGroups, FakeNodes, FakePods, FakePublisher, FakeUtil

BUSY, IDLE = "i-00000000000000b01", "i-00000000000000a01"  # well-formed ids: malformed ones are never trusted
NOTICE_S = 3 * 60  # the 2-minute notice plus a minute for clocks


class PodsOnNodes(FakeNodes):
    """The busy node runs one 1-GPU pod; under a spot notice that pod needs a place."""

    def node_pod_gpus(self, name):
        return (1,) if name == "node-busy" else ()


def _ports(state=None) -> Ports:
    instances = [
        Instance(IDLE, SPOT, "InService", ago(120), "node-idle"),
        Instance(BUSY, SPOT, "InService", ago(120), "node-busy"),
    ]
    return Ports(
        FakeGroups([group(SPOT, 2), group(OD, 0)], instances),
        FakeUtil({IDLE: 0.0, BUSY: 70.0}),
        FakePods({"research": ()}),
        None,
        MemoryState() if state is None else state,
        FakePublisher(),
        PodsOnNodes(),
    )


class Clock:
    """A fake monotonic clock for the deadline; sleeping advances it, and the lease holder may release on the way."""

    def __init__(self, state: MemoryState | None = None, release_after_s: float | None = None):
        self.t = 0.0
        self.slept: list[float] = []
        self.state, self.release_after_s = state, release_after_s

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds
        if self.release_after_s is not None and self.t >= self.release_after_s:
            self.state.release_lease("other-tick")


def _held(state: MemoryState) -> None:
    assert state.acquire_lease("other-tick", NOW.timestamp(), 50.0)


def _research(result):
    return result.plan.decisions[0]


def _warning_tick(ports, clock: Clock, deadline_s: float = 23.0, now=NOW, leaving=(BUSY,)):
    logs: list[str] = []
    result = run_tick(
        settings(pool_settings()),
        ports,
        now,
        logs.append,
        deadline=Deadline(deadline_s, clock=clock),
        lease=("warning", 55.0),
        leaving=leaving,
        sleep=clock.sleep,
    )
    return result, [json.loads(x) for x in logs if x.startswith("{")]


def test_without_a_warning_the_idle_node_goes():
    """The control for the tests below: a plain tick reclaims the idle node, nothing is pending."""
    ports = _ports()
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None, lease=("tick", 55.0))
    assert ports.groups.writes == [("terminate", IDLE)] and _research(result).pending_gpus == 0


def test_a_warning_while_another_tick_holds_the_lease_is_recorded_and_the_next_tick_acts_on_it():
    state = MemoryState()
    _held(state)
    ports = _ports(state)
    clock = Clock()
    result, logs = _warning_tick(ports, clock)
    assert result.skipped == "lease held" and ports.groups.writes == []
    assert state.leaving == {BUSY: NOW.timestamp() + NOTICE_S}, "recorded without the lease"
    assert state.lease[0] == "other-tick", "the holder's lease is left alone"
    # it waited with backoff, and stopped while the deadline still left a tick's time
    assert len(clock.slept) > 2 and 23.0 - clock.t >= MIN_TICK_S
    messages = [x.get("message", "") for x in logs]
    assert any(m.startswith("spot warning recorded") for m in messages)
    assert any(m.startswith("spot warning left to the next tick") for m in messages)
    assert not any('"PolicyErrors"' in json.dumps(x) and x.get("PolicyErrors") for x in logs)

    state.release_lease("other-tick")  # the holder's tick ends
    later = NOW + timedelta(minutes=1)
    nxt = run_tick(settings(pool_settings()), ports, later, lambda _: None, lease=("scheduled", 55.0))
    assert nxt.skipped == "" and nxt.errors == []
    # the warned node is leaving: its GPU pod is pending, so the idle node is kept for it
    assert _research(nxt).pending_gpus == 1
    assert ("terminate", IDLE) not in ports.groups.writes
    assert set(state.items["tick"][0]["leaving"]) == {BUSY}


def test_a_warning_takes_the_lease_when_the_holder_releases_it_and_acts_itself():
    state = MemoryState()
    _held(state)
    ports = _ports(state)
    clock = Clock(state, release_after_s=1.0)
    result, logs = _warning_tick(ports, clock)
    assert result.skipped == "" and result.errors == []
    assert clock.slept == [0.25, 0.5, 1.0]  # the holder released at 1 s; the third try found the lease free
    assert _research(result).pending_gpus == 1 and ("terminate", IDLE) not in ports.groups.writes
    assert result.plan.decided_at == NOW + timedelta(seconds=1.75), "the tick runs at the time it got the lease"
    assert state.lease is None, "released at the end of the tick"
    [acted] = [x for x in logs if x.get("message") == "spot warning acted on by this invocation"]
    assert acted["instances"] == [BUSY] and acted["waited_for_lease_s"] == 1.75


def test_a_warning_with_the_lease_free_acts_at_once():
    state = MemoryState()
    ports = _ports(state)
    clock = Clock()
    result, logs = _warning_tick(ports, clock)
    assert clock.slept == [] and result.skipped == "" and _research(result).pending_gpus == 1
    assert state.leaving == {BUSY: NOW.timestamp() + NOTICE_S}


def test_a_scheduled_tick_still_skips_at_once_when_the_lease_is_held():
    state = MemoryState()
    _held(state)
    ports = _ports(state)
    clock = Clock()
    result, _ = _warning_tick(ports, clock, leaving=())
    assert result.skipped == "lease held" and clock.slept == [] and state.leaving == {}


def test_without_a_deadline_a_warning_tries_the_lease_once():
    """Outside Lambda nothing bounds the wait, so there is none (the record still is made)."""
    state = MemoryState()
    _held(state)
    slept = []
    result = run_tick(
        settings(pool_settings()),
        _ports(state),
        NOW,
        lambda _: None,
        lease=("w", 60.0),
        leaving=(BUSY,),
        sleep=slept.append,
    )
    assert result.skipped == "lease held" and slept == [] and BUSY in state.leaving


@pytest.mark.parametrize(
    "after_s, leaving", [(NOTICE_S - 1, True), (NOTICE_S + 1, False)], ids=["within_the_notice", "after_the_notice"]
)
def test_records_expire_after_the_notice_and_the_acting_tick_prunes_them(after_s, leaving):
    state = MemoryState()
    state.record_leaving({BUSY: NOW.timestamp() + NOTICE_S})
    ports = _ports(state)
    later = NOW + timedelta(seconds=after_s)
    result = run_tick(settings(pool_settings()), ports, later, lambda _: None, lease=("scheduled", 55.0))
    assert _research(result).pending_gpus == (1 if leaving else 0)
    assert (BUSY in state.leaving) is leaving, "an expired record is pruned, a live one kept"
    assert ("leaving" in state.items["tick"][0]) is leaving


def test_a_record_made_again_meanwhile_survives_the_prune():
    state = MemoryState()
    state.record_leaving({BUSY: 100.0, IDLE: 100.0})
    state.record_leaving({BUSY: 500.0})  # a second delivery of the warning, after the pruner read the item
    assert state.prune_leaving([BUSY, IDLE], 200.0) is False
    assert state.leaving == {BUSY: 500.0, IDLE: 100.0}
    assert state.prune_leaving([IDLE], 200.0) is True and state.leaving == {BUSY: 500.0}


def test_a_malformed_instance_id_is_never_recorded():
    state = MemoryState()
    result, _ = _warning_tick(_ports(state), Clock(), leaving=("i-0; drop", "node-busy"))
    assert state.leaving == {} and result.errors == []
    assert "leaving" not in state.items["tick"][0]
    with pytest.raises(ValueError, match="not EC2 instance ids"):
        state.record_leaving({"#i0 = :x": 1.0})


class FailingRecords(MemoryState):
    def record_leaving(self, expires_at):
        raise Throttled("DynamoDB UpdateItem leaving: ProvisionedThroughputExceededException")


def _policy_errors(logs) -> int:
    return max(x.get("PolicyErrors", 0) for x in logs)


def test_a_failed_record_is_a_tick_error_and_the_warning_is_still_acted_on():
    state = FailingRecords()
    ports = _ports(state)
    result, logs = _warning_tick(ports, Clock())
    assert any("spot warning not recorded" in e and BUSY in e for e in result.errors)
    assert _policy_errors(logs) >= 1
    assert _research(result).pending_gpus == 1, "with the lease free this invocation still acts itself"
    assert any("could not complete a tick" in s for s in ports.publisher.sent)


def test_a_failed_record_with_the_lease_held_is_loud():
    state = FailingRecords()
    _held(state)
    result, logs = _warning_tick(_ports(state), Clock())
    assert result.skipped == "lease held"
    assert any("spot warning not recorded" in e for e in result.errors)
    assert _policy_errors(logs) == 1
    assert any(x.get("level") == "ERROR" and x.get("message", "").startswith("spot warning not acted on") for x in logs)


def test_unreadable_records_are_a_tick_error_and_the_tick_still_runs():
    class Unreadable(MemoryState):
        def load_leaving(self):
            raise Throttled("DynamoDB GetItem leaving: ThrottlingException")

    ports = _ports(Unreadable())
    result = run_tick(settings(pool_settings()), ports, NOW, lambda _: None, lease=("scheduled", 55.0))
    assert any("GetItem leaving" in e for e in result.errors)
    assert result.skipped == "" and ports.groups.writes == [("terminate", IDLE)]


class UnreleasableState(MemoryState):
    def release_lease(self, holder: str) -> None:
        raise Throttled("DynamoDB DeleteItem lease: ThrottlingException")


def test_a_lease_that_cannot_be_released_leaves_a_trace():
    """Issue 24: a failed release used to pass silently, though every tick until the lease expires does nothing.
    It is a tick error now, with its own log line and PolicyErrors datapoint."""
    state = UnreleasableState()
    logs: list[str] = []
    result = run_tick(settings(pool_settings()), _ports(state), NOW, logs.append, lease=("me", 60.0))
    assert any(e.startswith("lease not released (Throttled") for e in result.errors)
    assert any('"PolicyErrors":1' in line for line in logs[-2:])
    assert any("lease not released" in line for line in logs if line.startswith('{"errors"'))
