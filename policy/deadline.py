"""One deadline for the whole tick, from the Lambda context's remaining time minus a margin.

Every AWS and Kubernetes call checks it before it starts and is bounded as a whole by the time left: a
Kubernetes request by policy/kube.py's watchdog (it owns its socket and shuts it), an AWS call by
`BoundedClient` (botocore's sockets live in urllib3's pool, out of reach: the call runs in a worker thread and
the tick waits for it only until the deadline). botocore's connect/read timeouts bound each socket operation,
not a whole answer: a server that sends a byte every few seconds never trips them. The margin covers what still
runs after the deadline: the final state write and the lease release, themselves bounded by the invocation's
own end (policy/handler.py). What was not read by then is missing data (which never shrinks); what was not
written is left for the next tick.
"""

from __future__ import annotations

import threading
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


def within(deadline: "Deadline | None", what: str, fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)`, waited for at most the deadline's time left; DeadlineExceeded if it is not done by
    then (or the deadline has passed already). Without a deadline (outside Lambda) it runs in the caller's
    thread. A call cut off goes on in its daemon thread until it ends by itself (botocore's timeouts, or the
    server finishing; one that keeps dripping keeps the thread, frozen with the Lambda environment between
    invocations), and its answer is dropped: the tick has already counted it as missing data (or, for a write,
    as not applied; the next tick reads what AWS did)."""
    if deadline is None:
        return fn(*args, **kwargs)
    deadline.check()
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread as it is
            outcome["error"] = err

    worker = threading.Thread(target=run, name=f"bounded {what}", daemon=True)
    worker.start()
    worker.join(deadline.remaining_s())
    if worker.is_alive():
        raise DeadlineExceeded(f"{what} did not answer by the tick's deadline: {MESSAGE}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class BoundedClient:
    """A boto3 client whose every API operation is bounded as a whole by `deadline` (`within`); anything else
    (meta, exceptions, paginators) is the client's own."""

    def __init__(self, client, deadline: "Deadline | None"):
        self._client = client
        self._deadline = deadline
        self._operations = set(getattr(getattr(client, "meta", None), "method_to_api_mapping", None) or ())

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if name not in self._operations:
            return attr
        what = f"{self._client.meta.service_model.service_id} {self._client.meta.method_to_api_mapping[name]}"

        def bounded(*args, **kwargs):
            return within(self._deadline, what, attr, *args, **kwargs)

        return bounded
