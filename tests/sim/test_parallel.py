"""Many simulations at once (sim/parallel.py, issue 41 item 4): the same results, byte for byte, serially, in the
local process pool and on Ray; progress on stderr in every mode; the shared data sent to each worker once; a dead
worker retried once, then named; a Ray address that does not answer, or Ray missing, named before anything runs."""

from __future__ import annotations

import json
import re
import os
import signal
import socket
import sys
import time

import pytest
from conftest import requires_shared_prices
from test_org_window import ITYPE, REGION, SIZING, _demands, _runner, _traces

from gpuloan import cli
from advise import org_advisor
from sim import parallel


def _sweep(engine) -> str:
    """The organization advice of a small environment (two pools, two days) with every simulation run on `engine`
    first (org_advisor.prefill), as JSON."""
    traces = _traces()
    runner, prices = _runner(traces)
    inputs = org_advisor.OrgInputs(_demands(traces), prices, {(ITYPE, REGION): 0.5}, "t", SIZING, 7, 90.0)
    org_advisor.prefill(runner, inputs, engine)
    prefilled = runner.runs
    doc = org_advisor.evaluate(inputs, runner)
    assert runner.runs == prefilled, "evaluate ran a simulation the prefill had not"
    return json.dumps(doc, sort_keys=True)


def _all_done(err: str) -> bool:
    """The progress reached N/N (every simulation the prefill planned: its count follows the setups)."""
    return re.search(r"\b(\d+)/\1 done", err) is not None


@requires_shared_prices
def test_the_sweep_is_identical_serially_in_processes_and_on_ray(capsys):
    ray = pytest.importorskip("ray")
    serial = _sweep(parallel.engine_for(workers=1))
    err = capsys.readouterr().err
    assert "on this process" in err and _all_done(err) and "elapsed" in err and "left" in err
    pooled = _sweep(parallel.engine_for(workers=2))
    err = capsys.readouterr().err
    assert "on 2 local processes" in err and _all_done(err)
    assert pooled == serial
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        on_ray = _sweep(parallel.engine_for(ray_address="local"))
        err = capsys.readouterr().err
        assert "on Ray at local" in err and _all_done(err)
        assert on_ray == serial
        _ray_gets_shared_once_per_worker_and_names_a_task_that_kills_it(ray)
    finally:
        ray.shutdown()


def _ray_gets_shared_once_per_worker_and_names_a_task_that_kills_it(ray):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    engine = parallel.Engine(parallel.RAY, address="local")
    seen = parallel.run_all(range(12), _pid_and_fetches, shared=list(range(1000)), engine=engine)
    per_worker: dict[int, list[int]] = {}
    for pid, fetches in seen:
        per_worker.setdefault(pid, []).append(fetches)
    assert max(len(x) for x in per_worker.values()) > 1  # some worker ran several tasks ...
    # ... and its count of fetches did not grow from one of its tasks to the next: fetched once per worker
    assert all(len(set(x)) == 1 for x in per_worker.values()), per_worker
    with pytest.raises(parallel.TaskFailed, match="setup bad") as e:
        parallel.run_all(["good", "bad"], _die_on_bad, engine=engine, describe=lambda t: f"setup {t}")
    assert "died twice" in str(e.value)


def _pid_and_fetches(shared, task):
    assert shared == list(range(1000))
    return os.getpid(), parallel._SHARED.get("fetches", 0)


def _die_on_bad(shared, task):
    if task == "bad":
        os.kill(os.getpid(), signal.SIGKILL)
    return task


class _NotPicklable:
    """Shared data that fails if pickled: the pool's workers must inherit it (fork), not receive it per task."""

    def __init__(self):
        self.scale = 3

    def __reduce__(self):
        raise AssertionError("the shared data was pickled")


def _scaled(shared, task):
    return shared.scale * task


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the workers inherit the shared data through fork")
def test_the_pool_keeps_order_and_never_pickles_the_shared_data(capsys):
    out = parallel.run_all(range(7), _scaled, shared=_NotPicklable(), engine=parallel.engine_for(workers=2))
    assert out == [3 * t for t in range(7)]
    err = capsys.readouterr().err
    assert "simulations: 7/7 done" in err


def _dies_once(marker_dir, task):
    """Kills its worker the first time it runs task 2 (a marker file remembers), then succeeds."""
    marker = os.path.join(marker_dir, f"died-{task}")
    if task == 2 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return task * 10


def test_a_worker_that_dies_is_retried_once(tmp_path):
    out = parallel.run_all(range(5), _dies_once, shared=str(tmp_path), engine=parallel.engine_for(workers=2))
    assert out == [0, 10, 20, 30, 40]
    assert (tmp_path / "died-2").exists()


def test_a_task_that_kills_its_worker_twice_is_reported_with_its_setup():
    with pytest.raises(parallel.TaskFailed, match=r"setup bad: its worker process died twice"):
        parallel.run_all(
            ["a", "bad", "c"], _die_on_bad, engine=parallel.engine_for(workers=2), describe=lambda t: f"setup {t}"
        )


def _raises_on_three(shared, task):
    if task == 3:
        raise ValueError("no floor fits")
    return task


@pytest.mark.parametrize("workers", [1, 2])
def test_a_task_that_raises_is_named_and_not_retried(workers):
    with pytest.raises(parallel.TaskFailed, match=r"setup 3: ValueError: no floor fits"):
        parallel.run_all(
            range(5), _raises_on_three, engine=parallel.engine_for(workers=workers), describe=lambda t: f"setup {t}"
        )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@requires_shared_prices
def test_an_unreachable_ray_address_fails_fast_naming_it_and_prints_nothing(capsys):
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    rc = cli.main(
        [
            "advise",
            "-s",
            "prod",
            "--demand",
            "docs/examples/org-demand",
            "--sizing-days",
            "3",
            "--model",
            "simulated",
            "--json",
            "--ray",
            address,
        ]
    )
    out = capsys.readouterr()
    assert rc == 2
    assert time.monotonic() - t0 < 30
    assert f"Ray at {address}" in out.err
    assert out.out == ""  # nothing half-written
    assert "simulations:" not in out.err  # refused before any simulation started


def test_a_silent_address_is_given_up_within_the_deadline(monkeypatch):
    """An address whose port accepts connections but never answers as Ray: the child's try is killed."""
    pytest.importorskip("ray")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setattr(parallel, "RAY_CONNECT_TIMEOUT_S", 6.0)
        t0 = time.monotonic()
        with pytest.raises(parallel.RayUnreachable, match=f"Ray at {address}"):
            parallel.engine_for(ray_address=address)
        assert time.monotonic() - t0 < 15


@requires_shared_prices
def test_ray_without_the_extra_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    rc = cli.main(
        [
            "advise",
            "-s",
            "prod",
            "--demand",
            "docs/examples/org-demand",
            "--sizing-days",
            "3",
            "--model",
            "simulated",
            "--json",
            "--ray",
            "auto",
        ]
    )
    out = capsys.readouterr()
    assert rc == 2
    assert "pip install 'gpuloan[ray]'" in out.err and out.out == ""


def test_ray_address_from_the_environment(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    with pytest.raises(parallel.RayUnavailable, match="RAY_ADDRESS"):
        parallel.engine_for(workers=2)
    monkeypatch.delenv("RAY_ADDRESS")
    assert parallel.engine_for(workers=2) == parallel.Engine(parallel.PROCESSES, workers=2)
