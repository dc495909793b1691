"""Issue 38 item 3: the environment simulator orders borrowers as Kueue v0.19.2's fair sharing does.

Each scenario is small enough to derive by hand from the Kueue code; the derivation is the test's docstring."""

from __future__ import annotations

import pytest
from test_environment import CALM, CONTROLLERS, GUARANTEED, env_config, first_placement, jobs, pool

from sim.environment import simulate_environment
from conftest import resolved_prices


def _lender_and_two_borrowers(**kueue):
    """A lender (experiment, a 4-node floor of 1-GPU g6.xlarge, no work of its own) listed first, then borrowers
    a (pool ann) and b (pool bob) (no floor, spot): both queues list the lender's floor flavor first, then their own spot flavor."""
    return env_config([pool("lender", floor=4), pool("ann", floor=0), pool("bob", floor=0)], **kueue)


def _on_the_floor(res, name: str, n: int) -> int:
    return sum(first_placement(res, name, j) == ("lender", GUARANTEED) for j in range(n))


# (kueue settings, jobs of a on the lender's floor, jobs of b on it)
CASES = {
    "equal weights": ({}, 2, 2),
    "ann weighs 3": ({"teams": {"team-ann": {"fair_share_weight": 3}}}, 3, 1),
    "fair sharing off": ({"fair_sharing": False}, 4, 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_idle_floor_goes_to_the_borrower_of_lowest_weighted_share(case):
    """a and b each submit four 1-GPU jobs at minute 0; the lender's floor has 4 GPUs of quota, idle. Neither
    queue has nominal quota on it, so no job fits under nominal quota: all wait for the borrowing round.

    With fair sharing (Kueue v0.19.2 pkg/scheduler/fair_sharing_iterator.go: `pop` runs a tournament among the
    queues' heads after every admission; `entryComparer.less`): both heads borrow (FairSharingPrioritizeNonBorrowing
    does not split them); the lower dominant resource share with the head admitted wins
    (pkg/cache/scheduler/fair_sharing.go `dominantResourceShare`: borrowed quota x 1000 / the cohort's lendable
    quota, 4, the same for both; / weight, `PreciseWeightedShare`); then priority (equal), then creation time
    (equal), then the iteration order, a before b.
    - equal weights: (a 1, b 1) tie -> a; (a 2, b 1) -> b; (a 2, b 2) tie -> a; (a 3, b 2) -> b: 2 and 2.
    - a weighs 3: (a 1/3, b 1) -> a; (a 2/3, b 1) -> a; (a 1, b 1) tie -> a; (a 4/3, b 1) -> b: 3 and 1 (a tie
      broken the other way gives b its one job a turn earlier: the same counts).
    Then the floor is full and each queue's next flavor, its own spot, takes the rest.
    Fair sharing off (classical: the heads in order of priority and creation time, all equal, so the pools'
    order; a's whole queue goes first and takes the floor): 4 and 0."""
    kueue, on_a, on_b = CASES[case]
    cfg = _lender_and_two_borrowers(**kueue)
    rows = [(0, 300, 1)] * 4
    demands = {"lender": jobs("lender", []), "ann": jobs("ann", rows), "bob": jobs("bob", rows)}
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], CALM, 400)
    assert (_on_the_floor(res, "ann", 4), _on_the_floor(res, "bob", 4)) == (on_a, on_b)
    assert res.pools["lender"]["floor_lent_gpu_hours"] == 4 * 5.0  # the floor is full either way


def test_the_owner_reclaims_from_the_borrower_of_highest_share_first():
    """Borrowers zed (weight 1) then bob (weight 0.5), four 1-GPU jobs each at minute 0, the lender's 4-GPU floor
    idle. Tournament (as above): (zed 1, bob 1/0.5 = 2) -> zed; (zed 2, bob 2) tie -> zed; (zed 3, bob 2) -> bob;
    the floor is full: zed holds 3 (share 3), bob 1 (share 1/0.5 = 2).
    At minute 60 the lender's own 1-GPU job: within its nominal quota (0 + 1 <= 4), so it preempts whatever it
    needs (pkg/scheduler/preemption/preemption.go `runFirstFsStrategy`, FairSharingPreemptWithinNominal on by
    default), taking the victims' queues in order of share (fairsharing/ordering.go `nextTarget`: the highest
    share first): zed's. The classical order (common/ordering.go `CandidatesOrdering`: other queues, lowest
    priority, most recently admitted, all equal here, then the workload key) would take bob's first."""
    cfg = env_config(
        [pool("lender", floor=4), pool("zed", floor=0), pool("bob", floor=0)],
        teams={"team-bob": {"fair_share_weight": 0.5}},
    )
    rows = [(0, 300, 1)] * 4
    demands = {"lender": jobs("lender", [(60, 100, 1)]), "zed": jobs("zed", rows), "bob": jobs("bob", rows)}
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], CALM, 500)
    assert (_on_the_floor(res, "zed", 4), _on_the_floor(res, "bob", 4)) == (3, 1)
    assert (res.pools["zed"]["reclaim_preemptions"], res.pools["bob"]["reclaim_preemptions"]) == (1, 0)


def _fair_preemption_run(ann_rows, bob_rows, horizon=500, **kueue):
    cfg = _lender_and_two_borrowers(**kueue)
    demands = {"lender": jobs("lender", []), "ann": jobs("ann", ann_rows), "bob": jobs("bob", bob_rows)}
    return simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], CALM, horizon)


BOTH_RULES = ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]  # Kueue's default when the list is empty


@pytest.mark.parametrize("strategies", [None, BOTH_RULES], ids=["shipped", "both rules"])
def test_a_borrower_preempts_the_borrower_of_higher_share_down_to_equal_shares(strategies):
    """Shipped settings: fair sharing on, reclaimWithinCohort Any, borrowWithinCohort Never, flavorFungibility
    whenCanPreempt MayStopSearch, strategies [LessThanOrEqualToFinalShare] (every victim below passes it, so
    adding LessThanInitialShare changes nothing here). The lender's
    4-GPU floor (lendingLimit unset: the cohort lends 4 GPUs of it, `calculateLendable`), equal weights.
    Minute 0: ann's four 1-GPU jobs; bob has none: ann borrows all 4 (share 4 x 1000 / 4 = 1000).
    Minute 10: bob's two 1-GPU jobs. bob's first: the floor has 0 unused, but bob's usage with the job (1) is
    within what it could ever get (potentialAvailable: 4), and with fair sharing and reclaimWithinCohort != Never
    a borrower may preempt (flavorassigner.go:1371, :1382 `canPreemptWhileBorrowing`; borrowWithinCohort Never is
    not read). Candidates (preemption.go:631 `findCandidates`): ann's 4 workloads (ann borrows the flavor; Any
    priority). Preemptor share with the job 1 x 1000 / 4 = 250; ann's queue (share 1000) without one of its jobs
    750 >= 250: LessThanOrEqualToFinalShare passes (strategy.go:41), one victim, bob fits. The mode is Reclaim,
    so MayStopSearch stops at the floor: bob does not go to its spot flavor. bob's second: 500 <= ann without one
    (3 -> 2) 500: passes again. ann 2, bob 2. ann's two evicted jobs come back: ann's share with one is
    3 x 250 = 750, bob's 500 is not above it (neither 750 <= 250 nor 750 < 500): no victims
    (noPreemptionCandidates), the next flavor, ann's own spot, takes them.
    On main (no borrower-on-borrower preemption) bob's jobs went to spot and ann lost nothing."""
    kueue = {} if strategies is None else {"fair_sharing_preemption_strategies": strategies}
    res = _fair_preemption_run([(0, 300, 1)] * 4, [(10, 300, 1)] * 2, **kueue)
    assert _on_the_floor(res, "bob", 2) == 2
    assert res.pools["ann"]["reclaim_preemptions"] == 2
    assert res.sims["ann"].workload.fair_share_preemptions == 2
    assert res.pools["bob"]["reclaim_preemptions"] == 0
    # the floor stays full: ann's 4 until minute 10, then 2 of ann's and bob's 2 (ann's end at 300, bob's at 310);
    # ann's evicted jobs never come back to it
    assert res.pools["lender"]["floor_lent_gpu_hours"] == round((4 * 300 + 2 * 10) / 60, 3)


def test_the_second_strategy_evicts_a_larger_workload_when_the_first_cannot():
    """Strategies [LessThanOrEqualToFinalShare, LessThanInitialShare] (not the default). ann holds one 4-GPU job on the lender's 4-GPU floor (share 1000); at minute 10 bob's 1-GPU job. Preemptor
    share 250; ann's share without its only workload would be 0, and 250 <= 0 fails LessThanOrEqualToFinalShare
    (S2-a): the candidate is kept for the second strategy. LessThanInitialShare (S2-b, preemption.go:499
    `runSecondFsStrategy`, strategy.go:46): 250 < 1000 (ann's share now) passes: ann's 4-GPU workload is evicted
    for bob's 1 GPU (Kueue evicts whole workloads). Then ann's job (4 GPUs, 3 unused): ann's share with it 1000,
    bob's 250 is not above it: no victims; ann's spot flavor (4 nodes of 1 GPU) takes it."""
    res = _fair_preemption_run([(0, 300, 4)], [(10, 300, 1)], fair_sharing_preemption_strategies=BOTH_RULES)
    assert _on_the_floor(res, "bob", 1) == 1
    assert res.pools["ann"]["reclaim_preemptions"] == 1
    assert res.sims["ann"].workload.fair_share_preemptions == 1


@pytest.mark.parametrize("strategies", [None, ["LessThanInitialShare"]], ids=["shipped", "second rule alone"])
def test_with_the_first_rule_alone_a_borrower_never_evicts_a_larger_workload_to_end_above_its_queue(strategies):
    """The case above with the shipped strategies, [LessThanOrEqualToFinalShare] alone. Kueue v0.19.2
    pkg/scheduler/preemption/preemption.go:363-366 `parseStrategies` takes the configured list (the default pair
    only when it is empty); :557-565 `fairPreemptions` runs the second strategy only when the list has two, so
    `runSecondFsStrategy` (:499) never runs. ann holds one 4-GPU job on the lender's 4-GPU floor (share 1000); at
    minute 10 bob's 1-GPU job: the floor has 0 unused, bob may preempt while borrowing (flavorassigner.go:1382
    `canPreemptWhileBorrowing`); `runFirstFsStrategy` (:382): ann's queue (share 1000 > 250, so not skipped as
    unsatisfiable), its one candidate: preemptor share with the job 250 <= ann's share without it 0 fails
    (fairsharing/strategy.go:41), so `fits` is false and no target is returned: the oracle says NoCandidates
    (preemption_oracle.go:62-64), `shouldTryNextFlavor` is true for noPreemptionCandidates (flavorassigner.go:1263)
    and bob's next flavor, its own spot, fits: bob runs on spot, ann keeps its 4-GPU job until it ends.
    With [LessThanInitialShare] alone the first pass uses that rule (`parseStrategies`): 250 < 1000 passes, ann's
    job is evicted as with both rules. On main the simulator always ran both rules: bob evicted ann's job."""
    kueue = {} if strategies is None else {"fair_sharing_preemption_strategies": strategies}
    res = _fair_preemption_run([(0, 300, 4)], [(10, 300, 1)], **kueue)
    evicted = strategies is not None
    assert _on_the_floor(res, "bob", 1) == int(evicted)
    assert res.pools["ann"]["reclaim_preemptions"] == int(evicted)
    assert res.sims["ann"].workload.fair_share_preemptions == int(evicted)
    if not evicted:
        assert first_placement(res, "ann", 0) == ("lender", GUARANTEED)
        # the lender's floor stays lent to ann's one job for its whole 300 minutes
        assert res.pools["lender"]["floor_lent_gpu_hours"] == round(4 * 300 / 60, 3)


def test_a_floors_cached_borrower_shares_follow_a_release_before_the_next_question():
    """sim/kueue.py `holds_more_than` keeps each floor's two highest borrower shares between admissions (issue 41:
    a tournament asks it for every head and every floor). The scenario above stopped at minute 100: ann and bob
    hold 2 GPUs each of the lender's 4 (shares 2 x 1000 / 4 = 500 each). Asked for bob's preemptor at share 250:
    ann's 500 is above it. One of ann's workloads leaves the floor (Kueue releases its quota): ann's share is 250,
    not above 250, so the same question must now be answered no; a cached answer not invalidated by the release
    would still say yes. The early exit of `fair_borrow_targets` reads this answer, so a stale one changes which
    borrower Kueue preempts."""
    from sim import kueue

    res = _fair_preemption_run([(0, 300, 1)] * 4, [(10, 300, 1)] * 2, horizon=100)
    lender, ann, bob = (res.sims[n] for n in ("lender", "ann", "bob"))
    assert (ann.workload.borrowed_quota(), bob.workload.borrowed_quota()) == (2, 2)
    assert kueue.holds_more_than(lender, bob.workload, 250.0)
    assert not kueue.holds_more_than(lender, ann.workload, 500.0)  # bob's 500 is not above 500
    on_floor = [j for j, f in enumerate(ann.workload.admitted_to) if f is lender]
    ann.workload._release(on_floor[0])
    assert ann.workload.borrowed_quota() == 1
    assert not kueue.holds_more_than(lender, bob.workload, 250.0)
    assert kueue.holds_more_than(lender, ann.workload, 250.0)  # bob's 500 is above ann's 250


def test_a_floors_kept_room_follows_a_pod_leaving_it():
    """PoolSim.floor_room keeps (ready nodes, most free GPUs on one, empty ones, most free on any) until a pod binds
    to or leaves the floor (issue 41: kube-scheduler's passes ask it for every pod pinned to the floor instead of
    going through the nodes). The scenario above at minute 100: the lender's 4 one-GPU nodes all busy (ann 2, bob
    2). A pod leaving one node frees it: the answer must say one empty node with 1 free GPU, as the nodes do."""
    res = _fair_preemption_run([(0, 300, 1)] * 4, [(10, 300, 1)] * 2, horizon=100)
    lender = res.sims["lender"]
    now = lender.now

    def counted():
        ready = [n for n in lender.floor_nodes if n.ready_at <= now]
        free = [n.gpus - n.busy for n in ready]
        return (len(ready), max(free, default=-1), free.count(max(n.gpus for n in ready)), max(free, default=-1))

    assert lender.floor_room(now) == counted() == (4, 0, 0, 0)
    lender.set_busy(lender.floor_nodes[1], 0)
    assert lender.floor_room(now) == counted() == (4, 1, 1, 1)
