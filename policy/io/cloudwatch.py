"""CloudWatch GetMetricData: per-node GPU utilization (Container Insights by default), the UtilizationSource of
policy/ports.py, as the series of policy/gpu_series.py.

Three queries per node (utilization Average and Maximum, GPU reserved-capacity Maximum, per minute) over one
window long enough for every pool's idle timeout, empty timeout and scale-up window, batched <= 500 queries per
GetMetricData call (DESIGN.md decision 7), the batches side by side (at most `in_flight` at once, policy/fanout.py).
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Iterable

from policy import fanout
from policy.deadline import Deadline, check
from policy.io.aws_errors import classify
from policy.gpu_series import MAX_STALENESS, Series
from policy.ports import NodeRef

MAX_QUERIES_PER_CALL = 500
PERIOD_SECONDS = 60


class CloudWatchUtilization:
    """GetMetricData over `namespace`/`metric` with dimensions ClusterName, InstanceId, NodeName."""

    def __init__(
        self,
        cloudwatch,
        cluster_name: str,
        namespace: str = "ContainerInsights",
        metric: str = "node_gpu_utilization",
        reserved_metric: str = "node_gpu_reserved_capacity",
        deadline: Deadline | None = None,
        in_flight: int = fanout.DEFAULT_IN_FLIGHT,
    ):
        self._cw = cloudwatch
        self._deadline = deadline
        self._in_flight = in_flight
        self._lock = threading.Lock()
        self._cluster = cluster_name
        self._namespace = namespace
        self._metric = metric
        self._reserved_metric = reserved_metric
        self.calls = 0

    def _query(self, qid: str, node: NodeRef, stat: str, metric: str | None = None) -> dict:
        dims = [
            {"Name": "ClusterName", "Value": self._cluster},
            {"Name": "InstanceId", "Value": node.instance_id},
            {"Name": "NodeName", "Value": node.node_name},
        ]
        return {
            "Id": qid,
            "ReturnData": True,
            "MetricStat": {
                "Metric": {"Namespace": self._namespace, "MetricName": metric or self._metric, "Dimensions": dims},
                "Period": PERIOD_SECONDS,
                "Stat": stat,
            },
        }

    def _batch(self, batch: list[dict], start: datetime, now: datetime) -> list[dict]:
        """Every page of one GetMetricData batch: its MetricDataResults."""
        results: list[dict] = []
        token = None
        while True:
            kwargs = {"MetricDataQueries": batch, "StartTime": start, "EndTime": now, "ScanBy": "TimestampDescending"}
            if token:
                kwargs["NextToken"] = token
            check(self._deadline)
            with self._lock:  # batches run side by side
                self.calls += 1
            try:
                resp = self._cw.get_metric_data(**kwargs)
            except Exception as err:  # noqa: BLE001 - every failure becomes a typed PolicyError
                raise classify(err, "CloudWatch GetMetricData") from err
            results += resp.get("MetricDataResults", [])
            token = resp.get("NextToken")
            if not token:
                return results

    def read(self, nodes: Iterable[NodeRef], now: datetime, window_minutes: int) -> dict[str, Series]:
        """Series per instance id. A node whose Kubernetes name is unknown (EC2 DescribeInstances failed or has
        not listed it yet: the tick reports that failure itself) is not queried: a NodeName dimension of "" can
        match no datapoint, and botocore refuses the whole call for it (an empty dimension value), which would
        blind every node behind a CloudWatch error that hides the real cause. Such a node has no series, so it
        counts as busy."""
        nodes = [n for n in nodes if n.node_name]
        queries: list[dict] = []
        owner: dict[str, tuple[str, str]] = {}
        for i, node in enumerate(nodes):
            for stat, tag, metric in (
                ("Average", "a", None),
                ("Maximum", "m", None),
                ("Maximum", "r", self._reserved_metric),
            ):
                qid = f"{tag}{i}"
                owner[qid] = (node.instance_id, tag)
                queries.append(self._query(qid, node, stat, metric))
        raw: dict[str, dict[str, dict[datetime, float]]] = {n.instance_id: {"a": {}, "m": {}, "r": {}} for n in nodes}
        start = now - timedelta(minutes=window_minutes) - MAX_STALENESS  # the idle window may end that early
        batches = [queries[k : k + MAX_QUERIES_PER_CALL] for k in range(0, len(queries), MAX_QUERIES_PER_CALL)]
        # The batches side by side (each one's pages in turn); any batch that fails fails the read, as one call did.
        for _, results, err in fanout.each(lambda batch: self._batch(batch, start, now), batches, self._in_flight):
            if err is not None:
                raise err
            for result in results or ():
                iid, tag = owner[result["Id"]]
                for ts, value in zip(result.get("Timestamps", []), result.get("Values", [])):
                    raw[iid][tag][ts] = value
        out = {}
        for iid, by in raw.items():
            stamps = sorted(set(by["a"]) | set(by["m"]), reverse=True)
            out[iid] = Series(
                tuple((ts, by["a"].get(ts), by["m"].get(ts)) for ts in stamps),
                tuple(sorted(by["r"].items(), reverse=True)),
            )
        return out
