"""A multi-size pool whose floor is not of its largest size, as `gpuloan validate` accepts and the stack deploys
(config/node_sizes.py: the floor's type must be of a size an elastic type has, any size): `simulate` and `advise`
model the floor's nodes with their own GPUs (sim/pool.py PoolSpec.floor_gpus_per_node) instead of refusing it
(issue 37). Prices come from the price book in force (the shipped snapshot without ../shared)."""

from __future__ import annotations

import yaml
from capacity_helpers import dev_variant
from conftest import REPO, requires_prices, resolved_prices

from gpuloan import cli
from pricing import checks
from sim import pool as simpool
from sim.cloud import size_group
from sim.engine import GUARANTEED, SPOT, SimSettings, Simulation
from sim.controllers.gpuloan import GpuLoan
from sim.traces import Job, JobsTrace

G6E = ["g6e.48xlarge", "g6e.12xlarge", "g6e.2xlarge"]  # 8, 4 and 1 L40S


def _config(floor_nodes: int = 2) -> dict:
    # the dev stack's research pool: a floor of 1-GPU g6e.2xlarge under elastic types of 8, 4 and 1 GPUs
    config = dev_variant(
        guaranteed={"instance_type": "g6e.2xlarge", "nodes": floor_nodes},
        elastic={"instance_types": G6E, "capacity": "spot_then_on_demand", "max_nodes": 3},
    )
    config["gpuloan:budget"]["monthly_usd"] = 100_000  # room for the floor and the 8-GPU elastic nodes
    return config


def _spec(floor_nodes: int = 2) -> simpool.PoolSpec:
    return simpool.spec_from_config(
        resolved_prices(),
        checks.from_stack_yaml({"config": _config(floor_nodes)}, "dev", prices=resolved_prices()),
        "research",
    )


@requires_prices
def test_a_floor_of_a_smaller_size_keeps_its_own_gpus_in_the_spec():
    spec = _spec()
    assert (spec.gpus_per_node, spec.floor_type, spec.floor_node_gpus) == (8, "g6e.2xlarge", 1)
    assert [z.gpus_per_node for z in spec.sizes] == [1, 4]
    assert spec.floor_gpus == 2 and spec.peak_gpus == 2 + 3 * 8
    assert spec.floor_peak_nodes == 26  # a floor sweep goes to the pool's peak in 1-GPU floor nodes
    assert spec.describe()["floor_gpus_per_node"] == 1
    # another floor keeps the same peak, in GPUs: 5 one-GPU floor nodes leave 21 GPUs = 3 eight-GPU nodes
    five = simpool.with_floor(spec, 5)
    assert (five.floor_gpus, five.spot_max_nodes, five.on_demand_max_nodes) == (5, 3, 3)
    assert simpool.with_floor(spec, 26).spot_max_nodes == 1  # elastic max never below one node


@requires_prices
def test_a_floor_of_the_largest_size_is_unchanged():
    cfg = dev_variant(
        guaranteed={"instance_type": "g6e.48xlarge", "nodes": 1},
        elastic={"instance_types": G6E, "capacity": "spot_then_on_demand", "max_nodes": 3},
    )
    cfg["gpuloan:budget"]["monthly_usd"] = 100_000
    spec = simpool.spec_from_config(
        resolved_prices(), checks.from_stack_yaml({"config": cfg}, "dev", prices=resolved_prices()), "research"
    )
    assert (spec.floor_gpus_per_node, spec.floor_node_gpus, spec.floor_gpus) == (0, 8, 8)
    assert spec.peak_gpus == spec.peak_nodes * spec.gpus_per_node and spec.floor_peak_nodes == spec.peak_nodes


@requires_prices
def test_the_floor_nodes_are_simulated_with_their_own_gpus_and_take_the_small_jobs():
    spec = _spec()
    trace = JobsTrace(
        "small and large", "generic", (Job("a", 60, 3600, 1), Job("b", 60, 3600, 1), Job("c", 60, 3600, 8))
    )
    sim = Simulation(spec, trace, GpuLoan("gpuloan"), SimSettings(), horizon_minutes=180)
    launched: dict[str, int] = {}
    original = sim._new_node

    def record(group, ready_at):
        launched[group] = launched.get(group, 0) + 1
        return original(group, ready_at)

    sim._new_node = record
    sim.run()
    floor = [n for n in sim.nodes.values() if n.group == GUARANTEED]
    assert [n.gpus for n in floor] == [1, 1]
    # the two 1-GPU jobs run on the two 1-GPU floor nodes; only the 8-GPU job needs an elastic node, of 8 GPUs
    assert launched == {SPOT: 1} and size_group(SPOT, 1) not in launched
    assert sim.workload.unmet_gpu_minutes == 0


def _stack_file(tmp_path) -> str:
    path = tmp_path / "Pulumi.floorsize.yaml"
    path.write_text(yaml.safe_dump({"config": _config()}))
    return str(path)


def _jobs(tmp_path) -> str:
    # every 6 hours ten 1-GPU jobs of 5 h and one 4-GPU job of 3 h (generic jobs: submit_s,duration_s,gpus)
    rows = [f"{start * 21600 + k * 60},{5 * 3600},1" for start in range(4) for k in range(10)]
    rows += [f"{start * 21600 + 600},{3 * 3600},4" for start in range(4)]
    path = tmp_path / "jobs.csv"
    path.write_text("submit_s,duration_s,gpus\n" + "\n".join(rows) + "\n")
    return str(path)


@requires_prices
def test_simulate_runs_a_pool_whose_floor_is_not_of_the_largest_size(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    rc = cli.main(["simulate", "-s", _stack_file(tmp_path), "--pool", "research", "--trace", _jobs(tmp_path)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "largest node size" not in out.err
    assert "floor 2 x g6e.2xlarge" in " ".join(out.out.split())


@requires_prices
def test_advise_sweeps_the_floor_in_its_own_nodes(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.chdir(REPO)
    rc = cli.main(["advise", "-s", _stack_file(tmp_path), "--pool", "research", "--trace", _jobs(tmp_path), "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    [doc] = json.loads(out.out)["pools"]
    assert (doc["floor_instance_type"], doc["floor_gpus_per_node"], doc["gpus_per_node"]) == ("g6e.2xlarge", 1, 8)
    assert all(p["floor_gpus"] == p["floor_nodes"] for p in doc["points"])  # 1 GPU per floor node
    assert max(p["floor_nodes"] for p in doc["points"]) == 2 + 3 * 8  # up to the pool's peak in 1-GPU nodes


@requires_prices
def test_the_on_demand_groups_max_is_the_configs_reading_for_every_size():
    # config/config.py Elastic.on_demand_group_max_nodes: on_demand_max_nodes when set, else max_nodes (the node
    # groups the stack deploys); the simulated groups of every size get the same max
    def spec(**elastic) -> simpool.PoolSpec:
        config = _config()
        config["gpuloan:pools"][0]["elastic"].update(elastic)
        return simpool.spec_from_config(
            resolved_prices(), checks.from_stack_yaml({"config": config}, "dev", prices=resolved_prices()), "research"
        )

    own = spec(on_demand_max_nodes=2)
    assert (own.spot_max_nodes, own.on_demand_max_nodes) == (3, 2)
    assert [(z.spot_max_nodes, z.on_demand_max_nodes) for z in own.sizes] == [(3, 2), (3, 2)]
    shared = spec()
    assert shared.on_demand_max_nodes == 3 and [z.on_demand_max_nodes for z in shared.sizes] == [3, 3]
