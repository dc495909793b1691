"""Issue 36: the environment simulator does what the shipped Kueue objects and kube-scheduler do.

Each scenario is small enough to derive its outcome by hand from the code of Kueue v0.19.2 and kube-scheduler; the
derivation is the test's docstring, with the functions it follows. The shipped objects have no Topology Aware
Scheduling (docs/scheduling.md, "In the simulator": a TAS floor flavor in a queue that also lists elastic flavors
would refuse every job without a TAS request), so Kueue admits by quota alone.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from test_environment import CALM, CONTROLLERS, GUARANTEED, env_config, first_placement, jobs, pool

from sim.environment import simulate_environment
from conftest import resolved_prices

BIG = "g6.12xlarge"  # 4 GPUs per node
LEAST = replace(CALM, placement="least_allocated")  # checkpoints every 30 minutes (SimSettings' default)


def _lender_and_borrower(lender_tier: str):
    lender = pool(
        "lender",
        tier=lender_tier,
        floor=2,
        instance_type=BIG,
        capacity="on_demand" if lender_tier == "production" else "spot",
    )
    borrower = pool("borrower", floor=0, instance_type=BIG)
    return env_config([lender, borrower])


def test_a_job_admitted_by_quota_to_a_fragmented_floor_waits_there_for_a_node():
    """Lender (experiment) floor: 2 nodes x 4 GPUs, nominal 8. Borrower (experiment, no floor) jobs 0 and 1 (1 GPU,
    minutes 0 and 10) borrow it: Kueue's flavor assigner takes the first flavor of the borrower's queue where the
    quota fits (pkg/scheduler/flavorassigner/flavorassigner.go `findFlavorForPodSets`, `fitsResourceQuota`), the
    lender's floor; kube-scheduler spreads them (least allocated), one per node. At minute 100 the lender's 4-GPU
    job: its queue's nominal quota 8, its usage 0, the cohort's use of the flavor 2: 6 >= 4 fits without
    preemption, so Kueue admits it to the floor flavor and takes no victim (`fitsResourceQuota` returns Fit; no
    call to the preemptor). Its pod gets the floor's node selector; each node has 3 GPUs free; kube-scheduler can
    only preempt pods of lower priority (`SelectVictimsOnNode`) and the borrower's are of the same tier. The pod
    waits on the floor (it is never moved to elastic nodes, and the policy does not buy any for a floor-pinned
    pod) until borrower job 0 ends at minute 500 and frees node 1."""
    cfg = _lender_and_borrower("experiment")
    demands = {"lender": jobs("lender", [(100, 100, 4)]), "borrower": jobs("borrower", [(0, 500, 1), (10, 500, 1)])}
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], LEAST, 1000)
    assert [first_placement(res, "borrower", k) for k in (0, 1)] == [("lender", GUARANTEED)] * 2
    assert res.sims["lender"].workload.first_start == [500]
    assert first_placement(res, "lender", 0) == ("lender", GUARANTEED)
    lender, borrower = res.pools["lender"], res.pools["borrower"]
    assert borrower["reclaim_preemptions"] == 0 and borrower["scheduler_preemptions"] == 0
    assert lender["elastic_spot_cost_usd"] == 0 and lender["node_launches"] == 0


def test_kueue_reclaims_by_quota_and_kube_scheduler_preempts_on_the_fragmented_floor():
    """Lender (production, on-demand elastic) floor: 2 nodes x 4 GPUs, nominal 8, lent to the borrower
    (experiment, no floor). Borrower jobs of 2 GPUs at minutes 0, 15, 20, 30 (j0..j3); least allocated placement
    puts j0 on node 1, j1 on node 2, j2 on node 1 (a tie: the older node), j3 on node 2. The floor's quota is all
    borrowed (8).

    Minute 100, the lender's 4-GPU production job. Kueue (pkg/scheduler/preemption/preemption.go): its usage 0 + 4
    is within its nominal 8, so `findCandidates` takes reclaim candidates from the borrower's queue, which borrows
    the flavor (`cqIsBorrowing`); `CandidatesOrdering` (common/ordering.go): other queues first, lower priority
    first, then the most recently admitted first: j3 (30), j2 (20), j1 (15), j0 (0). `classicalPreemptions` removes
    them in that order until `workloadFits` (quota only: no TAS flavor): without j3 2 free, without j2 4 >= 4:
    targets {j3, j2}; `fillBackWorkloads` tries to give j3 back: 2 < 4, kept. Both are evicted (they lose the work
    since their checkpoint: j3 ran 70 minutes, 60 saved, 10 x 2 GPUs lost; j2 ran 80, 60 saved, 20 x 2 lost: 60
    GPU-minutes, 1.0 GPU-hour) and requeue; the floor's quota left (8 - 4 own - 4 lent) is 0, so they are
    admitted to the borrower's spot flavor.

    The freed GPUs are 2 on node 1 and 2 on node 2: no node has 4. The production pod (priority 1000) pinned to
    the floor preempts on kube-scheduler's terms (defaultpreemption `SelectVictimsOnNode`: remove lower-priority
    pods, reprieve the most important while the pod fits; here the one 2-GPU pod on each node must go;
    preemption.go `pickOneNodeForPreemption`: equal highest priority, sum and count, then the node whose
    highest-priority victims started latest): node 2, whose victim j1 started at 15 (node 1's j0 at 0). j1 ran 85
    minutes, 60 saved, 25 x 2 = 50 GPU-minutes lost. The production pod is nominated to node 2 at minute 100 (its
    room held) and binds once j1's pod has had its graceful termination (Kubernetes' default 30 s; kubernetes.io
    "Pod Priority and Preemption"): it runs from minute 101, one minute pending. j1 is still
    admitted to the floor (kube-scheduler's preemption does not evict the Kueue workload): its new pod is pinned
    to the floor and fits node 1's 2 free GPUs, so it starts again at once."""
    cfg = _lender_and_borrower("production")
    demands = {
        "lender": jobs("lender", [(100, 100, 4)]),
        "borrower": jobs("borrower", [(0, 500, 2), (15, 500, 2), (20, 500, 2), (30, 500, 2)]),
    }
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], LEAST, 1000)
    b = res.sims["borrower"]
    assert [first_placement(res, "borrower", k) for k in range(4)] == [("lender", GUARANTEED)] * 4
    assert res.sims["lender"].workload.first_start == [101]
    assert res.sims["lender"].workload.pending_minutes(1000) == [1.0]
    lender, borrower = res.pools["lender"], res.pools["borrower"]
    assert borrower["reclaim_preemptions"] == 2
    assert borrower["reclaim_lost_gpu_hours"] == 1.0
    assert borrower["scheduler_preemptions"] == 1
    assert borrower["scheduler_lost_gpu_hours"] == round(50 / 60, 3)
    assert res.environment["scheduler_preemptions"] == 1
    assert res.environment["production_interruptions"] == 0
    assert b.workload.first_start == [0, 15, 20, 30]
    # on the floor: j0 0-500, j1 15-100 and again from 100 (440 minutes left), j2 20-100, j3 30-100, 2 GPUs each
    assert lender["floor_lent_gpu_hours"] == round(2 * (500 + 85 + 440 + 80 + 70) / 60, 3)


def test_skipping_quiet_minutes_gives_the_tick_by_tick_result_with_classes_and_preemptions():
    """The admission/placement model under the quiet-minute skip: production shares everywhere (a production pool
    with interruptible work, experiment pools with production queues), 4-GPU nodes and jobs of 1-4 GPUs, so that
    Kueue evictions and kube-scheduler preemptions happen; skipping changes nothing."""
    import random

    from test_environment import STORMY, random_jobs

    pools = [
        pool("alpha", tier="production", capacity="on_demand", floor=2, instance_type=BIG, share=40),
        pool("beta", floor=2, instance_type=BIG, share=30, capacity="spot_then_on_demand"),
        pool("gamma", tier="learning", floor=0, instance_type=BIG),
    ]
    cfg = env_config(pools)
    r = random.Random(7)
    demands = {
        p["name"]: random_jobs(p["name"], seed=70 + k, n=r.randint(60, 90), max_gpus=4) for k, p in enumerate(pools)
    }
    fast = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], STORMY, 2 * 1440)
    slow = simulate_environment(
        resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], replace(STORMY, skip_quiet_ticks=False), 2 * 1440
    )
    env = fast.environment
    # every mechanism happens, and none of them (nor a spot reclaim: production stays off spot) hits production
    assert env["reclaim_preemptions"] > 0 and env["priority_preemptions"] > 0 and env["scheduler_preemptions"] > 0
    assert env["production_interruptions"] == slow.environment["production_interruptions"] == 0
    for name in demands:
        assert fast.sims[name].c == slow.sims[name].c, name
        for key in (
            "reclaim_preemptions",
            "priority_preemptions",
            "scheduler_preemptions",
            "floor_lent_gpu_hours",
            "borrowed_gpu_hours",
            "p95_wait_minutes",
        ):
            assert fast.pools[name].get(key) == slow.pools[name].get(key), (name, key)


def test_a_series_pools_idle_floor_is_lent_to_a_jobs_pool_and_reclaimed_when_the_series_rises():
    """The generated Kueue objects lend a floor whatever the format its owner's demand is given in (issue 36):
    before, a pool whose demand is a `minute,gpus_demanded` series never lent its floor in the simulator.

    Lender (production, on-demand elastic, demand a series): floor 2 nodes x 4 GPUs, nominal 8; its series asks 0
    GPUs until minute 100, then 6. Borrower (experiment, no floor) jobs of 2 GPUs at minutes 0, 15, 20, 30 (j0..j3)
    borrow the whole idle floor (least allocated: j0 and j2 on node 1, j1 and j3 on node 2). Minute 100: the
    series' 6 GPUs are its queue's workloads within the nominal 8, the cohort uses 8 of the flavor: Kueue reclaims
    (reclaimWithinCohort: Any), candidates most recently admitted first (common/ordering.go): j3, j2, j1 free 6 >= 6,
    so j0 stays (fillBackWorkloads gives none back: 4 < 6). j3 ran 70 minutes (60 saved: 20 GPU-minutes lost), j2
    80 (40 lost), j1 85 (50 lost): 110 GPU-minutes. They are admitted to the borrower's spot flavor (the floor's
    quota has 8 - 6 - 2 = 0 left); the series fills the 6 GPUs j0 leaves (2 on node 1, 4 on node 2) and needs no
    elastic node. Lent: j0 0-500, j1 15-100, j2 20-100, j3 30-100, 2 GPUs each."""
    from test_environment_scale import _result_json

    from sim.traces import SeriesTrace

    cfg = _lender_and_borrower("production")
    demands = {
        "lender": SeriesTrace("lender", (0,) * 100 + (6,) * 900),
        "borrower": jobs("borrower", [(0, 500, 2), (15, 500, 2), (20, 500, 2), (30, 500, 2)]),
    }
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], LEAST, 1000)
    assert [first_placement(res, "borrower", k) for k in range(4)] == [("lender", GUARANTEED)] * 4
    lender, borrower = res.pools["lender"], res.pools["borrower"]
    assert borrower["reclaim_preemptions"] == 3
    assert borrower["reclaim_lost_gpu_hours"] == round(110 / 60, 3)
    assert borrower["borrowed_gpu_hours"] == round(2 * (500 + 85 + 80 + 70) / 60, 3)
    assert lender["floor_lent_gpu_hours"] == round(2 * (500 + 85 + 80 + 70) / 60, 3)
    assert lender["node_launches"] == 0 and lender["unmet_gpu_hours"] == 0
    assert res.environment["production_interruptions"] == 0
    # skipping quiet minutes gives the minute-by-minute result with a series lender too
    every = simulate_environment(
        resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], replace(LEAST, skip_quiet_ticks=False), 1000
    )
    assert _result_json(every) == _result_json(res)


@pytest.mark.parametrize("controller", sorted(CONTROLLERS))
def test_a_series_lender_skipping_quiet_minutes_gives_the_minute_by_minute_result(controller):
    """A series floor lent to two jobs pools over two days, its level moving every few hours: reclaims, lending
    and the borrowers' own spot capacity give the same result whether quiet minutes are skipped or not."""
    import random

    from test_environment import random_jobs
    from test_environment_scale import _result_json

    from sim.traces import SeriesTrace

    draw = random.Random(5)
    levels = [draw.choice([0, 0, 1, 3, 5, 8]) for _ in range(0, 2 * 1440, 170)]
    cfg = env_config(
        [
            pool("lender", tier="production", floor=2, instance_type=BIG, capacity="on_demand"),
            pool("exp", floor=0, instance_type=BIG),
            pool("learn", tier="learning", floor=0, instance_type=BIG),
        ]
    )
    demands = {
        "lender": SeriesTrace("lender", tuple(levels[m // 170] for m in range(2 * 1440))),
        "exp": random_jobs("exp", 1, n=60, max_gpus=4),
        "learn": random_jobs("learn", 2, n=60, max_gpus=2),
    }
    fast = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS[controller], LEAST, 2 * 1440)
    every = simulate_environment(
        resolved_prices(), cfg, demands, CONTROLLERS[controller], replace(LEAST, skip_quiet_ticks=False), 2 * 1440
    )
    assert _result_json(fast) == _result_json(every)
    assert fast.pools["lender"]["floor_lent_gpu_hours"] > 0
    assert fast.pools["exp"]["reclaim_preemptions"] + fast.pools["learn"]["reclaim_preemptions"] > 0


def test_a_series_lender_with_lend_ahead_on_reads_its_queue_as_kueue_publishes_it():
    """The lend-ahead rule reads the floor's ClusterQueue (status.pendingWorkloads) through the simulated Kueue: a
    series owner has no job heaps, its unmet GPUs are its pending work. Before, the port summed job heaps and a
    series lender with `lend_ahead` on crashed the run."""
    from sim.traces import SeriesTrace

    pools = [
        pool("lender", tier="production", floor=2, instance_type=BIG, capacity="on_demand"),
        pool("exp", floor=0, instance_type=BIG),
    ]
    cfg = env_config(pools, lend_ahead=True, reclaim_lookahead_minutes=60)
    demands = {
        "lender": SeriesTrace("lender", tuple(0 if (m // 120) % 2 else 8 for m in range(2 * 1440))),
        "exp": jobs("exp", [(m, 90, 4) for m in range(0, 2 * 1440, 45)]),
    }
    res = simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["gpuloan"], LEAST, 2 * 1440)
    assert res.pools["lender"]["floor_lent_gpu_hours"] > 0
    assert res.environment["production_interruptions"] == 0


def _room_freed_during_kube_schedulers_pass(skip: bool, borrower_tier: str = "experiment"):
    """Lender (production) floor of 7 nodes x 4 GPUs; pools in config order lender, learner (learning tier),
    borrower (experiment, or `borrower_tier`). See the tests below."""
    cfg = env_config(
        [
            pool("lender", tier="production", floor=7, instance_type=BIG, capacity="on_demand"),
            pool("learner", tier="learning", floor=0, instance_type=BIG),
            pool("borrower", tier=borrower_tier, floor=0, instance_type=BIG),
        ]
    )
    demands = {
        "lender": jobs("lender", [(0, 1000, 2)] * 5 + [(20, 1000, 3)]),
        "learner": jobs("learner", [(10, 1000, 3)]),
        "borrower": jobs("borrower", [(1, 1000, 8), (15, 1000, 3)]),
    }
    settings = replace(LEAST, skip_quiet_ticks=skip)
    return simulate_environment(resolved_prices(), cfg, demands, CONTROLLERS["karpenter"], settings, 200)


def test_kube_scheduler_binds_the_higher_priority_pod_first_whatever_its_pool():
    """kube-scheduler takes pending pods from one queue ordered by priority (PrioritySort), whatever their
    namespace. The lender's five 2-GPU pods (minute 0) spread over nodes 1-5 (least allocated), the borrower's
    8-GPU gang (minute 1) takes nodes 6 and 7: every node is full or has 2 GPUs free. The learner's 3-GPU job
    (minute 10) and the borrower's 3-GPU job (minute 15) fit the floor's quota (10 + 8 + 3 + 3 = 24 of 28: Kueue
    admits them there) but no node: their pods wait pinned to the floor. Minute 20, the lender's 3-GPU production
    job: quota 27 of 28, admitted without a Kueue preemption; no node has 3 GPUs free, so kube-scheduler preempts
    the gang (the only lower-priority pods; one pod per node, tied, node 6 by serial), a job: both its pods stop
    and node 7 is empty. The borrower's pod (experiment) comes before the learner's (learning) though the learner
    is earlier in the config: it binds to node 7 and the learner's pod still finds no room, with nothing below
    learning to preempt. Until the fourth session of 2026-12-06 the pass went pool by pool in config order: the
    learner's pod took node 7 and the borrower's preempted it at once (a preemption a cluster does not make)."""
    every, skipping = _room_freed_during_kube_schedulers_pass(False), _room_freed_during_kube_schedulers_pass(True)
    for res in (every, skipping):
        assert res.sims["lender"].workload.first_start[5] == 21  # nominated at 20, runs after the grace period
        assert res.pools["borrower"]["scheduler_preemptions"] == 1  # the gang
        assert res.sims["borrower"].workload.first_start[1] == 20
        assert first_placement(res, "borrower", 1) == ("lender", GUARANTEED)
        assert res.sims["learner"].workload.first_start == [None]
        assert res.pools["learner"]["scheduler_preemptions"] == 0
    from test_environment_scale import _result_json

    assert _result_json(skipping) == _result_json(every)


def test_a_pod_waiting_for_a_floor_binds_at_its_turn_to_room_freed_earlier_in_the_same_pass():
    """Issue 41 item 3, the 16-pool month's split at minute 5026 in miniature: the scenario above with the
    borrower in the learning tier too, so that the two 3-GPU pods have one priority and kube-scheduler's order
    between them is the config's (the simulator does not model the queue's timestamps). The lender's production
    pod preempts the borrower's gang at minute 20 and needs one of its two nodes; node 7 is empty. The learner's
    pod, first of the two, binds to it at minute 20; the borrower's finds 1 GPU and may not preempt a pod of its
    own priority. Skipping quiet minutes, the learner has not been processed at minute 20 (nothing of its own
    happened) and the room did not exist when the pass began, while the borrower was woken by its gang's
    preemption: the learner's pod is tried at its turn all the same (`Environment._floor_pass`: a pool not
    processed takes part where its pod could bind or preempt), as deciding every minute. Until 2026-12-06 it was
    asked only between passes, and the borrower's pod took node 7."""
    every = _room_freed_during_kube_schedulers_pass(False, borrower_tier="learning")
    skipping = _room_freed_during_kube_schedulers_pass(True, borrower_tier="learning")
    for res in (every, skipping):
        assert res.sims["lender"].workload.first_start[5] == 21
        assert res.pools["borrower"]["scheduler_preemptions"] == 1  # the gang
        assert res.sims["learner"].workload.first_start == [20]
        assert first_placement(res, "learner", 0) == ("lender", GUARANTEED)
        assert res.sims["borrower"].workload.first_start[1] is None
        assert res.pools["learner"]["scheduler_preemptions"] == 0
    assert skipping.pools["learner"]["ticks_skipped"] > 0
    from test_environment_scale import _result_json

    assert _result_json(skipping) == _result_json(every)
