"""SNS: the policy function's notifications to the environment's topic, the Publisher of policy/notifications.py."""

from __future__ import annotations

import threading

from policy import fanout
from policy.deadline import Deadline, check
from policy.io.aws_errors import classify

# SNS PublishBatch: at most 10 entries and 256 KiB of payload per request (docs/aws-rules.md); a batch is cut
# below the size with room for the entries' ids and subjects.
BATCH_ENTRIES = 10
BATCH_BYTES = 200 * 1024


class SnsPublisher:
    def __init__(
        self, sns, topic_arn: str, deadline: Deadline | None = None, in_flight: int = fanout.DEFAULT_IN_FLIGHT
    ):
        self._sns = sns
        self._topic = topic_arn
        self._deadline = deadline
        self._in_flight = in_flight
        self._lock = threading.Lock()
        self.calls = 0

    def publish(self, subject: str, body: str) -> None:
        check(self._deadline)
        self.calls += 1
        try:
            self._sns.publish(TopicArn=self._topic, Subject=subject, Message=body)
        except Exception as err:  # noqa: BLE001
            raise classify(err, "SNS Publish") from err

    def publish_batch(self, messages: list[tuple[str, str]]) -> list[Exception | None]:
        """PublishBatch (authorized as sns:Publish), 10 entries or BATCH_BYTES a request, the requests side by side
        (policy/fanout.py); an entry SNS reports as failed, or every entry of a request that failed as a whole, gets
        its PolicyError."""
        chunks, start = [], 0
        while start < len(messages):
            end, size = start, 0
            while (
                end < len(messages)
                and end - start < BATCH_ENTRIES
                and (end == start or size + len(messages[end][0]) + len(messages[end][1]) <= BATCH_BYTES)
            ):
                size += len(messages[end][0]) + len(messages[end][1])
                end += 1
            chunks.append(range(start, end))
            start = end
        out: list[Exception | None] = [None] * len(messages)
        for chunk, failed_ids, err in fanout.each(lambda c: self._batch(c, messages), chunks, self._in_flight):
            if err is not None:
                failed = classify(err, "SNS PublishBatch")
                for i in chunk:
                    out[i] = failed
                continue
            for i, why in (failed_ids or {}).items():
                out[i] = classify(RuntimeError(why), "SNS PublishBatch")
        return out

    def _batch(self, chunk: range, messages: list[tuple[str, str]]) -> dict[int, str]:
        """One PublishBatch request: the entries SNS reports as failed (index -> why)."""
        check(self._deadline)
        with self._lock:
            self.calls += 1
        entries = [{"Id": str(i), "Subject": messages[i][0], "Message": messages[i][1]} for i in chunk]
        resp = self._sns.publish_batch(TopicArn=self._topic, PublishBatchRequestEntries=entries)
        return {
            int(f["Id"]): f"{f.get('Code', '')}: {f.get('Message', '')}"
            for f in resp.get("Failed") or []
            if str(f.get("Id", "")).isdigit() and int(f["Id"]) in chunk
        }
