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
