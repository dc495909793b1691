"""Issue 36: a production queue per pool whose tier is not production but part of whose work is.

Kueue admits every workload of one ClusterQueue alike (flavors in the queue's order, by quota), so an experiment
pool's queue, which lists spot and other teams' idle floors, would admit its production jobs there too. The shipped
objects give such a pool a second ClusterQueue and LocalQueue (`<pool>-production`) that list only the pool's floor
and the elastic capacity production may use, never borrowing: docs/workloads/README.md shows how a job picks it.
"""

from __future__ import annotations

import pytest
from conftest import requires_shared_kueue_crds, stack_config
from kube_checks import validate_kueue

from config import config, scheduling
from config.config import ConfigError
from stacks.kubernetes import kueue

SPOT_TAINT = "gpuloan.io/spot"


def _dev(share: float | None = 30, capacity: str = "spot", floor: int | None = 1, **kueue_cfg) -> dict:
    """The dev stack (experiment pool `research`, a g6.xlarge floor, spot elastic) with this production share."""
    data = stack_config("dev")
    pool = data["gpuloan:pools"][0]
    pool["elastic"]["capacity"] = capacity
    if floor is None:
        pool.pop("guaranteed", None)
    else:
        pool["guaranteed"]["nodes"] = floor
    if share is not None:
        pool["service_target"] = {"production_share_pct": share}
    if kueue_cfg:
        data["gpuloan:scheduling"] = {"kueue": kueue_cfg}
    return data


def _cfg(data: dict) -> config.GpuLoanConfig:
    return config.from_stack_yaml({"config": data}, "test")


def _problems(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        _cfg(data)
    return err.value.problems


def _queues(cfg) -> dict[str, scheduling.PoolQueue]:
    return {q.name: q for q in scheduling.plan(cfg).queues}


def _quotas(cfg, queue: scheduling.PoolQueue) -> dict[str, dict]:
    [group] = kueue.cluster_queue_manifest(cfg, queue)["spec"]["resourceGroups"]
    return {f["name"]: f["resources"][0] for f in group["flavors"]}


def test_an_experiment_pool_with_production_work_gets_a_production_queue_on_its_floor_only():
    cfg = _cfg(_dev(share=30, capacity="spot"))
    queues = _queues(cfg)
    assert set(queues) == {"gpuloan-dev-research", "gpuloan-dev-research-production"}
    prod = queues["gpuloan-dev-research-production"]
    assert prod.production_only and prod.local_queue == "research-production" and prod.team == "research"
    # spot-only elastic: production may use the floor alone; the floor's quota is the production queue's
    assert _quotas(cfg, prod) == {
        "gpuloan-dev-research-floor": {"name": "nvidia.com/gpu", "nominalQuota": 1, "borrowingLimit": 0}
    }
    # the interruptible queue borrows the idle floor (nominal 0, listed first), then its spot nodes
    rest = _quotas(cfg, queues["gpuloan-dev-research"])
    assert list(rest) == ["gpuloan-dev-research-floor", "gpuloan-dev-research-spot"]
    assert rest["gpuloan-dev-research-floor"] == {"name": "nvidia.com/gpu", "nominalQuota": 0}
    assert rest["gpuloan-dev-research-spot"]["nominalQuota"] == 4  # 4 nodes of 1 GPU (one node size)


def test_with_spot_then_on_demand_the_production_queue_gets_the_on_demand_group_pinned_off_spot():
    cfg = _cfg(_dev(share=30, capacity="spot_then_on_demand"))
    prod = _queues(cfg)["gpuloan-dev-research-production"]
    assert list(_quotas(cfg, prod)) == ["gpuloan-dev-research-floor", "gpuloan-dev-research-on-demand"]
    flavor = {f.name: f for f in scheduling.plan(cfg).flavors}["gpuloan-dev-research-on-demand"]
    # the flavor's labels go on the admitted pods: the policy sees pods that may not run on spot (policy/off_spot.py)
    assert flavor.node_labels["gpuloan.io/capacity"] == "on-demand"
    assert all(t["key"] != SPOT_TAINT for t in flavor.tolerations)
    assert _quotas(cfg, prod)["gpuloan-dev-research-on-demand"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 4,
        "lendingLimit": 0,
        "borrowingLimit": 0,
    }
    # the interruptible queue keeps today's flavors: the floor (borrowed now), then spot
    assert list(_quotas(cfg, _queues(cfg)["gpuloan-dev-research"])) == [
        "gpuloan-dev-research-floor",
        "gpuloan-dev-research-spot",
    ]


def test_with_on_demand_capacity_both_queues_use_one_flavor_held_by_the_production_queue():
    cfg = _cfg(_dev(share=30, capacity="on_demand"))
    queues = _queues(cfg)
    prod = _quotas(cfg, queues["gpuloan-dev-research-production"])
    rest = _quotas(cfg, queues["gpuloan-dev-research"])
    assert prod["gpuloan-dev-research-on-demand"] == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 0}
    assert rest["gpuloan-dev-research-on-demand"] == {"name": "nvidia.com/gpu", "nominalQuota": 0}
    # counted once in the team's ceiling: floor 1 + on-demand 4
    assert scheduling.team_gpu_ceiling(cfg, "research") == 5


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_production_share_no_production_queue(stack):
    cfg = config.from_stack_yaml({"config": stack_config(stack)}, "test")
    assert not any(q.production_only for q in scheduling.plan(cfg).queues)


def test_a_production_queue_never_lists_spot_nor_another_pools_floor_and_never_borrows():
    """The promise, checked on a stack where the experiment pool does borrow another floor: prod, with research
    on spot then on-demand and 30 % production."""
    data = stack_config("prod")
    research = data["gpuloan:pools"][2]
    research["elastic"]["capacity"] = "spot_then_on_demand"
    research["service_target"] = {"production_share_pct": 30}
    cfg = _cfg(data)
    flavors = {f.name: f for f in scheduling.plan(cfg).flavors}
    queues = _queues(cfg)
    assert "gpuloan-prod-training-floor" in _quotas(cfg, queues["gpuloan-prod-research"])  # it borrows, as before
    prod = queues["gpuloan-prod-research-production"]
    for entry in prod.flavors:
        f = flavors[entry.flavor]
        assert f.pool == "research", entry.flavor  # no other pool's floor
        assert f.kind != scheduling.SPOT and all(t["key"] != SPOT_TAINT for t in f.tolerations)
        assert entry.borrowing_limit_gpus == 0
    assert [e.flavor for e in prod.flavors] == ["gpuloan-prod-research-on-demand"]  # no floor of its own


@requires_shared_kueue_crds
@pytest.mark.parametrize("capacity", ["spot", "spot_then_on_demand", "on_demand"])
def test_the_generated_objects_validate_against_the_kueue_crds(capacity):
    cfg = _cfg(_dev(share=30, capacity=capacity))
    objects = kueue.manifests(cfg)
    for obj in objects:
        validate_kueue(obj)
    local = [o for o in objects if o["kind"] == "LocalQueue"]
    assert {(o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["clusterQueue"]) for o in local} == {
        ("research", "research", "gpuloan-dev-research"),
        ("research", "research-production", "gpuloan-dev-research-production"),
    }


def test_a_pool_whose_production_work_could_never_be_admitted_is_refused_naming_the_field():
    problems = _problems(_dev(share=30, capacity="spot", floor=None))
    assert [p for p, _ in problems] == ["pools[0].service_target.production_share_pct"]
    assert "could never admit" in problems[0][1]
    # listing it in production_spot_pools waives "never on spot": its production queue then uses spot
    cfg = _cfg(_dev(share=30, capacity="spot", floor=None, production_spot_pools=["research"]))
    assert [e.flavor for e in _queues(cfg)["gpuloan-dev-research-production"].flavors] == ["gpuloan-dev-research-spot"]


def test_a_lending_limit_that_would_cap_the_teams_own_work_is_refused_naming_the_field():
    problems = _problems(_dev(share=30, teams={"research": {"lending_limit_pct": 50}}))
    assert [p for p, _ in problems] == ["scheduling.kueue.teams.research.lending_limit_pct"]
    _cfg(_dev(share=0, teams={"research": {"lending_limit_pct": 50}}))  # no production work: as before


def test_a_pool_named_like_another_pools_production_queue_is_refused():
    data = _dev(share=30)
    clash = dict(data["gpuloan:pools"][0], name="research-production")
    clash.pop("service_target")
    data["gpuloan:pools"].append(clash)
    assert "pools[0].name" in [p for p, _ in _problems(data)]


def test_the_pulumi_resources_of_a_production_queue_are_new_ones_beside_the_pools_queue():
    """The pool's queue keeps its resource name (its URN does not change); the production queue is added."""
    import pulumi

    created: list[str] = []

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args):
            created.append(args.name)
            return args.name + "_id", args.inputs

        def call(self, args):
            return {}

    pulumi.runtime.set_mocks(Mocks(), preview=True)
    cfg = _cfg(_dev(share=30))

    @pulumi.runtime.test
    def run():
        k = kueue.Kueue("kueue", kueue.KueueArgs.from_config(cfg, {}))
        return k.release.id.apply(lambda _: None)

    run()
    for name in (
        "kueue-cq-research",
        "kueue-lq-research",
        "kueue-cq-research-production",
        "kueue-lq-research-production",
    ):
        assert name in created
