"""Every AWS call of a tick bounded as a whole by the tick's deadline (policy/deadline.py): botocore's connect and
read timeouts bound each socket operation, not a whole answer, and botocore's sockets live in urllib3's pool, out
of reach. So the call runs in a worker thread and the tick waits for it only until the deadline.
"""

from __future__ import annotations

import threading
from typing import Callable

from policy.deadline import MESSAGE, Deadline
from policy.errors import DeadlineExceeded


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
