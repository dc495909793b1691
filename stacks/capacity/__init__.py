"""Capacity: each pool's guaranteed and elastic node groups, the system nodes, their launch templates and the live sizes read before an update."""
