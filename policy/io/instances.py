"""EC2 DescribeInstances: which pool of this environment an instance is, and its Kubernetes node name (the early
spot warnings of policy/rebalance.py)."""

from __future__ import annotations

from policy.model import Settings

ENVIRONMENT_TAG, POOL_TAG = "gpuloan:environment", "gpuloan:pool"  # config/tags.py, on every GPU instance


def describe(ec2, settings: Settings, instance_id: str) -> tuple[str, str] | None:
    """(pool, node name) of the instance when it carries this environment's tag, else None. One DescribeInstances;
    the node name is the instance's private DNS name, as EKS registers nodes of its AMIs (policy/io/nodegroups.py)."""
    resp = ec2.describe_instances(
        Filters=[
            {"Name": "instance-id", "Values": [instance_id]},
            {"Name": f"tag:{ENVIRONMENT_TAG}", "Values": [settings.environment]},
        ]
    )
    for r in resp.get("Reservations", []):
        for inst in r.get("Instances", []):
            tags = {t.get("Key"): t.get("Value") for t in inst.get("Tags") or []}
            return tags.get(POOL_TAG, ""), inst.get("PrivateDnsName", "")
    return None
