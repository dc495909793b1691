"""scripts/advise_environment.py (issue 36 item 7): the advisor's 16-pool speed case is a demand folder of minute
series a user could give `gpuloan advise --demand DIR`, with a stack file naming the same pools."""

from __future__ import annotations

import yaml
from conftest import SHARED_TRACES, requires_shared_prices, requires_shared_traces, resolved_prices

from pricing import checks
from scripts import advise_environment
from sim import demand as simdemand


@requires_shared_traces
@requires_shared_prices
def test_the_folder_holds_16_minute_series_of_the_days_asked_and_a_stack_of_the_same_pools(tmp_path):
    assert advise_environment.main([str(tmp_path), "--traces", str(SHARED_TRACES / "itp"), "--days", "2"]) == 0
    files = sorted(tmp_path.glob("*.csv"))
    assert len(files) == 16
    for f in files:
        lines = f.read_text().splitlines()
        assert lines[0] == "minute,gpus_demanded" and len(lines) == 1 + 2 * 1440
    doc = yaml.safe_load((tmp_path / advise_environment.STACK_FILE).read_text())
    cfg = checks.from_stack_yaml(doc, "advise16", prices=resolved_prices())
    names = [p.name for p in cfg.pools]
    assert sorted(names) == sorted(f.stem for f in files)
    demand = simdemand.read_demand_dir(tmp_path, names)  # what `advise --demand` reads: every pool, series
    assert set(demand) == set(names) and all(t.kind == "series" for t in demand.values())
