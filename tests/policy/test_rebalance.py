"""Early spot warnings (policy/rebalance.py, docs/policy.md "Early spot warnings"): on EC2's rebalance
recommendation the packaged function taints the named node of an opted-in pool, and does nothing else."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from conftest import requires_shared_prices, run_stack, stack_config, resolved_prices
from config import config
from stacks.policy_function.package import build_zip
from pricing.policy_settings import settings_for
from test_policy_e2e import CLUSTER, GROUPS, _cfg, _env, kube, run_lambda, world  # noqa: F401 - fixtures

TAINT = "gpuloan.io/rebalance-recommended"


def _opted_settings():
    cfg = _cfg()
    pools = [
        p.model_copy(update={"elastic": p.elastic.model_copy(update={"rebalance_checkpoint": True})})
        if p.name == "train"
        else p
        for p in cfg.pools
    ]
    return settings_for(resolved_prices(), cfg.model_copy(update={"pools": pools}), CLUSTER, GROUPS)


@pytest.fixture(scope="module")
def opted_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lambda-rebalance")
    zipfile.ZipFile(io.BytesIO(build_zip(settings_json=_opted_settings().to_json()))).extractall(root)
    return root


def _event(instance_id) -> dict:
    return {
        "source": "aws.ec2",
        "detail-type": "EC2 Instance Rebalance Recommendation",
        "detail": {"instance-id": instance_id},
    }


def _train_instance(world, kube, pool: str = "train") -> tuple[str, str]:
    world.asg.update_auto_scaling_group(AutoScalingGroupName=world.asg_of["dev-train-spot"], DesiredCapacity=1)
    (iid,) = world.instances("dev-train-spot")
    world.ec2.create_tags(Resources=[iid], Tags=[{"Key": "gpuloan:pool", "Value": pool}])
    name = world.dns(iid)
    kube.add_node(name)
    return iid, name


@requires_shared_prices
def test_a_rebalance_recommendation_taints_the_node_of_an_opted_in_pool_and_runs_no_tick(
    world, kube, opted_dir, aws_env
):
    iid, name = _train_instance(world, kube)
    settings = _opted_settings()
    result, logs = run_lambda(opted_dir, aws_env, settings.to_json(), _env(world, kube), _event(iid))
    assert result["errors"] == [] and result["skipped"] == "rebalance recommendation: node tainted"
    assert [t["key"] for t in kube.nodes[name]["spec"]["taints"]] == [TAINT]
    assert kube.nodes[name]["spec"]["taints"][0]["effect"] == "NoSchedule"
    assert result["changes"] == []  # no capacity change: Capacity Rebalancing launches the replacement
    assert not any(r.startswith("GET /api/v1/pods") for r in kube.requests)  # no tick
    assert "Item" not in world.ddb.get_item(TableName=world.table, Key={"pk": {"S": "lease"}})
    assert any(x.get("message", "").startswith("rebalance recommendation: node tainted") for x in logs)


@requires_shared_prices
def test_a_pool_that_did_not_opt_in_is_left_alone(world, kube, opted_dir, aws_env):
    iid, name = _train_instance(world, kube, pool="research")
    result, _ = run_lambda(opted_dir, aws_env, _opted_settings().to_json(), _env(world, kube), _event(iid))
    assert result["errors"] == [] and "did not opt in" in result["skipped"]
    assert kube.nodes[name]["spec"].get("taints") is None and kube.requests == []


@requires_shared_prices
@pytest.mark.parametrize("detail", [None, {"instance-id": "i-0; drop"}, {"instance-id": 7}])
def test_a_malformed_recommendation_is_an_error_and_changes_nothing(world, kube, opted_dir, aws_env, detail):
    event = {**_event("i-0123456789abcdef0"), "detail": detail}
    result, logs = run_lambda(opted_dir, aws_env, _opted_settings().to_json(), _env(world, kube), event)
    assert any(e.startswith("malformed rebalance recommendation ignored") for e in result["errors"])
    assert kube.requests == [] and any("_aws" in x and x.get("PolicyErrors", 0) >= 1 for x in logs)


def test_the_rebalance_rule_exists_only_when_a_pool_opts_in_and_only_it_may_invoke(recorded):
    from stacks.policy_function.function import EVENTS_PRINCIPAL

    assert not [
        r for r in recorded("prod").of_type("aws:cloudwatch/eventRule:EventRule") if r.name.endswith("-rebalance")
    ]
    cfg = stack_config("prod")
    pool = next(
        p
        for p in cfg["gpuloan:pools"]
        if (p.get("elastic") or {}).get("capacity", "spot_then_on_demand") != "on_demand" and p.get("elastic")
    )
    pool["elastic"]["rebalance_checkpoint"] = True
    rec = run_stack("prod", cfg)
    rule = rec.named("prod-policy-rebalance")
    assert json.loads(rule.inputs["eventPattern"]) == {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance Rebalance Recommendation"],
    }
    target = rec.named("prod-policy-rebalance-target").inputs
    assert target["arn"] == rec.named("prod-policy-fn").outputs["arn"] and target["rule"] == rule.outputs["name"]
    perm = rec.named("prod-policy-rebalance-invoke").inputs
    assert perm["sourceArn"] == rule.outputs["arn"] and perm["principal"] == EVENTS_PRINCIPAL
    perms = [
        r for r in rec.of_type("aws:lambda/permission:Permission") if r.inputs.get("principal") == EVENTS_PRINCIPAL
    ]
    assert sorted(p.inputs["sourceArn"] for p in perms) == sorted(
        [rule.outputs["arn"], rec.named("prod-policy-spot-warning").outputs["arn"]]
    )


def test_config_refuses_the_spot_features_where_they_cannot_apply():
    base = {"instance_types": ["g6.xlarge"], "max_nodes": 2}
    with pytest.raises(ValueError, match="rebalance_checkpoint: EC2 sends rebalance recommendations for spot"):
        config.Elastic(**base, capacity="on_demand", rebalance_checkpoint=True)
    with pytest.raises(ValueError, match="back_to_spot applies to capacity `spot_then_on_demand` only"):
        config.Elastic(**base, capacity="spot", back_to_spot=True)
    assert config.Elastic(**base, capacity="spot", rebalance_checkpoint=True).rebalance_checkpoint
    assert config.Elastic(**base).back_to_spot is True and config.Elastic(**base).rebalance_checkpoint is False
