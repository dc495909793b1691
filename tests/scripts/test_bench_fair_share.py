"""`scripts/bench_fair_share.py` (the end of `make bench-org`): a few days of one rotation, fair sharing off, on
with equal weights and on with the largest borrower weighing 3; per team borrowed GPU-hours and the spread."""

from __future__ import annotations

import importlib.util
import sys

from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces


@requires_shared_traces
@requires_shared_prices
def test_bench_fair_share_prints_each_team_and_the_spread_with_and_without(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location("bench_fair_share", REPO / "scripts" / "bench_fair_share.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_fair_share", bench)
    spec.loader.exec_module(bench)
    assert bench.main(["--traces", str(SHARED_TRACES / "itp"), "--days", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| cluster")]
    assert len(rows) == 10  # one per team (pool)
    spread = [
        line.split(" | ")[0] for line in out.splitlines() if line.startswith("| off") or line.startswith("| on, ")
    ]
    assert spread[0] == "| off" and spread[1] == "| on, equal" and "x3" in spread[2]
    # the organization's cost of each run, last column of the spread table
    costs = [line.rstrip(" |").rsplit("| ", 1)[1] for line in out.splitlines() if line.startswith(("| off", "| on, "))]
    assert len(costs) == 3 and all(c.startswith("$") and float(c[1:].replace(",", "")) > 0 for c in costs)
    assert all(len(line) <= 80 for line in out.splitlines())
