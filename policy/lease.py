"""Taking the tick lease (policy/ports.py StatePort, policy/io/state.py): at once for a scheduled tick, with a short backoff for a spot warning.

A scheduled tick that finds the lease held does nothing: the holder is doing the same work and the next schedule
is a minute away. A spot interruption warning cannot wait that minute: EC2 reclaims the instance two minutes
after the notice, and the replacement for its pods should start with the notice. The holder releases the lease
when its bounded tick ends (seconds, normally), so the warning invocation retries until then, within its own
deadline and leaving MIN_TICK_S of it for the tick it then runs. If the holder is still there by then, the
warning invocation gives up: it recorded the instance first (state.record_leaving), so the next scheduled tick,
at most a minute later, acts on it.
"""

from __future__ import annotations

import functools
import time
from typing import Callable

from policy.deadline import Deadline
from policy.ports import LEASE_KEY, StatePort

FIRST_BACKOFF_S = 0.25
MAX_BACKOFF_S = 2.0
# Time a tick needs after it takes the lease: its reads (8 AWS calls for a steady tick of 10 pools, side by side
# where they do not depend on each other; docs/policy.md "Figures") and its writes. The handler's deadline already keeps the margin for
# the last call in flight and the final state write (policy/handler.py DEADLINE_MARGIN_S) on top of this. A
# warning invocation of the 50 s function therefore waits at most 50 - 27 - 10 = 13 s for the holder.
MIN_TICK_S = 10.0


def take(
    state: StatePort,
    holder: str,
    ttl_s: float,
    now_epoch: float,
    deadline: Deadline | None = None,
    patient: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    key: str = LEASE_KEY,
) -> float | None:
    """Seconds waited before the lease was taken, or None when another tick still holds it.

    `patient` (a spot warning) retries with doubling backoff while `deadline` leaves MIN_TICK_S after the next
    sleep; without a deadline (outside Lambda) there is nothing to bound the wait, so it is one try, as for a
    scheduled tick. The time waited is measured on the deadline's clock and moves both the lease's start and its
    end (`ttl_s` is counted from the invocation's start, which Lambda's timeout is too). `key`: a shard's own lease
    item (passed to the port only then)."""
    acquire = state.acquire_lease if key == LEASE_KEY else functools.partial(state.acquire_lease, key=key)
    start = deadline.remaining_s() if deadline is not None else 0.0
    delay, waited = FIRST_BACKOFF_S, 0.0  # the first try is at the invocation's own time
    while True:
        if acquire(holder, now_epoch + waited, ttl_s - waited):
            return waited
        if not patient or deadline is None or deadline.remaining_s() - delay < MIN_TICK_S:
            return None
        sleep(delay)
        delay = min(2 * delay, MAX_BACKOFF_S)
        waited = start - deadline.remaining_s()
