"""A local fake of the Kubernetes API, over HTTPS with a throwaway self-signed CA.

Serves GET /api/v1/pods (paged with limit/continue, fieldSelector on status.phase and spec.nodeName as the API
server applies them), GET and PATCH (merge patch; a resourceVersion in the patch that is not the node's answers 409, as the API server
does) /api/v1/nodes/<name>; checks the EKS bearer token's shape
(k8s-aws-v1.<base64url of a presigned STS GetCallerIdentity URL carrying x-k8s-aws-id>), and can be switched to
fail (503), to fail only node-scoped pod lists, to answer slowly (`delay_s`) or to drip its whole answer a byte at a
time (`drip_s_per_byte`), for the fault tests.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _self_signed() -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return cert_pem, key_pem


def gpu_pod(
    name: str,
    gpus: int,
    pool: str | None = None,
    affinity_pools: list[str] | None = None,
    node_name: str | None = None,
    scheduled: str | None = "Unschedulable",
    gates: list[str] | None = None,
    phase: str = "Pending",
    annotations: dict | None = None,
    node_selector: dict | None = None,
    tolerations: list[dict] | None = None,
) -> dict:
    """A pod as the API server returns it. `scheduled`: the reason of its PodScheduled=False condition as the
    scheduler sets it (Unschedulable: no node fits; SchedulingGated: held by `gates`), None = not tried yet."""
    spec: dict = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if pool:
        spec["nodeSelector"] = {"gpuloan.io/pool": pool}
    if node_selector:
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **node_selector}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if affinity_pools:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpuloan.io/pool", "operator": "In", "values": affinity_pools}]}
                    ]
                }
            }
        }
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict = {"phase": phase}
    if node_name:
        spec["nodeName"] = node_name
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    elif scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": scheduled}]
    meta = {"name": name, "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec, "status": status}


def _field_selector(text: str):
    """The API server's fieldSelector for pods: comma-separated `field=value` / `field!=value` terms, all of
    which must match."""
    terms = []
    for term in filter(None, text.split(",")):
        negate = "!=" in term
        key, _, value = term.partition("!=" if negate else "=")
        terms.append((key, value, negate))

    def match(pod: dict) -> bool:
        for key, value, negate in terms:
            if key == "status.phase" and (pod["status"].get("phase", "") == value) == negate:
                return False
            if negate:
                continue
            if key == "spec.nodeName" and (pod["spec"].get("nodeName") or "") != value:
                return False
        return True

    return match


class FakeKube:
    def __init__(self, cluster_name: str, page_size: int = 2):
        self.cluster_name = cluster_name
        self.pods: list[dict] = []
        self.page_size = page_size
        self.fail_status: int | None = None
        self.fail_node_pods: int | None = None  # status for pod lists scoped to a node only
        # pods only lists scoped to a node see: a pod that landed after the tick's cluster-wide list was read
        self.late_pods: list[dict] = []
        self.delay_s = 0.0
        self.drip_s_per_byte = 0.0  # > 0: status line, headers and body sent one byte at a time, this far apart
        self.nodes: dict[str, dict] = {}  # name -> Node object
        self.patches: list[tuple[str, dict]] = []
        self.cluster_queues: dict[str, dict] = {}  # name -> ClusterQueue (kueue.x-k8s.io), GET and JSON patch
        self.requests: list[str] = []
        self.bad_tokens = 0
        cert_pem, key_pem = _self_signed()
        self.ca_pem = cert_pem
        self._dir = tempfile.TemporaryDirectory()
        cert_file, key_file = Path(self._dir.name, "c.pem"), Path(self._dir.name, "k.pem")
        cert_file.write_text(cert_pem)
        key_file.write_text(key_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_file, key_file)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _common(self) -> bool:
                fake.requests.append(f"{self.command} {self.path}")
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                if not fake._token_ok(self.headers.get("Authorization", "")):
                    fake.bad_tokens += 1
                    self._send(401, {"kind": "Status", "reason": "Unauthorized"})
                    return False
                if fake.fail_status:
                    self._send(fake.fail_status, {"kind": "Status", "reason": "fake failure"})
                    return False
                return True

            def do_PATCH(self):  # noqa: N802
                fake._patch(self)

            def do_GET(self):  # noqa: N802
                fake._get(self)

            def _send(self, code: int, body: dict):
                data = json.dumps(body).encode()
                if fake.drip_s_per_byte:
                    raw = (
                        f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                        f"Connection: close\r\n\r\n"
                    ).encode() + data
                    self.close_connection = True
                    try:
                        for k in range(len(raw)):
                            self.wfile.write(raw[k : k + 1])
                            self.wfile.flush()
                            time.sleep(fake.drip_s_per_byte)
                    except OSError:  # the client gave up: what the drip test wants
                        pass
                    return
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.endpoint = f"https://localhost:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _patch(self, handler) -> None:
        """A PATCH: a ClusterQueue (JSON patch), a pod's annotations or a node (merge patches)."""
        body = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length", 0))) or b"{}")
        if not handler._common():
            return
        path = urllib.parse.urlparse(handler.path).path
        if "/clusterqueues/" in path:  # a JSON patch (RFC 6902: test, replace) of a ClusterQueue
            name = urllib.parse.unquote(path.rsplit("/", 1)[1])
            cq = self.cluster_queues.get(name)
            if cq is None or handler.headers.get("Content-Type") != "application/json-patch+json":
                return handler._send(404 if cq is None else 415, {"kind": "Status"})
            self.patches.append((f"clusterqueues/{name}", body))
            for op in body:
                *parents, last = op["path"].strip("/").split("/")
                target = cq
                for key in parents:
                    target = target[int(key)] if isinstance(target, list) else target[key]
                key = int(last) if isinstance(target, list) else last
                if op["op"] == "test" and target[key] != op["value"]:
                    return handler._send(422, {"kind": "Status", "reason": "Invalid"})
                if op["op"] in ("replace", "add"):  # add on an object member: set it (RFC 6902 4.1)
                    target[key] = op["value"]
            return handler._send(200, cq)
        if path.startswith("/api/v1/namespaces/"):  # a pod: merge its annotations
            _, _, _, ns, _, pod_name = path.strip("/").split("/")
            pod = next(
                (p for p in self.pods if p["metadata"]["name"] == pod_name and p["metadata"].get("namespace") == ns),
                None,
            )
            if pod is None or handler.headers.get("Content-Type") != "application/merge-patch+json":
                return handler._send(404 if pod is None else 415, {"kind": "Status"})
            self.patches.append((f"{ns}/{pod_name}", body))
            annotations = pod["metadata"].setdefault("annotations", {})
            annotations.update((body.get("metadata") or {}).get("annotations") or {})
            return handler._send(200, pod)
        name = urllib.parse.unquote(path.removeprefix("/api/v1/nodes/"))
        if name not in self.nodes or handler.headers.get("Content-Type") != "application/merge-patch+json":
            return handler._send(404 if name not in self.nodes else 415, {"kind": "Status"})
        meta = self.nodes[name].setdefault("metadata", {})
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if sent is not None and sent != meta.get("resourceVersion"):
            # as the API server does with a resourceVersion in a patch: the object changed since it was read
            return handler._send(409, {"kind": "Status", "reason": "Conflict"})
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)
        self.patches.append((name, body))
        spec = self.nodes[name].setdefault("spec", {})
        for key, value in (body.get("spec") or {}).items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
        return handler._send(200, self.nodes[name])

    def _get(self, handler) -> None:
        """A GET: a ClusterQueue, a node, or a page of the pod list (fieldSelector, limit, continue)."""
        if not handler._common():
            return
        url = urllib.parse.urlparse(handler.path)
        if "/clusterqueues/" in url.path:
            cq = self.cluster_queues.get(urllib.parse.unquote(url.path.rsplit("/", 1)[1]))
            return handler._send(200, cq) if cq is not None else handler._send(404, {"kind": "Status"})
        if url.path.startswith("/api/v1/nodes/"):
            name = urllib.parse.unquote(url.path.removeprefix("/api/v1/nodes/"))
            if name not in self.nodes:
                return handler._send(404, {"kind": "Status", "reason": "NotFound"})
            return handler._send(200, self.nodes[name])
        if url.path != "/api/v1/pods":
            return handler._send(404, {"kind": "Status", "reason": "NotFound"})
        q = urllib.parse.parse_qs(url.query)
        selector = (q.get("fieldSelector") or [""])[0]
        if self.fail_node_pods and "spec.nodeName=" in selector and not selector.endswith("spec.nodeName="):
            return handler._send(self.fail_node_pods, {"kind": "Status", "reason": "self failure"})
        start = int((q.get("continue") or ["0"])[0])
        limit = min(int((q.get("limit") or ["500"])[0]), self.page_size)
        scoped = "spec.nodeName=" in selector and not selector.endswith("spec.nodeName=")
        selected = [p for p in self.pods + (self.late_pods if scoped else []) if _field_selector(selector)(p)]
        page = selected[start : start + limit]
        more = start + limit < len(selected)
        return handler._send(
            200,
            {"kind": "PodList", "items": page, "metadata": {"continue": str(start + limit) if more else ""}},
        )

    def add_node(self, name: str, unschedulable: bool = False, annotations: dict | None = None) -> None:
        meta = {"name": name, "resourceVersion": "1", **({"annotations": annotations} if annotations else {})}
        self.nodes[name] = {"kind": "Node", "metadata": meta, "spec": {"unschedulable": True} if unschedulable else {}}

    def _token_ok(self, header: str) -> bool:
        if not header.startswith("Bearer k8s-aws-v1."):
            return False
        raw = header.removeprefix("Bearer k8s-aws-v1.")
        try:
            url = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        except ValueError:
            return False
        q = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
        return (
            q.get("Action") == ["GetCallerIdentity"]
            and "X-Amz-Signature" in q
            and "x-k8s-aws-id" in (q.get("X-Amz-SignedHeaders") or [""])[0]
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._dir.cleanup()
