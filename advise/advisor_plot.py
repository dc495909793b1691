"""PNG of one pool's advice: monthly cost vs floor size, one curve per payment, the recommendation marked, the
floor sizes that meet the service target shaded."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import StrMethodFormatter  # noqa: E402

from pricing.cost_model.billing import HOURS_PER_MONTH  # noqa: E402


def plot(doc: dict, path: str) -> None:
    fig = figure(doc)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(doc: dict):
    """The figure of `plot`, returned open (the tests read its legend and axis)."""
    points = doc["points"]
    sizes = [p["floor_nodes"] for p in points]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    # Shade the floor sizes that meet the target: each such size up to halfway to its swept neighbours.
    for i, p in enumerate(points):
        if p["meets_target"]:
            lo = (sizes[i - 1] + sizes[i]) / 2 if i > 0 else sizes[i] - 0.5
            hi = (sizes[i] + sizes[i + 1]) / 2 if i + 1 < len(sizes) else sizes[i] + 0.5
            ax.axvspan(lo, hi, color="#55a868", alpha=0.12, linewidth=0)
    for payment in doc["rates"]:
        ax.plot(sizes, [p["monthly_usd"][payment] for p in points], marker="o", markersize=3, label=payment)
    ax.plot(sizes, [p["elastic_monthly_usd"] for p in points], color="grey", linestyle=":", label="elastic part alone")
    rec = doc.get("recommendation")
    if rec:
        ax.scatter(
            [rec["floor_nodes"]],
            [rec["monthly_usd"]],
            s=160,
            facecolors="none",
            edgecolors="red",
            linewidths=2,
            zorder=5,
            label=(
                f"recommended: {rec['floor_nodes']} nodes, {rec['payment']}"
                if rec["floor_nodes"]
                else "recommended: no floor"
            ),
        )
    # Shading alone cannot say "all" or "none": the legend does.
    meeting = [p["meets_target"] for p in points]
    shade = (
        "every floor size shown meets the service target"
        if all(meeting)
        else "no floor size shown meets the service target"
        if not any(meeting)
        else "meets the service target"
    )
    ax.plot([], [], color="#55a868", alpha=0.3 if any(meeting) else 0.0, linewidth=8, label=shade)
    ax.yaxis.set_major_formatter(StrMethodFormatter("${x:,.0f}"))
    ax.set_xlabel(f"floor size (nodes of {doc['floor_instance_type']}, {doc['gpus_per_node']} GPUs each)")
    ax.set_ylabel(f"expected cost per {HOURS_PER_MONTH}-hour month")
    ax.set_title(f"pool {doc['pool']}: cost vs floor size on {doc['demand']}")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
