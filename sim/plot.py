"""Figures of `gpuloan simulate --plot`.

- `plot`: a comparison. Top: demand vs our policy's capacity by tier over time, with the baselines' total capacity
  drawn over it (how much more or less they hold). Bottom: cumulative cost per policy on a linear axis (a log axis
  hid the differences that matter: the policies end within tens of percent of each other), with the budget.
- `plot_frontier`: a floor sweep. Cost vs p95 wait, one point per floor size, the Pareto frontier, and the baselines
  as reference points when the sweep document carries them.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt  # noqa: E402

from sim.engine import MINUTES_PER_MONTH  # noqa: E402

# Baselines whose capacity is drawn over ours: karpenter is the one users compare with; the others add the
# operator's script. static-peak and floor-only are flat lines already implied by the pool (peak, floor).
OVERLAID_BASELINES = ("karpenter", "threshold-script")
_BASELINE_STYLE = {"karpenter": ("#c44e52", "--"), "threshold-script": ("#8172b2", ":")}


def _capacity(row) -> int:
    """Total GPUs held in a sample (guaranteed + spot + on-demand)."""
    return row[2] + row[3] + row[4]


def plot(doc: dict, path: str, focus: str = "gpuloan") -> None:
    _save(comparison_figure(doc, focus), path)


def _save(fig, path: str) -> None:
    fig.savefig(path, dpi=110)  # the format follows the suffix (png, svg)
    plt.close(fig)


def comparison_figure(doc: dict, focus: str = "gpuloan"):
    """The figure of `plot`, returned open (the tests inspect its artists)."""
    series = doc["_series"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    if focus not in series:
        focus = next(iter(series))
    rows = series[focus]
    days = [r[0] / 1440 for r in rows]
    top.stackplot(
        days,
        [r[2] for r in rows],
        [r[4] for r in rows],
        [r[3] for r in rows],
        labels=[f"{focus}: guaranteed GPUs", f"{focus}: elastic on-demand GPUs", f"{focus}: elastic spot GPUs"],
        colors=["#4c72b0", "#dd8452", "#55a868"],
        alpha=0.75,
    )
    top.plot(days, [r[1] for r in rows], color="black", linewidth=0.8, label="demand (running + pending GPUs)")
    for name in OVERLAID_BASELINES:
        if name in series and name != focus:
            color, style = _BASELINE_STYLE[name]
            b = series[name]
            top.step(
                [r[0] / 1440 for r in b],
                [_capacity(r) for r in b],
                where="post",
                color=color,
                linestyle=style,
                linewidth=1.2,
                label=f"{name}: total capacity (GPUs)",
            )
    # Minutes in which the budget cap held a wanted scale-up of the policy in focus: shaded on both panels, so a
    # wait the cap caused is not read as the policy's (the table and the verdict count them too).
    held = next((r.get("budget_cap_held") for r in doc.get("policies", []) if r["name"] == focus), None) or []
    for i, (a, b) in enumerate(held):
        for ax in (top, bottom):
            ax.axvspan(
                a / 1440,
                b / 1440,
                color="#c44e52",
                alpha=0.18,
                linewidth=0,
                label=(f"{focus}: budget cap held scale-ups ({sum(y - x for x, y in held):,} min)")
                if i == 0 and ax is top
                else None,
            )
    top.set_ylabel("GPUs")
    top.set_title(
        f"{doc['trace']} on pool {doc['pool']['name']}: capacity by tier under {focus}, baselines' capacity overlaid"
    )
    top.legend(loc="upper left", fontsize=8)

    budget = doc["pool"].get("budget_monthly_usd")
    end = max((r[0] for b in series.values() for r in b), default=0)
    budget_end = budget * end / MINUTES_PER_MONTH if budget else 0.0
    # A linear axis scaled to the policy in focus, the oracle and the budget: static-peak (the whole peak all the
    # time) costs many times more and would flatten every other line to the floor; lines that leave the axis say
    # where they end in the legend instead.
    top_usd = 2.5 * max([series[focus][-1][5] if series[focus] else 0.0, doc["oracle_cost_usd"], budget_end]) or 1.0
    # The legend quotes each policy's total as the results table prints it (same figure, whole dollars); the
    # samples are every few minutes, so their last one can fall short of the total.
    totals = {r["name"]: r["total_cost_usd"] for r in doc.get("policies", [])}
    for name, b in series.items():
        final = totals.get(name, b[-1][5] if b else 0.0)
        label = f"{name}: ${final:,.0f}" + ("" if final <= top_usd else " (off the axis)")
        # The policy in focus is a wide solid line under the others, which are thin and dashed: where a baseline
        # spends exactly as ours (karpenter often does), both stay visible instead of one hiding the other.
        bottom.plot(
            [r[0] / 1440 for r in b],
            [r[5] for r in b],
            label=label,
            linewidth=3.0 if name == focus else 1.2,
            linestyle="-" if name == focus else "--",
            zorder=2 if name == focus else 3,
        )
    bottom.axhline(doc["oracle_cost_usd"], color="grey", linestyle="--", label="oracle (total)")
    if budget:
        # The budget is monthly; over the run it allows budget x elapsed months (pro rata, as the simulator counts
        # budget_months_exceeded), so it is a straight line through the origin on the cumulative cost.
        bottom.plot(
            [0, end / 1440],
            [0, budget * end / MINUTES_PER_MONTH],
            color="#937860",
            linestyle="-.",
            linewidth=1.5,
            label=f"budget ${budget:,.0f}/month (cumulative, pro rata)",
        )
    else:
        bottom.text(
            0.99,
            0.97,
            "no budget on this pool (--auto-size drops the stack's)",
            transform=bottom.transAxes,
            ha="right",
            va="top",
            fontsize=8,
            color="#937860",
        )
    bottom.set_yscale("linear")
    bottom.set_ylim(0, top_usd)
    bottom.set_ylabel("cumulative cost, USD")
    bottom.set_xlabel("day (from the start of the window)")
    bottom.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def service_key(rows: list[dict]) -> tuple[str, str, str]:
    """The service metric of a sweep (key, axis label, short name): p95 wait on job traces, unmet GPU-hours on
    series (no jobs, no waits)."""
    if rows and all(r.get("p95_wait_minutes") is not None for r in rows):
        return "p95_wait_minutes", "p95 wait, minutes", "p95 wait min"
    return "unmet_gpu_hours", "unmet GPU-hours", "unmet GPU-h"


def pareto(rows: list[dict], key: str) -> list[dict]:
    """The rows no other row beats on both cost and `key` (lower is better on both), by increasing `key`.

    Ties: of rows with the same service, only the cheapest stays."""
    out: list[dict] = []
    for r in sorted(rows, key=lambda r: (r[key], r["total_cost_usd"])):
        if not out or r["total_cost_usd"] < out[-1]["total_cost_usd"]:
            out.append(r)
    return out


def plot_frontier(doc: dict, path: str) -> None:
    _save(frontier_figure(doc), path)


def frontier_figure(doc: dict):
    """The figure of `plot_frontier`, returned open. `doc`: {"trace", "pool", "sweep_floor": [rows of floor_nodes, total_cost_usd, p95_wait_minutes,
    unmet_gpu_hours], optional "baselines": [policy metrics with name, floor_nodes and the same keys]}."""
    rows = doc["sweep_floor"]
    baselines = doc.get("baselines") or []
    key, label, short = service_key(rows + baselines)
    fig, ax = plt.subplots(figsize=(9, 6.5))
    ax.scatter(
        [r[key] for r in rows],
        [r["total_cost_usd"] for r in rows],
        color="#4c72b0",
        zorder=3,
        label="gpuloan, one point per floor size",
    )
    for r in rows:
        ax.annotate(
            f"floor {r['floor_nodes']}",
            (r[key], r["total_cost_usd"]),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=8,
        )
    front = pareto(rows, key)
    ax.plot(
        [r[key] for r in front],
        [r["total_cost_usd"] for r in front],
        color="#4c72b0",
        linewidth=1.5,
        zorder=2,
        label="Pareto frontier (no floor is both cheaper and faster)",
    )
    # The axis is scaled to the sweep (what the user chooses from): a baseline far slower (floor-only waits days)
    # would squeeze every floor into one column; it is listed in the legend with its figures instead.
    widest = max([r[key] for r in rows] + [1.0])
    right = 1.15 * max([widest] + [b[key] for b in baselines if b[key] <= 3 * widest])
    markers = "s^DvP*X"
    for i, b in enumerate(baselines):
        name = f"{b['name']} (floor {b['floor_nodes']})"
        if b[key] > right:
            name += f": {b[key]:,.1f} {short}, ${b['total_cost_usd']:,.0f}, off the axis"
        ax.scatter(
            [min(b[key], right)],
            [b["total_cost_usd"]],
            marker=markers[i % len(markers)],
            s=60,
            color="#c44e52",
            zorder=4,
            label=name,
            clip_on=True,
            alpha=1.0 if b[key] <= right else 0.0,
        )
        if b[key] <= right:
            ax.annotate(
                b["name"],
                (b[key], b["total_cost_usd"]),
                textcoords="offset points",
                xytext=(5, -10),
                fontsize=8,
                color="#c44e52",
            )
    ax.set_xlim(-0.03 * right, right)
    ax.set_xscale("linear")
    ax.set_yscale("linear")
    ax.set_xlabel(label)
    ax.set_ylabel("total cost over the window, USD")
    ax.set_title(f"floor sweep: {doc['trace']} on pool {doc['pool']}: cost vs {short}")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
