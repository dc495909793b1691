"""Karpenter on the simulated pool, done well (the elastic baseline)."""

from __future__ import annotations


from sim.cloud import karpenter_batch_close, size_group
from sim.engine import GUARANTEED, ON_DEMAND, SPOT, Simulation
from sim.cluster import new_claims, new_nodes_needed
from sim.controllers.ports import node_pod_gpus
from sim.controllers.base import Controller


def displaced_pods(sim: Simulation) -> dict[int, int]:
    """GPU requests of the pods on nodes under a spot interruption notice (one pod per node and job), as counts
    per size. In series mode every busy GPU of such a node is one 1-GPU pod."""
    out: dict[int, int] = {}
    for n in sim.nodes.values():
        if n.warned and n.busy:
            for used in node_pod_gpus(sim, n):
                out[used] = out.get(used, 0) + 1
    return out


class Karpenter(Controller):
    """What Karpenter does with a NodePool of the pool's types and capacity types, done well:
    - provisioning: pending pods are bin-packed (first fit decreasing) onto free GPUs of existing nodes and
      nodes in flight; the rest get new nodes at once (no cooldown, no step limit), within the NodePool limit;
    - capacity type: spot first (price-capacity-optimized); an insufficient-capacity error falls back to
      on-demand within the same provisioning round when the NodePool allows on-demand;
    - disruption: consolidationPolicy WhenEmpty, consolidateAfter 0s, the NodePool default
      (`+kubebuilder:default:={consolidateAfter: "0s"}` on NodePoolSpec.Disruption, kubernetes-sigs/karpenter
      pkg/apis/v1/nodepool.go): empty nodes only (running training pods are not evicted to consolidate), a node
      goes in the simulated minute it empties, and one that never received a pod counts as empty from when it
      is ready. 0s is also karpenter's cheapest setting on the ITP traces at the same p95 wait
      (docs/benchmarks.md: 5 minutes cost 0.5-1.6 % more, 15 minutes 1.6-4.7 %);
    - interruption handling: at the 2-minute notice the node is cordoned and "the NodePool will start a new node
      as soon as it sees the Spot interruption warning" (karpenter.sh docs, Disruption > Interruption): the pods
      on a warned node are provisioned for like pending pods.
    - gangs: no gang awareness. It launches a node per NodeClaim (kubernetes-sigs/karpenter#3138: "a separate
      CreateFleet{Type: instant, TotalTargetCapacity: 1} per NodeClaim"), so scarce spot (SPOT_PARTIAL) leaves
      part of a multi-node job's nodes up and billing; the empty ones its pending pods are nominated to are kept
      (above), for as long as the job waits; there is no all-or-nothing launch and no bound on the wait.
    Karpenter launches instances itself (no Auto Scaling group): a reclaimed node is replaced only by this
    provisioning, never a second time by a group converging to a desired size.
    """

    name = "karpenter"
    node_groups = False

    def __init__(
        self,
        consolidate_after_minutes: int = 0,
        name: str = "karpenter",
        replace_on_demand: bool = False,
        claim_per_pod: bool = False,
    ):
        self.consolidate_after = consolidate_after_minutes
        # Pools of several node sizes: the simulator hands Karpenter a minute's pending pods as one batch; its own
        # batch window is 1 s idle, 10 s at most (karpenter.sh settings BATCH_IDLE_DURATION / BATCH_MAX_DURATION),
        # so pods seconds apart get claims of their own. `claim_per_pod` bounds that the other way: every pod that
        # fits no existing node gets its own claim (and the cheapest type that holds it). The window's timing (when
        # the launch is asked for) is modelled in seconds with SimSettings.latency (`_batch_close`, sim/cloud.py).
        self.claim_per_pod = claim_per_pod
        self.uses_spot = True
        self.name = name
        # consolidationPolicy WhenEmptyOrUnderutilized, as far as on-demand nodes go: single-node consolidation may
        # replace a node with a cheaper one (a spot offering of the same type is cheaper), launching the
        # replacement first and disrupting the node once it is ready, its pods evicted (kubernetes-sigs/karpenter
        # pkg/controllers/disruption: computeConsolidation filters replacement options by price; spot-to-spot is
        # behind a feature gate, on-demand to spot is not). Only for pods that may be evicted (no
        # karpenter.sh/do-not-disrupt): a training job evicted loses its work since the last checkpoint.
        self.replace_on_demand = replace_on_demand
        self._replacing: dict[str, str] = {}  # on-demand node -> the spot node launched to replace it
        self._request_s: float | None = None  # this tick's launch request second (_batch_close)

    def _demand(self, sim: Simulation) -> dict[int, int]:
        pending = sim.workload.pending_counts()
        displaced = displaced_pods(sim)
        for size, count in displaced.items():
            pending[size] = pending.get(size, 0) + count
        return pending

    def _batch_close(self, sim: Simulation) -> float | None:
        """Second of this minute's launch request (SimSettings.latency, sim/cloud.py): the close of the batch
        window holding the minute's last pod arrival; with no arrival this minute (pods still pending, pods of a
        node under a notice), a window opened at the minute's start."""
        lat = sim.settings.latency
        if lat is None:
            return None
        arrivals = sim.workload.arrival_seconds(sim.now)
        return karpenter_batch_close(arrivals, lat) if arrivals else 60.0 * sim.now + lat.batch_idle_s

    def tick(self, sim: Simulation) -> None:
        now = sim.now
        self._request_s = self._batch_close(sim)
        if self.replace_on_demand:
            self._replace_on_demand(sim)
        pending = self._demand(sim)
        # Empty nodes the pending pods are nominated to are not consolidated: Karpenter's emptiness check clears a
        # node's Empty condition while it is nominated for pods to schedule to it (cluster.IsNodeNominated in
        # kubernetes-sigs/karpenter's emptiness controller). A gang waiting for its last nodes keeps the ones up.
        sized = bool(sim.spec.sizes)
        if sized:
            nominated = sum(new_claims(pending, sim.spec.gpus_per_node).values()) if pending else 0
        else:
            nominated = new_nodes_needed(pending, sim.spec.gpus_per_node) if pending else 0
        if pending and sized:
            # Several node sizes: each new NodeClaim launches the cheapest type that fits its pods (right-sizing).
            free = [n.gpus - n.busy for n in sim.nodes.values() if not n.warned and n.gpus > n.busy]
            self._provision_sized(sim, new_claims(pending, sim.spec.gpus_per_node, free, self.claim_per_pod))
        elif pending:
            # free GPUs that pending pods may land on: not cordoned; nodes in flight count as empty
            free = [n.gpus - n.busy for n in sim.nodes.values() if not n.warned and n.gpus > n.busy]
            new_nodes = new_nodes_needed(pending, sim.spec.gpus_per_node, free)
            # Pods that may not run on spot (production work in an environment, sim/environment.py) require
            # karpenter.sh/capacity-type: on-demand: Karpenter launches on-demand nodes for them, spot for the rest.
            on_demand_only = getattr(sim.workload, "on_demand_only_pending", None)
            wants = on_demand_only() if on_demand_only is not None else None
            if wants:
                free_not_spot = [
                    n.gpus - n.busy for n in sim.nodes.values() if not n.warned and n.gpus > n.busy and n.group != SPOT
                ]
                od_nodes = new_nodes_needed(wants, sim.spec.gpus_per_node, free_not_spot)
                if od_nodes:
                    self._provision_on_demand(sim, od_nodes)
                new_nodes = max(0, new_nodes - od_nodes)
            if new_nodes:
                self._provision(sim, new_nodes)
        for node in list(sim.nodes.values()):
            if node.group != GUARANTEED and node.ready_at <= now and node.busy == 0 and not node.warned:
                if now - self._empty_since(node) >= self.consolidate_after:
                    if nominated > 0:
                        nominated -= 1
                        continue
                    sim.terminate(node.id)

    def _replace_on_demand(self, sim: Simulation) -> None:
        """Each busy on-demand node gets one spot replacement (when spot can be launched); once that is ready the
        on-demand node is disrupted: its pods are evicted (they requeue and land on the ready spot node) and it
        goes. A replacement that never became ready (reclaimed first) is tried again."""
        now = sim.now
        for node in [n for n in sim.nodes.values() if n.group == ON_DEMAND]:
            if node.ready_at > now or node.warned:
                continue
            spare = self._replacing.get(node.id)
            if spare is not None and spare not in sim.nodes:
                spare = None  # the replacement is gone (reclaimed): try again
                self._replacing.pop(node.id)
            if node.busy == 0:
                continue  # empty: the WhenEmpty rule below deletes it
            if spare is None:
                room = sim.spec.spot_max_nodes - sim.count(SPOT)
                if room > 0 and sim.launch(SPOT, 1, self._request_s):
                    newest = max((n for n in sim.nodes.values() if n.group == SPOT), key=lambda n: n.serial)
                    self._replacing[node.id] = newest.id
            elif sim.nodes[spare].ready_at <= now:
                self._replacing.pop(node.id)
                sim.terminate(node.id)  # evicts its pods (sim.c.busy_terminations counts the disruption)

    @staticmethod
    def _empty_since(node) -> int:
        return node.ready_at if node.empty_since is None else max(node.empty_since, node.ready_at)

    def wake(self, sim: Simulation) -> int:
        if self.replace_on_demand and any(n.group == ON_DEMAND for n in sim.nodes.values()):
            return sim.now + 1
        if sim.workload.pending_counts() or any(n.warned and n.busy for n in sim.nodes.values()):
            return sim.now + 1  # it provisions (or retries a failed spot launch) every minute something waits
        wake = sim.horizon
        for node in sim.nodes.values():
            if node.group != GUARANTEED and node.busy == 0 and not node.warned:
                wake = min(wake, self._empty_since(node) + self.consolidate_after)
        return wake

    @staticmethod
    def cheapest_fit(spec, used_gpus: int) -> int:
        """GPUs per node of the cheapest size that holds `used_gpus` (spot prices where the pool has spot; ties:
        the smaller size): Karpenter launches the cheapest instance type that fits a NodeClaim's pods."""
        options = [(spec.spot_usd_per_hour if spec.has_spot else spec.on_demand_usd_per_hour, spec.gpus_per_node)]
        options += [
            (z.spot_usd_per_hour if spec.has_spot else z.on_demand_usd_per_hour, z.gpus_per_node) for z in spec.sizes
        ]
        return min(o for o in options if o[1] >= used_gpus)[1]

    def _provision_sized(self, sim: Simulation, claims: dict[int, int]) -> None:
        spec = sim.spec
        by_size: dict[int, int] = {}
        for used, count in claims.items():
            size = self.cheapest_fit(spec, used)
            by_size[size] = by_size.get(size, 0) + count
        maxima = {spec.gpus_per_node: (spec.spot_max_nodes, spec.on_demand_max_nodes)}
        maxima.update({z.gpus_per_node: (z.spot_max_nodes, z.on_demand_max_nodes) for z in spec.sizes})
        for size, count in sorted(by_size.items()):
            spot = SPOT if size == spec.gpus_per_node else size_group(SPOT, size)
            od = ON_DEMAND if size == spec.gpus_per_node else size_group(ON_DEMAND, size)
            spot_max, od_max = maxima[size]
            if spec.has_spot:
                launched = sim.launch(spot, max(0, min(count, spot_max - sim.count(spot))), self._request_s)
                count -= launched
                if launched or not spec.has_on_demand:
                    continue
            if spec.has_on_demand:
                sim.launch(od, max(0, min(count, od_max - sim.count(od))), self._request_s)

    def _provision(self, sim: Simulation, count: int) -> None:
        spec = sim.spec
        if spec.has_spot:
            room = spec.spot_max_nodes - sim.count(SPOT)
            if spec.has_on_demand:  # one NodePool limit over both capacity types
                room = min(room, spec.elastic_max_nodes - sim.count(SPOT) - sim.count(ON_DEMAND))
            launched = sim.launch(SPOT, max(0, min(count, room)), self._request_s)
            count -= launched
            if launched or not spec.has_on_demand:
                return
        if spec.has_on_demand:
            self._provision_on_demand(sim, count)

    def _provision_on_demand(self, sim: Simulation, count: int) -> None:
        spec = sim.spec
        if not spec.has_on_demand:
            return
        room = spec.elastic_max_nodes - sim.count(SPOT) - sim.count(ON_DEMAND)
        room = min(room, spec.on_demand_max_nodes - sim.count(ON_DEMAND))
        sim.launch(ON_DEMAND, max(0, min(count, room)), self._request_s)
