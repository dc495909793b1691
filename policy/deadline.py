"""One deadline for the whole tick, from the Lambda context's remaining time minus a margin.

Every AWS and Kubernetes call checks it before it starts and is bounded as a whole by the time left: a
Kubernetes request by policy/io/kube.py's watchdog (it owns its socket and shuts it), an AWS call by
`BoundedClient` (policy/io/bounded.py: botocore's sockets live in urllib3's pool, out of reach, so the call runs in
a worker thread and the tick waits for it only until the deadline). botocore's connect/read timeouts bound each socket operation,
not a whole answer: a server that sends a byte every few seconds never trips them. The margin covers what still
runs after the deadline: the final state write and the lease release, themselves bounded by the invocation's
own end (policy/handler.py). What was not read by then is missing data (which never shrinks); what was not
written is left for the next tick.
"""

from __future__ import annotations

import time
from typing import Callable

from policy.errors import DeadlineExceeded

MESSAGE = "tick deadline reached: the remaining reads and writes were skipped"


class Deadline:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._at = clock() + seconds

    @classmethod
    def from_context(cls, context, margin_s: float) -> "Deadline | None":
        """None outside Lambda (a context without get_remaining_time_in_millis, e.g. a local replay)."""
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if not callable(remaining):
            return None
        return cls(max(0.0, remaining() / 1000.0 - margin_s))

    def remaining_s(self) -> float:
        return max(0.0, self._at - self._clock())

    @property
    def expired(self) -> bool:
        return self._clock() >= self._at

    def check(self) -> None:
        """Raise DeadlineExceeded once the deadline has passed (call before starting a read or a write)."""
        if self.expired:
            raise DeadlineExceeded(MESSAGE)


def check(deadline: "Deadline | None") -> None:
    if deadline is not None:
        deadline.check()
