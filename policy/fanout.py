"""Independent AWS calls of one tick run side by side, at most `in_flight` at a time (issue 41).

A tick of 200 pools makes a few hundred calls that do not depend on each other (one scaling-activities read per
spot group that needs it, one DescribeNodegroup per group about to change, one write per change, one budget
read per budget each hour). One after another at 100 ms each they would take most of the function's deadline;
side by side, a bounded `concurrent.futures.ThreadPoolExecutor` over the same thread-safe boto3 clients (botocore
documents clients, not sessions or resources, as safe to share between threads) finishes them in a few seconds
without a scheduler of our own. The bound is the setting `policy.aws_calls_in_flight` (docs/aws-rules.md: EKS and
Auto Scaling publish no request rate; EC2's documented buckets are far above it); botocore's adaptive retries back
off and slow the client down when AWS throttles anyway (policy/handler.py).

The deadline still holds: every call checks it before it starts and is bounded by it as a whole
(policy/deadline.py); a call that has not started when the deadline passes fails with DeadlineExceeded like any
other, so its item is missing data (a read) or not applied (a write).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_IN_FLIGHT = 8


def each(
    fn: Callable[[T], R], items: Iterable[T], in_flight: int = DEFAULT_IN_FLIGHT
) -> list[tuple[T, R | None, Exception | None]]:
    """`fn(item)` for every item, at most `in_flight` at once, in the items' order: (item, result, None) or (item,
    None, the exception it raised). Nothing is raised here: each caller decides what a failure of one item means
    (it never stops the others). One item, or `in_flight` 1, runs in the caller's thread."""
    items = list(items)
    if len(items) <= 1 or in_flight <= 1:
        return [_one(fn, item) for item in items]
    with ThreadPoolExecutor(max_workers=min(in_flight, len(items)), thread_name_prefix="gpuloan-call") as pool:
        return list(pool.map(lambda item: _one(fn, item), items))


def _one(fn: Callable[[T], R], item: T) -> tuple[T, R | None, Exception | None]:
    try:
        return item, fn(item), None
    except Exception as err:  # noqa: BLE001 - handed to the caller with its item
        return item, None, err
