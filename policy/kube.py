"""Pending GPU pods per pool from the cluster's Kubernetes API: standard-library HTTPS, EKS bearer token.

The token is what `aws eks get-token` makes: a presigned STS GetCallerIdentity URL (header x-k8s-aws-id =
cluster name), base64url-encoded behind `k8s-aws-v1.`. The API server's CA comes from EKS DescribeCluster, so
TLS is verified against the cluster's own CA, never disabled.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Protocol

from policy.errors import DataUnavailable, Throttled

GPU_RESOURCE = "nvidia.com/gpu"
POOL_LABEL = "gpuloan.io/pool"  # same key as stacks.tags.LABEL_POOL (the Lambda zip does not ship stacks/)
PAGE_SIZE = 500
TIMEOUT_SECONDS = 10
TOKEN_TTL_SECONDS = 60


def eks_token(sts_client, credentials, cluster_name: str) -> str:
    """A bearer token for the EKS API server, signed with the function's own credentials (botocore signer).
    `credentials`: boto3.Session().get_credentials()."""
    from botocore.signers import RequestSigner

    region = sts_client.meta.region_name
    signer = RequestSigner(sts_client.meta.service_model.service_id, region, "sts", "v4",
                           credentials, sts_client.meta.events)
    params = {
        "method": "GET",
        "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {"x-k8s-aws-id": cluster_name},
        "context": {},
    }
    url = signer.generate_presigned_url(params, region_name=region, expires_in=TOKEN_TTL_SECONDS, operation_name="")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def pod_gpus(pod: dict) -> int:
    """GPUs a pod asks for: the larger of its app containers' sum and its largest init container (k8s rule)."""
    spec = pod.get("spec") or {}

    def gpus(c: dict) -> int:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0
        try:
            return int(value)
        except (TypeError, ValueError):
            return 0

    app = sum(gpus(c) for c in spec.get("containers") or [])
    init = max((gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(app, init)


def pod_pools(pod: dict) -> set[str]:
    """Pools a pod can only run on: its nodeSelector, or required node affinity `gpuloan.io/pool In [...]`."""
    spec = pod.get("spec") or {}
    selected = (spec.get("nodeSelector") or {}).get(POOL_LABEL)
    if selected:
        return {selected}
    pools: set[str] = set()
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == POOL_LABEL and expr.get("operator") == "In":
                pools.update(expr.get("values") or [])
    return pools


def unschedulable(pod: dict) -> bool:
    """The scheduler tried the pod and found no node for it: condition PodScheduled=False, reason Unschedulable
    (what cluster-autoscaler scales for). A pod behind scheduling gates (reason SchedulingGated) waits for a
    controller, not for capacity; one the scheduler has not tried yet usually lands on a free GPU within seconds.
    Neither is demand for a new node: the next tick sees the pod again if it does turn out unschedulable."""
    if (pod.get("spec") or {}).get("schedulingGates"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
    return False


class PendingPodsPort(Protocol):
    def pending_gpus(self, pools: list[str]) -> dict[str, tuple[int, ...]]: ...


class KubePendingPods:
    """Lists Pending pods the scheduler could not place (paged) and groups their GPU requests by target pool."""

    def __init__(self, endpoint: str, ca_pem: str | None, token: Callable[[], str]):
        self._endpoint = endpoint.rstrip("/")
        self._token = token
        self._ctx = None
        if self._endpoint.startswith("https://"):
            self._ctx = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
        self.calls = 0

    def _get(self, path: str) -> dict:
        req = urllib.request.Request(self._endpoint + path, headers={
            "Authorization": f"Bearer {self._token()}", "Accept": "application/json"})
        self.calls += 1
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_SECONDS, context=self._ctx) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as err:
            if err.code == 429 or err.code >= 500:
                raise Throttled(f"Kubernetes API {err.code} on {path}") from err
            raise DataUnavailable(f"Kubernetes API {err.code} on {path}: {err.reason}") from err
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise DataUnavailable(f"Kubernetes API unreachable: {err}") from err

    def pending_gpus(self, pools: list[str]) -> dict[str, tuple[int, ...]]:
        wanted = set(pools)
        found: dict[str, list[int]] = {p: [] for p in pools}
        cont = ""
        while True:
            query = {"fieldSelector": "status.phase=Pending,spec.nodeName=", "limit": str(PAGE_SIZE)}
            if cont:
                query["continue"] = cont
            page = self._get("/api/v1/pods?" + urllib.parse.urlencode(query))
            for pod in page.get("items") or []:
                if (pod.get("spec") or {}).get("nodeName"):
                    continue  # scheduled, only pulling images: not demand for a new node
                if not unschedulable(pod):
                    continue  # gated or not yet tried by the scheduler: not (yet) demand for a new node
                gpus = pod_gpus(pod)
                if gpus <= 0:
                    continue
                targets = pod_pools(pod) & wanted
                if len(targets) == 1:  # a pod that may go to several pools is not counted twice
                    found[targets.pop()].append(gpus)
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                break
        return {p: tuple(v) for p, v in found.items()}
