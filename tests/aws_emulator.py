"""moto's AWS emulator as a real HTTP server on a free local port, shared by the integration tests.

Tests talk to it over HTTP exactly as the Lambda talks to AWS (boto3 with AWS_ENDPOINT_URL), so what is
tested is the real request/response path, not an in-process patch.
"""

from __future__ import annotations

import os
import socket

import pytest
import requests
from moto.server import ThreadedMotoServer

REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_server():
    """Start one moto server for the session; yields its endpoint URL."""
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_env(moto_server, monkeypatch):
    """Point boto3 at the emulator with dummy credentials; reset the emulator's state after the test."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield moto_server
    requests.post(f"{moto_server}/moto-api/reset", timeout=10)


def emulator_env(endpoint: str) -> dict[str, str]:
    """Environment for a subprocess (e.g. the extracted Lambda) that should talk to the emulator."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }
    )
    return env


def eks_asg_tags(cluster: str, nodegroup: str) -> list[dict]:
    """The tags EKS puts on a managed node group's Auto Scaling group (docs/aws-rules.md): moto's EKS makes no
    ASG, so the tests create it, tagged as EKS tags it; the policy finds each group's ASG by these tags."""
    return [
        {"ResourceId": "", "ResourceType": "auto-scaling-group", "Key": key, "Value": value, "PropagateAtLaunch": True}
        for key, value in (("eks:cluster-name", cluster), ("eks:nodegroup-name", nodegroup))
    ]


class CapacityReservationsFake:
    """EC2 at the HTTP level for what moto lacks (DESIGN.md: no capacity reservations): DescribeCapacityReservations
    answered from `reservations` (id -> (state, start, end)) in EC2's query-protocol XML; every other EC2 request is
    passed to moto unchanged. Point a client at it with AWS_ENDPOINT_URL_EC2 (botocore's per-service endpoint)."""

    def __init__(self, moto_endpoint: str, reservations: dict):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qs

        fake = self
        self.reservations = reservations
        self.asked: list[list[str]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                form = parse_qs(body.decode())
                if form.get("Action") == ["DescribeCapacityReservations"]:
                    ids = [v[0] for k, v in sorted(form.items()) if k.startswith("CapacityReservationId.")]
                    fake.asked.append(ids)
                    self._send(200, fake._xml(ids).encode(), "text/xml")
                    return
                resp = requests.post(
                    moto_endpoint + self.path,
                    data=body,
                    timeout=30,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")},
                )
                self._send(resp.status_code, resp.content, resp.headers.get("Content-Type", "text/xml"))

            def _send(self, status, data, content_type):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _xml(self, ids: list[str]) -> str:
        items = "".join(
            f"<item><capacityReservationId>{rid}</capacityReservationId><state>{state}</state>"
            f"<startDate>{start.strftime('%Y-%m-%dT%H:%M:%S.000Z')}</startDate>"
            f"<endDate>{end.strftime('%Y-%m-%dT%H:%M:%S.000Z')}</endDate>"
            "<reservationType>capacity-block</reservationType></item>"
            for rid, (state, start, end) in self.reservations.items()
            if rid in ids
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?><DescribeCapacityReservationsResponse '
            'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>fake</requestId>'
            f"<capacityReservationSet>{items}</capacityReservationSet></DescribeCapacityReservationsResponse>"
        )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
