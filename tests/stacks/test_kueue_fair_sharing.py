"""Issue 38 item 3: Kueue's fair sharing among borrowers (a weight per team) and the borrow limit in percent of a
pool's own floor, in the shipped objects (valid against the pinned v0.19.2 CRDs)."""

from __future__ import annotations

import pytest
import yaml
from conftest import REPO, requires_shared_kueue_crds, stack_config, resolved_prices
from kube_checks import release, layer, validate_kueue
from test_kueue import _cq, _problems, _quotas, _two_experiment_teams

from config import scheduling
from stacks.kubernetes import kueue


def _manager_config(cfg) -> dict:
    return yaml.safe_load(kueue.helm_values(cfg)["managerConfig"]["controllerManagerConfigYaml"])


def test_fair_sharing_is_on_with_a_cohort_and_each_queue_carries_its_team_weight():
    cfg = _two_experiment_teams(teams={"research": {"fair_share_weight": 2.5}})
    conf = _manager_config(cfg)
    # the shipped default: the first rule only (docs/scheduling.md, "Fair sharing among borrowers")
    assert conf["fairSharing"] == {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}
    assert _cq(cfg, "training")["spec"]["fairSharing"] == {"weight": "2.5"}  # research's queue
    assert _cq(cfg, "inference")["spec"]["fairSharing"] == {"weight": 1}  # serving: the default, equal


def test_one_queue_has_nobody_to_share_with_so_fair_sharing_stays_off():
    data = stack_config("dev")
    data["gpuloan:pools"] = data["gpuloan:pools"][:1]
    from pricing import checks

    cfg = checks.from_stack_yaml({"config": data}, "test", prices=resolved_prices())
    assert len(scheduling.plan(cfg).queues) == 1
    assert "fairSharing" not in _manager_config(cfg)
    [q] = scheduling.plan(cfg).queues
    assert "fairSharing" not in kueue.cluster_queue_manifest(cfg, q)["spec"]


@requires_shared_kueue_crds
@pytest.mark.parametrize("weight", [1, 0.5, 3])
def test_weighted_queues_validate_against_the_pinned_crds(weight):
    cfg = _two_experiment_teams(teams={"research": {"fair_share_weight": weight, "borrowing_limit_pct": 50}})
    for q in scheduling.plan(cfg).queues:
        validate_kueue(kueue.cluster_queue_manifest(cfg, q))


@pytest.mark.parametrize("stack, on", [("dev", False), ("prod", True)])
def test_shipped_stacks_fair_sharing_in_the_release(stack, on):
    # dev has one queue (research), prod three in its cohort
    conf = yaml.safe_load(
        release(layer(stack), "kueue").inputs["values"]["managerConfig"]["controllerManagerConfigYaml"]
    )
    assert ("fairSharing" in conf) is on


@pytest.mark.parametrize("pct, limit", [(50, 1), (100, 3), (34, 1), (33.3, 0), (500, 15), (0, 0)])
def test_borrow_limit_in_percent_of_the_own_floor_rounds_down(pct, limit):
    # training's floor: 3 x g6e.xlarge = 3 GPUs; 50 % = 1.5, rounded down to 1
    cfg = _two_experiment_teams(teams={"research": {"borrowing_limit_pct": pct}})
    borrowed = _quotas(_cq(cfg, "training"))["gpuloan-prod-inference-floor"]
    assert borrowed == {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": limit}


def test_both_borrow_limits_for_one_team_are_refused_naming_both():
    data = stack_config("prod")
    data["gpuloan:scheduling"]["kueue"]["teams"] = {"research": {"borrowing_limit_gpus": 2, "borrowing_limit_pct": 50}}
    [(path, message)] = _problems(data)
    assert path == "scheduling.kueue.teams.research"
    assert "borrowing_limit_gpus" in message and "borrowing_limit_pct" in message


@pytest.mark.parametrize(
    "field, value",
    [
        ("fair_share_weight", 0),
        ("fair_share_weight", -1),
        ("fair_share_weight", 1001),
        ("borrowing_limit_pct", 501),
        ("borrowing_limit_pct", -1),
    ],
)
def test_weight_and_percent_out_of_range_are_refused_naming_the_field(field, value):
    data = stack_config("prod")
    data["gpuloan:scheduling"]["kueue"]["teams"] = {"research": {field: value}}
    assert [p for p, _ in _problems(data)] == [f"scheduling.kueue.teams.research.{field}"]


def test_fair_sharing_can_be_turned_off_and_then_no_queue_carries_a_weight():
    cfg = _two_experiment_teams(fair_sharing=False, teams={"research": {"fair_share_weight": 2}})
    assert "fairSharing" not in _manager_config(cfg)
    assert all("fairSharing" not in kueue.cluster_queue_manifest(cfg, q)["spec"] for q in scheduling.plan(cfg).queues)


@pytest.mark.parametrize(
    "strategies",
    [
        ["LessThanOrEqualToFinalShare"],
        ["LessThanInitialShare"],
        ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
    ],
)
def test_each_strategy_list_kueue_accepts_is_written_out_as_configured(strategies):
    cfg = _two_experiment_teams(fair_sharing_preemption_strategies=strategies)
    assert _manager_config(cfg)["fairSharing"] == {"preemptionStrategies": strategies}
    # the queues do not change with the strategies: flavorFungibility and preemption stay as shipped
    default = _two_experiment_teams()
    for q in scheduling.plan(cfg).queues:
        assert kueue.cluster_queue_manifest(cfg, q) == kueue.cluster_queue_manifest(default, q)


@pytest.mark.parametrize(
    "strategies",
    [
        [],  # Kueue v0.19.2: "must be specified" when fairSharing is present
        ["LessThanInitialShare", "LessThanOrEqualToFinalShare"],  # only S2-b may come second
        ["LessThanOrEqualToFinalShare", "LessThanOrEqualToFinalShare"],
        ["LessThanFinalShare"],  # not a strategy
    ],
)
def test_strategy_lists_kueue_refuses_are_refused_naming_the_field(strategies):
    data = stack_config("prod")
    data["gpuloan:scheduling"]["kueue"]["fair_sharing_preemption_strategies"] = strategies
    [(path, message)] = _problems(data)
    assert path.startswith("scheduling.kueue.fair_sharing_preemption_strategies")  # [i] for a name not known
    assert "LessThan" in message


def test_the_owners_queue_keeps_may_stop_search_so_it_reclaims_its_floor_before_buying_nodes():
    # whenCanPreempt: TryNextFlavor would move an owner whose floor is lent on to its next flavor: Kueue v0.19.2
    # gives its reclaim the same mode as a borrower's preemption (docs/aws-rules.md), so gpuloan does not ship it
    cfg = _two_experiment_teams()
    for q in scheduling.plan(cfg).queues:
        spec = kueue.cluster_queue_manifest(cfg, q)["spec"]
        assert spec["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"}
        assert spec["preemption"]["reclaimWithinCohort"] == "Any"


def test_the_scheduling_doc_names_the_shipped_strategies():
    shipped = _manager_config(_two_experiment_teams())["fairSharing"]["preemptionStrategies"]
    doc = (REPO / "docs" / "scheduling.md").read_text()
    assert f"`preemptionStrategies: [{', '.join(shipped)}]`" in doc
