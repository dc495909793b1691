"""Issue 42 item 3: a DescribeInstances failure is reported as itself, not as a CloudWatch error.

Without DescribeInstances a node's Kubernetes name is unknown (""); the CloudWatch query for it carried an empty
NodeName dimension, which botocore refuses for the whole GetMetricData call: every node lost its utilization and
the tick's errors blamed CloudWatch. Against a real botocore CloudWatch client (Stubber for AWS's answer, so the
client's own parameter validation runs) the named node is still read and the only error is EC2's.
"""

from __future__ import annotations

from datetime import timedelta

import boto3
from botocore.stub import Stubber

from policy.errors import DataUnavailable
from policy.model import LIFECYCLE_IN_SERVICE
from policy.ports import GroupState, Instance
from policy.tick import Ports, observe
from policy.io.cloudwatch import CloudWatchUtilization
from policy_cases import NOW, OD, SPOT, group, settings

EC2_FAILURE = "EC2 DescribeInstances: AccessDenied: not authorized"


class GroupsWithoutNames:
    """The node group port as AwsNodeGroups leaves it when DescribeInstances fails: the groups read, their
    instances without launch time or node name, the EC2 failure reported through on_error."""

    def read(self, names, now, activities_for=frozenset(), on_error=None):
        on_error(DataUnavailable(EC2_FAILURE))
        named = Instance("i-0000000000000000a", SPOT, LIFECYCLE_IN_SERVICE, NOW - timedelta(hours=2), "ip-10-0-0-1")
        unnamed = Instance("i-0000000000000000b", SPOT, LIFECYCLE_IN_SERVICE, None, "")
        return {SPOT: GroupState(group(SPOT, 2), (named, unnamed)), OD: GroupState(group(OD, 0), ())}


def test_a_describe_instances_failure_is_the_error_reported_and_named_nodes_are_still_read():
    cloudwatch = boto3.client(
        "cloudwatch", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    util = CloudWatchUtilization(cloudwatch, "gpuloan-dev")
    stamps = [NOW - timedelta(minutes=m) for m in range(1, 31)]
    errors: list[str] = []
    with Stubber(cloudwatch) as stub:
        stub.add_response(
            "get_metric_data",
            {
                "MetricDataResults": [
                    {"Id": qid, "Timestamps": stamps, "Values": [0.0] * len(stamps), "StatusCode": "Complete"}
                    for qid in ("a0", "m0", "r0")
                ]
            },
        )
        obs = observe(settings(), Ports(GroupsWithoutNames(), util), {}, NOW, errors)
        stub.assert_no_pending_responses()
    assert any(EC2_FAILURE in e for e in errors), errors
    assert not any("CloudWatch" in e for e in errors), errors
    nodes = {n.instance_id: n for n in obs.pools[0].nodes}
    assert nodes["i-0000000000000000a"].max_utilization_pct == 0.0  # read
    assert nodes["i-0000000000000000b"].max_utilization_pct is None  # unknown: counts as busy
