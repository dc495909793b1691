"""End to end for a Capacity Block floor: the packaged Lambda, against the moto server and the fake Kubernetes API
(tests/policy/test_policy_e2e.py's harness), raises the block's node group and its Kueue floor quota at the block's start
and drains the block ahead of EKS's scale-down. Asserts what changed in the emulator and the fake API."""

from __future__ import annotations

import io
import zipfile
from datetime import timedelta

import pytest

from aws_emulator import CapacityReservationsFake
from conftest import requires_shared_prices, resolved_prices
from fake_kube import FakeKube, gpu_pod
from policy import capacity_blocks as cb
from pricing import checks
from config import scheduling
from stacks.kubernetes.kueue import cluster_queue_manifest
from stacks.policy_function.package import build_zip
from pricing.policy_settings import settings_for
from test_policy_e2e import CLUSTER, GROUPS, NOW, World, _cfg, _env, run_lambda

START = NOW - timedelta(minutes=1)
END = START + timedelta(days=7)
SCALE_DOWN = END - timedelta(minutes=40)
DRAIN = SCALE_DOWN - timedelta(minutes=30)


def _block_cfg():
    cfg = _cfg()
    data = cfg.model_dump(mode="json", exclude_unset=True)
    data["pools"][0]["guaranteed"].update(
        reservation="capacity_block",
        reservation_id="cr-0123456789abcdef0",
        availability_zone="us-east-1a",
        rate={"usd_per_hour": 1.0, "source": "test value standing in for the block's quote"},
        capacity_block_start=START.isoformat(),
        capacity_block_end=END.isoformat(),
    )
    return checks.parse(data, prices=resolved_prices())


@pytest.fixture(scope="module")
def block_lambda(tmp_path_factory):
    cfg = _block_cfg()
    s = settings_for(resolved_prices(), cfg, CLUSTER, GROUPS)
    root = tmp_path_factory.mktemp("lambda-block")
    zipfile.ZipFile(io.BytesIO(build_zip(settings_json=s.to_json()))).extractall(root)
    return root, s, cfg


@pytest.fixture
def kube():
    k = FakeKube(CLUSTER)
    yield k
    k.close()


RID = "cr-0123456789abcdef0"


@pytest.fixture
def ec2_blocks(aws_env):
    """EC2 with the block (moto has no capacity reservations): its dates as config has them, unless a test
    changes them."""
    fake = CapacityReservationsFake(aws_env, {RID: ("active", START, END)})
    yield fake
    fake.close()


def _env_with(w: World, kube: FakeKube, ec2_blocks) -> dict:
    return {**_env(w, kube), "AWS_ENDPOINT_URL_EC2": ec2_blocks.endpoint}


def _world(aws_env, kube, cfg, floor_desired: int) -> World:
    w = World(aws_env)
    w.floor = w.group("dev-research-guaranteed", floor_desired, 1)
    w.group("dev-research-spot", 0)
    w.group("dev-train-spot", 0, 3)
    w.group("dev-train-on-demand", 0, 3)
    research = cfg.pools[0]
    # Every queue as the stack makes it, with the status Kueue writes (each flavor listed, nothing in use): the
    # tick reads them all for the loan's usage (policy/loan_usage.py)
    for q in scheduling.plan(cfg).queues:
        kube.cluster_queues[q.name] = {
            **cluster_queue_manifest(cfg, q),
            "status": {
                "flavorsUsage": [
                    {"name": f.flavor, "resources": [{"name": "nvidia.com/gpu", "total": "0"}]} for f in q.flavors
                ]
            },
        }
    cq = kube.cluster_queues[scheduling.cluster_queue_name(cfg, research)]
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 0 if not floor_desired else 1
    return w


def _quota(kube: FakeKube, cfg) -> int:
    cq = kube.cluster_queues[scheduling.cluster_queue_name(cfg, cfg.pools[0])]
    return cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]


@requires_shared_prices
def test_the_lambda_raises_the_block_and_its_quota_at_the_start(block_lambda, kube, aws_env, ec2_blocks):
    root, s, cfg = block_lambda
    w = _world(aws_env, kube, cfg, 0)
    result, logs = run_lambda(
        root, aws_env, s.to_json(), _env_with(w, kube, ec2_blocks), {}, clock=START + timedelta(seconds=20)
    )
    assert result["errors"] == []
    assert w.desired("dev-research-guaranteed") == 1  # the floor's `nodes`, with no `pulumi up`
    assert _quota(kube, cfg) == 1  # Kueue admits the pool's work to the block (1 x g6.xlarge = 1 GPU)
    research = next(x for x in logs if x.get("message") == "pool decision" and x["pool"] == "research")
    assert {a["reason"] for a in research["actions"]} >= {"CAPACITY_BLOCK_START"}


@requires_shared_prices
def test_the_lambda_drains_the_block_ahead_of_ekss_scale_down(block_lambda, kube, aws_env, ec2_blocks):
    root, s, cfg = block_lambda
    w = _world(aws_env, kube, cfg, 1)
    node = w.dns(w.floor[0])
    kube.add_node(node)
    kube.pods = [
        gpu_pod("train-step", 1, pool="research", node_name=node, phase="Running"),
        gpu_pod("elsewhere", 1, pool="research", node_name="other", phase="Running"),
    ]
    result, _ = run_lambda(
        root, aws_env, s.to_json(), _env_with(w, kube, ec2_blocks), {}, clock=DRAIN + timedelta(minutes=1)
    )
    assert result["errors"] == [] and ec2_blocks.asked == [[RID]]
    by = SCALE_DOWN.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (node, {"spec": {"unschedulable": True}}) in kube.patches  # cordoned: nothing new lands there
    assert kube.pods[0]["metadata"]["annotations"] == {cb.CHECKPOINT_BY_ANNOTATION: by}
    assert "annotations" not in kube.pods[1]["metadata"]  # a pod on another node is not the block's
    assert w.desired("dev-research-guaranteed") == 1 and w.instances("dev-research-guaranteed") == w.floor
    assert _quota(kube, cfg) == 0  # Kueue admits new work to the elastic flavors from the drain on


@requires_shared_prices
def test_the_lambda_keeps_an_extended_block_and_says_config_is_behind(block_lambda, kube, aws_env, ec2_blocks):
    """Issue 35 item 7: the block was extended by a week (EC2's EndDate); config still has the old end. At the old
    drain time nothing is cordoned, marked or lowered, and the tick's errors say that EC2 and config differ."""
    root, s, cfg = block_lambda
    ec2_blocks.reservations[RID] = ("active", START, END + timedelta(days=7))
    w = _world(aws_env, kube, cfg, 1)
    node = w.dns(w.floor[0])
    kube.add_node(node)
    kube.pods = [gpu_pod("train-step", 1, pool="research", node_name=node, phase="Running")]
    result, _ = run_lambda(
        root, aws_env, s.to_json(), _env_with(w, kube, ec2_blocks), {}, clock=DRAIN + timedelta(minutes=1)
    )
    assert not kube.patches and "annotations" not in kube.pods[0]["metadata"]
    assert w.desired("dev-research-guaranteed") == 1 and _quota(kube, cfg) == 1
    assert any(RID in e and "follows EC2" in e for e in result["errors"])
