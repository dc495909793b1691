"""`cost-report --plot FILE`: each pool's month as one stacked bar (its floor less what it lent, the floor hours it
borrowed, elastic, other), with a tick at what Cost Explorer billed it before the loan moved anything."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt  # noqa: E402

SEGMENTS = (("floor kept", "#4c72b0"), ("borrowed floor", "#dd8452"), ("elastic", "#55a868"), ("other", "#8172b3"))


def bars(doc: dict) -> list[tuple[str, dict[str, float], float]]:
    """(label, segment -> USD, the bill before the loan) per pool row of `cost-report --json`, the total left out."""
    loan = {p["pool"]: p for p in ((doc.get("loan") or {}).get("pools") or [])}
    out = []
    for r in doc["rows"]:
        if r["pool"] == "total":
            continue
        moved = loan.get(r["pool"], {})
        parts = {
            "floor kept": r["guaranteed_usd"] - (moved.get("lent_credit_usd") or 0.0),
            "borrowed floor": moved.get("borrowed_cost_usd") or 0.0,
            "elastic": r["elastic_usd"],
            "other": r["other_usd"],
        }
        out.append((f"{r['pool']} ({r['team']})" if r["team"] else r["pool"], parts, r["total_usd"]))
    return out


def figure(doc: dict):
    rows = bars(doc)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * len(rows)))
    labels = [label for label, _, _ in rows]
    for name, colour in SEGMENTS:
        left = [sum(parts[n] for n, _ in SEGMENTS[: [s for s, _ in SEGMENTS].index(name)]) for _, parts, _ in rows]
        ax.barh(labels, [parts[name] for _, parts, _ in rows], left=left, color=colour, label=name)
    ax.scatter(
        [before for _, _, before in rows],
        labels,
        marker="|",
        s=400,
        color="black",
        label="billed before the loan",
        zorder=5,
    )
    ax.invert_yaxis()
    ax.set_xlabel(f"USD, {doc['month']} (AmortizedCost; the loan at each floor's effective rate)")
    ax.set_title(f"gpuloan cost report: environment {doc['environment']}, who pays for which floor hours")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def plot(doc: dict, path: str) -> None:
    fig = figure(doc)
    fig.savefig(path, dpi=110)
    plt.close(fig)
