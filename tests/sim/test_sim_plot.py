"""The figures of `simulate --plot`: the comparison (baselines' capacity overlaid, linear cost axis, the budget) and
the floor sweep's cost vs p95 wait frontier; files of the requested format; end to end on ITP windows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import matplotlib.pyplot as plt
import pytest

from conftest import REPO, SHARED_TRACES, requires_shared_prices, requires_shared_traces

from sim import plot as simplot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _series(capacity: int, cost_per_minute: float, minutes: int = 600) -> list[tuple]:
    # (minute, demand, guaranteed, spot, on_demand, cumulative cost): the engine's sample layout
    return [(m, 8 if 100 <= m < 400 else 1, 1, capacity - 1, 0, cost_per_minute * m) for m in range(0, minutes, 10)]


def _doc(budget=None) -> dict:
    return {
        "trace": "t.csv",
        "pool": {"name": "training", "budget_monthly_usd": budget},
        "oracle_cost_usd": 50.0,
        "_series": {
            "gpuloan": _series(4, 0.1),
            "gpuloan-defaults": _series(4, 0.12),
            "static-peak": _series(8, 0.3),
            "floor-only": _series(1, 0.02),
            "karpenter": _series(6, 0.15),
            "threshold-script": _series(5, 0.14),
        },
    }


def _labels(ax) -> list[str]:
    return [h.get_label() for h in ax.get_legend_handles_labels()[0]]


def test_comparison_overlays_baselines_capacity_with_a_linear_cost_axis():
    fig = simplot.comparison_figure(_doc())
    top, bottom = fig.axes
    labels = _labels(top)
    assert "karpenter: total capacity (GPUs)" in labels and "threshold-script: total capacity (GPUs)" in labels
    karp = next(line for line in top.get_lines() if line.get_label().startswith("karpenter"))
    assert max(karp.get_ydata()) == 6  # guaranteed + spot + on-demand of karpenter's samples, not ours (4)
    assert bottom.get_yscale() == "linear" and bottom.get_ylim()[0] == 0
    # one cumulative-cost line per policy; the axis is scaled to ours and the oracle (2.5 x $59), so static-peak
    # ($177) leaves it and says where it ends
    cost_labels = [line.get_label() for line in bottom.get_lines()]
    assert len([label for label in cost_labels if label.split(":")[0] in _doc()["_series"]]) == 6
    assert "static-peak: $177 (off the axis)" in cost_labels and "karpenter: $88" in cost_labels
    assert bottom.get_ylim()[1] == pytest.approx(2.5 * 59.0)
    assert any("no budget" in t.get_text() for t in bottom.texts)  # says why no budget line is drawn
    plt.close(fig)


def test_comparison_draws_the_budget_pro_rata_on_the_cumulative_cost():
    fig = simplot.comparison_figure(_doc(budget=43_800.0))  # $60/h over a 730-hour month
    bottom = fig.axes[1]
    budget = next(line for line in bottom.get_lines() if line.get_label().startswith("budget"))
    xs, ys = budget.get_xdata(), budget.get_ydata()
    assert ys[0] == 0 and ys[-1] == pytest.approx(60.0 * 590 / 60)  # 590 minutes at $60/h
    assert xs[-1] == pytest.approx(590 / 1440)
    assert not bottom.texts
    plt.close(fig)


def test_pareto_keeps_only_the_rows_nothing_beats_on_both():
    rows = [
        {"floor_nodes": 0, "total_cost_usd": 100, "p95_wait_minutes": 30},
        {"floor_nodes": 1, "total_cost_usd": 120, "p95_wait_minutes": 10},
        {"floor_nodes": 2, "total_cost_usd": 150, "p95_wait_minutes": 10},  # as fast as floor 1, dearer
        {"floor_nodes": 3, "total_cost_usd": 130, "p95_wait_minutes": 40},  # slower and dearer than floor 0
        {"floor_nodes": 4, "total_cost_usd": 200, "p95_wait_minutes": 0},
    ]
    assert [r["floor_nodes"] for r in simplot.pareto(rows, "p95_wait_minutes")] == [4, 1, 0]


def _sweep_doc(baselines=True) -> dict:
    rows = [
        {
            "floor_nodes": f,
            "floor_gpus": 8 * f,
            "total_cost_usd": 100 + 40 * f,
            "p95_wait_minutes": w,
            "unmet_gpu_hours": 0.0,
            "interruptions": 0,
            "cost_over_oracle": 1.0,
        }
        for f, w in ((0, 30.0), (1, 12.0), (2, 12.0), (3, 0.0))
    ]
    doc = {"trace": "t.csv", "pool": "training", "sweep_floor": rows}
    if baselines:
        doc["baselines"] = [
            {
                "name": "karpenter",
                "floor_nodes": 0,
                "total_cost_usd": 150,
                "p95_wait_minutes": 8.0,
                "unmet_gpu_hours": 0.0,
            },
            {
                "name": "static-peak",
                "floor_nodes": 0,
                "total_cost_usd": 400,
                "p95_wait_minutes": 0.0,
                "unmet_gpu_hours": 0.0,
            },
        ]
    return doc


def test_frontier_has_one_labelled_point_per_floor_the_frontier_and_the_baselines():
    fig = simplot.frontier_figure(_sweep_doc())
    (ax,) = fig.axes
    texts = [t.get_text() for t in ax.texts]
    assert [t for t in texts if t.startswith("floor ")] == ["floor 0", "floor 1", "floor 2", "floor 3"]
    assert "karpenter" in texts and "static-peak" in texts
    (front,) = [line for line in ax.get_lines() if line.get_label().startswith("Pareto")]
    assert list(front.get_xdata()) == [0.0, 12.0, 30.0]  # floor 2 (as fast as floor 1, dearer) is off the line
    assert list(front.get_ydata()) == [220, 140, 100]
    assert ax.get_xlabel() == "p95 wait, minutes" and ax.get_xscale() == ax.get_yscale() == "linear"
    assert len(ax.collections) == 3  # the floors' scatter and one per baseline
    plt.close(fig)


def test_frontier_axis_follows_the_sweep_and_names_a_far_baseline_in_the_legend():
    doc = _sweep_doc()
    doc["baselines"].append(
        {
            "name": "floor-only",
            "floor_nodes": 0,
            "total_cost_usd": 0.0,
            "p95_wait_minutes": 11_329.3,
            "unmet_gpu_hours": 0.0,
        }
    )
    fig = simplot.frontier_figure(doc)
    (ax,) = fig.axes
    assert ax.get_xlim()[1] < 100  # the floors (0..30 min) stay readable
    labels = _labels(ax)
    assert "floor-only (floor 0): 11,329.3 p95 wait min, $0, off the axis" in labels
    assert "karpenter (floor 0)" in labels  # within the axis: plotted and named as such
    plt.close(fig)


def test_frontier_without_baselines_and_on_a_series_uses_unmet_gpu_hours():
    doc = _sweep_doc(baselines=False)
    for r in doc["sweep_floor"]:
        r["p95_wait_minutes"] = None
    fig = simplot.frontier_figure(doc)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "unmet GPU-hours" and len(ax.collections) == 1
    plt.close(fig)


@pytest.mark.parametrize("suffix", ["png", "svg", "html"])
def test_both_figures_write_the_requested_format(tmp_path, suffix):
    from gpuloan import plot_args

    for name, fn, doc in (("cmp", simplot.plot, _doc()), ("sweep", simplot.plot_frontier, _sweep_doc())):
        out = plot_args.write(fn, doc, str(tmp_path / f"{name}.{suffix}"))
        data = out.read_bytes()
        if suffix == "png":
            assert data[:8] == PNG_MAGIC
        elif suffix == "svg":
            assert b"<svg" in data[:1000]
        else:
            assert data.startswith(b"<!doctype html>") and b"<svg" in data and b"<script" not in data


# --- end to end on ITP windows ---------------------------------------------------------------------------------


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120"}
    env.pop("PULUMI_STACK", None)
    return subprocess.run(
        [sys.executable, "-m", "gpuloan", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


@requires_shared_prices
@requires_shared_traces
def test_sweep_floor_plot_end_to_end_on_an_itp_window(tmp_path):
    out = tmp_path / "sweep.svg"
    result = _run(
        [
            "simulate",
            "--trace",
            str(SHARED_TRACES / "itp" / "cluster10.csv"),
            "-s",
            "prod",
            "--pool",
            "training",
            "--auto-size",
            "--days",
            "51:52",
            "--sweep-floor",
            "--plot",
            str(out),
        ]
    )
    assert result.returncode == 0, result.stderr
    assert "floor sweep" in result.stdout and f"wrote the plot to {out}" in result.stderr
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "Pareto frontier" in svg and "floor 0" in svg
    assert "karpenter" in svg  # the baselines as reference points


@requires_shared_prices
@requires_shared_traces
def test_sweep_floor_json_plot_keeps_stdout_json(tmp_path):
    out = tmp_path / "sweep.png"
    result = _run(
        [
            "simulate",
            "--trace",
            str(SHARED_TRACES / "itp" / "cluster10.csv"),
            "-s",
            "prod",
            "--pool",
            "training",
            "--auto-size",
            "--days",
            "51:52",
            "--sweep-floor",
            "--json",
            "--plot",
            str(out),
        ]
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["sweep_floor"] and "baselines" not in doc  # the JSON stays the sweep's
    assert out.read_bytes()[:8] == PNG_MAGIC


@requires_shared_traces
def test_documented_plot_windows_are_busy():
    """The docs' --plot examples must draw something: jobs submitted on most days of the window, not a spike or two
    (cluster10 days 20:30, the old example, held two jobs)."""
    import re
    import shlex

    from sim import traces

    text = (REPO / "docs" / "simulator.md").read_text()
    commands = [c for c in re.findall(r"^\.venv/bin/gpuloan simulate .*$", text, flags=re.M) if "--plot" in c]
    assert len(commands) >= 2  # the comparison and the sweep
    for cmd in commands:
        argv = shlex.split(cmd)
        days = traces.parse_days(argv[argv.index("--days") + 1])
        trace = traces.read_trace(str(REPO / argv[argv.index("--trace") + 1])).window(*days)
        active = {int(j.submit_s // 86400) for j in trace.jobs}
        assert len(trace.jobs) >= 50 and len(active) >= (days[1] - days[0] + 1) // 2, (cmd, len(trace.jobs), active)


def test_equal_costs_keep_our_line_visible_and_the_legend_quotes_the_tables_total():
    doc = _doc()
    doc["_series"]["karpenter"] = list(doc["_series"]["gpuloan"])  # karpenter spends exactly as gpuloan
    # the results table's totals (the samples stop short of the end: $59 sampled, $59.49 in the table)
    doc["policies"] = [
        {"name": n, "total_cost_usd": 59.49 if n in ("gpuloan", "karpenter") else 100.0} for n in doc["_series"]
    ]
    fig = simplot.comparison_figure(doc)
    lines = {line.get_label().split(":")[0]: line for line in fig.axes[1].get_lines()}
    ours, karp = lines["gpuloan"], lines["karpenter"]
    assert list(ours.get_ydata()) == list(karp.get_ydata())
    # the baseline drawn over ours is thinner and dashed: ours shows around and between its dashes
    assert karp.get_zorder() > ours.get_zorder() and karp.get_linewidth() < ours.get_linewidth()
    assert karp.get_linestyle() == "--" and ours.get_linestyle() == "-"
    assert ours.get_label() == f"gpuloan: ${59.49:,.0f}" == "gpuloan: $59"  # as the table prints it (",.0f")
    plt.close(fig)


def _advice(meets: list[bool]) -> dict:
    points = [
        {
            "floor_nodes": n,
            "monthly_usd": {"on_demand": 10_000.0 + 5_000 * n},
            "elastic_monthly_usd": 1_000.0,
            "meets_target": m,
        }
        for n, m in enumerate(meets)
    ]
    return {
        "points": points,
        "rates": {"on_demand": {}},
        "recommendation": None,
        "floor_instance_type": "p4d.24xlarge",
        "gpus_per_node": 8,
        "pool": "training",
        "demand": "t.csv",
    }


@pytest.mark.parametrize(
    "meets, says",
    [
        ([True, True, True], "every floor size shown meets the service target"),
        ([False, False], "no floor size shown meets the service target"),
        ([False, True], "meets the service target"),
    ],
)
def test_advice_plot_says_what_the_shading_means_and_labels_dollars(meets, says):
    from advise import advisor_plot

    fig = advisor_plot.figure(_advice(meets))
    ax = fig.axes[0]
    assert says in _labels(ax)
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert ticks and all(t.startswith("$") for t in ticks) and any("," in t for t in ticks)  # $15,000
    plt.close(fig)
