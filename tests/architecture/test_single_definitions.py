"""Each shared rule and constant has one definition (issue 34): copies drift apart, and these already had.

The month's hours, the nearest-rank percentile, a pool's production share, the enums the policy's settings
share with the config and the bound of a scale-up (group max, step, budget cap) are defined once and imported
everywhere else.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from conftest import REPO


def _definitions(pattern: str) -> list[str]:
    """`path:line` of every line of tracked Python that matches `pattern` (a definition, not a use)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    found = []
    for name in listed.stdout.split():
        for number, line in enumerate((REPO / name).read_text().splitlines(), 1):
            if re.match(pattern, line):
                found.append(f"{name}:{number}")
    return found


@pytest.mark.parametrize(
    "pattern, home",
    [
        (r"HOURS_PER_MONTH\s*=\s*\d", "pricing/cost_model/billing.py"),
        (r"def percentile\(", "sim/metrics.py"),
        (r"def production_share_pct\(", "config/scheduling.py"),
        (r"class (Workload|Enforcement|Tier|Capacity|Reason)\(", "policy/terms.py"),
        # The floor-under-budget rule the config validation and the CrossGuard pack both apply, and the floors' bill.
        (r"def floor_over_budget\(", "pricing/checks.py"),
        (r"def floor_bill\(", "pricing/cost_model/floor_bill.py"),
        # The one bound of every scale-up (policy/decide/bound.py): the group's effective max (the node group's own
        # max read against 0) and the budget cap (the headroom per node's price) are computed there only.
        (r"def bound\(", "policy/decide/bound.py"),
        (r"def group_max\(", "policy/decide/bound.py"),
        (r".*\.max_nodes\s*(>|<=)\s*0", "policy/decide/bound.py"),
        (r".*headroom_usd_per_hour\s*/", "policy/decide/bound.py"),
        # Kueue's candidate order (most recently admitted first: sim/kueue.py `candidate`, for a job's reclaim, a
        # demand series' and fair sharing's) and its classic victim search (`classic_victims`, both reclaims).
        (r".*-\w+\.admitted_at\[", "sim/kueue.py"),
        (r"def classic_victims\(", "sim/kueue.py"),
    ],
)
def test_one_definition(pattern, home):
    found = _definitions(pattern)
    assert found and all(f.startswith(home + ":") for f in found), found


def test_the_config_validates_against_the_policys_enums_and_the_settings_stay_plain_strings():
    from config import config
    from policy import terms

    assert config.Workload is terms.Workload and config.Enforcement is terms.Enforcement and config.Tier is terms.Tier
    assert terms.Workload.service == "service" and json.dumps(terms.Enforcement.cap_elastic) == '"cap_elastic"'
    # what the Lambda's log lines, metric dimensions and settings JSON carry: the string, never "Reason.AT_MAX"
    assert f"{terms.Workload.batch}" == "batch" and str(terms.Tier.production) == "production"
    assert f"{terms.Reason.AT_MAX}" == "AT_MAX" and "%s" % terms.Capacity.on_demand == "on_demand"


def test_the_percentile_is_nearest_rank_and_refuses_a_rank_outside_0_to_100():
    from sim.metrics import percentile

    assert percentile([10, 20, 30, 40], 50) == 20 and percentile([10, 20, 30, 40], 51) == 30
    assert percentile([10, 20, 30, 40], 100) == 40 and percentile([], 95) == 0.0
    assert percentile([10, 20], 0) == 0.0  # no rank: the advisor's "guarantee nothing"
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)


def test_the_advisor_reads_the_production_share_as_the_simulator_does():
    from types import SimpleNamespace

    from config.config import Tier
    from advise.advisor import AdviceError, production_share
    from config.scheduling import production_share_pct

    def pool(tier, pct):
        return SimpleNamespace(tier=tier, service_target=SimpleNamespace(production_share_pct=pct))

    cfg = SimpleNamespace(pool=lambda name: pools[name])
    pools = {
        "prod": pool(Tier.production, None),
        "exp": pool(Tier.experiment, None),
        "mixed": pool(Tier.experiment, 30),
    }
    for name, p in pools.items():
        assert production_share(cfg, name) == production_share_pct(p) / 100
    assert [production_share(cfg, n) for n in pools] == [1.0, 0.0, 0.3]
    assert production_share(cfg, "prod", override_pct=25) == 0.25
    with pytest.raises(AdviceError):
        production_share(cfg, "prod", override_pct=120)


def test_the_on_demand_groups_max_is_read_from_the_config():
    # "on_demand_max_nodes, else max_nodes" was spelled out in the Kueue plan, the policy settings, the cost model,
    # the node groups and twice in sim/pool.py; config/config.py `Elastic.on_demand_group_max_nodes` is the one
    # reading now, everywhere.
    found = _definitions(r".*on_demand_max_nodes\)? or \w*\.?max_nodes")
    assert found and all(f.startswith("config/config.py:") for f in found), found
