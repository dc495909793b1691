"""scripts/diagnose_waits.py (issue 36 item 4): each job's pending time split by what it waited in, read from the
simulator's own transitions, on hand-derived scenarios of tests/sim/test_environment_kueue.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sim"))

from conftest import resolved_prices  # noqa: E402
from test_environment import CONTROLLERS, jobs  # noqa: E402
from test_environment_kueue import LEAST, _lender_and_borrower  # noqa: E402

from scripts.diagnose_waits import FIRST, WaitRecorder  # noqa: E402
from sim.environment import EnvJobsWorkload, simulate_environment  # noqa: E402


def _run(cfg, demands):
    rec = WaitRecorder()
    remove = rec.install()
    try:
        res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], LEAST, 1000)
    finally:
        remove()
    return res, rec


def test_a_job_pinned_to_a_fragmented_floor_waits_there_and_the_recorder_says_so():
    """The lender's 4-GPU job (minute 100) is admitted by quota to its floor, whose two nodes each hold a borrower's
    1-GPU pod (least allocated): its pod waits on the floor until borrower job 0 ends at minute 500 (the scenario of
    test_a_job_admitted_by_quota_to_a_fragmented_floor_waits_there_for_a_node). The borrowers wait 0."""
    cfg = _lender_and_borrower("experiment")
    demands = {"lender": jobs("lender", [(100, 100, 4)]), "borrower": jobs("borrower", [(0, 500, 1), (10, 500, 1)])}
    res, rec = _run(cfg, demands)
    lender, borrower = res.sims["lender"].workload, res.sims["borrower"].workload
    assert rec.segments(lender, 0, 1000) == [(FIRST, "own floor", 400.0)]
    assert rec.segments(borrower, 0, 1000) == rec.segments(borrower, 1, 1000) == []
    assert sum(m for *_, m in rec.segments(lender, 0, 1000)) == lender.pending_minutes(1000)[0]


def test_a_borrower_reclaimed_by_quota_re_waits_for_kueue_then_spot_and_one_preempted_by_the_scheduler_not_at_all():
    """The scenario of test_kueue_reclaims_by_quota_and_kube_scheduler_preempts_on_the_fragmented_floor: at minute
    100 Kueue evicts borrowers j3 and j2 (reclaim) and admits them to the borrower's spot flavor, where they wait
    for a spot node; kube-scheduler preempts j1, whose new pod fits the floor at once (no re-wait), and the lender's
    pod runs a minute later, once j1's pod has had its graceful termination. Each job's segments add up to its
    pending minutes."""
    cfg = _lender_and_borrower("production")
    demands = {
        "lender": jobs("lender", [(100, 100, 4)]),
        "borrower": jobs("borrower", [(0, 500, 2), (15, 500, 2), (20, 500, 2), (30, 500, 2)]),
    }
    res, rec = _run(cfg, demands)
    b = res.sims["borrower"].workload
    pending = b.pending_minutes(1000)
    for k in (2, 3):
        segs = rec.segments(b, k, 1000)
        assert [(phase, state) for phase, state, _ in segs] == [("reclaim", "elastic spot")]
        assert segs[0][2] == pending[k] > 0
    assert rec.segments(b, 1, 1000) == [] and pending[1] == 0
    assert b.scheduler_preemptions == 1
    # the lender's production pod preempted j1 at minute 100 and runs once j1's pod is gone, at 101
    assert rec.segments(res.sims["lender"].workload, 0, 1000) == [(FIRST, "own floor", 1.0)]


def test_the_recorder_leaves_the_simulator_as_it_found_it():
    methods = {n: getattr(EnvJobsWorkload, n) for n in ("_admit", "_release", "_start", "_stop")}
    remove = WaitRecorder().install()
    assert any(getattr(EnvJobsWorkload, n) is not f for n, f in methods.items())
    remove()
    assert all(getattr(EnvJobsWorkload, n) is f for n, f in methods.items())
