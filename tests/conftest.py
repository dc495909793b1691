"""Shared fixtures: the shipped stack configs and the offline (mocked) run of the Pulumi program."""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
# The command line as tests run it: this interpreter's gpuloan package, wherever the virtual environment lives (the
# `.venv/bin/gpuloan` of the docs is the same entry point, gpuloan/__main__.py).
GPULOAN = [sys.executable, "-m", "gpuloan"]
# The tests live in folders that mirror the packages (tests/policy/, tests/sim/, ...; issue 34). The shared helpers
# stay here (`from fake_kube import FakeKube`), and a test may import another test's helpers by its bare module name
# from any folder (`from test_policy_e2e import World`): every test module name is unique, so each folder goes on the
# path, as pytest puts a test's own folder there.
TEST_FOLDERS = sorted(d for d in (REPO / "tests").iterdir() if d.is_dir() and any(d.glob("test_*.py")))
for p in (str(REPO), str(REPO / "tests"), *map(str, TEST_FOLDERS)):
    if p not in sys.path:
        sys.path.insert(0, p)

# Public data the tests read by path (never copied into the repository; see docs/prices.md). GPULOAN_SHARED_DATA
# moves it (the Makefile exports it from SHARED_DATA): pointed at an empty folder it shows what a fresh clone without
# ../shared sees, which is how .ci/run proves every test that needs the data says so (GitHub's runners have none).
DEFAULT_SHARED_DATA = REPO.parent / "shared" / "data"
SHARED_DATA = Path(os.environ.get("GPULOAN_SHARED_DATA") or DEFAULT_SHARED_DATA).resolve()
SHARED_PRICES = SHARED_DATA / "prices"
SHARED_TRACES = SHARED_DATA / "traces"
SHARED_KUEUE_CRDS = SHARED_DATA / "kueue-crds-v0.19.2"  # the CRDs of the pinned Kueue chart (config/versions.py)
# Tests that need prices read the public table through the offline price file, as a user without AWS access
# would; without ../shared they read the same rates from the snapshot shipped in the package (generated from that
# table, tests/pricing/test_price_snapshot.py), as a fresh clone does: those carry `requires_prices`. A test that reads the
# table's files by path carries `requires_shared_prices` and skips without them. An explicit GPULOAN_PRICE_FILE
# from the caller is kept.
if SHARED_PRICES.is_dir():
    os.environ.setdefault("GPULOAN_PRICE_FILE", str(SHARED_PRICES))
# Never read the developer's own price cache: tests must not depend on what a past refresh left there.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="gpuloan-test-cache-")

from pricing.sources.pricebook import SNAPSHOT_FILE  # noqa: E402

requires_shared_prices = pytest.mark.skipif(not SHARED_PRICES.is_dir(), reason="../shared/data/prices is absent")
# Prices through the price book only: ../shared's table, else the package's snapshot (the same rates).
requires_prices = pytest.mark.skipif(
    not (SHARED_PRICES.is_dir() or SNAPSHOT_FILE.is_file()),
    reason="neither ../shared/data/prices nor the package's price snapshot",
)
requires_shared_traces = pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/data/traces is absent")
requires_shared_kueue_crds = pytest.mark.skipif(
    not SHARED_KUEUE_CRDS.is_dir(), reason="../shared/data/kueue-crds-v0.19.2 is absent"
)

from offline import runner as offline  # noqa: E402

# Hypothesis profiles: "ci" (the default, what `make test` and CI run) and "deep" (10,000 examples per property,
# `make test-deep`), chosen by GPULOAN_HYPOTHESIS_PROFILE. Property tests set no example count of their own, so
# the profile decides. The engine is pure and fast; generation dominates, so no per-example deadline.
from hypothesis import HealthCheck, settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile(
    "ci", max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
_hypothesis_settings.register_profile(
    "deep",
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
_hypothesis_settings.load_profile(os.environ.get("GPULOAN_HYPOTHESIS_PROFILE", "ci"))

STACKS = ("dev", "prod")


def stack_config(stack: str) -> dict:
    """The `config:` map of Pulumi.<stack>.yaml (a fresh copy each call, safe to modify)."""
    return copy.deepcopy(yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"])


def run_stack(stack: str, config: dict | None = None) -> offline.Recording:
    """Run __main__.py under the offline mocks with a stack's config (or a modified copy of it)."""
    return offline.run_program(stack, config if config is not None else stack_config(stack))


_CACHE: dict[str, offline.Recording] = {}


@pytest.fixture(scope="session")
def recorded():
    """recorded('prod') -> Recording of the shipped stack, computed once per test session."""

    def get(stack: str) -> offline.Recording:
        if stack not in _CACHE:
            _CACHE[stack] = run_stack(stack)
        return _CACHE[stack]

    return get


# The moto server fixtures (moto_server, aws_env) for the integration tests.
from aws_emulator import aws_env, moto_server  # noqa: E402,F401


def resolved_prices(price_file=None):
    """The prices a test passes down, read now as a command reads them at its entry: `price_file`, else the
    environment in force (the shared table through GPULOAN_PRICE_FILE above, else the package's snapshot; none
    under `no_prices`). Nothing in pricing/ remembers them: each test builds its own."""
    from pricing.sources.catalog import Prices

    return Prices.resolve(price_file)


@pytest.fixture
def prices():
    """The prices in force for this test (resolved_prices)."""
    return resolved_prices()


@pytest.fixture
def no_prices(monkeypatch, tmp_path):
    """A machine with no price at all: no file, no cache, no project price file, the shipped snapshot turned off."""
    from pricing.sources import pricebook

    monkeypatch.delenv(pricebook.ENV_PRICE_FILE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(pricebook.ENV_SNAPSHOT, "0")
    monkeypatch.setenv(pricebook.ENV_PROJECT_PRICES, "0")
    yield
