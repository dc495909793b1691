"""`scripts/bench_lend_ahead.py`: one rotation and seed of the organization's unit with lend_ahead off and on;
reclaims, their lost GPU-hours, cost, production waits and interruptions, each with its change."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces


@requires_shared_traces
@requires_shared_prices
def test_bench_lend_ahead_prints_off_on_and_the_change(capsys, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location("bench_lend_ahead", REPO / "scripts" / "bench_lend_ahead.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_lend_ahead", bench)
    spec.loader.exec_module(bench)
    args = ["--traces", str(SHARED_TRACES / "itp"), "--days", "2", "--cache", str(tmp_path)]
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out.splitlines() if line.startswith("| ")}

    def cells(figure: str) -> list[float]:
        return [float(x) for x in rows[figure].split(" | ")[1:3]]

    # the reclaims split by cause: an owner's reclaim or a borrower's fair-sharing eviction, adding up
    for total, parts in (
        ("reclaim preemptions", ("reclaims by owners", "reclaims by borrowers")),
        ("reclaim lost GPU-h", ("lost GPU-h to owners", "lost GPU-h to borrowers")),
    ):
        for side in (0, 1):
            assert sum(cells(p)[side] for p in parts) == pytest.approx(cells(total)[side], abs=0.11)
    # the off side is kept and read back: the same table again
    assert len(list(tmp_path.glob("off-r1-s1-*.json"))) == 1
    assert bench.main(args) == 0
    assert capsys.readouterr().out == out
    for figure in (
        "reclaim preemptions",
        "reclaim lost GPU-h",
        "cost USD",
        "prod p95 wait min",
        "prod p99 wait min",
        "prod interruptions",
    ):
        assert figure in rows, figure
    # two days: no rhythm on record yet (policy/rhythm.py MIN_DAYS), so on is off to the cent
    assert rows["cost USD"].split(" | ")[1] == rows["cost USD"].split(" | ")[2]
    assert all(len(line) <= 80 for line in out.splitlines())
