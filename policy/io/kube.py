"""The cluster's Kubernetes API, standard-library HTTPS with an EKS bearer token: pending GPU pods per pool, and
the last check before a node is terminated (cordon it, then read its pods).

RBAC (config/tenancy.py, the policy ClusterRole): pods `list`, nodes `get` and `patch`; with Kueue,
`get` of the environment's ClusterQueues by name (cluster_queue: the loan's usage, policy/loan_usage.py); where a
pool's floor is a Capacity Block, pods `patch` (mark_checkpoint) and, with Kueue, `get`/`patch` of those pools'
ClusterQueues by name (floor_quota); nothing else.

The token is what `aws eks get-token` makes: a presigned STS GetCallerIdentity URL (header x-k8s-aws-id =
cluster name), base64url-encoded behind `k8s-aws-v1.`. The API server's CA comes from EKS DescribeCluster, so
TLS is verified against the cluster's own CA, never disabled. Which pods count (demand, blockers, gangs) is
policy/pods.py's rule; the ports this client implements are policy/ports.py's.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from datetime import datetime
from typing import Callable, Mapping, Sequence

from policy.deadline import Deadline
from policy.errors import DataUnavailable, DeadlineExceeded, Throttled
from policy.loan_usage import _queue_usage  # the one reader of status.flavorsUsage
from policy.model import Lending, PendingGang
from policy.pods import (
    DO_NOT_DISRUPT,
    GPU_RESOURCE,
    TAINT_EFFECT,
    TAINT_VALUE,
    TERMINAL_PHASES,
    NodeShape,
    blocking_reason,
    creation_time,
    fits_elastic,
    gang_of,
    on_demand_only,
    pod_gpus,
    pod_pools,
    unschedulable,
)

PAGE_SIZE = 500
TIMEOUT_SECONDS = 10  # per request; less when the tick's deadline is nearer
TOKEN_TTL_SECONDS = 60


def eks_token(sts_client, credentials, cluster_name: str) -> str:
    """A bearer token for the EKS API server, signed with the function's own credentials (botocore signer).
    `credentials`: boto3.Session().get_credentials()."""
    from botocore.signers import RequestSigner

    region = sts_client.meta.region_name
    signer = RequestSigner(
        sts_client.meta.service_model.service_id, region, "sts", "v4", credentials, sts_client.meta.events
    )
    params = {
        "method": "GET",
        "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {"x-k8s-aws-id": cluster_name},
        "context": {},
    }
    url = signer.generate_presigned_url(params, region_name=region, expires_in=TOKEN_TTL_SECONDS, operation_name="")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class NotFound(DataUnavailable):
    """The API server answered 404 for the object."""


def _gpu_quota(cluster_queue: dict, flavor: str) -> tuple[str, object]:
    """(JSON pointer of the flavor's nvidia.com/gpu nominalQuota, its value) in a ClusterQueue; raises
    DataUnavailable when the flavor or the quota is not there."""
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    for i, group in enumerate(groups):
        for j, f in enumerate(group.get("flavors") or []):
            if f.get("name") != flavor:
                continue
            for k, r in enumerate(f.get("resources") or []):
                if r.get("name") == GPU_RESOURCE:
                    return f"/spec/resourceGroups/{i}/flavors/{j}/resources/{k}/nominalQuota", r.get("nominalQuota")
    raise DataUnavailable(
        f"ClusterQueue {(cluster_queue.get('metadata') or {}).get('name', '?')} has no "
        f"{GPU_RESOURCE} quota for flavor {flavor}"
    )


def lending_of(cluster_queue: dict, flavor: str, forecast_gpus: float | None) -> Lending:
    """A floor flavor's lending as the ClusterQueue that holds its nominal quota has it (policy/decide/
    lend_ahead.py): spec nominalQuota and lendingLimit (Kueue v0.19.2 apis/kueue/v1beta2/clusterqueue_types.go
    ResourceQuota), status.flavorsUsage total and status.pendingWorkloads (ClusterQueueStatus). Raises
    DataUnavailable when the spec has no such quota or a spec figure is not a whole number; an absent status
    figure is None (the rule then keeps the configured limit)."""
    name = (cluster_queue.get("metadata") or {}).get("name", "?")
    pointer, _ = _gpu_quota(cluster_queue, flavor)
    quota = cluster_queue
    for key in pointer.strip("/").split("/")[:-1]:
        quota = quota[int(key)] if isinstance(quota, list) else quota[key]
    figures = {}
    for field_name in ("nominalQuota", "lendingLimit"):
        value = quota.get(field_name)
        try:
            figures[field_name] = None if value is None else int(str(value))
        except ValueError:
            raise DataUnavailable(
                f"ClusterQueue {name}: {field_name} {value!r} of {flavor} is not a whole number of GPUs"
            ) from None
    used, _ = _queue_usage(cluster_queue, [flavor])
    status = cluster_queue.get("status")
    pending = status.get("pendingWorkloads") if isinstance(status, dict) else None
    pending = pending if isinstance(pending, int) and not isinstance(pending, bool) and pending >= 0 else None
    if figures["nominalQuota"] is None:  # required by the CRD: a queue without it is not read as 0
        raise DataUnavailable(f"ClusterQueue {name}: no nominalQuota for {flavor}")
    return Lending(
        nominal_gpus=figures["nominalQuota"],
        limit_gpus=figures["lendingLimit"],
        own_gpus=used.get(flavor),
        pending_workloads=pending,
        forecast_gpus=forecast_gpus,
    )


class _Watchdog:
    """Bounds one request as a whole: its connection is opened through `open_connection` within the time left,
    which keeps a duplicate descriptor of the socket, and at the bound the watchdog shuts that connection down.

    Why a duplicate descriptor and not `conn.sock`: http.client moves the socket to the response and sets
    `conn.sock = None` when the server answers `Connection: close` or HTTP/1.0, and TLS's wrap_socket detaches
    the plain socket (its descriptor becomes -1) before the handshake. shutdown() acts on the connection, not on
    one descriptor, so shutting the duplicate ends a recv blocked on any of them: in the TLS handshake, the
    status line, the headers or the body, whoever holds the socket by then. Per-read socket timeouts alone
    cannot do this: http.client reads the status line and headers itself, and a byte that arrives just before
    each timeout keeps them going."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.fired = False
        self._clock = clock
        self._at = clock() + seconds
        self._lock = threading.Lock()
        self._held: list[socket.socket] = []  # duplicates of the sockets this request opened
        self._done = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def open_connection(self, address, timeout=None, source_address=None, *args, **kwargs) -> socket.socket:
        """socket.create_connection, each address tried only within the time left (http.client calls this as
        HTTPConnection._create_connection)."""
        host, port = address
        if not isinstance(timeout, (int, float)):
            timeout = None  # http.client's "no timeout given" sentinel: the bound alone applies
        last_err: OSError | None = None
        for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
            left = self._at - self._clock()
            if left <= 0 or self.fired:
                break
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(left if timeout is None else min(timeout, left))
                if source_address:
                    sock.bind(source_address)
                sock.connect(sockaddr)
            except OSError as err:
                sock.close()
                last_err = err
                continue
            if timeout is not None:
                sock.settimeout(timeout)
            self._hold(sock)
            return sock
        raise last_err or TimeoutError(f"no connection to {host}:{port} within the request's bound")

    def _hold(self, sock: socket.socket) -> None:
        with self._lock:
            dup = sock.dup()
            self._held.append(dup)
            fired = self.fired
        if fired:  # the bound passed while connecting: end it now
            self._shut(dup)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # a blocked recv returns at once (close() alone may not wake it)
        except OSError:
            pass

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            held = list(self._held)
        for sock in held:
            self._shut(sock)

    def cancel(self) -> None:
        """Stop the timer and close the duplicates (the connection itself is closed by its owner)."""
        self._timer.cancel()
        with self._lock:
            self._done = True
            held, self._held = self._held, []
        for sock in held:
            sock.close()


class KubeClient:
    """Pending pods the scheduler could not place (paged), grouped by target pool; and per node: cordon,
    uncordon, and the pods that forbid terminating it."""

    def __init__(self, endpoint: str, ca_pem: str | None, token: Callable[[], str], deadline: Deadline | None = None):
        self._endpoint = endpoint.rstrip("/")
        self._token = token
        self._deadline = deadline
        self._ctx = None
        if self._endpoint.startswith("https://"):
            self._ctx = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
        self._protected: dict[str, str] = {}  # node name -> why the Node object itself forbids disruption
        self._active: list[dict] | None = None  # this tick's unfinished pods: one list serves demand and arrivals
        self.calls = 0

    def _timeout(self) -> float:
        if self._deadline is None:
            return TIMEOUT_SECONDS
        self._deadline.check()
        return max(0.05, min(TIMEOUT_SECONDS, self._deadline.remaining_s()))

    def _request(
        self, path: str, method: str = "GET", body: dict | list | None = None, content_type: str = "application/json"
    ) -> dict:
        """One API call, bounded as a whole by `_timeout()`: a socket timeout only bounds each read, and a server
        that drips its answer a byte at a time would keep a tick past the function's timeout. The connection is
        opened within the bound and a watchdog shuts it down at the bound (`_Watchdog`), which ends any read in
        progress (TLS handshake, headers or body; keep-alive or closing answer alike)."""
        try:
            token = self._token()
        except Exception as err:  # noqa: BLE001 - no credentials or signer failure: a read failure like any other
            raise DataUnavailable(f"EKS token could not be made: {type(err).__name__}: {err}") from err
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        url = urllib.parse.urlsplit(self._endpoint + path)
        budget_s = self._timeout()  # the time left to the tick's deadline, at most TIMEOUT_SECONDS
        host = url.hostname or ""
        conn: http.client.HTTPConnection
        if url.scheme == "https":
            conn = http.client.HTTPSConnection(host, url.port, timeout=budget_s, context=self._ctx)
        else:
            conn = http.client.HTTPConnection(host, url.port, timeout=budget_s)
        watchdog = _Watchdog(budget_s)
        # http.client's hook for opening the socket (not in its type stubs)
        conn._create_connection = watchdog.open_connection  # type: ignore[attr-defined]
        self.calls += 1
        try:
            conn.request(method, url.path + (f"?{url.query}" if url.query else ""), body=data, headers=headers)
            resp = conn.getresponse()
            status, reason, raw = resp.status, resp.reason, resp.read()
        except (OSError, http.client.HTTPException, ValueError) as err:
            if watchdog.fired or (self._deadline is not None and self._deadline.expired):
                raise DeadlineExceeded(
                    f"Kubernetes API {method} {path} did not answer within {budget_s:.1f} s "
                    f"(the tick's deadline): {type(err).__name__}"
                ) from err
            raise DataUnavailable(f"Kubernetes API unreachable: {err}") from err
        finally:
            watchdog.cancel()
            conn.close()
        if watchdog.fired:
            # A close-delimited body (HTTP/1.0, or Connection: close without a length) ends where the shutdown
            # cut it, with no error: what was read is not the answer.
            raise DeadlineExceeded(
                f"Kubernetes API {method} {path} did not answer within {budget_s:.1f} s "
                "(the tick's deadline): cut mid-answer"
            )
        if status == 429 or status >= 500:
            raise Throttled(f"Kubernetes API {status} on {method} {path}")
        if status == 404:
            raise NotFound(f"Kubernetes API 404 on {method} {path}")
        if status >= 400:
            raise DataUnavailable(f"Kubernetes API {status} on {method} {path}: {reason}")
        try:
            return json.loads(raw)
        except ValueError as err:
            raise DataUnavailable(f"Kubernetes API answered {method} {path} with something that is not JSON") from err

    def _get(self, path: str) -> dict:
        return self._request(path)

    def _pods(self, field_selector: str) -> list[dict]:
        items: list[dict] = []
        cont = ""
        while True:
            query = {"fieldSelector": field_selector, "limit": str(PAGE_SIZE)}
            if cont:
                query["continue"] = cont
            page = self._get("/api/v1/pods?" + urllib.parse.urlencode(query))
            items += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items

    def blockers(self, node_name: str) -> list[str]:
        """Pods bound to the node that forbid terminating it (raises when the pods cannot be read)."""
        found = [self._protected[node_name]] if node_name in self._protected else []
        for pod in self._pods(f"spec.nodeName={node_name}"):
            why = blocking_reason(pod)
            if why:
                found.append(why)
        return found

    def node_pod_gpus(self, node_name: str) -> tuple[int, ...]:
        """GPU requests of the pods on the node that have not finished: on a node under a spot notice they are
        about to need a place elsewhere (raises when the pods cannot be read)."""
        out = []
        for pod in self._pods(f"spec.nodeName={node_name}"):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            gpus = pod_gpus(pod)
            if gpus > 0:
                out.append(gpus)
        return tuple(out)

    def cordon(self, node_name: str) -> bool:
        """Mark the node unschedulable so nothing new lands on it while it goes. True when this call cordoned it;
        False when it was cordoned already (by someone else: leave it so) or is not registered (still booting)."""
        path = f"/api/v1/nodes/{urllib.parse.quote(node_name, safe='')}"
        self._protected.pop(node_name, None)
        try:
            node = self._get(path)
        except NotFound:
            return False
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        for key in DO_NOT_DISRUPT:  # on the Node itself too, as Karpenter reads it: left as it is, not cordoned
            if str(annotations.get(key, "")).lower() == "true":
                self._protected[node_name] = f"node {node_name} has {key}=true"
                return False
        if (node.get("spec") or {}).get("unschedulable"):
            return False
        self._request(path, "PATCH", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
        return True

    def uncordon(self, node_name: str) -> None:
        path = f"/api/v1/nodes/{urllib.parse.quote(node_name, safe='')}"
        self._request(path, "PATCH", {"spec": {"unschedulable": None}}, "application/merge-patch+json")

    def mark_checkpoint(self, node_name: str, key: str, value: str) -> int:
        """Annotate each unfinished GPU pod on the node `key: value` (a Capacity Block's drain: the time to save a
        checkpoint by). A merge patch of that one annotation, nothing else of the pod; a pod that has it already
        is not patched again. Returns how many pods were patched (raises when the pods cannot be read or one
        patch fails; the next tick repeats it)."""
        patched = 0
        for pod in self._pods(f"spec.nodeName={node_name}"):
            meta = pod.get("metadata") or {}
            if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES or pod_gpus(pod) <= 0:
                continue
            if (meta.get("annotations") or {}).get(key) == value:
                continue
            path = (
                f"/api/v1/namespaces/{urllib.parse.quote(meta.get('namespace', ''), safe='')}/pods/"
                f"{urllib.parse.quote(meta.get('name', ''), safe='')}"
            )
            self._request(path, "PATCH", {"metadata": {"annotations": {key: value}}}, "application/merge-patch+json")
            patched += 1
        return patched

    @staticmethod
    def _cluster_queue_path(api_version: str, queue: str) -> str:
        return f"/apis/{api_version}/clusterqueues/{urllib.parse.quote(queue, safe='')}"

    def cluster_queue(self, api_version: str, queue: str) -> dict:
        """The ClusterQueue object (spec and status), by name: RBAC grants `get` on the environment's queues."""
        return self._get(self._cluster_queue_path(api_version, queue))

    def floor_quota(self, api_version: str, queue: str, flavor: str) -> int:
        """The nominalQuota of nvidia.com/gpu for `flavor` in ClusterQueue `queue` (raises when unreadable or not
        a whole number)."""
        _, value = _gpu_quota(self._get(self._cluster_queue_path(api_version, queue)), flavor)
        try:
            return int(str(value))
        except ValueError:
            raise DataUnavailable(
                f"ClusterQueue {queue}: nominalQuota {value!r} of {flavor} is not a whole number of GPUs"
            ) from None

    def set_floor_quota(self, api_version: str, queue: str, flavor: str, gpus: int) -> None:
        """Set that quota with a JSON patch whose `test` pins the flavor's name at the position read, so a
        ClusterQueue reordered in between is refused (the next tick reads it again) instead of patching another
        flavor."""
        path = self._cluster_queue_path(api_version, queue)
        pointer, _ = _gpu_quota(self._get(path), flavor)
        flavor_name = pointer.rsplit("/resources/", 1)[0] + "/name"
        self._request(
            path,
            "PATCH",
            [
                {"op": "test", "path": flavor_name, "value": flavor},
                {"op": "replace", "path": pointer, "value": int(gpus)},
            ],
            "application/json-patch+json",
        )

    def set_lending_limit(self, api_version: str, queue: str, flavor: str, gpus: int) -> None:
        """Set the flavor's nvidia.com/gpu lendingLimit (JSON patch `add`: set whether or not it is there), with
        the same `test` of the flavor's name as set_floor_quota; the nominalQuota beside it is not written."""
        path = self._cluster_queue_path(api_version, queue)
        pointer, _ = _gpu_quota(self._get(path), flavor)
        flavor_name = pointer.rsplit("/resources/", 1)[0] + "/name"
        self._request(
            path,
            "PATCH",
            [
                {"op": "test", "path": flavor_name, "value": flavor},
                {"op": "add", "path": pointer.rsplit("/", 1)[0] + "/lendingLimit", "value": int(gpus)},
            ],
            "application/json-patch+json",
        )

    def set_taint(self, node_name: str, key: str, present: bool) -> bool:
        """Put gpuloan's NoSchedule taint `key=true` on the node, or take it off; other taints stay as they are.
        True when the node changed; False when it already was so or is not registered (still booting). A merge
        patch replaces spec.taints whole, so it carries the resourceVersion read: a node changed in between
        answers 409 Conflict (DataUnavailable), and the next tick tries again on a fresh read."""
        path = f"/api/v1/nodes/{urllib.parse.quote(node_name, safe='')}"
        try:
            node = self._get(path)
        except NotFound:
            return False
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
        ours = [t for t in taints if t.get("key") == key]
        if bool(ours) == present:
            return False
        if present:
            taints = taints + [{"key": key, "value": TAINT_VALUE, "effect": TAINT_EFFECT}]
        else:
            taints = [t for t in taints if t.get("key") != key]
        version = (node.get("metadata") or {}).get("resourceVersion")
        body: dict = {"spec": {"taints": taints or None}}
        if version:
            body["metadata"] = {"resourceVersion": version}
        self._request(path, "PATCH", body, "application/merge-patch+json")
        return True

    def _active_pods(self) -> list[dict]:
        """Every pod not finished (pending or running), listed once per tick: the client is built per tick
        (policy/handler.py build_ports), so the list is never older than the tick that reads it."""
        if self._active is None:
            self._active = self._pods("status.phase!=Succeeded,status.phase!=Failed")
        return self._active

    def _pending(self, pools: list[str], shapes: Mapping[str, Sequence[NodeShape]] | None):
        """(pool, pod, GPUs) of each unschedulable pending GPU pod that targets exactly one of `pools` (and, with
        `shapes`, could run on one of its elastic groups)."""
        wanted = set(pools)
        for pod in self._active_pods():
            if (pod.get("status") or {}).get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
                continue  # scheduled, only pulling images: not demand for a new node
            if not unschedulable(pod):
                continue  # gated or not yet tried by the scheduler: not (yet) demand for a new node
            gpus = pod_gpus(pod)
            if gpus <= 0:
                continue
            targets = pod_pools(pod) & wanted
            if len(targets) == 1:  # a pod that may go to several pools is not counted twice
                pool = targets.pop()
                if fits_elastic(pod, pool, shapes):
                    yield pool, pod, gpus

    def pending_gpus(
        self, pools: list[str], shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[int, ...]]:
        """GPUs of each unschedulable pending pod per pool. With `shapes` (the pool's elastic groups), only pods
        that could run on one of them: demand the policy can meet by adding elastic nodes."""
        found: dict[str, list[int]] = {p: [] for p in pools}
        for pool, _, gpus in self._pending(pools, shapes):
            found[pool].append(gpus)
        return {p: tuple(v) for p, v in found.items()}

    def pending_gangs(
        self, pools: list[str], shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[PendingGang, ...]]:
        """The pending pods of pending_gpus that belong to a pod group (`gang_of`), grouped per pool and group,
        each group with the creation time of its oldest pending pod (None when one has none: its wait is
        unknown, and an unknown wait never releases anything)."""
        found: dict[str, dict[str, tuple[list[int], list, list[bool]]]] = {p: {} for p in pools}
        for pool, pod, gpus in self._pending(pools, shapes):
            name = gang_of(pod)
            if name is None:
                continue
            pods, created, off_spot = found[pool].setdefault(name, ([], [], []))
            pods.append(gpus)
            created.append(creation_time(pod))
            off_spot.append(on_demand_only(pod, pool))
        return {
            p: tuple(
                PendingGang(
                    name, tuple(sorted(pods, reverse=True)), None if None in created else min(created), any(off_spot)
                )
                for name, (pods, created, off_spot) in sorted(groups.items())
            )
            for p, groups in found.items()
        }

    def pending_on_demand_only(
        self, pools: list[str], shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[int, ...]]:
        """GPUs of the pending pods of pending_gpus (same `shapes`, same pod list: no extra call) that may not run
        on the pool's spot nodes (`on_demand_only`), plus every pod of a gang one of whose pods may not: a gang
        starts whole, so it goes to on-demand whole."""
        pending = list(self._pending(pools, shapes))
        off_spot_gangs = {(pool, gang_of(pod)) for pool, pod, _ in pending if on_demand_only(pod, pool)}
        found: dict[str, list[int]] = {p: [] for p in pools}
        for pool, pod, gpus in pending:
            gang = gang_of(pod)
            if on_demand_only(pod, pool) or (gang is not None and (pool, gang) in off_spot_gangs):
                found[pool].append(gpus)
        return {p: tuple(v) for p, v in found.items()}

    def gpu_pod_arrivals(
        self, pools: list[str], since: datetime, shapes: Mapping[str, Sequence[NodeShape]] | None = None
    ) -> dict[str, tuple[tuple[datetime, int], ...]]:
        """(creation time, GPUs) of each pool's GPU pods created at or after `since` that have not finished
        (pending or running): the pool's recent arrivals for the keep-or-release rule (policy/decide/keep_warm.py). Pods
        that landed at once on a free node count too (a pending-only view would miss exactly the jobs a kept node
        serves). Pods already finished and gone are missed: the rate errs low, so idle nodes go sooner."""
        wanted = set(pools)
        found: dict[str, list[tuple[datetime, int]]] = {p: [] for p in pools}
        for pod in self._active_pods():
            created = creation_time(pod)
            if created is None or created < since:
                continue
            gpus = pod_gpus(pod)
            if gpus <= 0:
                continue
            targets = pod_pools(pod) & wanted
            if len(targets) == 1:
                pool = targets.pop()
                if fits_elastic(pod, pool, shapes):  # floor work keeps no elastic node warm
                    found[pool].append((created, gpus))
        return {p: tuple(sorted(v)) for p, v in found.items()}

    def gpu_pods_by_node(self) -> dict[str, int]:
        """Node name -> unfinished pods bound to it that request a GPU, from the same pod list as pending_gpus
        (no extra call): fresh where CloudWatch's datapoints are minutes old."""
        found: dict[str, int] = {}
        for pod in self._active_pods():
            node = (pod.get("spec") or {}).get("nodeName")
            if node and pod_gpus(pod) > 0:
                found[node] = found.get(node, 0) + 1
        return found
