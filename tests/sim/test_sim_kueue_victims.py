"""Kueue's victim search on its own (sim/kueue.py), without an environment: the candidates' order and the one
classic search (take in order until the preemptor fits, then give back in reverse where it still fits) that a
job's reclaim and a demand series' reclaim both run. The environment's runs of them are in
tests/sim/test_environment*.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sim import kueue


class _Queue:
    """A pool's workload as Kueue's functions read it: its jobs' GPUs, priorities and admission minutes."""

    def __init__(self, pool: str, jobs: list[tuple[int, int, int]]):  # (gpus, priority, admitted at minute)
        self.sim = SimpleNamespace(spec=SimpleNamespace(name=pool))
        self.gpus = [g for g, _, _ in jobs]
        self.priority = [p for _, p, _ in jobs]
        self.admitted_at = [a for _, _, a in jobs]

    def job_priority(self, j: int) -> int:
        return self.priority[j]


def test_candidates_are_other_queues_first_then_lowest_priority_then_most_recently_admitted():
    owner = _Queue("owner", [(2, 10, 0), (2, 0, 5)])
    borrower = _Queue("borrower", [(1, 5, 1), (1, 0, 2), (1, 0, 9)])
    cands = [
        kueue.candidate(owner, 1, kueue.WITHIN),
        kueue.candidate(borrower, 0, kueue.RECLAIM),
        kueue.candidate(borrower, 1, kueue.RECLAIM),
        kueue.candidate(borrower, 2, kueue.RECLAIM),
    ]
    ordered = kueue.candidates_in_order(cands, fair_sharing=False)
    assert [(c[1].sim.spec.name, c[2], c[3], c[4]) for c in ordered] == [
        ("borrower", 2, "reclaim", True),  # priority 0, admitted at minute 9
        ("borrower", 1, "reclaim", True),  # priority 0, admitted at minute 2
        ("borrower", 0, "reclaim", True),  # priority 5
        ("owner", 1, "within", False),  # its own queue's workload comes after every other queue's
    ]


def _fits_job(nominal: int, gpus: int):
    """A job of `gpus` on a floor of `nominal` GPUs (sim/kueue.py reclaim_targets' test)."""
    return lambda own, lent: own + gpus <= nominal and gpus <= nominal - own - lent


CASES = {
    # name: (candidates' GPUs (borrowed?), own, lent, fits, victims' positions)
    "one borrower is enough": ([(4, True), (2, True)], 2, 6, _fits_job(8, 4), [0]),
    # the first candidate is taken, then the second; the first is given back (fillBackWorkloads): 4 fits without it
    "taken in order, then given back in reverse": ([(2, True), (4, True)], 2, 6, _fits_job(8, 4), [1]),
    "not enough: nobody is evicted": ([(1, True), (1, True)], 2, 6, _fits_job(8, 6), []),
    # an own-queue (withinClusterQueue) candidate frees the owner's own quota
    "own lower-priority work frees own quota": ([(4, False)], 8, 0, _fits_job(8, 4), [0]),
    # a demand series that rose to 6 of its 8-GPU floor, 6 GPUs lent: the lent quota must come down to 2
    "a series takes its floor back": (
        [(2, True), (2, True), (2, True)],
        6,
        6,
        lambda own, lent: own + lent <= 8,
        [0, 1],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_the_classic_victim_search(name):
    sizes, own, lent, fits, expected = CASES[name]
    borrower = _Queue("borrower", [(g, 0, k) for k, (g, _) in enumerate(sizes)])
    cands = [((k,), borrower, k, "reclaim" if b else "within", b) for k, (_, b) in enumerate(sizes)]
    victims = kueue.classic_victims(cands, own, lent, fits)
    assert [c[2] for c in victims] == expected
