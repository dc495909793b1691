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
    env.update({
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    })
    return env


def eks_asg_tags(cluster: str, nodegroup: str) -> list[dict]:
    """The tags EKS puts on a managed node group's Auto Scaling group (docs/aws-rules.md): moto's EKS makes no
    ASG, so the tests create it, tagged as EKS tags it; the policy finds each group's ASG by these tags."""
    return [{"ResourceId": "", "ResourceType": "auto-scaling-group", "Key": key, "Value": value,
             "PropagateAtLaunch": True}
            for key, value in (("eks:cluster-name", cluster), ("eks:nodegroup-name", nodegroup))]
