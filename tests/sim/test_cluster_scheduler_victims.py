"""kube-scheduler's victim search (sim/cluster.py `scheduler_victims`) does not depend on the order pods sit on a node.

Issue 41 item 3: the 16-pool month skipping quiet minutes took another victim than deciding every minute, two
borrowed pods of different pools of one priority that started the same minute with the same job index: the tie
fell to the iteration order of the node's `jobs` set, which follows its history of binds. kube-scheduler itself
leaves such a tie to the order of the node's pod list (`SelectVictimsOnNode` sorts with `sort.Slice` by
`MoreImportantPod`: priority, then start time); the simulator ranks them by job index, then pool name.

The nodes and workloads here are hand-built stand-ins holding only what `scheduler_victims` reads (a node's GPUs,
busy GPUs, serial and jobs; a workload's sizes, priorities, run starts, nodes and pool name); the function under
test is the real one.
"""

from __future__ import annotations

from itertools import permutations
from types import SimpleNamespace

from sim.cluster import scheduler_victims

GPUS_PER_NODE = 4


class Workload:
    """One pool's jobs as `scheduler_victims` reads them: job j has gpus[j], priority[j], run_start[j], on_nodes[j]."""

    def __init__(self, name: str, env, jobs: list[tuple[int, int, int | None]]):
        self.sim = SimpleNamespace(spec=SimpleNamespace(name=name), env=env)
        self.gpus = [g for g, _, _ in jobs]
        self.priority = [p for _, p, _ in jobs]
        self.run_start = [s for _, _, s in jobs]
        self.on_nodes: list[list] = [[] for _ in jobs]
        self.admitted_to = [SimpleNamespace(spec=SimpleNamespace(gpus_per_node=GPUS_PER_NODE)) for _ in jobs]

    def job_priority(self, j: int) -> int:
        return self.priority[j]


def _floor(order: list[tuple[str, int]], gpus: int, priorities: dict[str, int]):
    """A lender's full floor node of `gpus` GPUs holding 1-GPU pods started at minute 10, bound in `order`: the
    lender's own jobs 0 and 1 and borrowed job 0 of pools "a" and "b"; the preemptor is pool "p"'s 1-GPU job of
    priority 1000."""
    env = SimpleNamespace(pools={}, floor_owner={})
    node = SimpleNamespace(id="i-f1", gpus=gpus, busy=0, serial=1, jobs=[])
    workloads = {
        "lender": Workload("lender", env, [(1, priorities["lender"], 10), (1, priorities["lender"], 10)]),
        "a": Workload("a", env, [(1, 0, 10)]),
        "b": Workload("b", env, [(1, 0, 10)]),
        "p": Workload("p", env, [(1, 1000, None)]),
    }
    for name, w in workloads.items():
        env.pools[name] = SimpleNamespace(workload=w)
    env.floor_owner[id(node)] = env.pools["lender"]
    for pool, j in order:
        w = workloads[pool]
        node.jobs.append(j if pool == "lender" else (pool, j))  # the owner's own jobs are plain indices
        w.on_nodes[j].append((node, w.gpus[j]))
        node.busy += w.gpus[j]
    assert node.busy == node.gpus
    return workloads, node


def _victims(order, gpus, priorities) -> list[tuple[str, int]]:
    workloads, node = _floor(order, gpus, priorities)
    chosen = scheduler_victims(workloads["p"], 0, [node])
    assert chosen is not None
    nodes, victims = chosen
    assert nodes == [node]
    return [(w.sim.spec.name, j) for w, j in victims]


def test_two_borrowed_pods_of_different_pools_tied_on_every_criterion_lose_the_same_one_in_either_order():
    """Issue 41's case. A lender's full 4-GPU floor node: its own two pods of priority 500 and borrowed job 0 of
    pools "a" and "b", priority 0, both started at minute 10. The preemptor (priority 1000) needs 1 GPU: all four
    are lower, removed (4 free), then reprieved most important first while 1 GPU stays free: the lender's two
    (3, 2 free), then of the tied pair the one ranked first (1 free); the other is the victim. Ranked by job index
    (0 both), then pool name: "a" is reprieved and b's pod goes, whether a's or b's was bound first. On main the
    tie fell to the node's pod order and the pod bound second went: a's when b's was bound first."""
    for tied in ([("a", 0), ("b", 0)], [("b", 0), ("a", 0)]):
        order = [("lender", 0), *tied, ("lender", 1)]
        assert _victims(order, 4, {"lender": 500}) == [("b", 0)], tied


def test_the_owners_own_pod_ties_with_borrowed_ones_by_pool_name_in_every_binding_order():
    """A full 4-GPU floor node of four 1-GPU pods all of priority 0 started at minute 10: the lender's own jobs 0
    and 1 (plain indices in `n.jobs`) and borrowed job 0 of "a" and "b" (pool-named keys). One GPU must be freed:
    reprieved in the order job index, then pool name (a 0, b 0, lender 0, lender 1), so the lender's job 1 goes,
    in each of the 24 binding orders; with the lender's job 1 ranked first by a lower start (minute 5) the last of
    the job-0 pods by name, the lender's own job 0, goes."""
    pods = [("a", 0), ("b", 0), ("lender", 0), ("lender", 1)]
    assert {tuple(_victims(list(order), 4, {"lender": 0})) for order in permutations(pods)} == {(("lender", 1),)}
    outcomes = set()
    for order in permutations(pods):
        workloads, node = _floor(list(order), 4, {"lender": 0})
        workloads["lender"].run_start[1] = 5
        nodes, victims = scheduler_victims(workloads["p"], 0, [node])
        outcomes.add(tuple((w.sim.spec.name, j) for w, j in victims))
    assert outcomes == {(("lender", 0),)}
