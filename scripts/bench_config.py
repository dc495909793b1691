"""Prints how long config validation takes for 100 pools and how long `gpuloan preview dev` takes end to end.

Targets (issue: foundation): validation of 100 pools < 1 s; `gpuloan preview dev` < 10 s on a 2-core machine.
Run: make bench-config
"""

from __future__ import annotations

import copy
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pricing import checks  # noqa: E402
from pricing.sources import catalog  # noqa: E402


TEAMS = 10


def hundred_pools() -> dict:
    data = {
        k.split(":", 1)[1]: v
        for k, v in yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())["config"].items()
        if k.startswith("gpuloan:")
    }
    pool = data["pools"][0]
    data["pools"] = []
    for i in range(100):
        p = copy.deepcopy(pool)
        p["name"], p["team"] = f"pool-{i:03d}", f"team-{i % TEAMS}"
        data["pools"].append(p)
    data["budget"]["monthly_usd"] = 1_000_000
    # Kueue lists at most 64 flavors per queue (config/scheduling.py): with every floor lendable, each of the 100
    # queues would list 101. Half the teams keep their floors (lending_limit_pct 0), so each queue lists its own
    # flavors plus the 50 lendable floors: still a large cohort for the rules to check, and a config that is valid.
    kueue = data.setdefault("scheduling", {}).setdefault("kueue", {})
    kueue["teams"] = {f"team-{t}": {"lending_limit_pct": 0} for t in range(TEAMS // 2, TEAMS)}
    return data


def main() -> None:
    data = hundred_pools()
    prices = catalog.Prices.resolve()  # read once, as the CLI does at its entry
    checks.parse(data, prices=prices)  # warm the price table cache once, as a long-lived process would
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        checks.parse(data, prices=prices)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r}); "
            "import yaml; from pricing import checks; from pricing.sources import catalog; "
            "from scripts.bench_config import hundred_pools; "
            "checks.parse(hundred_pools(), prices=catalog.Prices.resolve())",
        ],
        cwd=REPO,
        check=True,
    )
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpuloan", "preview", "dev"], cwd=REPO, check=True, capture_output=True)
    preview_s = time.perf_counter() - t0
    print(
        f"validate 100 pools: median {statistics.median(times) * 1000:.1f} ms warm, {cold_s:.2f} s in a fresh "
        f"process (incl. imports) [target < 1 s] | gpuloan preview dev: {preview_s:.2f} s wall [target < 10 s]"
    )


if __name__ == "__main__":
    main()
