"""Lending ahead of the owner (issue 38 item 2): the rule (policy/decide/lend_ahead.py) lowers a floor's Kueue
lendingLimit by what the owner uses, waits for and is forecast to bring, and raises it again after; it never
touches the guarantee (nominalQuota) and changes nothing on unknown data."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings as hyp_settings, strategies as st

from policy.decide import decide
from policy.decide.lend_ahead import lending_limit_actions, next_slot_start, owner_forecast_gpus, wanted_limit_gpus
from policy.model import ACTION_HOLD, ACTION_SET_LENDING_LIMIT, Lending, PoolObservation, Timers
from policy.terms import Reason
from policy.rhythm import MIN_DAYS, DailyArrivals
from policy_cases import NOW, group, observe, pool_settings, settings

LENDER = pool_settings(
    lend_ahead_queue="gpuloan-prod-research",
    lend_ahead_flavor="research-floor",
    lend_ahead_limit_gpus=8,
    reclaim_lookahead_minutes=60,
)


def reading(
    limit: int | None = 8,
    own: float | None = 0,
    pending: int | None = 0,
    forecast: float | None = 0.0,
    nominal: int = 8,
) -> Lending:
    return Lending(
        nominal_gpus=nominal, limit_gpus=limit, own_gpus=own, pending_workloads=pending, forecast_gpus=forecast
    )


def with_lending(lending: Lending | None):
    obs = observe(groups=[group(), group("research-od")])
    return dataclasses.replace(obs, pools=(dataclasses.replace(obs.pools[0], lending=lending),))


def limit_actions(lending: Lending | None, ps=LENDER, now: datetime = NOW):
    plan = decide(settings(ps), with_lending(lending), now)
    return [a for a in plan.actions if a.kind == ACTION_SET_LENDING_LIMIT or a.reason == Reason.LEND_UNKNOWN]


@pytest.mark.parametrize(
    "case, lending, to, reason",
    [
        ("quiet owner, quiet hour: lends all it is configured to", reading(limit=8, own=0, forecast=0), None, None),
        ("owner's morning is coming: 3 GPUs kept", reading(limit=8, own=0, forecast=2.4), 5, Reason.LEND_AHEAD),
        ("what the owner runs is kept too", reading(limit=8, own=2, forecast=2.4), 3, Reason.LEND_AHEAD),
        (
            "work waits in the owner's queue: nothing more lent",
            reading(limit=8, own=1, pending=2),
            0,
            Reason.LEND_AHEAD,
        ),
        ("forecast above the floor: 0, never negative", reading(limit=8, own=6, forecast=9), 0, Reason.LEND_AHEAD),
        ("forecast passed: raised back", reading(limit=2, own=0, forecast=0), 8, Reason.LEND_RESTORED),
        ("never above the configured limit", reading(limit=4, own=0, forecast=0, nominal=16), 8, Reason.LEND_RESTORED),
        ("no limit set yet (all lends): lowered", reading(limit=None, own=0, forecast=3), 5, Reason.LEND_AHEAD),
        ("rhythm unknown: the configured limit", reading(limit=3, forecast=None), 8, Reason.LEND_RESTORED),
        ("usage field absent: the configured limit", reading(limit=3, own=None, forecast=1), 8, Reason.LEND_RESTORED),
        ("already there: no patch", reading(limit=5, own=1, forecast=2), None, None),
    ],
)
def test_the_limit_goes_down_ahead_of_the_forecast_and_back_up_after(case, lending, to, reason):
    acts = limit_actions(lending)
    if to is None:
        assert acts == [], case
        return
    assert len(acts) == 1, case
    a = acts[0]
    assert (a.kind, a.desired_to, a.reason) == (ACTION_SET_LENDING_LIMIT, to, reason), case
    assert a.desired_from == (lending.nominal_gpus if lending.limit_gpus is None else lending.limit_gpus)
    assert a.detail


def test_an_unread_queue_changes_nothing_and_says_so():
    acts = limit_actions(None)
    assert [(a.kind, a.reason) for a in acts] == [(ACTION_HOLD, Reason.LEND_UNKNOWN)]
    assert "gpuloan-prod-research" in acts[0].detail


def test_off_by_default_and_for_a_pool_without_the_queue():
    plan = decide(settings(pool_settings()), with_lending(reading(limit=8, own=8, forecast=8)), NOW)
    assert not [a for a in plan.actions if a.kind == ACTION_SET_LENDING_LIMIT or a.reason == Reason.LEND_UNKNOWN]


def test_the_rule_reports_its_timer_at_the_next_slot_of_the_rhythm():
    now = NOW + timedelta(minutes=3, seconds=20)
    timers = Timers(now)
    po = PoolObservation("research", lending=reading(limit=8, forecast=0))
    lending_limit_actions(LENDER, po, now, timers)
    assert timers.earliest == NOW + timedelta(minutes=10) == next_slot_start(now)
    plan = decide(settings(LENDER), with_lending(reading(limit=8, forecast=0)), now)
    assert plan.next_decision_at is not None and plan.next_decision_at <= NOW + timedelta(minutes=10)


def test_the_forecast_is_the_rhythm_of_earlier_days_over_the_lookahead():
    midnight = datetime(2026, 3, 10, tzinfo=timezone.utc)
    h = DailyArrivals()
    for d in range(-MIN_DAYS, 0):
        day = midnight + timedelta(days=d)
        h.record(day + timedelta(hours=23, minutes=59), [(day + timedelta(hours=9, minutes=20), 6)])
    # from 08:30 a 60-minute lookahead reaches the 09:20 slot: 6 GPUs; from 07:00 it does not
    assert h.expected_gpus(midnight + timedelta(hours=8, minutes=30), 60) == pytest.approx(6)
    assert h.expected_gpus(midnight + timedelta(hours=7), 60) == 0
    assert DailyArrivals().expected_gpus(midnight, 60) is None


@hyp_settings(max_examples=200, deadline=None)
@given(
    nominal=st.integers(0, 64),
    configured=st.integers(0, 80),
    limit=st.one_of(st.none(), st.integers(0, 64)),
    own=st.one_of(st.none(), st.floats(0, 64)),
    pending=st.one_of(st.none(), st.integers(0, 5)),
    forecast=st.one_of(st.none(), st.floats(0, 200)),
)
def test_the_guarantee_is_never_touched(nominal, configured, limit, own, pending, forecast):
    """Whatever the reading: the only change is a lendingLimit within [0, configured] (never nominalQuota, never a
    node group), and unknown data asks for the configured limit, never less."""
    ps = dataclasses.replace(LENDER, lend_ahead_limit_gpus=configured)
    lending = Lending(nominal, limit, own, pending, forecast)
    plan = decide(settings(ps), with_lending(lending), NOW)
    for a in plan.changes:
        assert a.kind == ACTION_SET_LENDING_LIMIT and a.group is None
        assert 0 <= a.desired_to <= min(configured, nominal)
    wanted = wanted_limit_gpus(ps, lending)
    if None in (own, pending, forecast):
        assert wanted is None


# --- the tick reads the floor's queue and patches its lendingLimit, nothing else ------------------------------

QUEUE, FLAVOR = "gpuloan-prod-research", "research-floor"


def floor_queue(limit: int | None = 8, own: int = 0, pending: int = 0) -> dict:
    quota = {"name": "nvidia.com/gpu", "nominalQuota": 8, **({} if limit is None else {"lendingLimit": limit})}
    return {
        "metadata": {"name": QUEUE},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "research-spot", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]},
                        {"name": FLAVOR, "resources": [quota]},
                    ],
                }
            ]
        },
        "status": {
            "pendingWorkloads": pending,
            "flavorsUsage": [{"name": FLAVOR, "resources": [{"name": "nvidia.com/gpu", "total": own, "borrowed": 0}]}],
        },
    }


class FakeFloorQueues:
    def __init__(self, cq: dict | Exception):
        self.cq, self.writes = cq, []

    def cluster_queue(self, api, queue):
        if isinstance(self.cq, Exception):
            raise self.cq
        return self.cq

    def set_lending_limit(self, api, queue, flavor, gpus):
        self.writes.append((queue, flavor, gpus))


def rhythm_state(now: datetime, gpus: int) -> dict:
    """A daily history with `gpus` arriving 20 minutes after `now`'s time of day on each of MIN_DAYS earlier days."""
    h = DailyArrivals()
    for d in range(-MIN_DAYS, 0):
        h.record(now + timedelta(days=d, minutes=21), [(now + timedelta(days=d, minutes=20), gpus)])
    return {"rhythm": {"research": h.to_state()}}


def _tick(queues, state: dict | None = None, now: datetime = NOW):
    from policy.ports import Instance  # noqa: F401  (the adapters' fakes below build on it)
    from policy.memory_state import MemoryState
    from policy.tick import Ports, run_tick
    from test_policy_adapters import FakeGroups, FakeNodes, FakePods, FakePublisher, FakeUtil

    store = MemoryState()
    if state is not None:
        store.items["tick"] = (state, 1)
    ports = Ports(
        FakeGroups([group(), group("research-od")], []),
        FakeUtil({}),
        FakePods({"research": ()}),
        None,
        store,
        FakePublisher(),
        FakeNodes(),
        queues=queues,
    )
    return run_tick(settings(LENDER), ports, now, lambda _: None)


def test_the_tick_lowers_the_limit_ahead_of_the_owners_rhythm():
    queues = FakeFloorQueues(floor_queue(limit=8, own=2))
    result = _tick(queues, rhythm_state(NOW, 3))
    assert queues.writes == [(QUEUE, FLAVOR, 3)]  # 8 - (2 in use + 3 forecast)
    assert [(a.kind, a.reason) for a in result.applied] == [(ACTION_SET_LENDING_LIMIT, Reason.LEND_AHEAD)]


def test_the_forecast_is_a_high_quantile_of_the_earlier_days_not_their_mean():
    """Hand-derived: the owner brought 6 GPUs at this time of day on one of three earlier days and none on the
    others. Their mean (2) would lend 8 - (0 + 2) = 6 GPUs, which the owner takes back if today is like that one
    day; the rule keeps the FORECAST_QUANTILE of the days (nearest rank; of three days, the highest): lends 2."""
    h = DailyArrivals()
    for d, gpus in ((-3, 6), (-2, 0), (-1, 0)):
        day = NOW + timedelta(days=d)
        h.record(day + timedelta(minutes=21), [(day + timedelta(minutes=20), gpus)] if gpus else [])
    assert owner_forecast_gpus(h, NOW, 60) == 6
    assert owner_forecast_gpus(DailyArrivals(), NOW, 60) is None
    queues = FakeFloorQueues(floor_queue(limit=8, own=0))
    _tick(queues, {"rhythm": {"research": h.to_state()}})
    assert queues.writes == [(QUEUE, FLAVOR, 2)]


@pytest.mark.parametrize(
    "by_day, kept",
    [
        ([0, 0, 0, 0, 0, 0, 6], 0),  # one day in seven: an exception, not the rhythm (p80 of seven: the 2nd highest)
        ([0, 0, 0, 0, 0, 5, 6], 5),  # two days in seven: the rhythm
        ([4, 4, 4, 4, 4], 4),
    ],
)
def test_the_quantile_is_the_nearest_rank_of_the_recorded_days(by_day, kept):
    h = DailyArrivals()
    for d, gpus in enumerate(by_day):
        day = NOW + timedelta(days=d - len(by_day))
        h.record(day + timedelta(minutes=21), [(day + timedelta(minutes=20), gpus)] if gpus else [])
    assert owner_forecast_gpus(h, NOW, 60) == kept


def test_the_tick_keeps_the_configured_limit_without_a_rhythm_and_touches_nothing_unread():
    queues = FakeFloorQueues(floor_queue(limit=8, own=6))
    _tick(queues, {})
    assert queues.writes == []  # unknown rhythm: the configured limit, already there
    from policy.errors import DataUnavailable

    queues = FakeFloorQueues(DataUnavailable("ClusterQueue unreadable"))
    result = _tick(queues, rhythm_state(NOW, 3))
    assert queues.writes == [] and any("unreadable" in e for e in result.errors)


def test_the_tick_refuses_a_limit_outside_the_configured_range(monkeypatch):
    import policy.tick as tick
    from policy.model import Action, Plan, PoolDecision

    bad = Action("research", ACTION_SET_LENDING_LIMIT, Reason.LEND_RESTORED, desired_from=8, desired_to=9)
    monkeypatch.setattr(tick, "decide", lambda s, o, now: Plan((PoolDecision("research", (bad,)),), decided_at=now))
    queues = FakeFloorQueues(floor_queue())
    result = _tick(queues, {})
    assert queues.writes == [] and "refused" in result.failed[0][1]


def test_the_kube_client_reads_the_queue_and_patches_only_the_lending_limit():
    import base64

    from fake_kube import FakeKube
    from policy.io.kube import KubeClient, lending_of

    kube = FakeKube("c")
    try:
        kube.cluster_queues[QUEUE] = floor_queue(limit=None, own=3, pending=1)
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        client = KubeClient(
            kube.endpoint,
            kube.ca_pem,
            lambda: "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("="),
        )
        api = "kueue.x-k8s.io/v1beta2"
        assert lending_of(client.cluster_queue(api, QUEUE), FLAVOR, 2.5) == Lending(8, None, 3.0, 1, 2.5)
        client.set_lending_limit(api, QUEUE, FLAVOR, 2)
        client.set_lending_limit(api, QUEUE, FLAVOR, 5)  # present now: replaced
        assert lending_of(client.cluster_queue(api, QUEUE), FLAVOR, None) == Lending(8, 5, 3.0, 1, None)
    finally:
        kube.close()
    ops = [op for _, body in kube.patches for op in body if op["op"] != "test"]
    assert {op["path"].rsplit("/", 1)[1] for op in ops} == {"lendingLimit"}  # never nominalQuota
    quota = kube.cluster_queues[QUEUE]["spec"]["resourceGroups"][0]["flavors"][1]["resources"][0]
    assert quota["nominalQuota"] == 8


def test_a_queue_without_the_floor_flavor_is_unreadable_not_a_guess():
    from policy.errors import DataUnavailable
    from policy.io.kube import lending_of

    with pytest.raises(DataUnavailable, match="no nvidia.com/gpu quota for flavor other"):
        lending_of(floor_queue(), "other", 1.0)
    broken = floor_queue()
    broken["status"] = {}
    assert lending_of(broken, FLAVOR, 1.0) == Lending(8, 8, None, None, 1.0)
    for field, value in (("nominalQuota", None), ("nominalQuota", "8k"), ("lendingLimit", "two")):
        bad = floor_queue()
        quota = bad["spec"]["resourceGroups"][0]["flavors"][1]["resources"][0]
        quota.pop(field) if value is None else quota.update({field: value})
        with pytest.raises(DataUnavailable, match=field):
            lending_of(bad, FLAVOR, 1.0)
