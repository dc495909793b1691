"""Every AWS call `gpuloan prices refresh` makes, against the preview role's generated policy (issue 35 item 2).

The weekly prices workflow (.github/workflows/prices.yml) runs `gpuloan prices refresh -s <stack>` with the
stack's read-only preview role. This test runs the real command, with the real boto3 clients it builds
(gpuloan/commands/prices.py `_clients`), and records each call at botocore's `before-call` event, the last step before
a request is signed and sent: the IAM action (the service's signing name and the operation name) and the API
parameters. tests/iam_eval.py evaluates each against the preview role's policy document of the shipped plan; a
refused call is answered as AWS answers it (HTTP 403, AccessDenied), so the command sees what it would see in a
real account. The allowed calls get answers shaped like botocore's parsed responses, enough for refresh to go
through every reader (Price List, offerings, instance facts, spot history, Savings Plans, Capacity Blocks, EKS
versions), so a call added to refresh later is recorded too.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from types import SimpleNamespace

import pytest
import yaml
from botocore.awsrequest import AWSResponse
from conftest import REPO, STACKS
from iam_eval import allowed
from test_prices import _product

from gpuloan.commands import prices as cmd_prices

# A type the offline catalog does not know, so refresh reads its facts (DescribeInstanceTypes) as it does for a
# type newer than the table.
NEW_TYPE = "g9x.12xlarge"


def preview_doc(rec) -> dict:
    (pol,) = [r for r in rec.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-github-preview-read")]
    return json.loads(pol.inputs["policy"])


def _answer(action: str, params: dict, region: str) -> dict:
    """A parsed answer to an allowed call, in the shape botocore's parser returns."""
    now = dt.datetime.now(dt.timezone.utc)
    if action == "pricing:GetProducts":
        field = {f["Field"]: f["Value"] for f in params.get("Filters", [])}
        if params.get("ServiceCode") == "AmazonEC2" and "instanceType" in field:
            return {"FormatVersion": "aws_v1", "PriceList": [_product(field["instanceType"], region, ondemand="1.5")]}
        return {"FormatVersion": "aws_v1", "PriceList": []}  # a platform rate left unknown: a note, not a failure
    if action == "ec2:DescribeInstanceTypeOfferings":
        (types,) = [f["Values"] for f in params["Filters"] if f["Name"] == "instance-type"]
        return {
            "InstanceTypeOfferings": [{"InstanceType": t, "LocationType": "region", "Location": region} for t in types]
        }
    if action == "ec2:DescribeInstanceTypes":
        return {
            "InstanceTypes": [
                {
                    "InstanceType": t,
                    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
                    "GpuInfo": {"Gpus": [{"Name": "L4", "Count": 4, "MemoryInfo": {"SizeInMiB": 23040}}]},
                }
                for t in params["InstanceTypes"]
            ]
        }
    if action == "ec2:DescribeSpotPriceHistory":
        (t,) = params["InstanceTypes"]
        return {
            "SpotPriceHistory": [
                {
                    "AvailabilityZone": f"{region}a",
                    "InstanceType": t,
                    "SpotPrice": "0.5",
                    "ProductDescription": "Linux/UNIX",
                    "Timestamp": now,
                }
            ]
        }
    if action == "savingsplans:DescribeSavingsPlansOfferingRates":
        return {"searchResults": []}
    if action == "ec2:DescribeCapacityBlockOfferings":
        return {"CapacityBlockOfferings": []}
    if action == "eks:DescribeClusterVersions":
        return {
            "clusterVersions": [
                {
                    "clusterVersion": v,
                    "versionStatus": "STANDARD_SUPPORT",
                    "status": "standard-support",
                    "endOfStandardSupportDate": now,
                }
                for v in params.get("clusterVersions", [])
            ]
        }
    return {}  # a call this table does not know yet: still recorded and evaluated


class RecordedCalls:
    """botocore event handlers: the API parameters of each call (before-parameter-build) and its answer
    (before-call), allowed or refused by the role's policy document."""

    def __init__(self, doc: dict, region: str):
        self.doc, self.region = doc, region
        self.calls: list[tuple[str, bool]] = []
        self._params: dict = {}

    def attach(self, client) -> None:
        client.meta.events.register("before-parameter-build", self._keep_params)
        client.meta.events.register("before-call", self._answer)

    def _keep_params(self, params, model, **_):
        self._params = dict(params)

    def _answer(self, model, **_):
        action = f"{model.service_model.signing_name}:{model.name}"
        ok = allowed(self.doc, action, "*", {"aws:RequestedRegion": self.region})
        self.calls.append((action, ok))
        if not ok:
            error = {
                "Error": {"Code": "AccessDenied", "Message": f"not authorized to perform: {action}"},
                "ResponseMetadata": {"HTTPStatusCode": 403},
            }
            return AWSResponse("https://aws.invalid", 403, {}, None), error
        return AWSResponse("https://aws.invalid", 200, {}, None), _answer(action, self._params, self.region)


def _refresh_as_preview_role(stack: str, doc: dict, tmp_path, monkeypatch) -> tuple[int, RecordedCalls]:
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "ASIAPREVIEW"),
        ("AWS_SECRET_ACCESS_KEY", "x"),
        ("AWS_SESSION_TOKEN", "x"),
    ):
        monkeypatch.setenv(key, value)  # what configure-aws-credentials exports for the assumed role
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    stack_file = tmp_path / f"Pulumi.{stack}.yaml"
    shutil.copy(REPO / stack_file.name, stack_file)
    region, _, _ = cmd_prices.stack_targets(yaml.safe_load(stack_file.read_text()))
    recorder = RecordedCalls(doc, region)
    clients = cmd_prices._clients(region, None)  # the clients `prices refresh` builds, endpoints and regions
    for client in clients:
        recorder.attach(client)
    args = SimpleNamespace(
        stack_option=str(stack_file),
        instance_type=[NEW_TYPE],
        profile=None,
        output=str(tmp_path / "gpuloan-prices.json"),
        cache=False,
    )
    rc = cmd_prices.run_refresh(args, clients=clients)
    return rc, recorder


@pytest.mark.parametrize("stack", STACKS)
def test_the_preview_role_may_make_every_call_of_prices_refresh(recorded, stack, tmp_path, monkeypatch, capsys):
    rc, recorder = _refresh_as_preview_role(stack, preview_doc(recorded(stack)), tmp_path, monkeypatch)
    refused = sorted({action for action, ok in recorder.calls if not ok})
    assert refused == [], f"the preview role lacks {refused}: the weekly prices workflow fails on them"
    # Every reader ran, so the recording covers each kind of call refresh makes.
    assert {action for action, _ in recorder.calls} == {
        "pricing:GetProducts",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeSpotPriceHistory",
        "savingsplans:DescribeSavingsPlansOfferingRates",
        "ec2:DescribeCapacityBlockOfferings",
        "eks:DescribeClusterVersions",
    }
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert (tmp_path / "gpuloan-prices.json").exists()
    assert "STANDARD_SUPPORT" in out.err  # the EKS version status, read through versionStatus


def test_a_refused_call_is_answered_as_aws_answers_it(tmp_path, monkeypatch, capsys):
    """The recorder is able to fail: a policy without the offerings read stops refresh as the workflow saw it."""
    doc = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["pricing:GetProducts"], "Resource": "*"}],
    }
    rc, recorder = _refresh_as_preview_role("dev", doc, tmp_path, monkeypatch)
    assert recorder.calls[0] == ("ec2:DescribeInstanceTypeOfferings", False)
    assert rc == cmd_prices.EXIT_PARTIAL
    assert "AccessDenied" in capsys.readouterr().err
    assert not (tmp_path / "gpuloan-prices.json").exists()
