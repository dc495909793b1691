"""PNG of a comparison: demand vs capacity by tier over time (our policy), and cumulative cost per policy."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt  # noqa: E402


def plot(doc: dict, path: str, focus: str = "gpuloan") -> None:
    series = doc["_series"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    rows = series.get(focus) or next(iter(series.values()))
    days = [r[0] / 1440 for r in rows]
    top.stackplot(days, [r[2] for r in rows], [r[4] for r in rows], [r[3] for r in rows],
                  labels=["guaranteed GPUs", "elastic on-demand GPUs", "elastic spot GPUs"],
                  colors=["#4c72b0", "#dd8452", "#55a868"], alpha=0.8)
    top.plot(days, [r[1] for r in rows], color="black", linewidth=0.7, label="demand (running + pending GPUs)")
    top.set_ylabel("GPUs")
    top.set_title(f"{doc['trace']} on pool {doc['pool']['name']}: capacity by tier under {focus}")
    top.legend(loc="upper left", fontsize=8)
    for name, rows in series.items():
        bottom.plot([r[0] / 1440 for r in rows], [r[5] for r in rows], label=name)
    bottom.axhline(doc["oracle_cost_usd"], color="grey", linestyle="--", label="oracle (total)")
    bottom.set_yscale("log")
    bottom.set_ylabel("cumulative cost, USD (log)")
    bottom.set_xlabel("day")
    bottom.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
