"""Many independent simulations at once: in this process, in a local process pool (the default), or on a Ray
cluster (`--ray ADDRESS` or `RAY_ADDRESS`; the optional extra `pip install 'gpuloan[ray]'`).

    results = run_all(tasks, fn, shared=big, engine=engine_for(workers=2), describe=str, label="bench-org")

calls `fn(shared, task)` once per task and returns the results in the order of `tasks`, whatever the engine:
the simulations are seeded, so the serial, pooled and Ray results are the same objects (tests/sim/test_parallel.py
compares their JSON byte for byte). `fn` must be a module-level function and `tasks` and results picklable.
`shared` (the traces and prices every task reads) goes to each worker once, not once per task: the process pool's
initializer (inherited through fork where the platform has it), `ray.put` once and a per-worker cache on Ray.

Progress goes to stderr in every mode (done / total, elapsed, estimate). A worker that dies (killed, out of
memory) is retried once; a task that kills its worker twice, or raises, stops the run with `TaskFailed` naming the
task (`describe(task)`: its setup). An unreachable Ray address fails within `RAY_CONNECT_TIMEOUT_S` seconds naming
it, before any task runs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RAY_EXTRA = "pip install 'gpuloan[ray]'"
RAY_CONNECT_TIMEOUT_S = 20.0  # the whole connection: with the command's start, under the 30 s promised
TCP_PROBE_TIMEOUT_S = 5.0  # the head's port must answer within this (a black-holed address hangs otherwise)

SERIAL, PROCESSES, RAY = "serial", "processes", "ray"


class ParallelError(RuntimeError):
    """Base of the runner's errors: the command reports the message and exits 2."""


class RayUnavailable(ParallelError):
    """--ray without Ray installed."""


class RayUnreachable(ParallelError):
    """The Ray address does not answer (or refuses) within the connection timeout."""


class TaskFailed(ParallelError):
    """A task raised, or its worker died twice; `task` is the description of its setup."""

    def __init__(self, task: str, why: str):
        super().__init__(f"{task}: {why}")
        self.task = task


@dataclass(frozen=True)
class Engine:
    """Where the tasks run: `serial` (this process), `processes` (`workers` local processes) or `ray` (the cluster
    at `address`; "local" starts one in this process)."""

    kind: str
    workers: int = 1
    address: str | None = None

    def words(self) -> str:
        if self.kind == RAY:
            return f"Ray at {self.address}"
        if self.kind == PROCESSES:
            return f"{self.workers} local processes"
        return "this process"


def engine_for(workers: int | None = None, ray_address: str | None = None) -> Engine:
    """The engine a command's options ask for: Ray when `ray_address` (else $RAY_ADDRESS) is set; otherwise
    `workers` local processes (default: the CPUs), one meaning this process. Ray is imported and connected to here,
    so a missing extra or an unreachable address stops the command before it computes or writes anything."""
    address = ray_address or os.environ.get("RAY_ADDRESS") or None
    if address:
        connect_ray(address)
        return Engine(RAY, address=address)
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n < 1:
        raise ParallelError(f"--workers must be at least 1, got {n}")
    return Engine(SERIAL) if n == 1 else Engine(PROCESSES, workers=n)


def run_all(
    tasks: Sequence,
    fn: Callable[[Any, Any], Any],
    *,
    shared: Any = None,
    engine: Engine | None = None,
    describe: Callable[[Any], str] = repr,
    label: str = "simulations",
) -> list:
    """`[fn(shared, t) for t in tasks]` on `engine` (default: this process), with progress on stderr."""
    engine = engine or Engine(SERIAL)
    tasks = list(tasks)
    progress = Progress(len(tasks), label, engine)
    if not tasks:
        return []
    if engine.kind == RAY:
        return _run_ray(tasks, fn, shared, engine.address, progress, describe)
    if engine.kind == PROCESSES and len(tasks) > 1:
        return _run_processes(tasks, fn, shared, engine.workers, progress, describe)
    out = []
    for t in tasks:
        out.append(_guarded(fn, shared, t, describe))
        progress.step()
    return out


class Progress:
    """`label: 3/12 done, 41 s elapsed, about 2 min left (4 local processes)` on stderr after each task."""

    def __init__(self, total: int, label: str, engine: Engine, stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        print(f"{label}: {total} to run on {engine.words()}", file=self.stream, flush=True)

    def step(self) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.t0
        left = elapsed / self.done * (self.total - self.done)
        print(
            f"{self.label}: {self.done}/{self.total} done, {_duration(elapsed)} elapsed, about {_duration(left)} left",
            file=self.stream,
            flush=True,
        )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _guarded(fn, shared, task, describe):
    try:
        return fn(shared, task)
    except ParallelError:
        raise
    except Exception as e:
        raise TaskFailed(describe(task), f"{type(e).__name__}: {e}") from e


# --- the local process pool ------------------------------------------------------------------------------------

_SHARED: dict = {}  # in a worker: what every task reads (set once per worker), and on Ray the object's id


def _install(shared, started) -> None:
    _SHARED.update(value=shared, started=started)


def _pooled(fn, index: int, task):
    # Say which task this worker holds before running it: if the worker dies, the parent knows whom to retry.
    _SHARED["started"].put(index)
    return fn(_SHARED["value"], task)


def _context():
    import multiprocessing

    # fork: the workers inherit `shared` (no pickling at all); spawn where there is no fork (pickled once per worker).
    return multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")


def _run_processes(tasks, fn, shared, workers, progress, describe) -> list:
    results: dict[int, Any] = {}
    todo = list(range(len(tasks)))
    while todo:
        died, not_started = _pool_pass(todo, tasks, fn, shared, workers, results, progress, describe)
        for i in died:  # the second try alone in its own pool: a second death is this task's own
            again, _ = _pool_pass([i], tasks, fn, shared, 1, results, progress, describe)
            if again:
                raise TaskFailed(describe(tasks[i]), "its worker process died twice (killed, or out of memory?)")
        todo = not_started
    return [results[i] for i in range(len(tasks))]


def _pool_pass(indices, tasks, fn, shared, workers, results, progress, describe) -> tuple[list[int], list[int]]:
    """Runs `indices` in a fresh pool into `results`; when a worker dies the pool breaks: returns the tasks that
    had started and not finished (one of them killed it) and those that had not started."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = _context()
    started = ctx.SimpleQueue()
    broken = False
    with ProcessPoolExecutor(
        max_workers=min(workers, len(indices)), mp_context=ctx, initializer=_install, initargs=(shared, started)
    ) as ex:
        futures = {ex.submit(_pooled, fn, i, tasks[i]): i for i in indices}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=futures.__getitem__):
                i = futures[fut]
                try:
                    results[i] = fut.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                except Exception as e:
                    for f in pending:
                        f.cancel()
                    raise TaskFailed(describe(tasks[i]), f"{type(e).__name__}: {e}") from e
                progress.step()
    if not broken:
        return [], []
    begun = set()
    while not started.empty():
        begun.add(started.get())
    unfinished = [i for i in indices if i not in results]
    return [i for i in unfinished if i in begun], [i for i in unfinished if i not in begun]


# --- Ray ---------------------------------------------------------------------------------------------------------


def _ray():
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(f"--ray / RAY_ADDRESS needs Ray, which is not installed: {RAY_EXTRA}") from e
    return ray


def connect_ray(address: str) -> None:
    """Connects this process to the Ray cluster at `address` ("local": a new one in this process; "auto": the one
    running on this machine; "HOST:PORT" or "ray://HOST:PORT"), unless it is connected already. Raises
    RayUnreachable naming the address when it does not answer within RAY_CONNECT_TIMEOUT_S."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address != "local":
        # ray.init retries a silent or wrong address for a minute or more and cannot be interrupted (nor run in a
        # thread: Ray must start in the main thread), so a child process tries first, killed at the deadline.
        deadline = time.monotonic() + RAY_CONNECT_TIMEOUT_S
        _probe(address)
        _try_in_child(address, deadline - time.monotonic())
    kwargs = {"include_dashboard": False} if address == "local" else {}
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, **kwargs)
    except Exception as e:
        raise RayUnreachable(f"Ray at {address}: {type(e).__name__}: {e}") from e


def _try_in_child(address: str, seconds: float) -> None:
    import subprocess

    code = "import sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); ray.shutdown()"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, address], capture_output=True, text=True, timeout=max(1.0, seconds)
        )
    except subprocess.TimeoutExpired as e:
        raise RayUnreachable(f"Ray at {address}: no answer within {RAY_CONNECT_TIMEOUT_S:.0f} s") from e
    if done.returncode != 0:
        lines = [x for x in done.stderr.strip().splitlines() if x.strip()]
        raise RayUnreachable(f"Ray at {address}: {lines[-1] if lines else f'exit code {done.returncode}'}")


def _probe(address: str) -> None:
    """A plain TCP connection to HOST:PORT first: refused or silent, the address is named at once."""
    import socket

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "local", "auto": nothing to probe
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=TCP_PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise RayUnreachable(f"Ray at {address}: cannot connect to {host}:{port} ({e.strerror or e})") from e


def _ray_task(fn, boxed_ref, task):
    """On a Ray worker: `shared` fetched once per worker process (the list keeps Ray from resolving the reference
    for every task), then the task."""
    ref = boxed_ref[0]
    if _SHARED.get("ref") != ref.hex():
        import ray

        _SHARED.update(ref=ref.hex(), value=ray.get(ref), fetches=_SHARED.get("fetches", 0) + 1)
    return fn(_SHARED["value"], task)


def _run_ray(tasks, fn, shared, address, progress, describe) -> list:
    ray = _ray()
    connect_ray(address)
    ref = ray.put(shared)
    # max_retries=1: Ray runs a task again once when its worker dies; an exception is not retried (it would repeat).
    remote = ray.remote(max_retries=1, retry_exceptions=False)(_ray_task)
    futures = {remote.remote(fn, [ref], t): i for i, t in enumerate(tasks)}
    results: dict[int, Any] = {}
    pending = list(futures)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                i = futures[r]
                try:
                    results[i] = ray.get(r)
                except ray.exceptions.RayTaskError as e:
                    cause = e.cause if getattr(e, "cause", None) is not None else e
                    raise TaskFailed(describe(tasks[i]), f"{type(cause).__name__}: {cause}") from e
                except ray.exceptions.RayError as e:
                    raise TaskFailed(describe(tasks[i]), f"its Ray worker died twice ({type(e).__name__})") from e
                progress.step()
    except BaseException:
        for r in pending:
            ray.cancel(r, force=True)
        raise
    return [results[i] for i in range(len(tasks))]
