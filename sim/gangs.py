"""What waiting gangs cost: GPU-minutes of elastic nodes held for multi-node jobs that cannot start yet.

A job larger than a node is a gang (sim/engine.py JobsWorkload): it starts only with all its k pods placed, each
on a whole free node. Until then the nodes that did arrive for it are ready, paid and empty. After the
scheduler's pass at minute t, a pending gang and an empty ready node coexist only when the gang needs more whole
nodes than are free (a pending single-node job would have taken the empty node), so every such empty node is
waiting for a gang. Counted per minute:

    held = min(empty ready elastic nodes not under a spot notice, whole nodes the pending gangs need)

times the node's GPUs; nothing while no gang is pending. The floor is not counted (paid whatever the policy
does). The meter reads the state the minute ends with (after the policy's tick and the second scheduling pass),
the state billing charges the minute at; skipped quiet minutes repeat it (Simulation._skip).
"""

from __future__ import annotations


class GangHoldMeter:
    """GPU-minutes of elastic nodes held for pending gangs (`held_gpu_minutes`), and the minutes any gang
    waited with such a node held (`minutes_with_held_nodes`)."""

    __slots__ = ("sim", "floor_group", "held_gpu_minutes", "minutes_with_held_nodes", "_held_gpus")

    def __init__(self, sim, floor_group: str):
        self.sim = sim
        self.floor_group = floor_group  # sim/engine.py's GUARANTEED (passed in: the engine imports this module)
        self.held_gpu_minutes = 0
        self.minutes_with_held_nodes = 0
        self._held_gpus = 0  # what the last metered minute held: a skipped quiet minute repeats it

    def _gang_nodes_pending(self) -> int:
        queues = getattr(self.sim.workload, "queues", None)
        if not queues:
            return 0
        gpn = self.sim.spec.gpus_per_node
        return sum(-(-size // gpn) * len(q) for size, q in queues.items() if size > gpn and q)

    def tick(self, now: int) -> None:
        self._held_gpus = 0
        wanted = self._gang_nodes_pending()
        if wanted:
            empty = [
                n.gpus
                for n in self.sim.nodes.values()
                if n.group != self.floor_group and n.busy == 0 and not n.warned and n.ready_at <= now
            ]
            self._held_gpus = sum(sorted(empty, reverse=True)[:wanted])
        self.repeat(1)

    def repeat(self, minutes: int) -> None:
        if self._held_gpus:
            self.held_gpu_minutes += self._held_gpus * minutes
            self.minutes_with_held_nodes += minutes
